/*
 * gguf_tok.c - HF tokenizer.json / tokenizer_config.json text synthesized
 * from a GGUF file's tokenizer.ggml.* metadata.
 *
 * `llama` (SentencePiece): a BPE model with byte fallback over the whole
 * vocabulary, with the merges HF's SentencePiece converter derives: every
 * split of a piece into two vocabulary pieces is a merge; merges are ordered
 * by the merged piece's score (highest first), then by the left and right
 * lengths in characters (longest first), then piece order, and within one
 * piece by the ids of the two halves. Normalizer Prepend("▁") + Replace(" ",
 * "▁") (the legacy Llama form, which is what llama.cpp does: a space before
 * every text fragment that follows a special token), decoder Replace /
 * ByteFallback / Fuse / Strip. Control and unknown tokens are special added
 * tokens, user-defined ones non-special added tokens (as HF's converter).
 *
 * `gpt2`: byte-level BPE with tokenizer.ggml.merges; the pre-tokenizer,
 * normalizer, post-processor and decoder components of the HF tokenizer.json
 * of the family named by tokenizer.ggml.pre (llama-bpe: Llama 3; qwen2:
 * Qwen2/3; default / gpt2: GPT-2's ByteLevel regex). Control and
 * user-defined tokens are added tokens (not in the model vocabulary).
 *
 * Both: a TemplateProcessing post-processor adds BOS / EOS when
 * tokenizer.ggml.add_bos_token / add_eos_token say so.
 */
#include "format/gguf_internal.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const gguf_regex_llama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const gguf_regex_qwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* ------------------------------------------------------ piece -> id map */

typedef struct {
    int32_t *slots; /* id, -1 empty */
    size_t mask;
    const gguf_str *tok;
} pmap;

uint64_t gguf_piece_hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    h ^= h >> 33; /* fmix64: FNV's low bits alone cluster in a power-of-two table */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

int32_t *gguf_slots_new(size_t count, size_t *mask) {
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2; /* a table size (load factor <= 1/2), not a growing array */
    int32_t *slots = mem_malloc_array(cap, sizeof *slots);
    if (!slots) return NULL;
    memset(slots, 0xff, cap * sizeof *slots);
    *mask = cap - 1;
    return slots;
}

/* ids 0..n-1, or only those with only[id] set */
static int pmap_init(pmap *m, const gguf_str *tok, size_t n, const uint8_t *only) {
    size_t count = 0;
    for (size_t id = 0; id < n; id++) count += !only || only[id];
    if (!(m->slots = gguf_slots_new(count, &m->mask))) return -1;
    m->tok = tok;
    /* the last of duplicate pieces wins (as a Python dict built in id order) */
    for (size_t id = 0; id < n; id++) {
        if (only && !only[id]) continue;
        size_t i = (size_t)gguf_piece_hash(tok[id].p, tok[id].len) & m->mask;
        while (m->slots[i] >= 0) {
            const gguf_str *o = &tok[m->slots[i]];
            if (o->len == tok[id].len && memcmp(o->p, tok[id].p, o->len) == 0) break;
            i = (i + 1) & m->mask;
        }
        m->slots[i] = (int32_t)id;
    }
    return 0;
}

static int32_t pmap_get(const pmap *m, const char *p, size_t len) {
    size_t i = (size_t)gguf_piece_hash(p, len) & m->mask;
    while (m->slots[i] >= 0) {
        const gguf_str *o = &m->tok[m->slots[i]];
        if (o->len == len && memcmp(o->p, p, len) == 0) return m->slots[i];
        i = (i + 1) & m->mask;
    }
    return -1;
}

/* ------------------------------------------------------------ JSON help */

typedef struct {
    gguf_ctx *c;
    int oom;
    buf_t scratch; /* NUL-terminated copies of file strings */
} jb;

static const char *cstr(jb *b, const char *p, size_t len) {
    buf_clear(&b->scratch);
    if (buf_append(&b->scratch, p, len)) {
        b->oom = 1;
        return "";
    }
    return b->scratch.p;
}

