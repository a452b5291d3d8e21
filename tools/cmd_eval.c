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
#include "read_text.h"
#include "xllm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The whole file (or stdin for "-") into *buf (malloc) / *len. 0 on success. */
static int read_text(const char *path, char **buf, size_t *len) {
    const char *why;
    int errnum;
    if (!read_text_file(path, buf, len, &why, &errnum)) return 0;
    if (!errnum) return cli_fail("%s reading %s", why, path);
    return cli_fail("%s %s: %s", why, path, strerror(errnum));
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

/* What the command line asks for. */
typedef struct eval_args {
    const char *model_path, *ref_path, *text_path, *kv_dtype, *ref_kv_dtype;
    long threads, ctx_arg;
    int json, show_kv;
} eval_args;

/* What a run holds: the models, the token streams, the windows' buffers. */
typedef struct eval_run {
    xllm_model *m, *r;
    const xllm_tokenizer *tok;
    const char *tok_from;   /* whose tokenizer (the model's, else the reference's) */
    int32_t *sp, *ns, *win; /* tokens with / without special tokens; one window */
    size_t n_sp, n_ns;
    size_t P, first;        /* leading special tokens; 1 when the first token has no context */
    size_t W, C, V;         /* window, stream tokens per window, vocabulary */
    size_t n_windows;
    float *lm, *lr;         /* logits of a window: model, reference */
} eval_run;

/* Parse: -1 to go on, else the exit code (0 after --help). */
static int eval_parse(int argc, char **argv, eval_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            cli_print_help(stdout, "eval");
            return 0;
        } else if (!strcmp(f, "--json")) {
            a->json = 1;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model") || !strcmp(f, "--ref") || !strcmp(f, "--text") ||
                   !strcmp(f, "-t") || !strcmp(f, "--threads") || !strcmp(f, "--ctx") || !strcmp(f, "--kv-dtype") ||
                   !strcmp(f, "--ref-kv-dtype")) {
            if (!has_value) return cli_fail("%s needs a value", f);
            const char *v = argv[++i];
            if (!strcmp(f, "--ref")) a->ref_path = v;
            else if (!strcmp(f, "--kv-dtype")) a->kv_dtype = v;
            else if (!strcmp(f, "--ref-kv-dtype")) a->ref_kv_dtype = v;
            else if (!strcmp(f, "--text")) a->text_path = v;
            else if (!strcmp(f, "--ctx")) {
                if (cli_int(f, v, 1, INT_MAX, &a->ctx_arg)) return 1;
            } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
                if (cli_int(f, v, 1, 1024, &a->threads)) return 1;
            } else a->model_path = v;
        } else {
            return cli_unknown_option("eval", f);
        }
    }
    if (!a->model_path) return cli_fail("eval needs -m MODEL (see 'xllm eval --help')");
    if (!a->text_path) return cli_fail("eval needs --text FILE (see 'xllm eval --help')");
    if (!a->kv_dtype && getenv("XLLM_KV_DTYPE") && *getenv("XLLM_KV_DTYPE")) a->kv_dtype = getenv("XLLM_KV_DTYPE");
    a->show_kv = a->kv_dtype || a->ref_kv_dtype;
    if (a->ref_kv_dtype && !a->ref_path) a->ref_path = a->model_path; /* the same model, its KV stored otherwise */
    if (cli_check_model(a->model_path) || (a->ref_path && cli_check_model(a->ref_path))) return 1;
    return -1;
}

/* The model, the reference, and whose tokenizer to use. 0 or 1 (reported). */
static int eval_load(const eval_args *a, eval_run *e) {
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = (int)a->threads;
    mo.max_batch_seqs = 1; /* one sequence at a time: keep the KV pool small */
    mo.kv_dtype = a->kv_dtype;
    if (!(e->m = cli_load_model(a->model_path, &mo, &err, 0))) return cli_fail("%s", err.message);
    e->tok = xllm_model_tokenizer(e->m);
    e->tok_from = a->model_path;
    if (a->ref_path) {
        xllm_model_options ro = mo;
        ro.kv_dtype = a->ref_kv_dtype ? a->ref_kv_dtype : "f32"; /* a reference is exact unless asked */
        if (!(e->r = cli_load_model(a->ref_path, &ro, &err, 0))) return cli_fail("%s", err.message);
        int32_t vm = xllm_model_vocab_size(e->m), vr = xllm_model_vocab_size(e->r);
        const xllm_tokenizer *tok = e->tok, *rtok = xllm_model_tokenizer(e->r);
        int32_t tm = tok ? xllm_tokenizer_vocab_size(tok) : -1, tr = rtok ? xllm_tokenizer_vocab_size(rtok) : -1;
        if (vm != vr || (tok && rtok && tm != tr))
            return cli_fail("vocabularies differ: %s has %d tokens (tokenizer %d), the reference %s has %d (tokenizer %d)",
                             a->model_path, (int)vm, (int)tm, a->ref_path, (int)vr, (int)tr);
        if (!tok && rtok) { /* same vocabulary: the reference's tokenizer gives the same ids */
            e->tok = rtok;
            e->tok_from = a->ref_path;
        }
    }
    if (!e->tok) return cli_fail("%s has no tokenizer: eval needs one (or a --ref model that has it)", a->model_path);
    return 0;
}

