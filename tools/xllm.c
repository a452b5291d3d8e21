/*
 * xllm.c - the `xllm` command: one binary, git-style subcommands, built only
 * on the public API in xllm.h.
 *
 *   xllm run      generate text (streams, or --json); a summary line on stderr
 *   xllm logits   logits of a token sequence
 *   xllm tokenize run a tokenizer over a JSONL file
 *   xllm template render the model's chat template (chat_cli.c)
 *   (eval, convert, info, synth, bench: cmd_*.c; help texts: help.c)
 *
 * Every failure prints "xllm: error: ..." on stderr and exits with status 1
 * (cli.c words the shared ones: a missing model, an unknown option).
 */
#include "xllm.h"
#include "chat_cli.h"
#include "cli.h"
#include "commands.h"
#include "pp_cli.h"
#include "profile_report.h"
#include "json_text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fail(const char *fmt, const char *a) { return cli_fail(fmt, a); }

static int fail_err(const xllm_error *e) { return fail("%s", e->message); }

/* ------------------------------------------------------------ arguments */

typedef struct args {
    int argc, i;
    char **argv;
    int bad;
} args;

static const char *arg_value(args *a, const char *flag) {
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "xllm: error: %s needs a value\n", flag);
        a->bad = 1;
        return NULL;
    }
    return a->argv[++a->i];
}

/* Numeric option values (cli_int / cli_float: one wording, ranges named). */
static int opt_int(args *a, const char *f, long lo, long hi, long *out) {
    const char *v = arg_value(a, f);
    return v ? cli_int(f, v, lo, hi, out) : 1;
}

static int opt_float(args *a, const char *f, double lo, double hi, int lo_open, float *out) {
    const char *v = arg_value(a, f);
    return v ? cli_float(f, v, lo, hi, lo_open, out) : 1;
}

/* The sampling parameter whose `xllm run` flag (or one of its aliases) is f. */
static const xllm_param_info *run_param(const char *f) {
    size_t n;
    const xllm_param_info *rows = xllm_sampling_params_table(&n);
    size_t fl = strlen(f);
    for (size_t i = 0; i < n; i++) {
        if (rows[i].cli && !strcmp(rows[i].cli, f)) return &rows[i];
        for (const char *p = rows[i].cli_alias; p && *p;) {
            const char *e = strchr(p, ' ');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l == fl && !memcmp(p, f, l)) return &rows[i];
            p = e ? e + 1 : p + l;
        }
    }
    return NULL;
}

/* "1,2,3" -> ids (malloc); at least one. */
static int parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return 0;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) { free(v); return 0; }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (!k) { /* an empty list is not a prompt (and was leaked by the callers' error path) */
        free(v);
        return 0;
    }
    *ids = v;
    *n = k;
    return 1;
}

static void print_ids_json(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputc(']', f);
}


/* ------------------------------------------------------------------ run */

/* Timing of one generation: the first token ends the prompt's prefill. */
typedef struct run_clock {
    int stream;      /* print the text as it comes */
    double start, first, last;
    size_t count;
} run_clock;

