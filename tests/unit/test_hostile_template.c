/*
 * test_hostile_template.c - chat templates written by an adversary: each class
 * of crash, undefined behaviour, hang and blow-up found by hand or by
 * fuzz/fuzz_template.c, as a regression case. Every case must end in bounded
 * time with either Python Jinja2's text or a clear error (the expected
 * substring of the message is given); nothing may leak.
 *
 *  - recursion over values: ==, <, in, sort, unique, dict keys on lists and
 *    tuples nested 10^5 deep (built by a loop) are an error, not a stack
 *    overflow;
 *  - integer overflow: %-format widths and precisions, str.format widths,
 *    range() with extreme steps, slices with a step of -2^63, range slices,
 *    truncate's length + leeway;
 *  - work: 10^5 distinct {% set %}, range(100000)|unique, a message with
 *    200,000 keys run in linear time (hashed dicts); nested loops and scans
 *    beyond TPL_MAX_WORK stop with an error; a width of 999999999 fails at
 *    once instead of padding for a minute.
 */
#include "test.h"
#include "base/alloc.h"
#include "template/template.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Render src with messages (NULL: none); want_out: the exact text, or
 * want_err: a substring of the error. */
static void run_case(const char *name, const char *src, size_t src_len, const char *messages, const char *want_out,
                     const char *want_err) {
    size_t base = xllm_allocated_bytes();
    double t0 = now_s();
    xllm_error err = {0};
    char *out = NULL;
    size_t len = 0;
    tpl_template *t = tpl_compile(src, src_len, &err);
    xllm_status st = t ? tpl_render(t, messages ? messages : "[]", NULL, NULL, &out, &len, &err) : err.code;
    double dt = now_s() - t0;
    if (want_err) {
        CHECK_MSG(st != XLLM_OK && strstr(err.message, want_err), "%s: want error containing \"%s\", got %s \"%s\"",
                  name, want_err, st ? "error" : "text", st ? err.message : (out ? out : ""));
    } else {
        CHECK_MSG(st == XLLM_OK && len == strlen(want_out) && !memcmp(out, want_out, len),
                  "%s: want \"%s\", got %s \"%.200s\"", name, want_out, st ? "error" : "text",
                  st ? err.message : (out ? out : ""));
    }
    fprintf(stderr, "  %-28s %.3f s  %s\n", name, dt, st ? err.message : "ok");
    xllm_free(out);
    tpl_free(t);
    CHECK_MSG(xllm_allocated_bytes() == base, "%s: %zu bytes leaked", name, xllm_allocated_bytes() - base);
}

#define CASE_OK(name, src, want) run_case(name, src, strlen(src), NULL, want, NULL)
#define CASE_ERR(name, src, want) run_case(name, src, strlen(src), NULL, NULL, want)

/* Two distinct lists (or tuples) nested 10^5 deep, as ns.a and ns.b. */
#define DEEP(open, close)                                                                                   \
    "{% set ns = namespace(a=" open "1" close ", b=" open "1" close ") %}{% for i in range(100000) %}"      \
    "{% set ns.a = " open "ns.a" close " %}{% set ns.b = " open "ns.b" close " %}{% endfor %}"

static void deep_values(void) {
    CASE_ERR("deep ==", DEEP("[", "]") "{{ ns.a == ns.b }}", "nested too deeply");
    CASE_ERR("deep !=", DEEP("[", "]") "{{ ns.a != ns.b }}", "nested too deeply");
    CASE_ERR("deep <", DEEP("[", "]") "{{ ns.a < ns.b }}", "nested too deeply");
    CASE_ERR("deep <=", DEEP("[", "]") "{{ ns.a <= ns.b }}", "nested too deeply");
    CASE_ERR("deep in", DEEP("[", "]") "{{ ns.a in [ns.b] }}", "nested too deeply");
    CASE_ERR("deep sort", DEEP("[", "]") "{{ [ns.a, ns.b]|sort }}", "nested too deeply");
    CASE_ERR("deep count", DEEP("[", "]") "{{ [ns.a].count(ns.b) }}", "nested too deeply");
    CASE_ERR("deep index", DEEP("[", "]") "{{ [ns.a].index(ns.b) }}", "nested too deeply");
    CASE_ERR("deep unique lists", DEEP("[", "]") "{{ [ns.a, ns.b]|unique|list }}", "unhashable type: 'list'");
    CASE_ERR("deep tuple key", DEEP("(", ",)") "{{ {ns.a: 1} }}", "nested too deeply");
    CASE_ERR("deep tuple in dict", DEEP("(", ",)") "{{ ns.a in {} }}", "nested too deeply");
    CASE_ERR("deep unique tuples", DEEP("(", ",)") "{{ [ns.a, ns.b]|unique|list }}", "nested too deeply");
    CASE_ERR("deep print", DEEP("[", "]") "{{ ns.a }}", "nested too deeply");
    CASE_ERR("deep tojson", DEEP("[", "]") "{{ ns.a|tojson }}", "nested too deeply");
    /* shallow ones still work as Python */
    CASE_OK("nested ==", "{{ [[1, [2]], (3,)] == [[1, [2]], (3,)] }} {{ [[1]] < [[2]] }} {{ {(1, (2,)): 3}[(1, (2,))] }}",
            "True True 3");
    CASE_OK("unique hashed", "{{ [1, 1.0, True, 'a', 'A', (1, 2), (1, 2), none, none]|unique|list }}",
            "[1, 'a', (1, 2), None]");
    CASE_OK("dict keys 1 == 1.0", "{{ {1: 'a', 1.0: 'b', True: 'c', 2.5: 'd'} }}", "{1: 'c', 2.5: 'd'}");
}

