/* test_sampler.c - penalties, greedy, top-k/top-p/min-p (also against a
 * double-precision full-sort reference over random logits), seeding, the
 * empirical distribution, NaN handling and parameter validation. */
#include "test.h"
#include "base/alloc.h"
#include "engine/sampler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static xllm_sampling_params seeded(uint64_t seed) {
    xllm_sampling_params p = xllm_sampling_params_default();
    p.has_seed = 1;
    p.seed = seed;
    return p;
}

/* Draw `draws` times from fixed logits; counts[id]++ (logits copied each time). */
static void histogram(const xllm_sampling_params *p, const float *logits, int32_t V, int draws, int *counts) {
    sampler s;
    xllm_error e;
    CHECK(sampler_init(&s, p, V, &e) == XLLM_OK);
    float *row = malloc(sizeof(float) * (size_t)V);
    memset(counts, 0, sizeof(int) * (size_t)V);
    for (int d = 0; d < draws; d++) {
        memcpy(row, logits, sizeof(float) * (size_t)V);
        int32_t id = sampler_sample(&s, row);
        CHECK(id >= 0 && id < V);
        if (id >= 0 && id < V) counts[id]++;
    }
    free(row);
    sampler_free(&s);
}

static uint64_t lcg_state = 12345;
static float frand(void) { /* test-local PRNG in [0,1) */
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg_state >> 40) * (1.0 / 16777216.0));
}

/* ---- reference: HF warpers in double precision over a full sort ---- */

