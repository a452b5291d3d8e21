/*
 * tpl.h - the inside of the chat-template interpreter (src/template), shared
 * by its files. The outside (src/api) uses template.h only.
 *
 * The idea: a template is compiled once (lexer.c -> parser.c) into an AST
 * whose memory lives in the template's arena; each render evaluates the AST
 * (eval.c) over values (value.c) allocated in a per-render arena that is
 * dropped whole at the end, so values are plain structs with no reference
 * counts and nothing to free one by one. Semantics are Python's and Jinja2's
 * (as HuggingFace configures it: sandboxed, trim_blocks, lstrip_blocks,
 * loopcontrols); every construct we do not implement is an error that names
 * it and its line.
 */
#ifndef XLLM_TEMPLATE_TPL_H
#define XLLM_TEMPLATE_TPL_H

#include <stddef.h>
#include <stdint.h>

#include "xllm.h"
#include "base/error.h"
#include "base/buf.h"
#include "base/utf8.h" /* u8_encode / u8_valid */

/* ------------------------------------------------------------------ arena */

typedef struct tpl_arena_block tpl_arena_block;
typedef struct tpl_arena {
    tpl_arena_block *head;
    size_t used;  /* bytes handed out, all blocks */
    size_t cap;   /* the most it may hand out (0 = unlimited) */
} tpl_arena;

/* 16-byte aligned memory that lives until tpl_arena_free; NULL when the cap
 * is reached or malloc fails. */
void *tpl_alloc(tpl_arena *a, size_t size);
/* Room for element n of an arena array (*items, a T **; capacity *cap,
 * elements of `size` bytes; called when n == *cap): a new block of twice
 * the capacity (`first` when 0) holding the n elements; the old block stays
 * in the arena until it is freed. 0, or -1 (out of memory, overflow or the
 * arena's cap; *items and *cap unchanged). */
int tpl_arena_grow(tpl_arena *a, void *items, size_t n, size_t *cap, size_t size, size_t first);
void tpl_arena_free(tpl_arena *a);

/* ----------------------------------------------------------------- values */

typedef enum tv_kind {
    TV_MISSING = 0, /* internal: an argument that was not given */
    TV_UNDEF,       /* Jinja2 Undefined; u.s/len: the hint ("'x' is undefined") */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,         /* u.s/len: UTF-8 bytes (valid UTF-8, may hold NUL) */
    TV_LIST,        /* list, tuple, generator, range, dict views (tv_list.kind) */
    TV_DICT,        /* dict (insertion-ordered), namespace, loop (tv_dict.kind) */
    TV_FUNC         /* builtin, bound method or macro */
} tv_kind;

typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;
typedef struct tv_func tv_func;

typedef struct tv {
    tv_kind kind;
    size_t len; /* TV_STR / TV_UNDEF: bytes of u.s */
    union {
        int b;
        int64_t i;
        double f;
        const char *s;
        tv_list *l;
        tv_dict *d;
        tv_func *fn;
    } u;
} tv;

enum { L_LIST, L_TUPLE, L_GEN, L_RANGE, L_KEYS, L_VALUES, L_ITEMS };
struct tv_list {
    int kind;
    size_t n, cap;
    tv *items;
    int64_t r_start, r_stop, r_step; /* L_RANGE, for repr */
};

enum { D_DICT, D_NAMESPACE, D_LOOP };
typedef struct tpl_loop {
    size_t index0, length;
    const tv *items;
    int depth;                 /* 1 for the outermost call of a recursive loop */
    const struct node *node;   /* the for statement (recursive loops call it again) */
    struct scope *outer;       /* the scope the for statement runs in */
} tpl_loop;
struct tv_dict {
    int kind;
    size_t n, cap;
    tv *keys, *vals;
    tpl_loop *loop; /* D_LOOP */
    /* hash index over keys once the dict is not small (lookups stay O(1), so
     * 10^5 keys or 10^5 {% set %} in one scope cost linear time, not
     * quadratic): open addressing, slots hold key index + 1, 0 = empty */
    uint32_t *slots;
    size_t nslots;  /* a power of two, or 0 while there is no index */
};

typedef struct tpl_ctx tpl_ctx;
typedef struct node node;
typedef struct scope scope;

/* Call arguments: positional, then keyword (names NUL-terminated). */
typedef struct tpl_args {
    const tv *pos;
    size_t npos;
    const char *const *kw_names;
    const tv *kw;
    size_t nkw;
} tpl_args;

typedef int (*tpl_builtin)(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out);

enum { F_BUILTIN, F_MACRO };
struct tv_func {
    int kind;
    const char *name;   /* for messages */
    tpl_builtin fn;     /* F_BUILTIN */
    tv self;            /* bound method receiver (TV_MISSING for plain functions) */
    const node *macro;  /* F_MACRO */
    scope *closure;     /* F_MACRO: the scope it was defined in */
};

