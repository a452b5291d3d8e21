/* test_safetensors.c - safetensors reader: valid single files and sharded
 * indexes written on the fly, every malformed-input error path, and the real
 * tiny llama checkpoint when it is present. */
#include "test.h"
#include "base/alloc.h"
#include "format/safetensors.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

/* g_dir + "/" + rel, into a rotating set of buffers (a few live at once). */
static const char *P(const char *rel) {
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", g_dir, rel);
    return b;
}

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n && fwrite(buf, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

/* Header length hlen (as stored), header text, then data bytes. */
static void write_st_len(const char *path, uint64_t hlen, const char *hdr, const void *data, size_t n) {
    size_t hl = strlen(hdr);
    unsigned char *buf = malloc(8 + hl + n + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    write_raw(path, buf, 8 + hl + n);
    free(buf);
}

static void write_st(const char *path, const char *hdr, const void *data, size_t n) {
    write_st_len(path, strlen(hdr), hdr, data, n);
}

static void mkdir_p(const char *rel) { mkdir(P(rel), 0700); }

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

/* st_open(path) must fail with code, and the message must contain n1 and,
 * after it, n2 (so a keyword is not matched inside the file name). Returns 1
 * when it does. */
static int fails_with(const char *path, xllm_status code, const char *n1, const char *n2) {
    xllm_error e = {0};
    st_archive *a = st_open(path, &e);
    const char *at = strstr(e.message, n1);
    int ok = a == NULL && e.code == code && at && strstr(at + strlen(n1), n2);
    if (!ok)
        fprintf(stderr, "  open %s: got %s code %d message \"%s\" (want code %d, \"%s\" then \"%s\")\n", path,
                a ? "archive" : "NULL", (int)e.code, e.message, (int)code, n1, n2);
    st_close(a);
    return ok;
}
#define EXPECT_FAIL(path, code, n1, n2) CHECK_MSG(fails_with(path, code, n1, n2), "%s", path)

/* A one-tensor file named <name>.safetensors with header hdr and n data bytes;
 * it must fail with code and a message holding the file name and keyword. */
static void bad_file(const char *name, const char *hdr, size_t n, xllm_status code, const char *keyword) {
    char file[128];
    unsigned char data[64] = {0};
    snprintf(file, sizeof file, "%s.safetensors", name);
    write_st(P(file), hdr, data, n);
    EXPECT_FAIL(P(file), code, file, keyword);
}

static void test_single(void) {
    /* t_f32 [2,3] = 0..5 at 0; t_bf16 [2] = {1,-3} at 24; t_i64 [] = 42 at 28;
     * t_empty U8 [0] at 36; t_bool [3] at 36. Header padded to 8-byte alignment. */
    unsigned char data[39];
    float f[6] = {0, 1, 2, 3, 4, 5};
    uint16_t bf[2] = {0x3f80, 0xc040};
    int64_t i64 = 42;
    unsigned char b[3] = {1, 0, 1};
    memcpy(data, f, 24);
    memcpy(data + 24, bf, 4);
    memcpy(data + 28, &i64, 8);
    memcpy(data + 36, b, 3);
    char hdr[1024];
    int hl = snprintf(hdr, sizeof hdr,
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"t_f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"t_bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
        "\"t_i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[28,36]},"
        "\"t_empty\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[36,36]},"
        "\"t_bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[36,39]}}");
    while ((8 + hl) % 8) hdr[hl++] = ' ';
    hdr[hl] = 0;
    mkdir_p("single");
    write_st(P("single/model.safetensors"), hdr, data, sizeof data);

    const char *paths[2] = {P("single"), P("single/model.safetensors")};
    for (int k = 0; k < 2; k++) {
        xllm_error e = {0};
        st_archive *a = st_open(paths[k], &e);
        CHECK_MSG(a != NULL, "%s", e.message);
        if (!a) continue;
        CHECK(st_count(a) == 5);
        const st_tensor *t = st_find(a, "t_f32");
        CHECK(t && t->dtype == XLLM_DT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
        CHECK(t && t->nbytes == 24 && strstr(t->file, "single/model.safetensors"));
        if (t) {
            float v[6];
            memcpy(v, t->data, sizeof v);
            for (int i = 0; i < 6; i++) CHECK(v[i] == (float)i);
        }
        t = st_find(a, "t_bf16");
        CHECK(t && t->dtype == XLLM_DT_BF16 && t->ndim == 1 && t->shape[0] == 2 && t->nbytes == 4);
        if (t) {
            float v[2];
            dtype_to_f32(XLLM_DT_BF16, t->data, v, 2);
            CHECK(v[0] == 1.0f && v[1] == -3.0f);
        }
        t = st_find(a, "t_i64");
        CHECK(t && t->dtype == XLLM_DT_I64 && t->ndim == 0 && t->nbytes == 8);
        if (t) {
            int64_t v;
            memcpy(&v, t->data, 8);
            CHECK(v == 42);
        }
        t = st_find(a, "t_empty");
        CHECK(t && t->dtype == XLLM_DT_U8 && t->ndim == 1 && t->shape[0] == 0 && t->nbytes == 0);
        t = st_find(a, "t_bool");
        CHECK(t && t->dtype == XLLM_DT_BOOL && t->nbytes == 3 && memcmp(t->data, b, 3) == 0);
        CHECK(st_find(a, "__metadata__") == NULL);
        CHECK(st_find(a, "nope") == NULL);
        CHECK(st_find(a, "") == NULL);
        /* st_at walks every tensor once, each findable by its name */
        size_t seen = 0;
        for (size_t i = 0; i < st_count(a); i++) {
            const st_tensor *x = st_at(a, i);
            seen += x && st_find(a, x->name) == x;
        }
        CHECK(seen == 5);
        CHECK(st_at(a, 5) == NULL);
        st_close(a);
    }
}

static const char *k_index =
    "{\"metadata\":{\"total_size\":44},\"weight_map\":{"
    "\"a\":\"model-00001-of-00002.safetensors\","
    "\"b\":\"model-00001-of-00002.safetensors\","
    "\"c\":\"model-00002-of-00002.safetensors\"}}";

static void write_shards(const char *dir) {
    char rel[256];
    float a[4] = {1, 2, 3, 4}, c[3] = {7, 8, 9};
    int32_t bi[2] = {-5, 6};
    unsigned char d1[24];
    memcpy(d1, bi, 8); /* b first in the data region, a after it */
    memcpy(d1 + 8, a, 16);
    snprintf(rel, sizeof rel, "%s/model-00001-of-00002.safetensors", dir);
    write_st(P(rel),
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
             "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d1, sizeof d1);
    snprintf(rel, sizeof rel, "%s/model-00002-of-00002.safetensors", dir);
    write_st(P(rel), "{\"c\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", c, sizeof c);
}

static void test_sharded(void) {
    mkdir_p("sharded");
    write_shards("sharded");
    write_raw(P("sharded/model.safetensors.index.json"), k_index, strlen(k_index));
    const char *paths[2] = {P("sharded"), P("sharded/model.safetensors.index.json")};
    for (int k = 0; k < 2; k++) {
        xllm_error e = {0};
        st_archive *a = st_open(paths[k], &e);
        CHECK_MSG(a != NULL, "%s", e.message);
        if (!a) continue;
        CHECK(st_count(a) == 3);
        const st_tensor *t = st_find(a, "a");
        CHECK(t && t->dtype == XLLM_DT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 2);
        CHECK(t && strstr(t->file, "model-00001-of-00002.safetensors"));
        if (t) {
            float v[4];
            memcpy(v, t->data, 16);
            CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);
        }
        t = st_find(a, "b");
        CHECK(t && t->dtype == XLLM_DT_I32 && t->shape[0] == 2);
        if (t) {
            int32_t v[2];
            memcpy(v, t->data, 8);
            CHECK(v[0] == -5 && v[1] == 6);
        }
        t = st_find(a, "c");
        CHECK(t && t->dtype == XLLM_DT_F32 && t->shape[0] == 3 && strstr(t->file, "model-00002-of-00002"));
        if (t) {
            float v[3];
            memcpy(v, t->data, 12);
            CHECK(v[0] == 7 && v[1] == 8 && v[2] == 9);
        }
        CHECK(st_at(a, 0) && strcmp(st_at(a, 0)->name, "a") == 0);
        CHECK(st_at(a, 2) && strcmp(st_at(a, 2)->name, "c") == 0);
        st_close(a);
    }
}

#define T1(dtype, shape, offs) \
    "{\"t\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_bad_files(void) {
    const char z[8] = {0};
    write_raw(P("short.safetensors"), z, 5);
    EXPECT_FAIL(P("short.safetensors"), XLLM_ERR_FORMAT, "short.safetensors", "too short");
    write_raw(P("empty.safetensors"), z, 0);
    EXPECT_FAIL(P("empty.safetensors"), XLLM_ERR_FORMAT, "empty.safetensors", "too short");
    write_st_len(P("hdr_huge.safetensors"), (uint64_t)1 << 40, "{}", NULL, 0);
    EXPECT_FAIL(P("hdr_huge.safetensors"), XLLM_ERR_FORMAT, "hdr_huge.safetensors", "too large");
    write_st_len(P("hdr_huge2.safetensors"), UINT64_MAX, "{}", NULL, 0);
    EXPECT_FAIL(P("hdr_huge2.safetensors"), XLLM_ERR_FORMAT, "hdr_huge2.safetensors", "too large");
    write_st_len(P("hdr_past_eof.safetensors"), 1000, "{\"t\":{}}", z, 8);
    EXPECT_FAIL(P("hdr_past_eof.safetensors"), XLLM_ERR_FORMAT, "hdr_past_eof.safetensors", "beyond the end");
    write_st_len(P("hdr_zero.safetensors"), 0, "", z, 8);
    EXPECT_FAIL(P("hdr_zero.safetensors"), XLLM_ERR_FORMAT, "hdr_zero.safetensors", "JSON");

    bad_file("bad_json", "{\"t\": {\"dtype\": ", 0, XLLM_ERR_FORMAT, "not valid JSON");
    bad_file("trailing", "{}x", 0, XLLM_ERR_FORMAT, "not valid JSON");
    bad_file("not_object", "[1,2]", 0, XLLM_ERR_FORMAT, "not a JSON object");
    bad_file("entry_not_object", "{\"t\":5}", 0, XLLM_ERR_FORMAT, "not a JSON object");
    bad_file("bad_metadata", "{\"__metadata__\":{\"k\":1}}", 0, XLLM_ERR_FORMAT, "__metadata__");
    bad_file("bad_metadata2", "{\"__metadata__\":[]}", 0, XLLM_ERR_FORMAT, "__metadata__");
    bad_file("no_dtype", "{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, XLLM_ERR_FORMAT, "dtype");
    bad_file("no_shape", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, XLLM_ERR_FORMAT, "shape");
    bad_file("no_offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("dtype_number", T1("4", "[2]", "[0,8]"), 8, XLLM_ERR_FORMAT, "dtype");
    bad_file("dtype_unknown", T1("\"F8_E4M3\"", "[2]", "[0,2]"), 2, XLLM_ERR_UNSUPPORTED, "F8_E4M3");
    bad_file("dtype_lower", T1("\"f32\"", "[2]", "[0,8]"), 8, XLLM_ERR_UNSUPPORTED, "dtype");
    bad_file("shape_string", T1("\"F32\"", "\"2\"", "[0,8]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("shape_object", T1("\"F32\"", "{}", "[0,8]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("dim_negative", T1("\"F32\"", "[-2]", "[0,8]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("dim_fraction", T1("\"F32\"", "[1.5]", "[0,6]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("dim_string", T1("\"F32\"", "[\"2\"]", "[0,8]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("dim_huge", T1("\"F32\"", "[1e300]", "[0,8]"), 8, XLLM_ERR_FORMAT, "shape");
    bad_file("too_many_dims", T1("\"F32\"", "[1,1,1,1,1,1,1,1,2]", "[0,8]"), 8, XLLM_ERR_FORMAT, "too many dims");
    bad_file("offsets_short", T1("\"F32\"", "[2]", "[0]"), 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("offsets_three", T1("\"F32\"", "[2]", "[0,8,8]"), 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("offsets_strings", T1("\"F32\"", "[2]", "[\"0\",\"8\"]"), 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("offsets_negative", T1("\"F32\"", "[2]", "[-8,0]"), 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("offsets_object", T1("\"F32\"", "[2]", "{}"), 8, XLLM_ERR_FORMAT, "data_offsets");
    bad_file("begin_gt_end", T1("\"F32\"", "[2]", "[8,0]"), 8, XLLM_ERR_FORMAT, "begin");
    bad_file("end_past", T1("\"F32\"", "[4]", "[0,16]"), 8, XLLM_ERR_FORMAT, "beyond the data region");
    bad_file("end_way_past", T1("\"U8\"", "[1]", "[9007199254740991,9007199254740992]"), 8, XLLM_ERR_FORMAT,
             "beyond the data region");
    bad_file("size_mismatch", T1("\"F32\"", "[3]", "[0,8]"), 8, XLLM_ERR_FORMAT, "does not match");
    bad_file("size_mismatch_dtype", T1("\"F16\"", "[2]", "[0,8]"), 8, XLLM_ERR_FORMAT, "does not match");
    bad_file("ovf_nelem", T1("\"F32\"", "[4294967296,4294967296,4294967296]", "[0,8]"), 8,
             XLLM_ERR_FORMAT, "overflow");
    bad_file("ovf_bytes", T1("\"F64\"", "[9007199254740992,256]", "[0,8]"), 8, XLLM_ERR_FORMAT, "overflow");
    /* 2^32 * 2^32 * 0 == 0: the zero wins, so this is a plain (valid) empty tensor... */
    bad_file("zero_after_big", T1("\"F32\"", "[4294967296,4294967296,0]", "[0,8]"), 8, XLLM_ERR_FORMAT,
             "does not match");
    bad_file("overlap",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, XLLM_ERR_FORMAT, "overlap");
    bad_file("overlap_inside",
             "{\"x\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
             "\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
             "\"z\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[16,18]}}", 18, XLLM_ERR_FORMAT, "overlap");
    bad_file("overlap_same",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"y\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, XLLM_ERR_FORMAT, "overlap");
    bad_file("dup_name",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, XLLM_ERR_FORMAT, "duplicate");

    /* ...and the same shape is accepted when its offsets agree */
    {
        xllm_error e = {0};
        write_st(P("zero_ok.safetensors"), T1("\"F32\"", "[4294967296,4294967296,0]", "[0,0]"), NULL, 0);
        st_archive *a = st_open(P("zero_ok.safetensors"), &e);
        CHECK_MSG(a && st_count(a) == 1 && st_find(a, "t")->nbytes == 0, "%s", e.message);
        st_close(a);
    }
    /* a file with no tensors at all is valid */
    {
        xllm_error e = {0};
        write_st(P("no_tensors.safetensors"), "{\"__metadata__\":{}}", NULL, 0);
        st_archive *a = st_open(P("no_tensors.safetensors"), &e);
        CHECK_MSG(a && st_count(a) == 0 && st_at(a, 0) == NULL, "%s", e.message);
        st_close(a);
    }

    EXPECT_FAIL(P("does_not_exist.safetensors"), XLLM_ERR_IO, "does_not_exist.safetensors", "cannot open");
    mkdir_p("empty_dir");
    EXPECT_FAIL(P("empty_dir"), XLLM_ERR_IO, "empty_dir", "model.safetensors");
    CHECK(st_open(NULL, NULL) == NULL);
    write_raw(P("short2.safetensors"), z, 3);
    CHECK(st_open(P("short2.safetensors"), NULL) == NULL); /* NULL err is allowed */
}

/* Sharded checkpoint in dir <name> with the given index text. */
static void index_case(const char *name, const char *index) {
    char rel[256];
    mkdir_p(name);
    write_shards(name);
    snprintf(rel, sizeof rel, "%s/model.safetensors.index.json", name);
    write_raw(P(rel), index, strlen(index));
}

static void test_bad_index(void) {
    index_case("idx_badjson", "{\"weight_map\": {");
    EXPECT_FAIL(P("idx_badjson"), XLLM_ERR_FORMAT, "idx_badjson/model.safetensors.index.json", "JSON");
    index_case("idx_array", "[]");
    EXPECT_FAIL(P("idx_array"), XLLM_ERR_FORMAT, "idx_array/model.safetensors.index.json", "not a JSON object");
    index_case("idx_no_wm", "{\"metadata\":{}}");
    EXPECT_FAIL(P("idx_no_wm"), XLLM_ERR_FORMAT, "idx_no_wm/model.safetensors.index.json", "weight_map");
    index_case("idx_wm_array", "{\"weight_map\":[]}");
    EXPECT_FAIL(P("idx_wm_array"), XLLM_ERR_FORMAT, "idx_wm_array/model.safetensors.index.json", "weight_map");
    index_case("idx_wm_value", "{\"weight_map\":{\"a\":1}}");
    EXPECT_FAIL(P("idx_wm_value"), XLLM_ERR_FORMAT, "idx_wm_value/model.safetensors.index.json", "weight_map");

    index_case("idx_missing_shard",
               "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"z\":\"gone-shard.safetensors\"}}");
    EXPECT_FAIL(P("idx_missing_shard"), XLLM_ERR_IO, "idx_missing_shard/model.safetensors.index.json",
                "gone-shard.safetensors");

    index_case("idx_absent",
               "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
               "\"zz_not_there\":\"model-00002-of-00002.safetensors\"}}");
    EXPECT_FAIL(P("idx_absent"), XLLM_ERR_FORMAT, "zz_not_there", "model-00002-of-00002.safetensors");

    index_case("idx_wrong_shard", "{\"weight_map\":{\"c\":\"model-00001-of-00002.safetensors\","
                                  "\"a\":\"model-00002-of-00002.safetensors\"}}");
    EXPECT_FAIL(P("idx_wrong_shard"), XLLM_ERR_FORMAT, "idx_wrong_shard/model.safetensors.index.json", "missing");

    /* "a" in both shards */
    index_case("idx_dup", k_index);
    {
        float v[2] = {0, 0};
        write_st(P("idx_dup/model-00002-of-00002.safetensors"),
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", v, 8);
    }
    EXPECT_FAIL(P("idx_dup"), XLLM_ERR_FORMAT, "duplicate", "'a'");

    /* a broken shard: the error names that shard */
    index_case("idx_bad_shard", k_index);
    write_st(P("idx_bad_shard/model-00002-of-00002.safetensors"), "{\"c\":", NULL, 0);
    EXPECT_FAIL(P("idx_bad_shard"), XLLM_ERR_FORMAT, "idx_bad_shard/model-00002-of-00002.safetensors", "JSON");
    index_case("idx_bad_shard2", k_index);
    {
        const char four[4] = {0};
        write_st(P("idx_bad_shard2/model-00002-of-00002.safetensors"), T1("\"F32\"", "[2]", "[0,8]"), four, 4);
    }
    EXPECT_FAIL(P("idx_bad_shard2"), XLLM_ERR_FORMAT, "idx_bad_shard2/model-00002-of-00002.safetensors",
                "beyond the data region");
}

static void test_real_model(void) {
    const char *path = "/work/shared/data/tiny/llama/model.safetensors";
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "test_safetensors: %s not present, skipping\n", path);
        return;
    }
    xllm_error e = {0};
    st_archive *a = st_open(path, &e);
    CHECK_MSG(a != NULL, "%s", e.message);
    if (!a) return;
    CHECK(st_count(a) == 21);
    const st_tensor *t = st_find(a, "model.embed_tokens.weight");
    CHECK(t && t->dtype == XLLM_DT_F32 && t->ndim == 2 && t->shape[0] == 512 && t->shape[1] == 64);
    CHECK(t && t->nbytes == 512 * 64 * 4);
    t = st_find(a, "model.layers.1.self_attn.k_proj.weight");
    CHECK(t && t->shape[0] == 32 && t->shape[1] == 64);
    t = st_find(a, "model.norm.weight");
    CHECK(t && t->ndim == 1 && t->shape[0] == 64);
    CHECK(st_find(a, "model.layers.2.mlp.up_proj.weight") == NULL);
    for (size_t i = 1; i < st_count(a); i++) CHECK(strcmp(st_at(a, i - 1)->name, st_at(a, i)->name) < 0);
    st_close(a);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/xllm_st_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 2; }
    size_t before = xllm_allocated_bytes();
    test_single();
    test_sharded();
    test_bad_files();
    test_bad_index();
    test_real_model();
    CHECK_MSG(xllm_allocated_bytes() == before, "%zu bytes still allocated", xllm_allocated_bytes() - before);
    nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return test_report("test_safetensors");
}