static const float *g_sort_logits;
static int cmp_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float lx = g_sort_logits[x], ly = g_sort_logits[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* state[id]: 0 dropped, 1 kept, 2 either (within rounding of a boundary);
 * prob[id]: the renormalized probability over the kept set. */
static void reference_keep(const float *l, int32_t V, const xllm_sampling_params *p, uint8_t *state, double *prob) {
    int32_t *order = malloc(sizeof(int32_t) * (size_t)V);
    for (int32_t i = 0; i < V; i++) order[i] = i;
    g_sort_logits = l;
    qsort(order, (size_t)V, sizeof(int32_t), cmp_desc);
    const double m = l[order[0]];
    for (int32_t i = 0; i < V; i++) {
        state[i] = 1;
        prob[i] = exp(((double)l[i] - m) / p->temperature);
    }
    if (p->top_k > 0 && p->top_k < V) {
        float kth = l[order[p->top_k - 1]];
        for (int32_t i = 0; i < V; i++)
            if (l[i] < kth) state[i] = 0;
    }
    double z = 0.0;
    for (int32_t i = 0; i < V; i++) if (state[i]) z += prob[i];
    if (p->top_p < 1.0f) {
        double before = 0.0, target = p->top_p * z;
        for (int32_t r = 0; r < V; r++) {
            int32_t id = order[r];
            if (!state[id]) continue;
            if (fabs(before - target) <= 1e-4 * z) state[id] = 2;
            else if (before >= target) state[id] = 0;
            before += prob[id];
        }
    }
    if (p->min_p > 0.0f) {
        for (int32_t i = 0; i < V; i++) {
            if (!state[i]) continue;
            double thr = p->min_p; /* the max has weight 1 */
            if (fabs(prob[i] - thr) <= 1e-5) state[i] = 2;
            else if (prob[i] < thr) state[i] = 0;
        }
    }
    double zk = 0.0;
    for (int32_t i = 0; i < V; i++) if (state[i]) zk += prob[i];
    for (int32_t i = 0; i < V; i++) prob[i] = state[i] ? prob[i] / zk : 0.0;
    free(order);
}

/* Random logits of several shapes against the reference: every draw is in
 * the kept set, and ids with enough expected draws are drawn as often as
 * their renormalized probability says. */
static void test_against_reference(void) {
    /* shapes: 0 flat, 1 bell, 2 a light tail under a few heavy tokens, 3 a
     * tail holding about a quarter of the mass (the top-p cut falls in it) */
    struct { int32_t V; int shape; float t; int k; float top_p, min_p; int draws; } cfg[] = {
        {7, 0, 1.0f, 0, 0.97f, 0.0f, 4000},      {100, 1, 0.8f, 20, 0.9f, 0.0f, 4000},
        {1000, 0, 1.0f, 0, 0.5f, 0.05f, 4000},   {1000, 2, 1.3f, 0, 0.95f, 0.0f, 4000},
        {1000, 1, 0.7f, 300, 0.8f, 0.02f, 4000}, {4097, 2, 1.0f, 0, 0.9f, 0.0f, 2000},
        {3000, 0, 1.0f, 0, 0.9f, 0.0f, 1500},    {3000, 1, 1.0f, 0, 0.6f, 0.0f, 1500},
        {3000, 2, 0.6f, 0, 0.99f, 0.0f, 1500},   {3000, 2, 1.0f, 40, 0.0f, 0.1f, 1500},
        {3000, 1, 2.0f, 700, 0.7f, 0.0f, 1500},  {4000, 3, 1.0f, 0, 0.99f, 0.0f, 2000},
        {6000, 3, 1.0f, 0, 0.9f, 0.0f, 1500},    {6000, 3, 0.8f, 0, 0.85f, 0.001f, 1000},
        {151936, 3, 1.0f, 0, 0.9f, 0.0f, 60},    {151936, 1, 1.0f, 64, 0.9f, 0.05f, 60},
        /* nearly uniform: one token too many or too few is visible */
        {1000, 0, 100.0f, 100, 0.0f, 0.0f, 4000}, {1000, 0, 100.0f, 300, 0.0f, 0.0f, 6000},
        {2000, 1, 60.0f, 300, 0.0f, 0.0f, 5000},  {2000, 0, 100.0f, 0, 0.5f, 0.0f, 2500},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int32_t V = cfg[c].V;
        float *l = malloc(sizeof(float) * (size_t)V), *row = malloc(sizeof(float) * (size_t)V);
        uint8_t *state = malloc((size_t)V);
        double *prob = malloc(sizeof(double) * (size_t)V);
        int *cnt = calloc((size_t)V, sizeof(int));
        for (int32_t i = 0; i < V; i++) {
            if (cfg[c].shape == 0) l[i] = frand() * 16.0f - 8.0f; /* flat */
            else if (cfg[c].shape == 1) l[i] = (frand() + frand() + frand() - 1.5f) * 6.0f; /* bell */
            else if (cfg[c].shape == 2) l[i] = frand() * 4.0f - 10.0f; /* a long tail ... */
            else l[i] = frand() * 6.0f - 6.0f; /* a heavier tail ... */
        }
        if (cfg[c].shape == 2) /* ... under a few heavy tokens */
            for (int j = 0; j < 12; j++) l[(int32_t)(frand() * (float)V)] = 2.0f + frand() * 6.0f;
        if (cfg[c].shape == 3)
            for (int j = 0; j < 12; j++) l[(int32_t)(frand() * (float)V)] = logf(0.04f * (float)V) + frand() * 2.0f - 1.0f;
        xllm_sampling_params p = seeded(1000 + c);
        p.temperature = cfg[c].t;
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].top_p > 0.0f ? cfg[c].top_p : 1.0f;
        p.min_p = cfg[c].min_p;
        reference_keep(l, V, &p, state, prob);
        sampler s;
        CHECK(sampler_init(&s, &p, V, NULL) == XLLM_OK);
        int outside = 0;
        for (int d = 0; d < cfg[c].draws; d++) {
            memcpy(row, l, sizeof(float) * (size_t)V);
            int32_t id = sampler_sample(&s, row);
            if (id < 0 || id >= V || !state[id]) outside++;
            else cnt[id]++;
        }
        sampler_free(&s);
        CHECK_MSG(outside == 0, "config %zu: %d draws outside the kept set", c, outside);
        int bad = 0;
        for (int32_t i = 0; i < V; i++) {
            double e = prob[i] * cfg[c].draws;
            if (state[i] == 1 && e >= 30.0 && fabs(cnt[i] - e) > 5.0 * sqrt(e) + 2.0) bad++;
        }
        CHECK_MSG(bad == 0, "config %zu: %d ids drawn off their probability", c, bad);
        /* the less likely half of the kept set, together, is drawn as often
         * as it should be (a cut too early would starve it) */
        int nk = 0;
        for (int32_t i = 0; i < V; i++) if (state[i] == 1) row[nk++] = (float)prob[i];
        g_sort_logits = row;
        int32_t *o = malloc(sizeof(int32_t) * (size_t)(nk ? nk : 1));
        for (int i = 0; i < nk; i++) o[i] = i;
        qsort(o, (size_t)nk, sizeof(int32_t), cmp_desc);
        float qcut = nk ? row[o[nk - 1 - nk / 2]] : 0.0f;
        double e_low = 0.0;
        int o_low = 0;
        for (int32_t i = 0; i < V; i++) {
            if (state[i] == 1 && (float)prob[i] < qcut) {
                e_low += prob[i] * cfg[c].draws;
                o_low += cnt[i];
            }
        }
        if (e_low >= 30.0)
            CHECK_MSG(fabs(o_low - e_low) <= 4.5 * sqrt(e_low) + 1.0, "config %zu: low half drawn %d times, expected %.1f",
                      c, o_low, e_low);
        free(o);
        free(l); free(row); free(state); free(prob); free(cnt);
    }
}

