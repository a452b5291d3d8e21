/*
 * sampler.c - next-token selection for one request (see sampler.h).
 *
 * The idea: penalties are applied in place on the logits row, visiting only
 * ids that were seen. Greedy is one argmax scan. Sampling turns logits into
 * weights exp((l - max) / T) in [0, 1] (the max gets exactly 1; exp is a
 * branch-free polynomial so the loops vectorize) and never sorts the
 * vocabulary: top-k finds the k-th largest logit with a size-k min-heap (small
 * k) or by bisecting on the value with vectorized counts (large k), keeping
 * ties with it as HF/vLLM do; top-p first brackets the cut between two weight
 * levels with vectorized mass sums (weights above the upper level are surely
 * kept, those below the lower one surely dropped), then resolves the few
 * candidates in between exactly with a partition that only descends where the
 * cumulative mass crosses top_p; min-p is a threshold on the weights. The
 * draw walks the survivors' weights, whole blocks at a time, with a uniform
 * variate from the request's own xoshiro256** generator, seeded through
 * splitmix64. All scratch is sized at init; nothing is allocated per token.
 */
#include "engine/sampler.h"
#include "base/fastmath.h"
#include "base/alloc.h"
#include "base/error.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

xllm_sampling_params xllm_sampling_params_default(void) {
    xllm_sampling_params p;
    memset(&p, 0, sizeof p);
    p.max_new_tokens = 256;
    p.do_sample = 1;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.has_seed = 0;
    p.ignore_eos = 0;
    p.n_stop = 0;
    p.n_stop_ids = 0;
    return p;
}

/* ------------------------------------------------------------------ RNG */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s) {
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *s) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
}

static uint64_t entropy_seed(const void *addr) {
    static _Atomic uint64_t counter;
    uint64_t x = atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) == TIME_UTC)
        x ^= (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    else
        x ^= (uint64_t)time(NULL);
    uint64_t m = x;
    x ^= splitmix64(&m) ^ (uint64_t)clock();
    m = x;
    x ^= splitmix64(&m) ^ (uint64_t)(uintptr_t)addr;
    m = x;
    return splitmix64(&m);
}

/* ----------------------------------------------------------- init / free */

xllm_status sampler_init(sampler *s, const xllm_sampling_params *p, int32_t vocab, xllm_error *err) {
    if (!s) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "sampler_init: NULL sampler");
    memset(s, 0, sizeof *s);
    xllm_sampling_params q = p ? *p : xllm_sampling_params_default();
    if (vocab <= 0)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "sampler: vocab size must be > 0 (got %d)", (int)vocab);
    if (q.max_new_tokens < 0)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "max_new_tokens must be >= 0 (got %d)", q.max_new_tokens);
    if (isnan(q.temperature))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "temperature must be a number (got NaN)");
    if (q.top_k < 0)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "top_k must be >= 0 (got %d)", q.top_k);
    if (!(q.top_p > 0.0f && q.top_p <= 1.0f))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "top_p must be in (0, 1] (got %g)", (double)q.top_p);
    if (!(q.min_p >= 0.0f && q.min_p <= 1.0f))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "min_p must be in [0, 1] (got %g)", (double)q.min_p);
    if (!(q.repetition_penalty > 0.0f) || isinf(q.repetition_penalty))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "repetition_penalty must be > 0 and finite (got %g)",
                           (double)q.repetition_penalty);
    if (!isfinite(q.presence_penalty))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "presence_penalty must be finite (got %g)",
                           (double)q.presence_penalty);
    if (!isfinite(q.frequency_penalty))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "frequency_penalty must be finite (got %g)",
                           (double)q.frequency_penalty);
    if (q.n_stop < 0 || q.n_stop > XLLM_MAX_STOP_STRINGS)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "n_stop must be in [0, %d] (got %d)",
                           XLLM_MAX_STOP_STRINGS, q.n_stop);
    if (q.n_stop_ids < 0 || q.n_stop_ids > XLLM_MAX_STOP_IDS)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "n_stop_ids must be in [0, %d] (got %d)",
                           XLLM_MAX_STOP_IDS, q.n_stop_ids);
    /* grammar_kind / grammar: compiled and applied by the engine (constraint.c) */

    s->p = q;
    s->vocab = vocab;
    s->out_counts = mem_calloc((size_t)vocab, sizeof *s->out_counts);
    s->seen = mem_calloc((size_t)vocab, sizeof *s->seen);
    s->scratch_val = mem_malloc_array((size_t)vocab, sizeof *s->scratch_val);
    s->scratch_idx = mem_malloc_array((size_t)vocab, sizeof *s->scratch_idx);
    if (!s->out_counts || !s->seen || !s->scratch_val || !s->scratch_idx) {
        sampler_free(s);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "sampler: out of memory for vocab %d", (int)vocab);
    }
    rng_seed(s->rng, q.has_seed ? q.seed : entropy_seed(s));
    return XLLM_OK;
}

