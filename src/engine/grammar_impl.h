/*
 * grammar_impl.h - the compiled grammar's layout and the builder the front
 * ends (GBNF, regex, JSON Schema) write into. Private to src/engine/grammar*.c.
 *
 * The compiled form: el[] holds every alternative of every rule as a run of
 * elements ended by GE_END; an element is a byte class (GE_CHARS, index into
 * sets) or a rule reference (GE_RULE). Rule r's alternatives start at
 * el[alts[alt_off[r]] ... alts[alt_off[r + 1] - 1]].
 *
 * The builder works in rules too: every combinator (literal, sequence,
 * alternation, repetition, code-point set) returns a new rule id, so front
 * ends compose rule ids; finishing inlines the rules that are a single
 * alternative, which keeps parse stacks short.
 */
#ifndef XLLM_ENGINE_GRAMMAR_IMPL_H
#define XLLM_ENGINE_GRAMMAR_IMPL_H

#include "engine/grammar.h"
#include "base/utf8.h"

#define GE_END 0u
#define GE_CHARS 1u
#define GE_RULE 2u
#define GE_KIND(e) ((e) >> 30)
#define GE_ARG(e) ((e) & 0x3fffffffu)
#define GE_MAKE(k, a) (((uint32_t)(k) << 30) | (uint32_t)(a))

typedef struct gram_set {
    uint64_t w[4];
} gram_set;

static inline int gram_set_has(const gram_set *s, unsigned b) { return (int)((s->w[b >> 6] >> (b & 63)) & 1u); }
static inline void gram_set_add(gram_set *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }
static inline void gram_set_range(gram_set *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) gram_set_add(s, b);
}

struct gram {
    uint32_t *el;
    int32_t n_el;
    int32_t *alts;     /* start positions in el */
    int32_t *alt_off;  /* n_rules + 1 */
    int32_t n_rules;
    gram_set *sets;
    int32_t n_sets;
    int32_t root;
    /* per element position: the text-character rule (gb_rule.textchar) whose
     * alternative starts there, else -1 (grammar_mask.c's text runs) */
    int32_t *tc_rule;
};

/* ------------------------------------------------------------- builder */

typedef struct gb_altv {
    uint32_t *el;
    int32_t n, cap;
} gb_altv;

typedef struct gb_rule {
    gb_altv *alts;
    int32_t n, cap;
    int defined;
    int textchar;       /* one JSON string character, any of them (gb_cpset_json over all of Unicode) */
    char *name;         /* GBNF / $ref rules: for messages */
} gb_rule;

typedef struct gbuild {
    gb_rule *rules;
    int32_t n_rules, cap_rules;
    gram_set *sets;
    int32_t n_sets, cap_sets;
    int64_t n_elems;    /* total, against GRAM_MAX_ELEMS */
    int oom, too_big;
    xllm_error *err;
    char msg[256];      /* first error (front end fills it) */
    int failed;
} gbuild;

