/*
 * fingerprint.c - a 64-bit identity of a model's weights, for files that are
 * only valid for one model (knowledge prefixes' KV files, src/engine).
 *
 * It hashes (XXH3) the configuration's shape and, per tensor of the weights
 * file, its name, dtype, shape, size and a sample of its bytes (the first
 * 64 KiB, and the last 64 KiB of one over 128 KiB), so another model or another quantization of the same model
 * gets another fingerprint without reading every byte of a large file.
 */
#include "model/model.h"

#include <string.h>
#include <xxhash.h>

#define SAMPLE_BYTES 65536

uint64_t model_fingerprint(const model *m) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    const model_config *c = &m->cfg;
    int32_t dims[] = {c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab, c->intermediate};
    XXH3_64bits_update(h, dims, sizeof dims);
    size_t n = m->weights_file ? st_count(m->weights_file) : 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_at(m->weights_file, i);
        XXH3_64bits_update(h, t->name, strlen(t->name) + 1);
        XXH3_64bits_update(h, &t->dtype, sizeof t->dtype);
        XXH3_64bits_update(h, t->shape, sizeof t->shape);
        XXH3_64bits_update(h, &t->nbytes, sizeof t->nbytes);
        size_t take = t->nbytes < SAMPLE_BYTES ? t->nbytes : SAMPLE_BYTES;
        if (t->data && take) {
            XXH3_64bits_update(h, t->data, take);
            if (t->nbytes > 2 * SAMPLE_BYTES)
                XXH3_64bits_update(h, (const unsigned char *)t->data + t->nbytes - take, take);
        }
    }
    uint64_t r = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return r;
}
