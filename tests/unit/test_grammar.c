/*
 * test_grammar.c - the grammar compiler and matcher (src/engine/grammar*.c):
 * each front end (JSON Schema, json_object, GBNF, regex) accepts the strings
 * its language holds and rejects the others, byte by byte; prefixes stay
 * alive while complete outputs are flagged; unsupported features are refused
 * with a message naming them; token bytes come out of each tokenizer family
 * right (SentencePiece byte fallback, byte-level BPE).
 */
#include "test.h"
#include "engine/grammar.h"
#include "engine/response_cache.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static gram_vocab *g_vocab; /* 256 single-byte tokens: masks are not tested here */

/* 1: s is a complete output, 0: a live prefix only, -1: rejected. */
static int run(int kind, const char *text, const char *s) {
    gram *g;
    xllm_error err = {0};
    if (gram_compile(kind, text, NULL, NULL, &g, &err)) {
        fprintf(stderr, "compile failed: %s\n", err.message);
        return -2;
    }
    gram_matcher *m = gram_matcher_new(g, g_vocab);
    int32_t st = gram_advance(m, gram_start(m), s, strlen(s));
    int r = st < 0 ? -1 : gram_accepting(m, st) ? 1 : 0;
    gram_matcher_free(m);
    gram_free(g);
    return r;
}

static int refused(int kind, const char *text, const char *needle) {
    gram *g = NULL;
    xllm_error err = {0};
    xllm_status st = gram_compile(kind, text, NULL, NULL, &g, &err);
    gram_free(g);
    if (st != XLLM_ERR_INVALID_ARGUMENT) return 0;
    if (!strstr(err.message, needle)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err.message, needle);
        return 0;
    }
    return 1;
}

#define S XLLM_GRAMMAR_JSON_SCHEMA
#define TX(t) ((t) ? (const char *)(t) : "json_object")
#define YES(k, t, s) CHECK_MSG(run(k, t, s) == 1, "%s should accept %s (got %d)", TX(t), s, run(k, t, s))
#define PART(k, t, s) CHECK_MSG(run(k, t, s) == 0, "%s: %s should be a live prefix (got %d)", TX(t), s, run(k, t, s))
#define NO(k, t, s) CHECK_MSG(run(k, t, s) == -1, "%s should reject %s (got %d)", TX(t), s, run(k, t, s))

