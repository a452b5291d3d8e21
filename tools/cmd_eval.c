/*
 * cmd_eval.c - `xllm eval`: how well a model predicts a text and, given a
 * reference model (e.g. the f32 original of a quantized model), how far its
 * next-token distributions are from the reference's on the same tokens.
 *
 * The text is tokenized once with the model's tokenizer (the reference's
 * when the model has none) into one token stream (no special tokens), then cut into windows of the context size:
 * each window is the tokenizer's leading special tokens (BOS for llama-style
 * tokenizers) followed by the next ctx - len(BOS) tokens of the stream, and
 * every stream token in it is predicted from the tokens before it in the
 * same window. Windows do not overlap, so each stream token is predicted
 * exactly once. (A tokenizer that adds no BOS gets windows overlapping by one
 * token, so that only the very first token of the text goes unpredicted.)
 *
 * Per predicted token, in double precision over float logits z (model) and
 * r (reference), with numerically stable log-softmax lse(z) = m + log sum
 * exp(z_i - m), m = max z:
 *   nll   = lse(z) - z[target]                    ppl = exp(mean nll)
 *   kld   = sum_i p_i (log p_i - log q_i),  p = softmax(r), q = softmax(z)
 *   agree = argmax r == argmax z (lowest index on ties)
 *
 * --kv-dtype D stores the model's KV cache as D (f32, f16, q8); --ref-kv-dtype
 * D without --ref makes the reference the same model with its KV stored as D
 * (so `-m M --kv-dtype q8 --ref-kv-dtype f32` measures what KV compression
 * costs); a reference's KV is f32 unless --ref-kv-dtype says otherwise.
 *
 * Only the public API (xllm.h) is used.
 */
#include "cli.h"
#include "commands.h"
#include "xllm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define EVAL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EVAL_PRINTF(a, b)
#endif

