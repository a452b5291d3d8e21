/*
 * grammar_json_number.c - JSON Schema numbers with bounds and multipleOf, as
 * exact grammars.
 *
 * The idea: a number the grammar writes has at most 15 significant digits
 * and no exponent, so with R digits after the point it is N / 10^R for an
 * integer N of at most 15 digits. Bounds (minimum / maximum / exclusive,
 * decimals included: taken as the shortest decimal that reads back to the
 * bound) become a range [A, B] of N, per length n of the integer part; the
 * text is N's digits (the point after n of them, trailing fraction zeros
 * optional; free states shared across lengths) walked by a digit automaton that is tight against A's and B's
 * digits along at most two paths and free elsewhere - the same construction
 * as a digit DP. multipleOf k (an integer up to 1000) adds the remainder mod
 * k to the automaton's state (k's factor 10^t as t trailing zeros instead,
 * and at most MAX_MOD_WORK remainders x digits); multipleOf 10^-p (0.1,
 * 0.01, ...) is R = p.
 * Every other multipleOf is refused. Negative numbers are '-' and the same
 * construction over the magnitude.
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 15
#define MAX_MOD 1000
#define MAX_MOD_WORK 4000 /* remainders x digits: the free states of the automaton */
#define NONE (-2)      /* an empty language */
#define BIG 10000000000000000LL /* above any N of 15 digits */

typedef struct dec { /* m * 10^e, m >= 0 */
    unsigned long long m;
    int e;
} dec;

typedef struct bound {
    int present, excl;
    double v;
} bound;

typedef struct nb {
    gbuild *b;
    int k;             /* multipleOf / 10^t (1: none): the remainder tracked */
    int t;             /* multipleOf's factor 10^t: the last t digits are 0 */
    int n, R, L;       /* integer digits, fraction digits, L = n + R */
    char a[MAX_DIGITS + 2], z[MAX_DIGITS + 2]; /* A and B, zero-padded to L digits */
    int32_t *memo;     /* free states: (ri, rf, dot, r) -> rule + 3 (0 unknown, 1 NONE) */
} nb;

/* The magnitude of v as the shortest decimal that reads back to it. */
static void dec_of(double v, dec *d) {
    char buf[48];
    v = fabs(v);
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    d->m = 0, d->e = 0;
    int frac = 0, in_frac = 0, digits = 0;
    const char *p = buf;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') { in_frac = 1; continue; }
        if (*p < '0' || *p > '9') continue;
        if (digits < 18) d->m = d->m * 10 + (unsigned)(*p - '0'), digits += d->m > 0, frac += in_frac;
        else if (!in_frac) d->e++; /* beyond 18 digits (cannot happen after %.17g) */
    }
    d->e -= frac;
    if (*p == 'e' || *p == 'E') d->e += atoi(p + 1);
    while (d->m && d->m % 10 == 0) d->m /= 10, d->e++;
}

/* floor (up = 0) or ceil (up = 1) of d * 10^R, clamped to BIG. */
static long long dec_scaled(const dec *d, int R, int up) {
    int sh = d->e + R;
    unsigned long long m = d->m;
    if (!m) return 0;
    if (sh >= 0) {
        for (int i = 0; i < sh; i++) {
            if (m > (unsigned long long)BIG) return BIG;
            m *= 10;
        }
        return m > (unsigned long long)BIG ? BIG : (long long)m;
    }
    if (-sh > 19) return up ? 1 : 0;
    unsigned long long p = 1;
    for (int i = 0; i < -sh; i++) p *= 10;
    return (long long)(m / p) + (up && m % p ? 1 : 0);
}

static long long pow10ll(int n) {
    long long p = 1;
    while (n-- > 0) p *= 10;
    return p;
}

static int32_t lit1(gbuild *b, char c) { return gb_lit(b, &c, 1); }

static int32_t alt_of(gbuild *b, const int32_t *r, int n) {
    int32_t v[16];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (r[i] != NONE) v[k++] = r[i];
    if (!k) return NONE;
    return k == 1 ? v[0] : gb_alt(b, v, k);
}

static int32_t seq_of(gbuild *b, int32_t x, int32_t y) { return x == NONE || y == NONE ? NONE : gb_seq2(b, x, y); }

