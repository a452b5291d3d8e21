/*
 * test_tokenizer.c - the HF-compatible tokenizer: exact agreement with
 * HuggingFace `tokenizers` on the tinystories-tok512 fixtures (ids with and
 * without special tokens, decodes keeping and skipping them), streaming
 * detokenization (pushes concatenate to the full decode, never a broken
 * UTF-8 character), the public wrappers, hand-written tokenizer.json files
 * for the components the fixtures do not reach, and clean load errors.
 * The Qwen3 fixture (byte-level BPE) gets the same checks; when the shared
 * data (../shared/data/tokenizers) is present, so do llama2, llama3 and
 * gemma3 (that data is not in the repository).
 */
#include "test.h"
#include "base/alloc.h"
#include "base/file.h"
#include "tokenizer/tok_internal.h"
#include "xllm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURES XLLM_SOURCE_DIR "/tests/data/tokenizers/tinystories-tok512"

/* ------------------------------------------------------------- helpers */

static int utf8_ok(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t need = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3
                    : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        if (!need || i + need > n) return 0;
        for (size_t k = 1; k < need; k++)
            if ((u[i + k] & 0xc0) != 0x80) return 0;
        i += need;
    }
    return 1;
}

static int ids_equal(const int32_t *a, size_t na, const cJSON *arr) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != na) return 0;
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (!cJSON_IsNumber(x) || (int32_t)x->valuedouble != a[i++]) return 0;
    return 1;
}

static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = mem_malloc((*n ? *n : 1) * sizeof *v);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (int32_t)x->valuedouble;
    return v;
}

/* The string value of "key" in a one-line JSON object, decoded with its
 * length (cJSON stops at an escaped U+0000, which the corpus contains). */
static char *json_raw_string(const char *line, const char *key, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *out = mem_malloc(strlen(p) + 1);
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p != '\\') { out[n++] = *p++; continue; }
        p++;
        char c = *p++;
        if (c == 'n') out[n++] = '\n';
        else if (c == 't') out[n++] = '\t';
        else if (c == 'r') out[n++] = '\r';
        else if (c == 'b') out[n++] = '\b';
        else if (c == 'f') out[n++] = '\f';
        else if (c != 'u') out[n++] = c;
        else {
            unsigned cp = (unsigned)strtoul((char[]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            }
            if (cp < 0x80) out[n++] = (char)cp;
            else if (cp < 0x800) { out[n++] = (char)(0xc0 | cp >> 6); out[n++] = (char)(0x80 | (cp & 63)); }
            else if (cp < 0x10000) {
                out[n++] = (char)(0xe0 | cp >> 12);
                out[n++] = (char)(0x80 | ((cp >> 6) & 63));
                out[n++] = (char)(0x80 | (cp & 63));
            } else {
                out[n++] = (char)(0xf0 | cp >> 18);
                out[n++] = (char)(0x80 | ((cp >> 12) & 63));
                out[n++] = (char)(0x80 | ((cp >> 6) & 63));
                out[n++] = (char)(0x80 | (cp & 63));
            }
        }
    }
    out[n] = 0;
    *len = n;
    return out;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}

static int check_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip, const char *src_line,
                        const char *key, int line) {
    char *text = NULL;
    size_t len = 0, want_len = 0;
    xllm_error e;
    CHECK_MSG(tokenizer_decode(t, ids, n, skip, &text, &len, &e) == XLLM_OK, "line %d: %s", line, e.message);
    char *want = json_raw_string(src_line, key, &want_len);
    int ok = text && want && len == want_len && memcmp(text, want, len) == 0;
    CHECK_MSG(ok, "line %d %s: got \"%s\" want \"%s\"", line, key, text ? text : "(null)", want ? want : "?");
    xllm_free(text);
    xllm_free(want);
    return ok;
}

/* Push ids one at a time: every chunk whole UTF-8, together the full decode. */
static void check_stream(const tokenizer *t, const int32_t *ids, size_t n, int skip, int line) {
    char *full = NULL;
    size_t full_len = 0;
    if (tokenizer_decode(t, ids, n, skip, &full, &full_len, NULL) != XLLM_OK) {
        CHECK_MSG(0, "line %d: decode failed", line);
        return;
    }
    detok_stream *s = detok_stream_new(t, skip);
    char *acc = mem_malloc(full_len + 64);
    size_t acc_len = 0;
    int broken = 0, overflow = 0;
    for (size_t i = 0; i < n; i++) {
        const char *out;
        size_t out_len;
        xllm_error e;
        CHECK_MSG(detok_stream_push(s, ids[i], &out, &out_len, &e) == XLLM_OK, "line %d: %s", line, e.message);
        if (!utf8_ok(out, out_len)) broken = 1;
        if (acc_len + out_len > full_len + 63) { overflow = 1; break; }
        memcpy(acc + acc_len, out, out_len);
        acc_len += out_len;
    }
    const char *out;
    size_t out_len;
    CHECK(detok_stream_flush(s, &out, &out_len, NULL) == XLLM_OK);
    CHECK_MSG(out_len == 0, "line %d: flush had %zu bytes left", line, out_len);
    CHECK_MSG(!broken, "line %d: stream chunk with a broken UTF-8 sequence (skip=%d)", line, skip);
    CHECK_MSG(!overflow && acc_len == full_len && memcmp(acc, full, full_len) == 0,
              "line %d: stream (skip=%d) gave \"%.*s\" want \"%s\"", line, skip, (int)acc_len, acc, full);
    detok_stream_free(s);
    xllm_free(acc);
    xllm_free(full);
}