static EVAL_PRINTF(1, 2) int eval_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("xllm: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}


/* The whole file (or stdin for "-") into *buf (malloc) / *len. 0 on success. */
static int read_text(const char *path, char **buf, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return eval_fail("cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    int rc = 0;
    if (!b) rc = eval_fail("out of memory reading %s", path);
    while (!rc) {
        if (n == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
            if (!nb) {
                rc = eval_fail("out of memory reading %s", path);
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) rc = eval_fail("cannot read %s: %s", path, strerror(errno ? errno : EIO));
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Numerically stable log-sum-exp of z[0..V) in double; *argmax gets the
 * lowest index of the maximum. NaN logits make the result NaN. */
static double log_sum_exp(const float *z, size_t V, size_t *argmax) {
    size_t am = 0;
    for (size_t i = 1; i < V; i++)
        if (z[i] > z[am]) am = i;
    double m = z[am], s = 0;
    for (size_t i = 0; i < V; i++) s += exp((double)z[i] - m);
    *argmax = am;
    return m + log(s);
}

/* KL(p || q) for p = softmax(r), q = softmax(z), given their log-sum-exps.
 * Terms with p_i == 0 (underflow) contribute 0. Rounding can make a result
 * from (nearly) equal distributions a hair below 0: clamped to 0. */
static double kl_divergence(const float *r, double lse_r, const float *z, double lse_z, size_t V) {
    double kl = 0;
    for (size_t i = 0; i < V; i++) {
        double lp = (double)r[i] - lse_r;
        double p = exp(lp);
        if (p > 0) kl += p * (lp - ((double)z[i] - lse_z));
    }
    return kl < 0 ? 0 : kl;
}

typedef struct eval_stats {
    size_t n;           /* predicted tokens */
    double nll_sum;     /* sum of -log q(target) */
    double kld_sum, kld_max;
    size_t kld_max_at;  /* stream index of the token with the largest KLD */
    size_t agree;       /* tokens where the top-1 predictions agree */
} eval_stats;

static void progress(size_t done, size_t total) {
    enum { W = 32 };
    char bar[W + 1];
    size_t fill = total ? done * W / total : W;
    for (size_t i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
    bar[W] = 0;
    fprintf(stderr, "\reval [%s] %zu/%zu windows", bar, done, total);
    fflush(stderr);
}

static void print_json_number(double x) {
    if (isfinite(x)) printf("%.10g", x);
    else printf("null"); /* JSON has no inf/nan */
}

/* Find where the plain token stream sits inside the tokenization with special
 * tokens: the length of the leading special tokens, or -1. */
static long special_prefix_len(const int32_t *sp, size_t n_sp, const int32_t *ns, size_t n_ns) {
    for (size_t k = 0; k + n_ns <= n_sp; k++)
        if (n_ns == 0 || !memcmp(sp + k, ns, n_ns * sizeof *ns)) return (long)k;
    return -1;
}

int cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *ref_path = NULL, *text_path = NULL, *kv_dtype = NULL, *ref_kv_dtype = NULL;
    long threads = 0, ctx_arg = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            cli_print_help(stdout, "eval");
            return 0;
        } else if (!strcmp(f, "--json")) {
            json = 1;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model") || !strcmp(f, "--ref") || !strcmp(f, "--text") ||
                   !strcmp(f, "-t") || !strcmp(f, "--threads") || !strcmp(f, "--ctx") || !strcmp(f, "--kv-dtype") ||
                   !strcmp(f, "--ref-kv-dtype")) {
            if (!has_value) return eval_fail("%s needs a value", f);
            const char *v = argv[++i];
            if (!strcmp(f, "--ref")) ref_path = v;
            else if (!strcmp(f, "--kv-dtype")) kv_dtype = v;
            else if (!strcmp(f, "--ref-kv-dtype")) ref_kv_dtype = v;
            else if (!strcmp(f, "--text")) text_path = v;
            else if (!strcmp(f, "--ctx")) {
                if (cli_int(f, v, 1, INT_MAX, &ctx_arg)) return 1;
            } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
                if (cli_int(f, v, 1, 1024, &threads)) return 1;
            } else model_path = v;
        } else {
            return cli_unknown_option("eval", f);
        }
    }
    if (!model_path) return eval_fail("eval needs -m MODEL (see 'xllm eval --help')");
    if (!text_path) return eval_fail("eval needs --text FILE (see 'xllm eval --help')");
    if (!kv_dtype && getenv("XLLM_KV_DTYPE") && *getenv("XLLM_KV_DTYPE")) kv_dtype = getenv("XLLM_KV_DTYPE");
    int show_kv = kv_dtype || ref_kv_dtype;
    if (ref_kv_dtype && !ref_path) ref_path = model_path; /* the same model, its KV stored otherwise */
    if (cli_check_model(model_path) || (ref_path && cli_check_model(ref_path))) return 1;

    int rc = 0;
    char *text = NULL;
    size_t text_len = 0;
    xllm_model *m = NULL, *r = NULL;
    int32_t *sp = NULL, *ns = NULL, *win = NULL;
    size_t n_sp = 0, n_ns = 0;
    float *lm = NULL, *lr = NULL;
    xllm_error err;
    eval_stats st = {0};

    if (read_text(text_path, &text, &text_len)) return 1;
    if (text_len == 0) {
        rc = eval_fail("%s is empty: nothing to evaluate", text_path);
        goto done;
    }

    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)threads;
    mo.max_batch_seqs = 1; /* one sequence at a time: keep the KV pool small */
    mo.kv_dtype = kv_dtype;
    if (!(m = cli_load_model(model_path, &mo, &err, 0))) {
        rc = eval_fail("%s", err.message);
        goto done;
    }
    const xllm_tokenizer *tok = xllm_model_tokenizer(m);
    const char *tok_from = model_path;
    if (ref_path) {
        xllm_model_options ro = mo;
        ro.kv_dtype = ref_kv_dtype ? ref_kv_dtype : "f32"; /* a reference is exact unless asked */
        if (!(r = cli_load_model(ref_path, &ro, &err, 0))) {
            rc = eval_fail("%s", err.message);
            goto done;
        }
        int32_t vm = xllm_model_vocab_size(m), vr = xllm_model_vocab_size(r);
        const xllm_tokenizer *rtok = xllm_model_tokenizer(r);
        int32_t tm = tok ? xllm_tokenizer_vocab_size(tok) : -1, tr = rtok ? xllm_tokenizer_vocab_size(rtok) : -1;
        if (vm != vr || (tok && rtok && tm != tr)) {
            rc = eval_fail("vocabularies differ: %s has %d tokens (tokenizer %d), the reference %s has %d (tokenizer %d)",
                           model_path, (int)vm, (int)tm, ref_path, (int)vr, (int)tr);
            goto done;
        }
        if (!tok && rtok) { /* same vocabulary: the reference's tokenizer gives the same ids */
            tok = rtok;
            tok_from = ref_path;
        }
    }
    if (!tok) {
        rc = eval_fail("%s has no tokenizer: eval needs one (or a --ref model that has it)", model_path);
        goto done;
    }

    if (xllm_tokenize(tok, text, text_len, 1, &sp, &n_sp, &err) ||
        xllm_tokenize(tok, text, text_len, 0, &ns, &n_ns, &err)) {
        rc = eval_fail("%s: %s", text_path, err.message);
        goto done;
    }
    if (n_ns == 0) {
        rc = eval_fail("%s holds no tokens: nothing to evaluate", text_path);
        goto done;
    }
    long pl = special_prefix_len(sp, n_sp, ns, n_ns);
    if (pl < 0) {
        rc = eval_fail("%s: the tokenizer's special tokens do not just surround the text's tokens", text_path);
        goto done;
    }
    size_t P = (size_t)pl, first = P == 0 ? 1 : 0; /* without BOS the first token has no context */
    if (n_ns <= first) {
        rc = eval_fail("%s is too short: %zu token(s), nothing to predict", text_path, n_ns);
        goto done;
    }

    size_t max_ctx = (size_t)xllm_model_context_size(m);
    if (r && (size_t)xllm_model_context_size(r) < max_ctx) max_ctx = (size_t)xllm_model_context_size(r);
    size_t W = ctx_arg ? (size_t)ctx_arg : max_ctx;
    if (W > max_ctx) {
        rc = eval_fail("--ctx %zu exceeds the context of %zu tokens", W, max_ctx);
        goto done;
    }
    if (W < P + 1 + first) {
        rc = eval_fail("a window of %zu tokens is too small: it needs at least %zu (%zu special + 1)", W,
                       P + 1 + first, P + first);
        goto done;
    }
    size_t C = W - P; /* stream tokens per window */
    size_t V = (size_t)xllm_model_vocab_size(m);
    win = malloc(W * sizeof *win);
    lm = malloc(W * V * sizeof *lm);
    if (r) lr = malloc(W * V * sizeof *lr);
    if (!win || !lm || (r && !lr)) {
        rc = eval_fail("out of memory: %zu x %zu logits", W, V);
        goto done;
    }
    memcpy(win, sp, P * sizeof *win);

    size_t n_windows = 0;
    for (size_t tgt = first; tgt < n_ns; n_windows++) {
        size_t s = tgt - first;
        tgt = s + C < n_ns ? s + C : n_ns;
    }
    int bar = isatty(STDERR_FILENO);
    st.kld_max = 0;
    size_t w = 0;
    for (size_t tgt = first; tgt < n_ns; w++) {
        if (bar) progress(w, n_windows);
        size_t s = tgt - first; /* stream index of the window's first token */
        size_t end = s + C < n_ns ? s + C : n_ns;
        size_t L = P + (end - s);
        memcpy(win + P, ns + s, (end - s) * sizeof *win);
        if (xllm_model_logits(m, win, L, 1, lm, &err) || (r && xllm_model_logits(r, win, L, 1, lr, &err))) {
            if (bar) fputc('\n', stderr);
            rc = eval_fail("%s", err.message);
            goto done;
        }
        for (size_t j = tgt; j < end; j++) {
            size_t row = P + (j - s) - 1; /* logits that predict stream token j */
            const float *z = lm + row * V;
            size_t am_z, am_r;
            double lse_z = log_sum_exp(z, V, &am_z);
            st.nll_sum += lse_z - (double)z[ns[j]];
            if (r) {
                const float *rz = lr + row * V;
                double lse_r = log_sum_exp(rz, V, &am_r);
                double kl = kl_divergence(rz, lse_r, z, lse_z, V);
                st.kld_sum += kl;
                if (kl > st.kld_max || isnan(kl)) {
                    if (!isnan(st.kld_max)) st.kld_max_at = j;
                    st.kld_max = kl;
                }
                st.agree += am_z == am_r;
            }
            st.n++;
        }
        tgt = end;
    }
    if (bar) {
        progress(n_windows, n_windows);
        fputc('\n', stderr);
    }

    double mean_nll = st.nll_sum / (double)st.n, ppl = exp(mean_nll);
    double kld_mean = st.kld_sum / (double)st.n, agree = (double)st.agree / (double)st.n;
    if (json) {
        printf("{\"tokens\":%zu,", st.n);
        if (show_kv) { /* only when a KV storage was asked for: the plain object stays as it was */
            printf("\"kv_dtype\":\"%s\",", kv_dtype ? kv_dtype : "f32");
            if (r) printf("\"ref_kv_dtype\":\"%s\",", ref_kv_dtype ? ref_kv_dtype : "f32");
        }
        printf("\"ppl\":");
        print_json_number(ppl);
        if (r) {
            printf(",\"kld_mean\":");
            print_json_number(kld_mean);
            printf(",\"kld_max\":");
            print_json_number(st.kld_max);
            printf(",\"top1_agree\":");
            print_json_number(agree);
        }
        printf("}\n");
    } else {
        if (show_kv) printf("model        %s (KV cache %s)\n", model_path, kv_dtype ? kv_dtype : "f32");
        else printf("model        %s\n", model_path);
        if (tok_from != model_path) printf("tokenizer    %s's (the model has none)\n", tok_from);
        printf("text         %s: %zu tokens predicted, %zu window(s) of up to %zu tokens (%zu special + %zu)\n",
               text_path, st.n, n_windows, W, P, C);
        printf("perplexity   %.6f  (mean NLL %.6f nats/token)\n", ppl, mean_nll);
        if (r) {
            if (show_kv) printf("reference    %s (KV cache %s)\n", ref_path, ref_kv_dtype ? ref_kv_dtype : "f32");
            else printf("reference    %s\n", ref_path);
            printf("KLD mean     %.9f  (KL(ref || model), nats/token)\n", kld_mean);
            printf("KLD max      %.9f  (at token %zu of the stream)\n", st.kld_max, st.kld_max_at);
            printf("top-1 agree  %.4f %%  (%zu of %zu tokens)\n", 100.0 * agree, st.agree, st.n);
        }
    }
    if (fflush(stdout) != 0) rc = eval_fail("cannot write the output: %s", strerror(errno));

done:
    free(lm);
    free(lr);
    free(win);
    xllm_free(sp);
    xllm_free(ns);
    xllm_model_free(r);
    xllm_model_free(m);
    free(text);
    return rc;
}
