/*
 * cmd_synth.c - `xllm synth`: random-weight models of real shapes, written as
 * .xllm, GGUF and/or an HF directory from the same weights (xllm_synth).
 */
#include "commands.h"
#include "xllm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "xllm: error: %s%s\n", what, detail ? detail : "");
    return 1;
}

static void progress_bar(void *user, const char *stage, double f) {
    int *last = user;
    int pct = (int)(f * 100.0);
    if (pct == *last) return;
    *last = pct;
    fprintf(stderr, "\r%s %3d%%", stage, pct);
    if (pct >= 100) fputc('\n', stderr);
    fflush(stderr);
}

#define SYNTH_USAGE                                                                                     \
    "usage: xllm synth --shape SHAPE [--dtype f32|f16|q8|q4] [-o FILE.xllm] [--gguf FILE.gguf "         \
    "[--gguf-type F32|F16|Q8_0|Q4_0|Q4_K|Q5_K|Q6_K|Q4_K_M|Q5_K_M]] [--hf DIR] [--seed N] [-t THREADS]"

int cmd_synth(int argc, char **argv) {
    xllm_synth_options o = xllm_synth_options_default();
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(f, "--shape") || !strcmp(f, "--dtype") || !strcmp(f, "-o") || !strcmp(f, "--out") ||
                    !strcmp(f, "--gguf") || !strcmp(f, "--gguf-type") || !strcmp(f, "--hf") || !strcmp(f, "--seed") ||
                    !strcmp(f, "-t") || !strcmp(f, "--threads");
        if (!takes) {
            if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
                printf("%s\nshapes: %s\n", SYNTH_USAGE, xllm_synth_shapes());
                return 0;
            }
            return fail(f[0] == '-' ? "unknown option for synth: " : "unexpected argument: ", f);
        }
        if (!v) return fail(f, " needs a value");
        i++;
        if (!strcmp(f, "--shape")) o.shape = v;
        else if (!strcmp(f, "--dtype")) o.dtype = v;
        else if (!strcmp(f, "-o") || !strcmp(f, "--out")) o.out = v;
        else if (!strcmp(f, "--gguf")) o.gguf_out = v;
        else if (!strcmp(f, "--gguf-type")) o.gguf_type = v;
        else if (!strcmp(f, "--hf")) o.hf_dir = v;
        else {
            char *end;
            errno = 0;
            unsigned long long x = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') return fail("expected a non-negative integer for ", f);
            if (!strcmp(f, "--seed")) o.seed = x;
            else if (x > 4096) return fail("too many threads: ", v);
            else o.n_threads = (int)x;
        }
    }
    if (!o.shape) {
        fprintf(stderr, "xllm: error: synth needs --shape (%s)\n", xllm_synth_shapes());
        return 1;
    }
    if (!o.out && !o.gguf_out && !o.hf_dir) return fail(SYNTH_USAGE, NULL);
    int last = -1;
    if (isatty(2)) {
        o.progress = progress_bar;
        o.progress_user = &last;
    }
    xllm_error err;
    if (xllm_synth(&o, &err)) {
        if (last >= 0 && last < 100) fputc('\n', stderr);
        return fail(err.message, NULL);
    }
    return 0;
}