static int stream_cb(void *user, size_t req, int32_t token, const char *text, size_t len) {
    (void)req; (void)token;
    run_clock *c = user;
    double t = cli_now();
    if (c->count++ == 0) c->first = t;
    c->last = t;
    if (c->stream && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

/* run --chat: -p TEXT as one user message (or --messages FILE), rendered
 * with add_generation_prompt, tokenized without special tokens. */
static int chat_prompt_ids(xllm_model *m, const char *model_path, const char *prompt, chat_opts *co, int32_t **ids,
                           size_t *n_ids) {
    const xllm_tokenizer *tok = xllm_model_tokenizer(m);
    if (!tok) return fail("%s: --chat needs the model's tokenizer.json", model_path);
    char *msgs = NULL;
    size_t mlen = 0;
    if (!co->messages_file) {
        FILE *ms = open_memstream(&msgs, &mlen);
        if (!ms) return fail("%s", "out of memory");
        fputs("[{\"role\":\"user\",\"content\":", ms);
        json_write_string(ms, prompt ? prompt : "", prompt ? strlen(prompt) : 0);
        fputs("}]", ms);
        if (fclose(ms) != 0) { free(msgs); return fail("%s", "out of memory"); }
    }
    co->add_generation_prompt = 1;
    char *text;
    size_t len;
    int rc = chat_render(co, model_path, msgs, &text, &len);
    free(msgs);
    if (rc) return 1;
    xllm_error err;
    int32_t *tids = NULL;
    if (xllm_tokenize(tok, text, len, 0, &tids, n_ids, &err)) {
        free(text);
        return fail_err(&err);
    }
    free(text);
    *ids = malloc((*n_ids ? *n_ids : 1) * sizeof **ids);
    if (!*ids) { xllm_free(tids); return fail("%s", "out of memory"); }
    memcpy(*ids, tids, *n_ids * sizeof **ids);
    xllm_free(tids);
    return 0;
}

#define DEFAULT_PROFILE_FILE "xllm-profile.json"

/* The model's max_position_embeddings (its config, in any of the three
 * formats), or 0 when it cannot be read. */
static int trained_context(const char *path) {
    char *text;
    if (xllm_model_info(path, &text, NULL)) return 0;
    cJSON *root = cJSON_Parse(text);
    xllm_free(text);
    const cJSON *meta = cJSON_GetObjectItem(root, "metadata");
    const cJSON *cfg = cJSON_GetObjectItem(meta, "config");
    const cJSON *v = cJSON_GetObjectItem(cfg ? cfg : meta, "max_position_embeddings");
    int n = cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e9 ? (int)v->valuedouble : 0;
    cJSON_Delete(root);
    return n;
}

/* xllm_generate's contract for one request, through a configured engine:
 * the callback gets each token with its text, on this thread. */
static xllm_status engine_generate_one(xllm_engine *e, const xllm_request *r, xllm_token_callback cb, void *user,
                                       xllm_result **res, xllm_error *err) {
    xllm_request_id id;
    xllm_status st = xllm_engine_submit(e, r, NULL, NULL, &id, err);
    if (st) return st;
    xllm_chunk c;
    xllm_poll_result pr;
    while ((pr = xllm_engine_poll(e, id, &c, -1, err)) == XLLM_POLL_CHUNK) {
        size_t prev = 0;
        for (size_t k = 0; k < c.n_ids; k++) {
            cb(user, 0, c.ids[k], c.text + prev, c.text_ends[k] - prev);
            prev = c.text_ends[k];
        }
    }
    if (pr == XLLM_POLL_ERROR) {
        xllm_engine_release(e, id);
        return err->code;
    }
    size_t n;
    return xllm_engine_result(e, id, res, &n, err);
}

/* run --prompts FILE: every line a prompt, all submitted at once (continuous
 * batching); results in order. */
static int read_prompts(const char *path, char ***lines, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "xllm: error: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0, cap_l = 0;
    ssize_t len;
    *lines = NULL;
    *n = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (*n == cap_l) {
            cap_l = cap_l ? cap_l * 2 : 16;
            char **nl = realloc(*lines, cap_l * sizeof *nl);
            if (!nl) break;
            *lines = nl;
        }
        if (!((*lines)[*n] = strdup(line))) break;
        (*n)++;
    }
    free(line);
    fclose(f);
    if (*n == 0) return fail("%s: no prompts (one per line)", path);
    return 0;
}

/* results of engine_generate_many (malloc-ed array, library-owned members) */
static void free_many(xllm_result *all, size_t n) {
    for (size_t i = 0; i < n && all; i++) {
        xllm_free(all[i].prompt_ids);
        xllm_free(all[i].ids);
        xllm_free(all[i].text);
        xllm_free(all[i].logprobs);
        xllm_free(all[i].top_ids);
        xllm_free(all[i].top_logprobs);
    }
    free(all);
}

static xllm_status engine_generate_many(xllm_engine *e, const xllm_request *reqs, size_t n, int samples,
                                        xllm_result **res, xllm_error *err) {
    xllm_request_id *ids = calloc(n, sizeof *ids);
    xllm_result *all = calloc(n * (size_t)samples, sizeof *all);
    xllm_status st = ids && all ? XLLM_OK : XLLM_ERR_OUT_OF_MEMORY;
    size_t submitted = 0;
    if (st) snprintf(err->message, sizeof err->message, "out of memory"), err->code = st;
    while (submitted < n && !st)
        if (!(st = xllm_engine_submit(e, &reqs[submitted], NULL, NULL, &ids[submitted], err))) submitted++;
    for (size_t i = 0; i < submitted; i++) {
        xllm_result *r = NULL;
        size_t nr = 0;
        if (st) {
            xllm_engine_release(e, ids[i]);
            continue;
        }
        st = xllm_engine_result(e, ids[i], &r, &nr, err);
        if (!st) {
            for (size_t j = 0; j < nr && j < (size_t)samples; j++) all[i * (size_t)samples + j] = r[j];
            xllm_free(r);
        }
    }
    free(ids);
    if (st) {
        free_many(all, n * (size_t)samples);
        return st;
    }
    *res = all;
    return XLLM_OK;
}

static int run_many(xllm_model *m, xllm_engine *eng, const char *path, const xllm_sampling_params *sp, int samples,
                    int json, int quiet) {
    char **lines;
    size_t n;
    if (read_prompts(path, &lines, &n)) return 1;
    xllm_request *reqs = calloc(n, sizeof *reqs);
    if (!reqs) return fail("%s", "out of memory");
    for (size_t i = 0; i < n; i++) {
        reqs[i].prompt = lines[i];
        reqs[i].params = *sp;
        reqs[i].n = samples;
    }
    xllm_error err;
    xllm_result *res = NULL;
    if (!eng) eng = xllm_model_engine(m);
    double t0 = cli_now();
    xllm_status st = engine_generate_many(eng, reqs, n, samples, &res, &err);
    double wall = cli_now() - t0;
    long long preempt = 0;
    char *stats = xllm_engine_stats(eng);
    const char *ps = stats ? strstr(stats, "\"preemptions\":") : NULL;
    if (ps) preempt = strtoll(ps + 14, NULL, 10);
    xllm_free(stats);
    n *= (size_t)samples; /* results: per prompt, its samples */
    int rc = 0;
    if (st) rc = fail_err(&err);
    size_t np = 0, ng = 0;
    for (size_t i = 0; !st && i < n; i++) {
        np += res[i].n_prompt_ids;
        ng += res[i].n_ids;
        if (json) {
            printf("{\"prompt_ids\":");
            print_ids_json(stdout, res[i].prompt_ids, res[i].n_prompt_ids);
            printf(",\"ids\":");
            print_ids_json(stdout, res[i].ids, res[i].n_ids);
            printf(",\"text\":");
            json_write_string(stdout, res[i].text, res[i].text_len);
            printf("}\n");
        } else {
            fwrite(lines[i / (size_t)samples], 1, strlen(lines[i / (size_t)samples]), stdout);
            fwrite(res[i].text, 1, res[i].text_len, stdout);
            putchar('\n');
        }
    }
    fflush(stdout);
    if (!st && !quiet)
        fprintf(stderr,
                "xllm: %zu sequences, %zu prompt tokens | generated %zu tokens in %.2f s (%.1f tokens/s aggregate) | "
                "preemptions %lld\n",
                n, np, ng, wall, wall > 0 ? (double)ng / wall : 0.0, preempt);
    if (!st) free_many(res, n);
    for (size_t i = 0; i < n / (size_t)samples; i++) free(lines[i]);
    free(lines);
    free(reqs);
    return rc;
}

/* A constraint file (--json-schema, --grammar), whole; NULL with a message. */
static char *read_constraint_file(const char *flag, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "xllm: %s %s: %s\n", flag, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap > (1u << 20)) { /* the engine's limit on a grammar text */
                fprintf(stderr, "xllm: %s %s: larger than 1 MiB\n", flag, path);
                free(buf);
                buf = NULL;
                break;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - 1 - n, f);
        n += k;
        if (!k) {
            buf[n] = 0;
            break;
        }
    }
    fclose(f);
    return buf;
}