/* Constructors. Strings are not copied by tv_str (the bytes must outlive the
 * render: arena or template memory); tv_str_copy copies into the arena. */
static inline tv tv_none(void) { tv v = {TV_NONE, 0, {0}}; return v; }
static inline tv tv_missing(void) { tv v = {TV_MISSING, 0, {0}}; return v; }
static inline tv tv_bool(int b) { tv v = {TV_BOOL, 0, {0}}; v.u.b = b != 0; return v; }
static inline tv tv_int(int64_t i) { tv v = {TV_INT, 0, {0}}; v.u.i = i; return v; }
static inline tv tv_float(double f) { tv v = {TV_FLOAT, 0, {0}}; v.u.f = f; return v; }
static inline tv tv_str(const char *s, size_t len) { tv v = {TV_STR, len, {0}}; v.u.s = s; return v; }
static inline tv tv_undef(const char *hint) {
    tv v = {TV_UNDEF, 0, {0}};
    v.u.s = hint;
    return v;
}
tv tv_str_cstr(const char *s); /* static strings */
int tv_str_copy(tpl_ctx *c, const char *s, size_t len, tv *out);
tv_list *tv_list_new(tpl_ctx *c, int kind, size_t cap);
int tv_list_push(tpl_ctx *c, tv_list *l, tv v);
tv_dict *tv_dict_new(tpl_ctx *c, int kind);
/* Set (replace in place, or append). Keys compare with Python ==; an
 * unhashable key (list, dict) or one nested deeper than TPL_MAX_DEPTH is an
 * error (reported), so stored keys are always shallow and hashable. */
int tv_dict_set(tpl_ctx *c, tv_dict *d, tv key, tv val);
const tv *tv_dict_get(const tv_dict *d, const tv *key);
const tv *tv_dict_get_str(const tv_dict *d, const char *key, size_t len);
/* Drop every entry (the storage is kept). */
void tv_dict_clear(tv_dict *d);
tv tv_list_val(tv_list *l);
tv tv_dict_val(tv_dict *d);
/* An undefined whose hint is formatted ("'x' is undefined"). */
tv tv_undef_fmt(tpl_ctx *c, const char *fmt, ...) XLLM_PRINTF(2, 3);

int tv_truthy(const tv *v);
int tv_is_str(const tv *v);
int tv_is_number(const tv *v); /* int, float, bool */
double tv_as_double(const tv *v);
const char *tv_type_name(const tv *v); /* Python's: 'str', 'int', 'dict', 'Undefined'... */
/* The recursive operations over values (==, <, hashability, printing, JSON)
 * descend at most TPL_MAX_DEPTH levels: a deeper value (a list nested 10^5
 * deep, built by a loop) is an error, never a stack overflow. */
/* Python's ==: *res = 1 / 0; -1 (reported) when both sides nest too deeply. */
int tv_eq(tpl_ctx *c, const tv *a, const tv *b, int *res);
/* Python's hash() would succeed: 0, else -1 (reported: unhashable type, or
 * nested too deeply). */
int tv_check_hashable(tpl_ctx *c, const tv *v);
/* Python's < (and friends through it); -1 on TypeError (reported). */
int tv_lt(tpl_ctx *c, const tv *a, const tv *b, int *res);
/* len(); -1 (reported) when the value has none. */
int tv_len(tpl_ctx *c, const tv *v, size_t *n);
/* Items to iterate over (strings give characters, dicts their keys);
 * undefined iterates as empty; -1 (reported) when not iterable. */
int tv_iter(tpl_ctx *c, const tv *v, const tv **items, size_t *n);

/* ----------------------------------------------------- growable byte buffer */

/* Output text is base/buf.h's buf_t, bounded by the render's max_output
 * (tpl_buf_make); its sticky error becomes the render's error at the end. */

/* Python str() and repr() appended to b; -1 (reported) for values that have
 * no stable text (functions, generators). */
int tv_to_str(tpl_ctx *c, const tv *v, buf_t *b);
int tv_repr(tpl_ctx *c, const tv *v, buf_t *b);
/* str(v) as a value (strings are returned as they are). */
int tv_stringify(tpl_ctx *c, const tv *v, tv *out);
/* Buffer contents moved into an arena string value. */
int tpl_buf_to_value(tpl_ctx *c, buf_t *b, tv *out);
buf_t tpl_buf_make(tpl_ctx *c);

/* ---------------------------------------------------- Python string helpers */

/* Decode one UTF-8 code point at s[*i] (advancing *i); template strings are
 * validated UTF-8, but stray bytes decode as themselves. */
