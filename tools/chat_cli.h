/*
 * chat_cli.h - the chat-template side of the `xllm` command: the `template`
 * subcommand, and the options `run --chat` shares with it (messages file,
 * --tools, --var NAME=JSON, --template NAME).
 */
#ifndef XLLM_TOOLS_CHAT_CLI_H
#define XLLM_TOOLS_CHAT_CLI_H

#include <stddef.h>

typedef struct chat_opts {
    const char *messages_file;  /* --messages FILE (JSON array), "-" = stdin */
    const char *tools_file;     /* --tools FILE (JSON array) */
    const char *template_name;  /* --template NAME */
    const char *template_file;  /* --chat-template FILE (Jinja source) */
    int add_generation_prompt;
    const char *vars[64];       /* --var NAME=JSON */
    int n_vars;
} chat_opts;

/* Consume argv[*i] (and its value) when it is one of the options above:
 * 1 consumed, 0 not ours, -1 error (printed). */
int chat_opts_parse(chat_opts *o, int argc, char **argv, int *i);

/* Render messages_json (or o->messages_file when NULL) with the template of
 * model_path (or o->template_file). *out is malloc-ed; 0 on success, else an
 * error was printed. */
int chat_render(const chat_opts *o, const char *model_path, const char *messages_json, char **out, size_t *out_len);

/* xllm template -m PATH --messages FILE.json [...]: print the rendered text. */
int cmd_template(int argc, char **argv);

#endif
