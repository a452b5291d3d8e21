/*
 * cmd_run.c - `xllm run`: generate text from a prompt (streamed, or one JSON
 * object with --json), a chat (--chat), or a file of prompts (--prompts, all
 * at once through one engine); a summary line on stderr.
 *
 * The command reads in three steps: run_parse turns the arguments into a
 * run_opts (nothing loaded yet), run_execute loads the model (and the
 * engine a --config asks for) and generates, run_report prints the output
 * and the speed line. Built only on the public API in xllm.h.
 */
#include "xllm.h"
#include "chat_cli.h"
#include "cli.h"
#include "commands.h"
#include "pp_cli.h"
#include "profile_report.h"
#include "read_text.h"
#include "json_text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (!tok) return cli_fail("%s: --chat needs the model's tokenizer.json", model_path);
    char *msgs = NULL;
    size_t mlen = 0;
    if (!co->messages_file) {
        FILE *ms = open_memstream(&msgs, &mlen);
        if (!ms) return cli_fail("%s", "out of memory");
        fputs("[{\"role\":\"user\",\"content\":", ms);
        json_write_string(ms, prompt ? prompt : "", prompt ? strlen(prompt) : 0);
        fputs("}]", ms);
        if (fclose(ms) != 0) { free(msgs); return cli_fail("%s", "out of memory"); }
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
        return cli_fail_err(&err);
    }
    free(text);
    *ids = malloc((*n_ids ? *n_ids : 1) * sizeof **ids);
    if (!*ids) { xllm_free(tids); return cli_fail("%s", "out of memory"); }
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
    char *text;
    size_t len;
    const char *why;
    int errnum;
    *lines = NULL;
    *n = 0;
    if (read_text_file(path, &text, &len, &why, &errnum)) {
        fprintf(stderr, "xllm: error: %s: %s\n", path, errnum ? strerror(errnum) : why);
        return 1;
    }
    size_t count = 1;
    for (size_t i = 0; i < len; i++) count += text[i] == '\n';
    *lines = malloc(count * sizeof **lines);
    for (char *p = text, *end = text + len; *lines && p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        while (e > p && e[-1] == '\r') e--;
        if (!((*lines)[*n] = strndup(p, (size_t)(e - p)))) break;
        (*n)++;
        p = nl ? nl + 1 : end;
    }
    free(text);
    if (*n == 0) return cli_fail("%s: no prompts (one per line)", path);
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
    if (!reqs) return cli_fail("%s", "out of memory");
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
    if (st) rc = cli_fail_err(&err);
    size_t np = 0, ng = 0, nd = 0; /* nd: tokens after each sequence's first (the decode steps) */
    double d0 = 1e300, d1 = 0;       /* first first-token time, last last-token time (scheduler clock) */
    size_t steps = 0;                /* decode steps: the longest sequence's tokens after its first */
    for (size_t i = 0; !st && i < n; i++) {
        np += res[i].n_prompt_ids;
        ng += res[i].n_ids;
        if (res[i].n_ids > 1) {
            nd += res[i].n_ids - 1;
            if (res[i].n_ids - 1 > steps) steps = res[i].n_ids - 1;
            if (res[i].first_token_s < d0) d0 = res[i].first_token_s;
            if (res[i].first_token_s + res[i].decode_s > d1) d1 = res[i].first_token_s + res[i].decode_s;
        }
        if (json) {
            printf("{\"prompt_ids\":");
            cli_print_ids_json(stdout, res[i].prompt_ids, res[i].n_prompt_ids);
            printf(",\"ids\":");
            cli_print_ids_json(stdout, res[i].ids, res[i].n_ids);
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
                "decode %.2f tokens/s, %.2f ms/step | preemptions %lld\n",
                n, np, ng, wall, wall > 0 ? (double)ng / wall : 0.0, nd && d1 > d0 ? (double)nd / (d1 - d0) : 0.0,
                steps ? 1e3 * (d1 - d0) / (double)steps : 0.0, preempt);
    if (!st) free_many(res, n);
    for (size_t i = 0; i < n / (size_t)samples; i++) free(lines[i]);
    free(lines);
    free(reqs);
    return rc;
}

