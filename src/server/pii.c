/*
 * pii.c - masking personal data (the brief's patient and bank data) before
 * it reaches a model, and restoring or masking it in the output.
 *
 * Detectors are PCRE2 patterns, some followed by a checksum: e-mail
 * addresses, phone numbers, payment card numbers (Luhn), IBANs (ISO 13616
 * mod 97), Chinese resident ID numbers (ISO 7064 MOD 11-2), and custom
 * regexes from the config. Text is scanned left to right; at each step the
 * earliest valid match of any detector wins (ties: the order above, custom
 * last) and becomes a placeholder [TYPE_k], numbered per request and type;
 * the same value gets the same placeholder again. The request's map
 * (placeholder -> value) lives only in the server's memory for the request:
 * the engine, its caches and the logs see placeholders only.
 *
 * Output: a pii_stream takes raw generated text piece by piece. It holds back
 * the tail that could still become a placeholder ("[EMA") or a detector
 * match (PCRE2 hard partial matching says where a match could start that
 * needs more text), restores the request's placeholders in what is safe and,
 * if configured, masks values the model produced itself (values of the
 * request's own map are not masked again).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "srv.h"

#include <ctype.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_NONE, V_LUHN, V_IBAN, V_CNID };

typedef struct detector {
    char type[40];
    pcre2_code *re;
    int validate;
} detector;

struct pii_policy {
    detector d[32];
    int n;
    int restore, mask_output;
};

typedef struct pii_entry {
    char *ph, *value;
    size_t value_len;
} pii_entry;

struct pii_map {
    pthread_mutex_t mu;
    pii_entry *e;
    int n, cap;
    int counter[32];
};

struct pii_stream {
    const pii_policy *p;
    pii_map *m;
    pii_map *om;   /* values the model produced itself, when masking output */
    sbuf pending;
};

static const struct { const char *name, *type, *re; int v; } builtin[] = {
    {"email", "EMAIL", "[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}(?![A-Za-z0-9-])", V_NONE},
    {"card", "CARD", "(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])", V_LUHN},
    {"iban", "IBAN", "(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])", V_IBAN},
    {"cn_id", "CN_ID", "(?<![0-9])[1-9][0-9]{16}[0-9Xx](?![0-9A-Za-z])", V_CNID},
    {"phone", "PHONE", "(?<![0-9A-Za-z+])(?:\\+[0-9]{1,3}[ .-]?)?(?:\\([0-9]{1,4}\\)[ .-]?)?[0-9]{2,4}(?:[ .-]?[0-9]{2,4}){2,4}(?![0-9])", V_NONE},
};
#define N_BUILTIN ((int)(sizeof builtin / sizeof builtin[0]))

static int luhn(const char *s, size_t n) {
    int sum = 0, k = 0, digits = 0;
    for (size_t i = n; i-- > 0;) {
        if (!isdigit((unsigned char)s[i])) continue;
        int d = s[i] - '0';
        if (k++ & 1) { d *= 2; if (d > 9) d -= 9; }
        sum += d;
        digits++;
    }
    return digits >= 13 && digits <= 19 && sum % 10 == 0;
}

static int iban_ok(const char *s, size_t n) {
    char b[64];
    size_t m = 0;
    for (size_t i = 0; i < n && m < sizeof b; i++)
        if (s[i] != ' ') b[m++] = s[i];
    if (m < 15 || m > 34) return 0;
    unsigned rem = 0;
    for (size_t k = 0; k < m; k++) {
        char c = b[(k + 4) % m];
        if (isdigit((unsigned char)c)) rem = (rem * 10 + (unsigned)(c - '0')) % 97;
        else if (c >= 'A' && c <= 'Z') rem = (rem * 100 + (unsigned)(c - 'A' + 10)) % 97;
        else return 0;
    }
    return rem == 1;
}

