/*
 * test_tool_calls.c - the server's tool-call and reasoning parsers on
 * hand-written transcripts in each family's documented format (Hermes /
 * Qwen <tool_call>, Llama 3.1 JSON and <|python_tag|>, Mistral [TOOL_CALLS],
 * the generic JSON fallback), malformed ones included (they come back whole
 * as content), streamed in every split (one byte at a time and at random cuts:
 * the streamed content + calls equal the whole parse), OpenAI's streamed call
 * deltas through chat_out in each format (the first with id and name and
 * empty arguments, then the arguments in pieces while they are generated,
 * assembling to the non-streamed calls; shapes left to the end parse still
 * assemble), the <think> split, the
 * template-format detection, and the tool_choice constraint triple (prefix,
 * JSON Schema, suffix) for required and named choices.
 */
#include "test.h"
#include "server/chat_out.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const char *name, *args; } want_call;

/* Whole parse and every streamed split give content `content` and the calls. */
static void check(tool_format f, const char *text, const char *content, int n, const want_call *w, int max_calls) {
    size_t len = strlen(text), cl;
    tool_call *calls;
    int got = tool_calls_parse(f, text, len, max_calls, &cl, &calls);
    CHECK_MSG(got == n, "%s: '%s': %d calls, want %d", tool_format_name(f), text, got, n);
    CHECK_MSG(cl == strlen(content) && !memcmp(text, content, cl), "%s: '%s': content '%.*s' want '%s'",
              tool_format_name(f), text, (int)cl, text, content);
    for (int i = 0; i < got && i < n; i++) {
        CHECK_MSG(!strcmp(calls[i].name, w[i].name), "name %s want %s", calls[i].name, w[i].name);
        CHECK_MSG(!strcmp(calls[i].arguments, w[i].args), "args %s want %s", calls[i].arguments, w[i].args);
    }
    tool_calls_free(calls, got);
    /* streamed: byte by byte, and in 3 pieces at every pair of cuts (short texts) */
    for (size_t step = 1; step <= len; step = step < 4 ? step + 1 : step * 2) {
        tool_stream *s = tool_stream_new(f, max_calls);
        sbuf out = {0};
        for (size_t i = 0; i < len; i += step) tool_stream_push(s, text + i, i + step > len ? len - i : step, &out);
        got = tool_stream_finish(s, &out, &calls);
        CHECK_MSG(got == n, "%s streamed by %zu: '%s': %d calls", tool_format_name(f), step, text, got);
        CHECK_MSG(out.len == strlen(content) && (!out.len || !memcmp(out.p, content, out.len)),
                  "%s streamed by %zu: '%s': content '%.*s' want '%s'", tool_format_name(f), step, text, (int)out.len,
                  out.p ? out.p : "", content);
        for (int i = 0; i < got && i < n; i++) CHECK(!strcmp(calls[i].name, w[i].name) && !strcmp(calls[i].arguments, w[i].args));
        tool_calls_free(calls, got);
        sb_free(&out);
        tool_stream_free(s);
    }
}

static void check_think(int open, const char *text, const char *reasoning, const char *content) {
    size_t len = strlen(text);
    for (size_t step = 1; step <= len + 1; step++) {
        think_stream *s = think_stream_new(open);
        sbuf r = {0}, c = {0};
        for (size_t i = 0; i < len; i += step) think_stream_push(s, text + i, i + step > len ? len - i : step, 0, &r, &c);
        think_stream_push(s, "", 0, 1, &r, &c);
        CHECK_MSG(r.len == strlen(reasoning) && (!r.len || !memcmp(r.p, reasoning, r.len)), "'%s' by %zu: reasoning '%.*s'",
                  text, step, (int)r.len, r.p ? r.p : "");
        CHECK_MSG(c.len == strlen(content) && (!c.len || !memcmp(c.p, content, c.len)), "'%s' by %zu: content '%.*s'", text,
                  step, (int)c.len, c.p ? c.p : "");
        sb_free(&r);
        sb_free(&c);
        think_stream_free(s);
    }
}

/* Through chat_out, pushed 7 bytes at a time with the deltas drained after
 * each push (as the server streams): content `content`, n calls; every
 * call's first delta has id, name and empty arguments; the deltas assemble
 * to the non-streamed calls; live: some arguments arrived before the end. */