/* Every line of an expected.jsonl against tokenizer `tok_path`. */
static void check_expected(const char *tok_path, const char *jsonl_path, int full_checks) {
    xllm_error e;
    tokenizer *t = tokenizer_load(tok_path, &e);
    CHECK_MSG(t != NULL, "%s", e.message);
    char *data;
    size_t len;
    CHECK_MSG(file_read_all(jsonl_path, &data, &len, &e) == XLLM_OK, "%s", e.message);
    if (!t || !data) {
        tokenizer_free(t);
        return;
    }
    int lines = 0, passed = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        lines++;
        int id = (int)cJSON_GetObjectItem(j, "id")->valuedouble;
        size_t text_len;
        char *text = json_raw_string(line, "text", &text_len);
        int ok = 1;
        for (int special = 1; special >= 0; special--) {
            int32_t *ids = NULL;
            size_t n = 0;
            const cJSON *want = cJSON_GetObjectItem(j, special ? "ids" : "ids_no_special");
            CHECK_MSG(tokenizer_encode(t, text, text_len, special, &ids, &n, &e) == XLLM_OK, "%s", e.message);
            int same = ids_equal(ids, n, want);
            CHECK_MSG(same, "%s line %d (special=%d): ids differ for \"%s\"", jsonl_path, id, special, text);
            if (!same) {
                print_ids("got ", ids, n);
                size_t wn;
                int32_t *w = json_ids(want, &wn);
                print_ids("want", w, wn);
                xllm_free(w);
            }
            ok &= same;
            xllm_free(ids);
        }
        size_t n, nn;
        int32_t *ids = json_ids(cJSON_GetObjectItem(j, "ids"), &n);
        int32_t *ids_ns = json_ids(cJSON_GetObjectItem(j, "ids_no_special"), &nn);
        ok &= check_decode(t, ids, n, 0, line, "decode", id);
        ok &= check_decode(t, ids, n, 1, line, "decode_skip_special", id);
        ok &= check_decode(t, ids_ns, nn, 0, line, "decode_no_special", id);
        if (full_checks) {
            const cJSON *toks = cJSON_GetObjectItem(j, "tokens"), *tk;
            size_t i = 0;
            int tok_ok = cJSON_GetArraySize(toks) == (int)n;
            cJSON_ArrayForEach(tk, toks) {
                const char *p = i < n ? tokenizer_id_to_piece(t, ids[i]) : NULL;
                if (!p || strcmp(p, tk->valuestring) != 0 || tokenizer_piece_to_id(t, p) != ids[i]) tok_ok = 0;
                i++;
            }
            CHECK_MSG(tok_ok, "line %d: tokens differ", id);
        }
        check_stream(t, ids, n, 0, id);
        check_stream(t, ids, n, 1, id);
        passed += ok;
        xllm_free(ids);
        xllm_free(ids_ns);
        xllm_free(text);
        cJSON_Delete(j);
    }
    fprintf(stderr, "%s: %d/%d lines exact\n", jsonl_path, passed, lines);
    CHECK(lines >= 30);
    xllm_free(data);
    tokenizer_free(t);
}

/* ------------------------------------------------------ synthetic files */

static char g_dir[64];

static const char *write_tok(const char *name, const char *json) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return path;
    fputs(json, f);
    fclose(f);
    return path;
}

/* A small vocabulary: a b c ab abc ▁ ▁a <0x..> for some bytes, <unk> <s> </s>. */
#define VOCAB                                                                                              \
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"a\":3,\"b\":4,\"c\":5,\"ab\":6,\"abc\":7,"              \
    "\"\\u2581\":8,\"\\u2581a\":9,\"<0xC3>\":10,\"<0xA9>\":11,\"<0xE4>\":12,\"<0xB8>\":13,\"<0xAD>\":14,"    \
    "\"<0x20>\":15,\"bc\":16}"

/* model_extra comes first in "model", so its keys win over the defaults. */
static const char *synth(const char *normalizer, const char *pre, const char *post, const char *decoder,
                         const char *added, const char *model_extra) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":%s,"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,"
             "\"model\":{\"type\":\"BPE\"%s,\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
             "\"byte_fallback\":true," VOCAB "}}",
             added, normalizer, pre, post, decoder, model_extra);
    return buf;
}

#define ADDED_STD                                                                                          \
    "[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"                            \
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"                               \
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}]"
#define MERGES_STR ",\"merges\":[\"a b\",\"ab c\",\"\\u2581 a\",\"b c\"]"
#define MERGES_ARR ",\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"],[\"\\u2581\",\"a\"],[\"b\",\"c\"]]"
#define DEC_LLAMA                                                                                          \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"     \
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","              \
    "\"content\":\" \",\"start\":1,\"stop\":0}]}"
#define POST_BOS                                                                                           \
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"      \
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","            \
    "\"ids\":[1],\"tokens\":[\"<s>\"]}}}"
#define META(scheme, split)                                                                                \
    "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"" scheme "\",\"split\":" split "}"

