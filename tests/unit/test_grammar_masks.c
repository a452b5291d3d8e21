/*
 * test_grammar_masks.c - the fast allowed-token mask (token trie walk with
 * subtree pruning and the per-state mask cache, grammar_mask.c) against a
 * straightforward reference: every token's bytes advanced one by one on a
 * separate matcher. States come from random walks (a random allowed token at
 * each step) over every schema of the corpus (tests/data/schemas), json_object,
 * and GBNF / regex grammars, with two vocabularies: stories260k's (SentencePiece,
 * byte fallback) and the first 6000 ids of Qwen3's (byte-level BPE). Each
 * mask is computed twice (the second from the cache). Also: every token a
 * mask allows keeps the output in the language, and eos is never needed
 * to leave a state.
 */
#include "test.h"
#include "engine/grammar.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/file.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static long g_states, g_mismatch;

static void walk(const gram *g, const gram_vocab *v, int steps, const char *label) {
    gram_matcher *fast = gram_matcher_new(g, v), *ref = gram_matcher_new(g, v);
    const int32_t V = gram_vocab_size(v), W = (V + 31) / 32;
    uint32_t *want = mem_calloc((size_t)W, sizeof(uint32_t));
    int32_t *allowed = mem_malloc_array((size_t)V, sizeof(int32_t));
    int32_t sf = gram_start(fast), sr = gram_start(ref);
    for (int step = 0; step < steps && sf >= 0; step++) {
        memset(want, 0, (size_t)W * sizeof(uint32_t));
        int32_t n_allowed = 0;
        for (int32_t id = 0; id < V; id++) {
            size_t len;
            const char *b = gram_vocab_token(v, id, &len);
            if (b && gram_advance(ref, sr, b, len) >= 0) want[id >> 5] |= 1u << (id & 31), allowed[n_allowed++] = id;
        }
        for (int pass = 0; pass < 2; pass++) {
            const uint32_t *got = gram_mask(fast, sf);
            int same = got && !memcmp(got, want, (size_t)W * sizeof(uint32_t));
            if (!same && g_mismatch < 5) {
                int32_t first = -1;
                for (int32_t id = 0; got && id < V && first < 0; id++)
                    if (((got[id >> 5] ^ want[id >> 5]) >> (id & 31)) & 1u) first = id;
                fprintf(stderr, "%s step %d pass %d: mask differs from the reference (first at id %d)\n", label, step,
                        pass, (int)first);
            }
            g_mismatch += !same;
        }
        g_states++;
        CHECK_MSG(n_allowed > 0 || gram_accepting(ref, sr), "%s: a dead end at step %d", label, step);
        if (!n_allowed || (gram_accepting(ref, sr) && rnd() % 8 == 0)) break;
        int32_t id = allowed[rnd() % (uint64_t)n_allowed];
        size_t len;
        const char *b = gram_vocab_token(v, id, &len);
        sf = gram_advance(fast, sf, b, len);
        sr = gram_advance(ref, sr, b, len);
        CHECK(sf >= 0 && sr >= 0);
        CHECK(gram_accepting(fast, sf) == gram_accepting(ref, sr));
    }
    xllm_free(want);
    xllm_free(allowed);
    gram_matcher_free(fast);
    gram_matcher_free(ref);
}