static cJSON *add(jb *b, cJSON *parent, const char *key, cJSON *item) {
    if (!item) {
        b->oom = 1;
        return NULL;
    }
    if (!parent) return item;
    if (!(key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item))) {
        cJSON_Delete(item);
        b->oom = 1;
        return NULL;
    }
    return item;
}
static cJSON *add_obj(jb *b, cJSON *parent, const char *key) { return add(b, parent, key, cJSON_CreateObject()); }
static cJSON *add_arr(jb *b, cJSON *parent, const char *key) { return add(b, parent, key, cJSON_CreateArray()); }
static void add_s(jb *b, cJSON *parent, const char *key, const char *v) { add(b, parent, key, cJSON_CreateString(v)); }
static void add_n(jb *b, cJSON *parent, const char *key, double v) { add(b, parent, key, cJSON_CreateNumber(v)); }
static void add_b(jb *b, cJSON *parent, const char *key, int v) { add(b, parent, key, cJSON_CreateBool(v)); }
static void add_null(jb *b, cJSON *parent, const char *key) { add(b, parent, key, cJSON_CreateNull()); }
static void add_tok(jb *b, cJSON *parent, const char *key, const gguf_str *t) {
    const char *s = cstr(b, t->p, t->len);
    add_s(b, parent, key, s);
}

/* The vocabulary and merges (hundreds of thousands of strings) are written
 * as JSON text directly (into an buf_t, its error checked once at the
 * end); cJSON builds only the small components. */

/* the bytes of p as the inside of a JSON string */
static void sb_esc(buf_t *s, const char *p, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        buf_append(s, p + run, i - run);
        char e[8];
        if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, e[2] = 0;
        else snprintf(e, sizeof e, "\\u%04x", c);
        buf_append(s, e, strlen(e));
        run = i + 1;
    }
    buf_append(s, p + run, n - run);
}

/* a cJSON object's text without its closing brace ("{...") */
static void sb_open_object(buf_t *s, const cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    if (!t) {
        if (!s->err) s->err = XLLM_BUF_OOM;
        return;
    }
    size_t n = strlen(t);
    buf_append(s, t, n ? n - 1 : 0);
    cJSON_free(t);
}

/* {"type": "ByteLevel", "add_prefix_space", "trim_offsets", "use_regex"} */
static cJSON *byte_level(jb *b, cJSON *parent, const char *key, int prefix, int trim, int regex) {
    cJSON *o = add_obj(b, parent, key);
    if (!o) return NULL;
    add_s(b, o, "type", "ByteLevel");
    add_b(b, o, "add_prefix_space", prefix);
    add_b(b, o, "trim_offsets", trim);
    add_b(b, o, "use_regex", regex);
    return o;
}

static void template_piece(jb *b, cJSON *arr, const char *special, const char *seq, int type_id) {
    cJSON *o = add_obj(b, arr, NULL), *in;
    if (!o) return;
    in = add_obj(b, o, special ? "SpecialToken" : "Sequence");
    if (!in) return;
    add_s(b, in, "id", special ? special : seq);
    add_n(b, in, "type_id", type_id);
}

/* TemplateProcessing: [BOS] $A [EOS], pair [BOS] $A [EOS] [BOS] $B [EOS] (HF's Llama form). */
static void template_processing(jb *b, cJSON *parent, const char *key, const gguf_str *tok, int64_t bos,
                                int64_t eos) {
    cJSON *o = add_obj(b, parent, key);
    if (!o) return;
    char *bs = bos >= 0 ? mem_strndup(tok[bos].p, tok[bos].len) : NULL;
    char *es = eos >= 0 ? mem_strndup(tok[eos].p, tok[eos].len) : NULL;
    if ((bos >= 0 && !bs) || (eos >= 0 && !es)) b->oom = 1;
    add_s(b, o, "type", "TemplateProcessing");
    cJSON *single = add_arr(b, o, "single"), *pair = add_arr(b, o, "pair");
    if (single && pair) {
        if (bs) template_piece(b, single, bs, NULL, 0);
        template_piece(b, single, NULL, "A", 0);
        if (es) template_piece(b, single, es, NULL, 0);
        if (bs) template_piece(b, pair, bs, NULL, 0);
        template_piece(b, pair, NULL, "A", 0);
        if (es) template_piece(b, pair, es, NULL, 0);
        if (bs) template_piece(b, pair, bs, NULL, 1);
        template_piece(b, pair, NULL, "B", 1);
        if (es) template_piece(b, pair, es, NULL, 1);
    }
    cJSON *sp = add_obj(b, o, "special_tokens");
    for (int k = 0; k < 2 && sp; k++) {
        const char *s = k == 0 ? bs : es;
        int64_t id = k == 0 ? bos : eos;
        if (!s || cJSON_GetObjectItemCaseSensitive(sp, s)) continue;
        cJSON *e = add_obj(b, sp, s);
        if (!e) break;
        add_s(b, e, "id", s);
        cJSON *ids = add_arr(b, e, "ids"), *toks = add_arr(b, e, "tokens");
        if (ids) add_n(b, ids, NULL, (double)id);
        if (toks) add_s(b, toks, NULL, s);
    }
    xllm_free(bs);
    xllm_free(es);
}

