/*
 * test_hostile_tokenizer.c - tokenizer.json files written by an adversary:
 * each must load as HF would or fail with a clear error, in memory bounded by
 * the file (id tables are indexed by id, so ids must be dense), and nothing
 * the tokenizer inserts (post-processor, padding) may be an id outside the
 * vocabulary. Nothing may leak.
 */
#include "test.h"
#include "base/alloc.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

/* A tiny BPE tokenizer; vocab, added and extra ("post_processor"/"padding"
 * members, with a leading comma) are spliced in. */
static void load_case(const char *name, const char *vocab, const char *added, const char *extra, const char *want_err) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"version\": \"1.0\", \"added_tokens\": [%s], \"model\": {\"type\": \"BPE\", \"vocab\": {%s}, "
             "\"merges\": [\"a b\"]}%s}",
             added, vocab, extra);
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    tokenizer *t = tokenizer_load_text(json, strlen(json), NULL, 0, name, &err);
    if (want_err) {
        CHECK_MSG(!t && strstr(err.message, want_err), "%s: want error containing \"%s\", got %s", name, want_err,
                  t ? "a tokenizer" : err.message);
    } else {
        CHECK_MSG(t != NULL, "%s: %s", name, err.message);
        if (t) {
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK(!tokenizer_encode(t, "ab", 2, 1, &ids, &n, &err));
            for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tokenizer_vocab_size(t));
            xllm_free(ids);
        }
    }
    fprintf(stderr, "  %-26s %s\n", name, t ? "loaded" : err.message);
    tokenizer_free(t);
    CHECK_MSG(xllm_allocated_bytes() == base, "%s: leaked", name);
}

#define V "\"a\": 0, \"b\": 1, \"ab\": 2"
#define ADDED(id) "{\"id\": " id ", \"content\": \"<s>\", \"special\": true}"

/* A word of characters outside the vocabulary, with no unk token, tokenizes
 * to nothing (HF drops them); found by fuzz_xllm: the word cache was then
 * handed a null id array plus 0 (UBSan), on the first encode and on a cache
 * hit. */
static void word_without_ids(void) {
    const char *json = "{\"version\": \"1.0\", \"added_tokens\": [], \"model\": {\"type\": \"BPE\", \"vocab\": {" V
                       "}, \"merges\": [\"a b\"]}}";
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    tokenizer *t = tokenizer_load_text(json, strlen(json), NULL, 0, "word without ids", &err);
    CHECK_MSG(t != NULL, "%s", err.message);
    for (int k = 0; t && k < 3; k++) {
        int32_t *ids = NULL;
        size_t n = 99;
        CHECK(!tokenizer_encode(t, k == 2 ? "zzab" : "zz", k == 2 ? 4 : 2, 0, &ids, &n, &err));
        CHECK_MSG(n == (k == 2 ? 1u : 0u), "encode %d: %zu ids", k, n);
        xllm_free(ids);
    }
    tokenizer_free(t);
    CHECK_MSG(xllm_allocated_bytes() == base, "word without ids: leaked");
}

int main(void) {
    word_without_ids();
    load_case("baseline", V, ADDED("3"), "", NULL);
    load_case("gap in ids", "\"a\": 0, \"b\": 1, \"ab\": 40", ADDED("3"), "", NULL); /* small gaps are fine */
    load_case("vocab id 1e9", "\"a\": 0, \"b\": 1, \"ab\": 1000000000", "", "", "far beyond");
    load_case("vocab id 2^31-2", "\"a\": 0, \"b\": 1, \"ab\": 2147483646", "", "", "far beyond");
    load_case("vocab id 2^31", "\"a\": 0, \"b\": 1, \"ab\": 2147483648", "", "", "no valid id");
    load_case("vocab id 1.5", "\"a\": 0, \"b\": 1, \"ab\": 1.5", "", "", "no valid id");
    load_case("vocab id -1", "\"a\": 0, \"b\": 1, \"ab\": -1", "", "", "no valid id");
    load_case("added id 1e9", V, ADDED("1000000000"), "", "far beyond");
    load_case("added id 1.5", V, ADDED("3.5"), "", "added token without an id");
    load_case("added id 1e20", V, ADDED("1e20"), "", "added token without an id");
    load_case("post id beyond vocab", V, ADDED("3"),
              ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
              "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": "
              "{\"<s>\": {\"id\": \"<s>\", \"ids\": [5000], \"tokens\": [\"<s>\"]}}}",
              "is not a token");
    load_case("post id 1.5", V, ADDED("3"),
              ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
              "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": "
              "{\"<s>\": {\"id\": \"<s>\", \"ids\": [2.5], \"tokens\": [\"<s>\"]}}}",
              "bad id");
    load_case("post ok", V, ADDED("3"),
              ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
              "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": "
              "{\"<s>\": {\"id\": \"<s>\", \"ids\": [3], \"tokens\": [\"<s>\"]}}}",
              NULL);
    load_case("pad id 1e20", V, ADDED("3"),
              ", \"padding\": {\"strategy\": \"BatchLongest\", \"direction\": \"Right\", \"pad_to_multiple_of\": null, "
              "\"pad_id\": 1e20, \"pad_type_id\": 0, \"pad_token\": \"<s>\"}",
              "bad \"padding\"");
    load_case("pad id beyond vocab", V, ADDED("3"),
              ", \"padding\": {\"strategy\": \"BatchLongest\", \"direction\": \"Right\", \"pad_to_multiple_of\": null, "
              "\"pad_id\": 7000, \"pad_type_id\": 0, \"pad_token\": \"<s>\"}",
              "is not a token");
    load_case("pad fixed 1e12", V, ADDED("3"),
              ", \"padding\": {\"strategy\": {\"Fixed\": 1000000000000}, \"direction\": \"Right\", "
              "\"pad_to_multiple_of\": null, \"pad_id\": 3, \"pad_type_id\": 0, \"pad_token\": \"<s>\"}",
              "bad \"padding\"");
    load_case("pad multiple 1e12", V, ADDED("3"),
              ", \"padding\": {\"strategy\": \"BatchLongest\", \"direction\": \"Right\", "
              "\"pad_to_multiple_of\": 1000000000000, \"pad_id\": 3, \"pad_type_id\": 0, \"pad_token\": \"<s>\"}",
              "bad \"padding\"");
    load_case("pad fixed 64", V, ADDED("3"),
              ", \"padding\": {\"strategy\": {\"Fixed\": 64}, \"direction\": \"Left\", \"pad_to_multiple_of\": null, "
              "\"pad_id\": 3, \"pad_type_id\": 0, \"pad_token\": \"<s>\"}",
              NULL);
    return test_report("test_hostile_tokenizer");
}