static void check_deltas(tool_format f, const char *out, const char *content, int n, int live) {
    srv_req rq;
    memset(&rq, 0, sizeof rq);
    rq.chat = 1, rq.tool_parse = 1, rq.tool_fmt = f, rq.max_tool_calls = 64;
    chat_out *co = chat_out_new(&rq);
    sbuf got = {0}, reasoning = {0}, asm_args[4] = {{0}}, names[4] = {{0}};
    int before_end = 0, headers = 0;
    size_t len = strlen(out);
    for (size_t i = 0; i <= len; i += 7) {
        int final = i + 7 > len;
        chat_out_push(co, out + i, final ? len - i : 7, final, &got, &reasoning);
        for (;;) {
            sbuf d = {0};
            if (!chat_out_next_delta(co, &d)) { sb_free(&d); break; }
            sb_put(&d, "", 1);
            char *js = malloc(d.len + 3);
            snprintf(js, d.len + 3, "{%s}", d.p);
            cJSON *o = cJSON_Parse(js);
            const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "tool_calls"), 0);
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            const cJSON *ix = cJSON_GetObjectItemCaseSensitive(tc, "index");
            CHECK_MSG(o && cJSON_IsNumber(ix) && ix->valueint >= 0 && ix->valueint < 4 && cJSON_IsString(a), "%s", js);
            if (o && cJSON_IsNumber(ix) && ix->valueint >= 0 && ix->valueint < 4 && cJSON_IsString(a)) {
                int k = ix->valueint;
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
                if (cJSON_IsString(nm)) { /* the first delta of call k */
                    CHECK(!names[k].len && !a->valuestring[0] && k == headers);
                    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(tc, "id")));
                    sb_puts(&names[k], nm->valuestring);
                    headers++;
                } else {
                    CHECK(names[k].len > 0);
                    sb_puts(&asm_args[k], a->valuestring);
                    if (!final) before_end++;
                }
            }
            cJSON_Delete(o);
            free(js);
            sb_free(&d);
        }
    }
    CHECK_MSG(got.len == strlen(content) && (!got.len || !memcmp(got.p, content, got.len)), "'%s': content '%.*s'", out,
              (int)got.len, got.p ? got.p : "");
    CHECK_MSG(chat_out_n_calls(co) == n && headers == n, "'%s': %d calls, %d streamed, want %d", out, chat_out_n_calls(co), headers, n);
    sbuf whole = {0};
    chat_out_calls_json(co, &whole);
    sb_put(&whole, "", 1);
    cJSON *w = cJSON_Parse(whole.p);
    for (int k = 0; k < n && k < 4; k++) {
        const cJSON *wf = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(w, k), "function");
        const cJSON *wa = cJSON_GetObjectItemCaseSensitive(wf, "arguments");
        sb_put(&asm_args[k], "", 1), sb_put(&names[k], "", 1);
        CHECK_MSG(cJSON_IsString(wa) && !strcmp(asm_args[k].p, wa->valuestring), "'%s' call %d: streamed %s, whole %s", out, k,
                  asm_args[k].p, cJSON_IsString(wa) ? wa->valuestring : "?");
        CHECK(!strcmp(names[k].p, cJSON_GetObjectItemCaseSensitive(wf, "name")->valuestring));
        cJSON *parsed = cJSON_IsString(wa) ? cJSON_Parse(wa->valuestring) : NULL; /* the arguments are a JSON object */
        CHECK_MSG(cJSON_IsObject(parsed), "'%s' call %d: arguments %s", out, k, cJSON_IsString(wa) ? wa->valuestring : "?");
        cJSON_Delete(parsed);
    }
    CHECK_MSG(live ? before_end >= 2 : before_end == 0, "'%s': %d argument pieces before the end", out, before_end);
    cJSON_Delete(w);
    for (int k = 0; k < 4; k++) sb_free(&asm_args[k]), sb_free(&names[k]);
    sb_free(&whole), sb_free(&got), sb_free(&reasoning);
    chat_out_free(co);
}