/* The text of --json-schema / --grammar FILE: lives until the process exits. */
static char *g_constraint_text;

/* --json-schema FILE, --grammar FILE (GBNF), --regex RE, --json-object: one constraint. */
static int constraint_opt(args *a, const char *f, xllm_sampling_params *sp) {
    char **text = &g_constraint_text;
    if (sp->grammar_kind != XLLM_GRAMMAR_NONE)
        return fail("%s", "give one of --json-schema, --grammar, --regex and --json-object");
    if (!strcmp(f, "--json-object")) {
        sp->grammar_kind = XLLM_GRAMMAR_JSON_OBJECT;
        return 0;
    }
    const char *v = arg_value(a, f);
    if (!v) return 1;
    if (!strcmp(f, "--regex")) {
        sp->grammar_kind = XLLM_GRAMMAR_REGEX;
        sp->grammar = v;
        return 0;
    }
    if (!(*text = read_constraint_file(f, v))) return 1;
    sp->grammar_kind = !strcmp(f, "--grammar") ? XLLM_GRAMMAR_GBNF : XLLM_GRAMMAR_JSON_SCHEMA;
    sp->grammar = *text;
    return 0;
}

static int cmd_run(int argc, char **argv) {
    args a = {argc, 1, argv, 0};
    pp_cli pp;
    memset(&pp, 0, sizeof pp);
    const char *prompts_file = NULL;
    long samples = 1, kv_tokens = 0;
    char mbuf[PATH_MAX + 64];
    const char *model_path = NULL, *prompt = NULL, *ids_arg = NULL, *config_path = NULL;
    int json = 0, chat = 0, quiet = 0, n_given = 0;
    const char *chat_flag = NULL, *profile_path = NULL, *kv_dtype = NULL, *arith = NULL;
    chat_opts co;
    memset(&co, 0, sizeof co);
    long threads = 0, ctx = 0, v;
    xllm_sampling_params sp = xllm_sampling_params_default();
    const xllm_param_info *row;
    sp.temperature = 0.8f;
    sp.top_p = 0.9f;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (cli_is_help(f)) {
            cli_print_help(stdout, "run");
            return 0;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = arg_value(&a, f);
        else if (!strcmp(f, "--config")) config_path = arg_value(&a, f);
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) prompt = arg_value(&a, f);
        else if (!strcmp(f, "--ids")) ids_arg = arg_value(&a, f);
        else if ((row = run_param(f))) { /* the sampling parameters' table (xllm_sampling_params_table) */
            float x = 0;
            if (row->type == XLLM_PARAM_BOOL) x = 1;
            else if (row->type == XLLM_PARAM_INT && opt_int(&a, f, (long)row->min, (long)row->max, &v)) return 1;
            else if (row->type == XLLM_PARAM_FLOAT && opt_float(&a, f, row->min, row->max, row->min_open, &x)) return 1;
            xllm_sampling_param_set(&sp, row, row->type == XLLM_PARAM_INT ? (double)v : (double)x);
            if (!strcmp(row->name, "max_new_tokens")) n_given = 1;
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            if (opt_int(&a, f, 1, 1 << 24, &ctx)) return 1;
        } else if (!strcmp(f, "--seed")) {
            const char *s = arg_value(&a, f);
            unsigned long long x = 0;
            if (!s || cli_seed(f, s, 1, &x, &sp.has_seed)) return 1;
            sp.seed = x;
        } else if (!strcmp(f, "--stop")) {
            const char *s = arg_value(&a, f);
            if (!s) return 1;
            if (sp.n_stop >= XLLM_MAX_STOP_STRINGS) return fail("at most %s stop strings", "16");
            sp.stop[sp.n_stop++] = s;
        } else if (!strcmp(f, "--json-schema") || !strcmp(f, "--grammar") || !strcmp(f, "--regex") ||
                   !strcmp(f, "--json-object")) {
            if (constraint_opt(&a, f, &sp)) return 1;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (opt_int(&a, f, 1, 1024, &threads)) return 1;
        } else if (!strcmp(f, "--profile") || !strcmp(f, "--enable-kernel-profiling")) {
            /* the file is optional: the next argument is it unless it is an option */
            profile_path = a.i + 1 < argc && argv[a.i + 1][0] != '-' ? argv[++a.i] : DEFAULT_PROFILE_FILE;
        } else if (!strcmp(f, "--json")) json = 1;
        else if (!strcmp(f, "--quiet")) quiet = 1;
        else if (!strcmp(f, "--chat")) chat = 1;
        else if (!strcmp(f, "--prompts")) prompts_file = arg_value(&a, f);
        else if (!strcmp(f, "--samples")) {
            if (opt_int(&a, f, 1, XLLM_MAX_SAMPLES, &samples)) return 1;
        } else if (!strcmp(f, "--kv-tokens")) {
            if (opt_int(&a, f, 1, 1L << 40, &kv_tokens)) return 1;
        } else if (!strcmp(f, "--kv-dtype")) {
            if (!(kv_dtype = arg_value(&a, f))) return 1;
        } else if (!strcmp(f, "--arith")) {
            if (!(arith = arg_value(&a, f))) return 1;
        }
        else {
            int r = pp_cli_parse(&pp, argc, argv, &a.i);
            if (r < 0) return 1;
            if (r) continue;
            r = chat_opts_parse(&co, argc, argv, &a.i);
            if (r < 0) return 1;
            if (!r) return cli_unknown_option("run", f);
            chat_flag = f;
        }
    }
    if (chat_flag && !chat) return fail("%s goes with --chat", chat_flag);
    if (a.bad) return 1;
    if (prompt && ids_arg) return fail("%s", "give either -p or --ids, not both");
    if (prompts_file && (prompt || ids_arg || chat)) return fail("%s", "--prompts goes without -p, --ids and --chat");
    if (samples > 1 && !prompts_file) return fail("%s", "--samples goes with --prompts");
    if (chat && ids_arg) return fail("%s", "--chat takes -p TEXT or --messages FILE, not --ids");
    if (chat && prompt && co.messages_file) return fail("%s", "--chat takes either -p or --messages, not both");
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    xllm_engine_options eo = xllm_engine_options_default();
    void *config_storage = NULL;
    if (config_path) { /* the config's model unless -m is given; -t and -c override it too */
        const char *cfg_model = NULL;
        if (xllm_config_load(config_path, &eo, &mo, &cfg_model, &config_storage, &err)) return fail_err(&err);
        if (!model_path && cfg_model) {
            snprintf(mbuf, sizeof mbuf, "%s", cfg_model);
            model_path = mbuf;
        }
    }
    if (!model_path && !(model_path = cli_default_model(mbuf, sizeof mbuf)))
        return fail("no model given and the bundled stories260k was not found (next to the binary, in the build's "
                    "source tree or in ./models): give -m MODEL or set XLLM_MODEL; a model is %s", CLI_MODEL_FORMATS);
    if (cli_check_model(model_path)) {
        xllm_free(config_storage);
        return 1;
    }
    if (threads) mo.n_threads = (int)threads;
    if (ctx) mo.max_context = (int)ctx;
    if (kv_tokens) mo.kv_tokens = kv_tokens;
    if (kv_dtype) mo.kv_dtype = kv_dtype;
    if (arith) mo.arithmetic = arith;
    pp_cli_apply(&pp, &mo);
    double t_load = cli_now();
    xllm_model *m = cli_load_model(model_path, &mo, &err, quiet || pp.size > 1);
    int worker_rc = m ? pp_cli_worker(m) : -1;
    if (worker_rc >= 0) {
        xllm_free(config_storage);
        return worker_rc;
    }
    xllm_engine *eng = NULL;
    if (m && config_path) {
        eo.verbose = eo.verbose && !quiet;
        if (!(eng = xllm_engine_create(m, &eo, &err))) {
            xllm_model_free(m);
            m = NULL;
        }
    }
    xllm_free(config_storage); /* the engine copied what it keeps */
    if (!m) return fail_err(&err);
    t_load = cli_now() - t_load;
    if (prompts_file) {
        int rc = run_many(m, eng, prompts_file, &sp, (int)samples, json, quiet);
        xllm_engine_free(eng);
        xllm_model_free(m);
        return rc;
    }
    int n_ctx = xllm_model_context_size(m);
    int trained = ctx > 0 ? trained_context(model_path) : 0;
    if (trained > 0 && ctx > trained)
        cli_note("-c %ld is beyond the %d positions the model was trained on (max_position_embeddings); what it "
                 "generates past %d may not hold together", ctx, trained, trained);

    xllm_request req;
    memset(&req, 0, sizeof req);
    int32_t *ids = NULL;
    size_t n_prompt = 0;
    if (chat) {
        /* HF's apply_chat_template(tokenize=True): render with the generation
         * prompt, then tokenize the text without adding special tokens (the
         * template writes BOS itself when the model wants one) */
        if (chat_prompt_ids(m, model_path, prompt, &co, &ids, &req.n_prompt_ids)) {
            xllm_model_free(m);
            return 1;
        }
        req.prompt_ids = ids;
        n_prompt = req.n_prompt_ids;
    } else if (ids_arg) {
        size_t n;
        if (!parse_ids(ids_arg, &ids, &n)) {
            xllm_model_free(m);
            return fail("--ids must be a comma-separated list of token ids, got \"%s\"", ids_arg);
        }
        req.prompt_ids = ids;
        req.n_prompt_ids = n;
        n_prompt = n;
    } else {
        req.prompt = prompt ? prompt : "";
        /* the count the engine will see (the same tokenization), for the notice below */
        const xllm_tokenizer *tok = xllm_model_tokenizer(m);
        int32_t *tids = NULL;
        if (tok && !xllm_tokenize(tok, req.prompt, strlen(req.prompt), 1, &tids, &n_prompt, NULL)) xllm_free(tids);
    }
    /* a silent cap made visible: generation stops when the context is full */
    if (n_prompt > 0 && n_prompt < (size_t)n_ctx && (size_t)sp.max_new_tokens > (size_t)n_ctx - n_prompt)
        cli_note("%s %d is more than the context leaves: at most %zu tokens will be generated (context %d, prompt %zu "
                 "tokens; -c sets the context)",
                 n_given ? "-n" : "the default -n", sp.max_new_tokens, (size_t)n_ctx - n_prompt, n_ctx, n_prompt);
    req.params = sp;
    xllm_result *res = NULL;
    if (profile_path) {
        xllm_profile_enable(1);
        xllm_profile_reset();
    }
    run_clock clk = {!json, cli_now(), 0, 0, 0};
    xllm_status st = eng ? engine_generate_one(eng, &req, stream_cb, &clk, &res, &err)
                         : xllm_generate(m, &req, 1, stream_cb, &clk, &res, &err);
    xllm_engine_free(eng);
    double t_end = cli_now();
    free(ids);
    if (st) {
        xllm_model_free(m);
        if (!json && clk.count) putchar('\n');
        return fail_err(&err);
    }
    if (json) {
        printf("{\"prompt_ids\":");
        print_ids_json(stdout, res[0].prompt_ids, res[0].n_prompt_ids);
        printf(",\"ids\":");
        print_ids_json(stdout, res[0].ids, res[0].n_ids);
        printf(",\"text\":");
        json_write_string(stdout, res[0].text, res[0].text_len);
        printf("}\n");
    } else {
        putchar('\n');
    }
    fflush(stdout);
    if (!quiet) {
        /* as llama.cpp's perf lines: prompt tokens/s over the prefill (submission to
         * the first token), generation tokens/s over the decode steps after it, both
         * from the engine's own timestamps (the callbacks may come in bursts) */
        size_t np = res[0].n_prompt_ids, ng = res[0].n_ids;
        double pp_s = res[0].first_token_s > 0 ? res[0].first_token_s : clk.count ? clk.first - clk.start : t_end - clk.start;
        double tg_s = res[0].decode_s;
        fprintf(stderr, "xllm: prompt %zu tokens (%.1f tokens/s) | generated %zu tokens", np,
                pp_s > 0 ? (double)np / pp_s : 0.0, ng);
        if (ng > 1 && tg_s > 0) fprintf(stderr, " (%.1f tokens/s)", (double)(ng - 1) / tg_s);
        fprintf(stderr, " | load %.2f s | %s\n", t_load,
                res[0].finish_reason == XLLM_FINISH_STOP ? "stopped" : ng < (size_t)sp.max_new_tokens ? "context full" : "length");
    }
    xllm_results_free(res, 1);
    xllm_model_free(m);
    return profile_path ? profile_write(profile_path) : 0;
}

