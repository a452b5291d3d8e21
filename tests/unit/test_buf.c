/* test_buf.c - the byte buffer and UTF-8 kit of src/base (buf.h, utf8.h):
 * growth, the bound, the sticky error, printf of any length, steal, and
 * UTF-8 decoding / validation / lossy decoding against hand-made cases. */
#include "test.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/utf8.h"

#include <stdint.h>
#include <string.h>

static void test_growth(void) {
    size_t before = xllm_allocated_bytes();
    buf_t b = BUF_INIT;
    for (int i = 0; i < 1000; i++) CHECK(buf_append(&b, "abc", 3) == 0);
    CHECK(b.len == 3000 && b.cap > 3000 && b.p[3000] == 0 && memcmp(b.p + 2997, "abc", 3) == 0);
    CHECK(buf_putc(&b, 'x') == 0 && buf_puts(&b, "yz") == 0 && strcmp(b.p + 3000, "xyz") == 0);
    CHECK(buf_fill(&b, '-', 5) == 0 && strcmp(b.p + 3003, "-----") == 0);
    CHECK(buf_append(&b, NULL, 0) == 0 && b.len == 3008);
    buf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    CHECK(xllm_allocated_bytes() == before);
}

static void test_printf(void) {
    buf_t b = BUF_INIT;
    CHECK(buf_printf(&b, "%d-%s", 42, "x") == 0 && strcmp(b.p, "42-x") == 0);
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(buf_printf(&b, "[%s]", big) == 0); /* longer than any first guess */
    CHECK(b.len == 4 + 5001 && b.p[4] == '[' && b.p[b.len - 1] == ']' && b.p[b.len] == 0);
    CHECK(buf_printf(&b, "%s", "") == 0 && b.len == 5005);
    size_t n = 0;
    char *s = buf_steal(&b, &n);
    CHECK(s && n == 5005 && strlen(s) == 5005 && b.p == NULL && b.len == 0);
    xllm_free(s);
    s = buf_steal(&b, &n); /* an empty buffer gives an empty string */
    CHECK(s && n == 0 && s[0] == 0);
    xllm_free(s);
}

static void test_bound_and_sticky(void) {
    buf_t b = BUF_INIT;
    b.max = 10;
    CHECK(buf_append(&b, "0123456789", 10) == 0);
    CHECK(buf_putc(&b, 'x') == -1 && b.err == XLLM_BUF_OVER && b.len == 10);
    CHECK(buf_append(&b, "", 0) == -1); /* sticky */
    CHECK(buf_steal(&b, NULL) == NULL && b.p == NULL && b.err == 0);
    b.max = 6;
    CHECK(buf_printf(&b, "%s", "abc") == 0);
    CHECK(buf_printf(&b, "%s", "defg") == -1 && b.err == XLLM_BUF_OVER && b.len == 3 && strcmp(b.p, "abc") == 0);
    CHECK(buf_putc(&b, 'x') == -1);
    buf_truncate(&b, 2); /* back to a mark, the error gone */
    CHECK(b.err == 0 && b.len == 2 && strcmp(b.p, "ab") == 0 && buf_putc(&b, 'z') == 0);
    buf_truncate(&b, 99);
    CHECK(b.len == 3 && strcmp(b.p, "abz") == 0);
    buf_clear(&b);
    CHECK(b.err == 0 && b.len == 0 && buf_puts(&b, "ok") == 0);
    buf_free(&b);

    buf_t h = BUF_INIT; /* overflow of len + extra is refused, not wrapped */
    CHECK(buf_append(&h, "a", 1) == 0);
    CHECK(buf_reserve(&h, SIZE_MAX) == -1 && h.err == XLLM_BUF_OVER);
    buf_free(&h);

    buf_t o = BUF_INIT; /* out of memory: sticky until cleared, nothing leaks */
    size_t before = xllm_allocated_bytes();
    mem_fail_at(1);
    CHECK(buf_puts(&o, "abc") == -1 && o.err == XLLM_BUF_OOM);
    mem_fail_at(0);
    CHECK(buf_puts(&o, "abc") == -1);
    buf_clear(&o);
    CHECK(buf_puts(&o, "abc") == 0 && strcmp(o.p, "abc") == 0);
    buf_free(&o);
    CHECK(xllm_allocated_bytes() == before);
}

