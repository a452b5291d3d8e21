/*
 * test_model_parts.c - a model cut into layer ranges gives the whole model's
 * bits: for each tiny architecture (and stories260k), parts [0, k) and
 * [k, n) - and three parts - run one after another (embed on the first,
 * hidden states handed over, head on the last, each part with its own KV pool
 * of its layers only) produce logits identical to model_forward of the whole
 * model, over two steps (a prefill of two sequences, then decode tokens that
 * read the cache); each part binds only its share of the weights; the layer
 * split is validated. No MPI here: this is what each pipeline rank computes.
 */
#include "model/model.h"
#include "base/alloc.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define B 16
#define NB 16

typedef struct part {
    model *m;
    kv_cache kv;
} part;

static int load_part(part *p, const char *path, int l0, int l1) {
    xllm_error err;
    model_part mp = {l0, l1, 0, 1, NULL};
    p->m = model_load_part(path, 1, 64, &mp, &err);
    CHECK_MSG(p->m != NULL, "%s [%d, %d): %s", path, l0, l1, err.message);
    if (!p->m) return -1;
    const model_config *c = &p->m->cfg;
    if (kv_cache_init(&p->kv, &p->m->be, p->m->layer_end - p->m->layer_begin, c->n_kv_heads, c->head_dim, B, NB, KV_F32, &err))
        return -1;
    p->kv.layer0 = p->m->layer_begin;
    return 0;
}

static void free_part(part *p) {
    kv_cache_free(&p->kv);
    model_free(p->m);
}

/* Runs the batch through the parts in order, like the pipeline does. */
static void run_parts(part *ps, int n, const fwd_batch *b, float *logits) {
    xllm_error err;
    CHECK(model_embed(ps[0].m, b, &err) == XLLM_OK);
    int H = ps[0].m->cfg.hidden;
    for (int i = 0; i < n; i++) {
        if (i > 0) memcpy(model_hidden(ps[i].m), model_hidden(ps[i - 1].m), (size_t)b->n_tokens * H * sizeof(float));
        /* layer by layer, as the pipeline stages call it */
        for (int l = ps[i].m->layer_begin; l < ps[i].m->layer_end; l++) model_layers(ps[i].m, &ps[i].kv, b, l, l + 1);
    }
    model_head(ps[n - 1].m, b, logits);
}

static void check_model(const char *path) {
    part whole;
    if (load_part(&whole, path, 0, 0)) return;
    int L = whole.m->cfg.n_layers, V = whole.m->cfg.vocab;
    /* two sequences: blocks 0,1 and 2,3 */
    int32_t t0[] = {0, 1}, t1[] = {2, 3};
    const int32_t *tables[] = {t0, t1};
    int32_t tok[12], pos[12], seq[12], out[2] = {6, 11};
    for (int i = 0; i < 12; i++) {
        tok[i] = (int32_t)((i * 37 + 5) % V);
        seq[i] = i < 7 ? 0 : 1;
        pos[i] = i < 7 ? i : i - 7;
    }
    fwd_batch pre = {12, tok, pos, seq, tables, 2, out};
    int32_t dtok[2] = {(int32_t)(11 % V), (int32_t)(29 % V)}, dpos[2] = {7, 5}, dseq[2] = {0, 1}, dout[2] = {0, 1};
    fwd_batch dec = {2, dtok, dpos, dseq, tables, 2, dout};
    size_t n = 2 * (size_t)V;
    float *ref = malloc(2 * n * sizeof(float)), *got = malloc(2 * n * sizeof(float));
    xllm_error err;
    CHECK(model_forward(whole.m, &whole.kv, &pre, ref, &err) == XLLM_OK);
    CHECK(model_forward(whole.m, &whole.kv, &dec, ref + n, &err) == XLLM_OK);
    size_t whole_bytes = whole.m->bound_bytes;

    int cuts[][3] = {{L / 2, 0, 0}, {1, L - 1, 0}};
    for (int ci = 0; ci < 2; ci++) {
        int k1 = cuts[ci][0], k2 = cuts[ci][1];
        if (k1 < 1 || k1 >= L || (k2 && (k2 <= k1 || k2 >= L))) continue;
        int bounds[4] = {0, k1, k2 ? k2 : L, L};
        int np = k2 ? 3 : 2;
        part ps[3];
        memset(ps, 0, sizeof ps);
        int ok = 1;
        for (int i = 0; i < np && ok; i++) ok = !load_part(&ps[i], path, bounds[i], bounds[i + 1]);
        if (ok) {
            run_parts(ps, np, &pre, got);
            run_parts(ps, np, &dec, got + n);
            CHECK_MSG(!memcmp(ref, got, 2 * n * sizeof(float)), "%s: %d parts cut at %d,%d: logits differ", path, np,
                      k1, k2);
            /* each part binds a share; together they bind what the whole does
             * (plus the tied lm_head again on the last part) */
            size_t sum = 0;
            for (int i = 0; i < np; i++) {
                sum += ps[i].m->bound_bytes;
                CHECK(ps[i].m->bound_bytes < whole_bytes);
                CHECK((ps[i].m->embed.data != NULL) == (i == 0));
                CHECK((ps[i].m->lm_head.data != NULL) == (i == np - 1));
                CHECK(ps[i].kv.n_layers == bounds[i + 1] - bounds[i]);
            }
            CHECK_MSG(sum >= whole_bytes && sum <= whole_bytes + (size_t)V * whole.m->cfg.hidden * 4,
                      "%s: parts bind %zu bytes, the whole %zu", path, sum, whole_bytes);
            /* a part cannot run the whole pass */
            CHECK(model_forward(ps[0].m, &ps[0].kv, &pre, got, &err) == XLLM_ERR_INVALID_ARGUMENT);
            CHECK(strstr(err.message, "holds layers") != NULL);
        }
        for (int i = 0; i < np; i++)
            if (ps[i].m) free_part(&ps[i]);
    }
    free(ref);
    free(got);
    free_part(&whole);
}

