/*
 * attention_out.c - `xllm logits --attention FILE`: a token sequence's
 * attention probabilities (xllm_model_attention) written as one JSON object.
 *
 * Layout (docs/ARCHITECTURE.md, "Attention weights"): {"ids": [...],
 * "layers": [...], "heads": H, "average_heads": bool, "probs": P} with
 * P[layer][head][query][key] (H = 1 when averaged), each query's row holding
 * all n keys (0 where masked: later positions, outside a sliding window).
 * JSON so any tool reads it; the size limit is the library's
 * (XLLM_ATTENTION_MAX_BYTES of floats, about 10 bytes of text each).
 */
#include "attention_out.h"
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* "0,2,5" -> layer indices (malloc); 0 when malformed */
static int parse_layers(const char *s, int32_t **out, size_t *n) {
    size_t cap = 8, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > 1000000 || (*end && *end != ',') || k >= 1000000) {
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
    if (!k) { free(v); return 0; }
    *out = v;
    *n = k;
    return 1;
}

int attention_write(xllm_model *m, const int32_t *ids, size_t n, const char *layers_arg, int average,
                    const char *path) {
    int32_t *layers = NULL;
    size_t n_layers = 0;
    if (layers_arg && !parse_layers(layers_arg, &layers, &n_layers))
        return cli_fail("--layers must be a comma-separated list of layer indices, got \"%s\"", layers_arg);
    xllm_error err;
    float *p = NULL;
    int64_t shape[4];
    if (xllm_model_attention(m, ids, n, layers, n_layers, average, &p, shape, &err)) {
        free(layers);
        return cli_fail("%s", err.message);
    }
    size_t L = (size_t)shape[0], H = (size_t)shape[1];
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f) rc = cli_fail("cannot write %s: %s", path, strerror(errno));
    if (f) {
        fprintf(f, "{\"ids\":[");
        for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
        fprintf(f, "],\"layers\":[");
        for (size_t l = 0; l < L; l++) fprintf(f, l ? ",%d" : "%d", layers ? layers[l] : (int)l);
        fprintf(f, "],\"heads\":%zu,\"average_heads\":%s,\"probs\":[", H, average ? "true" : "false");
        const float *v = p;
        for (size_t l = 0; l < L; l++) {
            fputs(l ? ",[" : "[", f);
            for (size_t h = 0; h < H; h++) {
                fputs(h ? ",[" : "[", f);
                for (size_t i = 0; i < n; i++) {
                    fputs(i ? ",[" : "[", f);
                    for (size_t j = 0; j < n; j++, v++) fprintf(f, j ? ",%.9g" : "%.9g", *v);
                    fputc(']', f);
                }
                fputc(']', f);
            }
            fputc(']', f);
        }
        fputs("]}\n", f);
        if (ferror(f)) rc = cli_fail("cannot write %s", path);
        if (fclose(f) != 0 && !rc) rc = cli_fail("cannot write %s", path);
    }
    xllm_free(p);
    free(layers);
    return rc;
}
