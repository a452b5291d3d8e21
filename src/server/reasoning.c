/*
 * reasoning.c - the model's thinking split from its answer: text inside
 * <think>...</think> (Qwen3, DeepSeek-R1 and their kin) becomes
 * reasoning_content, the rest content.
 *
 * The idea: a three-state filter over the output as it streams. Before any
 * text the output may open <think> (after whitespace); when the rendered
 * prompt already opened it (a generation prompt ending in "<think>\n"), the
 * output starts inside. Inside, everything up to </think> is reasoning; an
 * output that never closes it is all reasoning (as vLLM reports an
 * unfinished thought). After it, content, its leading whitespace dropped. A
 * tag cut between two pushes is held back until the next push settles it.
 */
#include "tool_calls.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { TH_START, TH_INSIDE, TH_AFTER, TH_CONTENT };

struct think_stream {
    int state;
    sbuf held;
};

think_stream *think_stream_new(int start_inside) {
    think_stream *s = calloc(1, sizeof *s);
    if (s) s->state = start_inside ? TH_INSIDE : TH_START;
    return s;
}

void think_stream_free(think_stream *s) {
    if (!s) return;
    sb_free(&s->held);
    free(s);
}

int template_thinks(const char *src) { return src && strstr(src, "<think>") && strstr(src, "</think>"); }

int prompt_opens_think(const char *p, size_t n) {
    while (n && isspace((unsigned char)p[n - 1])) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

static void drop(sbuf *b, size_t k) {
    if (!k) return;
    memmove(b->p, b->p + k, b->len - k);
    b->len -= k;
}

void think_stream_push(think_stream *s, const char *t, size_t n, int final, sbuf *reasoning, sbuf *content) {
    sb_put(&s->held, t, n);
    for (;;) {
        sbuf *h = &s->held;
        if (s->state == TH_START) {
            size_t i = 0;
            while (i < h->len && isspace((unsigned char)h->p[i])) i++;
            size_t rest = h->len - i;
            if (rest >= 7 && !memcmp(h->p + i, "<think>", 7)) {
                drop(h, i + 7);
                s->state = TH_INSIDE;
                continue;
            }
            if (!final && (rest == 0 || (rest < 7 && !memcmp(h->p + i, "<think>", rest)))) return; /* undecided */
            s->state = TH_CONTENT;
            continue;
        }
        if (s->state == TH_INSIDE) {
            const char *end = NULL;
            for (size_t i = 0; i + 8 <= h->len && !end; i++)
                if (!memcmp(h->p + i, "</think>", 8)) end = h->p + i;
            if (end) {
                sb_put(reasoning, h->p, (size_t)(end - h->p));
                drop(h, (size_t)(end - h->p) + 8);
                s->state = TH_AFTER;
                continue;
            }
            size_t keep = 0;
            if (!final)
                for (size_t l = h->len < 7 ? h->len : 7; l > 0 && !keep; l--)
                    if (!memcmp(h->p + h->len - l, "</think>", l)) keep = l;
            sb_put(reasoning, h->p, h->len - keep);
            drop(h, h->len - keep);
            return;
        }
        if (s->state == TH_AFTER) {
            size_t i = 0;
            while (i < h->len && isspace((unsigned char)h->p[i])) i++;
            drop(h, i);
            if (!h->len) return;
            s->state = TH_CONTENT;
        }
        sb_put(content, h->p, h->len);
        h->len = 0;
        return;
    }
}
