/*
 * cmd_logits.c - `xllm logits`: the logits of a token sequence, every
 * position's to a raw float32 file (--out) and the last position's as JSON
 * on stdout; the reference output the conformance and A/B checks compare.
 * --attention FILE adds the attention probabilities (attention_out.c).
 */
#include "xllm.h"
#include "attention_out.h"
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_logits(int argc, char **argv) {
    cli_args a = {argc, 1, argv, 0};
    const char *model_path = NULL, *ids_arg = NULL, *out_path = NULL, *attn_path = NULL, *layers_arg = NULL;
    long threads = 0;
    int average_heads = 0;
    for (; a.i < argc && !a.bad; a.i++) {
        const char *f = argv[a.i];
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = cli_arg_value(&a, f);
        else if (!strcmp(f, "--ids")) ids_arg = cli_arg_value(&a, f);
        else if (!strcmp(f, "--out")) out_path = cli_arg_value(&a, f);
        else if (!strcmp(f, "--attention")) attn_path = cli_arg_value(&a, f);
        else if (!strcmp(f, "--layers")) layers_arg = cli_arg_value(&a, f);
        else if (!strcmp(f, "--average-heads")) average_heads = 1;
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (cli_opt_int(&a, f, 1, 1024, &threads)) return 1;
        } else if (cli_is_help(f)) {
            cli_print_help(stdout, "logits");
            return 0;
        } else return cli_unknown_option("logits", f);
    }
    if (a.bad) return 1;
    if (!model_path) return cli_fail("%s", "logits needs -m MODEL (see 'xllm logits --help')");
    if (!ids_arg) return cli_fail("%s", "logits needs --ids 1,2,3 (see 'xllm logits --help')");
    if (cli_check_model(model_path)) return 1;
    int32_t *ids;
    size_t n;
    if (!cli_parse_ids(ids_arg, &ids, &n) || n == 0) return cli_fail("--ids must be a comma-separated list of token ids, got \"%s\"", ids_arg);
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)threads;
    xllm_model *m = cli_load_model(model_path, &mo, &err, 0);
    if (!m) {
        free(ids);
        return cli_fail_err(&err);
    }
    size_t V = (size_t)xllm_model_vocab_size(m);
    float *logits = malloc(n * V * sizeof(float));
    int rc = 0;
    if (!logits) rc = cli_fail("%s", "out of memory");
    else if (xllm_model_logits(m, ids, n, 1, logits, &err)) rc = cli_fail_err(&err);
    if (!rc && out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float), n * V, f) != n * V) rc = cli_fail("cannot write %s", out_path);
        if (f && fclose(f) != 0 && !rc) rc = cli_fail("cannot write %s", out_path);
    }
    if (!rc && attn_path) rc = attention_write(m, ids, n, layers_arg, average_heads, attn_path);
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