void gb_init(gbuild *b, xllm_error *err);
void gb_free(gbuild *b);
/* Record an error (the first one wins); returns -1 for `return gb_fail(...)`. */
int gb_fail(gbuild *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int gb_ok(const gbuild *b); /* no error yet */

int32_t gb_new_rule(gbuild *b);              /* empty, undefined */
void gb_add_alt(gbuild *b, int32_t rule, const uint32_t *el, int32_t n); /* defines it */
uint32_t gb_set_elem(gbuild *b, const gram_set *s);   /* a GE_CHARS element */
static inline uint32_t gb_ref(int32_t rule) { return GE_MAKE(GE_RULE, rule); }

/* Combinators: each returns a new rule id (-1 after an error). */
int32_t gb_empty(gbuild *b);
int32_t gb_lit(gbuild *b, const char *s, size_t n);
int32_t gb_bytes(gbuild *b, const gram_set *s);
int32_t gb_seq(gbuild *b, const int32_t *rules, int n);
int32_t gb_alt(gbuild *b, const int32_t *rules, int n);
int32_t gb_rep(gbuild *b, int32_t rule, int min, int max); /* max < 0: unbounded */
static inline int32_t gb_seq2(gbuild *b, int32_t x, int32_t y) { int32_t r[2] = {x, y}; return gb_seq(b, r, 2); }
static inline int32_t gb_alt2(gbuild *b, int32_t x, int32_t y) { int32_t r[2] = {x, y}; return gb_alt(b, r, 2); }
static inline int32_t gb_opt(gbuild *b, int32_t x) { return gb_rep(b, x, 0, 1); }

/* Finish with root rule: checks every rule is defined and none is left
 * recursive, inlines, flattens. XLLM_ERR_INVALID_ARGUMENT with the message. */
xllm_status gb_finish(gbuild *b, int32_t root, gram **out);

/* ---------------------------------------------- code-point sets (grammar_utf8.c) */

typedef struct cpset {
    uint32_t *r;        /* pairs lo, hi (inclusive), sorted, disjoint after cpset_norm */
    int n, cap;
    int oom;
} cpset;

void cpset_add(cpset *s, uint32_t lo, uint32_t hi);
void cpset_norm(cpset *s);
void cpset_negate(cpset *s); /* over 0..0x10FFFF (after norm), surrogates excluded */
void cpset_free(cpset *s);
/* The rule matching one character of s as UTF-8. */
int32_t gb_cpset(gbuild *b, const cpset *s);
/* As gb_cpset, inside a JSON string: '"', '\\' and controls as their escapes. */
int32_t gb_cpset_json(gbuild *b, const cpset *s);

/* ------------------------------------------------------------- front ends */

int32_t gram_front_gbnf(gbuild *b, const char *text, size_t len);
/* json_str: the regex describes a JSON string's contents (escape as needed). */
int32_t gram_front_regex(gbuild *b, const char *text, size_t len, int json_str);
int32_t gram_front_json_schema(gbuild *b, const char *text, size_t len);
int32_t gram_front_json_object(gbuild *b);
/* grammar_json_disjoint.c: 1 when no JSON value matches both schemas
 * (provably; 0 = maybe); the JSON pointer of a node of doc, for messages. */
struct cJSON;
/* grammar_json.c: a local JSON pointer (#/...) in doc, NULL when it does not resolve. */
const struct cJSON *json_pointer_resolve(const struct cJSON *doc, const char *ref);
int json_schemas_disjoint(const struct cJSON *doc, const struct cJSON *a, const struct cJSON *b);
void json_schema_path(const struct cJSON *doc, const struct cJSON *target, char *buf, size_t cap);
/* grammar_json_number.c: an integer / number schema with bounds or multipleOf. */
int32_t gram_json_number(gbuild *b, const struct cJSON *s, int integer);

#endif

/* ------------------------------------------------ matcher (grammar_match.c) */

typedef struct gm_state {
    int64_t off;        /* its stacks: pool[off .. off + n) (node ids, sorted) */
    int32_t n;
    int32_t accept;     /* the empty stack is among them: the output is complete */
    int32_t mask_slot;  /* cached mask (grammar_mask.c), -1 none */
    int64_t dense;      /* its 256 transitions in m->dense (-2 not yet known, -1 dead), -1 none */
    int32_t text;       /* every run of this many JSON text characters stays alive (grammar_mask.c); -1 unknown */
    gram_set next;      /* bytes some stack takes */
} gm_state;

struct gram_matcher {
    const gram *g;
    const gram_vocab *v;
    /* parse-stack nodes (hash-consed): node 0 is the empty stack */
    int32_t *node_pos, *node_parent;
    uint32_t *node_seen;  /* the expansion (gen) that last expanded the node: once per step */
    uint32_t gen;
    int32_t n_nodes, cap_nodes;
    int32_t *node_map;
    uint32_t node_map_mask;
    /* states: hash-consed sets of stacks */
    gm_state *st;
    int32_t n_st, cap_st;
    int32_t *pool;
    int64_t n_pool, cap_pool;
    int32_t *st_map;
    uint32_t st_map_mask;
    /* transitions (state, byte) -> state or -1 */
    uint64_t *tr_key;
    int32_t *tr_val;
    uint32_t tr_mask, n_tr;
    /* expansion scratch */
    int32_t *scratch;
    int32_t n_scratch, cap_scratch;
    int scratch_accept, overflow;
    /* masks (grammar_mask.c) */
    uint32_t *masks;
    int32_t *slot_state;
    int n_slots, next_slot, words;
    int32_t *walk;      /* per trie depth: the state */
    int64_t *walk_row;  /* per trie depth: that state's dense row */
    int32_t *dense;     /* dense transition rows of the states masks walk through */
    int64_t n_dense, cap_dense;
    uint32_t epoch;
    int oom;
};

/* The state after one byte (cached); -1: no stack takes it. */
int32_t gm_step(gram_matcher *m, int32_t st, unsigned char byte);
/* Free / reset the mask part. */
void gm_masks_free(gram_matcher *m);
int gm_masks_init(gram_matcher *m);

/* ------------------------------------------------- vocabulary (grammar_mask.c) */

struct gram_vocab {
    int32_t V;
    char *bytes;        /* every token's bytes */
    int64_t *tok_off;   /* V + 1; a token with no bytes is never allowed */
    uint8_t *usable;
    /* the trie in preorder: node i has byte, depth (1 = a first byte), the
     * end of its subtree, and the ids whose bytes end here */
    uint8_t *t_byte;
    uint16_t *t_depth;
    int32_t *t_end;
    int32_t *t_ids_off;  /* n_nodes + 1 into t_ids */
    int32_t *t_ids;
    /* text tokens: whole JSON string characters (no '"', '\\', controls or
     * invalid UTF-8), optionally ending inside one more; t_other: some token
     * in the node's subtree is not one; t_chars: the most characters of a
     * token in the subtree; text_le: per k = 1..text_k, the bitset of text
     * tokens of at most k characters (text_k: the most any has, <= 32);
     * t_cdepth: the characters begun on the path to the node, t_rem: the
     * bytes its last one still needs (0: the node ends a character) */
    uint8_t *t_other;
    uint8_t *t_chars;
    uint8_t *t_cdepth;
    uint8_t *t_rem;
    uint32_t *text_le;
    int text_k;
    int32_t n_nodes, max_depth;
};