static int cnid_ok(const char *s, size_t n) {
    static const int w[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
    static const char map[] = "10X98765432";
    if (n != 18) return 0;
    int sum = 0;
    for (int i = 0; i < 17; i++) sum += (s[i] - '0') * w[i];
    char c = (char)toupper((unsigned char)s[17]);
    return map[sum % 11] == c;
}

static int valid(int v, const char *s, size_t n) {
    return v == V_LUHN ? luhn(s, n) : v == V_IBAN ? iban_ok(s, n) : v == V_CNID ? cnid_ok(s, n) : 1;
}

static int add_detector(pii_policy *p, const char *type, const char *re, int v, uint32_t flags, char *err, size_t cap) {
    if (p->n >= 32) { snprintf(err, cap, "at most 32 detectors"); return -1; }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, flags, &ec, &eo, NULL);
    if (!c) {
        PCRE2_UCHAR m[256];
        pcre2_get_error_message(ec, m, sizeof m);
        snprintf(err, cap, "pattern '%.64s': %s at offset %zu", re, (char *)m, (size_t)eo);
        return -1;
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    detector *d = &p->d[p->n++];
    snprintf(d->type, sizeof d->type, "%s", type);
    d->re = c;
    d->validate = v;
    return 0;
}

pii_policy *pii_policy_create(const cJSON *cfg, char *err, size_t cap) {
    pii_policy *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, cap, "out of memory"); return NULL; }
    const cJSON *it;
    cJSON_ArrayForEach(it, cfg) {
        if (strcmp(it->string, "detectors") && strcmp(it->string, "custom") && strcmp(it->string, "restore") &&
            strcmp(it->string, "mask_output")) {
            snprintf(err, cap, "unknown key '%.64s' (detectors, custom, restore, mask_output)", it->string);
            goto fail;
        }
    }
    const cJSON *dets = cJSON_GetObjectItemCaseSensitive(cfg, "detectors");
    if (dets && !cJSON_IsArray(dets)) { snprintf(err, cap, "'detectors' must be a list"); goto fail; }
    /* builtin order fixes the priority, whatever the config's order */
    for (int b = 0; b < N_BUILTIN; b++) {
        int want = !dets; /* no list: all */
        cJSON_ArrayForEach(it, dets) {
            if (!cJSON_IsString(it)) { snprintf(err, cap, "'detectors' lists names"); goto fail; }
            if (!strcmp(it->valuestring, builtin[b].name)) want = 1;
        }
        if (want && add_detector(p, builtin[b].type, builtin[b].re, builtin[b].v, 0, err, cap)) goto fail;
    }
    cJSON_ArrayForEach(it, dets) {
        int known = 0;
        for (int b = 0; b < N_BUILTIN; b++) known |= !strcmp(it->valuestring, builtin[b].name);
        if (!known) { snprintf(err, cap, "unknown detector '%.64s' (email, phone, card, iban, cn_id)", it->valuestring); goto fail; }
    }
    const cJSON *cus = cJSON_GetObjectItemCaseSensitive(cfg, "custom");
    if (cus && !cJSON_IsArray(cus)) { snprintf(err, cap, "'custom' must be a list of {name, pattern}"); goto fail; }
    cJSON_ArrayForEach(it, cus) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name"), *r = cJSON_GetObjectItemCaseSensitive(it, "pattern");
        if (!cJSON_IsString(n) || !cJSON_IsString(r) || !n->valuestring[0]) {
            snprintf(err, cap, "a custom detector needs a string 'name' and 'pattern'");
            goto fail;
        }
        char type[40];
        size_t k = 0;
        for (const char *c = n->valuestring; *c && k + 1 < sizeof type; c++)
            type[k++] = isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_';
        type[k] = 0;
        if (add_detector(p, type, r->valuestring, V_NONE, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, err, cap)) goto fail;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "restore"), *mo = cJSON_GetObjectItemCaseSensitive(cfg, "mask_output");
    if ((rs && !cJSON_IsBool(rs)) || (mo && !cJSON_IsBool(mo))) { snprintf(err, cap, "'restore' and 'mask_output' are booleans"); goto fail; }
    p->restore = cJSON_IsTrue(rs);
    p->mask_output = cJSON_IsTrue(mo);
    return p;
fail:
    pii_policy_free(p);
    return NULL;
}

void pii_policy_free(pii_policy *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->d[i].re);
    free(p);
}

int pii_policy_restores(const pii_policy *p) { return p && p->restore; }
int pii_policy_masks_output(const pii_policy *p) { return p && p->mask_output; }

