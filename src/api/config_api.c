/*
 * config_api.c - xllm_config_load: the engine's YAML config file (docs/CONFIG.md).
 *
 * The file is read whole (at most CFG_MAX_BYTES) and walked as libyaml's
 * event stream by a small recursive-descent reader that knows the schema: each
 * mapping's keys are looked up in that section's table, each value is checked
 * against its key's type and range as it arrives. Nothing is built in between,
 * so memory is bounded by the file size and the recursion by the schema (three
 * levels), whatever the input nests. Aliases and anchors are refused (no
 * billion-laughs expansion), as are tags and duplicate keys. Every error names
 * the file, the line and the key path.
 *
 * Results go to local copies of the options and are written back only on
 * success, so a failed load leaves the caller's structs as they were. Strings
 * (the model and knowledge paths, resolved against the config file's
 * directory, and the knowledge names) are appended to one growing buffer and
 * referenced by offset until the end; the buffer itself becomes *storage.
 * No globals: thread-safe.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#define CFG_MAX_BYTES (1 << 20)       /* a config file is small; refuse anything bigger */
#define CFG_MAX_PATH 4096
#define CFG_MAX_DEPTH 32              /* nesting; the schema itself needs 3 */
#define CFG_MAX_NAME 64               /* knowledge names */
#define CFG_MAX_SIZE ((int64_t)1 << 50) /* 1 PiB: larger sizes are typos */

typedef struct cfg_reader {
    const char *file;
    const char *dir;   /* the config file's directory, without its trailing '/' */
    size_t dir_len;
    int has_dir;       /* 0: the path has no '/', relative paths stay as they are */
    xllm_error *err;
    yaml_parser_t parser;
    yaml_event_t ev;
    int have_ev;
    char *strs;        /* the string buffer (becomes *storage) */
    size_t strs_len, strs_cap;
    xllm_engine_options e;
    xllm_model_options m;
    long model_off;    /* -1: no model key */
    int knowledge_set;
    long kn_name[XLLM_MAX_KNOWLEDGE], kn_text[XLLM_MAX_KNOWLEDGE], kn_kv[XLLM_MAX_KNOWLEDGE];
} cfg_reader;

static size_t ev_line(const yaml_event_t *ev) { return ev->start_mark.line + 1; }

static xllm_status fail(cfg_reader *r, xllm_status code, size_t line, const char *fmt, ...) XLLM_PRINTF(4, 5);
static xllm_status fail(cfg_reader *r, xllm_status code, size_t line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_setf(r->err, code, "%s:%zu: %s", r->file, line, msg);
}

/* A scalar as it may appear in a message: at most 48 bytes, control bytes as '?'. */
static void show(char *buf, size_t cap, const char *s, size_t n) {
    size_t lim = cap - 4, o = 0;
    for (size_t i = 0; i < n && o < lim; i++) buf[o++] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (n > lim) memcpy(buf + o, "...", 3), o += 3;
    buf[o] = 0;
}

static const char *scalar_text(const yaml_event_t *ev) { return (const char *)ev->data.scalar.value; }
static size_t scalar_len(const yaml_event_t *ev) { return ev->data.scalar.length; }
static int scalar_plain(const yaml_event_t *ev) { return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

/* What a non-scalar value is, for "(got ...)". */
static const char *kind_name(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    default: return "something else";
    }
}

/* Advance to the next event; syntax errors are XLLM_ERR_FORMAT; aliases,
 * anchors and tags are refused here, once for every place they may appear. */
