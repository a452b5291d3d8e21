/*
 * config.c - the server's config file and the models it serves.
 *
 * The file is YAML (read into a cJSON tree by yaml_json.c) with three
 * sections, each checked key by key (an unknown key is an error naming it):
 *   models:   [{name, path, config, chat_template, pii, parse_special}]  one engine each;
 *             `config` is an engine config for xllm_config_load
 *   cascades: [{name, pii, stages: [{model, template, max_tokens, accept_logprob}]}]
 *   pii:      {POLICY: {detectors: [...], custom: [{name, pattern}], restore, mask_output}}
 * Paths are relative to the config file. A file without `models` is taken
 * as an engine config for the model named by -m (or its own `model:`).
 */
#include "srv.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int name_ok(const char *n) {
    size_t l = strlen(n);
    if (l == 0 || l > 64) return 0;
    for (size_t i = 0; i < l; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._:-/", c)))
            return 0;
    }
    return 1;
}

static char *read_text(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, cap, "%s: %s", path, strerror(errno)); return NULL; }
    char *b = malloc((1 << 20) + 1);
    size_t n = b ? fread(b, 1, 1 << 20, f) : 0;
    fclose(f);
    if (!b) { snprintf(err, cap, "out of memory"); return NULL; }
    b[n] = 0;
    return b;
}

/* A model's load progress in the server's log: each stage's tenths, once,
 * when the load has taken 2 s (a quick load logs nothing). */
typedef struct load_log {
    const char *name;
    char stage[32];
    int tenth;
    double t0;
} load_log;

static void log_progress(void *user, const char *stage, double f) {
    load_log *l = user;
    if (srv_now() - l->t0 < 2.0) return;
    int tenth = (int)(f * 10.0);
    if (!strcmp(l->stage, stage) && tenth <= l->tenth) return;
    snprintf(l->stage, sizeof l->stage, "%s", stage);
    l->tenth = tenth;
    srv_log("model %s: %s %d%%", l->name, stage, tenth * 10);
}

srv_model *model_open(const char *name, const char *path, const char *engine_config, const char *chat_template,
                      const srv_options *o, int response_cache_off, char *err, size_t cap) {
    srv_model *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, cap, "out of memory"); return NULL; }
    xllm_engine_options eo = xllm_engine_options_default();
    xllm_model_options mo = xllm_model_options_default();
    xllm_error xe;
    const char *cfg_model = NULL;
    if (engine_config &&
        xllm_config_load(engine_config, &eo, &mo, &cfg_model, &m->cfg_storage, &xe)) {
        snprintf(err, cap, "%s", xe.message);
        goto fail;
    }
    if (!path) path = cfg_model;
    if (!path) { snprintf(err, cap, "model '%s': no path (give -m, `path:` or a config with `model:`)", name); goto fail; }
    if (o->n_threads > 0) mo.n_threads = o->n_threads;
    if (o->kv_dtype) mo.kv_dtype = o->kv_dtype;
    if (o->pp && o->pp->pp_size > 1) {
        mo.pp_size = o->pp->pp_size;
        mo.pp_layers = o->pp->pp_layers;
        mo.pp_microbatches = o->pp->pp_microbatches;
        mo.pp_timeout_ms = o->pp->pp_timeout_ms;
        mo.pp_stats = o->pp->pp_stats;
        mo.pp_test_fail_after = o->pp->pp_test_fail_after;
        mo.pp_test_fail_hang = o->pp->pp_test_fail_hang;
    }
    if (o->model_options_hook) o->model_options_hook(&mo);
    if (response_cache_off) eo.response_cache = 0;
    m->name = strdup(name);
    m->path = strdup(path);
    load_log ll = {name, "", -1, srv_now()};
    mo.progress = log_progress;
    mo.progress_user = &ll;
    m->model = xllm_model_load(path, &mo, &xe);
    if (!m->model) { snprintf(err, cap, "model '%s': %s", name, xe.message); goto fail; }
    if (xllm_model_pp_rank(m->model) > 0) return m; /* a pipeline worker: no engine, no HTTP (server_main) */
    m->engine = xllm_engine_create(m->model, &eo, &xe);
    if (!m->engine) { snprintf(err, cap, "model '%s': %s", name, xe.message); goto fail; }
    m->tok = xllm_model_tokenizer(m->model);
    { /* the KV storage the engine took (kv_dtype auto decides at create) */
        char *js = xllm_engine_stats(m->engine);
        cJSON *sj = js ? cJSON_Parse(js) : NULL;
        cJSON *dt = cJSON_GetObjectItem(sj, "kv_dtype"), *au = cJSON_GetObjectItem(sj, "kv_dtype_auto");
        cJSON *bpt = cJSON_GetObjectItem(sj, "kv_bytes_per_token");
        if (cJSON_IsString(dt))
            srv_log("model %s: KV cache %s%s, %.0f bytes per token", name, dt->valuestring,
                    cJSON_IsTrue(au) ? " (kv_dtype auto)" : "", cJSON_IsNumber(bpt) ? bpt->valuedouble : 0.0);
        cJSON_Delete(sj);
        xllm_free(js);
    }
    m->ctx = xllm_model_context_size(m->model);
    m->max_batch = eo.max_batch_size > 0 ? eo.max_batch_size : mo.max_batch_seqs > 0 ? mo.max_batch_seqs : 16;
    if (chat_template) {
        size_t l = strlen(chat_template);
        if (l > 6 && !strcmp(chat_template + l - 6, ".jinja")) {
            m->tmpl_src = read_text(chat_template, err, cap);
            if (!m->tmpl_src) goto fail;
            /* the model's special tokens (bos_token, ...) for the file's {{ bos_token }} */
            m->tmpl_specials = xllm_chat_template_load(path, &xe);
        } else {
            m->tmpl = xllm_chat_template_load(chat_template, &xe);
            if (!m->tmpl) { snprintf(err, cap, "model '%s': %s", name, xe.message); goto fail; }
        }
    } else {
        m->tmpl = xllm_chat_template_load(path, &xe); /* none is fine: chat requests get a 400 */
    }
    chat_features_detect(m);
    m->created = (long)time(NULL);
    m->parse_special = o->parse_special;
    return m;
