/*
 * cmd_tokenize.c - `xllm tokenize`: run a tokenizer (a tokenizer.json, a
 * checkpoint directory, or the one inside an .xllm / GGUF file) over a JSONL
 * file of {"text": ...}, one JSON line of ids and decodings per input line
 * (what the tokenizer conformance tests compare with HF's).
 */
#include "xllm.h"
#include "cli.h"
#include "commands.h"
#include "json_text.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
        cli_print_ids_json(stdout, ids, n);
        printf(",\"ids_no_special\":");
        cli_print_ids_json(stdout, ids_ns, n_ns);
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

int cmd_tokenize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, 0};
    const char *model_path = NULL, *jsonl = NULL;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = cli_arg_value(&a, f);
        else if (!strcmp(f, "--jsonl")) jsonl = cli_arg_value(&a, f);
        else if (cli_is_help(f)) {
            cli_print_help(stdout, "tokenize");
            return 0;
        } else return cli_unknown_option("tokenize", f);
    }
    if (a.bad) return 1;
    if (!model_path || !jsonl) return cli_fail("%s", "tokenize needs -m MODEL --jsonl FILE (see 'xllm tokenize --help')");
    struct stat sb;
    if (stat(model_path, &sb) != 0) return cli_check_model(model_path);
    xllm_error err;
    xllm_tokenizer *own = NULL;
    xllm_model *m = NULL;
    const xllm_tokenizer *tok;
    size_t pl = strlen(model_path);
    if (S_ISDIR(sb.st_mode) || (pl >= 5 && !strcmp(model_path + pl - 5, ".json"))) {
        tok = own = xllm_tokenizer_load(model_path, &err);
        if (!tok) return cli_fail_err(&err);
    } else {
        /* an .xllm or GGUF file carries its tokenizer: load the model (small context) for it */
        if (cli_check_model(model_path)) return 1;
        xllm_model_options mo = xllm_model_options_default();
        mo.max_context = 16;
        mo.max_batch_seqs = 1;
        cli_model_options_from_env(&mo);
        if (!(m = xllm_model_load(model_path, &mo, &err))) return cli_fail_err(&err);
        if (!(tok = xllm_model_tokenizer(m))) {
            xllm_model_free(m);
            return cli_fail("%s: the model has no tokenizer", model_path);
        }
    }
    FILE *f = strcmp(jsonl, "-") ? fopen(jsonl, "r") : stdin;
    if (!f) {
        xllm_tokenizer_free(own);
        xllm_model_free(m);
        return cli_fail("%s: cannot open", jsonl);
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