/* A constraint file (--json-schema, --grammar), whole; NULL with a message. */
static char *read_constraint_file(const char *flag, const char *path) {
    char *buf;
    size_t n;
    const char *why;
    int errnum;
    if (read_text_file(path, &buf, &n, &why, &errnum)) {
        fprintf(stderr, "xllm: %s %s: %s\n", flag, path, errnum ? strerror(errnum) : why);
        return NULL;
    }
    if (n > (1u << 20)) { /* the engine's limit on a grammar text */
        fprintf(stderr, "xllm: %s %s: larger than 1 MiB\n", flag, path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* The text of --json-schema / --grammar FILE: lives until the process exits. */
static char *g_constraint_text;

/* --json-schema FILE, --grammar FILE (GBNF), --regex RE, --json-object: one constraint. */
static int constraint_opt(cli_args *a, const char *f, xllm_sampling_params *sp) {
    char **text = &g_constraint_text;
    if (sp->grammar_kind != XLLM_GRAMMAR_NONE)
        return cli_fail("%s", "give one of --json-schema, --grammar, --regex and --json-object");
    if (!strcmp(f, "--json-object")) {
        sp->grammar_kind = XLLM_GRAMMAR_JSON_OBJECT;
        return 0;
    }
    const char *v = cli_arg_value(a, f);
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

/* What `xllm run`'s command line asked for. model_path may point into mbuf,
 * so a run_opts is not copied. */
typedef struct run_opts {
    pp_cli pp;
    chat_opts co;
    xllm_sampling_params sp;
    const char *model_path, *prompt, *ids_arg, *config_path, *prompts_file;
    const char *chat_flag, *profile_path, *kv_dtype, *arith;
    long samples, kv_tokens, threads, ctx;
    int json, chat, quiet, n_given;
    char mbuf[PATH_MAX + 64];
} run_opts;

/* One flag of the sampling parameters' table (xllm_sampling_params_table). */
static int parse_param(cli_args *a, const char *f, const xllm_param_info *row, run_opts *o) {
    float x = 0;
    long v = 0;
    if (row->type == XLLM_PARAM_BOOL) x = 1;
    else if (row->type == XLLM_PARAM_INT && cli_opt_int(a, f, (long)row->min, (long)row->max, &v)) return 1;
    else if (row->type == XLLM_PARAM_FLOAT && cli_opt_float(a, f, row->min, row->max, row->min_open, &x)) return 1;
    xllm_sampling_param_set(&o->sp, row, row->type == XLLM_PARAM_INT ? (double)v : (double)x);
    if (!strcmp(row->name, "max_new_tokens")) o->n_given = 1;
    return 0;
}

/* One flag at a->i (its value taken when it has one): 0, 1 after printing
 * what is wrong. */
static int parse_flag(cli_args *a, const char *f, run_opts *o) {
    int argc = a->argc;
    char **argv = a->argv;
    const xllm_param_info *row;
    if (!strcmp(f, "-m") || !strcmp(f, "--model")) o->model_path = cli_arg_value(a, f);
    else if (!strcmp(f, "--config")) o->config_path = cli_arg_value(a, f);
    else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) o->prompt = cli_arg_value(a, f);
    else if (!strcmp(f, "--ids")) o->ids_arg = cli_arg_value(a, f);
    else if ((row = run_param(f))) return parse_param(a, f, row, o);
    else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) return cli_opt_int(a, f, 1, 1 << 24, &o->ctx);
    else if (!strcmp(f, "--seed")) {
        const char *s = cli_arg_value(a, f);
        unsigned long long x = 0;
        if (!s || cli_seed(f, s, 1, &x, &o->sp.has_seed)) return 1;
        o->sp.seed = x;
    } else if (!strcmp(f, "--stop")) {
        const char *s = cli_arg_value(a, f);
        if (!s) return 1;
        if (o->sp.n_stop >= XLLM_MAX_STOP_STRINGS) return cli_fail("at most %s stop strings", "16");
        o->sp.stop[o->sp.n_stop++] = s;
    } else if (!strcmp(f, "--json-schema") || !strcmp(f, "--grammar") || !strcmp(f, "--regex") ||
               !strcmp(f, "--json-object")) {
        return constraint_opt(a, f, &o->sp);
    } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) return cli_opt_int(a, f, 1, 1024, &o->threads);
    else if (!strcmp(f, "--profile") || !strcmp(f, "--enable-kernel-profiling")) {
        /* the file is optional: the next argument is it unless it is an option */
        o->profile_path = a->i + 1 < argc && argv[a->i + 1][0] != '-' ? argv[++a->i] : DEFAULT_PROFILE_FILE;
    } else if (!strcmp(f, "--json")) o->json = 1;
    else if (!strcmp(f, "--quiet")) o->quiet = 1;
    else if (!strcmp(f, "--chat")) o->chat = 1;
    else if (!strcmp(f, "--prompts")) o->prompts_file = cli_arg_value(a, f);
    else if (!strcmp(f, "--samples")) return cli_opt_int(a, f, 1, XLLM_MAX_SAMPLES, &o->samples);
    else if (!strcmp(f, "--kv-tokens")) return cli_opt_int(a, f, 1, 1L << 40, &o->kv_tokens);
    else if (!strcmp(f, "--kv-dtype")) return !(o->kv_dtype = cli_arg_value(a, f));
    else if (!strcmp(f, "--arith")) return !(o->arith = cli_arg_value(a, f));
    else {
        int r = pp_cli_parse(&o->pp, argc, argv, &a->i);
        if (r < 0) return 1;
        if (r) return 0;
        r = chat_opts_parse(&o->co, argc, argv, &a->i);
        if (r < 0) return 1;
        if (!r) return cli_unknown_option("run", f);
        o->chat_flag = f;
    }
    return 0;
}

/* The arguments into o: 0 to go on, 1 after printing what is wrong, 2 after
 * printing the help. */
static int run_parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->samples = 1;
    o->sp = xllm_sampling_params_default();
    o->sp.temperature = 0.8f;
    o->sp.top_p = 0.9f;
    cli_args a = {argc, 1, argv, 0};
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (cli_is_help(f)) {
            cli_print_help(stdout, "run");
            return 2;
        }
        if (parse_flag(&a, f, o)) return 1;
    }
    if (o->chat_flag && !o->chat) return cli_fail("%s goes with --chat", o->chat_flag);
    if (a.bad) return 1;
    if (o->prompt && o->ids_arg) return cli_fail("%s", "give either -p or --ids, not both");
    if (o->prompts_file && (o->prompt || o->ids_arg || o->chat))
        return cli_fail("%s", "--prompts goes without -p, --ids and --chat");
    if (o->samples > 1 && !o->prompts_file) return cli_fail("%s", "--samples goes with --prompts");
    if (o->chat && o->ids_arg) return cli_fail("%s", "--chat takes -p TEXT or --messages FILE, not --ids");
    if (o->chat && o->prompt && o->co.messages_file)
        return cli_fail("%s", "--chat takes either -p or --messages, not both");
    return 0;
}