/* The text's token streams and the windows over them. 0 or 1 (reported). */
static int eval_plan(const eval_args *a, eval_run *e, const char *text, size_t text_len) {
    xllm_error err;
    if (xllm_tokenize(e->tok, text, text_len, 1, &e->sp, &e->n_sp, &err) ||
        xllm_tokenize(e->tok, text, text_len, 0, &e->ns, &e->n_ns, &err))
        return cli_fail("%s: %s", a->text_path, err.message);
    if (e->n_ns == 0) return cli_fail("%s holds no tokens: nothing to evaluate", a->text_path);
    long pl = special_prefix_len(e->sp, e->n_sp, e->ns, e->n_ns);
    if (pl < 0) return cli_fail("%s: the tokenizer's special tokens do not just surround the text's tokens", a->text_path);
    size_t P = (size_t)pl, first = P == 0 ? 1 : 0; /* without BOS the first token has no context */
    if (e->n_ns <= first) return cli_fail("%s is too short: %zu token(s), nothing to predict", a->text_path, e->n_ns);
    size_t max_ctx = (size_t)xllm_model_context_size(e->m);
    if (e->r && (size_t)xllm_model_context_size(e->r) < max_ctx) max_ctx = (size_t)xllm_model_context_size(e->r);
    size_t W = a->ctx_arg ? (size_t)a->ctx_arg : max_ctx;
    if (W > max_ctx) return cli_fail("--ctx %zu exceeds the context of %zu tokens", W, max_ctx);
    if (W < P + 1 + first)
        return cli_fail("a window of %zu tokens is too small: it needs at least %zu (%zu special + 1)", W,
                         P + 1 + first, P + first);
    size_t C = W - P; /* stream tokens per window */
    size_t V = (size_t)xllm_model_vocab_size(e->m);
    e->win = malloc(W * sizeof *e->win);
    e->lm = malloc(W * V * sizeof *e->lm);
    if (e->r) e->lr = malloc(W * V * sizeof *e->lr);
    if (!e->win || !e->lm || (e->r && !e->lr)) return cli_fail("out of memory: %zu x %zu logits", W, V);
    memcpy(e->win, e->sp, P * sizeof *e->win);
    e->n_windows = 0;
    for (size_t tgt = first; tgt < e->n_ns; e->n_windows++) {
        size_t s = tgt - first;
        tgt = s + C < e->n_ns ? s + C : e->n_ns;
    }
    e->P = P, e->first = first, e->W = W, e->C = C, e->V = V;
    return 0;
}

/* The predictions of stream tokens [tgt, end) of the window starting at s. */
static void eval_score(const eval_run *e, size_t s, size_t tgt, size_t end, eval_stats *st) {
    size_t V = e->V;
    for (size_t j = tgt; j < end; j++) {
        size_t row = e->P + (j - s) - 1; /* logits that predict stream token j */
        const float *z = e->lm + row * V;
        size_t am_z, am_r;
        double lse_z = log_sum_exp(z, V, &am_z);
        st->nll_sum += lse_z - (double)z[e->ns[j]];
        if (e->r) {
            const float *rz = e->lr + row * V;
            double lse_r = log_sum_exp(rz, V, &am_r);
            double kl = kl_divergence(rz, lse_r, z, lse_z, V);
            st->kld_sum += kl;
            if (kl > st->kld_max || isnan(kl)) {
                if (!isnan(st->kld_max)) st->kld_max_at = j;
                st->kld_max = kl;
            }
            st->agree += am_z == am_r;
        }
        st->n++;
    }
}

