/*
 * test_template.c - the chat-template interpreter.
 *
 *  - every case of tests/data/templates/jinja_cases.jsonl (small templates
 *    covering each construct, filter, test, method, whitespace rule and
 *    undefined behaviour, rendered by Python Jinja2 as HF configures it;
 *    made by tests/templates/jinja_cases.py): the same text, or an error
 *    where Jinja2 raised one;
 *  - the committed real templates (Qwen3, DeepSeek-V3) on their cases through
 *    xllm_chat_template_load/apply;
 *  - error reports: codes and "chat template line N" for syntax, unknown
 *    filters, runtime errors and raise_exception; limits (output size,
 *    memory, recursion, nesting) fail cleanly;
 *  - the loader: list-form templates, tool_use selection, special tokens as
 *    strings or {"content"}, chat_template.jinja, no template;
 *  - nothing leaks (xllm_allocated_bytes back to where it started).
 */
#include "test.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The raw JSON text of a top-level member of an object line (so numbers keep
 * their spelling: 1.0 stays a float). Returns a malloc-ed copy or NULL. */
static const char *skip_json(const char *p, int depth) {
    while (*p == ' ') p++;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1]) p++;
        return *p ? p + 1 : NULL;
    }
    if (*p == '{' || *p == '[') {
        if (depth > 200) return NULL;
        char close = *p == '{' ? '}' : ']';
        p++;
        for (;;) {
            while (*p == ' ' || *p == ',' || *p == ':') p++;
            if (*p == close) return p + 1;
            if (!*p) return NULL;
            p = skip_json(p, depth + 1);
            if (!p) return NULL;
        }
    }
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ') p++;
    return p;
}

static char *raw_member(const char *line, const char *key) {
    size_t kl = strlen(key);
    const char *p = line + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p != '"') return NULL;
        const char *k = p;
        p = skip_json(p, 0);
        if (!p) return NULL;
        while (*p == ' ' || *p == ':') p++;
        const char *v = p;
        p = skip_json(p, 0);
        if (!p) return NULL;
        if (!strncmp(k + 1, key, kl) && k[1 + kl] == '"') {
            size_t n = (size_t)(p - v);
            char *out = malloc(n + 1);
            memcpy(out, v, n);
            out[n] = 0;
            return out;
        }
    }
}

/* Render and compare; returns the status. */
static xllm_status render(const char *tpl, const char *messages, const char *options, char **out, xllm_error *err) {
    size_t len;
    *out = NULL;
    xllm_status st = xllm_chat_template_render(tpl, messages, options, out, &len, err);
    if (st == XLLM_OK) CHECK_MSG(strlen(*out) == len, "length %zu vs %zu", strlen(*out), len);
    return st;
}

static void expect_text(const char *tpl, const char *options, const char *want) {
    char *out;
    xllm_error err;
    xllm_status st = render(tpl, "[]", options, &out, &err);
    CHECK_MSG(st == XLLM_OK && !strcmp(out, want), "%s\n  got %s\n  want %s", tpl, st ? err.message : out, want);
    xllm_free(out);
}

static void expect_error(const char *tpl, const char *messages, xllm_status code, const char *msg_part) {
    char *out;
    xllm_error err;
    xllm_status st = render(tpl, messages ? messages : "[]", NULL, &out, &err);
    CHECK_MSG(st == code && out == NULL && strstr(err.message, msg_part), "%s\n  got status %d: %s\n  want %d: %s", tpl,
              st, st ? err.message : out, code, msg_part);
    xllm_free(out);
}

/* ------------------------------------------------------ the battery */

static void test_battery(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/templates/jinja_cases.jsonl", XLLM_SOURCE_DIR);
    char *all = slurp(path);
    CHECK_MSG(all != NULL, "cannot read %s", path);
    if (!all) return;
    int n = 0, bad = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *c = cJSON_Parse(line);
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(c, "template");
        const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "expected");
        const cJSON *jerr = cJSON_GetObjectItemCaseSensitive(c, "error");
        char *messages = raw_member(line, "messages"), *vars = raw_member(line, "vars");
        CHECK(cJSON_IsString(tpl) && messages && vars);
        if (!cJSON_IsString(tpl) || !messages || !vars) {
            cJSON_Delete(c);
            free(messages);
            free(vars);
            continue;
        }
        char *out = NULL;
        xllm_error err;
        xllm_status st = render(tpl->valuestring, messages, vars, &out, &err);
        n++;
        if (cJSON_IsString(exp)) {
            int ok = st == XLLM_OK && !strcmp(out, exp->valuestring);
            if (!ok) bad++;
            CHECK_MSG(ok, "template %s\n  got  %s\n  want %s", tpl->valuestring, st ? err.message : out,
                      exp->valuestring);
        } else {
            int ok = st != XLLM_OK && out == NULL;
            if (!ok) bad++;
            CHECK_MSG(ok, "template %s\n  rendered %s\n  but Jinja2 raised %s", tpl->valuestring, out ? out : "",
                      cJSON_IsString(jerr) ? jerr->valuestring : "?");
        }
        xllm_free(out);
        free(messages);
        free(vars);
        cJSON_Delete(c);
    }
    fprintf(stderr, "battery: %d cases, %d differ from Jinja2\n", n, bad);
    CHECK(n > 200);
    free(all);
}