void sampler_free(sampler *s) {
    if (!s) return;
    xllm_free(s->out_counts);
    xllm_free(s->seen);
    xllm_free(s->scratch_val);
    xllm_free(s->scratch_idx);
    s->out_counts = NULL;
    s->seen = NULL;
    s->scratch_val = NULL;
    s->scratch_idx = NULL;
}

void sampler_set_prompt(sampler *s, const int32_t *ids, size_t n) {
    if (!s || !s->seen || !ids) return;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->vocab) s->seen[ids[i]] = 1;
}

/* ------------------------------------------------------------ penalties */

/* Only ids in `seen` can be penalized (an output id is seen too), and few
 * are, so the scan skips eight unseen ids per 64-bit load. */
static void apply_penalties(sampler *s, float *logits) {
    const float r = s->p.repetition_penalty;
    const float pp = s->p.presence_penalty, fp = s->p.frequency_penalty;
    const int rep = r != 1.0f, add = pp != 0.0f || fp != 0.0f;
    if (!rep && !add) return;
    const size_t V = (size_t)s->vocab;
    for (size_t c = 0; c < V; c += 8) {
        size_t end = V - c < 8 ? V : c + 8;
        if (end - c == 8) {
            uint64_t word;
            memcpy(&word, s->seen + c, sizeof word);
            if (!word) continue;
        }
        for (size_t i = c; i < end; i++) {
            if (!s->seen[i]) continue;
            float l = logits[i];
            if (rep) l = l < 0.0f ? l * r : l / r;
            uint32_t n = s->out_counts[i];
            if (add && n) l -= fp * (float)n + pp;
            logits[i] = l;
        }
    }
}

/* ---------------------------------------------------- vectorizable loops */

#define LANES 16
#define TOPK_HEAP_MAX 256 /* top-k by a heap up to this k, by bisection above */
#define BLOCK 256

/* Sum of n <= BLOCK weights: float lanes (vectorizes), fixed order, so the
 * same block always gives the same sum. */
static float block_sum(const float *w, size_t n) {
    float lane[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += w[i + j];
    float sum = 0.0f;
    for (int j = 0; j < LANES; j++) sum += lane[j];
    for (; i < n; i++) sum += w[i];
    return sum;
}

static double total_weight(const float *w, size_t n) {
    double t = 0.0;
    for (size_t b = 0; b < n; b += BLOCK) t += block_sum(w + b, n - b < BLOCK ? n - b : BLOCK);
    return t;
}

/* Sum and number of the weights >= thr. The selects are integer masks:
 * gcc keeps a float ?: as a branch (trapping math) and would not vectorize. */
static double weight_at_least(const float *w, size_t n, float thr, size_t *count) {
    double t = 0.0;
    size_t c = 0;
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t len = n - b < BLOCK ? n - b : BLOCK;
        float lane[LANES] = {0};
        int32_t cl[LANES] = {0};
        size_t i = 0;
        for (; i + LANES <= len; i += LANES) {
            for (int j = 0; j < LANES; j++) {
                union { float f; uint32_t u; } v = {w[b + i + j]};
                int32_t ge = v.f >= thr;
                v.u &= (uint32_t)-ge;
                lane[j] += v.f;
                cl[j] += ge;
            }
        }
        for (int j = 0; j < LANES; j++) t += lane[j], c += (size_t)cl[j];
        for (; i < len; i++)
            if (w[b + i] >= thr) t += w[b + i], c++;
    }
    *count = c;
    return t;
}

/* Whether any of x[0..LANES) is > thr (or >= thr): one vector compare. */
static inline int any_gt(const float *x, float thr) {
    int32_t c = 0;
    for (int j = 0; j < LANES; j++) c |= x[j] > thr;
    return c;
}

static inline int any_ge(const float *x, float thr) {
    int32_t c = 0;
    for (int j = 0; j < LANES; j++) c |= x[j] >= thr;
    return c;
}

/* Index i with cumulative weight before i <= u < cumulative through i, where
 * u = u01 * total; whole blocks are skipped by their (vectorized) sums. */