static xllm_status next_raw(cfg_reader *r) {
    if (r->have_ev) yaml_event_delete(&r->ev);
    r->have_ev = 0;
    if (!yaml_parser_parse(&r->parser, &r->ev)) {
        const yaml_parser_t *p = &r->parser;
        size_t line = p->problem_mark.line + 1;
        if (p->error == YAML_MEMORY_ERROR) return err_setf(r->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", r->file);
        if (p->context)
            return fail(r, XLLM_ERR_FORMAT, line, "YAML syntax error: %s (%s on line %zu)", p->problem ? p->problem : "?",
                        p->context, p->context_mark.line + 1);
        return fail(r, XLLM_ERR_FORMAT, line, "YAML syntax error: %s", p->problem ? p->problem : "?");
    }
    r->have_ev = 1;
    return XLLM_OK;
}

static xllm_status next(cfg_reader *r) {
    xllm_status st = next_raw(r);
    if (st) return st;
    const yaml_event_t *ev = &r->ev;
    const yaml_char_t *anchor = NULL, *tag = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(ev), "aliases (*%s) are not allowed in a config file",
                    (const char *)ev->data.alias.anchor);
    case YAML_SCALAR_EVENT: anchor = ev->data.scalar.anchor; tag = ev->data.scalar.tag; break;
    case YAML_SEQUENCE_START_EVENT: anchor = ev->data.sequence_start.anchor; tag = ev->data.sequence_start.tag; break;
    case YAML_MAPPING_START_EVENT: anchor = ev->data.mapping_start.anchor; tag = ev->data.mapping_start.tag; break;
    default: break;
    }
    if (anchor)
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(ev), "anchors (&%s) are not allowed in a config file",
                    (const char *)anchor);
    if (tag) return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(ev), "tags (%s) are not allowed in a config file", (const char *)tag);
    return XLLM_OK;
}

/* Append n bytes + NUL to the string buffer; *off receives their offset. */
static xllm_status add_str(cfg_reader *r, const char *a, size_t na, const char *b, size_t nb, long *off) {
    size_t need = r->strs_len + na + nb + 1;
    if (array_reserve(&r->strs, &r->strs_cap, need, 1, 256))
        return err_setf(r->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", r->file);
    *off = (long)r->strs_len;
    if (na) memcpy(r->strs + r->strs_len, a, na);
    if (nb) memcpy(r->strs + r->strs_len + na, b, nb);
    r->strs_len += na + nb;
    r->strs[r->strs_len++] = 0;
    return XLLM_OK;
}

/* ------------------------------------------------------------ value readers */

/* The current event must be a scalar; `what` describes the expected value. */
static xllm_status need_scalar(cfg_reader *r, const char *key, const char *what) {
    if (r->ev.type != YAML_SCALAR_EVENT)
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be %s (got %s)", key, what, kind_name(&r->ev));
    if (strlen(scalar_text(&r->ev)) != scalar_len(&r->ev))
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be %s (got a string holding a NUL byte)", key, what);
    return XLLM_OK;
}

/* Decimal digits with an optional sign into *v; 0 when not of that form,
 * -1 when it is but overflows int64. */
static int parse_int(const char *s, size_t n, int64_t *v) {
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i == n) return 0;
    uint64_t acc = 0;
    int over = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (acc > (UINT64_MAX - d) / 10) over = 1;
        else acc = acc * 10 + d;
    }
    if (over || acc > (uint64_t)INT64_MAX) return -1;
    *v = neg ? -(int64_t)acc : (int64_t)acc;
    return 1;
}

static xllm_status get_int(cfg_reader *r, const char *key, int64_t lo, int64_t hi, int *out) {
    xllm_status st = need_scalar(r, key, "an integer");
    if (st) return st;
    const char *s = scalar_text(&r->ev);
    size_t n = scalar_len(&r->ev);
    char shown[64];
    show(shown, sizeof shown, s, n);
    int64_t v = 0;
    int k = scalar_plain(&r->ev) ? parse_int(s, n, &v) : 0;
    if (k == 0) return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be an integer (got '%s')", key, shown);
    if (k < 0 || v < lo || v > hi) {
        if (lo == 0 && k > 0 && v < 0)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be a non-negative integer (got %s)", key, shown);
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be an integer from %lld to %lld (got %s)", key,
                    (long long)lo, (long long)hi, shown);
    }
    *out = (int)v;
    return XLLM_OK;
}

static int ieq(const char *a, size_t n, const char *b) { return strlen(b) == n && strncasecmp(a, b, n) == 0; }

static xllm_status get_bool(cfg_reader *r, const char *key, int *out) {
    xllm_status st = need_scalar(r, key, "true or false");
    if (st) return st;
    const char *s = scalar_text(&r->ev);
    size_t n = scalar_len(&r->ev);
    if (scalar_plain(&r->ev)) {
        if (ieq(s, n, "true") || ieq(s, n, "yes") || ieq(s, n, "on")) return *out = 1, XLLM_OK;
        if (ieq(s, n, "false") || ieq(s, n, "no") || ieq(s, n, "off")) return *out = 0, XLLM_OK;
    }
    char shown[64];
    show(shown, sizeof shown, s, n);
    return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be true or false (got '%s')", key, shown);
}