/* All-equal logits: top-p keeps exactly the first ceil(top_p * V) of them. */
static void test_top_p_ties(void) {
    const int32_t V = 1000;
    float *l = malloc(sizeof(float) * V);
    int *c = malloc(sizeof(int) * V);
    for (int32_t i = 0; i < V; i++) l[i] = 0.25f;
    xllm_sampling_params p = seeded(31);
    p.top_p = 0.5f;
    histogram(&p, l, V, 8000, c);
    int distinct = 0;
    for (int32_t i = 0; i < V; i++) distinct += c[i] > 0;
    CHECK_MSG(distinct == 500, "%d distinct", distinct);
    free(l);
    free(c);
}

static void test_defaults(void) {
    xllm_sampling_params p = xllm_sampling_params_default();
    CHECK(p.max_new_tokens == 256 && p.do_sample == 1 && p.temperature == 1.0f);
    CHECK(p.top_k == 0 && p.top_p == 1.0f && p.min_p == 0.0f);
    CHECK(p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    CHECK(p.has_seed == 0 && p.ignore_eos == 0 && p.n_stop == 0 && p.n_stop_ids == 0);
}

static void expect_invalid(xllm_sampling_params p, int32_t vocab, const char *name) {
    sampler s;
    xllm_error e;
    memset(&e, 0, sizeof e);
    xllm_status st = sampler_init(&s, &p, vocab, &e);
    CHECK_MSG(st == XLLM_ERR_INVALID_ARGUMENT, "%s: status %d", name, (int)st);
    CHECK_MSG(e.code == XLLM_ERR_INVALID_ARGUMENT, "%s", name);
    CHECK_MSG(strstr(e.message, name) != NULL, "message '%s' should name %s", e.message, name);
    sampler_free(&s); /* safe after a failed init */
}

static void test_validation(void) {
    xllm_sampling_params d = xllm_sampling_params_default(), p;
    p = d; p.top_p = 0.0f; expect_invalid(p, 10, "top_p");
    p = d; p.top_p = 1.5f; expect_invalid(p, 10, "top_p");
    p = d; p.top_p = NAN; expect_invalid(p, 10, "top_p");
    p = d; p.min_p = -0.1f; expect_invalid(p, 10, "min_p");
    p = d; p.min_p = 1.1f; expect_invalid(p, 10, "min_p");
    p = d; p.repetition_penalty = 0.0f; expect_invalid(p, 10, "repetition_penalty");
    p = d; p.repetition_penalty = -1.0f; expect_invalid(p, 10, "repetition_penalty");
    p = d; p.top_k = -1; expect_invalid(p, 10, "top_k");
    p = d; p.max_new_tokens = -1; expect_invalid(p, 10, "max_new_tokens");
    p = d; p.temperature = NAN; expect_invalid(p, 10, "temperature");
    p = d; p.presence_penalty = INFINITY; expect_invalid(p, 10, "presence_penalty");
    p = d; p.frequency_penalty = NAN; expect_invalid(p, 10, "frequency_penalty");
    expect_invalid(d, 0, "vocab");

    /* boundaries that are valid; negative temperature means greedy */
    sampler s;
    p = d; p.top_p = 1.0f; p.min_p = 1.0f; p.temperature = -1.0f; p.max_new_tokens = 0; p.top_k = 1000;
    CHECK(sampler_init(&s, &p, 10, NULL) == XLLM_OK);
    sampler_free(&s);
    CHECK(sampler_init(&s, NULL, 10, NULL) == XLLM_OK); /* NULL params = defaults */
    sampler_free(&s);
}

static void test_greedy(void) {
    sampler s;
    xllm_sampling_params p = xllm_sampling_params_default();
    p.do_sample = 0;
    CHECK(sampler_init(&s, &p, 5, NULL) == XLLM_OK);
    float a[5] = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
    CHECK(sampler_sample(&s, a) == 1);
    float b[5] = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f}; /* ties: lowest id */
    CHECK(sampler_sample(&s, b) == 1);
    float c[5] = {-5.0f, -5.0f, -5.0f, -5.0f, -5.0f};
    CHECK(sampler_sample(&s, c) == 0);
    sampler_free(&s);

    /* temperature <= 0 is greedy even with do_sample; top_k etc. ignored */
    float temps[2] = {0.0f, -0.5f};
    for (int t = 0; t < 2; t++) {
        p = xllm_sampling_params_default();
        p.temperature = temps[t];
        p.top_k = 3;
        p.top_p = 0.1f;
        p.min_p = 0.9f;
        CHECK(sampler_init(&s, &p, 5, NULL) == XLLM_OK);
        for (int i = 0; i < 20; i++) {
            float d[5] = {1.0f, 4.0f, 4.0f, 0.0f, 3.9f};
            CHECK(sampler_sample(&s, d) == 1);
        }
        sampler_free(&s);
    }
}

