/* calibrate.c - collecting E[x^2] per input channel over sample text (see calibrate.h). */
#include "convert/calibrate.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

#define CALIB_WINDOW 512
/* Second-moment matrices for GPTQ cost cols^2 doubles each and cols^2/2
 * multiply-adds per token: collected only within these bounds. */
#define COV_MAX_COLS 4096
#define COV_BUDGET_BYTES ((size_t)1 << 30)

static void observe(void *ctx, int layer, observe_point p, int expert, const float *x, int T, int cols) {
    calib_stats *s = ctx;
    double *acc;
    int64_t *count;
    if (expert == -1) {
        size_t k = (size_t)layer * OBS_COUNT + p;
        if (cols != s->cols[p]) return;
        acc = s->sum_sq[k];
        count = &s->count[k];
        double *cov = s->cov ? s->cov[k] : NULL;
        if (cov)
            for (int t = 0; t < T; t++) {
                const float *r = x + (size_t)t * cols;
                for (int i = 0; i < cols; i++) {
                    double xi = r[i], *row = cov + (size_t)i * cols;
                    for (int j = i; j < cols; j++) row[j] += xi * r[j];
                }
            }
    } else {
        int slot = expert >= 0 ? expert : s->n_experts; /* -2: shared expert */
        size_t k = (size_t)layer * (size_t)(s->n_experts + 1) + (size_t)slot;
        if (!s->exp_sum_sq || cols != (expert >= 0 ? s->expert_cols : s->shared_cols)) return;
        acc = s->exp_sum_sq[k];
        count = &s->exp_count[k];
    }
    for (int t = 0; t < T; t++) {
        const float *r = x + (size_t)t * cols;
        for (int c = 0; c < cols; c++) acc[c] += (double)r[c] * r[c];
    }
    *count += T;
}

static xllm_status alloc_stats(calib_stats *s, const model_config *c, xllm_error *err) {
    memset(s, 0, sizeof *s);
    s->n_layers = c->n_layers;
    s->n_experts = c->n_experts;
    s->cols[OBS_ATTN_IN] = c->hidden;
    s->cols[OBS_O_IN] = c->n_heads * (c->mla_dim ? c->v_head_dim : c->head_dim); /* MLA: o_proj takes the heads' v */
    s->cols[OBS_MLP_IN] = c->hidden;
    s->cols[OBS_DOWN_IN] = c->intermediate;
    s->expert_cols = c->moe_intermediate;
    s->shared_cols = c->shared_expert_intermediate;
    size_t n = (size_t)c->n_layers * OBS_COUNT;
    s->sum_sq = mem_calloc(n, sizeof(double *));
    s->count = mem_calloc(n, sizeof(int64_t));
    if (!s->sum_sq || !s->count) goto oom;
    for (size_t k = 0; k < n; k++)
        if (!(s->sum_sq[k] = mem_calloc((size_t)s->cols[k % OBS_COUNT], sizeof(double)))) goto oom;
    size_t cov_bytes = 0;
    for (size_t k = 0; k < n; k++) cov_bytes += (size_t)s->cols[k % OBS_COUNT] * (size_t)s->cols[k % OBS_COUNT] * sizeof(double);
    if (cov_bytes <= COV_BUDGET_BYTES) {
        s->cov = mem_calloc(n, sizeof(double *));
        if (!s->cov) goto oom;
        for (size_t k = 0; k < n; k++) {
            size_t cc = (size_t)s->cols[k % OBS_COUNT];
            if (cc <= COV_MAX_COLS && !(s->cov[k] = mem_calloc(cc * cc, sizeof(double)))) goto oom;
        }
    }
    if (c->n_experts > 0) {
        size_t ne = (size_t)c->n_layers * (size_t)(c->n_experts + 1);
        s->exp_sum_sq = mem_calloc(ne, sizeof(double *));
        s->exp_count = mem_calloc(ne, sizeof(int64_t));
        if (!s->exp_sum_sq || !s->exp_count) goto oom;
        for (size_t k = 0; k < ne; k++) {
            int shared = (int)(k % (size_t)(c->n_experts + 1)) == c->n_experts;
            int cols = shared ? c->shared_expert_intermediate : c->moe_intermediate;
            if (cols > 0 && !(s->exp_sum_sq[k] = mem_calloc((size_t)cols, sizeof(double)))) goto oom;
        }
    }
    return XLLM_OK;
oom:
    calib_free(s);
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory for calibration statistics");
}