/* One of names[0..n); the index into *out. */
static xllm_status get_enum(cfg_reader *r, const char *key, const char *const *names, int n, int *out) {
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strcat(list, names[i]);
        if (i + 1 < n) strcat(list, ", ");
    }
    if (r->ev.type != YAML_SCALAR_EVENT)
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be one of %s (got %s)", key, list,
                    kind_name(&r->ev));
    const char *s = scalar_text(&r->ev);
    size_t len = scalar_len(&r->ev);
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(s, names[i], len) == 0) return *out = i, XLLM_OK;
    char shown[64];
    show(shown, sizeof shown, s, len);
    return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: '%s' is not one of %s", key, shown, list);
}

static const struct {
    const char *name;
    int64_t mult;
} size_units[] = {
    {"B", 1},
    {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000},
    {"KiB", (int64_t)1 << 10}, {"MiB", (int64_t)1 << 20}, {"GiB", (int64_t)1 << 30}, {"TiB", (int64_t)1 << 40},
    {"K", (int64_t)1 << 10}, {"M", (int64_t)1 << 20}, {"G", (int64_t)1 << 30}, {"T", (int64_t)1 << 40},
};

/* "123", "2GiB", "1.5 MB" -> bytes. 0 when malformed, -1 when too large. A
 * fraction needs a unit; the result is rounded down to whole bytes. */
static int parse_size(const char *s, size_t n, int64_t *out) {
    size_t i = 0;
    uint64_t ip = 0, frac = 0, fscale = 1;
    int over = 0, digits = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (ip > ((uint64_t)CFG_MAX_SIZE - d) / 10) over = 1;
        else ip = ip * 10 + d;
    }
    if (!digits) return 0;
    int has_frac = 0;
    if (i < n && s[i] == '.') {
        i++;
        int fd = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, fd++)
            if (fd < 9) frac = frac * 10 + (uint64_t)(s[i] - '0'), fscale *= 10;
        if (!fd) return 0;
        has_frac = 1;
    }
    while (i < n && s[i] == ' ') i++;
    int64_t mult = 1;
    if (i < n) {
        size_t ul = n - i;
        int found = 0;
        for (size_t u = 0; u < sizeof size_units / sizeof size_units[0]; u++)
            if (strlen(size_units[u].name) == ul && memcmp(s + i, size_units[u].name, ul) == 0) {
                mult = size_units[u].mult;
                found = 1;
                break;
            }
        if (!found) return 0;
    } else if (has_frac) {
        return 0;
    }
    if (over || ip > (uint64_t)CFG_MAX_SIZE / (uint64_t)mult) return -1;
    /* frac < fscale <= 1e9: frac * (mult / fscale) < mult and frac * (mult % fscale) < 1e18, no overflow */
    uint64_t fbytes = (frac * ((uint64_t)mult / fscale)) + (frac * ((uint64_t)mult % fscale)) / fscale;
    uint64_t v = ip * (uint64_t)mult + fbytes;
    if (v > (uint64_t)CFG_MAX_SIZE) return -1;
    *out = (int64_t)v;
    return 1;
}

/* A byte size; allow_none: "none" is -1. */
static xllm_status get_size(cfg_reader *r, const char *key, int allow_none, int64_t lo, int64_t *out) {
    const char *what = allow_none ? "a size (bytes, or a number with a unit such as 256MiB) or none"
                                  : "a size (bytes, or a number with a unit such as 256MiB)";
    xllm_status st = need_scalar(r, key, what);
    if (st) return st;
    const char *s = scalar_text(&r->ev);
    size_t n = scalar_len(&r->ev);
    if (allow_none && scalar_plain(&r->ev) && n == 4 && memcmp(s, "none", 4) == 0) return *out = -1, XLLM_OK;
    char shown[64];
    show(shown, sizeof shown, s, n);
    int64_t v = 0;
    int k = parse_size(s, n, &v);
    if (k == 0) {
        if (n && s[0] == '-')
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must not be negative (got %s)", key, shown);
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev),
                    "%s: must be %s; units: B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB or K, M, G, T "
                    "(powers of 1024) (got '%s')", key, what, shown);
    }
    if (k < 0) return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: too large (got %s; the limit is 1 PiB)", key, shown);
    if (v < lo) return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be at least %lld bytes (got %s)", key, (long long)lo, shown);
    *out = v;
    return XLLM_OK;
}

