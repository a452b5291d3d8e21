/* pp_cli.c - the pipeline-parallel command-line options (see pp_cli.h). */
#include "pp_cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int num(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "xllm: error: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

int pp_cli_parse(pp_cli *o, int argc, char **argv, int *i) {
    const char *f = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int r;
    if (!strcmp(f, "--pp-stats")) return o->stats = 1;
    if (!strcmp(f, "--pp-test-hang")) return o->fail_hang = 1;
    if (!strcmp(f, "--pp")) r = num(f, v, 1, 4096, &o->size);
    else if (!strcmp(f, "--pp-microbatches")) r = num(f, v, 1, 64, &o->microbatches);
    else if (!strcmp(f, "--pp-timeout")) {
        int s = 0;
        r = num(f, v, 1, 86400, &s);
        o->timeout_ms = s * 1000;
    } else if (!strcmp(f, "--pp-test-fail-after")) r = num(f, v, 1, 1 << 30, &o->fail_after);
    else if (!strcmp(f, "--pp-layers")) {
        if (!v) {
            fprintf(stderr, "xllm: error: %s needs a value\n", f);
            return -1;
        }
        o->layers = v;
        r = 1;
    } else return 0;
    if (r > 0) (*i)++;
    return r;
}

static void on_term(int sig) {
    static const char msg[] = "xllm: error: pipeline: stopped by a signal (mpirun ends the job when a rank fails)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

void pp_cli_apply(const pp_cli *o, xllm_model_options *mo) {
    mo->pp_size = o->size;
    mo->pp_layers = o->layers;
    mo->pp_microbatches = o->microbatches;
    mo->pp_timeout_ms = o->timeout_ms;
    mo->pp_stats = o->stats;
    mo->pp_test_fail_after = o->fail_after;
    mo->pp_test_fail_hang = o->fail_hang;
    if (o->size > 1) signal(SIGTERM, on_term);
}

int pp_cli_worker(xllm_model *m) {
    if (xllm_model_pp_rank(m) == 0) return -1;
    xllm_error err;
    xllm_status st = xllm_model_pp_worker(m, &err);
    xllm_model_free(m);
    if (st) {
        fprintf(stderr, "xllm: error: %s\n", err.message);
        return 1;
    }
    return 0;
}