/* The model (and, with --config, its engine). Returns 0 with *m loaded, or
 * the exit status: 1 after printing the error, a pipeline worker's status. */
static int run_load(run_opts *o, xllm_model **m_out, xllm_engine **eng_out, double *t_load) {
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    xllm_engine_options eo = xllm_engine_options_default();
    void *config_storage = NULL;
    *m_out = NULL;
    *eng_out = NULL;
    if (o->config_path) { /* the config's model unless -m is given; -t and -c override it too */
        const char *cfg_model = NULL;
        if (xllm_config_load(o->config_path, &eo, &mo, &cfg_model, &config_storage, &err)) return cli_fail_err(&err);
        if (!o->model_path && cfg_model) {
            snprintf(o->mbuf, sizeof o->mbuf, "%s", cfg_model);
            o->model_path = o->mbuf;
        }
    }
    if (!o->model_path && !(o->model_path = cli_default_model(o->mbuf, sizeof o->mbuf)))
        return cli_fail("no model given and the bundled stories260k was not found (next to the binary, in the build's "
                        "source tree or in ./models): give -m MODEL or set XLLM_MODEL; a model is %s",
                        CLI_MODEL_FORMATS);
    if (cli_check_model(o->model_path)) {
        xllm_free(config_storage);
        return 1;
    }
    if (o->threads) mo.n_threads = (int)o->threads;
    if (o->ctx) mo.max_context = (int)o->ctx;
    if (o->kv_tokens) mo.kv_tokens = o->kv_tokens;
    if (o->kv_dtype) mo.kv_dtype = o->kv_dtype;
    if (o->arith) mo.arithmetic = o->arith;
    pp_cli_apply(&o->pp, &mo);
    *t_load = cli_now();
    xllm_model *m = cli_load_model(o->model_path, &mo, &err, o->quiet || o->pp.size > 1);
    int worker_rc = m ? pp_cli_worker(m) : -1;
    if (worker_rc >= 0) {
        xllm_free(config_storage);
        return worker_rc;
    }
    xllm_engine *eng = NULL;
    if (m && o->config_path) {
        eo.verbose = eo.verbose && !o->quiet;
        if (!(eng = xllm_engine_create(m, &eo, &err))) {
            xllm_model_free(m);
            m = NULL;
        }
    }
    xllm_free(config_storage); /* the engine copied what it keeps */
    if (!m) return cli_fail_err(&err);
    *t_load = cli_now() - *t_load;
    *m_out = m;
    *eng_out = eng;
    return 0;
}