/* A file path, resolved against the config file's directory unless absolute. */
static xllm_status get_path(cfg_reader *r, const char *key, long *off) {
    xllm_status st = need_scalar(r, key, "a file path");
    if (st) return st;
    const char *s = scalar_text(&r->ev);
    size_t n = scalar_len(&r->ev);
    if (n == 0 || (scalar_plain(&r->ev) && ((n == 1 && s[0] == '~') || ieq(s, n, "null"))))
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be a file path (got an empty value)", key);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev),
                        "%s: must be a file path (got a string with a control character: a line break or tab?)", key);
    int rel = s[0] != '/' && r->has_dir;
    if (n + (rel ? r->dir_len + 1 : 0) >= CFG_MAX_PATH)
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: path too long (%zu bytes; at most %d)", key,
                    n + (rel ? r->dir_len + 1 : 0), CFG_MAX_PATH - 1);
    if (!rel) return add_str(r, s, n, NULL, 0, off);
    char dir[CFG_MAX_PATH];
    memcpy(dir, r->dir, r->dir_len);
    dir[r->dir_len] = '/';
    return add_str(r, dir, r->dir_len + 1, s, n, off);
}

/* ---------------------------------------------------------------- mappings */

typedef xllm_status (*key_fn)(cfg_reader *r, int key, const char *path);

/* Walk the mapping whose MAPPING_START is the current event: each key must be
 * one of keys[0..n) and appear once; fn reads its value (the current event). */
static xllm_status walk_mapping(cfg_reader *r, const char *section, const char *const *keys, int n, key_fn fn) {
    size_t first_line[16] = {0};
    char expected[512] = "";
    for (int i = 0; i < n; i++) {
        strcat(expected, keys[i]);
        if (i + 1 < n) strcat(expected, ", ");
    }
    for (;;) {
        xllm_status st = next(r);
        if (st) return st;
        if (r->ev.type == YAML_MAPPING_END_EVENT) return XLLM_OK;
        size_t line = ev_line(&r->ev);
        if (r->ev.type != YAML_SCALAR_EVENT)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "%s%skeys must be names (got %s)", section,
                        *section ? ": " : "", kind_name(&r->ev));
        const char *k = scalar_text(&r->ev);
        size_t kl = scalar_len(&r->ev);
        int idx = -1;
        for (int i = 0; i < n && idx < 0; i++)
            if (strlen(keys[i]) == kl && memcmp(keys[i], k, kl) == 0) idx = i;
        if (idx < 0) {
            char shown[64];
            show(shown, sizeof shown, k, kl);
            if (*section)
                return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "unknown key '%s' in %s (expected one of: %s)", shown,
                            section, expected);
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "unknown key '%s' (expected one of: %s)", shown, expected);
        }
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", section, *section ? "." : "", keys[idx]);
        if (first_line[idx])
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "duplicate key '%s' (first on line %zu)", path, first_line[idx]);
        first_line[idx] = line;
        if ((st = next(r))) return st;
        if ((st = fn(r, idx, path))) return st;
    }
}

static xllm_status need_mapping(cfg_reader *r, const char *key, const char *what) {
    if (r->ev.type == YAML_MAPPING_START_EVENT) return XLLM_OK;
    if (r->ev.type == YAML_SCALAR_EVENT) {
        char shown[64];
        show(shown, sizeof shown, scalar_text(&r->ev), scalar_len(&r->ev));
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be %s (got '%s')", key, what, shown);
    }
    return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "%s: must be %s (got %s)", key, what, kind_name(&r->ev));
}

static const char *const EXEC_KEYS[] = {"max_batch_size", "timeout_ms", "preempt_mode", "max_step_tokens", "backend",
                                        "device"};
static const char *const PREEMPT_NAMES[] = {"recompute", "swap", "elastic"};
static const char *const BACKEND_NAMES[] = {"cpu", "vulkan"};

