/*
 * cmd_convert.c - `xllm convert` (HF checkpoint -> .xllm) and `xllm info`
 * (what a model file holds). Both are thin layers over xllm_convert and
 * xllm_model_info. Progress goes to stderr (cli.c: a bar on a terminal,
 * stage lines in a log), then a summary line: output, size, types, time.
 */
#include "cli.h"
#include "commands.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *detail) { return cli_fail("%s%s", what, detail ? detail : ""); }

static int parse_count(const char *f, const char *v, long lo, long hi, int *out) {
    long x;
    if (cli_int(f, v, lo, hi, &x)) return 1;
    *out = (int)x;
    return 0;
}

/* "q4 x 14, q8 x 2, f32 x 11": the stored types of a model's tensors, most
 * common first, and its fallbacks (tensors stored otherwise than their class's
 * type) as notes. Returns the total tensor bytes, < 0 when unreadable. */
static double describe_types(const char *path, char *buf, size_t cap) {
    char *text;
    xllm_error err;
    buf[0] = 0;
    if (xllm_model_info(path, &text, &err)) return -1;
    cJSON *root = cJSON_Parse(text);
    xllm_free(text);
    if (!root) return -1;
    const char *names[16];
    int counts[16], n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors")) {
        const cJSON *nm = cJSON_GetObjectItem(t, "name"), *ty = cJSON_GetObjectItem(t, "type");
        if (!cJSON_IsString(nm) || !cJSON_IsString(ty) || !strncmp(nm->valuestring, "__blob__/", 9)) continue;
        int k = 0;
        while (k < n && strcmp(names[k], ty->valuestring)) k++;
        if (k == n) {
            if (n == 16) continue;
            names[n] = ty->valuestring;
            counts[n++] = 0;
        }
        counts[k]++;
    }
    size_t o = 0;
    for (int done = 0; done < n; done++) { /* most common first */
        int best = -1;
        for (int k = 0; k < n; k++)
            if (counts[k] > 0 && (best < 0 || counts[k] > counts[best])) best = k;
        if (best < 0) break;
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%s x %d", o ? ", " : "", names[best], counts[best]);
        counts[best] = -counts[best];
    }
    /* one note per kind of fallback: "5 tensors (model.layers.0.mlp.down_proj.weight, ...) stored as f16 ..." */
    const cJSON *fb = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metadata"), "fallbacks");
    const char *why[16], *first[16];
    int nwhy = 0, count[16];
    const cJSON *e;
    cJSON_ArrayForEach(e, fb) {
        if (!cJSON_IsString(e)) continue;
        int k = 0;
        while (k < nwhy && strcmp(why[k], e->valuestring)) k++;
        if (k == nwhy) {
            if (nwhy == 16) continue;
            why[nwhy] = e->valuestring;
            first[nwhy] = e->string;
            count[nwhy++] = 0;
        }
        count[k]++;
    }
    for (int k = 0; k < nwhy; k++) {
        if (count[k] == 1) cli_note("%s %s", first[k], why[k]);
        else cli_note("%d tensors (%s and %d more) %s", count[k], first[k], count[k] - 1, why[k]);
    }
    const cJSON *tb = cJSON_GetObjectItem(root, "total_bytes");
    double total = cJSON_IsNumber(tb) ? tb->valuedouble : 0;
    cJSON_Delete(root);
    return total;
}