pii_map *pii_map_create(void) {
    pii_map *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void pii_map_free(pii_map *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        /* wipe the values before the memory goes back */
        memset(m->e[i].value, 0, m->e[i].value_len);
        free(m->e[i].value);
        free(m->e[i].ph);
    }
    free(m->e);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static const char *map_placeholder(pii_map *m, int det, const char *type, const char *v, size_t n) {
    for (int i = 0; i < m->n; i++)
        if (m->e[i].value_len == n && !memcmp(m->e[i].value, v, n)) return m->e[i].ph;
    if (m->n == m->cap) {
        size_t cap = (size_t)m->cap;
        if (srv_reserve(&m->e, &cap, (size_t)m->n + 1, sizeof *m->e, 8, INT_MAX / 2)) return NULL;
        m->cap = (int)cap;
    }
    char ph[64];
    snprintf(ph, sizeof ph, "[%s_%d]", type, ++m->counter[det]);
    pii_entry *e = &m->e[m->n];
    e->ph = strdup(ph);
    e->value = malloc(n + 1);
    if (!e->ph || !e->value) { free(e->ph); free(e->value); return NULL; }
    memcpy(e->value, v, n);
    e->value[n] = 0;
    e->value_len = n;
    m->n++;
    return e->ph;
}

static int in_map(pii_map *m, const char *v, size_t n) {
    if (!m) return 0;
    for (int i = 0; i < m->n; i++)
        if (m->e[i].value_len == n && !memcmp(m->e[i].value, v, n)) return 1;
    return 0;
}

/* The earliest valid complete match at or after `from`: 1 with [*s, *e) and
 * the detector; 0 none. With partial: *hold is where a match that needs more
 * text could start (n if none). */
static int next_match(const pii_policy *p, const char *t, size_t n, size_t from, int partial, size_t *ms, size_t *me,
                      int *det, size_t *hold) {
    int found = 0;
    size_t best_s = n, best_e = n;
    if (hold) *hold = n;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!md || !mc) { pcre2_match_data_free(md); pcre2_match_context_free(mc); return 0; }
    pcre2_set_match_limit(mc, 200000);
    for (int i = 0; i < p->n; i++) {
        size_t off = from;
        while (off <= n) {
            int rc = pcre2_match(p->d[i].re, (PCRE2_SPTR)t, n, off, partial ? PCRE2_PARTIAL_HARD : 0, md, mc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (rc == PCRE2_ERROR_PARTIAL) {
                if (hold && ov[0] < *hold) *hold = ov[0];
                break;
            }
            if (rc < 0) break;
            size_t s = ov[0], e = ov[1];
            if (e == s) { off = s + 1; continue; }
            if (valid(p->d[i].validate, t + s, e - s)) {
                if (s < best_s) best_s = s, best_e = e, *det = i, found = 1;
                if (!partial) break;
                off = e; /* keep looking for a match that needs more text */
                continue;
            }
            off = s + 1;
        }
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    *ms = best_s;
    *me = best_e;
    return found;
}

static int mask_into(const pii_policy *p, pii_map *m, pii_map *skip, const char *t, size_t n, sbuf *out) {
    int count = 0;
    size_t pos = 0;
    for (;;) {
        size_t s, e;
        int det = 0;
        if (!next_match(p, t, n, pos, 0, &s, &e, &det, NULL)) break;
        sb_put(out, t + pos, s - pos);
        if (in_map(skip, t + s, e - s)) {
            sb_put(out, t + s, e - s);
        } else {
            pthread_mutex_lock(&m->mu);
            const char *ph = map_placeholder(m, det, p->d[det].type, t + s, e - s);
            if (ph) sb_puts(out, ph);
            else sb_puts(out, "[REDACTED]");
            pthread_mutex_unlock(&m->mu);
            count++;
        }
        pos = e;
    }
    sb_put(out, t + pos, n - pos);
    return count;
}

int pii_mask(const pii_policy *p, pii_map *m, const char *text, size_t n, sbuf *out) {
    if (!p || !m) { sb_put(out, text, n); return 0; }
    return mask_into(p, m, NULL, text, n, out);
}

pii_stream *pii_stream_create(const pii_policy *p, pii_map *m) {
    pii_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p;
    s->m = m;
    s->om = pii_map_create();
    if (!s->om) { free(s); return NULL; }
    return s;
}

void pii_stream_free(pii_stream *s) {
    if (!s) return;
    if (s->pending.p) memset(s->pending.p, 0, s->pending.cap);
    sb_free(&s->pending);
    pii_map_free(s->om);
    free(s);
}

/* Replace the map's placeholders in t[0..n). */
static void restore_into(pii_map *m, const char *t, size_t n, sbuf *out) {
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] != '[' || !m) continue;
        for (int k = 0; k < m->n; k++) {
            size_t pl = strlen(m->e[k].ph);
            if (i + pl <= n && !memcmp(t + i, m->e[k].ph, pl)) {
                sb_put(out, t + pos, i - pos);
                sb_put(out, m->e[k].value, m->e[k].value_len);
                pos = i + pl;
                i = pos - 1;
                break;
            }
        }
    }
    sb_put(out, t + pos, n - pos);
}

void pii_stream_push(pii_stream *s, const char *text, size_t n, int final, sbuf *out) {
    sb_put(&s->pending, text, n);
    const char *t = s->pending.p ? s->pending.p : "";
    size_t len = s->pending.len, safe = len;
    if (!final) {
        if (s->p->restore && s->m) {
            /* a '[' that could still open a placeholder */
            for (size_t i = len; i-- > 0 && len - i < 48;) {
                if (t[i] == ']') break;
                if (t[i] == '[') { safe = i; break; }
            }
        }
        if (s->p->mask_output) {
            size_t ms, me, hold;
            int det;
            next_match(s->p, t, len, 0, 1, &ms, &me, &det, &hold);
            if (hold < safe) safe = hold;
        }
    }
    sbuf restored = {0};
    if (s->p->restore && s->m) restore_into(s->m, t, safe, &restored);
    else sb_put(&restored, t, safe);
    if (s->p->mask_output) {
        mask_into(s->p, s->om, s->m, restored.p ? restored.p : "", restored.len, out);
    } else {
        sb_put(out, restored.p, restored.len);
    }
    sb_free(&restored);
    if (s->pending.p) {
        memmove(s->pending.p, t + safe, len - safe);
        s->pending.len = len - safe;
        s->pending.p[s->pending.len] = 0;
    }
}