static xllm_status exec_key(cfg_reader *r, int key, const char *path) {
    int v = 0;
    xllm_status st;
    switch (key) {
    case 0: return get_int(r, path, 1, 4096, &r->e.max_batch_size);
    case 1: return get_int(r, path, 0, 60000, &r->e.timeout_ms);
    case 2:
        if ((st = get_enum(r, path, PREEMPT_NAMES, 3, &v))) return st;
        r->e.preempt_mode = v == 0 ? XLLM_PREEMPT_RECOMPUTE : v == 1 ? XLLM_PREEMPT_SWAP : XLLM_PREEMPT_ELASTIC;
        return XLLM_OK;
    case 3: return get_int(r, path, 1, 65536, &r->m.max_step_tokens);
    case 4:
        if ((st = get_enum(r, path, BACKEND_NAMES, 2, &v))) return st;
        r->m.backend = BACKEND_NAMES[v]; /* static strings */
        return XLLM_OK;
    default: return get_int(r, path, 0, 15, &r->m.device);
    }
}

static const char *const MEM_KEYS[] = {"workspace_size", "swap_size", "cache_policy", "kv_block_size", "kv_dtype",
                                       "kv_tokens"};
static const char *const POLICY_NAMES[] = {"lru", "none"};
static const char *const KV_DTYPE_NAMES[] = {"f32", "f16", "q8", "auto"};

static xllm_status mem_key(cfg_reader *r, int key, const char *path) {
    int v = 0;
    xllm_status st;
    switch (key) {
    case 0: return get_size(r, path, 0, 0, &r->e.workspace_size);
    case 1: return get_size(r, path, 1, 0, &r->e.swap_size);
    case 2:
        if ((st = get_enum(r, path, POLICY_NAMES, 2, &v))) return st;
        r->e.cache_policy = v == 0 ? XLLM_CACHE_LRU : XLLM_CACHE_NONE;
        return XLLM_OK;
    case 3: return get_int(r, path, 1, 1024, &r->m.kv_block_size);
    case 4:
        if ((st = get_enum(r, path, KV_DTYPE_NAMES, 4, &v))) return st;
        r->m.kv_dtype = KV_DTYPE_NAMES[v]; /* static strings */
        return XLLM_OK;
    default: /* the KV pool in tokens when there is no workspace_size (the model option kv_tokens) */
        if ((st = get_int(r, path, 1, 1 << 30, &v))) return st;
        r->m.kv_tokens = v;
        return XLLM_OK;
    }
}

static const char *const RC_KEYS[] = {"enabled", "max_bytes", "max_entries"};

static xllm_status rc_key(cfg_reader *r, int key, const char *path) {
    switch (key) {
    case 0: return get_bool(r, path, &r->e.response_cache);
    case 1: return get_size(r, path, 0, 1, &r->e.response_cache_max_bytes);
    default: return get_int(r, path, 1, 1 << 24, &r->e.response_cache_max_entries);
    }
}

static const char *const KN_KEYS[] = {"text", "kv"};

static xllm_status kn_entry_key(cfg_reader *r, int key, const char *path) {
    int i = r->e.n_knowledge;
    return get_path(r, path, key == 0 ? &r->kn_text[i] : &r->kn_kv[i]);
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

/* knowledge: {name: path, name: {text: path, kv: path}, ...} */
static xllm_status parse_knowledge(cfg_reader *r) {
    xllm_status st = need_mapping(r, "knowledge", "a mapping of names to text files");
    if (st) return st;
    r->knowledge_set = 1;
    r->e.n_knowledge = 0;
    for (;;) {
        if ((st = next(r))) return st;
        if (r->ev.type == YAML_MAPPING_END_EVENT) return XLLM_OK;
        size_t line = ev_line(&r->ev);
        if (r->ev.type != YAML_SCALAR_EVENT)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "knowledge: keys must be names (got %s)", kind_name(&r->ev));
        const char *k = scalar_text(&r->ev);
        size_t kl = scalar_len(&r->ev);
        char shown[64];
        show(shown, sizeof shown, k, kl);
        if (kl == 0 || kl > CFG_MAX_NAME)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "knowledge: name '%s' must be 1 to %d characters long", shown,
                        CFG_MAX_NAME);
        for (size_t i = 0; i < kl; i++)
            if (!name_char(k[i]))
                return fail(r, XLLM_ERR_INVALID_ARGUMENT, line,
                            "knowledge: name '%s' may only hold letters, digits, '_', '-' and '.'", shown);
        int n = r->e.n_knowledge;
        for (int j = 0; j < n; j++) {
            const char *prev = r->strs + r->kn_name[j];
            if (strlen(prev) == kl && memcmp(prev, k, kl) == 0)
                return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "duplicate key 'knowledge.%s'", shown);
        }
        if (n == XLLM_MAX_KNOWLEDGE)
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, line, "knowledge: more than %d entries", XLLM_MAX_KNOWLEDGE);
        if ((st = add_str(r, k, kl, NULL, 0, &r->kn_name[n]))) return st;
        r->kn_text[n] = r->kn_kv[n] = -1;
        char path[CFG_MAX_NAME + 16];
        snprintf(path, sizeof path, "knowledge.%s", shown);
        if ((st = next(r))) return st;
        if (r->ev.type == YAML_MAPPING_START_EVENT) {
            size_t mline = ev_line(&r->ev);
            if ((st = walk_mapping(r, path, KN_KEYS, 2, kn_entry_key))) return st;
            if (r->kn_text[n] < 0)
                return fail(r, XLLM_ERR_INVALID_ARGUMENT, mline, "%s: missing key 'text' (the text file)", path);
        } else {
            if ((st = get_path(r, path, &r->kn_text[n]))) return st;
        }
        r->e.n_knowledge = n + 1;
    }
}