/* The rest of the text from padded digit pos, tight against A (tl) / B (th), remainder r. */
static int32_t dp(nb *s, int pos, int tl, int th, int r) {
    if (!gb_ok(s->b)) return NONE;
    int ri = pos < s->n ? s->n - pos : 0, rf = pos < s->n ? s->R : s->L - pos, dot = pos > s->n;
    size_t key = (((size_t)ri * (MAX_DIGITS + 1) + (size_t)rf) * 2 + (size_t)dot) * (size_t)s->k + (size_t)r;
    if (!tl && !th && s->memo[key]) return s->memo[key] == 1 ? NONE : s->memo[key] - 3;
    int32_t opts[12];
    int no = 0;
    if (pos >= s->n) { /* the text may end: the rest of N's digits are zeros */
        int ok = r == 0;
        for (int i = pos; ok && tl && i < s->L; i++) ok = s->a[i] == '0';
        if (ok) opts[no++] = gb_empty(s->b);
    }
    if (pos < s->L) {
        int dl = tl ? s->a[pos] - '0' : 0, dh = th ? s->z[pos] - '0' : 9;
        if (pos >= s->L - s->t) { /* multipleOf's trailing zeros */
            if (dl > 0) dh = -1;
            else dh = 0;
        }
        int32_t digs[11];
        int nd = 0;
        if (s->k > 1 || s->t > 0 || (tl && th && dl == dh)) {
            for (int d = dl; d <= dh; d++) {
                int32_t rest = dp(s, pos + 1, tl && d == dl, th && d == s->z[pos] - '0', pos >= s->L - s->t ? r : (r * 10 + d) % s->k);
                digs[nd++] = seq_of(s->b, lit1(s->b, (char)('0' + d)), rest);
            }
        } else {
            int lo = dl + (tl ? 1 : 0), hi = dh - (th ? 1 : 0);
            if (tl) digs[nd++] = seq_of(s->b, lit1(s->b, (char)('0' + dl)), dp(s, pos + 1, 1, 0, 0));
            if (th) digs[nd++] = seq_of(s->b, lit1(s->b, (char)('0' + dh)), dp(s, pos + 1, 0, 1, 0));
            if (lo <= hi) {
                gram_set cs = {{0}};
                gram_set_range(&cs, (unsigned)('0' + lo), (unsigned)('0' + hi));
                digs[nd++] = seq_of(s->b, gb_bytes(s->b, &cs), dp(s, pos + 1, 0, 0, 0));
            }
        }
        int32_t d = alt_of(s->b, digs, nd);
        opts[no++] = pos == s->n ? seq_of(s->b, lit1(s->b, '.'), d) : d;
    }
    int32_t res = alt_of(s->b, opts, no);
    if (!tl && !th) s->memo[key] = res == NONE ? 1 : res + 3;
    return res;
}

/* Magnitudes in [lo, hi] (hi NULL: unbounded) with R fraction digits (Rfix < 0: up to 15 digits in all). */
static int32_t mag_range(nb *s, const dec *lo, int lo_excl, const dec *hi, int hi_excl, int Rfix) {
    int32_t alts[MAX_DIGITS + 1];
    int na = 0;
    for (int n = 1; n <= MAX_DIGITS && gb_ok(s->b); n++) {
        int R = Rfix >= 0 ? Rfix : MAX_DIGITS - n;
        if (n + R > MAX_DIGITS) break;
        long long A = lo_excl ? dec_scaled(lo, R, 0) + 1 : dec_scaled(lo, R, 1);
        long long B = !hi ? BIG : hi_excl ? dec_scaled(hi, R, 1) - 1 : dec_scaled(hi, R, 0);
        long long minN = n == 1 ? 0 : pow10ll(n - 1 + R), maxN = pow10ll(n + R) - 1;
        if (A < minN) A = minN;
        if (B > maxN) B = maxN;
        if (A > B) continue;
        s->n = n, s->R = R, s->L = n + R;
        snprintf(s->a, sizeof s->a, "%0*lld", s->L, A);
        snprintf(s->z, sizeof s->z, "%0*lld", s->L, B);
        int32_t r = dp(s, 0, 1, 1, 0);
        if (r != NONE) alts[na++] = r;
    }
    if (!na) return NONE;
    return na == 1 ? alts[0] : gb_alt(s->b, alts, na);
}

