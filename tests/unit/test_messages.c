/*
 * test_messages.c - a conversation as OpenAI clients send it after a tool
 * call (a developer message, an assistant turn with "content": null and
 * tool_calls whose arguments are a JSON string, a role "tool" result, content
 * as a list of text parts) rendered through every chat template we ship:
 * tests/data/templates (Qwen3, DeepSeek-V3; Llama 3, Llama 3.1 and Gemma 3
 * when the shared data is there), the bundled model's and the server tests'.
 * Each must render, never print "None", keep the developer text (as system
 * where the template lacks the role), the call's name and arguments (as an
 * object, not a quoted string) where the template writes calls, and the tool
 * result. Without the normalization Qwen3's template fails on content null.
 */
#include "test.h"
#include "base/file.h"
#include "server/chat_out.h"

#include <stdlib.h>
#include <string.h>

static const char *CONV =
    "[{\"role\":\"developer\",\"content\":\"Answer briefly, DEVTEXT.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather in \"},{\"type\":\"text\",\"text\":\"Paris?\"}]},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
    "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"TOOLRESULT 21C\"}]";

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";

static void one(const char *path, const char *name, int writes_calls, int alternates) {
    xllm_error xe;
    srv_model m;
    memset(&m, 0, sizeof m);
    m.name = (char *)name;
    size_t l = strlen(path);
    if (l > 6 && !strcmp(path + l - 6, ".jinja")) {
        size_t n;
        if (file_read_all(path, &m.tmpl_src, &n, &xe)) { CHECK_MSG(0, "%s: %s", name, xe.message); return; }
    } else if (!(m.tmpl = xllm_chat_template_load(path, &xe))) {
        fprintf(stderr, "SKIP %s: %s\n", name, xe.message);
        return;
    }
    chat_features_detect(&m);
    cJSON *msgs = cJSON_Parse(CONV), *tools = cJSON_Parse(TOOLS);
    if (alternates) { /* Gemma: roles must alternate user/assistant; keep the tool turn as user */
        cJSON *t = cJSON_GetArrayItem(msgs, 3);
        cJSON_ReplaceItemInObjectCaseSensitive(t, "role", cJSON_CreateString("user"));
    }
    cJSON *norm = NULL;
    http_error e;
    CHECK_MSG(chat_messages_normalize(&m, msgs, NULL, &norm, NULL, &e) == 0, "%s: %s", name, e.message);
    char *out = NULL;
    if (norm) {
        int st = render_chat(&m, norm, tools, NULL, &out, &e);
        CHECK_MSG(st == 0, "%s: %s", name, e.message);
    }
    if (out) {
        CHECK_MSG(!strstr(out, "None"), "%s: 'None' in\n%s", name, out);
        CHECK_MSG(strstr(out, "DEVTEXT") != NULL, "%s: the developer text is lost:\n%s", name, out);
        CHECK_MSG(strstr(out, "Weather in Paris?") != NULL, "%s: text parts not joined:\n%s", name, out);
        CHECK_MSG(strstr(out, "TOOLRESULT 21C") != NULL, "%s: the tool result is lost:\n%s", name, out);
        if (writes_calls) {
            CHECK_MSG(strstr(out, "get_weather") != NULL, "%s: the call is lost:\n%s", name, out);
            CHECK_MSG(strstr(out, "\"city\": \"Paris\"") || strstr(out, "\"city\":\"Paris\""), "%s: arguments:\n%s", name, out);
            CHECK_MSG(!strstr(out, "\\\"city"), "%s: arguments written as a quoted string:\n%s", name, out);
        }
        fprintf(stderr, "%s: ok (%zu bytes, tool format %s, thinks %d, developer %s)\n", name, strlen(out),
                tool_format_name((tool_format)m.tool_fmt), m.thinks, m.knows_developer ? "kept" : "-> system");
    }
    xllm_free(out);
    cJSON_Delete(norm);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    xllm_chat_template_free(m.tmpl);
    xllm_free(m.tmpl_src);
}

int main(void) {
    one(XLLM_SOURCE_DIR "/tests/data/templates/qwen3/tokenizer_config.json", "qwen3", 1, 0);
    one(XLLM_SOURCE_DIR "/tests/data/templates/deepseek_v3/tokenizer_config.json", "deepseek_v3", 1, 0);
    one(XLLM_SOURCE_DIR "/models/stories260k", "stories260k", 0, 0);
    one(XLLM_SOURCE_DIR "/tests/server/chat.jinja", "tests/server/chat.jinja", 0, 0);
    one(XLLM_SOURCE_DIR "/tests/server/think.jinja", "tests/server/think.jinja", 1, 0);
    static const struct { const char *name; int calls, alternates; } shared[] = {
        {"llama3", 0, 0}, {"llama3_1", 0, 0} /* this fixture's 3.1 template writes no calls */, {"gemma3", 0, 1}};
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/../shared/data/templates/%s/tokenizer_config.json", XLLM_SOURCE_DIR, shared[i].name);
        if (!path_exists(p))
            snprintf(p, sizeof p, "/work/shared/data/templates/%s/tokenizer_config.json", shared[i].name);
        if (!path_exists(p)) { fprintf(stderr, "SKIP %s: no shared template data\n", shared[i].name); continue; }
        one(p, shared[i].name, shared[i].calls, shared[i].alternates);
    }
    /* the normalization is what makes Qwen3 render: without it, content null fails */
    {
        xllm_error xe;
        xllm_chat_template *t = xllm_chat_template_load(XLLM_SOURCE_DIR "/tests/data/templates/qwen3/tokenizer_config.json", &xe);
        char *out = NULL;
        CHECK(t && xllm_chat_template_apply(t, NULL, CONV, "{\"add_generation_prompt\":true}", &out, NULL, &xe) != XLLM_OK);
        xllm_free(out);
        xllm_chat_template_free(t);
    }
    return test_report("test_messages");
}