static size_t draw_index(const float *w, size_t n, double total, double u01) {
    const double u = u01 * total;
    double acc = 0.0;
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t len = n - b < BLOCK ? n - b : BLOCK;
        double bs = block_sum(w + b, len);
        if (acc + bs > u) {
            size_t last = b;
            for (size_t i = b; i < b + len; i++) {
                if (w[i] <= 0.0f) continue;
                acc += w[i];
                last = i;
                if (u < acc) return i;
            }
            return last; /* per-element rounding fell short of the block sum */
        }
        acc += bs;
    }
    for (size_t i = n; i-- > 0;) /* rounding left u at the very end */
        if (w[i] > 0.0f) return i;
    return 0;
}

/* Lowest index of the maximum (x holds no NaN); 0 when all are -inf. */
static int32_t argmax(const float *x, int32_t V) {
    float lane[LANES];
    for (int j = 0; j < LANES; j++) lane[j] = x[0];
    int32_t i = 0;
    for (; i + LANES <= V; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float m = lane[0];
    for (int j = 1; j < LANES; j++) m = lane[j] > m ? lane[j] : m;
    for (; i < V; i++) m = x[i] > m ? x[i] : m;
    for (i = 0; i < V; i++)
        if (x[i] == m) return i;
    return 0;
}

/* ---------------------------------------------------- candidate selection */

static inline void swap_cand(float *v, int32_t *idx, size_t a, size_t b) {
    float tv = v[a]; v[a] = v[b]; v[b] = tv;
    int32_t ti = idx[a]; idx[a] = idx[b]; idx[b] = ti;
}

static inline float median3(float a, float b, float c) {
    if (a > b) { float t = a; a = b; b = t; }
    if (b > c) b = c;
    return a > b ? a : b;
}

/* Three-way partition of [lo, hi) in descending order around pivot:
 * [lo, *gt_end) > pivot, [*gt_end, *eq_end) == pivot, [*eq_end, hi) < pivot. */
static void partition3(float *v, int32_t *idx, size_t lo, size_t hi, float pivot,
                       size_t *gt_end, size_t *eq_end) {
    size_t a = lo, b = lo, c = hi;
    while (b < c) {
        if (v[b] > pivot) {
            swap_cand(v, idx, a, b);
            a++, b++;
        } else if (v[b] < pivot) {
            c--;
            swap_cand(v, idx, b, c);
        } else {
            b++;
        }
    }
    *gt_end = a;
    *eq_end = b;
}

static inline float pick_pivot(const float *v, size_t lo, size_t hi) {
    return median3(v[lo], v[lo + (hi - lo) / 2], v[hi - 1]);
}

static void sift_down(float *h, size_t n, size_t i) {
    float v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (!(h[c] < v)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* The k-th largest of x[0..V) (0 < k <= V), by a size-k min-heap in h: one
 * pass whose branch is rarely taken once the heap holds large values. */
static float kth_largest(const float *x, int32_t V, int32_t k, float *h) {
    memcpy(h, x, sizeof(float) * (size_t)k);
    for (size_t i = (size_t)k / 2; i-- > 0;) sift_down(h, (size_t)k, i);
    int32_t i = k;
    for (; i + LANES <= V; i += LANES) {
        if (!any_gt(x + i, h[0])) continue; /* the common case */
        for (int32_t j = i; j < i + LANES; j++) {
            if (x[j] > h[0]) {
                h[0] = x[j];
                sift_down(h, (size_t)k, 0);
            }
        }
    }
    for (; i < V; i++) {
        if (x[i] > h[0]) {
            h[0] = x[i];
            sift_down(h, (size_t)k, 0);
        }
    }
    return h[0];
}

/* Number of x[0..n) >= thr. */
static size_t count_at_least(const float *x, size_t n, float thr) {
    int32_t cl[LANES] = {0};
    size_t i = 0, c = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) cl[j] += x[i + j] >= thr;
    for (int j = 0; j < LANES; j++) c += (size_t)cl[j];
    for (; i < n; i++) c += x[i] >= thr;
    return c;
}

/* The k-th largest of x[0..V) (0 < k < V, no NaN, max m) for large k: bisect
 * on the value with vectorized counts until few values lie between the
 * bounds, then a three-way quickselect among those (in the scratch v, idx). */
static float kth_largest_bisect(const float *x, int32_t V, int32_t k, float m, float *v, int32_t *idx) {
    const size_t n = (size_t)V, kk = (size_t)k;
    size_t c_hi = count_at_least(x, n, m), c_lo;
    if (c_hi >= kk) return m;
    if (count_at_least(x, n, -FLT_MAX) < kk) return -INFINITY; /* fewer than k finite */
    /* invariant: count(>= lo) >= k > count(>= hi) */
    float hi = m, lo, gap = 1.0f;
    for (;;) {
        lo = m - gap;
        if (!(lo > -FLT_MAX)) lo = -FLT_MAX;
        c_lo = count_at_least(x, n, lo);
        if (c_lo >= kk) break;
        hi = lo, c_hi = c_lo;
        gap *= 16.0f;
    }
    while (c_lo - c_hi > 256) {
        float mid = lo * 0.5f + hi * 0.5f;
        if (!(mid > lo && mid < hi)) break;
        size_t c = count_at_least(x, n, mid);
        if (c >= kk) lo = mid, c_lo = c;
        else hi = mid, c_hi = c;
    }
    size_t nb = 0; /* the band lo <= x < hi holds the (k - c_hi)-th largest */
    for (size_t i = 0; i < n; i++) {
        v[nb] = x[i];
        nb += (x[i] >= lo) & (x[i] < hi);
    }
    size_t want = kk - c_hi; /* 1 <= want <= nb */
    size_t a0 = 0, b0 = nb;
    for (;;) { /* quickselect the want-th largest in v[0..nb) */
        size_t a, b;
        partition3(v, idx, a0, b0, pick_pivot(v, a0, b0), &a, &b);
        if (want <= a) b0 = a;
        else if (want <= b) return v[a];
        else a0 = b;
    }
}

/* Exact top-p over n candidates holding unnormalized weights w, all below
 * candidates already kept whose weight sums to acc: keep every candidate
 * whose cumulative weight of strictly earlier (descending) ones is < target
 * (HF TopPLogitsWarper), by partitioning around a pivot and descending only
 * into the side where the cumulative weight crosses the target. Moves the
 * kept ones to the front and returns their number. */
static size_t select_top_p(float *w, int32_t *idx, size_t n, double acc, double target) {
    size_t keep = 0, end = n; /* [0, keep) kept; [keep, end) undecided */
    while (keep < end && acc < target) {
        size_t a, b;
        partition3(w, idx, keep, end, pick_pivot(w, keep, end), &a, &b);
        double mass_gt = 0.0;
        for (size_t i = keep; i < a; i++) mass_gt += w[i];
        if (a > keep && acc + mass_gt >= target) {
            end = a; /* the crossing point lies among the larger ones */
            continue;
        }
        acc += mass_gt;
        keep = a;
        while (keep < b && acc < target) acc += w[keep++];
        /* when all ties were kept, go on with the smaller ones in [b, end) */
    }
    return keep;
}

/* ------------------------------------------------------------- sampling */

static void record(sampler *s, int32_t id) {
    if (s->out_counts[id] != UINT32_MAX) s->out_counts[id]++;
    s->seen[id] = 1;
}

/* Keep the candidates that pass top-p and min-p: n weights in w with their
 * ids in s->scratch_idx, or (whole_vocab) all ids in order, scratch_idx not
 * yet filled. Moves the kept ones to the front of w and scratch_idx and
 * returns their number (>= 1). total: the sum of all n weights. */
static size_t filter_p(sampler *s, float *w, size_t n, int whole_vocab, double total) {
    const int use_top_p = s->p.top_p < 1.0f;
    const double target = use_top_p ? (double)s->p.top_p * total : INFINITY;
    const double t_up = target * (1.0 + 1e-5), t_dn = target * (1.0 - 1e-5);
    int32_t *idx = s->scratch_idx;
    /* Weights are in (0, 1] with the max exactly 1. min-p keeps weight >=
     * min_p. For top-p, find levels lo < hi with the mass of weights >= lo
     * reaching the target and that of weights >= hi not: everything >= hi is
     * surely kept, everything < lo surely dropped (it has at least the target
     * mass before it), and only the band between needs the exact selection.
     * The sums are float lanes, so undecided margins go to the band. */
    float lo = s->p.min_p, hi = 2.0f;
    size_t c_hi = 0, c;
    if (use_top_p && n > 256) {
        static const float levels[] = {0.5f, 0x1p-3f, 0x1p-6f, 0x1p-10f, 0x1p-15f, 0x1p-22f};
        for (size_t j = 0; j < sizeof levels / sizeof levels[0] && levels[j] > lo; j++) {
            double m = weight_at_least(w, n, levels[j], &c);
            if (m >= t_up) {
                lo = levels[j];
                break;
            }
            if (m < t_dn) hi = levels[j], c_hi = c;
        }
    }

    /* compact the weights >= lo to the front (branch-free: the test is
     * unpredictable when a good part of the vocabulary passes) */
    size_t k = n;
    if (lo > 0.0f || whole_vocab) {
        k = 0;
        for (size_t i = 0; i < n; i++) {
            float v = w[i];
            int32_t id = whole_vocab ? (int32_t)i : idx[i];
            w[k] = v;
            idx[k] = id;
            k += v >= lo;
        }
    }
    if (!use_top_p || k <= 1) return k ? k : 1;

    /* narrow the band by bisection (in log scale) while it is large */
    for (int it = 0; it < 24 && k - c_hi > 256 && hi < 2.0f && lo > 0.0f; it++) {
        float mid = sqrtf(lo * hi);
        if (!(mid > lo && mid < hi)) break;
        double m = weight_at_least(w, k, mid, &c);
        if (m >= t_up) {
            lo = mid; /* drop what is below it */
            size_t kk = 0;
            for (size_t i = 0; i < k; i++) {
                float v = w[i];
                int32_t id = idx[i];
                w[kk] = v;
                idx[kk] = id;
                kk += v >= lo;
            }
            k = kk;
        } else if (m < t_dn) {
            hi = mid, c_hi = c;
        } else {
            break;
        }
    }

    /* surely kept (>= hi) to the front, then the exact selection in the band */
    size_t sure = 0;
    double acc = 0.0;
    if (hi < 2.0f) {
        for (size_t i = 0; i < k; i++) {
            if (w[i] >= hi) {
                acc += w[i];
                swap_cand(w, idx, sure++, i);
            }
        }
    }
    k = sure + select_top_p(w + sure, idx + sure, k - sure, acc, target);
    return k ? k : 1;
}

static int32_t sample_dist(sampler *s, const float *logits) {
    const int32_t V = s->vocab;
    float *w = s->scratch_val;
    int32_t *idx = s->scratch_idx;
    const float t = s->p.temperature;
    const int filtered = s->p.top_p < 1.0f || s->p.min_p > 0.0f;

    int32_t best = argmax(logits, V);
    const float m = logits[best];
    if (!(m > -INFINITY) || m == INFINITY) return best; /* all -inf, or an +inf winner */

    /* Weights exp((l - m) / T): the max gets exactly 1. Divide rather than
     * multiply by 1/T: a tiny T must give 0/T = 0, not 0*inf. */
    size_t n;
    if (s->p.top_k > 0 && s->p.top_k < V && s->p.top_k <= TOPK_HEAP_MAX) {
        /* small k: a heap finds the k-th largest, then one skimming pass */
        const float kth = kth_largest(logits, V, s->p.top_k, w);
        n = 0;
        for (int32_t c = 0; c < V; c += LANES) {
            int32_t end = V - c < LANES ? V : c + LANES;
            if (end - c == LANES && !any_ge(logits + c, kth)) continue; /* the common case */
            for (int32_t i = c; i < end; i++) {
                if (logits[i] >= kth && logits[i] > -INFINITY) { /* ties with the k-th kept (HF, vLLM) */
                    w[n] = fast_exp_nonpos((logits[i] - m) / t);
                    idx[n++] = i;
                }
            }
        }
        if (filtered) n = filter_p(s, w, n, 0, total_weight(w, n));
    } else if (s->p.top_k > 0 && s->p.top_k < V) {
        /* large k: the k-th largest by bisection, then branch-free compaction */
        const float kth = kth_largest_bisect(logits, V, s->p.top_k, m, w, idx);
        for (int32_t i = 0; i < V; i++) w[i] = fast_exp_nonpos((logits[i] - m) / t);
        n = 0;
        for (int32_t i = 0; i < V; i++) {
            float v = w[i];
            w[n] = v;
            idx[n] = i;
            n += (logits[i] >= kth) & (logits[i] > -INFINITY);
        }
        if (filtered) n = filter_p(s, w, n, 0, total_weight(w, n));
    } else {
        for (int32_t i = 0; i < V; i++) w[i] = fast_exp_nonpos((logits[i] - m) / t);
        n = (size_t)V;
        if (!filtered) /* plain softmax sampling over the vocabulary, ids in order */
            return (int32_t)draw_index(w, n, total_weight(w, n), rng_uniform(s->rng));
        n = filter_p(s, w, n, 1, total_weight(w, n));
    }
    return idx[draw_index(w, n, total_weight(w, n), rng_uniform(s->rng))];
}

int32_t sampler_sample(sampler *s, float *logits) {
    const int32_t V = s->vocab;
    apply_penalties(s, logits);
    for (int32_t i = 0; i < V; i++) { /* after penalties: they may turn inf into NaN */
        float v = logits[i];
        logits[i] = v != v ? -INFINITY : v;
    }
    int32_t id;
    if (!s->p.do_sample || !(s->p.temperature > 0.0f))
        id = argmax(logits, V);
    else
        id = sample_dist(s, logits);
    record(s, id);
    return id;
}