/* The request's prompt (text, --ids, or a rendered chat into *ids), and the
 * notes on the context: 0, or 1 after printing the error. */
static int run_prompt(const run_opts *o, xllm_model *m, xllm_request *req, int32_t **ids) {
    chat_opts co = o->co;
    size_t n_prompt = 0;
    int n_ctx = xllm_model_context_size(m);
    int trained = o->ctx > 0 ? trained_context(o->model_path) : 0;
    if (trained > 0 && o->ctx > trained)
        cli_note("-c %ld is beyond the %d positions the model was trained on (max_position_embeddings); what it "
                 "generates past %d may not hold together", o->ctx, trained, trained);
    memset(req, 0, sizeof *req);
    *ids = NULL;
    if (o->chat) {
        /* HF's apply_chat_template(tokenize=True): render with the generation
         * prompt, then tokenize the text without adding special tokens (the
         * template writes BOS itself when the model wants one) */
        if (chat_prompt_ids(m, o->model_path, o->prompt, &co, ids, &req->n_prompt_ids)) return 1;
        req->prompt_ids = *ids;
        n_prompt = req->n_prompt_ids;
    } else if (o->ids_arg) {
        size_t n;
        if (!cli_parse_ids(o->ids_arg, ids, &n))
            return cli_fail("--ids must be a comma-separated list of token ids, got \"%s\"", o->ids_arg);
        req->prompt_ids = *ids;
        req->n_prompt_ids = n;
        n_prompt = n;
    } else {
        req->prompt = o->prompt ? o->prompt : "";
        /* the count the engine will see (the same tokenization), for the notice below */
        const xllm_tokenizer *tok = xllm_model_tokenizer(m);
        int32_t *tids = NULL;
        if (tok && !xllm_tokenize(tok, req->prompt, strlen(req->prompt), 1, &tids, &n_prompt, NULL)) xllm_free(tids);
    }
    /* a silent cap made visible: generation stops when the context is full */
    const xllm_sampling_params *sp = &o->sp;
    if (n_prompt > 0 && n_prompt < (size_t)n_ctx && (size_t)sp->max_new_tokens > (size_t)n_ctx - n_prompt)
        cli_note("%s %d is more than the context leaves: at most %zu tokens will be generated (context %d, prompt %zu "
                 "tokens; -c sets the context)",
                 o->n_given ? "-n" : "the default -n", sp->max_new_tokens, (size_t)n_ctx - n_prompt, n_ctx, n_prompt);
    req->params = *sp;
    return 0;
}