static void test_repetition_penalty(void) {
    sampler s;
    xllm_sampling_params p = xllm_sampling_params_default();
    p.do_sample = 0;
    p.repetition_penalty = 2.0f;
    CHECK(sampler_init(&s, &p, 5, NULL) == XLLM_OK);
    int32_t prompt[] = {0, 1, 0, 0, 1, 99, -3}; /* repeats and out-of-range ids */
    sampler_set_prompt(&s, prompt, 7);
    float l[5] = {4.0f, -2.0f, 1.5f, 0.5f, 0.0f};
    int32_t id = sampler_sample(&s, l);
    /* once per distinct id: 4/2 (not 4/8), -2*2 (not -2*4) */
    CHECK(l[0] == 2.0f);
    CHECK(l[1] == -4.0f);
    CHECK(l[2] == 1.5f && l[3] == 0.5f && l[4] == 0.0f);
    CHECK(id == 0);
    /* output ids count too: id 2 wins now, then is penalized */
    float m[5] = {-1.0f, -1.0f, 3.0f, 2.0f, 0.0f};
    CHECK(sampler_sample(&s, m) == 2);
    CHECK(m[0] == -2.0f && m[2] == 3.0f);
    float n[5] = {-1.0f, -1.0f, 3.0f, 2.0f, 0.0f};
    CHECK(sampler_sample(&s, n) == 3); /* 3/2 = 1.5 < 2 */
    CHECK(n[2] == 1.5f && n[3] == 2.0f);
    sampler_free(&s);

    /* r < 1 rewards repetition with the mirrored rule */
    p.repetition_penalty = 0.5f;
    CHECK(sampler_init(&s, &p, 3, NULL) == XLLM_OK);
    int32_t pr[] = {2};
    sampler_set_prompt(&s, pr, 1);
    float q[3] = {1.0f, 0.0f, -1.0f};
    CHECK(sampler_sample(&s, q) == 0);
    CHECK(q[2] == -0.5f);
    float z[3] = {1.0f, 1.0f, 0.8f}; /* 0 is seen now: 1/0.5 = 2 */
    CHECK(sampler_sample(&s, z) == 0);
    CHECK(z[0] == 2.0f && z[1] == 1.0f && z[2] == 1.6f);
    sampler_free(&s);

    /* a larger vocabulary: seen ids anywhere, including the last one */
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.25f;
    const int32_t V = 101;
    CHECK(sampler_init(&s, &p, V, NULL) == XLLM_OK);
    int32_t pr2[] = {3, 64, 100, 64};
    sampler_set_prompt(&s, pr2, 4);
    float big[101];
    for (int round = 0; round < 2; round++) {
        for (int32_t i = 0; i < V; i++) big[i] = i == 50 ? 5.0f : -1.0f;
        CHECK(sampler_sample(&s, big) == 50);
        int ok = 1;
        for (int32_t i = 0; i < V; i++) {
            float want = -1.0f;
            if (i == 3 || i == 64 || i == 100) want = -2.0f;
            if (i == 50) want = round == 0 ? 5.0f : 5.0f / 2.0f - 0.25f; /* output from round 0 */
            if (big[i] != want) ok = 0;
        }
        CHECK_MSG(ok, "round %d", round);
    }
    sampler_free(&s);
}

