/*
 * test_config.c - xllm_config_load (docs/CONFIG.md): a full file with every
 * key checked, sizes in every unit, path resolution, and each class of error
 * with its exact message (file, line, key path). The files are written into a
 * fresh temporary directory that the test changes into, so messages start
 * with the plain name "engine.yaml".
 */
#include "test.h"
#include "xllm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

/* Options as a caller's defaults might be: recognisable values, so that a
 * key that is not in the file is seen to stay untouched. */
static void init_opts(xllm_engine_options *e, xllm_model_options *m) {
    memset(e, 0, sizeof *e);
    memset(m, 0, sizeof *m);
    e->max_batch_size = 7;
    e->timeout_ms = 3;
    e->preempt_mode = XLLM_PREEMPT_ELASTIC;
    e->swap_size = 11;
    e->verbose = 0;
    m->n_threads = 5;
    m->max_batch_seqs = 9;
    m->kv_tokens = 12345;
}

typedef struct loaded {
    xllm_engine_options e;
    xllm_model_options m;
    const char *model;
    void *storage;
    xllm_error err;
    xllm_status st;
} loaded;

static loaded load_text(const char *path, const char *text) {
    loaded l;
    init_opts(&l.e, &l.m);
    l.model = "untouched";
    l.storage = (void *)&l; /* must be reset */
    write_file(path, text);
    l.st = xllm_config_load(path, &l.e, &l.m, &l.model, &l.storage, &l.err);
    return l;
}

/* The file must fail with this code and exactly this message. */
static void expect_error(const char *text, xllm_status code, const char *message) {
    size_t before = xllm_allocated_bytes();
    loaded l = load_text("engine.yaml", text);
    CHECK_MSG(l.st == code, "status %d, expected %d, for:\n%.300s", l.st, code, text);
    CHECK_MSG(l.err.code == code, "err.code %d", l.err.code);
    CHECK_MSG(strcmp(l.err.message, message) == 0, "message\n  '%s'\nexpected\n  '%s'", l.err.message, message);
    CHECK(l.storage == NULL);
    /* the caller's structs are left as they were */
    xllm_engine_options e;
    xllm_model_options m;
    init_opts(&e, &m);
    CHECK(memcmp(&e, &l.e, sizeof e) == 0);
    CHECK(memcmp(&m, &l.m, sizeof m) == 0);
    CHECK(xllm_allocated_bytes() == before);
}

/* The file must fail with this code and a message starting with prefix. */
static void expect_error_prefix(const char *text, xllm_status code, const char *prefix) {
    size_t before = xllm_allocated_bytes();
    loaded l = load_text("engine.yaml", text);
    CHECK_MSG(l.st == code, "status %d, expected %d, for:\n%.300s", l.st, code, text);
    CHECK_MSG(strncmp(l.err.message, prefix, strlen(prefix)) == 0, "message\n  '%s'\nexpected a start\n  '%s'",
              l.err.message, prefix);
    CHECK(l.storage == NULL);
    CHECK(xllm_allocated_bytes() == before);
}

static int64_t size_of(const char *value) {
    char text[128];
    snprintf(text, sizeof text, "memory:\n  workspace_size: %s\n", value);
    loaded l = load_text("engine.yaml", text);
    CHECK_MSG(l.st == XLLM_OK, "%s: %s", value, l.err.message);
    xllm_free(l.storage);
    return l.st == XLLM_OK ? l.e.workspace_size : -999;
}

static const char FULL[] =
    "# a full config\n"
    "model: models/stories260k\n"
    "threads: 2\n"
    "context: 512\n"
    "execution:\n"
    "  max_batch_size: 32\n"
    "  timeout_ms: 50\n"
    "  preempt_mode: swap\n"
    "  max_step_tokens: 256\n"
    "memory:\n"
    "  workspace_size: 2GiB\n"
    "  swap_size: 256MiB\n"
    "  cache_policy: none\n"
    "  kv_block_size: 32\n"
    "  kv_dtype: q8\n"
    "knowledge:\n"
    "  handbook: docs/handbook.txt\n"
    "  faq: {text: faq.txt, kv: /var/cache/faq.kv}\n"
    "  legal:\n"
    "    kv: legal.kv\n"
    "    text: \"legal text.txt\"\n"
    "response_cache:\n"
    "  enabled: true\n"
    "  max_bytes: 64MiB\n"
    "  max_entries: 4096\n"
    "verbose: yes\n";