static void overflow(void) {
    CASE_ERR("%% width 2^31", "{{ '%2147483648d' % 1 }}", "larger than the output limit");
    CASE_ERR("%% width 10^30", "{{ '%1000000000000000000000000000000s' % 'x' }}", "larger than the output limit");
    CASE_ERR("%% precision 2^31", "{{ '%.2147483648d' % 1 }}", "larger than the output limit");
    CASE_ERR("%% width 999999999", "{{ '%999999999d' % 1 }}", "larger than the output limit");
    CASE_ERR("%% float width", "{{ '%400f' % 1.5 }}", "not supported");
    CASE_OK("%% widths", "{{ '%5d|%-4s|%05.1f|%.3d' % (42, 'ab', 3.14159, 7) }}", "   42|ab  |003.1|007");
    CASE_ERR("format width 2^31", "{{ '{:2147483648}'.format(1) }}", "not supported");
    CASE_ERR("format width 10^30", "{{ '{:>1000000000000000000000000000000}'.format('x') }}", "not supported");
    CASE_ERR("center 2^40", "{{ 'x'.center(1099511627776) }}", "larger than the output limit");
    CASE_OK("range step -2^63", "{{ range(0, 10, -9223372036854775807 - 1)|list }}", "[]");
    CASE_OK("range step -2^63 down", "{{ range(5, 0, -9223372036854775807 - 1)|list }}", "[5]");
    CASE_OK("range big steps",
            "{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904)|list }}",
            "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
    CASE_OK("range step 2^63-1", "{{ range(0, 9223372036854775807, 9223372036854775807)|list }}", "[0]");
    CASE_OK("slice step -2^63", "{{ [1, 2, 3][::-9223372036854775807 - 1] }}", "[3]");
    CASE_OK("str slice step -2^63", "{{ 'abc'[::-9223372036854775807 - 1] }}", "c");
    CASE_OK("slice step 2^63-1", "{{ [1, 2, 3][::9223372036854775807] }} {{ 'héllo'[1::9223372036854775807] }}",
            "[1] é");
    CASE_OK("slice big start", "{{ [1, 2, 3][-9223372036854775807 - 1:9223372036854775807] }}", "[1, 2, 3]");
    CASE_ERR("range slice overflow",
             "{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904)[1:3] }}",
             "integer overflow");
    CASE_OK("truncate length 2^63-1", "{{ 'hello world'|truncate(9223372036854775807, leeway=10) }}", "hello world");
    CASE_OK("truncate list 2^63-1", "{{ [1, 2]|truncate(9223372036854775807, leeway=9223372036854775807) }}",
            "[1, 2]");
    CASE_OK("attr path 10^20", "{{ [[1]]|map(attribute='99999999999999999999')|list }}", "[Undefined]");
    CASE_ERR("format index 2^64+1", "{{ '{18446744073709551617}'.format(1, 2) }}", "out of range");
    CASE_ERR("format item 10^20", "{{ '{0[99999999999999999999]}'.format([1]) }}", "larger than 64 bits");
    CASE_OK("float literal 200 digits",
            "{{ 1" "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000.0 }}",
            "1e+200");
    CASE_ERR("int literal 2^64", "{{ 18446744073709551616 }}", "larger than 64 bits");
    CASE_ERR("int overflow +", "{{ 9223372036854775807 + 1 }}", "integer overflow");
    CASE_ERR("int overflow neg", "{% set x = -9223372036854775807 - 1 %}{{ -x }}", "integer overflow");
    CASE_ERR("int overflow //", "{% set x = -9223372036854775807 - 1 %}{{ x // -1 }}", "integer overflow");
    CASE_ERR("int overflow %", "{% set x = -9223372036854775807 - 1 %}{{ x % -1 }}{{ x * -1 }}", "integer overflow");
    CASE_ERR("int overflow **", "{{ 3 ** 99 }}", "integer overflow");
}

static void work(void) {
    /* 10^5 distinct top-level {% set %}: linear with hashed scopes */
    size_t n = 100000, cap = n * 32 + 64, off = 0;
    char *src = malloc(cap);
    for (size_t i = 0; i < n; i++) off += (size_t)snprintf(src + off, cap - off, "{%% set v%zu = %zu %%}", i, i);
    off += (size_t)snprintf(src + off, cap - off, "{{ v0 + v99999 }}");
    run_case("1e5 distinct sets", src, off, NULL, "99999", NULL);
    free(src);
    CASE_OK("range|unique", "{{ range(100000)|unique|list|length }}", "100000");
    /* a message with 200,000 keys */
    size_t keys = 200000;
    cap = keys * 24 + 128;
    char *msg = malloc(cap);
    off = (size_t)snprintf(msg, cap, "[{\"role\": \"user\", \"content\": \"hi\"");
    for (size_t i = 0; i < keys; i++) off += (size_t)snprintf(msg + off, cap - off, ", \"k%zu\": %zu", i, i);
    snprintf(msg + off, cap - off, "}]");
    const char *tpl = "{{ messages[0]|length }} {{ messages[0]['k199999'] }} {{ 'k5' in messages[0] }}";
    run_case("message 200000 keys", tpl, strlen(tpl), msg, "200002 199999 True", NULL);
    free(msg);
    CASE_ERR("nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             "too much work");
    CASE_ERR("scan in loop", "{% set big = range(100000)|list %}{% for i in range(100000) %}"
                             "{% if -1 in big %}{% endif %}{% endfor %}", "too much work");
    CASE_ERR("== in loop", "{% set a = range(100000)|list %}{% set b = range(100000)|list %}"
                           "{% for i in range(100000) %}{% if a == b %}{% endif %}{% endfor %}", "too much work");
    CASE_ERR("sort in loop", "{% set a = range(100000)|list %}{% for i in range(100000) %}"
                             "{% set b = a|sort %}{% endfor %}", "");
    CASE_ERR("str scan in loop", "{% set s = 'x' * 50000000 %}{% for i in range(100000) %}"
                                 "{% if 'y' in s %}{% endif %}{% endfor %}", "too much work");
    CASE_ERR("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested too deeply");
    /* padding within the output limit is one memset (found by fuzz_template:
     * a %-format width of 66,666,666 padded byte by byte, 39 s under load) */
    CASE_OK("wide %-format", "{{ ('%20000000d' % 1)|length }} {{ ('%-20000000s' % 'x')|length }}", "20000000 20000000");
    CASE_OK("wide rjust, zfill", "{{ 'x'.rjust(20000000)|length }} {{ '7'.zfill(20000000)|length }}",
            "20000000 20000000");
    CASE_OK("empty repeated 4**20", "{{ [] * 4 ** 20 }}|{{ '' * 4 ** 20 }}|{{ (4 ** 20 * ())|length }}", "[]||0");
    CASE_ERR("output limit", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "larger than the limit");
}

/* Empty containers: found by fuzz_template (UBSan: [].copy() passed a NULL
 * item array to memcpy). Every method and filter that copies items runs on
 * an empty list, dict and string. */
static void empty_containers(void) {
    CASE_OK("[].copy()", "{{ [].copy() }}|{{ [1, 2].copy() }}", "[]|[1, 2]");
    CASE_OK("empty filters", "{{ []|list }}{{ []|sort }}{{ []|unique|list }}{{ []|reverse|list }}{{ ''|reverse }}"
                             "{{ {}|items|list }}{{ ''|upper }}{{ ''|indent }}{{ [] + [] }}{{ '' * 3 }}{{ [] * 3 }}",
            "[][][][][][][]");
    CASE_OK("empty dict", "{% set d = {} %}{{ d.copy() if d.copy is defined else '' }}{{ d.keys()|list }}", "{}[]");
}

static void nul_bytes(void) {
    /* a NUL is text like any other (Jinja2 prints it): never a silent truncation */
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    tpl_template *t = tpl_compile("a\0b{{ 'c\\x00d' }}", 17, &err);
    CHECK_MSG(t != NULL, "%s", err.message);
    char *out = NULL;
    size_t len = 0;
    if (t && !tpl_render(t, "[{\"role\": \"u\\u0000x\", \"content\": \"\"}]", NULL, NULL, &out, &len, &err)) {
        CHECK_MSG(len == 6 && !memcmp(out, "a\0bc\0d", 6), "len %zu", len);
        xllm_free(out);
    } else {
        CHECK_MSG(0, "%s", err.message);
    }
    tpl_free(t);
    CHECK(xllm_allocated_bytes() == base);
}

int main(void) {
    deep_values();
    overflow();
    work();
    empty_containers();
    nul_bytes();
    return test_report("test_hostile_template");
}