static void test_presence_frequency(void) {
    sampler s;
    xllm_sampling_params p = xllm_sampling_params_default();
    p.do_sample = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    CHECK(sampler_init(&s, &p, 4, NULL) == XLLM_OK);
    int32_t prompt[] = {0, 1, 1};
    sampler_set_prompt(&s, prompt, 3); /* prompt ids do not count */
    float expect3[4] = {10.0f, 9.25f, 9.0f, 8.75f};
    for (int step = 0; step < 4; step++) {
        float l[4] = {1.0f, 1.0f, 0.0f, 10.0f};
        CHECK(sampler_sample(&s, l) == 3);
        CHECK_NEAR(l[3], expect3[step], 1e-6);
        CHECK(l[0] == 1.0f && l[1] == 1.0f && l[2] == 0.0f);
    }
    sampler_free(&s);

    /* with two output ids of different counts */
    CHECK(sampler_init(&s, &p, 3, NULL) == XLLM_OK);
    float a[3] = {5.0f, 0.0f, 0.0f};
    CHECK(sampler_sample(&s, a) == 0);
    float b[3] = {0.0f, 5.0f, 0.0f};
    CHECK(sampler_sample(&s, b) == 1);
    float c[3] = {5.0f, 0.0f, 0.0f};
    CHECK(sampler_sample(&s, c) == 0); /* 5 - 0.75 */
    float d[3] = {2.0f, 2.0f, 1.0f};
    CHECK(sampler_sample(&s, d) == 1);
    CHECK_NEAR(d[0], 2.0f - 0.25f * 2 - 0.5f, 1e-6);
    CHECK_NEAR(d[1], 2.0f - 0.25f * 1 - 0.5f, 1e-6);
    CHECK(d[2] == 1.0f);
    sampler_free(&s);
}