int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *out = NULL, *to = "xllm";
    xllm_convert_options o = xllm_convert_options_default();
    xllm_model_options calib_mo = xllm_model_options_default(); /* calibration's forward passes */
    cli_model_options_from_env(&calib_mo);
    o.calib_model_options = &calib_mo;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(f)) {
            cli_print_help(stdout, "convert");
            return 0;
        } else if (!strcmp(f, "--no-fuse")) {
            o.no_fuse = 1;
            continue;
        } else if (f[0] != '-') {
            if (src) return cli_unknown_option("convert", f);
            src = f;
            continue;
        }
        int takes = !strcmp(f, "-o") || !strcmp(f, "--out") || !strcmp(f, "--dtype") || !strcmp(f, "--group-size") ||
                    !strcmp(f, "--policy") || !strcmp(f, "--calib") || !strcmp(f, "--calib-tokens") ||
                    !strcmp(f, "-t") || !strcmp(f, "--threads") || !strcmp(f, "--to");
        if (!takes) return cli_unknown_option("convert", f);
        if (!v) return cli_needs_value(f);
        i++;
        if (!strcmp(f, "-o") || !strcmp(f, "--out")) out = v;
        else if (!strcmp(f, "--dtype")) o.dtype = v;
        else if (!strcmp(f, "--group-size")) {
            if (parse_count(f, v, 1, 1 << 20, &o.group_size)) return 1;
        } else if (!strcmp(f, "--policy")) o.policy = v;
        else if (!strcmp(f, "--calib")) o.calib_file = v;
        else if (!strcmp(f, "--calib-tokens")) {
            if (parse_count(f, v, 1, 1 << 30, &o.calib_tokens)) return 1;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (parse_count(f, v, 1, 1024, &o.n_threads)) return 1;
        } else to = v;
    }
    if (!src || !out) return cli_fail("convert needs SRC and -o OUT (see 'xllm convert --help')");
    if (!strcmp(to, "gguf")) o.to_gguf = 1;
    else if (strcmp(to, "xllm")) return fail("--to must be xllm or gguf, got ", to);
    if (cli_check_model(src)) return 1;
    cli_progress prog;
    cli_progress_init(&prog, "convert");
    o.progress = cli_progress_cb;
    o.progress_user = &prog;
    cli_remove_temps_on_interrupt();
    xllm_error err;
    if (xllm_convert(src, out, &o, &err)) {
        cli_progress_end(&prog);
        return fail(err.message, NULL);
    }
    cli_progress_end(&prog);
    char types[512], size[32];
    struct stat st;
    double file_bytes = stat(out, &st) == 0 ? (double)st.st_size : 0;
    describe_types(out, types, sizeof types);
    fprintf(stderr, "xllm convert: wrote %s (%s, %s%s%s) in %.1f s\n", out, o.to_gguf ? "GGUF" : ".xllm",
            cli_size(file_bytes, size, sizeof size), types[0] ? "; " : "", types, cli_now() - prog.t0);
    return 0;
}

/* xllm info --plan: load the model (which runs the planner) and print its choices. */
static int print_plan(const char *path, int json) {
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.max_batch_seqs = 1;
    o.max_context = 256;
    if (cli_check_model(path)) return 1;
    xllm_model *m = cli_load_model(path, &o, &err, 0);
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
    const cJSON *bk = cJSON_GetObjectItem(root, "backend");
    if (cJSON_IsString(bk) && strcmp(bk->valuestring, "cpu")) { /* another backend's report: as it is */
        char *f = cJSON_Print(root);
        if (f) printf("%s\n", f);
        cJSON_free(f);
        cJSON_Delete(root);
        return 0;
    }
    const cJSON *level = cJSON_GetObjectItem(root, "kernel_level"), *planned = cJSON_GetObjectItem(root, "planned");
    if (cJSON_IsFalse(planned)) {
        printf("not planned (XLLM_PLAN=0)\n");
        cJSON_Delete(root);
        return 0;
    }
    printf("kernel level %s, %d threads, planned in %.1f ms", cJSON_IsString(level) ? level->valuestring : "?",
           cJSON_GetObjectItem(root, "threads")->valueint, cJSON_GetObjectItem(root, "planning_ms")->valuedouble);
    const cJSON *pcf = cJSON_GetObjectItem(root, "plan_cache"), *ncached = cJSON_GetObjectItem(root, "cached_shapes");
    if (cJSON_IsString(pcf) && *pcf->valuestring)
        printf("; %d shapes from the plan cache %s", cJSON_IsNumber(ncached) ? ncached->valueint : 0, pcf->valuestring);
    printf("\n(auto: the default work-size rule, kept unless another choice is faster by 15%% in each of 3 rounds)\n");
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
            if (th->valueint) printf("  %d (", th->valueint);
            else printf("  auto (");
            if (cJSON_IsTrue(cJSON_GetObjectItem(s, "cached"))) printf("cached");
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
    int json = 0, plan = 0, devices = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--devices")) devices = 1;
        else if (!strcmp(argv[i], "--plan")) plan = 1;
        else if (cli_is_help(argv[i])) {
            cli_print_help(stdout, "info");
            return 0;
        } else if (argv[i][0] == '-' || path) return cli_unknown_option("info", argv[i]);
        else path = argv[i];
    }
    if (devices && !path) { /* what the backends see: xllm info --devices */
        xllm_error e;
        char *t;
        if (xllm_backend_devices(&t, &e)) return fail(e.message, NULL);
        fputs(t, stdout);
        xllm_free(t);
        return 0;
    }
    if (!path) return cli_fail("info needs MODEL or --devices (see 'xllm info --help')");
    if (cli_check_model(path)) return 1;
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
    const cJSON *fb;
    cJSON_ArrayForEach(fb, cJSON_GetObjectItem(meta, "fallbacks"))
        if (cJSON_IsString(fb)) printf("fallback     %s: %s\n", fb->string, fb->valuestring);
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