static void added_token(jb *b, cJSON *arr, int64_t id, const gguf_str *t, int special) {
    cJSON *o = add_obj(b, arr, NULL);
    if (!o) return;
    add_n(b, o, "id", (double)id);
    add_tok(b, o, "content", t);
    add_b(b, o, "single_word", 0);
    add_b(b, o, "lstrip", 0);
    add_b(b, o, "rstrip", 0);
    add_b(b, o, "normalized", 0);
    add_b(b, o, "special", special);
}

/* ------------------------------------------------------------ SPM merges */

typedef struct {
    int32_t l, r;
    float score;
    uint32_t ll, lr; /* lengths in characters */
    uint32_t seq;
} smerge;

static int cmp_local(const void *a, const void *b) {
    const smerge *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static int cmp_global(const void *a, const void *b) {
    const smerge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->ll != y->ll) return x->ll > y->ll ? -1 : 1;
    if (x->lr != y->lr) return x->lr > y->lr ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static uint32_t utf8_chars(const char *p, size_t n) {
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

#define SPM_MAX_PIECE 512

static xllm_status spm_merges(gguf_ctx *c, const gguf_str *tok, const float *score, size_t n, const pmap *pm,
                              smerge **out, size_t *n_out) {
    size_t cap = 1024, len = 0;
    smerge *m = mem_malloc_array(cap, sizeof *m);
    if (!m) return err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
    for (size_t id = 0; id < n; id++) {
        const gguf_str *t = &tok[id];
        /* pieces longer than SPM_MAX_PIECE bytes get no merges: trying every split costs
         * O(length^2), and real SentencePiece pieces are a few dozen bytes at most */
        if (t->len < 2 || t->len > SPM_MAX_PIECE || pmap_get(pm, t->p, t->len) != (int32_t)id) continue;
        size_t start = len;
        uint32_t chars_left = 0, total = utf8_chars(t->p, t->len);
        for (size_t cut = 1; cut < t->len; cut++) {
            if (((unsigned char)t->p[cut - 1] & 0xC0) != 0x80) chars_left++;
            if (((unsigned char)t->p[cut] & 0xC0) == 0x80) continue; /* not a character boundary */
            int32_t l = pmap_get(pm, t->p, cut), r = pmap_get(pm, t->p + cut, t->len - cut);
            if (l < 0 || r < 0) continue;
            if (array_reserve(&m, &cap, len + 1, sizeof *m, 1024)) {
                xllm_free(m);
                return err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
            }
            m[len++] = (smerge){l, r, score[id], chars_left, total - chars_left, 0};
        }
        if (len - start > 1) qsort(m + start, len - start, sizeof *m, cmp_local);
    }
    for (size_t i = 0; i < len; i++) m[i].seq = (uint32_t)i;
    qsort(m, len, sizeof *m, cmp_global);
    *out = m;
    *n_out = len;
    return XLLM_OK;
}

/* ------------------------------------------------------------ families */

typedef struct {
    int nfc;
    int pre_trim;
    int post[3], dec[3];
    int ignore_merges, empty_affixes;
} bpe_family;

static const bpe_family k_llama3 = {0, 1, {1, 0, 1}, {1, 1, 1}, 1, 0};
static const bpe_family k_qwen2 = {1, 0, {0, 0, 0}, {0, 0, 0}, 0, 1};
static const bpe_family k_gpt2 = {0, 1, {1, 0, 1}, {1, 1, 1}, 0, 0};

static int str_is(const gguf_str *s, const char *v) { return s->len == strlen(v) && memcmp(s->p, v, s->len) == 0; }

/* ------------------------------------------------------------ synthesis */

/* What the steps below read from the file and derive, in one place. */
typedef struct {
    int spm, gpt2;         /* tokenizer.ggml.model: llama (SentencePiece) or gpt2 */
    const bpe_family *fam; /* gpt2: the family's components */
    const char *regex;     /* gpt2: the family's split regex; NULL = ByteLevel's own */
    gguf_str *tok;         /* the vocabulary */
    size_t n;
    float *score;
    uint8_t *type;         /* TT_* per id */
    uint8_t *in_vocab;     /* 1: in the BPE model's vocab */
    uint8_t *added;        /* 0 no, 1 plain added token, 2 special added token */
    int64_t sp_ids[4];     /* bos, eos, unk, pad (-1 none) */
    int add_bos, add_eos, space_prefix;
    gguf_str chat_template;
    int has_template;
    gguf_str *merges;      /* gpt2 */
    size_t n_merges;
    smerge *sm;            /* spm: the derived merges */
    size_t n_sm;
    pmap pm;               /* spm: piece -> id */
} tok_src;

enum { SP_BOS, SP_EOS, SP_UNK, SP_PAD };

static void tok_src_free(tok_src *t) {
    xllm_free(t->pm.slots);
    xllm_free(t->sm);
    xllm_free(t->tok);
    xllm_free(t->merges);
    xllm_free(t->score);
    xllm_free(t->type);
    xllm_free(t->in_vocab);
    xllm_free(t->added);
}

/* A file string in a message: at most 40 bytes, control bytes as '?'. */
static void printable(char b[64], const gguf_str *v) {
    snprintf(b, 64, "%.*s", (int)(v->len > 40 ? 40 : v->len), v->p);
    for (char *q = b; *q; q++)
        if ((unsigned char)*q < 0x20) *q = '?';
}

/* Step 1: which tokenizer (model and, for gpt2, the pre-tokenizer family).
 * *none = 1 for a file without a vocabulary. */
static xllm_status read_kind(gguf_ctx *c, tok_src *t, int *none) {
    gguf_str model;
    *none = 0;
    if (!gguf_get_str(c, "tokenizer.ggml.model", &model)) { /* no tokenizer (or a bad key: c->st) */
        *none = 1;
        return c->st;
    }
    t->spm = str_is(&model, "llama");
    t->gpt2 = str_is(&model, "gpt2");
    if (str_is(&model, "none") || str_is(&model, "no_vocab")) {
        *none = 1;
        return XLLM_OK;
    }
    char b[64];
    if (!t->spm && !t->gpt2) {
        printable(b, &model);
        return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                           "%s: tokenizer model \"%s\" is not supported (supported: llama, gpt2)", c->path, b);
    }
    t->fam = &k_gpt2;
    if (!t->gpt2) return XLLM_OK;
    gguf_str pre;
    if (gguf_get_str(c, "tokenizer.ggml.pre", &pre)) {
        if (str_is(&pre, "llama-bpe") || str_is(&pre, "llama3") || str_is(&pre, "llama-v3")) {
            t->fam = &k_llama3;
            t->regex = gguf_regex_llama3;
        } else if (str_is(&pre, "qwen2") || str_is(&pre, "deepseek-r1-qwen")) {
            t->fam = &k_qwen2;
            t->regex = gguf_regex_qwen2;
        } else if (!str_is(&pre, "default") && !str_is(&pre, "gpt2")) {
            printable(b, &pre);
            return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                               "%s: pre-tokenizer \"%s\" (tokenizer.ggml.pre) is not supported (supported: "
                               "llama-bpe, qwen2, deepseek-r1-qwen, default, gpt2)", c->path, b);
        }
    }
    return c->st;
}

