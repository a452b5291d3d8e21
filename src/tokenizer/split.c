/*
 * split.c - cutting a piece of text at the matches of a pattern, with HF's
 * split behaviours (NormalizedString::split).
 *
 * The piece is seen as alternating segments: the matches, and the text
 * between them. invert swaps which is which. Then: Removed drops the
 * matches; Isolated keeps every segment as its own piece; Contiguous joins
 * neighbouring segments of the same kind (adjacent matches); MergedWithPrevious
 * appends a match to the non-match just before it; MergedWithNext prepends a
 * match to the non-match just after it. Empty pieces are dropped. A piece
 * starting at offset 0 keeps the "starts at original offset 0" flag.
 */
#include "tokenizer/tok_internal.h"
#include "base/error.h"

#include <string.h>

xllm_status tok_split_behavior_parse(const cJSON *j, const char *path, const char *what, tok_split_behavior *out,
                                     xllm_error *err) {
    static const struct { const char *name; tok_split_behavior b; } names[] = {
        {"Removed", SPLIT_REMOVED}, {"Isolated", SPLIT_ISOLATED}, {"MergedWithPrevious", SPLIT_MERGED_PREV},
        {"MergedWithNext", SPLIT_MERGED_NEXT}, {"Contiguous", SPLIT_CONTIGUOUS}};
    if (!cJSON_IsString(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: %s without a \"behavior\"", path, what);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(j->valuestring, names[i].name) == 0) {
            *out = names[i].b;
            return XLLM_OK;
        }
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported %s behavior \"%s\"", path, what, j->valuestring);
}

typedef struct { size_t a, b; int match; } seg;

/* The k-th segment (k counts gaps and matches in order); 0 when past the end. */
typedef struct {
    const tok_ranges *m;
    size_t len, i, pos; /* next match index, position reached */
    int invert;
} seg_iter;

static int seg_next(seg_iter *it, seg *s) {
    if (it->pos >= it->len && it->i >= it->m->n) return 0;
    if (it->i < it->m->n) {
        size_t ms = it->m->v[2 * it->i], me = it->m->v[2 * it->i + 1];
        if (it->pos < ms) { /* the gap before the match */
            *s = (seg){it->pos, ms, it->invert};
            it->pos = ms;
            return 1;
        }
        *s = (seg){ms, me, !it->invert};
        it->pos = me;
        it->i++;
        return 1;
    }
    *s = (seg){it->pos, it->len, it->invert};
    it->pos = it->len;
    return 1;
}

static int emit(tok_list *out, const char *s, size_t a, size_t b, int32_t flag) {
    if (b <= a) return 0;
    return tok_list_push(out, s + a, b - a, -1, a == 0 ? flag : 0) ? TOK_ERR_OOM : 0;
}

int tok_split_apply(tok_split_behavior beh, const char *s, size_t len, int32_t flag, const tok_ranges *m, int invert,
                    tok_list *out) {
    seg_iter it = {m, len, 0, 0, invert};
    seg cur, nx;
    int have = seg_next(&it, &cur);
    if (!have) return 0;
    int prev_match = 0;
    size_t pa = 0, pb = 0; /* pending piece */
    int pending = 0;
    while (have) {
        int have_next = seg_next(&it, &nx);
        switch (beh) {
        case SPLIT_REMOVED:
            if (!cur.match && emit(out, s, cur.a, cur.b, flag)) return TOK_ERR_OOM;
            break;
        case SPLIT_ISOLATED:
            if (emit(out, s, cur.a, cur.b, flag)) return TOK_ERR_OOM;
            break;
        case SPLIT_CONTIGUOUS:
        case SPLIT_MERGED_PREV: {
            int join = beh == SPLIT_CONTIGUOUS ? (pending && cur.match == prev_match)
                                               : (pending && cur.match && !prev_match);
            if (join) {
                pb = cur.b;
            } else {
                if (pending && emit(out, s, pa, pb, flag)) return TOK_ERR_OOM;
                pa = cur.a;
                pb = cur.b;
                pending = 1;
            }
            break;
        }
        case SPLIT_MERGED_NEXT:
            if (cur.match && have_next && !nx.match) { /* joins the next segment */
                nx.a = cur.a;
            } else if (emit(out, s, cur.a, cur.b, flag)) {
                return TOK_ERR_OOM;
            }
            break;
        }
        prev_match = cur.match;
        cur = nx;
        have = have_next;
    }
    if (pending && emit(out, s, pa, pb, flag)) return TOK_ERR_OOM;
    return 0;
}