fail:
    model_close(m);
    return NULL;
}

void model_close(srv_model *m) {
    if (!m) return;
    xllm_engine_free(m->engine);
    xllm_model_free(m->model);
    xllm_chat_template_free(m->tmpl);
    xllm_chat_template_free(m->tmpl_specials);
    free(m->tmpl_src);
    xllm_free(m->cfg_storage);
    if (m->pii) pii_policy_free(m->pii);
    for (int i = 0; i < m->n_stages; i++) {
        free(m->stages[i].model);
        free(m->stages[i].template_text);
    }
    free(m->stages);
    free(m->name);
    free(m->path);
    free(m);
}

/* ------------------------------------------------------------ the file */

typedef struct cfg {
    const char *file;
    char dir[4096];
    char *err;
    size_t cap;
} cfg;

static int bad(cfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(cfg *c, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->cap, "%s: %s", c->file, m);
    return -1;
}

static int keys_known(cfg *c, const cJSON *o, const char *where, const char *const *known) {
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(it->string, known[i]);
        if (!ok) return bad(c, "%s: unknown key '%.64s'", where, it->string);
    }
    return 0;
}

static const char *str_at(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static char *resolve(cfg *c, const char *p) {
    if (!p) return NULL;
    if (p[0] == '/') return strdup(p);
    size_t n = strlen(c->dir) + strlen(p) + 2;
    char *r = malloc(n);
    if (r) snprintf(r, n, "%s/%s", c->dir, p);
    return r;
}

static int add_model(srv_state *s, srv_model *m) {
    srv_model **nm = realloc(s->models, (size_t)(s->n_models + 1) * sizeof *nm);
    if (!nm) return -1;
    s->models = nm;
    s->models[s->n_models++] = m;
    return 0;
}

static int policy_for(cfg *c, const cJSON *root, const cJSON *item, const char *where, pii_policy **out) {
    *out = NULL;
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(item, "pii");
    if (!pv) return 0;
    if (!cJSON_IsString(pv)) return bad(c, "%s: 'pii' must name a policy under pii:", where);
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "pii"), pv->valuestring);
    if (!cJSON_IsObject(pol)) return bad(c, "%s: no PII policy '%.64s' under pii:", where, pv->valuestring);
    char e[512];
    *out = pii_policy_create(pol, e, sizeof e);
    if (!*out) return bad(c, "pii.%.64s: %s", pv->valuestring, e);
    return 0;
}