/* ----------------------------------------------- the committed real templates */

static void test_real_templates(void) {
    const char *names[] = {"qwen3", "deepseek_v3"};
    for (size_t k = 0; k < 2; k++) {
        char dir[1024], path[1100];
        snprintf(dir, sizeof dir, "%s/tests/data/templates/%s", XLLM_SOURCE_DIR, names[k]);
        snprintf(path, sizeof path, "%s/cases.jsonl", dir);
        xllm_error err;
        xllm_chat_template *t = xllm_chat_template_load(dir, &err);
        CHECK_MSG(t != NULL, "%s", err.message);
        char *all = slurp(path);
        CHECK(all != NULL);
        if (!t || !all) {
            xllm_chat_template_free(t);
            free(all);
            continue;
        }
        int n = 0;
        for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
            cJSON *c = cJSON_Parse(line);
            const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "expected");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
            int agp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
            char *messages = raw_member(line, "messages"), *tools = raw_member(line, "tools"),
                 *vars = raw_member(line, "vars");
            /* options: {"add_generation_prompt": ..., "tools": ..., <vars>} */
            size_t cap = 64 + (tools ? strlen(tools) : 0) + (vars ? strlen(vars) : 0);
            char *opts = malloc(cap);
            int w = snprintf(opts, cap, "{\"add_generation_prompt\": %s", agp ? "true" : "false");
            if (tools) w += snprintf(opts + w, cap - (size_t)w, ", \"tools\": %s", tools);
            if (vars && strlen(vars) > 2) w += snprintf(opts + w, cap - (size_t)w, ", %.*s", (int)strlen(vars) - 2, vars + 1);
            snprintf(opts + w, cap - (size_t)w, "}");
            char *out = NULL;
            size_t len;
            xllm_status st = xllm_chat_template_apply(t, NULL, messages, opts, &out, &len, &err);
            CHECK_MSG(st == XLLM_OK && cJSON_IsString(exp) && !strcmp(out, exp->valuestring), "%s/%s: %s", names[k],
                      cJSON_IsString(name) ? name->valuestring : "?", st ? err.message : out);
            n++;
            xllm_free(out);
            free(opts);
            free(messages);
            free(tools);
            free(vars);
            cJSON_Delete(c);
        }
        CHECK(n >= 10);
        free(all);
        if (k == 0) {
            CHECK(xllm_chat_template_special_token(t, "bos_token") == NULL);
            CHECK(!strcmp(xllm_chat_template_special_token(t, "eos_token"), "<|im_end|>"));
            CHECK(strstr(xllm_chat_template_source(t, NULL), "<|im_start|>") != NULL);
        } else {
            CHECK(!strcmp(xllm_chat_template_special_token(t, "bos_token"), "<｜begin▁of▁sentence｜>"));
        }
        xllm_chat_template_free(t);
    }
}

/* ------------------------------------------------------------- errors */