static void test_json_schema(void) {
    const char *obj = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                      "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"tag\":{\"enum\":[\"a\",\"b\",3]}},"
                      "\"required\":[\"name\",\"age\"]}";
    YES(S, obj, "{\"name\":\"bob\",\"age\":42}");
    YES(S, obj, "{ \"name\": \"bob\", \"age\": 42, \"tag\": 3 }");
    YES(S, obj, "{\n  \"name\": \"bob\",\n  \"age\": 120,\n  \"tag\": \"b\"\n}");
    PART(S, obj, "{\"name\":\"bob\",\"age\":4");
    NO(S, obj, "{\"age\":42,\"name\":\"bob\"}");       /* schema order */
    NO(S, obj, "{\"name\":\"bobbyb\",\"age\":1}");     /* maxLength */
    NO(S, obj, "{\"name\":\"bob\",\"age\":121}");      /* maximum */
    NO(S, obj, "{\"name\":\"bob\",\"age\":-1}");       /* minimum */
    NO(S, obj, "{\"name\":\"bob\"}");                  /* required */
    NO(S, obj, "{\"name\":\"bob\",\"age\":1,\"tag\":\"c\"}");
    NO(S, obj, " {\"name\":\"bob\",\"age\":1}");       /* nothing before the value */
    NO(S, obj, "{\"name\":\"bob\",\"age\":1}  ");      /* nor after */
    NO(S, obj, "{  \"name\":\"b\",\"age\":1}");        /* one space at most */
    /* optional properties, commas */
    const char *opt = "{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"type\":\"number\"}}}";
    YES(S, opt, "{}");
    YES(S, opt, "{\"b\":null}");
    YES(S, opt, "{\"a\":true,\"c\":1.5}");
    YES(S, opt, "{\"c\":-0.25}");
    NO(S, opt, "{,\"c\":1}");
    NO(S, opt, "{\"a\":true,}");
    NO(S, opt, "{\"c\":1e5}");
    /* numbers: 15 significant digits */
    YES(S, "{\"type\":\"number\"}", "123456789012345");
    NO(S, "{\"type\":\"number\"}", "1234567890123456");
    YES(S, "{\"type\":\"number\"}", "1234567.12345678");
    NO(S, "{\"type\":\"number\"}", "1234567.123456789");
    NO(S, "{\"type\":\"number\"}", "01");
    YES(S, "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-3}", "-20");
    YES(S, "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-3}", "-3");
    PART(S, "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-3}", "-2"); /* -20 may follow */
    NO(S, "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-3}", "-0");
    NO(S, "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":-3}", "-21");
    YES(S, "{\"type\":\"integer\",\"exclusiveMinimum\":99,\"maximum\":1000}", "100");
    PART(S, "{\"type\":\"integer\",\"exclusiveMinimum\":99,\"maximum\":1000}", "99");
    NO(S, "{\"type\":\"integer\",\"exclusiveMinimum\":99,\"maximum\":1000}", "1001");
    YES(S, "{\"type\":\"integer\",\"minimum\":137,\"maximum\":5821}", "5821");
    YES(S, "{\"type\":\"integer\",\"minimum\":137,\"maximum\":5821}", "999");
    PART(S, "{\"type\":\"integer\",\"minimum\":137,\"maximum\":5821}", "13");
    NO(S, "{\"type\":\"integer\",\"minimum\":137,\"maximum\":5821}", "0");
    NO(S, "{\"type\":\"integer\",\"minimum\":137,\"maximum\":5821}", "5822");
    YES(S, "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.75");
    /* decimal bounds, exclusive bounds, multipleOf: exact */
    {
        const char *d = "{\"type\":\"number\",\"exclusiveMinimum\":-2.5,\"maximum\":0.25}";
        YES(S, d, "-2.49"); YES(S, d, "0.25"); YES(S, d, "0.250"); YES(S, d, "0.2"); YES(S, d, "-0.5"); YES(S, d, "0");
        NO(S, d, "-2.5"); NO(S, d, "-2.50"); NO(S, d, "0.26"); NO(S, d, "0.251"); NO(S, d, "1"); NO(S, d, "-3");
        const char *m = "{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-20,\"exclusiveMaximum\":50}";
        YES(S, m, "0"); YES(S, m, "14"); YES(S, m, "49"); YES(S, m, "-14"); NO(S, m, "15"); NO(S, m, "56"); NO(S, m, "-21");
        NO(S, m, "50");
        const char *c = "{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}";
        YES(S, c, "12.34"); YES(S, c, "5"); YES(S, c, "0.1"); NO(S, c, "0.123"); NO(S, c, "-1");
        YES(S, "{\"type\":\"integer\",\"multipleOf\":0.5}", "3"); /* every integer is a multiple of 0.5 */
        YES(S, "{\"type\":\"integer\",\"multipleOf\":3000}", "-6000"); PART(S, "{\"type\":\"integer\",\"multipleOf\":3000}", "5000");
        NO(S, "{\"type\":\"integer\",\"multipleOf\":3000,\"maximum\":10000}", "5000");
        NO(S, "{\"type\":\"integer\",\"multipleOf\":3000,\"maximum\":10000}", "3100");
        YES(S, "{\"type\":\"integer\",\"multipleOf\":3000,\"maximum\":10000}", "9000");
        CHECK(refused(S, "{\"type\":\"integer\",\"multipleOf\":999}", "too large"));
        YES(S, "{\"type\":\"integer\",\"multipleOf\":999,\"minimum\":0,\"maximum\":5000}", "3996");
        YES(S, "{\"type\":\"integer\",\"minimum\":-1e30}", "-999999999999999");
        YES(S, "{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.001"); PART(S, "{\"type\":\"number\",\"exclusiveMinimum\":0}", "0"); /* 0.x may follow */
        NO(S, "{\"type\":\"number\",\"exclusiveMinimum\":0}", "-0.5");
        /* oneOf branches told apart: by type, by a required const discriminator, by a forbidden property */
        YES(S, "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", "12");
        const char *u = "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"k\"]},"
                        "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"b\",\"c\"]}},\"required\":[\"k\"]}]}";
        YES(S, u, "{\"k\":\"a\",\"x\":1}"); YES(S, u, "{\"k\":\"c\"}"); NO(S, u, "{\"k\":\"d\"}");
        YES(S, "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\"],\"additionalProperties\":false},"
               "{\"type\":\"object\",\"properties\":{\"b\":{}},\"required\":[\"b\"],\"additionalProperties\":false}]}", "{\"b\":1}");
    }
    YES(S, "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1");
    NO(S, "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.5");
    /* strings: escapes, UTF-8, lengths in characters */
    YES(S, "{\"type\":\"string\"}", "\"a\\\"b\\\\c\\n\\u0001\"");
    NO(S, "{\"type\":\"string\"}", "\"a\nb\"");
    NO(S, "{\"type\":\"string\"}", "\"\\ud800\"");
    YES(S, "{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", "\"\xc3\xa9\xe2\x82\xac\"");
    NO(S, "{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", "\"\xc3\xa9\"");
    NO(S, "{\"type\":\"string\"}", "\"\xc3\"");
    /* arrays */
    const char *arr = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}";
    YES(S, arr, "[1]");
    YES(S, arr, "[1, 2,3]");
    NO(S, arr, "[]");
    NO(S, arr, "[1,2,3,4]");
    YES(S, "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}]}", "[\"x\", false]");
    NO(S, "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}]}", "[\"x\"]");
    /* anyOf / oneOf / allOf / $ref / const / type lists / nullable */
    YES(S, "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "7");
    YES(S, "{\"oneOf\":[{\"const\":\"x\"},{\"type\":\"null\"}]}", "null");
    NO(S, "{\"oneOf\":[{\"const\":\"x\"},{\"type\":\"null\"}]}", "\"y\"");
    YES(S, "{\"type\":[\"string\",\"null\"]}", "null");
    YES(S, "{\"type\":\"string\",\"nullable\":true}", "null");
    YES(S, "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
           "{\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}]}", "{\"a\":1,\"b\":2}");
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                       "\"$ref\":\"#/$defs/node\"}";
    YES(S, tree, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}");
    NO(S, tree, "{\"v\":1,\"kids\":[{}]}");
    YES(S, "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}");
    NO(S, "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"1\"}");
    /* formats and patterns */
    YES(S, "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-28\"");
    NO(S, "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\"");
    YES(S, "{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-12-31T23:59:59Z\"");
    YES(S, "{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"");
    YES(S, "{\"type\":\"string\",\"format\":\"email\"}", "\"a.b@example.com\"");
    NO(S, "{\"type\":\"string\",\"format\":\"email\"}", "\"a.b@\"");
    YES(S, "{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.255\"");
    NO(S, "{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.256\"");
    YES(S, "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", "\"AB-123\"");
    NO(S, "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", "\"AB-1234\"");
    YES(S, "{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xxabyy\"");
    NO(S, "{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xxayy\"");
    YES(S, "{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\"");
    /* refusals name the feature */
    CHECK(refused(S, "{\"not\":{\"type\":\"string\"}}", "\"not\""));
    CHECK(refused(S, "{\"type\":\"object\",\"patternProperties\":{}}", "patternProperties"));
    CHECK(refused(S, "{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"));
    CHECK(refused(S, "{\"type\":\"number\",\"multipleOf\":0.5}", "multipleOf"));
    CHECK(refused(S, "{\"type\":\"integer\",\"multipleOf\":1001}", "multipleOf"));
    CHECK(refused(S, "{\"type\":\"integer\",\"minimum\":3.5,\"maximum\":3.9}", "no integer"));
    /* oneOf: exactly one, when the branches are provably disjoint; else refused naming where */
    CHECK(refused(S, "{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}}}",
                  "oneOf at /properties/a: branches 0 and 1"));
    CHECK(refused(S, "{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "oneOf at (the root)"));
    CHECK(refused(S, "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":2}}}]}",
                  "oneOf")); /* k not required: {} matches both */
    CHECK(refused(S, "{\"type\":\"string\",\"format\":\"ipv6\"}", "ipv6"));
    CHECK(refused(S, "{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround"));
    CHECK(refused(S, "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences"));
    CHECK(refused(S, "{\"$ref\":\"http://x/y.json\"}", "$ref"));
    CHECK(refused(S, "{\"type\":\"strin\"}", "strin"));
    CHECK(refused(S, "{\"type\":", "not valid JSON"));
    CHECK(refused(S, "{\"type\":\"string\",\"maxLength\":100000}", "maxLength"));
    CHECK(refused(S, "{\"if\":{},\"then\":{}}", "\"if\""));
}