static void test_full(void) {
    size_t before = xllm_allocated_bytes();
    loaded l = load_text("engine.yaml", FULL);
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.err.code == XLLM_OK);
    CHECK(l.model && strcmp(l.model, "models/stories260k") == 0);
    CHECK(l.m.n_threads == 2);
    CHECK(l.m.max_context == 512);
    CHECK(l.e.max_batch_size == 32);
    CHECK(l.e.timeout_ms == 50);
    CHECK(l.e.preempt_mode == XLLM_PREEMPT_SWAP);
    CHECK(l.m.max_step_tokens == 256);
    CHECK(l.e.workspace_size == (int64_t)2 << 30);
    CHECK(l.e.swap_size == (int64_t)256 << 20);
    CHECK(l.e.cache_policy == XLLM_CACHE_NONE);
    CHECK(l.m.kv_block_size == 32);
    CHECK(l.m.kv_dtype && strcmp(l.m.kv_dtype, "q8") == 0);
    CHECK(l.e.n_knowledge == 3);
    CHECK(l.e.knowledge_name[0] && strcmp(l.e.knowledge_name[0], "handbook") == 0);
    CHECK(l.e.knowledge_path[0] && strcmp(l.e.knowledge_path[0], "docs/handbook.txt") == 0);
    CHECK(l.e.knowledge_kv_path[0] == NULL);
    CHECK(l.e.knowledge_name[1] && strcmp(l.e.knowledge_name[1], "faq") == 0);
    CHECK(l.e.knowledge_path[1] && strcmp(l.e.knowledge_path[1], "faq.txt") == 0);
    CHECK(l.e.knowledge_kv_path[1] && strcmp(l.e.knowledge_kv_path[1], "/var/cache/faq.kv") == 0);
    CHECK(l.e.knowledge_name[2] && strcmp(l.e.knowledge_name[2], "legal") == 0);
    CHECK(l.e.knowledge_path[2] && strcmp(l.e.knowledge_path[2], "legal text.txt") == 0);
    CHECK(l.e.knowledge_kv_path[2] && strcmp(l.e.knowledge_kv_path[2], "legal.kv") == 0);
    for (int i = 3; i < XLLM_MAX_KNOWLEDGE; i++)
        CHECK(!l.e.knowledge_name[i] && !l.e.knowledge_path[i] && !l.e.knowledge_kv_path[i]);
    CHECK(l.e.response_cache == 1);
    CHECK(l.e.response_cache_max_bytes == (int64_t)64 << 20);
    CHECK(l.e.response_cache_max_entries == 4096);
    CHECK(l.e.verbose == 1);
    /* not in the file: untouched */
    CHECK(l.m.max_batch_seqs == 9 && l.m.kv_tokens == 12345);
    /* every string lives in the one block */
    char *s = l.storage;
    CHECK(s != NULL);
    CHECK(xllm_allocated_bytes() > before);
    xllm_free(l.storage);
    CHECK(xllm_allocated_bytes() == before);

    /* the other enum values, booleans and the swap_size forms */
    l = load_text("engine.yaml", "execution: {preempt_mode: recompute}\nmemory: {swap_size: none, cache_policy: lru}\n"
                                 "response_cache: {enabled: false}\nverbose: False\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.e.preempt_mode == XLLM_PREEMPT_RECOMPUTE);
    CHECK(l.e.swap_size == -1);
    CHECK(l.m.kv_tokens == 12345); /* not in this file either */
    loaded l2 = load_text("engine.yaml", "memory: {kv_tokens: 2048}\n");
    CHECK_MSG(l2.st == XLLM_OK, "%s", l2.err.message);
    CHECK(l2.m.kv_tokens == 2048);
    xllm_free(l2.storage);
    CHECK(l.e.cache_policy == XLLM_CACHE_LRU);
    CHECK(l.e.response_cache == 0 && l.e.verbose == 0);
    CHECK(l.model == NULL); /* no model key */
    CHECK(l.storage == NULL); /* no strings */
    CHECK(l.m.n_threads == 5 && l.e.max_batch_size == 7 && l.e.timeout_ms == 3);
    l = load_text("engine.yaml", "execution:\n  preempt_mode: elastic\nmemory:\n  swap_size: 0\nknowledge: {}\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.e.preempt_mode == XLLM_PREEMPT_ELASTIC && l.e.swap_size == 0 && l.e.n_knowledge == 0);
    xllm_free(l.storage);

    /* range ends */
    l = load_text("engine.yaml", "threads: 0\ncontext: 0\nexecution: {max_batch_size: 4096, timeout_ms: 60000}\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.m.n_threads == 0 && l.m.max_context == 0 && l.e.max_batch_size == 4096 && l.e.timeout_ms == 60000);
    l = load_text("engine.yaml", "execution: {max_batch_size: 1, timeout_ms: +0}\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.e.max_batch_size == 1 && l.e.timeout_ms == 0);

    /* a knowledge key replaces the caller's list */
    xllm_engine_options e;
    xllm_model_options m;
    init_opts(&e, &m);
    e.n_knowledge = 1;
    e.knowledge_name[0] = "old";
    e.knowledge_path[0] = "old.txt";
    const char *model = NULL;
    void *storage = NULL;
    xllm_error err;
    write_file("engine.yaml", "knowledge:\n  new: new.txt\n");
    CHECK(xllm_config_load("engine.yaml", &e, &m, &model, &storage, &err) == XLLM_OK);
    CHECK(e.n_knowledge == 1 && strcmp(e.knowledge_name[0], "new") == 0 && strcmp(e.knowledge_path[0], "new.txt") == 0);
    xllm_free(storage);
    /* ...and stays when there is no knowledge key */
    init_opts(&e, &m);
    e.n_knowledge = 1;
    e.knowledge_name[0] = "old";
    e.knowledge_path[0] = "old.txt";
    write_file("engine.yaml", "threads: 1\n");
    CHECK(xllm_config_load("engine.yaml", &e, &m, &model, &storage, &err) == XLLM_OK);
    CHECK(e.n_knowledge == 1 && strcmp(e.knowledge_name[0], "old") == 0);
    xllm_free(storage);

    /* XLLM_MAX_KNOWLEDGE entries are fine */
    char text[4096] = "knowledge:\n";
    for (int i = 0; i < XLLM_MAX_KNOWLEDGE; i++) {
        char line[64];
        snprintf(line, sizeof line, "  k%d: f%d.txt\n", i, i);
        strcat(text, line);
    }
    l = load_text("engine.yaml", text);
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.e.n_knowledge == XLLM_MAX_KNOWLEDGE);
    CHECK(strcmp(l.e.knowledge_name[XLLM_MAX_KNOWLEDGE - 1], "k15") == 0 || XLLM_MAX_KNOWLEDGE != 16);
    xllm_free(l.storage);
    CHECK(xllm_allocated_bytes() == before);
}

static void test_sizes(void) {
    CHECK(size_of("0") == 0);
    CHECK(size_of("12345") == 12345);
    CHECK(size_of("100B") == 100);
    CHECK(size_of("3KB") == 3000);
    CHECK(size_of("3MB") == 3000000);
    CHECK(size_of("3GB") == 3000000000LL);
    CHECK(size_of("3TB") == 3000000000000LL);
    CHECK(size_of("3KiB") == 3 * 1024);
    CHECK(size_of("3MiB") == 3 * 1048576LL);
    CHECK(size_of("3GiB") == 3 * 1073741824LL);
    CHECK(size_of("3TiB") == 3 * 1099511627776LL);
    CHECK(size_of("3K") == 3 * 1024);
    CHECK(size_of("3M") == 3 * 1048576LL);
    CHECK(size_of("3G") == 3 * 1073741824LL);
    CHECK(size_of("3T") == 3 * 1099511627776LL);
    CHECK(size_of("2 GiB") == 2 * 1073741824LL);
    CHECK(size_of("1.5GiB") == 1610612736LL);
    CHECK(size_of("0.5KB") == 500);
    CHECK(size_of("1.0000000001KiB") == 1024); /* digits past the 9th are ignored */
    CHECK(size_of("\"64MiB\"") == 64 * 1048576LL);
    CHECK(size_of("1024TiB") == (int64_t)1 << 50); /* the limit itself */

    expect_error("memory:\n  workspace_size: 2PiB\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.workspace_size: must be a size (bytes, or a number with a unit such as 256MiB); "
                 "units: B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB or K, M, G, T (powers of 1024) "
                 "(got '2PiB')");
    expect_error("memory:\n  workspace_size: 1025TiB\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.workspace_size: too large (got 1025TiB; the limit is 1 PiB)");
    expect_error("memory:\n  workspace_size: 99999999999999999999999\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.workspace_size: too large (got 99999999999999999999999; the limit is 1 PiB)");
    expect_error("memory:\n  workspace_size: -1GiB\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.workspace_size: must not be negative (got -1GiB)");
    expect_error_prefix("memory:\n  workspace_size: 1.5\n", XLLM_ERR_INVALID_ARGUMENT,
                        "engine.yaml:2: memory.workspace_size: must be a size");
    expect_error_prefix("memory:\n  workspace_size: 1e9\n", XLLM_ERR_INVALID_ARGUMENT,
                        "engine.yaml:2: memory.workspace_size: must be a size");
    expect_error_prefix("memory:\n  workspace_size: GiB\n", XLLM_ERR_INVALID_ARGUMENT,
                        "engine.yaml:2: memory.workspace_size: must be a size");
    expect_error_prefix("memory:\n  workspace_size: 2gib\n", XLLM_ERR_INVALID_ARGUMENT,
                        "engine.yaml:2: memory.workspace_size: must be a size");
    expect_error_prefix("memory:\n  workspace_size: none\n", XLLM_ERR_INVALID_ARGUMENT,
                        "engine.yaml:2: memory.workspace_size: must be a size");
    expect_error("response_cache:\n  max_bytes: 0\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: response_cache.max_bytes: must be at least 1 bytes (got 0)");
}

static void test_paths(void) {
    size_t before = xllm_allocated_bytes();
    mkdir("conf", 0755);
    loaded l = load_text("conf/engine.yaml", "model: ../models/m\nknowledge:\n  a: {text: a.txt, kv: /abs/a.kv}\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.model && strcmp(l.model, "conf/../models/m") == 0);
    CHECK(strcmp(l.e.knowledge_path[0], "conf/a.txt") == 0);
    CHECK(strcmp(l.e.knowledge_kv_path[0], "/abs/a.kv") == 0);
    xllm_free(l.storage);

    char cwd[2048], abs[2100];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(abs, sizeof abs, "%s/conf/engine.yaml", cwd);
    l = load_text(abs, "model: /models/m\nknowledge: {b: sub/b.txt}\n");
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    CHECK(l.model && strcmp(l.model, "/models/m") == 0);
    char want[2200];
    snprintf(want, sizeof want, "%s/conf/sub/b.txt", cwd);
    CHECK_MSG(strcmp(l.e.knowledge_path[0], want) == 0, "%s", l.e.knowledge_path[0]);
    xllm_free(l.storage);

    /* a path too long */
    char text[6000] = "model: ";
    size_t n = strlen(text);
    memset(text + n, 'a', 5000);
    strcpy(text + n + 5000, "\n");
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: model: path too long (5000 bytes; at most 4095)");
    expect_error("model:\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: model: must be a file path (got an empty value)");
    expect_error("model: ~\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: model: must be a file path (got an empty value)");
    expect_error("model: |\n  models/m\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: model: must be a file path (got a string with a control character: a line break or tab?)");
    expect_error("model: \"a\\0b\"\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: model: must be a file path (got a string holding a NUL byte)");
    CHECK(xllm_allocated_bytes() == before);
}

static void test_errors(void) {
    /* the three of the issue */
    expect_error("model: m\nexecuton:\n  timeout_ms: 5\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: unknown key 'executon' (expected one of: model, threads, context, execution, memory, "
                 "knowledge, response_cache, verbose)");
    expect_error("execution:\n  max_batch_size: 32\n\n  timeout_ms: -5\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:4: execution.timeout_ms: must be a non-negative integer (got -5)");
    expect_error("# c\nexecution:\n  max_batch_size: 32\n  timeout_ms: 50\n  preempt_mode: fast\n",
                 XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:5: execution.preempt_mode: 'fast' is not one of recompute, swap, elastic");

    /* unknown keys in sections */
    expect_error("memory:\n  workspace_size: 1G\n  cache: lru\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:3: unknown key 'cache' in memory (expected one of: workspace_size, swap_size, cache_policy, "
                 "kv_block_size, kv_dtype, kv_tokens)");
    expect_error("memory:\n  kv_dtype: int4\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.kv_dtype: 'int4' is not one of f32, f16, q8, auto");
    expect_error("response_cache:\n  on: true\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: unknown key 'on' in response_cache (expected one of: enabled, max_bytes, max_entries)");
    expect_error("knowledge:\n  a: {text: a.txt, kvv: a.kv}\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: unknown key 'kvv' in knowledge.a (expected one of: text, kv)");

    /* wrong types */
    expect_error("threads: [1, 2]\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got a list)");
    expect_error("context: {a: 1}\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: context: must be an integer (got a mapping)");
    expect_error("threads: abc\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got 'abc')");
    expect_error("threads: \"4\"\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got '4')");
    expect_error("threads: 2.0\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got '2.0')");
    expect_error("threads: 0x10\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got '0x10')");
    expect_error("context: 1e20\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: context: must be an integer (got '1e20')");
    expect_error("context: 100000000000000000000\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: context: must be an integer from 0 to 1048576 (got 100000000000000000000)");
    expect_error("context: 9223372036854775808\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: context: must be an integer from 0 to 1048576 (got 9223372036854775808)");
    expect_error("context: 4294967297\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: context: must be an integer from 0 to 1048576 (got 4294967297)");
    expect_error("execution:\n  max_batch_size: 0\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: execution.max_batch_size: must be an integer from 1 to 4096 (got 0)");
    expect_error("execution:\n  max_batch_size: 4097\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: execution.max_batch_size: must be an integer from 1 to 4096 (got 4097)");
    expect_error("execution:\n  timeout_ms: 60001\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: execution.timeout_ms: must be an integer from 0 to 60000 (got 60001)");
    expect_error("execution:\n  max_step_tokens: 0\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: execution.max_step_tokens: must be an integer from 1 to 65536 (got 0)");
    expect_error("memory:\n  kv_tokens: 0\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.kv_tokens: must be an integer from 1 to 1073741824 (got 0)");
    expect_error("memory:\n  kv_block_size: 2000\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.kv_block_size: must be an integer from 1 to 1024 (got 2000)");
    expect_error("response_cache:\n  max_entries: -1\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: response_cache.max_entries: must be an integer from 1 to 16777216 (got -1)");
    expect_error("verbose: 1\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: verbose: must be true or false (got '1')");
    expect_error("verbose: [true]\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: verbose: must be true or false (got a list)");
    expect_error("response_cache:\n  enabled: \"true\"\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: response_cache.enabled: must be true or false (got 'true')");
    expect_error("execution: fast\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: execution: must be a mapping of keys (got 'fast')");
    expect_error("memory: [1]\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: memory: must be a mapping of keys (got a list)");
    expect_error("execution:\n  preempt_mode: [swap]\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: execution.preempt_mode: must be one of recompute, swap, elastic (got a list)");
    expect_error("memory:\n  cache_policy: LRU\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.cache_policy: 'LRU' is not one of lru, none");
    expect_error("memory:\n  swap_size: [1]\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: memory.swap_size: must be a size (bytes, or a number with a unit such as 256MiB) or none "
                 "(got a list)");
    expect_error("model: [a, b]\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: model: must be a file path (got a list)");
    expect_error("- a\n- b\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: the top level must be a mapping of keys (got a list)");
    expect_error("hello\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: the top level must be a mapping of keys (got 'hello')");
    expect_error("? [a]\n: 1\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: keys must be names (got a list)");
    expect_error("\n\nthreads: 1\n\n  \n...\n---\nthreads: 2\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:7: more than one YAML document (a config file holds one)");

    /* duplicates */
    expect_error("threads: 1\ncontext: 5\nthreads: 2\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:3: duplicate key 'threads' (first on line 1)");
    expect_error("execution:\n  timeout_ms: 1\n  timeout_ms: 2\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:3: duplicate key 'execution.timeout_ms' (first on line 2)");
    expect_error("memory: {}\nmemory: {}\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:2: duplicate key 'memory' (first on line 1)");
    expect_error("knowledge:\n  a: a.txt\n  b: b.txt\n  a: c.txt\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:4: duplicate key 'knowledge.a'");
    expect_error("knowledge:\n  a: {text: a.txt, text: b.txt}\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: duplicate key 'knowledge.a.text' (first on line 2)");

    /* anchors, aliases, tags */
    expect_error("threads: &x 4\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: anchors (&x) are not allowed in a config file");
    expect_error("threads: *x\n", XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: aliases (*x) are not allowed in a config file");
    expect_error("knowledge: &a [1]\nmodel: [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: anchors (&a) are not allowed in a config file");
    expect_error("threads: !!int 4\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: tags (tag:yaml.org,2002:int) are not allowed in a config file");

    /* knowledge */
    expect_error("knowledge: handbook.txt\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:1: knowledge: must be a mapping of names to text files (got 'handbook.txt')");
    expect_error("knowledge:\n  a: {kv: a.kv}\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: knowledge.a: missing key 'text' (the text file)");
    expect_error("knowledge:\n  a: [a.txt]\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: knowledge.a: must be a file path (got a list)");
    expect_error("knowledge:\n  \"a b\": a.txt\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: knowledge: name 'a b' may only hold letters, digits, '_', '-' and '.'");
    expect_error("knowledge:\n  \"\": a.txt\n", XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: knowledge: name '' must be 1 to 64 characters long");
    expect_error("knowledge:\n  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: a.txt\n",
                 XLLM_ERR_INVALID_ARGUMENT,
                 "engine.yaml:2: knowledge: name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' must be 1 to 64 "
                 "characters long");
    char text[4096] = "threads: 1\nknowledge:\n";
    for (int i = 0; i <= XLLM_MAX_KNOWLEDGE; i++) {
        char line[64];
        snprintf(line, sizeof line, "  k%d: f%d.txt\n", i, i);
        strcat(text, line);
    }
    char msg[128];
    snprintf(msg, sizeof msg, "engine.yaml:%d: knowledge: more than %d entries", XLLM_MAX_KNOWLEDGE + 3, XLLM_MAX_KNOWLEDGE);
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, msg);

    /* YAML syntax errors: XLLM_ERR_FORMAT with the line */
    expect_error_prefix("threads: 1\nexecution:\n  timeout_ms: [1, 2\n", XLLM_ERR_FORMAT, "engine.yaml:4: YAML syntax error: ");
    expect_error_prefix("threads: 1\ncontext: 2\n\tverbose: true\n", XLLM_ERR_FORMAT, "engine.yaml:3: YAML syntax error: ");
    expect_error_prefix("a: b: c\n", XLLM_ERR_FORMAT, "engine.yaml:1: YAML syntax error: ");
    expect_error_prefix("threads: 1\nmodel: \"abc\n", XLLM_ERR_FORMAT, "engine.yaml:");
    expect_error_prefix("threads: \xff\xfe\n", XLLM_ERR_FORMAT, "engine.yaml:");
    /* a syntax error after the last key is still found */
    expect_error_prefix("threads: 1\n]\n", XLLM_ERR_FORMAT, "engine.yaml:2: YAML syntax error: ");
}

static void test_files(void) {
    size_t before = xllm_allocated_bytes();
    /* missing */
    loaded l;
    init_opts(&l.e, &l.m);
    l.storage = NULL;
    CHECK(xllm_config_load("no-such.yaml", &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_ERR_IO);
    CHECK_MSG(strcmp(l.err.message, "no-such.yaml: cannot open config file: No such file or directory") == 0, "%s",
              l.err.message);
    /* a directory */
    CHECK(xllm_config_load(".", &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_ERR_IO);
    CHECK_MSG(strstr(l.err.message, "is a directory") != NULL, "%s", l.err.message);
    /* a character device: /dev/null is an empty config, /dev/zero never ends and is cut at the bound */
    CHECK(xllm_config_load("/dev/null", &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_OK);
    CHECK(l.storage == NULL && l.model == NULL);
    CHECK(xllm_config_load("/dev/zero", &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strcmp(l.err.message, "/dev/zero: config file larger than 1048576 bytes") == 0, "%s", l.err.message);
    /* NULL arguments */
    CHECK(xllm_config_load(NULL, &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(xllm_config_load("engine.yaml", &l.e, &l.m, &l.model, NULL, NULL) == XLLM_ERR_INVALID_ARGUMENT);

    /* empty, only comments, an empty document: valid, nothing changes */
    const char *empties[] = {"", "# nothing here\n\n", "---\n", "---\n...\n", "~\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        l = load_text("engine.yaml", empties[i]);
        CHECK_MSG(l.st == XLLM_OK, "'%s': %s", empties[i], l.err.message);
        CHECK(l.model == NULL && l.storage == NULL);
        xllm_engine_options e;
        xllm_model_options m;
        init_opts(&e, &m);
        CHECK(memcmp(&e, &l.e, sizeof e) == 0 && memcmp(&m, &l.m, sizeof m) == 0);
    }

    /* too large: 1 MiB of comment plus a byte */
    size_t big = (1 << 20) + 1;
    char *text = malloc(big + 1);
    memset(text, ' ', big);
    text[0] = '#';
    text[big] = 0;
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, "engine.yaml: config file larger than 1048576 bytes");
    text[big - 1] = 0; /* exactly 1 MiB is read */
    l = load_text("engine.yaml", text);
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    /* deep nesting is refused at the first level the schema does not expect, without recursion */
    size_t depth = 200000;
    memcpy(text, "threads: ", 9);
    memset(text + 9, '[', depth);
    memset(text + 9 + depth, ']', depth);
    text[9 + 2 * depth] = 0;
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: threads: must be an integer (got a list)");
    memset(text, '[', depth);
    memset(text + depth, ']', depth);
    text[2 * depth] = 0;
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: the top level must be a mapping of keys (got a list)");
    /* unbalanced: past CFG_MAX_DEPTH (32) levels, the search for a syntax
     * error after the first error stops (libyaml is quadratic in depth) */
    text[2 * depth - 1] = 0;
    expect_error(text, XLLM_ERR_INVALID_ARGUMENT, "engine.yaml:1: the top level must be a mapping of keys (got a list)");
    strcpy(text, "threads: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"); /* 30 deep, one ']' short */
    expect_error_prefix(text, XLLM_ERR_FORMAT, "engine.yaml:2: YAML syntax error: ");
    free(text);
    /* a NUL byte in the file */
    FILE *f = fopen("engine.yaml", "wb");
    fwrite("threads: 1\n\0\n", 1, 14, f);
    fclose(f);
    CHECK(xllm_config_load("engine.yaml", &l.e, &l.m, &l.model, &l.storage, &l.err) == XLLM_ERR_FORMAT);
    CHECK(xllm_allocated_bytes() == before);
}

int main(void) {
    char dir[] = "/tmp/xllm_test_config_XXXXXX";
    if (!mkdtemp(dir) || chdir(dir) != 0) {
        perror("temporary directory");
        return 2;
    }
    test_full();
    test_sizes();
    test_paths();
    test_errors();
    test_files();
    /* also check the example shipped in docs/ (its paths resolve into docs/) */
    loaded l;
    init_opts(&l.e, &l.m);
    l.st = xllm_config_load(XLLM_SOURCE_DIR "/docs/engine.example.yaml", &l.e, &l.m, &l.model, &l.storage, &l.err);
    CHECK_MSG(l.st == XLLM_OK, "%s", l.err.message);
    if (l.st == XLLM_OK) {
        CHECK(l.model && strcmp(l.model, XLLM_SOURCE_DIR "/docs/../models/stories260k") == 0);
        CHECK(l.e.preempt_mode == XLLM_PREEMPT_ELASTIC && l.e.cache_policy == XLLM_CACHE_LRU);
        CHECK(l.e.workspace_size == (int64_t)2 << 30 && l.e.max_batch_size == 32 && l.e.timeout_ms == 50);
        xllm_free(l.storage);
    }
    int rc = system("rm -rf conf engine.yaml");
    (void)rc;
    if (chdir("/") == 0) rmdir(dir);
    return test_report("test_config");
}