/* Execute: every window through the model (and the reference). 0 or 1 (reported). */
static int eval_windows(eval_run *e, eval_stats *st) {
    xllm_error err;
    int bar = isatty(STDERR_FILENO);
    st->kld_max = 0;
    size_t w = 0, P = e->P;
    for (size_t tgt = e->first; tgt < e->n_ns; w++) {
        if (bar) progress(w, e->n_windows);
        size_t s = tgt - e->first; /* stream index of the window's first token */
        size_t end = s + e->C < e->n_ns ? s + e->C : e->n_ns;
        size_t L = P + (end - s);
        memcpy(e->win + P, e->ns + s, (end - s) * sizeof *e->win);
        if (xllm_model_logits(e->m, e->win, L, 1, e->lm, &err) ||
            (e->r && xllm_model_logits(e->r, e->win, L, 1, e->lr, &err))) {
            if (bar) fputc('\n', stderr);
            return cli_fail("%s", err.message);
        }
        eval_score(e, s, tgt, end, st);
        tgt = end;
    }
    if (bar) {
        progress(e->n_windows, e->n_windows);
        fputc('\n', stderr);
    }
    return 0;
}

/* Report: JSON or the text table. 0 or 1 (stdout could not be written). */
static int eval_report(const eval_args *a, const eval_run *e, const eval_stats *st) {
    double mean_nll = st->nll_sum / (double)st->n, ppl = exp(mean_nll);
    double kld_mean = st->kld_sum / (double)st->n, agree = (double)st->agree / (double)st->n;
    const char *kv = a->kv_dtype ? a->kv_dtype : "f32", *ref_kv = a->ref_kv_dtype ? a->ref_kv_dtype : "f32";
    if (a->json) {
        printf("{\"tokens\":%zu,", st->n);
        if (a->show_kv) { /* only when a KV storage was asked for: the plain object stays as it was */
            printf("\"kv_dtype\":\"%s\",", kv);
            if (e->r) printf("\"ref_kv_dtype\":\"%s\",", ref_kv);
        }
        printf("\"ppl\":");
        print_json_number(ppl);
        if (e->r) {
            printf(",\"kld_mean\":");
            print_json_number(kld_mean);
            printf(",\"kld_max\":");
            print_json_number(st->kld_max);
            printf(",\"top1_agree\":");
            print_json_number(agree);
        }
        printf("}\n");
    } else {
        if (a->show_kv) printf("model        %s (KV cache %s)\n", a->model_path, kv);
        else printf("model        %s\n", a->model_path);
        if (e->tok_from != a->model_path) printf("tokenizer    %s's (the model has none)\n", e->tok_from);
        printf("text         %s: %zu tokens predicted, %zu window(s) of up to %zu tokens (%zu special + %zu)\n",
               a->text_path, st->n, e->n_windows, e->W, e->P, e->C);
        printf("perplexity   %.6f  (mean NLL %.6f nats/token)\n", ppl, mean_nll);
        if (e->r) {
            if (a->show_kv) printf("reference    %s (KV cache %s)\n", a->ref_path, ref_kv);
            else printf("reference    %s\n", a->ref_path);
            printf("KLD mean     %.9f  (KL(ref || model), nats/token)\n", kld_mean);
            printf("KLD max      %.9f  (at token %zu of the stream)\n", st->kld_max, st->kld_max_at);
            printf("top-1 agree  %.4f %%  (%zu of %zu tokens)\n", 100.0 * agree, st->agree, st->n);
        }
    }
    if (fflush(stdout) != 0) return cli_fail("cannot write the output: %s", strerror(errno));
    return 0;
}

int cmd_eval(int argc, char **argv) {
    eval_args a;
    int rc = eval_parse(argc, argv, &a);
    if (rc >= 0) return rc;
    char *text = NULL;
    size_t text_len = 0;
    if (read_text(a.text_path, &text, &text_len)) return 1;
    eval_run e;
    memset(&e, 0, sizeof e);
    eval_stats st = {0};
    if (text_len == 0) rc = cli_fail("%s is empty: nothing to evaluate", a.text_path);
    else rc = eval_load(&a, &e) || eval_plan(&a, &e, text, text_len) || eval_windows(&e, &st) || eval_report(&a, &e, &st);
    free(e.lm);
    free(e.lr);
    free(e.win);
    xllm_free(e.sp);
    xllm_free(e.ns);
    xllm_model_free(e.r);
    xllm_model_free(e.m);
    free(text);
    return rc;
}