void calib_free(calib_stats *s) {
    if (s->sum_sq)
        for (size_t k = 0; k < (size_t)s->n_layers * OBS_COUNT; k++) xllm_free(s->sum_sq[k]);
    if (s->cov)
        for (size_t k = 0; k < (size_t)s->n_layers * OBS_COUNT; k++) xllm_free(s->cov[k]);
    xllm_free(s->cov);
    if (s->exp_sum_sq)
        for (size_t k = 0; k < (size_t)s->n_layers * (size_t)(s->n_experts + 1); k++) xllm_free(s->exp_sum_sq[k]);
    xllm_free(s->sum_sq);
    xllm_free(s->count);
    xllm_free(s->exp_sum_sq);
    xllm_free(s->exp_count);
    memset(s, 0, sizeof *s);
}

int calib_hessian(const calib_stats *s, int layer, observe_point p, double *out, int cols) {
    size_t k = (size_t)layer * OBS_COUNT + p;
    if (!s->cov || !s->cov[k] || cols != s->cols[p] || s->count[k] == 0) return 0;
    const double *c = s->cov[k];
    double inv = 1.0 / (double)s->count[k];
    for (int i = 0; i < cols; i++)
        for (int j = i; j < cols; j++) out[(size_t)i * cols + j] = out[(size_t)j * cols + i] = c[(size_t)i * cols + j] * inv;
    return 1;
}

int calib_importance(const calib_stats *s, int layer, observe_point p, int expert, float *out, int cols) {
    const double *acc;
    int64_t n;
    if (expert == -1) {
        size_t k = (size_t)layer * OBS_COUNT + p;
        if (cols != s->cols[p]) return 0;
        acc = s->sum_sq[k];
        n = s->count[k];
    } else {
        if (!s->exp_sum_sq) return 0;
        size_t k = (size_t)layer * (size_t)(s->n_experts + 1) + (size_t)(expert >= 0 ? expert : s->n_experts);
        acc = s->exp_sum_sq[k];
        n = s->exp_count[k];
        if (!acc) return 0;
    }
    if (n == 0) return 0;
    for (int c = 0; c < cols; c++) out[c] = (float)(acc[c] / (double)n) + 1e-12f;
    return 1;
}

xllm_status calib_collect(const char *src, const char *text_file, int max_tokens, int n_threads,
                          const xllm_model_options *mo, xllm_progress_fn progress, void *progress_user, calib_stats *out, xllm_error *err) {
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    tokenizer *tok = NULL;
    model *m = NULL;
    xllm_status st = file_read_all(text_file, &text, &len, err);
    if (st) goto done;
    model_load_options lo = {0};
    lo.n_threads = n_threads;
    lo.max_tokens = CALIB_WINDOW;
    if (mo) {
        lo.backend = mo->backend, lo.cpu_level = mo->cpu_level, lo.attention = mo->attention;
        lo.no_fuse = mo->no_fuse, lo.no_repack = mo->no_repack;
    }
    m = model_load_ex(src, &lo, err);
    if (!m) {
        st = err ? err->code : XLLM_ERR_FORMAT;
        goto done;
    }
    tok = m->tok_json ? tokenizer_load_text(m->tok_json, m->tok_json_len, m->tok_config, m->tok_config_len, src, err)
                      : tokenizer_load(src, err);
    if (!tok) {
        st = err ? err->code : XLLM_ERR_FORMAT;
        err_prefix(err, "calibration needs the model's tokenizer");
        goto done;
    }
    if ((st = tokenizer_encode(tok, text, len, 0, &ids, &n_ids, err))) goto done;
    if (n_ids < 16) {
        st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "%s: too little calibration text (%zu tokens)", text_file, n_ids);
        goto done;
    }
    if (max_tokens > 0 && n_ids > (size_t)max_tokens) n_ids = (size_t)max_tokens;
    int window = m->cfg.max_positions < CALIB_WINDOW ? m->cfg.max_positions : CALIB_WINDOW;
    if ((st = alloc_stats(out, &m->cfg, err))) goto done;
    m->observe = observe;
    m->observe_ctx = out;
    float *logits = mem_malloc_array((size_t)m->cfg.vocab, sizeof(float));
    int32_t *win = mem_malloc_array((size_t)window, sizeof(int32_t));
    if (!logits || !win) {
        xllm_free(logits);
        xllm_free(win);
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    int32_t bos = m->cfg.bos_id;
    for (size_t pos = 0; pos < n_ids && !st;) {
        /* each window starts with BOS (when the model has one) and continues the text */
        size_t k = 0;
        if (bos >= 0) win[k++] = bos;
        while (k < (size_t)window && pos < n_ids) win[k++] = ids[pos++];
        st = model_logits_once(m, win, k, 0, KV_F32, logits, err);
        out->tokens += (int)k;
        if (progress) progress(progress_user, "calibrating", (double)pos / (double)n_ids);
    }
    xllm_free(logits);
    xllm_free(win);
    m->observe = NULL;
done:
    if (st) calib_free(out);
    model_free(m);
    if (tok) tokenizer_free(tok);
    xllm_free(ids);
    xllm_free(text);
    return st;
}