/* --------------------------------------------------------------- logits */

static int cmd_logits(int argc, char **argv) {
    args a = {argc, 1, argv, 0};
    const char *model_path = NULL, *ids_arg = NULL, *out_path = NULL;
    long threads = 0;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = arg_value(&a, f);
        else if (!strcmp(f, "--ids")) ids_arg = arg_value(&a, f);
        else if (!strcmp(f, "--out")) out_path = arg_value(&a, f);
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (opt_int(&a, f, 1, 1024, &threads)) return 1;
        } else if (cli_is_help(f)) {
            cli_print_help(stdout, "logits");
            return 0;
        } else return cli_unknown_option("logits", f);
    }
    if (a.bad) return 1;
    if (!model_path) return fail("%s", "logits needs -m MODEL (see 'xllm logits --help')");
    if (!ids_arg) return fail("%s", "logits needs --ids 1,2,3 (see 'xllm logits --help')");
    if (cli_check_model(model_path)) return 1;
    int32_t *ids;
    size_t n;
    if (!parse_ids(ids_arg, &ids, &n) || n == 0) return fail("--ids must be a comma-separated list of token ids, got \"%s\"", ids_arg);
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)threads;
    xllm_model *m = cli_load_model(model_path, &mo, &err, 0);
    if (!m) {
        free(ids);
        return fail_err(&err);
    }
    size_t V = (size_t)xllm_model_vocab_size(m);
    float *logits = malloc(n * V * sizeof(float));
    int rc = 0;
    if (!logits) rc = fail("%s", "out of memory");
    else if (xllm_model_logits(m, ids, n, 1, logits, &err)) rc = fail_err(&err);
    if (!rc && out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float), n * V, f) != n * V) rc = fail("cannot write %s", out_path);
        if (f && fclose(f) != 0 && !rc) rc = fail("cannot write %s", out_path);
    }
    if (!rc) {
        const float *last = logits + (n - 1) * V;
        printf("{\"logits\":[");
        for (size_t i = 0; i < V; i++) printf(i ? ",%.9g" : "%.9g", last[i]);
        printf("]}\n");
    }
    free(logits);
    free(ids);
    xllm_model_free(m);
    return rc;
}