uint32_t py_utf8_next(const char *s, size_t len, size_t *i);
size_t py_cp_count(const char *s, size_t len);
/* Byte offset of code point index k (k <= count). */
size_t py_cp_offset(const char *s, size_t len, size_t k);
int py_isspace(uint32_t cp);
int py_isprintable(uint32_t cp);
int py_isalpha(uint32_t cp);
int py_isalnum(uint32_t cp);
int py_isdigit(uint32_t cp);
int py_isdecimal(uint32_t cp);
int py_isnumeric(uint32_t cp);
int py_isupper(uint32_t cp);
int py_istitle(uint32_t cp); /* a titlecase letter (Lt): ǅ, ǈ, ... */
int py_islower(uint32_t cp);
uint32_t py_toupper(uint32_t cp);
uint32_t py_tolower(uint32_t cp);
uint32_t py_totitle(uint32_t cp);
/* Append one code point (s[0..len)) in title case (Python's str.title). */
int py_title_char(buf_t *b, const char *s, size_t len);
/* Append s upper/lower-cased (Python's full mapping for the common cases). */
int py_upper(buf_t *b, const char *s, size_t len);
int py_lower(buf_t *b, const char *s, size_t len);
/* Lower-case s[from..to) with the whole of s as the context (final sigma). */
int py_lower_range(buf_t *b, const char *s, size_t len, size_t from, size_t to);
int py_final_sigma(const char *s, size_t len, size_t pos, size_t after);
int py_casefold(buf_t *b, const char *s, size_t len);
/* repr(str) with Python's choice of quotes. */
int py_str_repr(buf_t *b, const char *s, size_t len);
/* repr(float): shortest round-trip, Python's layout ("1.0", "1e+16", "inf"). */
void py_float_repr(double x, char out[40]);

/* ------------------------------------------------------------------- JSON */

/* Parse JSON text into values (strings exact, ints as int, numbers with a
 * fraction or exponent as float, objects keep key order; NaN/Infinity as
 * Python's json accepts). `what` names the input in errors. */
int tpl_json_parse(tpl_ctx *c, const char *text, size_t len, const char *what, tv *out);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) appended to b.
 * indent: NULL = none, else the indent string (may be empty). */
typedef struct tpl_json_opts {
    int ensure_ascii;
    const char *indent;
    size_t indent_len;
    int has_indent;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    int sort_keys;
} tpl_json_opts;
int tpl_json_dump(tpl_ctx *c, const tv *v, const tpl_json_opts *o, buf_t *b);

/* -------------------------------------------------------------------- AST */

typedef enum node_kind {
    /* expressions */
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NOT, E_NEG, E_POS, E_BIN, E_CMP, E_AND, E_OR, E_COND,
    /* statements */
    S_BODY, S_DATA, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_FILTERBLOCK, S_WITH,
    S_GENERATION
} node_kind;

/* Binary and comparison operators. */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef int (*tpl_filter_fn)(tpl_ctx *c, const tv *in, const tpl_args *a, tv *out);
typedef int (*tpl_test_fn)(tpl_ctx *c, const tv *in, const tpl_args *a, int *res);

struct node {
    node_kind k;
    int line;
    int op;                 /* E_BIN, E_NEG...; S_FOR: has else */
    tv val;                 /* E_CONST; S_DATA text */
    const char *name;       /* E_NAME, E_ATTR, E_FILTER/E_TEST name, S_MACRO name */
    node *a, *b, *c, *d, *e;
    node **kids;            /* list/tuple items, call args, body, cmp operands, macro params */
    node **kids2;           /* dict values, macro defaults, with values */
    int *ops;               /* E_CMP operators */
    size_t nk;
    const char **kwn;       /* keyword argument names */
    node **kwv;
    size_t nkw;
    tpl_filter_fn filter;   /* E_FILTER, resolved when parsed */
    tpl_test_fn test;       /* E_TEST */
    int uses_varargs, uses_kwargs; /* S_MACRO */
};

/* A compiled template. */
typedef struct tpl_template {
    tpl_arena arena;
    node *root;
} tpl_template;

/* Lexer tokens. */
typedef enum tok_type {
    T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} tok_type;

typedef struct token {
    tok_type t;
    int line;
    const char *s; /* T_DATA/T_STRING: text (decoded); T_NAME/T_OP: spelling */
    size_t len;
    int64_t i;
    double f;
} token;

/* Tokenize normalized source (arena-owned). */
int tpl_lex(tpl_arena *a, const char *src, size_t len, token **toks, size_t *ntoks, xllm_error *err);
/* Parse into t->root. */
int tpl_parse(tpl_template *t, const token *toks, size_t ntoks, xllm_error *err);

/* Lookup tables (filters.c, tests.c). */
tpl_filter_fn tpl_find_filter(const char *name);
tpl_test_fn tpl_find_test(const char *name);
int tpl_is_jinja_filter(const char *name); /* a Jinja2 builtin we do not implement */
int tpl_is_jinja_test(const char *name);