static void test_utf8(void) {
    size_t l;
    CHECK(u8_decode((const unsigned char *)"A", 1, &l) == 'A' && l == 1);
    CHECK(u8_decode((const unsigned char *)"\xc3\xa9", 2, &l) == 0xe9 && l == 2);
    CHECK(u8_decode((const unsigned char *)"\xe2\x96\x81", 3, &l) == 0x2581 && l == 3);
    CHECK(u8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &l) == 0x1f600 && l == 4);
    CHECK(u8_decode((const unsigned char *)"\xc0\xaf", 2, &l) == -1 && l == 1);     /* overlong */
    CHECK(u8_decode((const unsigned char *)"\xed\xa0\x80", 3, &l) == -1);          /* surrogate */
    CHECK(u8_decode((const unsigned char *)"\xf4\x90\x80\x80", 4, &l) == -1);      /* > U+10FFFF */
    CHECK(u8_decode((const unsigned char *)"\xe2\x96", 2, &l) == -1 && l == 1);    /* cut */
    char o[4];
    uint32_t cps[] = {0, 0x7f, 0x80, 0x7ff, 0x800, 0xffff, 0x10000, 0x10ffff};
    for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
        size_t n = u8_encode(cps[i], o);
        CHECK(u8_decode((const unsigned char *)o, n, &l) == (int32_t)cps[i] && l == n);
    }
    CHECK(u8_valid("h\xc3\xa9llo", 6) && !u8_valid("h\xc3", 2) && !u8_valid("\xff", 1));
    CHECK(u8_complete_prefix("ab\xe2\x96", 4) == 2 && u8_complete_prefix("ab\xe2\x96\x81", 5) == 5);
    size_t st;
    CHECK(u8_before("a\xc3\xa9", 3, &st) == 0xe9 && st == 1);
    CHECK(u8_before("a\xa9", 2, &st) == -1 && st == 1);
    /* lossy: each maximal invalid subpart is one U+FFFD (Unicode's example) */
    buf_t b = BUF_INIT;
    CHECK(u8_lossy_append(&b, "a\xf1\x80\x80\xe1\x80\xc2z", 8) == 0);
    CHECK(b.len == 1 + 9 + 1 && memcmp(b.p, "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz", 11) == 0);
    buf_free(&b);
}

static void test_array(void) {
    size_t before = xllm_allocated_bytes();
    int *v = NULL;
    size_t cap = 0;
    CHECK(array_reserve(&v, &cap, 1, sizeof *v, 16) == 0 && cap == 16 && v);
    CHECK(array_reserve(&v, &cap, 16, sizeof *v, 16) == 0 && cap == 16); /* fits: no growth */
    for (int i = 0; i < 16; i++) v[i] = i;
    CHECK(array_reserve(&v, &cap, 17, sizeof *v, 16) == 0 && cap == 32 && v[15] == 15);
    CHECK(array_reserve(&v, &cap, 100, sizeof *v, 16) == 0 && cap == 128); /* doubles until it fits */
    int *keep = v;
    CHECK(array_reserve(&v, &cap, SIZE_MAX / 2, sizeof *v, 16) == -1 && v == keep && cap == 128); /* overflow */
    mem_fail_at(1);
    CHECK(array_reserve(&v, &cap, 129, sizeof *v, 16) == -1 && v == keep && cap == 128);
    mem_fail_at(0);
    xllm_free(v);
    CHECK(xllm_allocated_bytes() == before);
}

int main(void) {
    test_array();
    test_growth();
    test_printf();
    test_bound_and_sticky();
    test_utf8();
    return test_report("test_buf");
}
