/*
 * cmd_convert.c - `xllm convert` (HF checkpoint -> .xllm) and `xllm info`
 * (what a model file holds). Both are thin layers over xllm_convert and
 * xllm_model_info; the progress bar appears only on a terminal.
 */
#include "commands.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "xllm: error: %s%s\n", what, detail ? detail : "");
    return 1;
}

/* A one-line bar redrawn in place: "converting [#####.....]  52%". */
static void progress_bar(void *user, const char *stage, double f) {
    int *last = user;
    int pct = (int)(f * 100.0 + 0.5);
    if (pct == *last) return;
    *last = pct;
    char bar[41];
    int fill = pct * 40 / 100;
    for (int i = 0; i < 40; i++) bar[i] = i < fill ? '#' : '.';
    bar[40] = 0;
    fprintf(stderr, "\r%-12s [%s] %3d%%", stage, bar, pct);
    if (pct >= 100) fputc('\n', stderr);
    fflush(stderr);
}

int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *out = NULL, *to = "xllm";
    xllm_convert_options o = xllm_convert_options_default();
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "-o") || !strcmp(f, "--out")) { if (!v) return fail(f, " needs a value"); out = v; i++; }
        else if (!strcmp(f, "--dtype")) { if (!v) return fail(f, " needs a value"); o.dtype = v; i++; }
        else if (!strcmp(f, "--group-size")) {
            if (!v) return fail(f, " needs a value");
            char *end;
            long g = strtol(v, &end, 10);
            if (*end || g <= 0) return fail("--group-size must be 32, 64 or 128, got ", v);
            o.group_size = (int)g;
            i++;
        } else if (!strcmp(f, "--policy")) { if (!v) return fail(f, " needs a value"); o.policy = v; i++; }
        else if (!strcmp(f, "--calib")) { if (!v) return fail(f, " needs a value"); o.calib_file = v; i++; }
        else if (!strcmp(f, "--calib-tokens")) { if (!v) return fail(f, " needs a value"); o.calib_tokens = atoi(v); i++; }
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) { if (!v) return fail(f, " needs a value"); o.n_threads = atoi(v); i++; }
        else if (!strcmp(f, "--no-fuse")) o.no_fuse = 1;
        else if (!strcmp(f, "--to")) { if (!v) return fail(f, " needs a value"); to = v; i++; }
        else if (f[0] == '-') return fail("unknown option for convert: ", f);
        else if (!src) src = f;
        else return fail("unexpected argument: ", f);
    }
    if (!src || !out) return fail("usage: xllm convert SRC -o OUT [--dtype f32|f16|bf16|q8|q4|q4m|q4_k|q5_k|q6_k|q4_k_m|q5_k_m] "
                                  "[--group-size N] [--policy ...] [--calib FILE] [--no-fuse] [--to xllm|gguf]", NULL);
    if (!strcmp(to, "gguf")) o.to_gguf = 1;
    else if (strcmp(to, "xllm")) return fail("--to must be xllm or gguf, got ", to);
    int last = -1;
    if (isatty(2)) {
        o.progress = progress_bar;
        o.progress_user = &last;
    }
    xllm_error err;
    if (xllm_convert(src, out, &o, &err)) {
        if (last >= 0) fputc('\n', stderr);
        return fail(err.message, NULL);
    }
    if (last >= 0 && last < 100) fputc('\n', stderr);
    return 0;
}