static void test_top_k(void) {
    /* top_k = 1 under sampling equals greedy */
    sampler s;
    xllm_sampling_params p = seeded(7);
    p.top_k = 1;
    p.temperature = 2.0f;
    const int32_t V = 1000;
    CHECK(sampler_init(&s, &p, V, NULL) == XLLM_OK);
    float *l = malloc(sizeof(float) * V);
    int mismatches = 0;
    for (int t = 0; t < 300; t++) {
        int32_t best = 0;
        for (int32_t i = 0; i < V; i++) {
            l[i] = frand() * 10.0f - 5.0f;
            if (l[i] > l[best]) best = i;
        }
        if (sampler_sample(&s, l) != best) mismatches++;
    }
    CHECK(mismatches == 0);
    sampler_free(&s);
    free(l);

    /* top_k = 3 of 6: only the three largest appear, all of them */
    float six[6] = {0.0f, 1.0f, 0.5f, 0.9f, 0.8f, 0.1f};
    int cnt[6];
    p = seeded(8);
    p.top_k = 3;
    histogram(&p, six, 6, 6000, cnt);
    CHECK(cnt[0] == 0 && cnt[2] == 0 && cnt[5] == 0);
    CHECK(cnt[1] > 0 && cnt[3] > 0 && cnt[4] > 0);

    /* ties with the k-th value are kept (as HF/vLLM: logits < kth are removed) */
    float tie[4] = {1.0f, 3.0f, 3.0f, 0.0f};
    int ct[4];
    p = seeded(9);
    p.top_k = 1;
    histogram(&p, tie, 4, 4000, ct);
    CHECK(ct[0] == 0 && ct[3] == 0 && ct[1] > 1500 && ct[2] > 1500);

    /* ten groups of 100 equal logits; k inside a group keeps the whole group,
     * by the heap (small k) and by the bisection (large k) */
    const int32_t G = 1000;
    float *g = malloc(sizeof(float) * G);
    int *cg = malloc(sizeof(int) * G);
    for (int32_t i = 0; i < G; i++) g[i] = (float)((i * 7919) % G / 100); /* groups shuffled over ids */
    int ks[2] = {150, 250};
    for (int r = 0; r < 2; r++) {
        p = seeded(10 + (uint64_t)r);
        p.top_k = ks[r];
        p.temperature = 4.0f;
        histogram(&p, g, G, 8000, cg);
        int distinct = 0, below = 0;
        float cut = (float)(9 - (ks[r] / 100));
        for (int32_t i = 0; i < G; i++) {
            distinct += cg[i] > 0;
            if (g[i] < cut) below += cg[i];
        }
        CHECK_MSG(below == 0 && distinct == (ks[r] / 100 + 1) * 100, "k=%d: %d below, %d distinct", ks[r], below,
                  distinct);
    }
    free(g);
    free(cg);
}

static void test_top_p(void) {
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    int c[3];
    xllm_sampling_params p = seeded(11);
    p.top_p = 0.6f;
    histogram(&p, l, 3, 20000, c);
    CHECK(c[2] == 0);
    CHECK(c[0] > 0 && c[1] > 0);
    CHECK_NEAR((double)c[0] / 20000, 0.5 / 0.8, 0.02); /* renormalized */

    p.top_p = 0.4f; /* the top token alone already reaches 0.4 */
    histogram(&p, l, 3, 2000, c);
    CHECK(c[0] == 2000);
    p.top_p = 0.85f; /* 0.5 + 0.3 < 0.85: all three */
    histogram(&p, l, 3, 20000, c);
    CHECK(c[0] > 0 && c[1] > 0 && c[2] > 0);

    /* top_p applies to the top-k survivors, renormalized (HF warper order):
     * .4 .3 .2 .1 with top_k 2 -> .571 .429; top_p .5 keeps only id 0 */
    float f[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    int c4[4];
    p = seeded(12);
    p.top_k = 2;
    p.top_p = 0.5f;
    histogram(&p, f, 4, 3000, c4);
    CHECK(c4[0] == 3000);

    /* large vocab with a few heavy tokens: the kept set matches a full sort */
    const int32_t V = 8000;
    float *big = malloc(sizeof(float) * V);
    int *cb = malloc(sizeof(int) * V);
    for (int32_t i = 0; i < V; i++) big[i] = frand() * 2.0f - 10.0f;
    int32_t heavy[6] = {4000, 17, 7999, 2345, 0, 777};
    float hv[6] = {12.0f, 11.5f, 11.0f, 10.5f, 10.0f, 9.5f};
    for (int j = 0; j < 6; j++) big[heavy[j]] = hv[j];
    double z = 0.0, ph[6];
    for (int32_t i = 0; i < V; i++) z += exp((double)big[i]);
    double cum = 0.0;
    int expect_n = 0;
    for (int j = 0; j < 6; j++) {
        ph[j] = exp((double)hv[j]) / z;
        if (cum < 0.85) expect_n++;
        cum += ph[j];
    }
    CHECK(expect_n >= 3 && expect_n < 6);
    p = seeded(13);
    p.top_p = 0.85f;
    const int draws = 1500;
    histogram(&p, big, V, draws, cb);
    int in_set = 0;
    for (int j = 0; j < expect_n; j++) {
        CHECK_MSG(cb[heavy[j]] > 0, "heavy %d never drawn", j);
        in_set += cb[heavy[j]];
    }
    CHECK_MSG(in_set == draws, "%d of %d draws outside the top-p set", draws - in_set, draws);
    free(big);
    free(cb);
}

static void test_min_p(void) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int c[4];
    xllm_sampling_params p = seeded(21);
    p.min_p = 0.35f; /* keep prob >= 0.175 */
    histogram(&p, l, 4, 10000, c);
    CHECK(c[2] == 0 && c[3] == 0 && c[0] > 0 && c[1] > 0);
    CHECK_NEAR((double)c[0] / 10000, 0.625, 0.03);
    p.min_p = 0.25f; /* keep prob >= 0.125 */
    histogram(&p, l, 4, 10000, c);
    CHECK(c[3] == 0 && c[2] > 0);
    p.min_p = 1.0f; /* only the max */
    histogram(&p, l, 4, 1000, c);
    CHECK(c[0] == 1000);
    p.min_p = 0.35f; /* with top_k 3: still ids 0 and 1 */
    p.top_k = 3;
    histogram(&p, l, 4, 4000, c);
    CHECK(c[2] == 0 && c[3] == 0 && c[0] > 0 && c[1] > 0);
}