/* ------------------------------------------------------------- tokenize */

static int tokenize_line(const xllm_tokenizer *tok, const char *line, size_t lineno, const char *path) {
    /* validate with cJSON, then take the exact bytes (cJSON stops at \u0000) */
    cJSON *doc = cJSON_Parse(line);
    const cJSON *text = doc ? cJSON_GetObjectItemCaseSensitive(doc, "text") : NULL;
    char *s = NULL;
    size_t slen = 0;
    if (!cJSON_IsString(text) || json_object_string(line, "text", &s, &slen)) {
        cJSON_Delete(doc);
        free(s);
        fprintf(stderr, "xllm: error: %s:%zu: expected a JSON object with a string \"text\"\n", path, lineno);
        return 1;
    }
    xllm_error err;
    int32_t *ids = NULL, *ids_ns = NULL;
    size_t n = 0, n_ns = 0, dec_len = 0, dec_skip_len = 0;
    char *dec = NULL, *dec_skip = NULL;
    int rc = 0;
    if (xllm_tokenize(tok, s, slen, 1, &ids, &n, &err) || xllm_tokenize(tok, s, slen, 0, &ids_ns, &n_ns, &err) ||
        xllm_detokenize(tok, ids, n, 0, &dec, &dec_len, &err) ||
        xllm_detokenize(tok, ids, n, 1, &dec_skip, &dec_skip_len, &err)) {
        fprintf(stderr, "xllm: error: %s:%zu: %s\n", path, lineno, err.message);
        rc = 1;
    } else {
        printf("{\"ids\":");
        print_ids_json(stdout, ids, n);
        printf(",\"ids_no_special\":");
        print_ids_json(stdout, ids_ns, n_ns);
        printf(",\"decode\":");
        json_write_string(stdout, dec, dec_len);
        printf(",\"decode_skip_special\":");
        json_write_string(stdout, dec_skip, dec_skip_len);
        printf("}\n");
    }
    xllm_free(ids);
    xllm_free(ids_ns);
    xllm_free(dec);
    xllm_free(dec_skip);
    free(s);
    cJSON_Delete(doc);
    return rc;
}