/* xllm info --plan: load the model (which runs the planner) and print its choices. */
static int print_plan(const char *path, int json) {
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.max_batch_seqs = 1;
    o.max_context = 256;
    xllm_model *m = xllm_model_load(path, &o, &err);
    if (!m) return fail(err.message, NULL);
    char *text;
    if (xllm_model_plan(m, &text, &err)) {
        xllm_model_free(m);
        return fail(err.message, NULL);
    }
    xllm_model_free(m);
    cJSON *root = cJSON_Parse(text);
    if (json || !root) {
        printf("%s\n", text);
        xllm_free(text);
        cJSON_Delete(root);
        return 0;
    }
    xllm_free(text);
    const cJSON *level = cJSON_GetObjectItem(root, "kernel_level"), *planned = cJSON_GetObjectItem(root, "planned");
    if (cJSON_IsFalse(planned)) {
        printf("not planned (XLLM_PLAN=0)\n");
        cJSON_Delete(root);
        return 0;
    }
    printf("kernel level %s, %d threads, planned in %.1f ms\n", cJSON_IsString(level) ? level->valuestring : "?",
           cJSON_GetObjectItem(root, "threads")->valueint, cJSON_GetObjectItem(root, "planning_ms")->valuedouble);
    printf("%-14s %-5s %5s   threads [kernel variant] chosen for T = 1 / 2-8 / 9-64 / >64   (measured us per thread "
           "count; per variant)\n", "shape", "type", "count");
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(root, "matmul")) {
        printf("%-14s %-5s %5d  ", cJSON_GetObjectItem(s, "shape")->valuestring, cJSON_GetObjectItem(s, "type")->valuestring,
               cJSON_GetObjectItem(s, "matrices")->valueint);
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(s, "buckets")) {
            const cJSON *th = cJSON_GetObjectItem(b, "threads"), *us = cJSON_GetObjectItem(b, "us");
            if (!th) {
                printf("  default");
                continue;
            }
            printf("  %d (", th->valueint);
            const cJSON *u;
            int first = 1;
            cJSON_ArrayForEach(u, us) {
                printf(first ? "%s:%.0f" : " %s:%.0f", u->string, u->valuedouble);
                first = 0;
            }
            printf(")");
            const cJSON *kv = cJSON_GetObjectItem(b, "kernel");
            if (cJSON_IsString(kv)) {
                printf(" [%s (", kv->valuestring);
                first = 1;
                cJSON_ArrayForEach(u, cJSON_GetObjectItem(b, "variant_us")) {
                    printf(first ? "%s:%.0f" : " %s:%.0f", u->string, u->valuedouble);
                    first = 0;
                }
                printf(")]");
            }
        }
        printf("\n");
    }
    printf("attention: %s\n", cJSON_GetObjectItem(root, "attention")->valuestring);
    cJSON_Delete(root);
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, plan = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--plan")) plan = 1;
        else if (argv[i][0] == '-') return fail("unknown option for info: ", argv[i]);
        else path = argv[i];
    }
    if (!path) return fail("usage: xllm info MODEL [--json] [--plan]", NULL);
    if (plan) return print_plan(path, json);
    xllm_error err;
    char *text;
    if (xllm_model_info(path, &text, &err)) return fail(err.message, NULL);
    if (json) {
        printf("%s\n", text);
        xllm_free(text);
        return 0;
    }
    cJSON *root = cJSON_Parse(text);
    xllm_free(text);
    if (!root) return fail("internal: bad info JSON", NULL);
    const cJSON *meta = cJSON_GetObjectItem(root, "metadata");
    printf("%s (%s)\n", path, cJSON_GetObjectItem(root, "format")->valuestring);
    const cJSON *cfg = cJSON_GetObjectItem(meta, "config");
    if (!cfg) cfg = meta;
    const cJSON *mt = cJSON_GetObjectItem(cfg, "model_type");
    if (cJSON_IsString(mt)) printf("model_type   %s\n", mt->valuestring);
    const char *keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = cJSON_GetObjectItem(cfg, keys[i]);
        if (cJSON_IsNumber(v)) printf("%-20s %d\n", keys[i], v->valueint);
    }
    const cJSON *pol = cJSON_GetObjectItem(meta, "policy");
    if (pol) {
        printf("policy      ");
        const cJSON *e;
        cJSON_ArrayForEach(e, pol) printf(" %s=%s", e->string, e->valuestring);
        printf("\n");
    }
    const cJSON *fused = cJSON_GetObjectItem(meta, "fused");
    if (fused) printf("fused        %s\n", cJSON_IsTrue(fused) ? "yes (qkv, gate_up)" : "no");
    const cJSON *cal = cJSON_GetObjectItem(meta, "calibration");
    if (cal) {
        char *c = cJSON_PrintUnformatted(cal);
        printf("calibration  %s\n", c);
        free(c);
    }
    const cJSON *prov = cJSON_GetObjectItem(meta, "provenance");
    if (prov) {
        char *c = cJSON_PrintUnformatted(prov);
        printf("provenance   %s\n", c);
        free(c);
    }
    printf("%-56s %-8s %-16s %12s\n", "tensor", "type", "shape", "bytes");
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors")) {
        char shape[64] = "";
        size_t o = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(t, "shape"))
            o += (size_t)snprintf(shape + o, sizeof shape - o, o ? "x%.0f" : "%.0f", d->valuedouble);
        printf("%-56s %-8s %-16s %12.0f\n", cJSON_GetObjectItem(t, "name")->valuestring,
               cJSON_GetObjectItem(t, "type")->valuestring, shape, cJSON_GetObjectItem(t, "bytes")->valuedouble);
    }
    printf("total %.1f MB\n", cJSON_GetObjectItem(root, "total_bytes")->valuedouble / 1e6);
    cJSON_Delete(root);
    return 0;
}