static void check_split(void) {
    int l0 = -1, l1 = -1;
    xllm_error err;
    CHECK(model_split_layers(22, 2, NULL, 0, &l0, &l1, &err) == XLLM_OK && l0 == 0 && l1 == 11);
    CHECK(model_split_layers(22, 3, NULL, 0, &l0, &l1, &err) == XLLM_OK && l0 == 0 && l1 == 8);
    CHECK(model_split_layers(22, 3, NULL, 2, &l0, &l1, &err) == XLLM_OK && l0 == 15 && l1 == 22);
    CHECK(model_split_layers(22, 3, "8,8,6", 1, &l0, &l1, &err) == XLLM_OK && l0 == 8 && l1 == 16);
    CHECK(model_split_layers(22, 3, "8,8,6", 2, &l0, &l1, &err) == XLLM_OK && l0 == 16 && l1 == 22);
    CHECK(model_split_layers(22, 3, "8,8,5", 0, &l0, &l1, &err) == XLLM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "sums to 21"));
    CHECK(model_split_layers(22, 3, "11,11", 0, &l0, &l1, &err) == XLLM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "2 entries for 3"));
    CHECK(model_split_layers(22, 2, "22,0", 0, &l0, &l1, &err) == XLLM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "at least 1"));
    CHECK(model_split_layers(22, 2, "11,x", 0, &l0, &l1, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(model_split_layers(2, 3, NULL, 0, &l0, &l1, &err) == XLLM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "at least one layer per stage"));
    model_part bad = {3, 2, 0, 1, NULL};
    CHECK(model_load_part(XLLM_SOURCE_DIR "/tests/data/tiny/llama", 1, 64, &bad, &err) == NULL &&
          strstr(err.message, "layer range"));
}

int main(void) {
    check_split();
    const char *models[] = {"tiny/llama", "tiny/qwen3", "tiny/qwen3_moe", "tiny/mixtral", "tiny/qwen2_moe",
                            "tiny/mistral", NULL};
    char path[4096];
    for (int i = 0; models[i]; i++) {
        snprintf(path, sizeof path, "%s/tests/data/%s", XLLM_SOURCE_DIR, models[i]);
        check_model(path);
    }
    check_model(XLLM_SOURCE_DIR "/models/stories260k");
    size_t live = xllm_allocated_bytes();
    CHECK_MSG(live == 0, "%zu bytes still allocated", live);
    return test_report("test_model_parts");
}