int config_load_server(srv_state *s, const char *path, char *err, size_t cap) {
    cfg c = {.file = path, .err = err, .cap = cap};
    snprintf(c.dir, sizeof c.dir, "%s", path);
    char *d = dirname(c.dir);
    memmove(c.dir, d, strlen(d) + 1);
    cJSON *root = yaml_read_json(path, err, cap);
    if (!root) return -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) { bad(&c, "the top level must be a mapping"); goto out; }
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    if (!models) {
        /* an engine config for -m's model (or its own model:); served under the model's base name */
        srv_model *m = model_open("model", s->opt.model_path, path, NULL, &s->opt, 0, err, cap);
        if (!m || add_model(s, m)) { model_close(m); goto out; }
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", m->path);
        size_t l = strlen(tmp);
        while (l > 1 && tmp[l - 1] == '/') tmp[--l] = 0;
        free(m->name);
        m->name = strdup(basename(tmp));
        rc = 0;
        goto out;
    }
    static const char *const top_keys[] = {"models", "cascades", "pii", NULL};
    if (keys_known(&c, root, "top level", top_keys)) goto out;
    if (!cJSON_IsArray(models) || !cJSON_GetArraySize(models)) { bad(&c, "'models' must be a non-empty list"); goto out; }
    const cJSON *pii = cJSON_GetObjectItemCaseSensitive(root, "pii");
    if (pii && !cJSON_IsObject(pii)) { bad(&c, "'pii' must be a mapping of policy names"); goto out; }
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, models) {
        char where[64];
        snprintf(where, sizeof where, "models[%d]", i++);
        static const char *const mk[] = {"name", "path", "config", "chat_template", "pii", "parse_special", NULL};
        if (!cJSON_IsObject(it)) { bad(&c, "%s must be a mapping", where); goto out; }
        if (keys_known(&c, it, where, mk)) goto out;
        const char *name = str_at(it, "name");
        if (!name || !name_ok(name)) { bad(&c, "%s: 'name' must be 1-64 of [A-Za-z0-9._:/-]", where); goto out; }
        if (srv_find_model(s, name)) { bad(&c, "%s: the name '%s' is used twice", where, name); goto out; }
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(it, "parse_special");
        if (ps && !cJSON_IsBool(ps)) { bad(&c, "%s: 'parse_special' must be true or false", where); goto out; }
        pii_policy *pol;
        if (policy_for(&c, root, it, where, &pol)) goto out;
        char *mp = resolve(&c, str_at(it, "path")), *ec = resolve(&c, str_at(it, "config")),
             *ct = resolve(&c, str_at(it, "chat_template"));
        const char *use_path = mp ? mp : (ec ? NULL : s->opt.model_path);
        srv_model *m = model_open(name, use_path, ec, ct, &s->opt, pol && pii_policy_masks_output(pol), err, cap);
        free(mp), free(ec), free(ct);
        if (!m || add_model(s, m)) { model_close(m); if (pol) pii_policy_free(pol); goto out; }
        m->pii = pol;
        if (ps) m->parse_special = cJSON_IsTrue(ps);
        srv_log("model '%s' loaded from %s (context %d, batch %d)", m->name, m->path, m->ctx, m->max_batch);
    }
    const cJSON *cascades = cJSON_GetObjectItemCaseSensitive(root, "cascades");
    if (cascades && !cJSON_IsArray(cascades)) { bad(&c, "'cascades' must be a list"); goto out; }
    i = 0;
    cJSON_ArrayForEach(it, cascades) {
        char where[64];
        snprintf(where, sizeof where, "cascades[%d]", i++);
        static const char *const ck[] = {"name", "stages", "pii", NULL};
        if (!cJSON_IsObject(it)) { bad(&c, "%s must be a mapping", where); goto out; }
        if (keys_known(&c, it, where, ck)) goto out;
        const char *name = str_at(it, "name");
        if (!name || !name_ok(name)) { bad(&c, "%s: 'name' must be 1-64 of [A-Za-z0-9._:/-]", where); goto out; }
        if (srv_find_model(s, name)) { bad(&c, "%s: the name '%s' is used twice", where, name); goto out; }
        const cJSON *stages = cJSON_GetObjectItemCaseSensitive(it, "stages");
        int ns = cJSON_IsArray(stages) ? cJSON_GetArraySize(stages) : 0;
        if (ns < 1 || ns > 8) { bad(&c, "%s: 'stages' must be a list of 1 to 8 stages", where); goto out; }
        srv_model *m = calloc(1, sizeof *m);
        if (!m) goto out;
        m->name = strdup(name);
        m->path = strdup("(cascade)");
        m->stages = calloc((size_t)ns, sizeof *m->stages);
        m->n_stages = ns;
        m->created = (long)time(NULL);
        if (add_model(s, m)) { model_close(m); goto out; }
        if (policy_for(&c, root, it, where, &m->pii)) goto out;
        const cJSON *st;
        int j = 0;
        cJSON_ArrayForEach(st, stages) {
            cascade_stage *cs = &m->stages[j];
            cs->accept_logprob = NAN;
            static const char *const sk[] = {"model", "template", "max_tokens", "accept_logprob", NULL};
            char w2[96];
            snprintf(w2, sizeof w2, "%s.stages[%d]", where, j++);
            if (!cJSON_IsObject(st)) { bad(&c, "%s must be a mapping", w2); goto out; }
            if (keys_known(&c, st, w2, sk)) goto out;
            const char *mn = str_at(st, "model");
            srv_model *sm = mn ? srv_find_model(s, mn) : NULL;
            if (!sm || sm->n_stages) { bad(&c, "%s: 'model' must name a model listed under models:", w2); goto out; }
            cs->model = strdup(mn);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(st, "template");
            if (t && !cJSON_IsString(t)) { bad(&c, "%s: 'template' must be a string", w2); goto out; }
            if (t) cs->template_text = strdup(t->valuestring);
            const cJSON *mt = cJSON_GetObjectItemCaseSensitive(st, "max_tokens");
            if (mt && (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e6 ||
                       mt->valuedouble != floor(mt->valuedouble))) {
                bad(&c, "%s: 'max_tokens' must be an integer in [1, 1000000]", w2);
                goto out;
            }
            cs->max_tokens = mt ? (int)mt->valuedouble : 0;
            const cJSON *al = cJSON_GetObjectItemCaseSensitive(st, "accept_logprob");
            if (al && (!cJSON_IsNumber(al) || al->valuedouble > 0)) {
                bad(&c, "%s: 'accept_logprob' must be a number <= 0 (a mean token log-probability)", w2);
                goto out;
            }
            if (al) cs->accept_logprob = al->valuedouble;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}
