/*
 * truncation.c - the "truncation" and "padding" members of tokenizer.json,
 * for one sequence, applied as HF's encode applies them: truncation before
 * the post-processor (leaving room for the ids it adds when special tokens
 * are asked for), cutting on the right or the left; padding after it, to a
 * fixed length or (one sequence being the whole batch) to its own length,
 * rounded up to pad_to_multiple_of, with pad_id on the right or the left.
 * Overflowing pieces (stride) are not produced: xLLM encodes one sequence.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <math.h>
#include <string.h>

struct tok_trunc {
    int truncate, trunc_left;
    size_t max_length;
    int pad, pad_left;
    size_t pad_fixed; /* 0 = batch longest */
    size_t multiple;
    int32_t pad_id;
};

void tok_trunc_free(tok_trunc *t) { xllm_free(t); }

/* A count in [0, max]: padding lengths stay below 2^24 tokens (beyond, they
 * only serve to make tok_pad allocate gigabytes); max_length may be larger. */
static int get_count_max(const cJSON *j, const char *name, size_t *out, double max) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > max || v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (size_t)v->valuedouble;
    return 0;
}
#define PAD_MAX ((double)(1 << 24))
static int get_count(const cJSON *j, const char *name, size_t *out) { return get_count_max(j, name, out, PAD_MAX); }

static int is_dir(const cJSON *j, const char *left) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "direction");
    return cJSON_IsString(d) && strcmp(d->valuestring, left) == 0;
}

xllm_status tok_trunc_parse(const cJSON *trunc, const cJSON *pad, const char *path, tok_trunc **out,
                            xllm_error *err) {
    *out = NULL;
    int has_t = trunc && !cJSON_IsNull(trunc), has_p = pad && !cJSON_IsNull(pad);
    if (!has_t && !has_p) return XLLM_OK;
    tok_trunc *t = mem_calloc(1, sizeof *t);
    if (!t) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (has_t) {
        t->truncate = 1;
        t->trunc_left = is_dir(trunc, "Left");
        if (!cJSON_IsObject(trunc) || get_count_max(trunc, "max_length", &t->max_length, 1e12)) {
            xllm_free(t);
            return err_setf(err, XLLM_ERR_FORMAT, "%s: bad \"truncation\"", path);
        }
    }
    if (has_p) {
        t->pad = 1;
        t->pad_left = is_dir(pad, "Left");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(pad, "strategy");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(pad, "pad_id");
        int32_t idv = 0;
        int bad = !cJSON_IsObject(pad) || get_count(pad, "pad_to_multiple_of", &t->multiple) ||
                  (id && !tok_json_int(id, 0, 0x7ffffffe, &idv));
        if (cJSON_IsObject(s)) bad |= get_count(s, "Fixed", &t->pad_fixed);
        else if (!cJSON_IsString(s) || strcmp(s->valuestring, "BatchLongest") != 0) bad = 1;
        if (bad) {
            xllm_free(t);
            return err_setf(err, XLLM_ERR_FORMAT, "%s: bad \"padding\"", path);
        }
        t->pad_id = idv;
    }
    *out = t;
    return XLLM_OK;
}

int32_t tok_trunc_pad_id(const tok_trunc *t) { return t && t->pad ? t->pad_id : -1; }

void tok_truncate(const tok_trunc *t, tok_ids *ids, size_t added) {
    if (!t || !t->truncate) return;
    size_t max = t->max_length > added ? t->max_length - added : 0;
    if (ids->n <= max) return;
    if (t->trunc_left) memmove(ids->v, ids->v + (ids->n - max), max * sizeof *ids->v);
    ids->n = max;
}

int tok_pad(const tok_trunc *t, tok_ids *ids) {
    if (!t || !t->pad) return 0;
    size_t target = t->pad_fixed ? t->pad_fixed : ids->n;
    if (t->multiple && target % t->multiple) target += t->multiple - target % t->multiple;
    if (ids->n >= target) return 0;
    size_t extra = target - ids->n;
    for (size_t i = 0; i < extra; i++)
        if (tok_ids_push(ids, t->pad_id)) return -1;
    if (t->pad_left) {
        memmove(ids->v + extra, ids->v, (ids->n - extra) * sizeof *ids->v);
        for (size_t i = 0; i < extra; i++) ids->v[i] = t->pad_id;
    }
    return 0;
}