static int cmd_tokenize(int argc, char **argv) {
    args a = {argc, 1, argv, 0};
    const char *model_path = NULL, *jsonl = NULL;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = arg_value(&a, f);
        else if (!strcmp(f, "--jsonl")) jsonl = arg_value(&a, f);
        else if (cli_is_help(f)) {
            cli_print_help(stdout, "tokenize");
            return 0;
        } else return cli_unknown_option("tokenize", f);
    }
    if (a.bad) return 1;
    if (!model_path || !jsonl) return fail("%s", "tokenize needs -m MODEL --jsonl FILE (see 'xllm tokenize --help')");
    struct stat sb;
    if (stat(model_path, &sb) != 0) return cli_check_model(model_path);
    xllm_error err;
    xllm_tokenizer *own = NULL;
    xllm_model *m = NULL;
    const xllm_tokenizer *tok;
    size_t pl = strlen(model_path);
    if (S_ISDIR(sb.st_mode) || (pl >= 5 && !strcmp(model_path + pl - 5, ".json"))) {
        tok = own = xllm_tokenizer_load(model_path, &err);
        if (!tok) return fail_err(&err);
    } else {
        /* an .xllm or GGUF file carries its tokenizer: load the model (small context) for it */
        if (cli_check_model(model_path)) return 1;
        xllm_model_options mo = xllm_model_options_default();
        mo.max_context = 16;
        mo.max_batch_seqs = 1;
        xllm_model_options_from_env(&mo);
        if (!(m = xllm_model_load(model_path, &mo, &err))) return fail_err(&err);
        if (!(tok = xllm_model_tokenizer(m))) {
            xllm_model_free(m);
            return fail("%s: the model has no tokenizer", model_path);
        }
    }
    FILE *f = strcmp(jsonl, "-") ? fopen(jsonl, "r") : stdin;
    if (!f) {
        xllm_tokenizer_free(own);
        xllm_model_free(m);
        return fail("%s: cannot open", jsonl);
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        rc = tokenize_line(tok, line, lineno, jsonl);
    }
    free(line);
    if (f != stdin) fclose(f);
    xllm_tokenizer_free(own);
    xllm_model_free(m);
    return rc;
}