static void test_json_object(void) {
    int k = XLLM_GRAMMAR_JSON_OBJECT;
    YES(k, NULL, "{}");
    YES(k, NULL, "{\"a\": [1, {\"b\": null}, \"x\", true, -0.5], \"c\": {}}");
    NO(k, NULL, "[]");
    NO(k, NULL, "{\"a\" 1}");
    PART(k, NULL, "{\"a\": [1, {\"b\"");
}

static void test_gbnf(void) {
    int k = XLLM_GRAMMAR_GBNF;
    const char *g = "# a comment\n"
                    "root ::= greeting \" \" name (\"!\" | \"?\"){1,2}\n"
                    "greeting ::= \"hello\" | \"hi\"\n"
                    "name ::= [A-Z] [a-z\\u00e0-\\u00ff]*\n";
    YES(k, g, "hello Bob!");
    YES(k, g, "hi Zo\xc3\xa9?!");
    NO(k, g, "hey Bob!");
    NO(k, g, "hi bob!");
    NO(k, g, "hi Bob!!!");
    PART(k, g, "hi Bo");
    const char *multi = "root ::= (\n  \"a\" |\n  \"b\"\n) x\nx ::= [^\\n]? \".\"\n";
    YES(k, multi, "a.");
    YES(k, multi, "bz.");
    YES(k, "root ::= [0-9]{2,3} \"x\"{0,}", "12xxx");
    NO(k, "root ::= [0-9]{2,3}", "1234");
    CHECK(refused(k, "root ::= root \"a\" | \"a\"", "left recursive"));
    CHECK(refused(k, "root ::= foo", "foo"));
    CHECK(refused(k, "start ::= \"a\"", "root"));
    CHECK(refused(k, "root ::= \"a", "unterminated"));
    CHECK(refused(k, "root ::= [z-a]", "out of order"));
    CHECK(refused(k, "root ::= \"a\"\nroot ::= \"b\"", "twice"));
}