static void test_errors(void) {
    expect_error("a\n\n{{ x|nope }}", NULL, XLLM_ERR_UNSUPPORTED, "chat template line 3: unknown filter 'nope'");
    expect_error("{% if false %}\n{{ x|xmlattr }}{% endif %}", NULL, XLLM_ERR_UNSUPPORTED,
                 "chat template line 2: filter 'xmlattr' is not supported");
    expect_error("{{ x is nope }}", NULL, XLLM_ERR_UNSUPPORTED, "line 1: unknown test 'nope'");
    expect_error("\n{% include 'x' %}", NULL, XLLM_ERR_UNSUPPORTED, "line 2: the 'include' tag is not supported");
    expect_error("{% for x in y %}\n{% endif %}", NULL, XLLM_ERR_FORMAT, "line 2: unexpected 'endif'");
    expect_error("{% if x %}\n\n", NULL, XLLM_ERR_FORMAT, "unexpected end of template; expected 'elif' or 'else' or 'endif'");
    expect_error("{% frobnicate %}", NULL, XLLM_ERR_FORMAT, "line 1: unknown tag 'frobnicate'");
    expect_error("{{ 1 +\n }}", NULL, XLLM_ERR_FORMAT, "line 2: unexpected end of print statement");
    expect_error("x\n{{ 'abc }}", NULL, XLLM_ERR_FORMAT, "line 2: unterminated string literal");
    expect_error("{# never closed", NULL, XLLM_ERR_FORMAT, "missing end of comment tag");
    expect_error("{% break %}", NULL, XLLM_ERR_FORMAT, "'break' outside a loop");
    expect_error("{{ a.b }}", NULL, XLLM_ERR_FORMAT, "line 1: 'a' is undefined");
    expect_error("1\n2\n3\n{{ messages[0].nope.x }}", "[{\"role\": \"user\"}]", XLLM_ERR_FORMAT,
                 "chat template line 4: 'dict object' has no attribute 'nope'");
    expect_error("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}", "[{\"content\": \"a\"}]", XLLM_ERR_FORMAT,
                 "line 2: can only concatenate str (not \"int\") to str");
    expect_error("{{- raise_exception('Conversation roles must alternate') }}", NULL, XLLM_ERR_INVALID_ARGUMENT,
                 "chat template line 1: raise_exception: Conversation roles must alternate");
    expect_error("{{ [1, 2]|map('upper') }}", NULL, XLLM_ERR_UNSUPPORTED, "apply |list first");
    expect_error("{{ 'x'.encode() }}", NULL, XLLM_ERR_UNSUPPORTED, "the str 'encode' method is not supported");
    expect_error("{% set l = [] %}{{ l.append(1) }}", NULL, XLLM_ERR_FORMAT, "'append' of 'list' object is unsafe");
    expect_error("{{ loop.cycle }}", NULL, XLLM_ERR_FORMAT, "'loop' is undefined");
    expect_error("{% for i in [1] %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, XLLM_ERR_UNSUPPORTED,
                 "loop.cycle is not supported");
    expect_error("{{ 2 ** 64 }}", NULL, XLLM_ERR_UNSUPPORTED, "integer overflow");
    expect_error("\xff{{ 1 }}", NULL, XLLM_ERR_FORMAT, "not valid UTF-8");
    expect_error("{{ 1 }}", "[{\"a\": }]", XLLM_ERR_FORMAT, "messages: invalid JSON at byte");
    expect_error("{{ 1 }}", "{\"not\": \"a list\"}", XLLM_ERR_INVALID_ARGUMENT, "expected a JSON array");
    expect_error("{{ 1 }}", "[\"\xc3\"]", XLLM_ERR_FORMAT, "not valid UTF-8");

    char *out;
    xllm_error err;
    CHECK(render("{{ 1 }}", "[]", "[1]", &out, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(render("{{ 1 }}", "[]", "{\"messages\": []}", &out, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(xllm_chat_template_render(NULL, "[]", NULL, &out, NULL, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(xllm_chat_template_render("x", "[]", NULL, &out, NULL, NULL) == XLLM_OK); /* err may be NULL */
    xllm_free(out);
}

/* ---------------------------------------------------------- limits */

static void test_limits(void) {
    /* output larger than the limit (64 MiB) */
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, XLLM_ERR_FORMAT, "larger than the limit");
    /* a string doubling in a loop runs into the memory cap, not out of memory */
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                 "{% endfor %}{{ ns.s|length }}",
                 NULL, XLLM_ERR_FORMAT, "");
    /* unbounded recursion */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, XLLM_ERR_UNSUPPORTED, "nested too deeply");
    /* deep nesting in the source */
    char deep[4096];
    int k = snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - (size_t)k, " }}");
    expect_error(deep, NULL, XLLM_ERR_UNSUPPORTED, "nested too deeply");
    char ifs[8192];
    k = 0;
    for (int i = 0; i < 300; i++) k += snprintf(ifs + k, sizeof ifs - (size_t)k, "{%% if 1 %%}");
    expect_error(ifs, NULL, XLLM_ERR_UNSUPPORTED, "nested too deeply");
    expect_error("{{ range(100001)|length }}", NULL, XLLM_ERR_FORMAT, "MAX_RANGE");
    /* a long but legitimate conversation renders */
    size_t nmsg = 2000, cap = nmsg * 80 + 16;
    char *msgs = malloc(cap);
    size_t w = 0;
    msgs[w++] = '[';
    for (size_t i = 0; i < nmsg; i++)
        w += (size_t)snprintf(msgs + w, cap - w, "%s{\"role\": \"%s\", \"content\": \"message %zu\"}", i ? ", " : "",
                              i % 2 ? "assistant" : "user", i);
    msgs[w++] = ']';
    msgs[w] = 0;
    char *out;
    xllm_error err;
    xllm_status st = render("{% for m in messages %}<{{ m.role }}>{{ m.content|trim }}{% endfor %}", msgs, NULL, &out, &err);
    CHECK_MSG(st == XLLM_OK && strstr(out, "<assistant>message 1999"), "%s", st ? err.message : "missing text");
    xllm_free(out);
    free(msgs);
}

/* ---------------------------------------------------------- semantics */

static void test_semantics(void) {
    /* trim_blocks / lstrip_blocks as HF sets them */
    expect_text("{% for m in messages %}\n  {{ m }}\n{% endfor %}", NULL, "");
    expect_text("  {% if true %}\n  x\n  {% endif %}\nend", NULL, "  x\nend");
    expect_text("a {%- if true -%} b {%- endif -%} c", NULL, "abc");
    expect_text("{{ 'a' }}\n{{ 'b' }}\n", NULL, "a\nb");
    /* printing like Python */
    expect_text("{{ 1.0 }} {{ true }} {{ none }} {{ ['a', 'b'] }} {{ {'k': 1} }} {{ (1,) }}", NULL,
                "1.0 True None ['a', 'b'] {'k': 1} (1,)");
    expect_text("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'a' ~ 1 }}", NULL, "3 -4 3.5 1024 a1");
    /* undefined: empty, falsy, not defined */
    expect_text("[{{ nope }}]{{ nope is defined }}{% if nope %}x{% endif %}{{ nope|length }}", NULL, "[]False0");
    /* variables from the options, types kept (1.0 stays a float) */
    expect_text("{{ a }} {{ b }} {{ c }} {{ d is none }} {{ add_generation_prompt }} {{ tools }}",
                "{\"a\": 1, \"b\": 1.0, \"c\": \"\\u00e9x\", \"d\": null}", "1 1.0 éx True False None");
    /* tojson keeps non-ASCII and escapes like json.dumps */
    expect_text("{{ {'k': 'é\"\\n'}|tojson }}", NULL, "{\"k\": \"é\\\"\\n\"}");
}

static void test_nul_bytes(void) {
    /* text may hold NUL bytes: the length says where it ends */
    char *out;
    size_t len;
    xllm_error err;
    CHECK(xllm_chat_template_render("[{{ messages[0] }}]", "[\"a\\u0000b\"]", NULL, &out, &len, &err) == XLLM_OK);
    CHECK(len == 5 && !memcmp(out, "[a\0b]", 5));
    xllm_free(out);
}

/* ------------------------------------------------------- threads */

typedef struct thread_job {
    const xllm_chat_template *t;
    const char *want;
    int bad;
} thread_job;

static void *render_many(void *arg) {
    thread_job *j = arg;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        size_t len;
        xllm_error err;
        const char *msgs = "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"héllo\"}]";
        if (xllm_chat_template_apply(j->t, NULL, msgs, "{\"add_generation_prompt\": true}", &out, &len, &err) ||
            strcmp(out, j->want))
            j->bad++;
        xllm_free(out);
    }
    return NULL;
}

/* One loaded template rendered from several threads at once. */
static void test_threads(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/templates/qwen3", XLLM_SOURCE_DIR);
    xllm_error err;
    xllm_chat_template *t = xllm_chat_template_load(dir, &err);
    CHECK(t != NULL);
    if (!t) return;
    const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n";
    pthread_t th[4];
    thread_job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (thread_job){t, want, 0};
        CHECK(pthread_create(&th[k], NULL, render_many, &jobs[k]) == 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK_MSG(jobs[k].bad == 0, "thread %d: %d bad renders", k, jobs[k].bad);
    }
    xllm_chat_template_free(t);
}

/* ------------------------------------------------------------- loader */

static void test_loader(void) {
    char dir[] = "/tmp/xllm_tpl_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cfg[256], jinja[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    xllm_error err;
    char *out;
    size_t len;

    /* no template at all */
    CHECK(write_file(cfg, "{\"bos_token\": \"<s>\"}") == 0);
    CHECK(xllm_chat_template_load(dir, &err) == NULL && err.code == XLLM_ERR_UNSUPPORTED);

    /* chat_template.jinja when tokenizer_config.json has none */
    CHECK(write_file(jinja, "{{ bos_token }}|{{ messages|length }}\n") == 0);
    xllm_chat_template *t = xllm_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.message);
    if (t) {
        CHECK(xllm_chat_template_apply(t, NULL, "[{}, {}]", NULL, &out, &len, &err) == XLLM_OK);
        CHECK_MSG(!strcmp(out, "<s>|2"), "%s", out);
        xllm_free(out);
        /* the caller's variables override the special tokens */
        CHECK(xllm_chat_template_apply(t, NULL, "[]", "{\"bos_token\": \"B\"}", &out, &len, &err) == XLLM_OK);
        CHECK(!strcmp(out, "B|0"));
        xllm_free(out);
        xllm_chat_template_free(t);
    }
    unlink(jinja);

    /* named templates; tool_use when tools are given, like HF */
    CHECK(write_file(cfg, "{\"bos_token\": {\"content\": \"<bos>\", \"lstrip\": false}, \"eos_token\": null,"
                          " \"additional_special_tokens\": [\"<a>\", {\"content\": \"<b>\"}],"
                          " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ eos_token is defined }}"
                          "{{ additional_special_tokens }}\"},"
                          " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length if tools else 0 }}\"},"
                          " {\"name\": \"broken\", \"template\": \"{{ x|nope }}\"}]}") == 0);
    t = xllm_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.message);
    if (t) {
        CHECK(xllm_chat_template_apply(t, NULL, "[]", NULL, &out, &len, &err) == XLLM_OK);
        CHECK_MSG(!strcmp(out, "D<bos>False['<a>', '<b>']"), "%s", out);
        xllm_free(out);
        CHECK(xllm_chat_template_apply(t, NULL, "[]", "{\"tools\": [1, 2]}", &out, &len, &err) == XLLM_OK);
        CHECK(!strcmp(out, "T2"));
        xllm_free(out);
        CHECK(xllm_chat_template_apply(t, NULL, "[]", "{\"tools\": null}", &out, &len, &err) == XLLM_OK);
        CHECK(out[0] == 'D');
        xllm_free(out);
        CHECK(xllm_chat_template_apply(t, "tool_use", "[]", NULL, &out, &len, &err) == XLLM_OK);
        CHECK(!strcmp(out, "T0"));
        xllm_free(out);
        CHECK(xllm_chat_template_apply(t, "broken", "[]", NULL, &out, &len, &err) == XLLM_ERR_UNSUPPORTED);
        CHECK(strstr(err.message, "unknown filter 'nope'") != NULL);
        CHECK(xllm_chat_template_apply(t, "missing", "[]", NULL, &out, &len, &err) == XLLM_ERR_INVALID_ARGUMENT);
        CHECK(!strcmp(xllm_chat_template_special_token(t, "bos_token"), "<bos>"));
        CHECK(xllm_chat_template_special_token(t, "eos_token") == NULL);
        CHECK(xllm_chat_template_source(t, "tool_use") && !strcmp(xllm_chat_template_source(t, "tool_use"), "T{{ tools|length if tools else 0 }}"));
        xllm_chat_template_free(t);
    }
    /* the file itself may be given */
    t = xllm_chat_template_load(cfg, &err);
    CHECK(t != NULL);
    xllm_chat_template_free(t);

    /* several templates and no default */
    CHECK(write_file(cfg, "{\"chat_template\": [{\"name\": \"a\", \"template\": \"A\"}]}") == 0);
    t = xllm_chat_template_load(dir, &err);
    CHECK(t != NULL);
    if (t) {
        CHECK(xllm_chat_template_apply(t, NULL, "[]", NULL, &out, &len, &err) == XLLM_ERR_INVALID_ARGUMENT);
        xllm_chat_template_free(t);
    }
    /* malformed */
    CHECK(write_file(cfg, "{\"chat_template\": 5}") == 0);
    CHECK(xllm_chat_template_load(dir, &err) == NULL && err.code == XLLM_ERR_FORMAT);
    CHECK(write_file(cfg, "{not json") == 0);
    CHECK(xllm_chat_template_load(dir, &err) == NULL && err.code == XLLM_ERR_FORMAT);
    unlink(cfg);
    CHECK(xllm_chat_template_load("/nonexistent/tokenizer_config.json", &err) == NULL);
    rmdir(dir);
}

int main(void) {
    size_t before = xllm_allocated_bytes();
    test_battery();
    test_real_templates();
    test_errors();
    test_limits();
    test_semantics();
    test_nul_bytes();
    test_loader();
    test_threads();
    CHECK_MSG(xllm_allocated_bytes() == before, "%zu bytes still allocated", xllm_allocated_bytes() - before);
    return test_report("test_template");
}