static void test_seed(void) {
    const int32_t V = 100;
    float base[100];
    for (int i = 0; i < V; i++) base[i] = frand() * 3.0f;
    int32_t seq[3][500];
    uint64_t seeds[3] = {42, 42, 43};
    for (int r = 0; r < 3; r++) {
        sampler s;
        xllm_sampling_params p = seeded(seeds[r]);
        p.top_p = 0.9f;
        p.top_k = 50;
        CHECK(sampler_init(&s, &p, V, NULL) == XLLM_OK);
        for (int t = 0; t < 500; t++) {
            float l[100];
            memcpy(l, base, sizeof l);
            seq[r][t] = sampler_sample(&s, l);
        }
        sampler_free(&s);
    }
    CHECK(memcmp(seq[0], seq[1], sizeof seq[0]) == 0);
    CHECK(memcmp(seq[0], seq[2], sizeof seq[0]) != 0);

    /* unseeded samplers differ from each other */
    int32_t u[2][200];
    for (int r = 0; r < 2; r++) {
        sampler s;
        CHECK(sampler_init(&s, NULL, V, NULL) == XLLM_OK);
        for (int t = 0; t < 200; t++) {
            float l[100];
            memcpy(l, base, sizeof l);
            u[r][t] = sampler_sample(&s, l);
        }
        sampler_free(&s);
    }
    CHECK(memcmp(u[0], u[1], sizeof u[0]) != 0);
}

static void test_distribution(void) {
    const int32_t V = 8;
    float l[8] = {0.3f, -1.0f, 1.2f, 0.0f, 2.0f, -0.5f, 0.9f, -3.0f};
    float temps[2] = {1.0f, 0.5f};
    for (int t = 0; t < 2; t++) {
        int c[8];
        xllm_sampling_params p = seeded(100 + (uint64_t)t);
        p.temperature = temps[t];
        const int N = 20000;
        histogram(&p, l, V, N, c);
        double z = 0.0, prob[8];
        for (int i = 0; i < V; i++) z += exp(l[i] / temps[t]);
        double worst = 0.0;
        for (int i = 0; i < V; i++) {
            prob[i] = exp(l[i] / temps[t]) / z;
            double err = fabs((double)c[i] / N - prob[i]);
            if (err > worst) worst = err;
            /* ~4.5 standard deviations of a binomial proportion */
            CHECK_MSG(err <= 4.5 * sqrt(prob[i] * (1 - prob[i]) / N) + 1e-3,
                      "T=%g id %d: %g vs %g", (double)temps[t], i, (double)c[i] / N, prob[i]);
        }
        CHECK(worst < 0.02);
    }
}