static const char *const TOP_KEYS[] = {"model", "threads", "context", "execution", "memory",
                                       "knowledge", "response_cache", "verbose"};

static xllm_status top_key(cfg_reader *r, int key, const char *path) {
    xllm_status st;
    switch (key) {
    case 0: return get_path(r, path, &r->model_off);
    case 1: return get_int(r, path, 0, 1024, &r->m.n_threads);
    case 2: return get_int(r, path, 0, 1 << 20, &r->m.max_context);
    case 3:
        if ((st = need_mapping(r, path, "a mapping of keys"))) return st;
        return walk_mapping(r, path, EXEC_KEYS, 6, exec_key);
    case 4:
        if ((st = need_mapping(r, path, "a mapping of keys"))) return st;
        return walk_mapping(r, path, MEM_KEYS, 6, mem_key);
    case 5: return parse_knowledge(r);
    case 6:
        if ((st = need_mapping(r, path, "a mapping of keys"))) return st;
        return walk_mapping(r, path, RC_KEYS, 3, rc_key);
    default: return get_bool(r, path, &r->e.verbose);
    }
}

/* The stream: at most one document, whose root is a mapping (or empty). */
static xllm_status parse_stream(cfg_reader *r) {
    xllm_status st;
    if ((st = next(r))) return st; /* STREAM_START */
    if ((st = next(r))) return st;
    if (r->ev.type == YAML_STREAM_END_EVENT) return XLLM_OK; /* empty file, or only comments */
    if ((st = next(r))) return st; /* the root */
    if (r->ev.type == YAML_MAPPING_START_EVENT) {
        if ((st = walk_mapping(r, "", TOP_KEYS, 8, top_key))) return st;
    } else {
        int empty = r->ev.type == YAML_SCALAR_EVENT && scalar_plain(&r->ev) &&
                    (scalar_len(&r->ev) == 0 || ieq(scalar_text(&r->ev), scalar_len(&r->ev), "~") ||
                     ieq(scalar_text(&r->ev), scalar_len(&r->ev), "null"));
        if (!empty) {
            if (r->ev.type == YAML_SCALAR_EVENT) {
                char shown[64];
                show(shown, sizeof shown, scalar_text(&r->ev), scalar_len(&r->ev));
                return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev),
                            "the top level must be a mapping of keys (got '%s')", shown);
            }
            return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "the top level must be a mapping of keys (got %s)",
                        kind_name(&r->ev));
        }
    }
    if ((st = next(r))) return st; /* DOCUMENT_END */
    if ((st = next(r))) return st;
    if (r->ev.type != YAML_STREAM_END_EVENT)
        return fail(r, XLLM_ERR_INVALID_ARGUMENT, ev_line(&r->ev), "more than one YAML document (a config file holds one)");
    return XLLM_OK;
}

/* The whole file, at most CFG_MAX_BYTES (a pipe or a growing file is read
 * in steps up to that bound). */
