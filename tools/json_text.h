/*
 * json_text.h - JSON string literals with exact bytes, for the CLI.
 *
 * cJSON stores strings NUL-terminated, so a "\u0000" inside text is lost;
 * tokenizer conformance needs every byte. These read one string member of a
 * (already validated) JSON object line and write length-delimited strings.
 */
#ifndef XLLM_TOOLS_JSON_TEXT_H
#define XLLM_TOOLS_JSON_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* Find top-level member `key` of the JSON object in `json` and decode its
 * string value into *out (malloc, NUL-terminated) / *len. 0 on success. */
int json_object_string(const char *json, const char *key, char **out, size_t *len);
/* Write s[0..len) as a JSON string literal. */
void json_write_string(FILE *f, const char *s, size_t len);

#endif
