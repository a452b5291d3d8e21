/*
 * cmd_synth.c - `xllm synth`: random-weight models of real shapes, written as
 * .xllm, GGUF and/or an HF directory from the same weights (xllm_synth).
 */
#include "cli.h"
#include "commands.h"
#include "xllm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *detail) { return cli_fail("%s%s", what, detail ? detail : ""); }

/* " out.xllm (1.2 MB)" appended to buf */
static void add_output(char *buf, size_t cap, const char *path, int is_dir) {
    struct stat st;
    char size[32];
    size_t o = strlen(buf);
    if (is_dir) {
        char p[4352];
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        snprintf(buf + o, cap - o, "%s%s/ (%s)", o ? ", " : "", path,
                 cli_size(stat(p, &st) == 0 ? (double)st.st_size : 0, size, sizeof size));
    } else {
        snprintf(buf + o, cap - o, "%s%s (%s)", o ? ", " : "", path,
                 cli_size(stat(path, &st) == 0 ? (double)st.st_size : 0, size, sizeof size));
    }
}

int cmd_synth(int argc, char **argv) {
    xllm_synth_options o = xllm_synth_options_default();
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(f, "--shape") || !strcmp(f, "--dtype") || !strcmp(f, "-o") || !strcmp(f, "--out") ||
                    !strcmp(f, "--gguf") || !strcmp(f, "--gguf-type") || !strcmp(f, "--hf") || !strcmp(f, "--seed") ||
                    !strcmp(f, "-t") || !strcmp(f, "--threads");
        if (!takes) {
            if (cli_is_help(f)) {
                cli_print_help(stdout, "synth");
                return 0;
            }
            return cli_unknown_option("synth", f);
        }
        if (!v) return cli_needs_value(f);
        i++;
        if (!strcmp(f, "--shape")) o.shape = v;
        else if (!strcmp(f, "--dtype")) o.dtype = v;
        else if (!strcmp(f, "-o") || !strcmp(f, "--out")) o.out = v;
        else if (!strcmp(f, "--gguf")) o.gguf_out = v;
        else if (!strcmp(f, "--gguf-type")) o.gguf_type = v;
        else if (!strcmp(f, "--hf")) o.hf_dir = v;
        else if (!strcmp(f, "--seed")) {
            int has;
            unsigned long long x;
            if (cli_seed(f, v, 0, &x, &has)) return 1;
            o.seed = x;
        } else {
            long x;
            if (cli_int(f, v, 0, 4096, &x)) return 1;
            o.n_threads = (int)x;
        }
    }
    if (!o.shape) return cli_fail("synth needs --shape (%s; see 'xllm synth --help')", xllm_synth_shapes());
    if (!o.out && !o.gguf_out && !o.hf_dir)
        return cli_fail("synth needs an output: -o FILE.xllm, --gguf FILE.gguf or --hf DIR (see 'xllm synth --help')");
    cli_progress prog;
    cli_progress_init(&prog, "synth");
    o.progress = cli_progress_cb;
    o.progress_user = &prog;
    cli_remove_temps_on_interrupt();
    xllm_error err;
    if (xllm_synth(&o, &err)) {
        cli_progress_end(&prog);
        return fail(err.message, NULL);
    }
    cli_progress_end(&prog);
    char outs[1024] = "";
    if (o.out) add_output(outs, sizeof outs, o.out, 0);
    if (o.gguf_out) add_output(outs, sizeof outs, o.gguf_out, 0);
    if (o.hf_dir) add_output(outs, sizeof outs, o.hf_dir, 1);
    fprintf(stderr, "xllm synth: %s, %s, seed %llu: wrote %s in %.1f s\n", o.shape, o.dtype ? o.dtype : "f32",
            (unsigned long long)o.seed, outs, cli_now() - prog.t0);
    return 0;
}