static void test_regex(void) {
    int k = XLLM_GRAMMAR_REGEX;
    YES(k, "\\d{3}-[a-f]+(x|yz)?", "123-abcyz");
    YES(k, "\\d{3}-[a-f]+(x|yz)?", "123-f");
    NO(k, "\\d{3}-[a-f]+(x|yz)?", "123-g");
    YES(k, "^(?:[^\\s,]+, )*end$", "a, bc, end");
    NO(k, "^(?:[^\\s,]+, )*end$", "a b, end");
    YES(k, "[\\w.]+@\\w+\\.(com|org)", "x.y@z.org");
    YES(k, "a.c", "a\xe2\x82\xac" "c");
    NO(k, "a.c", "a\nc");
    CHECK(refused(k, "a\\bc", "word boundaries"));
    CHECK(refused(k, "(?!x)", "lookaround"));
    CHECK(refused(k, "a{3,1}", "upper bound"));
    CHECK(refused(k, "(ab", "unclosed"));
    CHECK(refused(k, "a++", "possessive"));
    /* ambiguous nested repetitions stay polynomial (each expansion once per step) */
    YES(k, "((a{0,10}){0,10}){0,10}b", "aaaaab");
    CHECK(run(k, "((a{0,100}){0,100}){0,100}b", "aaaaab") >= -1); /* past 4096 stacks: bounded work (may lose parses) */
    NO(k, "((a{0,10}){0,10}){0,10}b", "aaaaac");
    YES(k, "(a|aa|aaa){1,1000}", "aaaaaaaaaa");
    CHECK(refused(k, "(a*)*", "left recursive"));
}

