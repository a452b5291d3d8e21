/*
 * embeddings.c - POST /v1/embeddings as OpenAI serves it.
 *
 * input: a string, a list of strings, a list of token ids or a list of id
 * lists (at most 2048 inputs, each within the context); strings are
 * tokenized with the model's special tokens. All inputs of a request go to
 * the library in one call (xllm_model_embed), which packs them into shared
 * forward passes, together with those of the requests that arrive while
 * another batch runs (embed_batch.c). Pooling comes from the model when it says (a
 * sentence-transformers 1_Pooling/config.json beside it: CLS, mean or last
 * token), else mean; the request's `pooling` ("mean", "last", "cls")
 * overrides. Vectors are L2-normalized as OpenAI's are (`normalize: false`
 * turns that off). encoding_format "float" writes numbers that read back to
 * the same float32; "base64" the little-endian float32 bytes (what the
 * official clients ask for by default and decode).
 */
#include "srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMB_MAX_INPUTS 2048
#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* The model's own pooling (sentence-transformers' 1_Pooling/config.json), or mean. */
static xllm_pooling model_pooling(const srv_model *m) {
    char p[4096];
    snprintf(p, sizeof p, "%s/1_Pooling/config.json", m->path ? m->path : ".");
    FILE *f = fopen(p, "rb");
    if (!f) return XLLM_POOLING_MEAN;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    xllm_pooling r = XLLM_POOLING_MEAN;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "pooling_mode_cls_token"))) r = XLLM_POOLING_CLS;
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "pooling_mode_lasttoken"))) r = XLLM_POOLING_LAST;
    cJSON_Delete(o);
    return r;
}

static void b64(sbuf *b, const unsigned char *p, size_t n) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        q[0] = t[v >> 18 & 63];
        q[1] = t[v >> 12 & 63];
        q[2] = i + 1 < n ? t[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? t[v & 63] : '=';
        sb_put(b, q, 4);
    }
}

typedef struct emb_inputs {
    int n;
    int32_t **ids;
    size_t *len;
} emb_inputs;

static void inputs_free(emb_inputs *in) {
    for (int i = 0; i < in->n; i++) free(in->ids[i]);
    free(in->ids);
    free(in->len);
}

static int add_ids(srv_model *m, emb_inputs *in, const cJSON *list, http_error *e) {
    int n = cJSON_GetArraySize(list);
    if (n == 0) return BAD(e, "input", "a token id list is empty");
    if (n >= m->ctx)
        return http_err(e, 400, "invalid_request_error", "input", "context_length_exceeded",
                        "This model's maximum context length is %d tokens; input %d has %d", m->ctx, in->n, n);
    int32_t vocab = xllm_model_vocab_size(m->model);
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (!v) return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
    int k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, list) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= vocab) {
            free(v);
            return BAD(e, "input", "token ids must be integers in [0, %d)", vocab);
        }
        v[k++] = (int32_t)t->valuedouble;
    }
    in->ids[in->n] = v;
    in->len[in->n++] = (size_t)n;
    return 0;
}

static int parse_input(srv_model *m, const cJSON *x, emb_inputs *in, http_error *e) {
    if (!x) return BAD(e, "input", "'input' is required");
    int cap = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : 1;
    if (cJSON_IsArray(x) && cap == 0) return BAD(e, "input", "'input' is an empty list");
    if (cap > EMB_MAX_INPUTS) return BAD(e, "input", "at most %d inputs in one request", EMB_MAX_INPUTS);
    in->ids = calloc((size_t)cap, sizeof *in->ids);
    in->len = calloc((size_t)cap, sizeof *in->len);
    if (!in->ids || !in->len) return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
    if (cJSON_IsArray(x) && cJSON_IsNumber(x->child)) {
        return add_ids(m, in, x, e);
    }
    const cJSON *one = cJSON_IsArray(x) ? x->child : x;
    for (; one; one = cJSON_IsArray(x) ? one->next : NULL) {
        int st;
        if (cJSON_IsString(one)) {
            if (!one->valuestring[0]) return BAD(e, "input", "input %d is an empty string", in->n);
            if ((st = tokenize_prompt(m, one->valuestring, strlen(one->valuestring), 1, 0, &in->ids[in->n], &in->len[in->n], e))) {
                e->param = "input";
                return st;
            }
            in->n++;
        } else if (cJSON_IsArray(one)) {
            if ((st = add_ids(m, in, one, e))) return st;
        } else {
            return BAD(e, "input", "'input' must be a string, a list of strings, a list of token ids or a list of id lists");
        }
        if (!cJSON_IsArray(x)) break;
    }
    return 0;
}