int main(void) {
    const want_call w1[] = {{"get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}"}};
    const want_call w2[] = {{"get_weather", "{\"city\":\"Paris\"}"}, {"get_time", "{\"tz\":\"CET\"}"}};

    /* Hermes / Qwen2.5 / Qwen3 */
    check(TOOL_FMT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
          "", 1, w1, 64);
    check(TOOL_FMT_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>", "Let me check.\n", 2, w2, 64);
    check(TOOL_FMT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>", "", 1, w2, 1); /* parallel off */
    /* arguments as a JSON string; a missing closing tag at the end of the output */
    check(TOOL_FMT_HERMES, "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":\\\"c\\\"}\"}",
          "", 1, w1, 64);
    /* malformed: come back whole as content */
    const char *bad_h[] = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>[1,2]</tool_call>",
                           "<tool_call></tool_call>", "<tool_call>", "text <tool_call>{\"name\": 5}</tool_call> more",
                           "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", "<tool_", "plain answer, no call"};
    for (size_t i = 0; i < sizeof bad_h / sizeof *bad_h; i++) check(TOOL_FMT_HERMES, bad_h[i], bad_h[i], 0, NULL, 64);

    /* Llama 3.1-3.3 */
    check(TOOL_FMT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}", "", 1, w1, 64);
    check(TOOL_FMT_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}", "", 1,
          w1, 64);
    check(TOOL_FMT_LLAMA3, "  \n{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}",
          "", 1, w1, 64);
    const char *bad_l[] = {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par", "{\"city\": \"Paris\"}",
                           "The weather is {sunny}", "{}", "{\"name\": \"\", \"parameters\": {}}", "Hello there"};
    for (size_t i = 0; i < sizeof bad_l / sizeof *bad_l; i++) check(TOOL_FMT_LLAMA3, bad_l[i], bad_l[i], 0, NULL, 64);

    /* Mistral */
    check(TOOL_FMT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
          "\"arguments\": {\"tz\": \"CET\"}}]", "", 2, w2, 64);
    check(TOOL_FMT_MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}]", "", 1, w1, 64);
    check(TOOL_FMT_MISTRAL, "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}]",
          "Sure. ", 1, w1, 64);
    const char *bad_m[] = {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\"", "[TOOL_CALLS][]", "[1, 2, 3]",
                           "[TOOL_CALLS] nothing", "[link](http://x)"};
    for (size_t i = 0; i < sizeof bad_m / sizeof *bad_m; i++) check(TOOL_FMT_MISTRAL, bad_m[i], bad_m[i], 0, NULL, 64);

    /* generic JSON */
    check(TOOL_FMT_GENERIC, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
          "\"get_time\", \"arguments\": {\"tz\": \"CET\"}}]}", "", 2, w2, 64);
    check(TOOL_FMT_GENERIC, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}", "", 1, w1, 64);
    const char *bad_g[] = {"{\"answer\": 42}", "{\"name\": \"x\", \"arguments\": 5}", "{{{{", "[", "ok", "",
                           "\xff\xfe{\"name\": \"get_weather\"}"};
    for (size_t i = 0; i < sizeof bad_g / sizeof *bad_g; i++) check(TOOL_FMT_GENERIC, bad_g[i], bad_g[i], 0, NULL, 64);

    /* random bytes never crash and never lose text */
    uint64_t x = 88172645463325252ull;
    for (int r = 0; r < 300; r++) {
        char buf[64];
        static const char alpha[] = "<tool_call>/{}[]\":,namearguments TOOL_CALLS|python_tag";
        int n = (int)(x % 63);
        for (int i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; buf[i] = alpha[x % (sizeof alpha - 1)]; }
        buf[n] = 0;
        for (int f = 0; f <= TOOL_FMT_MISTRAL; f++) {
            size_t cl;
            tool_call *c;
            int k = tool_calls_parse((tool_format)f, buf, (size_t)n, 64, &cl, &c);
            CHECK(k > 0 || cl == (size_t)n);
            tool_calls_free(c, k);
        }
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    }

    /* format detection from template sources */
    CHECK(tool_format_detect("{% for t in tools %}<tool_call>{{ t }}</tool_call>{% endfor %}") == TOOL_FMT_HERMES);
    CHECK(tool_format_detect("<|start_header_id|>ipython{{ '<|python_tag|>' }}") == TOOL_FMT_LLAMA3);
    CHECK(tool_format_detect("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}") == TOOL_FMT_MISTRAL);
    CHECK(tool_format_detect("{{ messages }}") == TOOL_FMT_GENERIC);
    CHECK(tool_format_detect(NULL) == TOOL_FMT_GENERIC);

    /* reasoning */
    check_think(0, "<think>\nplan it\n</think>\n\nThe answer.", "\nplan it\n", "The answer.");
    check_think(1, "plan it</think>The answer.", "plan it", "The answer.");
    check_think(0, "No thinking here.", "", "No thinking here.");
    check_think(0, "  <thin", "", "  <thin");
    check_think(1, "still thinking </thi", "still thinking </thi", "");
    check_think(0, "<think></think>", "", "");
    CHECK(prompt_opens_think("assistant: <think>\n", 19));
    CHECK(!prompt_opens_think("assistant: <think></think>", 26));
    CHECK(template_thinks("{{ '<think>' }}{{ '</think>' }}") && !template_thinks("plain"));

    /* streamed deltas (name first, arguments in pieces as generated) assemble to the non-streamed calls */
    check_deltas(TOOL_FMT_HERMES, "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\u00e3o Paulo, Brasil\", "
                 "\"days\": [1, 2, 3], \"note\": \"a long enough value to need several pieces\"}}\n</tool_call>", "Sure.", 1, 1);
    check_deltas(TOOL_FMT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"q\": \"a \\\"quoted\\\" {brace}\"}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\", \"nested\": {\"a\": [1, {\"b\": null}]}}}\n</tool_call>", "", 2, 1);
    check_deltas(TOOL_FMT_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}", "", 1, 1);
    check_deltas(TOOL_FMT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                 "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]", "", 2, 1);
    check_deltas(TOOL_FMT_GENERIC, "  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "", 1, 1);
    /* shapes left to the whole parse: still the same calls, sent at the end */
    check_deltas(TOOL_FMT_HERMES, "<tool_call>{\"arguments\": {\"city\": \"Paris\"}, \"name\": \"get_weather\"}</tool_call>", "", 1, 0);
    check_deltas(TOOL_FMT_GENERIC, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}", "", 1, 0);
    /* not a call: content */
    check_deltas(TOOL_FMT_HERMES, "No tools needed.", "No tools needed.", 0, 0);

    /* tool_choice: the triple for the sampler */
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]");
    http_error e;
    CHECK(tools_validate(tools, &e) == 0);
    char *g = NULL;
    const char *pre, *suf;
    CHECK(tool_choice_constraint(TOOL_FMT_HERMES, tools, "get_weather", 1, &g, &pre, &suf, &e) == 0);
    CHECK(pre && !strcmp(pre, "<tool_call>\n") && suf && !strcmp(suf, "\n</tool_call>"));
    CHECK_MSG(g && !strcmp(g, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":{\"type\":"
                              "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}},\"required\":"
                              "[\"name\",\"arguments\"],\"additionalProperties\":false}"), "%s", g ? g : "(null)");
    /* what the constraint makes the model write parses back to the call */
    {
        const char *out = "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>";
        size_t cl;
        tool_call *c;
        CHECK(tool_calls_parse(TOOL_FMT_HERMES, out, strlen(out), 64, &cl, &c) == 1 && !strcmp(c[0].name, "get_weather"));
        tool_calls_free(c, 1);
    }
    free(g);
    CHECK(tool_choice_constraint(TOOL_FMT_LLAMA3, tools, NULL, 1, &g, &pre, &suf, &e) == 0);
    CHECK(!pre && !suf && g && strstr(g, "\"anyOf\":[") && strstr(g, "\"parameters\":") && strstr(g, "{\"const\":\"get_time\"}"));
    free(g);
    CHECK(tool_choice_constraint(TOOL_FMT_MISTRAL, tools, NULL, 0, &g, &pre, &suf, &e) == 0);
    CHECK(g && !strncmp(g, "{\"type\":\"array\",\"items\":{\"anyOf\"", 32) && strstr(g, "\"maxItems\":1"));
    free(g);
    CHECK(tool_choice_constraint(TOOL_FMT_HERMES, tools, "nope", 1, &g, &pre, &suf, &e) == 400 && !g);
    CHECK(strstr(e.message, "'nope'") != NULL);
    cJSON *bad = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"parameters\":{}}}]");
    CHECK(tools_validate(bad, &e) == 400);
    cJSON_Delete(bad);
    bad = cJSON_Parse("[{\"type\":\"retrieval\"}]");
    CHECK(tools_validate(bad, &e) == 400);
    cJSON_Delete(bad);
    cJSON_Delete(tools);
    return test_report("test_tool_calls");
}