/* ------------------------------------------------------------- evaluation */

#define TPL_MAX_DEPTH 200          /* nesting of expressions / statements / macro calls */
#define TPL_MAX_RANGE 100000       /* jinja2.sandbox.MAX_RANGE */
/* Work one render may do, in units of one evaluated node, statement or loop
 * iteration, or one element visited by a scan (in, count, index, ==, sort,
 * unique...): nested loops over big ranges end with an error instead of
 * running for hours. A real chat template uses a few thousand per message. */
#define TPL_MAX_WORK 20000000LL

struct scope {
    scope *parent;
    tv_dict *vars; /* created on first set */
};

struct tpl_ctx {
    tpl_arena *arena;
    xllm_error *err;
    int failed;
    int line;         /* of the node being evaluated */
    int depth;
    size_t max_output;
    const tv_dict *vars; /* the render's variables */
    scope *top;
    const tv *filter_input; /* S_FILTERBLOCK / set-block body text */
    int folding;            /* constant folding at compile time (fold.c): no names, no calls */
    long long work;         /* units done so far (TPL_MAX_WORK) */
};

/* Charge n units of work; -1 (reported) past TPL_MAX_WORK. */
int tpl_work(tpl_ctx *c, size_t n);
/* What scanning v once costs: its items, or its bytes / 16 for a string. */
static inline size_t tv_work_size(const tv *v) {
    if (v->kind == TV_STR) return v->len / 16;
    if (v->kind == TV_LIST) return v->u.l->n;
    if (v->kind == TV_DICT) return v->u.d->n;
    return 0;
}

/* Report an error "chat template line N: ..." (first one wins); returns -1. */
int tpl_fail(tpl_ctx *c, xllm_status code, const char *fmt, ...) XLLM_PRINTF(3, 4);
/* An undefined value was used where it cannot be: fail with its hint. */
int tpl_fail_undef(tpl_ctx *c, const tv *v);
int tpl_oom(tpl_ctx *c);

/* Jinja2's compile-time constant folding over the AST (fold.c). */
int tpl_fold(tpl_template *t, xllm_error *err);
/* Evaluate an expression with no variables (folding mode); -1 when it is not constant. */
int tpl_eval_const(tpl_ctx *c, const node *n, tv *out);

/* Render the template with variables; *out is arena-owned. */
int tpl_render_ast(tpl_ctx *c, const tpl_template *t, buf_t *out);

/* Evaluation helpers other files call. */
int tpl_getattr(tpl_ctx *c, const tv *obj, const char *name, size_t len, tv *out);
int tpl_getitem(tpl_ctx *c, const tv *obj, const tv *key, tv *out);
int tpl_call(tpl_ctx *c, const tv *fn, const tpl_args *a, tv *out);
int tpl_binop(tpl_ctx *c, int op, const tv *a, const tv *b, tv *out);
int tpl_compare(tpl_ctx *c, int op, const tv *a, const tv *b, int *res);
/* Python's `x in container`. */
int tpl_contains(tpl_ctx *c, const tv *container, const tv *x, int *res);
/* Python's str % args (also the format filter). */
int tpl_percent_format(tpl_ctx *c, const tv *fmt, const tv *args, tv *out);
/* A method of str/dict/list bound to self, or TV_UNDEF when there is none. */
int tpl_method(tpl_ctx *c, const tv *self, const char *name, size_t len, tv *out);
/* A global function by name (range, dict, namespace, raise_exception, ...). */
int tpl_global(tpl_ctx *c, const char *name, tv *out);

/* Bind call arguments to parameter names, Python-style: out[i] is TV_MISSING
 * when not given. `what` names the callee in errors. */
int tpl_bind(tpl_ctx *c, const char *what, const tpl_args *a, const char *const *names, size_t n, tv *out);
int tpl_arg_int(tpl_ctx *c, const char *what, const tv *v, int64_t *out);

/* Checked integer arithmetic for values a template controls: a decimal digit
 * run at s[*i] (advancing *i) read as a count that saturates at sat (so a
 * width of 10^30 is "more than sat", never a wrapped int), and int64 + and *
 * that report overflow (nonzero) instead of wrapping. */
static inline int64_t tpl_digits_sat(const char *s, size_t n, size_t *i, int64_t sat) {
    int64_t v = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        int d = s[(*i)++] - '0';
        v = v > (sat - d) / 10 ? sat : v * 10 + d;
    }
    return v;
}
static inline int tpl_add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline int tpl_mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }

/* Jinja's attribute path getter used by map/selectattr/sort... ("a.b.0"). */
int tpl_attr_path(tpl_ctx *c, const tv *item, const tv *path, tv *out);

#endif
