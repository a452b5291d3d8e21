/*
 * byte_level.c - GPT-2's byte-level alphabet: every byte is shown as a
 * printable character (the printable Latin-1 bytes as themselves, the other
 * 68 as U+0100 onwards, so ' ' is 'Ġ' and '\n' is 'Ċ'). Byte-level BPE
 * vocabularies are written in these characters; the ByteLevel pre-tokenizer
 * maps text into them and the ByteLevel decoder maps them back.
 *
 * The table is a pure function of the byte, built once at first use.
 */
#include "tokenizer/tok_internal.h"

#include <pthread.h>

static char g_utf8[256][2];
static uint8_t g_len[256];
static int16_t g_byte_of[324]; /* code point (< 324) -> byte, -1 */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int printable(int b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

static void build(void) {
    int next = 256;
    for (int i = 0; i < 324; i++) g_byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        int cp = printable(b) ? b : next++;
        char tmp[4];
        g_len[b] = (uint8_t)u8_encode(cp, tmp);
        g_utf8[b][0] = tmp[0];
        g_utf8[b][1] = tmp[1];
        g_byte_of[cp] = (int16_t)b;
    }
}

const char *tok_bytelevel_char(unsigned char b, size_t *len) {
    pthread_once(&g_once, build);
    *len = g_len[b];
    return g_utf8[b];
}

int tok_bytelevel_byte(int32_t cp) {
    pthread_once(&g_once, build);
    return cp >= 0 && cp < 324 ? g_byte_of[cp] : -1;
}

int tok_bytelevel_encode(tok_list *l, const char *s, size_t n) {
    pthread_once(&g_once, build);
    if (buf_reserve(&l->text, 2 * n)) return TOK_ERR_OOM;
    char *o = l->text.p + l->text.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        *o++ = g_utf8[b][0];
        if (g_len[b] == 2) *o++ = g_utf8[b][1];
    }
    size_t added = (size_t)(o - (l->text.p + l->text.len));
    l->text.len += added;
    l->text.p[l->text.len] = 0;
    l->items[l->n - 1].len += added;
    return 0;
}