static xllm_status read_bounded(const char *path, char **data, size_t *len, xllm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, XLLM_ERR_IO, "%s: cannot open config file: %s", path, strerror(errno));
    struct stat sb;
    size_t cap = 4096;
    if (fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fclose(f);
            return err_setf(err, XLLM_ERR_IO, "%s: is a directory, not a config file", path);
        }
        if (S_ISREG(sb.st_mode)) cap = sb.st_size < CFG_MAX_BYTES ? (size_t)sb.st_size + 1 : (size_t)CFG_MAX_BYTES + 1;
    }
    char *buf = NULL;
    size_t n = 0;
    for (;;) {
        char *nb = mem_realloc(buf, cap + 1);
        if (!nb) {
            xllm_free(buf);
            fclose(f);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        }
        buf = nb;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap > CFG_MAX_BYTES) break; /* the end, or past the bound */
        /* own growth: the last step is clamped at the size bound, which array_reserve has no notion of */
        cap = cap * 2 > (size_t)CFG_MAX_BYTES + 1 ? (size_t)CFG_MAX_BYTES + 1 : cap * 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        xllm_free(buf);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot read config file", path);
    }
    if (n > CFG_MAX_BYTES) {
        xllm_free(buf);
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "%s: config file larger than %d bytes", path, CFG_MAX_BYTES);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return XLLM_OK;
}

xllm_status xllm_config_load(const char *path, xllm_engine_options *eopts, xllm_model_options *mopts,
                             const char **model_path, void **storage, xllm_error *err) {
    err_clear(err);
    if (storage) *storage = NULL;
    if (!path || !eopts || !mopts || !model_path || !storage)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_config_load: path, eopts, mopts, model_path and storage "
                                                           "must not be NULL");
    *model_path = NULL;
    char *data = NULL;
    size_t len = 0;
    xllm_status st = read_bounded(path, &data, &len, err);
    if (st) return st;

    cfg_reader r;
    memset(&r, 0, sizeof r);
    r.file = path;
    const char *slash = strrchr(path, '/');
    r.dir = path;
    r.dir_len = slash ? (size_t)(slash - path) : 0; /* "/x.yaml": dir "" joined as "" + "/" + name */
    r.has_dir = slash != NULL;
    r.e = *eopts;
    r.m = *mopts;
    r.model_off = -1;
    if (!yaml_parser_initialize(&r.parser)) {
        xllm_free(data);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)data, len);
    xllm_error local;
    r.err = &local;
    st = parse_stream(&r);
    if (st && st != XLLM_ERR_FORMAT && st != XLLM_ERR_OUT_OF_MEMORY) {
        /* A file that is not YAML is reported as such, even where a key error
         * comes first: read on to the end for a syntax error. */
        xllm_error first = local;
        /* Nesting deeper than any config needs ends the search: libyaml's
         * scanner costs O(depth) a token, so 1 MiB of '[' would take minutes. */
        int depth = 0;
        while (!(r.have_ev && r.ev.type == YAML_STREAM_END_EVENT) && depth <= CFG_MAX_DEPTH) {
            if (next_raw(&r)) break;
            if (r.ev.type == YAML_SEQUENCE_START_EVENT || r.ev.type == YAML_MAPPING_START_EVENT) depth++;
            if (r.ev.type == YAML_SEQUENCE_END_EVENT || r.ev.type == YAML_MAPPING_END_EVENT) depth--;
        }
        if (local.code != XLLM_ERR_FORMAT && local.code != XLLM_ERR_OUT_OF_MEMORY) local = first;
        st = local.code;
    }
    if (st && err) *err = local;
    if (r.have_ev) yaml_event_delete(&r.ev);
    yaml_parser_delete(&r.parser);
    xllm_free(data);
    if (st) {
        xllm_free(r.strs);
        return st;
    }
    if (r.knowledge_set) {
        for (int i = 0; i < XLLM_MAX_KNOWLEDGE; i++) {
            int set = i < r.e.n_knowledge;
            r.e.knowledge_name[i] = set ? r.strs + r.kn_name[i] : NULL;
            r.e.knowledge_path[i] = set ? r.strs + r.kn_text[i] : NULL;
            r.e.knowledge_kv_path[i] = set && r.kn_kv[i] >= 0 ? r.strs + r.kn_kv[i] : NULL;
        }
    }
    *eopts = r.e;
    *mopts = r.m;
    *model_path = r.model_off >= 0 ? r.strs + r.model_off : NULL;
    *storage = r.strs;
    return XLLM_OK;
}
