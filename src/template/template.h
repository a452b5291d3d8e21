/*
 * template.h - the chat-template interpreter as the rest of libxllm sees it:
 * compile a Jinja2 template once, render it many times with JSON inputs.
 * The interpreter itself is described in tpl.h and docs/ARCHITECTURE.md.
 */
#ifndef XLLM_TEMPLATE_TEMPLATE_H
#define XLLM_TEMPLATE_TEMPLATE_H

#include <stddef.h>
#include "xllm.h"

typedef struct tpl_template tpl_template;

/* Compile template source (UTF-8). On failure returns NULL and fills err
 * ("chat template line N: ..."). Free with tpl_free. */
tpl_template *tpl_compile(const char *src, size_t len, xllm_error *err);
void tpl_free(tpl_template *t);

/* Render with the variables HuggingFace's apply_chat_template passes:
 * messages (a JSON array), then add_generation_prompt=false, tools=None,
 * documents=None, then the members of base_json (special tokens from
 * tokenizer_config), then those of vars_json (the caller's), later ones
 * overriding earlier ones; both are JSON objects or NULL.
 * *out (NUL-terminated, xllm_free) holds *out_len bytes. */
xllm_status tpl_render(const tpl_template *t, const char *messages_json, const char *base_json, const char *vars_json,
                       char **out, size_t *out_len, xllm_error *err);

/* Limits: the rendered text, and the memory one render may use. */
#define TPL_MAX_OUTPUT ((size_t)64 << 20)
#define TPL_MAX_MEMORY ((size_t)512 << 20)

#endif