#define OOM(c) err_setf((c)->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory building the tokenizer", (c)->path)

/* Step 2: tokens, scores, types, special ids and flags. */
static xllm_status read_vocab(gguf_ctx *c, tok_src *t) {
    if (!gguf_get_str_array(c, "tokenizer.ggml.tokens", &t->tok, &t->n))
        return c->st ? c->st : err_setf(c->err, XLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing", c->path);
    size_t n = t->n;
    if (n == 0 || n > (1u << 24))
        return err_setf(c->err, XLLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %zu entries", c->path, n);
    for (size_t i = 0; i < n; i++)
        if (memchr(t->tok[i].p, 0, t->tok[i].len))
            return err_setf(c->err, XLLM_ERR_FORMAT, "%s: token %zu holds a NUL byte", c->path, i);
    t->score = mem_calloc(n, sizeof *t->score);
    t->type = mem_malloc(n);
    t->in_vocab = mem_malloc(n);
    if (!t->score || !t->type || !t->in_vocab) return OOM(c);
    memset(t->type, TT_NORMAL, n);
    memset(t->in_vocab, 1, n);
    const gguf_kv *arr;
    if (gguf_get_num_array(c, "tokenizer.ggml.scores", &arr)) {
        if (arr->arr_n != n)
            return err_setf(c->err, XLLM_ERR_FORMAT, "%s: %llu scores for %zu tokens", c->path,
                               (unsigned long long)arr->arr_n, n);
        for (size_t i = 0; i < n; i++) {
            double v = gguf_arr_num(arr, i);
            t->score[i] = isnan(v) ? -INFINITY : (float)v;
        }
    }
    if (gguf_get_num_array(c, "tokenizer.ggml.token_type", &arr)) {
        if (arr->arr_n != n)
            return err_setf(c->err, XLLM_ERR_FORMAT, "%s: %llu token types for %zu tokens", c->path,
                               (unsigned long long)arr->arr_n, n);
        for (size_t i = 0; i < n; i++) {
            int64_t v = gguf_arr_int(arr, i);
            t->type[i] = (uint8_t)(v >= 1 && v <= 6 ? v : TT_NORMAL);
        }
    }
    if (c->st) return c->st;
    static const char *const keys[4] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    for (int k = 0; k < 4; k++) {
        int64_t v;
        t->sp_ids[k] = gguf_get_int(c, keys[k], &v) && v >= 0 && (uint64_t)v < n ? v : -1;
    }
    if (t->spm && t->sp_ids[SP_UNK] < 0)
        for (size_t i = 0; i < n && t->sp_ids[SP_UNK] < 0; i++)
            if (t->type[i] == TT_UNKNOWN) t->sp_ids[SP_UNK] = (int64_t)i;
    t->add_bos = t->spm;
    t->space_prefix = 1;
    gguf_get_bool(c, "tokenizer.ggml.add_bos_token", &t->add_bos);
    gguf_get_bool(c, "tokenizer.ggml.add_eos_token", &t->add_eos);
    gguf_get_bool(c, "tokenizer.ggml.add_space_prefix", &t->space_prefix);
    t->has_template = gguf_get_str(c, "tokenizer.chat_template", &t->chat_template);
    if (c->st) return c->st;
    if (t->spm && pmap_init(&t->pm, t->tok, n, NULL)) return OOM(c);
    /* added tokens: control / unknown (special), user-defined (not), and bos/eos/unk/pad */
    t->added = mem_calloc(n, 1);
    if (!t->added) return OOM(c);
    for (size_t i = 0; i < n; i++) {
        if (t->type[i] == TT_CONTROL || t->type[i] == TT_UNKNOWN) t->added[i] = 2;
        else if (t->type[i] == TT_USER) t->added[i] = 1;
    }
    for (int k = 0; k < 4; k++)
        if (t->sp_ids[k] >= 0) t->added[t->sp_ids[k]] = 2;
    return XLLM_OK;
}

/* Step 3 (gpt2): the merges; added tokens of type control / user-defined stay
 * out of the model vocabulary unless a merge uses them (whether the merges
 * are consistent is the tokenizer loader's check). */
static xllm_status read_bpe_merges(gguf_ctx *c, tok_src *t, jb *b) {
    if (!gguf_get_str_array(c, "tokenizer.ggml.merges", &t->merges, &t->n_merges))
        return c->st ? c->st
                     : err_setf(c->err, XLLM_ERR_FORMAT, "%s: gpt2 tokenizer without tokenizer.ggml.merges", c->path);
    size_t n = t->n;
    uint8_t *excluded = mem_calloc(n, 1);
    if (!excluded) return OOM(c);
    size_t n_ex = 0;
    for (size_t i = 0; i < n; i++)
        if (t->type[i] == TT_CONTROL || t->type[i] == TT_USER) excluded[i] = 1, t->in_vocab[i] = 0, n_ex++;
    pmap ex = {0};
    if (n_ex && pmap_init(&ex, t->tok, n, excluded)) {
        xllm_free(excluded);
        return OOM(c);
    }
    xllm_free(excluded);
    xllm_status st = XLLM_OK;
    for (size_t k = 0; k < t->n_merges && !st; k++) {
        const gguf_str *mg = &t->merges[k];
        const char *sp = mg->len > 1 ? memchr(mg->p + 1, ' ', mg->len - 1) : NULL;
        if (!sp || memchr(mg->p, 0, mg->len)) {
            st = err_setf(c->err, XLLM_ERR_FORMAT,
                             "%s: tokenizer.ggml.merges entry %zu is not two tokens separated by a space", c->path, k);
            break;
        }
        if (!n_ex) continue;
        size_t ll = (size_t)(sp - mg->p), rl = mg->len - ll - 1;
        int32_t ids[3] = {pmap_get(&ex, mg->p, ll), pmap_get(&ex, sp + 1, rl), -1};
        const char *joined = cstr(b, mg->p, mg->len);
        if (b->oom) break;
        memmove(b->scratch.p + ll, b->scratch.p + ll + 1, rl + 1);
        ids[2] = pmap_get(&ex, joined, mg->len - 1);
        for (int q = 0; q < 3; q++)
            if (ids[q] >= 0) t->in_vocab[ids[q]] = 1;
    }
    xllm_free(ex.slots);
    if (b->oom) return OOM(c);
    return st;
}

/* {"type": "Replace", "pattern": {"String": from}, "content": to} appended to list */
static void add_replace(jb *b, cJSON *list, const char *from, const char *to) {
    cJSON *r = add_obj(b, list, NULL);
    if (!r) return;
    add_s(b, r, "type", "Replace");
    cJSON *pat = add_obj(b, r, "pattern");
    if (pat) add_s(b, pat, "String", from);
    add_s(b, r, "content", to);
}

/* Step 4a (llama): normalizer, post-processor and decoder of HF's legacy Llama form. */
static void spm_components(jb *b, cJSON *root, const tok_src *t) {
    cJSON *nz = add_obj(b, root, "normalizer");
    if (nz) {
        add_s(b, nz, "type", "Sequence");
        cJSON *list = add_arr(b, nz, "normalizers");
        if (list && t->space_prefix) {
            cJSON *p = add_obj(b, list, NULL);
            if (p) add_s(b, p, "type", "Prepend"), add_s(b, p, "prepend", "\xe2\x96\x81");
        }
        if (list) add_replace(b, list, " ", "\xe2\x96\x81");
    }
    add_null(b, root, "pre_tokenizer");
    if (t->add_bos || t->add_eos)
        template_processing(b, root, "post_processor", t->tok, t->add_bos ? t->sp_ids[SP_BOS] : -1,
                            t->add_eos ? t->sp_ids[SP_EOS] : -1);
    else
        add_null(b, root, "post_processor");
    cJSON *dec = add_obj(b, root, "decoder");
    if (!dec) return;
    add_s(b, dec, "type", "Sequence");
    cJSON *list = add_arr(b, dec, "decoders");
    cJSON *o;
    if (list) add_replace(b, list, "\xe2\x96\x81", " ");
    if (list && (o = add_obj(b, list, NULL))) add_s(b, o, "type", "ByteFallback");
    if (list && (o = add_obj(b, list, NULL))) add_s(b, o, "type", "Fuse");
    if (list && t->space_prefix && (o = add_obj(b, list, NULL))) {
        add_s(b, o, "type", "Strip");
        add_s(b, o, "content", " ");
        add_n(b, o, "start", 1);
        add_n(b, o, "stop", 0);
    }
}

/* Step 4b (gpt2): the family's normalizer, pre-tokenizer, post-processor and decoder. */
static void bpe_components(jb *b, cJSON *root, const tok_src *t) {
    const bpe_family *fam = t->fam;
    if (fam->nfc) {
        cJSON *nz = add_obj(b, root, "normalizer");
        if (nz) add_s(b, nz, "type", "NFC");
    } else {
        add_null(b, root, "normalizer");
    }
    if (t->regex) {
        cJSON *pt = add_obj(b, root, "pre_tokenizer");
        if (pt) {
            add_s(b, pt, "type", "Sequence");
            cJSON *list = add_arr(b, pt, "pretokenizers");
            cJSON *sp = list ? add_obj(b, list, NULL) : NULL;
            if (sp) {
                add_s(b, sp, "type", "Split");
                cJSON *pat = add_obj(b, sp, "pattern");
                if (pat) add_s(b, pat, "Regex", t->regex);
                add_s(b, sp, "behavior", "Isolated");
                add_b(b, sp, "invert", 0);
            }
            if (list) byte_level(b, list, NULL, 0, fam->pre_trim, 0);
        }
    } else {
        byte_level(b, root, "pre_tokenizer", 0, fam->pre_trim, 1);
    }
    if (t->add_bos || t->add_eos) {
        cJSON *pp = add_obj(b, root, "post_processor");
        if (pp) {
            add_s(b, pp, "type", "Sequence");
            cJSON *list = add_arr(b, pp, "processors");
            if (list) {
                byte_level(b, list, NULL, fam->post[0], fam->post[1], fam->post[2]);
                template_processing(b, list, NULL, t->tok, t->add_bos ? t->sp_ids[SP_BOS] : -1,
                                    t->add_eos ? t->sp_ids[SP_EOS] : -1);
            }
        }
    } else {
        byte_level(b, root, "post_processor", fam->post[0], fam->post[1], fam->post[2]);
    }
    byte_level(b, root, "decoder", fam->dec[0], fam->dec[1], fam->dec[2]);
}

/* Step 4: tokenizer.json's fields but the model (NULL when out of memory). */
static cJSON *json_root(jb *b, const tok_src *t) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    add_s(b, root, "version", "1.0");
    add_null(b, root, "truncation");
    add_null(b, root, "padding");
    cJSON *at = add_arr(b, root, "added_tokens");
    for (size_t i = 0; i < t->n && at; i++)
        if (t->added[i]) added_token(b, at, (int64_t)i, &t->tok[i], t->added[i] == 2);
    if (t->spm) spm_components(b, root, t);
    else bpe_components(b, root, t);
    return root;
}

/* Step 5: the model's small fields (vocab and merges are written as text). */
static cJSON *json_model(jb *b, const tok_src *t) {
    cJSON *mo = cJSON_CreateObject();
    if (!mo) return NULL;
    add_s(b, mo, "type", "BPE");
    add_null(b, mo, "dropout");
    if (t->spm && t->sp_ids[SP_UNK] >= 0) add_tok(b, mo, "unk_token", &t->tok[t->sp_ids[SP_UNK]]);
    else add_null(b, mo, "unk_token");
    if (t->fam->empty_affixes && t->gpt2) {
        add_s(b, mo, "continuing_subword_prefix", "");
        add_s(b, mo, "end_of_word_suffix", "");
    } else {
        add_null(b, mo, "continuing_subword_prefix");
        add_null(b, mo, "end_of_word_suffix");
    }
    add_b(b, mo, "fuse_unk", t->spm);
    add_b(b, mo, "byte_fallback", t->spm);
    if (t->gpt2) add_b(b, mo, "ignore_merges", t->fam->ignore_merges);
    return mo;
}

/* Step 6: tokenizer_config.json. */
static cJSON *json_config(jb *b, const tok_src *t, int64_t model_max_length) {
    cJSON *cfg = cJSON_CreateObject();
    if (!cfg) return NULL;
    add_b(b, cfg, "add_bos_token", t->add_bos);
    add_b(b, cfg, "add_eos_token", t->add_eos);
    cJSON *dec = add_obj(b, cfg, "added_tokens_decoder");
    for (size_t i = 0; i < t->n && dec && !b->oom; i++) {
        if (!t->added[i]) continue;
        char idb[24];
        snprintf(idb, sizeof idb, "%zu", i);
        cJSON *e = add_obj(b, dec, idb);
        if (!e) break;
        add_tok(b, e, "content", &t->tok[i]);
        add_b(b, e, "single_word", 0);
        add_b(b, e, "lstrip", 0);
        add_b(b, e, "rstrip", 0);
        add_b(b, e, "normalized", 0);
        add_b(b, e, "special", t->added[i] == 2);
    }
    const char *names[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (int k = 0; k < 4; k++) {
        if (t->sp_ids[k] >= 0 && (k != SP_UNK || t->spm)) add_tok(b, cfg, names[k], &t->tok[t->sp_ids[k]]);
        else add_null(b, cfg, names[k]);
    }
    add_b(b, cfg, "clean_up_tokenization_spaces", 0);
    if (t->spm) {
        add_b(b, cfg, "legacy", 1);
        add_obj(b, cfg, "sp_model_kwargs");
        add_b(b, cfg, "spaces_between_special_tokens", 0);
        add_b(b, cfg, "use_default_system_prompt", 0);
    }
    if (model_max_length > 0) add_n(b, cfg, "model_max_length", (double)model_max_length);
    add_s(b, cfg, "tokenizer_class", t->spm ? "LlamaTokenizer" : "PreTrainedTokenizerFast");
    if (t->has_template) add_tok(b, cfg, "chat_template", &t->chat_template);
    return cfg;
}

/* Step 7: {root fields..., "model": {fields..., "vocab": {...}, "merges": [...]}}
 * as text; NULL when out of memory. */
static char *json_text(const cJSON *root, const cJSON *mo, const tok_src *t) {
    buf_t out = BUF_INIT;
    sb_open_object(&out, root);
    buf_append(&out, ",\"model\":", 9);
    sb_open_object(&out, mo);
    buf_append(&out, ",\"vocab\":{", 10);
    int first = 1;
    for (size_t i = 0; i < t->n && !out.err; i++) {
        if (!t->in_vocab[i]) continue;
        buf_append(&out, first ? "\"" : ",\"", first ? 1 : 2);
        sb_esc(&out, t->tok[i].p, t->tok[i].len);
        buf_printf(&out, "\":%zu", i);
        first = 0;
    }
    buf_append(&out, "},\"merges\":[", 12);
    size_t nm_out = t->gpt2 ? t->n_merges : t->n_sm;
    for (size_t k = 0; k < nm_out && !out.err; k++) {
        buf_append(&out, k ? ",\"" : "\"", k ? 2 : 1);
        if (t->gpt2) {
            sb_esc(&out, t->merges[k].p, t->merges[k].len);
        } else {
            sb_esc(&out, t->tok[t->sm[k].l].p, t->tok[t->sm[k].l].len);
            buf_append(&out, " ", 1);
            sb_esc(&out, t->tok[t->sm[k].r].p, t->tok[t->sm[k].r].len);
        }
        buf_append(&out, "\"", 1);
    }
    buf_append(&out, "]}}", 3);
    return buf_steal(&out, NULL);
}

xllm_status gguf_tok_synthesize(gguf_ctx *c, int64_t model_max_length, char **tokenizer_json,
                                char **tokenizer_config_json) {
    *tokenizer_json = *tokenizer_config_json = NULL;
    tok_src t;
    memset(&t, 0, sizeof t);
    int none;
    xllm_status st = read_kind(c, &t, &none);
    if (st || none) return st;
    jb b = {c, 0, BUF_INIT};
    cJSON *root = NULL, *cfg = NULL, *mo = NULL;
    char *t2 = NULL;
    if ((st = read_vocab(c, &t))) goto done;
    if (t.gpt2) st = read_bpe_merges(c, &t, &b);
    else st = spm_merges(c, t.tok, t.score, t.n, &t.pm, &t.sm, &t.n_sm);
    if (st) goto done;
    root = json_root(&b, &t);
    if (!root) goto oom;
    mo = json_model(&b, &t);
    if (!mo) b.oom = 1;
    if (mo) cfg = json_config(&b, &t, model_max_length);
    if (!cfg || !mo || b.oom) goto oom;
    char *text = json_text(root, mo, &t);
    t2 = cJSON_PrintUnformatted(cfg);
    if (!text || !t2 || !(*tokenizer_config_json = mem_strdup(t2))) {
        xllm_free(text);
        goto oom;
    }
    *tokenizer_json = text;
    goto done;
oom:
    st = OOM(c);
done:
    cJSON_free(t2);
    cJSON_Delete(root);
    cJSON_Delete(mo);
    cJSON_Delete(cfg);
    buf_free(&b.scratch);
    tok_src_free(&t);
    return st;
}