static void test_nan_inf(void) {
    sampler s;
    xllm_sampling_params p = seeded(5);
    CHECK(sampler_init(&s, &p, 4, NULL) == XLLM_OK);
    for (int t = 0; t < 200; t++) {
        float l[4] = {NAN, 0.0f, NAN, 0.5f};
        int32_t id = sampler_sample(&s, l);
        CHECK(id == 1 || id == 3);
    }
    float all_nan[4] = {NAN, NAN, NAN, NAN};
    CHECK(sampler_sample(&s, all_nan) == 0);
    float all_inf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(sampler_sample(&s, all_inf) == 0);
    float one[4] = {-INFINITY, -INFINITY, 1.0f, -INFINITY};
    CHECK(sampler_sample(&s, one) == 2);
    sampler_free(&s);

    p.do_sample = 0;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 1.0f;
    CHECK(sampler_init(&s, &p, 4, NULL) == XLLM_OK);
    float g[4] = {NAN, NAN, NAN, NAN};
    CHECK(sampler_sample(&s, g) == 0);
    float h[4] = {NAN, -1.0f, NAN, -2.0f};
    CHECK(sampler_sample(&s, h) == 1);
    sampler_free(&s);

    /* a tiny positive temperature behaves like greedy, no NaN from 0/T */
    p = seeded(6);
    p.temperature = 1e-30f;
    CHECK(sampler_init(&s, &p, 4, NULL) == XLLM_OK);
    for (int t = 0; t < 50; t++) {
        float l[4] = {0.0f, 1.0f, 0.99f, -1.0f};
        CHECK(sampler_sample(&s, l) == 1);
    }
    sampler_free(&s);
}

/* A large vocab with top_k + top_p; also prints the cost per token. */
static void test_large_vocab(void) {
    const int32_t V = 151936;
    float *base = malloc(sizeof(float) * V), *l = malloc(sizeof(float) * V);
    for (int32_t i = 0; i < V; i++) base[i] = frand() * 20.0f - 10.0f;
    const char *names[3] = {"top_k=50 top_p=0.9", "top_p=0.9", "plain"};
    for (int mode = 0; mode < 3; mode++) {
        sampler s;
        xllm_sampling_params p = seeded(77);
        if (mode == 0) p.top_k = 50;
        if (mode <= 1) p.top_p = 0.9f;
        CHECK(sampler_init(&s, &p, V, NULL) == XLLM_OK);
        enum { steps = 20 };
        int32_t ids[steps];
        clock_t t0 = clock();
        for (int t = 0; t < steps; t++) {
            memcpy(l, base, sizeof(float) * V);
            ids[t] = sampler_sample(&s, l);
        }
        double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC / steps;
        for (int t = 0; t < steps; t++) {
            int32_t id = ids[t];
            CHECK(id >= 0 && id < V);
            if (mode == 0 && id >= 0 && id < V) { /* must be among the 50 largest */
                int larger = 0;
                for (int32_t i = 0; i < V; i++) larger += base[i] > base[id];
                CHECK(larger < 50);
            }
        }
        fprintf(stderr, "  vocab %d, %s: %.3f ms/token\n", (int)V, names[mode], ms);
        sampler_free(&s);
    }
    free(base);
    free(l);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    test_defaults();
    test_validation();
    test_greedy();
    test_repetition_penalty();
    test_presence_frequency();
    test_top_k();
    test_top_p();
    test_min_p();
    test_seed();
    test_distribution();
    test_nan_inf();
    test_top_p_ties();
    test_against_reference();
    test_large_vocab();
    CHECK(xllm_allocated_bytes() == before);
    return test_report("test_sampler");
}