static void test_affixes(void) {
    gram *g;
    xllm_error err = {0};
    CHECK(!gram_compile(XLLM_GRAMMAR_JSON_SCHEMA, "{\"type\":\"boolean\"}", "<tool_call>\n", "\n</tool_call>", &g, &err));
    gram_matcher *m = gram_matcher_new(g, g_vocab);
    const char *ok = "<tool_call>\ntrue\n</tool_call>";
    int32_t st = gram_start(m);
    CHECK(!gram_accepting(m, st));
    st = gram_advance(m, st, ok, strlen(ok));
    CHECK(st >= 0 && gram_accepting(m, st) && !gram_can_continue(m, st));
    CHECK(gram_advance(m, gram_start(m), "true", 4) < 0);
    gram_matcher_free(m);
    gram_free(g);
    CHECK(gram_compile(XLLM_GRAMMAR_GBNF, NULL, NULL, NULL, &g, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(gram_compile(99, "x", NULL, NULL, &g, &err) == XLLM_ERR_INVALID_ARGUMENT);
}

/* A tokenizer and its token bytes (tokenizer_token_bytes: token i is
 * bytes[off[i] .. off[i + 1])). */
typedef struct {
    tokenizer *t;
    char *bytes;
    int64_t *off;
    int32_t n;
} tok_bytes;

/* 1 with tb filled, or 0 (a failed check) when the tokenizer at dir or its bytes cannot be had. */
static int tok_bytes_load(tok_bytes *tb, const char *dir) {
    xllm_error err = {0};
    memset(tb, 0, sizeof *tb);
    tb->t = tokenizer_load(dir, &err);
    CHECK_MSG(tb->t != NULL, "%s: %s", dir, err.message);
    if (!tb->t) return 0;
    int ok = !tokenizer_token_bytes(tb->t, &tb->bytes, &tb->off, &tb->n, &err);
    CHECK_MSG(ok, "%s: token bytes: %s", dir, err.message);
    if (!ok) {
        tokenizer_free(tb->t);
        tb->t = NULL;
    }
    return ok;
}

static void tok_bytes_free(tok_bytes *tb) {
    xllm_free(tb->bytes);
    xllm_free(tb->off);
    tokenizer_free(tb->t);
}

/* Token id reads as the single byte b. */
static int one_byte(const tok_bytes *tb, int32_t id, unsigned char b) {
    return id >= 0 && id < tb->n && tb->off[id + 1] - tb->off[id] == 1 && (unsigned char)tb->bytes[tb->off[id]] == b;
}

/* Token bytes as they read inside a text, for both tokenizer families. */
static void test_token_bytes(void) {
    xllm_error err = {0};
    tok_bytes tb;
    if (tok_bytes_load(&tb, XLLM_SOURCE_DIR "/models/stories260k")) {
        CHECK(one_byte(&tb, tokenizer_piece_to_id(tb.t, "<0xE2>"), 0xE2));
        int32_t sp = -1; /* a piece with the Metaspace mark reads with its space */
        for (int32_t i = 0; i < tb.n && sp < 0; i++) {
            const char *p = tokenizer_id_to_piece(tb.t, i);
            if (p && !strncmp(p, "\xe2\x96\x81", 3) && strlen(p) > 3) sp = i;
        }
        CHECK(sp >= 0 && tb.bytes[tb.off[sp]] == ' ' &&
              !memcmp(tb.bytes + tb.off[sp] + 1, tokenizer_id_to_piece(tb.t, sp) + 3, strlen(tokenizer_id_to_piece(tb.t, sp)) - 3));
        int32_t eos = tokenizer_eos_id(tb.t);
        CHECK(eos >= 0 && tb.off[eos + 1] == tb.off[eos]); /* special: no bytes */
        gram_vocab *v;
        CHECK(!gram_vocab_from_tokenizer(tb.t, tb.n, &v, &err));
        size_t len;
        CHECK(gram_vocab_token(v, eos, &len) == NULL);
        gram_vocab_free(v);
        tok_bytes_free(&tb);
    }
    if (tok_bytes_load(&tb, XLLM_SOURCE_DIR "/tests/data/tokenizers/qwen3")) {
        CHECK(one_byte(&tb, tokenizer_piece_to_id(tb.t, "\xc4\xa0"), ' '));  /* GPT-2's char for ' ' */
        CHECK(one_byte(&tb, tokenizer_piece_to_id(tb.t, "\xc3\xa2"), 0xE2)); /* byte 0xE2 alone: a partial character */
        tok_bytes_free(&tb);
    }
}

static const int32_t k_key_prompt[3] = {1, 2, 3};

/* The response-cache key of k_key_prompt with p differs from key (len bytes). */
static int other_key(const xllm_sampling_params *p, const unsigned char *key, size_t len) {
    size_t lb;
    unsigned char *kb = rc_key(k_key_prompt, 3, p, 1, &lb);
    int differs = lb != len || memcmp(key, kb, len);
    xllm_free(kb);
    return differs;
}

/* The response-cache key holds the constraint: same request, other constraint, other key. */
static void test_cache_key(void) {
    xllm_sampling_params a = xllm_sampling_params_default(), b;
    a.do_sample = 0;
    a.grammar_kind = XLLM_GRAMMAR_REGEX;
    a.grammar = "[a-z]+";
    size_t la;
    unsigned char *ka = rc_key(k_key_prompt, 3, &a, 1, &la);
    b = a;
    char same[8]; /* equal text elsewhere in memory: the same key */
    memcpy(same, "[a-z]+", 7);
    b.grammar = same;
    CHECK(!other_key(&b, ka, la));
    b.grammar = "[a-z]*";
    CHECK(other_key(&b, ka, la));
    b = a;
    b.grammar_kind = XLLM_GRAMMAR_GBNF;
    CHECK(other_key(&b, ka, la));
    b = a;
    b.grammar_suffix = "x";
    CHECK(other_key(&b, ka, la));
    b = a;
    b.grammar_kind = XLLM_GRAMMAR_NONE;
    CHECK(other_key(&b, ka, la));
    xllm_free(ka);
}

/* Hostile texts: truncated and byte-flipped schemas, grammars and regexes
 * compile or are refused with a message; never a crash (ASan runs this too). */
static void test_mutations(void) {
    static const struct { int kind; const char *text; } seeds[] = {
        {S, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":5,\"pattern\":\"^[a-z]+$\"},"
            "\"b\":{\"$ref\":\"#/$defs/n\"},\"c\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":-5},{\"enum\":[1,\"x\",null]}]}},"
            "\"required\":[\"a\"],\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}}}"},
        {XLLM_GRAMMAR_GBNF, "root ::= a (\",\" a){0,3}\na ::= [a-z\\x41-\\x5A]+ | \"\\u00e9\" | ( \"(\" root \")\" )?\n"},
        {XLLM_GRAMMAR_REGEX, "^(?:[\\w.]+@[a-z]{2,5}\\.(com|org)|\\d{1,3}(\\.\\d{1,3}){3}|[^\\s\"]{0,8})$"},
    };
    uint64_t x = 12345;
    int compiled = 0, refused = 0;
    for (int round = 0; round < 3000; round++) {
        int k = round % 3;
        size_t n = strlen(seeds[k].text);
        char buf[512];
        memcpy(buf, seeds[k].text, n + 1);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int edits = 1 + (int)(x % 4);
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            switch ((x >> 20) % 3) {
            case 0: buf[at] = (char)(x >> 32); break;                   /* any byte */
            case 1: { /* syntax */
                static const char syn[] = "{}[]()\"\\:,|*+?^$-0123456789";
                buf[at] = syn[(x >> 32) % (sizeof syn - 1)];
                break;
            }
            default: buf[at] = 0; break;                                /* truncate */
            }
        }
        gram *g = NULL;
        xllm_error err = {0};
        xllm_status st = gram_compile(seeds[k].kind, buf, NULL, NULL, &g, &err);
        CHECK_MSG(st == XLLM_OK || (st == XLLM_ERR_INVALID_ARGUMENT && err.message[0]), "status %d for %s", (int)st, buf);
        if (!st) {
            gram_matcher *m = gram_matcher_new(g, g_vocab);
            int32_t s0 = gram_start(m);
            CHECK(m != NULL);
            if (s0 >= 0) gram_mask(m, s0);
            gram_matcher_free(m);
            compiled++;
        } else {
            refused++;
        }
        gram_free(g);
    }
    CHECK(compiled > 100 && refused > 100);
}

int main(void) {
    const char *tb[256];
    uint32_t lens[256];
    static char one[256];
    for (int i = 0; i < 256; i++) one[i] = (char)i, tb[i] = one + i, lens[i] = 1;
    xllm_error err = {0};
    if (gram_vocab_from_bytes(tb, lens, 256, &g_vocab, &err)) return 1;
    test_json_schema();
    test_json_object();
    test_gbnf();
    test_regex();
    test_affixes();
    test_token_bytes();
    test_cache_key();
    test_mutations();
    gram_vocab_free(g_vocab);
    return test_report("test_grammar");
}