/* ----------------------------------------------------------------- main */

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
} command;

static const command k_commands[] = {
    {"run", cmd_run},         {"logits", cmd_logits}, {"tokenize", cmd_tokenize}, {"template", cmd_template},
    {"eval", cmd_eval},       {"convert", cmd_convert}, {"info", cmd_info},       {"synth", cmd_synth},
    {"bench", cmd_bench},     {"serve", cmd_serve},
};

/* --backend NAME and --device N, on every command that loads a model (run,
 * serve, bench, logits, eval, ...): taken out of argv here and handed on as
 * XLLM_BACKEND / XLLM_DEVICE, which every command's model options read
 * (options_env.h). Returns 0, or 1 after printing what is wrong. */
static int take_backend_flags(int *argc, char **argv) {
    int o = 1;
    for (int i = 1; i < *argc; i++) {
        int b = !strcmp(argv[i], "--backend"), d = !strcmp(argv[i], "--device");
        if (!b && !d) {
            argv[o++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "xllm: %s needs a value (%s)\n", argv[i], b ? "cpu or vulkan" : "a device number, 0 = the first");
            return 1;
        }
        const char *v = argv[++i];
        if (d) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 0 || n > 15) {
                fprintf(stderr, "xllm: --device takes a device number 0..15 (xllm info --devices lists them), not '%s'\n", v);
                return 1;
            }
        }
        setenv(b ? "XLLM_BACKEND" : "XLLM_DEVICE", v, 1);
    }
    argv[o] = NULL;
    *argc = o;
    return 0;
}

int main(int argc, char **argv) {
    if (take_backend_flags(&argc, argv)) return 2;
    if (argc < 2) return cmd_run(argc, argv);
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof k_commands / sizeof *k_commands; i++)
        if (!strcmp(cmd, k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        /* xllm help CMD = xllm CMD --help */
        if (argc > 2 && !strcmp(cmd, "help") && cli_print_help(stdout, argv[2]) == 0) return 0;
        cli_print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("xllm %s\n", XLLM_VERSION);
        return 0;
    }
    /* options without a command are run's: xllm -p "Once upon a time" */
    if (cmd[0] == '-') return cmd_run(argc, argv);
    return fail("unknown command \"%s\" (commands: run, logits, tokenize, template, eval, convert, info, synth, "
                "bench; see 'xllm --help')", cmd);
}