int embeddings_handle(srv_call *c) {
    http_error *e = &c->err;
    cJSON *o = json_parse_body(c->body, c->len, e);
    emb_inputs in = {0};
    float *out = NULL;
    int st = 0;
    if (!o) { st = e->status; goto done; }
    if (!cJSON_IsObject(o)) { st = BAD(e, NULL, "the body must be a JSON object"); goto done; }
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(o, "model");
    srv_model *m = NULL;
    if (cJSON_IsString(mo)) m = srv_find_model(c->s, mo->valuestring);
    else if ((!mo || cJSON_IsNull(mo)) && c->s->n_models == 1) m = c->s->models[0];
    else if (mo && !cJSON_IsNull(mo)) { st = BAD(e, "model", "'model' must be a string"); goto done; }
    else { st = BAD(e, "model", "'model' is required"); goto done; }
    if (!m) {
        st = http_err(e, 404, "invalid_request_error", "model", "model_not_found", "The model '%.200s' does not exist",
                      mo->valuestring);
        goto done;
    }
    if (m->n_stages || !m->model) { st = BAD(e, "model", "'%s' is a cascade: embeddings need a model", m->name); goto done; }
    const cJSON *ef = cJSON_GetObjectItemCaseSensitive(o, "encoding_format");
    int base64 = 0;
    if (ef && !cJSON_IsNull(ef)) {
        if (!cJSON_IsString(ef) || (strcmp(ef->valuestring, "float") && strcmp(ef->valuestring, "base64"))) {
            st = BAD(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        base64 = !strcmp(ef->valuestring, "base64");
    }
    xllm_pooling pool = model_pooling(m);
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(o, "pooling");
    if (pm && !cJSON_IsNull(pm)) {
        if (!cJSON_IsString(pm) || (strcmp(pm->valuestring, "mean") && strcmp(pm->valuestring, "last") &&
                                    strcmp(pm->valuestring, "cls"))) {
            st = BAD(e, "pooling", "'pooling' must be \"mean\", \"last\" or \"cls\"");
            goto done;
        }
        pool = !strcmp(pm->valuestring, "mean") ? XLLM_POOLING_MEAN : !strcmp(pm->valuestring, "last") ? XLLM_POOLING_LAST
                                                                                                       : XLLM_POOLING_CLS;
    }
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(o, "normalize");
    if (nz && !cJSON_IsNull(nz) && !cJSON_IsBool(nz)) { st = BAD(e, "normalize", "'normalize' must be a boolean"); goto done; }
    int normalize = !cJSON_IsFalse(nz);
    int32_t H = xllm_model_hidden_size(m->model);
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(o, "dimensions");
    if (dim && !cJSON_IsNull(dim) && (!cJSON_IsNumber(dim) || dim->valuedouble != H)) {
        st = BAD(e, "dimensions", "this model's embeddings have %d dimensions; 'dimensions' cannot change that", H);
        goto done;
    }
    if ((st = parse_input(m, cJSON_GetObjectItemCaseSensitive(o, "input"), &in, e))) goto done;
    out = malloc((size_t)in.n * (size_t)H * sizeof *out);
    if (!out) { st = http_err(e, 500, "server_error", NULL, NULL, "out of memory"); goto done; }
    xllm_error xe;
    if (embed_batched(m->model, (const int32_t *const *)in.ids, in.len, (size_t)in.n, pool, normalize, out, &xe)) {
        st = http_err(e, xe.code == XLLM_ERR_INVALID_ARGUMENT || xe.code == XLLM_ERR_CONTEXT_OVERFLOW ? 400 : 500,
                      xe.code == XLLM_ERR_INVALID_ARGUMENT || xe.code == XLLM_ERR_CONTEXT_OVERFLOW ? "invalid_request_error"
                                                                                                  : "server_error",
                      "input", NULL, "%s", xe.message);
        goto done;
    }
    size_t tokens = 0;
    sbuf *b = &c->out;
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < in.n; i++) {
        tokens += in.len[i];
        sb_printf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        const float *v = out + (size_t)i * (size_t)H;
        if (base64) {
            sb_puts(b, "\"");
            b64(b, (const unsigned char *)v, (size_t)H * sizeof(float)); /* little-endian hosts (x86, arm64) */
            sb_puts(b, "\"");
        } else {
            sb_puts(b, "[");
            for (int h = 0; h < H; h++) sb_printf(b, h ? ",%.9g" : "%.9g", (double)v[h]);
            sb_puts(b, "]");
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "],\"model\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_printf(b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}", tokens, tokens);
    atomic_fetch_add(&m->prompt_tokens, (long long)tokens);
    if (b->oom) st = http_err(e, 500, "server_error", NULL, NULL, "out of memory");
done:
    free(out);
    inputs_free(&in);
    cJSON_Delete(o);
    return st;
}
