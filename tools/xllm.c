/*
 * xllm.c - the `xllm` command: one binary, git-style subcommands, built only
 * on the public API in xllm.h.
 *
 *   xllm run      generate text (streams, or --json)
 *   xllm logits   logits of a token sequence
 *   xllm tokenize run a tokenizer over a JSONL file
 *   xllm template render the model's chat template (chat_cli.c)
 *
 * Every failure prints "xllm: error: ..." on stderr and exits with status 1.
 */
#include "xllm.h"
#include "chat_cli.h"
#include "commands.h"
#include "profile_report.h"
#include "json_text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *fmt, const char *a) {
    fprintf(stderr, "xllm: error: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 1;
}

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

static int parse_long(const char *s, long lo, long hi, long *out) {
    if (!s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_float(const char *s, float *out) {
    if (!s) return 0;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
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

/* Default model: $XLLM_MODEL, else models/stories260k next to the build
 * (<exe>/../models/stories260k), else ./models/stories260k. */
static const char *default_model(char *buf, size_t cap) {
    const char *env = getenv("XLLM_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    struct stat st;
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        const char *rel[] = {"/../models/stories260k", "/../../models/stories260k", "/models/stories260k"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(buf, cap, "%s%s", dir, rel[i]);
            if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) return buf;
        }
    }
    return "models/stories260k";
}

static void print_ids_json(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputc(']', f);
}


/* ------------------------------------------------------------------ run */

static int stream_cb(void *user, size_t req, int32_t token, const char *text, size_t len) {
    (void)user; (void)req; (void)token;
    if (len) {
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

static int cmd_run(int argc, char **argv) {
    args a = {argc, 1, argv, 0};
    char mbuf[PATH_MAX + 64];
    const char *model_path = NULL, *prompt = NULL, *ids_arg = NULL;
    int json = 0, chat = 0;
    const char *chat_flag = NULL, *profile_path = NULL;
    chat_opts co;
    memset(&co, 0, sizeof co);
    long threads = 0, v;
    xllm_sampling_params sp = xllm_sampling_params_default();
    sp.temperature = 0.8f;
    sp.top_p = 0.9f;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = arg_value(&a, f);
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) prompt = arg_value(&a, f);
        else if (!strcmp(f, "--ids")) ids_arg = arg_value(&a, f);
        else if (!strcmp(f, "-n") || !strcmp(f, "--max-new-tokens")) {
            if (!parse_long(arg_value(&a, f), 0, 1 << 30, &v)) return fail("%s needs a non-negative integer", f);
            sp.max_new_tokens = (int)v;
        } else if (!strcmp(f, "--temp") || !strcmp(f, "--temperature")) {
            if (!parse_float(arg_value(&a, f), &sp.temperature)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--top-k")) {
            if (!parse_long(arg_value(&a, f), 0, INT_MAX, &v)) return fail("%s needs a non-negative integer", f);
            sp.top_k = (int)v;
        } else if (!strcmp(f, "--top-p")) {
            if (!parse_float(arg_value(&a, f), &sp.top_p)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--min-p")) {
            if (!parse_float(arg_value(&a, f), &sp.min_p)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--repetition-penalty")) {
            if (!parse_float(arg_value(&a, f), &sp.repetition_penalty)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--presence-penalty")) {
            if (!parse_float(arg_value(&a, f), &sp.presence_penalty)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--frequency-penalty")) {
            if (!parse_float(arg_value(&a, f), &sp.frequency_penalty)) return fail("%s needs a number", f);
        } else if (!strcmp(f, "--seed")) {
            const char *s = arg_value(&a, f);
            char *end;
            if (!s) return 1;
            errno = 0;
            unsigned long long x = strtoull(s, &end, 10);
            if (errno || end == s || *end) return fail("%s needs a non-negative integer", f);
            sp.seed = x;
            sp.has_seed = 1;
        } else if (!strcmp(f, "--stop")) {
            const char *s = arg_value(&a, f);
            if (!s) return 1;
            if (sp.n_stop >= XLLM_MAX_STOP_STRINGS) return fail("at most %s stop strings", "16");
            sp.stop[sp.n_stop++] = s;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!parse_long(arg_value(&a, f), 1, 1024, &threads)) return fail("%s needs a positive integer", f);
        } else if (!strcmp(f, "--profile")) {
            if (!(profile_path = arg_value(&a, f))) return 1;
        } else if (!strcmp(f, "--json")) json = 1;
        else if (!strcmp(f, "--chat")) chat = 1;
        else if (!strcmp(f, "--ignore-eos")) sp.ignore_eos = 1;
        else {
            int r = chat_opts_parse(&co, argc, argv, &a.i);
            if (r < 0) return 1;
            if (!r) return fail("unknown option for run: %s", f);
            chat_flag = f;
        }
    }
    if (chat_flag && !chat) return fail("%s goes with --chat", chat_flag);
    if (a.bad) return 1;
    if (prompt && ids_arg) return fail("%s", "give either -p or --ids, not both");
    if (chat && ids_arg) return fail("%s", "--chat takes -p TEXT or --messages FILE, not --ids");
    if (chat && prompt && co.messages_file) return fail("%s", "--chat takes either -p or --messages, not both");
    if (!model_path) model_path = default_model(mbuf, sizeof mbuf);

    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)threads;
    xllm_model *m = xllm_model_load(model_path, &mo, &err);
    if (!m) return fail_err(&err);

    xllm_request req;
    memset(&req, 0, sizeof req);
    int32_t *ids = NULL;
    if (chat) {
        /* HF's apply_chat_template(tokenize=True): render with the generation
         * prompt, then tokenize the text without adding special tokens (the
         * template writes BOS itself when the model wants one) */
        if (chat_prompt_ids(m, model_path, prompt, &co, &ids, &req.n_prompt_ids)) {
            xllm_model_free(m);
            return 1;
        }
        req.prompt_ids = ids;
    } else if (ids_arg) {
        size_t n;
        if (!parse_ids(ids_arg, &ids, &n)) {
            xllm_model_free(m);
            return fail("--ids must be a comma-separated list of token ids, got \"%s\"", ids_arg);
        }
        req.prompt_ids = ids;
        req.n_prompt_ids = n;
    } else {
        req.prompt = prompt ? prompt : "";
    }
    req.params = sp;
    xllm_result *res = NULL;
    if (profile_path) {
        xllm_profile_enable(1);
        xllm_profile_reset();
    }
    xllm_status st = xllm_generate(m, &req, 1, json ? NULL : stream_cb, NULL, &res, &err);
    free(ids);
    if (st) {
        xllm_model_free(m);
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
            if (!parse_long(arg_value(&a, f), 1, 1024, &threads)) return fail("%s needs a positive integer", f);
        } else return fail("unknown option for logits: %s", f);
    }
    if (a.bad) return 1;
    if (!model_path) return fail("%s", "logits needs -m PATH");
    if (!ids_arg) return fail("%s", "logits needs --ids 1,2,3");
    int32_t *ids;
    size_t n;
    if (!parse_ids(ids_arg, &ids, &n) || n == 0) return fail("--ids must be a comma-separated list of token ids, got \"%s\"", ids_arg);
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)threads;
    xllm_model *m = xllm_model_load(model_path, &mo, &err);
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
        else return fail("unknown option for tokenize: %s", f);
    }
    if (a.bad) return 1;
    if (!model_path || !jsonl) return fail("%s", "tokenize needs -m PATH --jsonl FILE");
    xllm_error err;
    xllm_tokenizer *tok = xllm_tokenizer_load(model_path, &err);
    if (!tok) return fail_err(&err);
    FILE *f = strcmp(jsonl, "-") ? fopen(jsonl, "r") : stdin;
    if (!f) {
        xllm_tokenizer_free(tok);
        return fail("cannot open %s", jsonl);
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
    xllm_tokenizer_free(tok);
    return rc;
}

/* ----------------------------------------------------------------- main */

static void usage(FILE *f) {
    fprintf(f,
            "xllm %s - LLM inference engine\n"
            "usage:\n"
            "  xllm run [-m PATH] [-p TEXT | --ids 1,2,3] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "           [--min-p P] [--repetition-penalty R] [--presence-penalty X] [--frequency-penalty X]\n"
            "           [--seed S] [--stop STR]... [--ignore-eos] [-t THREADS] [--json] [--profile FILE.json]\n"
            "           [--chat [--messages FILE.json] [--var NAME=JSON]...]   (-p is the user message)\n"
            "  xllm logits -m PATH --ids 1,2,3 [--out FILE] [-t THREADS]\n"
            "  xllm tokenize -m PATH --jsonl FILE\n"
            "  xllm template -m PATH --messages FILE.json [--add-generation-prompt] [--tools FILE.json]\n"
            "                [--var NAME=JSON]... [--template NAME] [--chat-template FILE.jinja]\n"
            "  xllm eval -m MODEL --text FILE [--ref MODEL] [--json] [-t THREADS] [--ctx N]\n"
            "  xllm convert SRC(dir or .gguf) -o OUT [--dtype f32|f16|bf16|q8|q4|q4m] [--group-size 32|64|128]\n"
            "           [--policy embed=q8,attn=q4,mlp=q4,lm_head=q8,norm=f32] [--calib FILE] [--no-fuse] [--to xllm|gguf]\n"
            "  xllm info MODEL [--json] [--plan]\n"
            "  xllm synth --shape tinyllama-1.1b|llama3.2-1b|qwen3-0.6b|small-120m|tiny-test[-qwen3|-llama3] [--dtype f32|f16|q8|q4]\n"
            "           [-o FILE.xllm] [--gguf FILE.gguf [--gguf-type F32|F16|Q8_0|Q4_0]] [--hf DIR] [--seed N] [-t THREADS]\n"
            "  xllm bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r 3] [--json] [--profile FILE.json]\n",
            XLLM_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) return cmd_run(argc, argv);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("xllm %s\n", XLLM_VERSION);
        return 0;
    }
    usage(stderr);
    return fail("unknown command \"%s\"", cmd);
}