static int get_bound(gbuild *b, const cJSON *s, const char *incl, const char *excl, int lower, bound *out) {
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(s, incl), *x = cJSON_GetObjectItemCaseSensitive(s, excl);
    out->present = 0;
    if (i && !cJSON_IsNumber(i)) return gb_fail(b, "json schema: \"%s\" must be a number", incl);
    if (cJSON_IsBool(x)) return gb_fail(b, "json schema: boolean %s (draft 4) is not supported", excl);
    if (x && !cJSON_IsNumber(x)) return gb_fail(b, "json schema: \"%s\" must be a number", excl);
    if (i) out->present = 1, out->excl = 0, out->v = i->valuedouble;
    if (x && (!out->present || (lower ? x->valuedouble >= out->v : x->valuedouble <= out->v)))
        out->present = 1, out->excl = 1, out->v = x->valuedouble;
    return 0;
}

int32_t gram_json_number(gbuild *b, const cJSON *s, int integer) {
    bound lo, hi;
    if (get_bound(b, s, "minimum", "exclusiveMinimum", 1, &lo) || get_bound(b, s, "maximum", "exclusiveMaximum", 0, &hi))
        return -1;
    int k = 1, t = 0, Rfix = integer ? 0 : -1;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (mo) {
        double m = mo->valuedouble;
        if (!cJSON_IsNumber(mo) || !(m > 0)) return gb_fail(b, "json schema: \"multipleOf\" must be a number above 0");
        int p = 0;
        for (int q = 1; q <= MAX_DIGITS - 1 && !p; q++) /* 10^-q: at most q fraction digits */
            if (fabs(m * pow(10, q) - 1) < 1e-9) p = q;
        double inv = 1 / m;
        if (m == floor(m)) {
            long long km = m < 1e15 ? (long long)m : 0;
            while (km && km % 10 == 0) km /= 10, t++; /* trailing zeros need no remainder */
            if (!km || km > MAX_MOD)
                return gb_fail(b, "json schema: \"multipleOf\" %.0f is not supported (integers whose part without trailing "
                                  "zeros is at most %d are)", m, MAX_MOD);
            k = (int)km, Rfix = 0;
            double far = lo.present && hi.present ? fmax(fabs(lo.v), fabs(hi.v)) : 1e15;
            int digits = far < 1 ? 1 : (int)fmin(MAX_DIGITS, floor(log10(far)) + 1);
            if (k * digits > MAX_MOD_WORK)
                return gb_fail(b, "json schema: \"multipleOf\" %.0f over %d-digit numbers makes too large a grammar "
                                  "(narrow minimum / maximum)", m, digits);
        } else if (p) {
            if (!integer) Rfix = p; /* every integer is a multiple */
        } else if (!(integer && fabs(inv - floor(inv + 0.5)) < 1e-9)) {
            return gb_fail(b, "json schema: \"multipleOf\" %g is not supported for %s (integers up to %d and powers of ten "
                              "such as 0.01 are)", m, integer ? "integers" : "numbers", MAX_MOD);
        }
    }
    nb st = {0};
    st.b = b;
    st.k = k;
    st.t = t;
    st.memo = mem_calloc((size_t)(MAX_DIGITS + 1) * (MAX_DIGITS + 1) * 2 * (size_t)k, sizeof(int32_t));
    if (!st.memo) {
        b->oom = 1;
        return -1;
    }
    int32_t alts[2];
    int na = 0;
    dec dlo, dhi, zero = {0, 0};
    dec_of(lo.v, &dlo);
    dec_of(hi.v, &dhi);
    if (!hi.present || hi.v >= 0) { /* 0 and up */
        int from_lo = lo.present && lo.v >= 0;
        int32_t r = mag_range(&st, from_lo ? &dlo : &zero, from_lo ? lo.excl : 0, hi.present ? &dhi : NULL, hi.excl, Rfix);
        if (r != NONE) alts[na++] = r;
    }
    if (!lo.present || lo.v < 0) { /* below 0: '-' and the magnitude, above 0 */
        int to_hi = hi.present && hi.v < 0;
        int32_t r = mag_range(&st, to_hi ? &dhi : &zero, to_hi ? hi.excl : 1, lo.present ? &dlo : NULL, lo.excl, Rfix);
        if (r != NONE) alts[na++] = gb_seq2(b, lit1(b, '-'), r);
    }
    xllm_free(st.memo);
    if (!gb_ok(b)) return -1;
    if (!na)
        return gb_fail(b, "json schema: no %s lies between the bounds (numbers are written with at most %d significant digits)",
                       k > 1 ? "multiple of multipleOf" : integer ? "integer" : "number", MAX_DIGITS);
    return na == 1 ? alts[0] : gb_alt(b, alts, na);
}