static gram_vocab *vocab_of(const char *path, int32_t max_ids) {
    xllm_error err = {0};
    tokenizer *t = tokenizer_load(path, &err);
    CHECK_MSG(t != NULL, "%s: %s", path, err.message);
    if (!t) return NULL;
    char *bytes;
    int64_t *off;
    int32_t n;
    gram_vocab *v = NULL;
    if (!tokenizer_token_bytes(t, &bytes, &off, &n, &err)) {
        if (n > max_ids) n = max_ids;
        const char **tb = mem_malloc_array((size_t)n, sizeof(char *));
        uint32_t *lens = mem_malloc_array((size_t)n, sizeof(uint32_t));
        for (int32_t i = 0; i < n; i++) {
            lens[i] = (uint32_t)(off[i + 1] - off[i]);
            tb[i] = lens[i] ? bytes + off[i] : NULL;
        }
        CHECK(!gram_vocab_from_bytes(tb, lens, n, &v, &err));
        xllm_free((void *)tb);
        xllm_free(lens);
        xllm_free(bytes);
        xllm_free(off);
    }
    tokenizer_free(t);
    return v;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 24;
    gram_vocab *vocabs[2] = {vocab_of(XLLM_SOURCE_DIR "/models/stories260k", 1 << 30),
                             vocab_of(XLLM_SOURCE_DIR "/tests/data/tokenizers/qwen3", 6000)};
    const char *vnames[2] = {"stories260k", "qwen3[0:6000]"};
    /* the corpus, in name order */
    char *names[512];
    int n_names = 0;
    DIR *d = opendir(XLLM_SOURCE_DIR "/tests/data/schemas");
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d)) && n_names < 512;) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) names[n_names++] = mem_strdup(e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n_names, sizeof names[0], cmp_str);
    CHECK(n_names >= 100);
    static const struct { int kind; const char *text; } extra[] = {
        {XLLM_GRAMMAR_JSON_OBJECT, NULL},
        {XLLM_GRAMMAR_GBNF, "root ::= item (\", \" item){0,4} \".\"\nitem ::= [a-z]+ | \"\\\"\" [^\"\\n]{0,12} \"\\\"\" | [0-9]{1,3}\n"},
        {XLLM_GRAMMAR_GBNF, "root ::= (\"<tool_call>\" ws \"{\" [^}]* \"}\" ws \"</tool_call>\")+\nws ::= [ \\n]?\n"},
        {XLLM_GRAMMAR_REGEX, "(Dear|Hello) [A-Z][a-z]{2,10}, (the )?answer is (yes|no|[0-9]+\\.[0-9]{2})!"},
        {XLLM_GRAMMAR_REGEX, "[^\\n]{0,40}\\n[\\u00e0-\\u00ff\\u4e00-\\u9fff ]{1,10}"},
    };
    int n_gram = 0;
    for (int vi = 0; vi < 2; vi++) {
        if (!vocabs[vi]) continue;
        for (int i = 0; i < n_names + (int)(sizeof extra / sizeof extra[0]); i++) {
            gram *g = NULL;
            xllm_error err = {0};
            char label[320];
            xllm_status st;
            if (i < n_names) {
                char path[512];
                snprintf(path, sizeof path, "%s/tests/data/schemas/%s", XLLM_SOURCE_DIR, names[i]);
                char *text = NULL;
                size_t len = 0;
                st = file_read_all(path, &text, &len, &err);
                if (!st) st = gram_compile(XLLM_GRAMMAR_JSON_SCHEMA, text, NULL, NULL, &g, &err);
                xllm_free(text);
                snprintf(label, sizeof label, "%s/%s", vnames[vi], names[i]);
            } else {
                int k = i - n_names;
                st = gram_compile(extra[k].kind, extra[k].text, NULL, NULL, &g, &err);
                snprintf(label, sizeof label, "%s/grammar %d", vnames[vi], k);
            }
            CHECK_MSG(!st, "%s: %s", label, err.message);
            if (st) continue;
            for (int w = 0; w < 2; w++) walk(g, vocabs[vi], steps, label);
            gram_free(g);
            n_gram++;
        }
    }
    fprintf(stderr, "test_grammar_masks: %d grammars, %ld states, %ld masks differ\n", n_gram, g_states, g_mismatch);
    CHECK(g_states >= 2000);
    CHECK(g_mismatch == 0);
    for (int i = 0; i < n_names; i++) xllm_free(names[i]);
    for (int vi = 0; vi < 2; vi++) gram_vocab_free(vocabs[vi]);
    return test_report("test_grammar_masks");
}
