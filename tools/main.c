/*
 * main.c - the `xllm` command: one binary, git-style subcommands, built only
 * on the public API in xllm.h. This file only dispatches: each subcommand
 * lives in its own file (commands.h lists them).
 *
 *   xllm run      generate text (cmd_run.c)
 *   xllm logits   logits of a token sequence (cmd_logits.c)
 *   xllm tokenize run a tokenizer over a JSONL file (cmd_tokenize.c)
 *   xllm template render the model's chat template (chat_cli.c)
 *   xllm eval, convert, info, synth, bench, serve: cmd_*.c; help texts: help.c
 *
 * Every failure prints "xllm: error: ..." on stderr and exits with status 1
 * (cli.c words the shared ones: a missing model, an unknown option).
 */
#include "xllm.h"
#include "chat_cli.h"
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
} command;

static const command k_commands[] = {
    {"run", cmd_run},         {"logits", cmd_logits}, {"tokenize", cmd_tokenize}, {"template", cmd_template},
    {"eval", cmd_eval},       {"convert", cmd_convert}, {"info", cmd_info},       {"synth", cmd_synth},
    {"bench", cmd_bench},     {"serve", cmd_serve},
};

/* --backend NAME and --device N, on every command that loads a model (run,
 * serve, bench, logits, eval, ...): taken out of argv here and handed on as
 * XLLM_BACKEND / XLLM_DEVICE, which every command's model options read
 * (options_env.h). Returns 0, or 1 after printing what is wrong. */
static int take_backend_flags(int *argc, char **argv) {
    int o = 1;
    for (int i = 1; i < *argc; i++) {
        int b = !strcmp(argv[i], "--backend"), d = !strcmp(argv[i], "--device");
        if (!b && !d) {
            argv[o++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "xllm: %s needs a value (%s)\n", argv[i], b ? "cpu or vulkan" : "a device number, 0 = the first");
            return 1;
        }
        const char *v = argv[++i];
        if (d) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 0 || n > 15) {
                fprintf(stderr, "xllm: --device takes a device number 0..15 (xllm info --devices lists them), not '%s'\n", v);
                return 1;
            }
        }
        setenv(b ? "XLLM_BACKEND" : "XLLM_DEVICE", v, 1);
    }
    argv[o] = NULL;
    *argc = o;
    return 0;
}

int main(int argc, char **argv) {
    if (take_backend_flags(&argc, argv)) return 2;
    if (argc < 2) return cmd_run(argc, argv);
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof k_commands / sizeof *k_commands; i++)
        if (!strcmp(cmd, k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        /* xllm help CMD = xllm CMD --help */
        if (argc > 2 && !strcmp(cmd, "help") && cli_print_help(stdout, argv[2]) == 0) return 0;
        cli_print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("xllm %s\n", XLLM_VERSION);
        return 0;
    }
    /* options without a command are run's: xllm -p "Once upon a time" */
    if (cmd[0] == '-') return cmd_run(argc, argv);
    return cli_fail("unknown command \"%s\" (commands: run, logits, tokenize, template, eval, convert, info, synth, "
                "bench; see 'xllm --help')", cmd);
}
