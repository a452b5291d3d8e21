/*
 * test_pii.c - the server's PII masking (src/server/pii.c): each detector on
 * valid values and on look-alikes whose checksum fails (card: Luhn, IBAN:
 * mod 97, Chinese resident ID: MOD 11-2), custom regexes, placeholder
 * numbering and reuse, restoring placeholders in streamed output split at
 * every byte, and output masking that never lets part of a value out before
 * it is known not to match. The checksummed values are the standard test
 * numbers (Visa 4111..., the IBAN of ISO 13616's example, GB 11010519491231002X).
 */
#include "test.h"
#include "server/srv.h"

#include <stdlib.h>
#include <string.h>

static pii_policy *policy(const char *json) {
    cJSON *j = cJSON_Parse(json);
    char err[256];
    pii_policy *p = pii_policy_create(j, err, sizeof err);
    if (!p) fprintf(stderr, "policy: %s\n", err);
    cJSON_Delete(j);
    return p;
}

static char *mask(pii_policy *p, pii_map *m, const char *text, int *count) {
    sbuf out = {0};
    int n = pii_mask(p, m, text, strlen(text), &out);
    if (count) *count = n;
    return sb_take(&out);
}

static void expect_mask(pii_policy *p, const char *in, const char *want) {
    pii_map *m = pii_map_create();
    char *got = mask(p, m, in, NULL);
    CHECK_MSG(got && !strcmp(got, want), "mask(\"%s\") = \"%s\", want \"%s\"", in, got ? got : "(null)", want);
    free(got);
    pii_map_free(m);
}

/* Push text through a stream split into pieces of `step` bytes; returns
 * everything emitted, and checks nothing emitted before the end contains `secret`. */
static char *stream(pii_policy *p, pii_map *m, const char *text, size_t step, const char *secret) {
    pii_stream *s = pii_stream_create(p, m);
    sbuf all = {0};
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        size_t k = i + step < n ? step : n - i;
        sbuf out = {0};
        pii_stream_push(s, text + i, k, 0, &out);
        sb_put(&all, out.p, out.len);
        sb_free(&out);
        if (secret) {
            /* no proper prefix of the secret longer than 3 bytes at the end of what was emitted */
            size_t sl = strlen(secret);
            for (size_t q = 4; q < sl && q <= all.len; q++)
                CHECK_MSG(memcmp(all.p + all.len - q, secret, q) != 0, "step %zu: emitted a prefix of the value", step);
        }
    }
    sbuf out = {0};
    pii_stream_push(s, "", 0, 1, &out);
    sb_put(&all, out.p, out.len);
    sb_free(&out);
    pii_stream_free(s);
    return sb_take(&all);
}

int main(void) {
    pii_policy *p = policy("{\"custom\": [{\"name\": \"mrn\", \"pattern\": \"MRN-[0-9]{6}\"}], \"restore\": true}");
    CHECK(p != NULL);
    expect_mask(p, "mail bob.smith+x@mail.example.co.uk now", "mail [EMAIL_1] now");
    expect_mask(p, "call +1 415 555 2671 today", "call [PHONE_1] today");
    expect_mask(p, "call (415) 555-2671", "call [PHONE_1]");
    expect_mask(p, "card 4111 1111 1111 1111.", "card [CARD_1].");
    expect_mask(p, "card 4111-1111-1111-1111", "card [CARD_1]");
    expect_mask(p, "iban GB82 WEST 1234 5698 7654 32 ok", "iban [IBAN_1] ok");
    expect_mask(p, "iban DE89370400440532013000", "iban [IBAN_1]");
    expect_mask(p, "id 11010519491231002X", "id [CN_ID_1]");
    expect_mask(p, "record MRN-123456", "record [MRN_1]");
    expect_mask(p, "nothing here: 12 apples, version 1.2.3", "nothing here: 12 apples, version 1.2.3");
    /* checksums: look-alikes are not taken for what they are not */
    {
        pii_map *m = pii_map_create();
        char *a = mask(p, m, "4111 1111 1111 1112 and GB82 WEST 1234 5698 7654 33 and 110105194912310021", NULL);
        CHECK_MSG(a && !strstr(a, "[CARD_") && !strstr(a, "[IBAN_") && !strstr(a, "[CN_ID_"), "%s", a);
        free(a);
        pii_map_free(m);
    }
    /* numbering per type, the same value reuses its placeholder */
    {
        pii_map *m = pii_map_create();
        int n = 0;
        char *a = mask(p, m, "a@x.io b@x.io a@x.io 4111111111111111", &n);
        CHECK_MSG(a && !strcmp(a, "[EMAIL_1] [EMAIL_2] [EMAIL_1] [CARD_1]"), "%s", a);
        CHECK(n == 4);
        free(a);
        /* restored in output split at every byte; nothing half-restored */
        const char *out = "Dear [EMAIL_2], your card [CARD_1] and [EMAIL_1]; [NOT_1] [EMAIL";
        for (size_t step = 1; step <= 8; step++) {
            char *r = stream(p, m, out, step, NULL);
            CHECK_MSG(r && !strcmp(r, "Dear b@x.io, your card 4111111111111111 and a@x.io; [NOT_1] [EMAIL"),
                      "step %zu: %s", step, r);
            free(r);
        }
        pii_map_free(m);
    }
    pii_policy_free(p);
    /* output masking across chunks: a value the model writes never gets out, even in part */
    p = policy("{\"detectors\": [\"email\", \"card\"], \"mask_output\": true, \"restore\": true}");
    CHECK(p != NULL);
    {
        pii_map *m = pii_map_create();
        char *a = mask(p, m, "me@home.org", NULL);
        free(a);
        const char *gen = "Write to alice@example.org or pay 5555 5555 5555 4444 then tell [EMAIL_1].";
        for (size_t step = 1; step <= 7; step++) {
            char *r = stream(p, m, gen, step, "alice@example.org");
            CHECK_MSG(r && !strcmp(r, "Write to [EMAIL_1] or pay [CARD_1] then tell me@home.org."), "step %zu: %s", step, r);
            free(r);
            r = stream(p, m, gen, step, "5555 5555 5555 4444");
            free(r);
        }
        pii_map_free(m);
    }
    pii_policy_free(p);
    /* config errors */
    {
        const char *bad[] = {"{\"detectors\": [\"ssn\"]}", "{\"custom\": [{\"name\": \"x\", \"pattern\": \"(\"}]}",
                             "{\"restore\": 1}", "{\"mask\": true}"};
        for (int i = 0; i < 4; i++) {
            cJSON *j = cJSON_Parse(bad[i]);
            char err[256] = "";
            pii_policy *q = pii_policy_create(j, err, sizeof err);
            CHECK_MSG(q == NULL && err[0], "%s accepted", bad[i]);
            pii_policy_free(q);
            cJSON_Delete(j);
        }
    }
    return test_report("test_pii");
}