static void expect_ids(const tokenizer *t, const char *text, int special, const int32_t *want, size_t nwant,
                       int line) {
    int32_t *ids = NULL;
    size_t n = 0;
    xllm_error e;
    CHECK_MSG(tokenizer_encode(t, text, strlen(text), special, &ids, &n, &e) == XLLM_OK, "%s", e.message);
    int ok = ids && n == nwant && (!n || memcmp(ids, want, n * sizeof *ids) == 0);
    CHECK_MSG(ok, "line %d: encode \"%s\"", line, text);
    if (!ok) {
        print_ids("got ", ids, n);
        print_ids("want", want, nwant);
    }
    xllm_free(ids);
}

static void expect_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip, const char *want, int line) {
    char *text = NULL;
    xllm_error e;
    CHECK_MSG(tokenizer_decode(t, ids, n, skip, &text, NULL, &e) == XLLM_OK, "%s", e.message);
    CHECK_MSG(text && strcmp(text, want) == 0, "line %d: decode got \"%s\" want \"%s\"", line, text ? text : "",
              want);
    xllm_free(text);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static tokenizer *load_synth(const char *json, int line) {
    xllm_error e;
    tokenizer *t = tokenizer_load(write_tok("tokenizer.json", json), &e);
    CHECK_MSG(t != NULL, "line %d: %s", line, e.message);
    return t;
}

static void test_synthetic(void) {
    const char *prepend_norm =
        "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]}";
    /* merges as "a b" strings and as [a, b] pairs give the same model */
    for (int arr = 0; arr < 2; arr++) {
        tokenizer *t = load_synth(synth(prepend_norm, "null", POST_BOS, DEC_LLAMA, ADDED_STD,
                                        arr ? MERGES_ARR : MERGES_STR), __LINE__);
        if (!t) continue;
        expect_ids(t, "abc", 1, IDS(1, 8, 7), __LINE__); /* ▁ a b c: a+b (rank 0), ab+c (1) */
        expect_ids(t, "abc", 0, IDS(8, 7), __LINE__);
        expect_ids(t, "ab ab", 0, IDS(8, 6, 8, 6), __LINE__);
        expect_ids(t, "a", 0, IDS(9), __LINE__);
        expect_ids(t, "é", 0, IDS(8, 10, 11), __LINE__);       /* byte fallback */
        expect_ids(t, "xy", 0, IDS(8, 0), __LINE__);           /* unknown, fused into one <unk> */
        expect_ids(t, "a<s>b", 0, IDS(9, 1, 8, 4), __LINE__);  /* added token split first */
        expect_ids(t, "", 1, IDS(1), __LINE__);
        {
            int32_t *ids = (int32_t *)1;
            size_t n = 7;
            CHECK(tokenizer_encode(t, "", 0, 0, &ids, &n, NULL) == XLLM_OK && n == 0 && ids != NULL);
            xllm_free(ids);
        }
        expect_decode(t, IDS(1, 8, 7), 0, "<s> abc", __LINE__);
        expect_decode(t, IDS(1, 8, 7), 1, "abc", __LINE__);
        expect_decode(t, IDS(8, 10, 11, 3), 0, "éa", __LINE__);
        expect_decode(t, IDS(10, 3), 0, "\xef\xbf\xbd" "a", __LINE__); /* lone byte: U+FFFD */
        expect_decode(t, IDS(12, 13), 0, "\xef\xbf\xbd\xef\xbf\xbd", __LINE__); /* one per byte */
        CHECK(tokenizer_vocab_size(t) == 17);
        CHECK(tokenizer_is_special(t, 1) && !tokenizer_is_special(t, 3));
        CHECK(tokenizer_id_to_piece(t, 17) == NULL && tokenizer_id_to_piece(t, -1) == NULL);
        CHECK(tokenizer_piece_to_id(t, "abc") == 7 && tokenizer_piece_to_id(t, "zz") == -1);
        CHECK(tokenizer_bos_id(t) == -1 && tokenizer_eos_id(t) == -1); /* no tokenizer_config.json */
        tokenizer_free(t);
    }
    /* unknown characters: fuse_unk off, no byte fallback, no unk token, unk missing */
    {
        tokenizer *t = load_synth(synth(prepend_norm, "null", "null", DEC_LLAMA, ADDED_STD,
                                        MERGES_STR ",\"fuse_unk\":false,\"byte_fallback\":false"),
                                  __LINE__);
        if (t) {
            expect_ids(t, "xy", 0, IDS(8, 0, 0), __LINE__);
            expect_ids(t, "a\xc3\xa9", 0, IDS(9, 0), __LINE__);
            tokenizer_free(t);
        }
        t = load_synth(synth(prepend_norm, "null", "null", DEC_LLAMA, ADDED_STD,
                             MERGES_STR ",\"unk_token\":null,\"byte_fallback\":false"),
                       __LINE__);
        if (t) {
            expect_ids(t, "axa", 0, IDS(9, 3), __LINE__); /* dropped */
            tokenizer_free(t);
        }
        t = load_synth(synth(prepend_norm, "null", "null", DEC_LLAMA, ADDED_STD,
                             MERGES_STR ",\"unk_token\":\"<nope>\",\"byte_fallback\":false"),
                       __LINE__);
        if (t) {
            int32_t *ids = NULL;
            size_t n;
            xllm_error e;
            CHECK(tokenizer_encode(t, "ab", 2, 0, &ids, &n, &e) == XLLM_OK);
            xllm_free(ids);
            ids = NULL;
            CHECK(tokenizer_encode(t, "x", 1, 0, &ids, &n, &e) != XLLM_OK && ids == NULL &&
                  strstr(e.message, "<nope>"));
            tokenizer_free(t);
        }
    }
    /* invalid UTF-8 input: each bad byte goes through byte fallback */
    {
        tokenizer *t = load_synth(synth(prepend_norm, "null", "null", DEC_LLAMA, ADDED_STD, MERGES_STR), __LINE__);
        if (t) {
            expect_ids(t, "a\xc3", 0, IDS(9, 10), __LINE__);
            expect_ids(t, "\xc3\xc3\xa9", 0, IDS(8, 10, 10, 11), __LINE__);
            expect_decode(t, IDS(8, 10, 10, 11), 0, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", __LINE__);
            tokenizer_free(t);
        }
    }
    /* Metaspace with split, no post-processor, Metaspace decoder */
    {
        tokenizer *t = load_synth(
            synth("null", META("always", "true"), "null",
                  "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":true}",
                  ADDED_STD, MERGES_STR),
            __LINE__);
        if (t) {
            expect_ids(t, "ab  c", 1, IDS(8, 6, 8, 8, 5), __LINE__); /* ▁ab | ▁ | ▁c */
            expect_ids(t, "<s>ab", 1, IDS(1, 8, 6), __LINE__); /* always: prepended after <s> too */
            expect_decode(t, IDS(8, 6, 8, 8, 5), 0, "ab  c", __LINE__);
            expect_decode(t, IDS(9, 3), 0, "aa", __LINE__); /* ▁ dropped in the first token only */
            expect_decode(t, IDS(9, 9), 0, "a a", __LINE__);
            tokenizer_free(t);
        }
    }
    /* Metaspace prepend_scheme never; ignore_merges; no decoder: pieces joined by spaces */
    {
        tokenizer *t = load_synth(synth("null", META("never", "false"), "null", "null", ADDED_STD,
                                        MERGES_STR ",\"ignore_merges\":true"),
                                  __LINE__);
        if (t) {
            expect_ids(t, "abc", 0, IDS(7), __LINE__);          /* whole word in vocab */
            expect_ids(t, "ab c", 0, IDS(6, 8, 5), __LINE__);   /* "ab▁c": ab, ▁, c */
            expect_decode(t, IDS(6, 8, 5), 0, "ab \xe2\x96\x81 c", __LINE__);
            tokenizer_free(t);
        }
    }
    /* added tokens: lstrip / rstrip / single_word / normalized */
    {
        const char *added =
            "[{\"id\":17,\"content\":\"<L>\",\"special\":false,\"lstrip\":true,\"normalized\":false},"
            "{\"id\":18,\"content\":\"<R>\",\"special\":false,\"rstrip\":true,\"normalized\":false},"
            "{\"id\":19,\"content\":\"cab\",\"special\":false,\"single_word\":true,\"normalized\":false},"
            "{\"id\":20,\"content\":\"<RR>\",\"special\":true,\"normalized\":false},"
            "{\"id\":21,\"content\":\"b b\",\"special\":false,\"normalized\":true}]";
        tokenizer *t = load_synth(synth(prepend_norm, "null", "null", DEC_LLAMA, added, MERGES_STR), __LINE__);
        if (t) {
            expect_ids(t, "a  <L>b", 0, IDS(9, 17, 8, 4), __LINE__);    /* spaces before <L> eaten */
            expect_ids(t, "a<R>  b", 0, IDS(9, 18, 8, 4), __LINE__);    /* spaces after <R> eaten */
            expect_ids(t, "a<RR>", 0, IDS(9, 20), __LINE__);           /* longest match */
            expect_ids(t, "a cab c", 0, IDS(9, 8, 19, 8, 8, 5), __LINE__); /* single word: matches */
            expect_ids(t, "acab", 0, IDS(9, 5, 6), __LINE__);          /* inside a word: not */
            expect_ids(t, "a b b", 0, IDS(9, 21), __LINE__);           /* matched after normalizing */
            CHECK(tokenizer_vocab_size(t) == 22);
            expect_decode(t, IDS(9, 20, 3), 1, "aa", __LINE__);
            expect_decode(t, IDS(9, 20, 3), 0, "a<RR>a", __LINE__);
            tokenizer_free(t);
        }
    }
    /* streaming across invalid byte runs, and flush */
    {
        tokenizer *t = load_synth(synth(prepend_norm, "null", POST_BOS, DEC_LLAMA, ADDED_STD, MERGES_STR), __LINE__);
        if (t) {
            detok_stream *s = detok_stream_new(t, 0);
            const char *out;
            size_t n;
            CHECK(detok_stream_push(s, 12, &out, &n, NULL) == XLLM_OK && n == 0); /* E4: incomplete */
            CHECK(detok_stream_push(s, 13, &out, &n, NULL) == XLLM_OK && n == 0); /* E4 B8 */
            CHECK(detok_stream_push(s, 14, &out, &n, NULL) == XLLM_OK && n == 3 && memcmp(out, "\xe4\xb8\xad", 3) == 0);
            CHECK(detok_stream_push(s, 9, &out, &n, NULL) == XLLM_OK && n == 2 && memcmp(out, " a", 2) == 0);
            CHECK(detok_stream_push(s, 12, &out, &n, NULL) == XLLM_OK && n == 0);
            CHECK(detok_stream_flush(s, &out, &n, NULL) == XLLM_OK && n == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
            CHECK(detok_stream_flush(s, &out, &n, NULL) == XLLM_OK && n == 0);
            xllm_error e;
            CHECK(detok_stream_push(s, 99, &out, &n, &e) == XLLM_ERR_INVALID_ARGUMENT);
            CHECK(detok_stream_push(s, -1, &out, &n, &e) == XLLM_ERR_INVALID_ARGUMENT);
            detok_stream_free(s);
            /* a skipped special token between words does not eat the space */
            s = detok_stream_new(t, 1);
            size_t total = 0;
            char acc[32];
            const int32_t seq[] = {1, 9, 2, 9, 1, 8, 3};
            for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
                CHECK(detok_stream_push(s, seq[i], &out, &n, NULL) == XLLM_OK);
                if (total + n < sizeof acc) memcpy(acc + total, out, n);
                total += n;
            }
            expect_decode(t, seq, 7, 1, "a a a", __LINE__);
            CHECK_MSG(total == 5 && memcmp(acc, "a a a", 5) == 0, "stream got \"%.*s\"", (int)total, acc);
            detok_stream_free(s);
            tokenizer_free(t);
        }
    }
}

/* ----------------------------------------------------------- error cases */

static void expect_load_error(const char *json, xllm_status code, const char *needle, int line) {
    const char *path = write_tok("tokenizer.json", json);
    xllm_error e = {XLLM_OK, ""};
    tokenizer *t = tokenizer_load(path, &e);
    CHECK_MSG(t == NULL, "line %d: load should fail", line);
    tokenizer_free(t);
    CHECK_MSG(e.code == code, "line %d: code %d want %d (%s)", line, (int)e.code, (int)code, e.message);
    CHECK_MSG(strstr(e.message, needle) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, e.message, needle);
    CHECK_MSG(strstr(e.message, "tokenizer.json") != NULL, "line %d: message \"%s\" lacks the file", line, e.message);
}

static void test_errors(void) {
    xllm_error e = {XLLM_OK, ""};
    CHECK(tokenizer_load(XLLM_SOURCE_DIR "/tests/data/no-such-dir/tokenizer.json", &e) == NULL);
    CHECK(e.code == XLLM_ERR_IO && strstr(e.message, "no-such-dir") != NULL);
    CHECK(tokenizer_load(NULL, &e) == NULL && e.code == XLLM_ERR_INVALID_ARGUMENT);
    char p[128];
    unlink(path_join(p, sizeof p, g_dir, "tokenizer.json"));
    xllm_tokenizer *pt = xllm_tokenizer_load(g_dir, &e); /* a directory without tokenizer.json */
    CHECK(pt == NULL && e.code == XLLM_ERR_IO);
    xllm_tokenizer_free(pt);

    const char *n = "null";
    expect_load_error("{\"model\": {", XLLM_ERR_FORMAT, "invalid JSON", __LINE__);
    expect_load_error("[1, 2]", XLLM_ERR_FORMAT, "object", __LINE__);
    expect_load_error("{\"added_tokens\":[]}", XLLM_ERR_FORMAT, "model", __LINE__);
    expect_load_error(synth("{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"\"}", n, n, n, ADDED_STD,
                            MERGES_STR),
                      XLLM_ERR_UNSUPPORTED, "Precompiled", __LINE__);
    expect_load_error(synth(n, "{\"type\":\"UnicodeScripts\"}", n, n, ADDED_STD, MERGES_STR), XLLM_ERR_UNSUPPORTED,
                      "UnicodeScripts", __LINE__);
    expect_load_error(synth(n, "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Sideways\"}", n,
                            n, ADDED_STD, MERGES_STR),
                      XLLM_ERR_UNSUPPORTED, "Sideways", __LINE__);
    expect_load_error(synth(n, n, "{\"type\":\"RobertaProcessing\"}", n, ADDED_STD, MERGES_STR), XLLM_ERR_FORMAT,
                      "cls", __LINE__);
    expect_load_error(synth(n, n, "{\"type\":\"ClsProcessing\"}", n, ADDED_STD, MERGES_STR), XLLM_ERR_UNSUPPORTED,
                      "ClsProcessing", __LINE__);
    expect_load_error(synth(n, n, n, "{\"type\":\"WordPiece\"}", ADDED_STD, MERGES_STR), XLLM_ERR_UNSUPPORTED,
                      "WordPiece", __LINE__);
    expect_load_error(synth(n, n, n, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"CTC\"}]}", ADDED_STD,
                            MERGES_STR),
                      XLLM_ERR_UNSUPPORTED, "CTC", __LINE__);
    expect_load_error(synth("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(a\"},\"content\":\"x\"}", n, n, n,
                            ADDED_STD, MERGES_STR),
                      XLLM_ERR_UNSUPPORTED, "regex", __LINE__);
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", XLLM_ERR_UNSUPPORTED, "Unigram", __LINE__);
    expect_load_error(synth(n, n, n, n, ADDED_STD, ",\"merges\":[\"a b c\"]"), XLLM_ERR_FORMAT, "merge", __LINE__);
    expect_load_error(synth(n, n, n, n, ADDED_STD, ",\"merges\":[\"a x\"]"), XLLM_ERR_FORMAT, "merge", __LINE__);
    expect_load_error(synth(n, n, n, n, ADDED_STD, ",\"merges\":[5]"), XLLM_ERR_FORMAT, "merge", __LINE__);
    expect_load_error(synth(n, n, n, n, "[{\"id\":\"x\"}]", MERGES_STR), XLLM_ERR_FORMAT, "added token", __LINE__);
    expect_load_error(synth(n, n,
                            "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<q>\"}}],"
                            "\"special_tokens\":{}}",
                            n, ADDED_STD, MERGES_STR),
                      XLLM_ERR_FORMAT, "<q>", __LINE__);
    expect_load_error(synth(n, n, n, n, ADDED_STD, MERGES_STR ",\"vocab\":{\"a\":-4}"), XLLM_ERR_FORMAT, "vocab",
                      __LINE__);

    /* a bad tokenizer_config.json next to a good tokenizer.json */
    write_tok("tokenizer.json", synth(n, n, n, n, ADDED_STD, MERGES_STR));
    write_tok("tokenizer_config.json", "{\"bos_token\": ");
    CHECK(tokenizer_load(g_dir, &e) == NULL && e.code == XLLM_ERR_FORMAT &&
          strstr(e.message, "tokenizer_config.json") != NULL);
    /* bos / eos given as {"content": ...} objects */
    write_tok("tokenizer_config.json", "{\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"</s>\"}");
    tokenizer *t = tokenizer_load(g_dir, &e);
    CHECK_MSG(t != NULL, "%s", e.message);
    if (t) {
        CHECK(tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2);
        char *text = (char *)"x";
        CHECK(tokenizer_decode(t, IDS(3, 17), 0, &text, NULL, &e) == XLLM_ERR_INVALID_ARGUMENT && text == NULL);
        CHECK(tokenizer_decode(t, IDS(-3), 0, &text, NULL, &e) == XLLM_ERR_INVALID_ARGUMENT);
        int32_t *ids;
        size_t cnt;
        CHECK(tokenizer_encode(t, NULL, 3, 1, &ids, &cnt, &e) == XLLM_ERR_INVALID_ARGUMENT);
        tokenizer_free(t);
    }
    unlink(path_join(p, sizeof p, g_dir, "tokenizer_config.json"));
}

/* ------------------------------------------------------ random inputs */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* Random text round-trips exactly; random bytes and random id sequences
 * never crash, and every streamed chunk is whole UTF-8. */
static void test_random(void) {
    tokenizer *t = tokenizer_load(FIXTURES, NULL);
    CHECK(t != NULL);
    if (!t) return;
    static const char *alphabet[] = {"a", "b", "the", " ", "  ", "\n", "\t", "Once", "\xc3\xa9", "\xe4\xb8\xad",
                                     "\xf0\x9f\x98\x80", "<", ">", "s", "/", "0x", "'", "!", "Z", "\xcc\x81"};
    char text[512];
    int roundtrip_ok = 1, stream_ok = 1;
    for (int iter = 0; iter < 300; iter++) {
        size_t len = 0;
        int words = (int)rnd(40);
        for (int w = 0; w < words; w++) {
            const char *p = alphabet[rnd(sizeof alphabet / sizeof *alphabet)];
            size_t pl = strlen(p);
            if (len + pl >= sizeof text) break;
            memcpy(text + len, p, pl);
            len += pl;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        char *back = NULL;
        size_t back_len = 0;
        /* "<s>" / "</s>" may form from the pieces; then the round trip needs them kept */
        if (tokenizer_encode(t, text, len, 0, &ids, &n, NULL) != XLLM_OK ||
            tokenizer_decode(t, ids, n, 0, &back, &back_len, NULL) != XLLM_OK || back_len != len ||
            memcmp(back, text, len) != 0)
            roundtrip_ok = 0;
        xllm_free(back);
        xllm_free(ids);
        /* random bytes */
        for (size_t i = 0; i < len; i++) text[i] = (char)rnd(256);
        CHECK(tokenizer_encode(t, text, len, 1, &ids, &n, NULL) == XLLM_OK);
        xllm_free(ids);
        /* random ids, often byte tokens, through decode and the stream */
        int32_t rid[64];
        size_t nr = rnd(64);
        for (size_t i = 0; i < nr; i++) rid[i] = rnd(3) ? (int32_t)(3 + rnd(256)) : (int32_t)rnd(512);
        for (int skip = 0; skip < 2; skip++) {
            CHECK(tokenizer_decode(t, rid, nr, skip, &back, &back_len, NULL) == XLLM_OK);
            CHECK(utf8_ok(back, back_len));
            xllm_free(back);
            detok_stream *s = detok_stream_new(t, skip);
            for (size_t i = 0; i < nr; i++) {
                const char *out;
                size_t out_len;
                if (detok_stream_push(s, rid[i], &out, &out_len, NULL) != XLLM_OK || !utf8_ok(out, out_len))
                    stream_ok = 0;
            }
            detok_stream_free(s);
        }
    }
    CHECK(roundtrip_ok);
    CHECK(stream_ok);
    tokenizer_free(t);
}

/* Byte-level BPE (the Qwen3 fixture): any bytes encode, valid text round-
 * trips exactly, and concurrent callers (one on the shared workspace with
 * the word cache, the others on private ones) get the same ids. */
#define QWEN XLLM_SOURCE_DIR "/tests/data/tokenizers/qwen3"

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} enc_job;

static void *enc_thread(void *arg) {
    enc_job *j = arg;
    for (int k = 0; k < 20; k++) {
        xllm_free(j->ids);
        j->ids = NULL;
        if (tokenizer_encode(j->t, j->text, j->len, 1, &j->ids, &j->n, NULL) != XLLM_OK) break;
    }
    return NULL;
}

static void test_byte_level(void) {
    xllm_error e;
    tokenizer *t = tokenizer_load(QWEN, &e);
    CHECK_MSG(t != NULL, "%s", e.message);
    if (!t) return;
    char text[600];
    int roundtrip_ok = 1, bytes_ok = 1;
    static const char *alphabet[] = {"a", "Z", " ", "  ", "\n", "\t", "don't", "42", "1234567", "\xc3\xa9",
                                     "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x98\x80", "<|im_start|>",
                                     "<think>", "'S", "\xd0\x96", "!!", "def f(x):"};
    for (int iter = 0; iter < 200; iter++) {
        size_t len = 0;
        for (int w = (int)rnd(30); w > 0; w--) {
            const char *p = alphabet[rnd(sizeof alphabet / sizeof *alphabet)];
            size_t pl = strlen(p);
            if (len + pl >= sizeof text) break;
            memcpy(text + len, p, pl);
            len += pl;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        char *back = NULL;
        size_t back_len = 0;
        if (tokenizer_encode(t, text, len, 0, &ids, &n, NULL) != XLLM_OK ||
            tokenizer_decode(t, ids, n, 0, &back, &back_len, NULL) != XLLM_OK || back_len != len ||
            memcmp(back, text, len) != 0)
            roundtrip_ok = 0;
        xllm_free(back);
        xllm_free(ids);
        for (size_t i = 0; i < len; i++) text[i] = (char)rnd(256); /* not UTF-8: still encodes */
        if (tokenizer_encode(t, text, len, 1, &ids, &n, NULL) != XLLM_OK) bytes_ok = 0;
        for (size_t i = 0; ids && i < n; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) bytes_ok = 0;
        if (ids && tokenizer_decode(t, ids, n, 0, &back, &back_len, NULL) == XLLM_OK) {
            if (!utf8_ok(back, back_len)) bytes_ok = 0;
            xllm_free(back);
        }
        xllm_free(ids);
    }
    CHECK(roundtrip_ok);
    CHECK(bytes_ok);
    /* random byte-level ids (ids 0..255 are single bytes, often partial
     * UTF-8): the stream never splits a character and adds up to the decode */
    for (int iter = 0; iter < 300; iter++) {
        int32_t rid[48];
        size_t nr = 1 + rnd(48);
        for (size_t i = 0; i < nr; i++) rid[i] = rnd(4) ? (int32_t)rnd(256) : (int32_t)rnd(151669);
        int skip = iter & 1;
        char *full = NULL;
        size_t full_len = 0;
        CHECK(tokenizer_decode(t, rid, nr, skip, &full, &full_len, NULL) == XLLM_OK);
        detok_stream *st = detok_stream_new(t, skip);
        buf_t acc = {0};
        int whole = 1;
        for (size_t i = 0; i <= nr; i++) {
            const char *out;
            size_t out_len;
            xllm_status rc = i < nr ? detok_stream_push(st, rid[i], &out, &out_len, NULL)
                                    : detok_stream_flush(st, &out, &out_len, NULL);
            CHECK(rc == XLLM_OK);
            if (!utf8_ok(out, out_len)) whole = 0;
            buf_append(&acc, out, out_len);
        }
        CHECK_MSG(whole, "iter %d: a stream chunk splits a character", iter);
        CHECK_MSG(acc.len == full_len && memcmp(acc.p, full, full_len) == 0, "iter %d: stream \"%s\" != decode \"%s\"",
                  iter, acc.p, full);
        buf_free(&acc);
        detok_stream_free(st);
        xllm_free(full);
    }
    /* a long input (one call, word cache and big buffers) */
    size_t big = 300000;
    char *long_text = mem_malloc(big);
    for (size_t i = 0; i < big; i++) long_text[i] = "the cat sat on the mat. \n"[i % 25];
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tokenizer_encode(t, long_text, big, 0, &ids, &n, NULL) == XLLM_OK && n > 1000);
    xllm_free(ids);
    /* concurrent callers agree with a lone one */
    int32_t *want = NULL;
    size_t nwant = 0;
    CHECK(tokenizer_encode(t, long_text, 20000, 1, &want, &nwant, NULL) == XLLM_OK);
    enc_job jobs[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (enc_job){t, long_text, 20000, NULL, 0};
        pthread_create(&th[k], NULL, enc_thread, &jobs[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK(jobs[k].ids && jobs[k].n == nwant && memcmp(jobs[k].ids, want, nwant * sizeof *want) == 0);
        xllm_free(jobs[k].ids);
    }
    xllm_free(want);
    xllm_free(long_text);
    tokenizer_free(t);
}

/* Damaged tokenizer.json text (cut short, bytes changed) never crashes the
 * loader's scanner: it fails with a message or loads something usable. */
static void test_malformed(void) {
    char *json;
    size_t len;
    CHECK(file_read_all(FIXTURES "/tokenizer.json", &json, &len, NULL) == XLLM_OK);
    if (!json) return;
    char *buf = mem_malloc(len + 1);
    int loaded = 0, failed_clean = 1;
    for (int iter = 0; iter < 600; iter++) {
        size_t n = len;
        memcpy(buf, json, len);
        if (iter % 2) n = rnd((uint32_t)len);
        else {
            static const char junk[] = "\"\\{}[],: 0x\xff\xc3";
            for (int k = 0; k < 3; k++) buf[rnd((uint32_t)len)] = junk[rnd(sizeof junk - 1)];
        }
        buf[n] = 0;
        xllm_error e = {XLLM_OK, ""};
        tokenizer *t = tokenizer_load_text(buf, n, NULL, 0, "damaged.json", &e);
        if (!t) {
            if (e.code == XLLM_OK || !e.message[0]) failed_clean = 0;
            continue;
        }
        loaded++;
        int32_t *ids = NULL;
        size_t cnt;
        if (tokenizer_encode(t, "Once upon a time", 16, 1, &ids, &cnt, NULL) == XLLM_OK) xllm_free(ids);
        tokenizer_free(t);
    }
    CHECK(failed_clean);
    CHECK(loaded > 0 && loaded < 600);
    xllm_free(buf);
    xllm_free(json);
}

/* ------------------------------------------------------------ public API */

static void test_public_api(void) {
    xllm_error e;
    xllm_tokenizer *tok = xllm_tokenizer_load(FIXTURES, &e);
    CHECK_MSG(tok != NULL, "%s", e.message);
    if (!tok) return;
    CHECK(xllm_tokenizer_vocab_size(tok) == 512);
    const tokenizer *t = tokenizer_from_public(tok);
    CHECK(tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *prompt = "Once upon a time";
    CHECK(xllm_tokenize(tok, prompt, strlen(prompt), 1, &ids, &n, &e) == XLLM_OK);
    const int32_t want[] = {1, 403, 407, 261, 378}; /* models/stories260k/expected.json */
    CHECK(n == 5 && memcmp(ids, want, sizeof want) == 0);
    char *text = NULL;
    CHECK(xllm_detokenize(tok, ids, n, 1, &text, NULL, &e) == XLLM_OK && strcmp(text, prompt) == 0);
    xllm_free(text);
    CHECK(xllm_detokenize(tok, ids, n, 0, &text, NULL, &e) == XLLM_OK && strcmp(text, "<s> Once upon a time") == 0);
    xllm_free(text);
    xllm_free(ids);
    int32_t bad = 512;
    CHECK(xllm_detokenize(tok, &bad, 1, 0, &text, NULL, &e) == XLLM_ERR_INVALID_ARGUMENT && strstr(e.message, "512"));
    CHECK(xllm_tokenize(NULL, "x", 1, 1, &ids, &n, &e) == XLLM_ERR_INVALID_ARGUMENT);
    xllm_tokenizer_free(tok);
    xllm_tokenizer_free(NULL);
    /* the file path form finds tokenizer_config.json beside it */
    tok = xllm_tokenizer_load(FIXTURES "/tokenizer_metaspace.json", &e);
    CHECK_MSG(tok != NULL && tokenizer_eos_id(tokenizer_from_public(tok)) == 2, "%s", e.message);
    xllm_tokenizer_free(tok);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    snprintf(g_dir, sizeof g_dir, "/tmp/xllm_test_tok_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_expected(FIXTURES "/tokenizer.json", FIXTURES "/expected.jsonl", 1);
    check_expected(FIXTURES "/tokenizer_metaspace.json", FIXTURES "/expected_metaspace.jsonl", 1);
    check_expected(FIXTURES, FIXTURES "/expected.jsonl", 0); /* directory form */
    check_expected(XLLM_SOURCE_DIR "/tests/data/tokenizers/qwen3", XLLM_SOURCE_DIR "/tests/data/tokenizers/qwen3/expected.jsonl",
                   1);
    /* the vendors' tokenizers are not in the repository: checked when the shared data is there */
    static const char *shared[] = {"llama2", "llama3", "gemma3"};
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        char dir[512], exp[600];
        snprintf(dir, sizeof dir, "%s/../shared/data/tokenizers/%s", XLLM_SOURCE_DIR, shared[i]);
        if (!file_is_dir(dir)) snprintf(dir, sizeof dir, "/work/shared/data/tokenizers/%s", shared[i]);
        snprintf(exp, sizeof exp, "%s/expected.jsonl", dir);
        if (path_exists(exp)) check_expected(dir, exp, 1);
        else fprintf(stderr, "SKIP %s: no shared tokenizer data\n", shared[i]);
    }
    test_synthetic();
    test_errors();
    test_random();
    test_byte_level();
    test_malformed();
    test_public_api();
    char p[128];
    unlink(path_join(p, sizeof p, g_dir, "tokenizer.json"));
    rmdir(g_dir);
    CHECK_MSG(xllm_allocated_bytes() == before, "%zu bytes still allocated", xllm_allocated_bytes() - before);
    return test_report("test_tokenizer");
}