/* The output (the text was streamed already unless --json) and, unless
 * --quiet, the speed line. */
static void run_report(const run_opts *o, const xllm_result *res, const run_clock *clk, double t_end, double t_load) {
    if (o->json) {
        printf("{\"prompt_ids\":");
        cli_print_ids_json(stdout, res->prompt_ids, res->n_prompt_ids);
        printf(",\"ids\":");
        cli_print_ids_json(stdout, res->ids, res->n_ids);
        printf(",\"text\":");
        json_write_string(stdout, res->text, res->text_len);
        printf("}\n");
    } else {
        putchar('\n');
    }
    fflush(stdout);
    if (o->quiet) return;
    /* as llama.cpp's perf lines: prompt tokens/s over the prefill (submission to
     * the first token), generation tokens/s over the decode steps after it, both
     * from the engine's own timestamps (the callbacks may come in bursts) */
    size_t np = res->n_prompt_ids, ng = res->n_ids;
    double pp_s = res->first_token_s > 0 ? res->first_token_s : clk->count ? clk->first - clk->start : t_end - clk->start;
    double tg_s = res->decode_s;
    fprintf(stderr, "xllm: prompt %zu tokens (%.1f tokens/s) | generated %zu tokens", np,
            pp_s > 0 ? (double)np / pp_s : 0.0, ng);
    if (ng > 1 && tg_s > 0) fprintf(stderr, " (%.1f tokens/s)", (double)(ng - 1) / tg_s);
    fprintf(stderr, " | load %.2f s | %s\n", t_load,
            res->finish_reason == XLLM_FINISH_STOP       ? "stopped"
            : ng < (size_t)o->sp.max_new_tokens ? "context full"
                                                : "length");
}

/* Load, generate, report: the exit status. */
static int run_execute(run_opts *o) {
    xllm_model *m;
    xllm_engine *eng;
    double t_load = 0;
    int rc = run_load(o, &m, &eng, &t_load);
    if (rc || !m) return rc;
    if (o->prompts_file) {
        rc = run_many(m, eng, o->prompts_file, &o->sp, (int)o->samples, o->json, o->quiet);
        xllm_engine_free(eng);
        xllm_model_free(m);
        return rc;
    }
    xllm_request req;
    int32_t *ids = NULL;
    if (run_prompt(o, m, &req, &ids)) {
        xllm_engine_free(eng);
        xllm_model_free(m);
        return 1;
    }
    xllm_result *res = NULL;
    xllm_error err;
    if (o->profile_path) {
        xllm_profile_enable(1);
        xllm_profile_reset();
    }
    run_clock clk = {!o->json, cli_now(), 0, 0, 0};
    xllm_status st = eng ? engine_generate_one(eng, &req, stream_cb, &clk, &res, &err)
                         : xllm_generate(m, &req, 1, stream_cb, &clk, &res, &err);
    xllm_engine_free(eng);
    double t_end = cli_now();
    free(ids);
    if (st) {
        xllm_model_free(m);
        if (!o->json && clk.count) putchar('\n');
        return cli_fail_err(&err);
    }
    run_report(o, &res[0], &clk, t_end, t_load);
    xllm_results_free(res, 1);
    xllm_model_free(m);
    return o->profile_path ? profile_write(o->profile_path) : 0;
}

int cmd_run(int argc, char **argv) {
    run_opts *o = calloc(1, sizeof *o);
    if (!o) return cli_fail("%s", "out of memory");
    int rc = run_parse(argc, argv, o);
    rc = rc == 2 ? 0 : rc ? rc : run_execute(o);
    free(o);
    return rc;
}
