/*
 * cli.h - what every subcommand of the `xllm` command shares, so that each
 * kind of failure is worded once: errors and notices on stderr, the check
 * that a model path names something xllm reads, --help and unknown options,
 * progress (a bar on a terminal, stage lines in a log) with elapsed time,
 * and removing temporary files when the command is interrupted.
 *
 * All of it is for the single-threaded command line: not thread-safe.
 */
#ifndef XLLM_TOOLS_CLI_H
#define XLLM_TOOLS_CLI_H

#include "xllm.h"
#include "options_env.h"

#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* The formats a model may come in, as every "not a model" message lists them. */
#define CLI_MODEL_FORMATS \
    "a HuggingFace checkpoint directory (config.json + *.safetensors), an .xllm file or a GGUF file"

/* "xllm: error: <message>\n" on stderr; returns 1 (the exit status). */
CLI_PRINTF(1, 2) int cli_fail(const char *fmt, ...);
/* cli_fail with the library's message. */
int cli_fail_err(const xllm_error *e);
/* "xllm: note: <message>\n" on stderr: a cap, a fallback, a default taken. */
CLI_PRINTF(1, 2) void cli_note(const char *fmt, ...);

/* "unknown option for CMD: OPT (see 'xllm CMD --help')" (or "unexpected
 * argument" for one without a leading '-'); returns 1. */
int cli_unknown_option(const char *cmd, const char *opt);
/* "OPT needs a value"; returns 1. */
int cli_needs_value(const char *opt);
/* A command's arguments, walked by index: cli_arg_value takes the value
 * after flag (a->i moves onto it), or prints "FLAG needs a value" and sets
 * bad; cli_opt_int / cli_opt_float take it as a number (cli_int/cli_float). */
typedef struct cli_args {
    int argc, i;
    char **argv;
    int bad;
} cli_args;
const char *cli_arg_value(cli_args *a, const char *flag);
int cli_opt_int(cli_args *a, const char *f, long lo, long hi, long *out);
int cli_opt_float(cli_args *a, const char *f, double lo, double hi, int lo_open, float *out);
/* "1,2,3" -> ids (malloc); 1 on success, 0 on a malformed or empty list. */
int cli_parse_ids(const char *s, int32_t **ids, size_t *n);
/* ids as a JSON array. */
void cli_print_ids_json(FILE *f, const int32_t *ids, size_t n);

/* Numeric option values, checked in one place. The whole value must be the
 * number, in range; otherwise "FLAG needs an integer from LO to HI, got
 * "V"" (or "... a number ...") and the function returns 1 (0 on success). A
 * NULL value is "FLAG needs a value".
 *   cli_int:   a decimal integer (a sign only where lo < 0).
 *   cli_float: a finite number ("inf" and "nan" are refused) in [lo, hi], or
 *              (lo, hi] with lo_open (after rounding to a float); a value too
 *              small for a float reads as 0.
 *   cli_seed:  a decimal integer from 0 to 2^64 - 1 (no sign, no space):
 *              *has = 1; with random_ok, "-1" (llama.cpp's spelling of a
 *              random seed) gives *has = 0. */
int cli_int(const char *flag, const char *v, long lo, long hi, long *out);
int cli_float(const char *flag, const char *v, double lo, double hi, int lo_open, float *out);
int cli_seed(const char *flag, const char *v, int random_ok, unsigned long long *out, int *has);

/* -h or --help */
int cli_is_help(const char *arg);
/* Print `xllm CMD --help` to f; 0 if CMD is known. */
int cli_print_help(FILE *f, const char *cmd);
/* The overview `xllm --help` prints. */
void cli_print_usage(FILE *f);

/* 0 when path exists and looks like a model (a directory with config.json or
 * *.safetensors, or a file starting with the .xllm or GGUF magic); else
 * prints "PATH: no such model ..." / "PATH: not a model ..." listing the
 * formats and returns 1. The library reports what is wrong inside a model. */
int cli_check_model(const char *path);

/* The default model: $XLLM_MODEL, else stories260k next to the installed
 * binary (<prefix>/share/xllm/models) or the build (<exe>/../models),
 * else ./models/stories260k. buf holds the path when one is found. */
const char *cli_default_model(char *buf, size_t cap);

/* seconds on a monotonic clock */
double cli_now(void);

/* Progress of one command ("convert", "synth", "bench"): on a terminal a bar
 * redrawn in place; otherwise one line per stage at 0, 10, ..., 100% with the
 * elapsed time ("xllm convert: calibrating  40%  (3.1 s)"). */
typedef struct cli_progress {
    const char *command;
    int tty;
    double t0;
    char stage[48];
    int pct;        /* last percentage shown for the stage, -1 = none */
    int open_line;  /* a bar is drawn without its newline */
} cli_progress;

void cli_progress_init(cli_progress *p, const char *command);
/* An xllm_progress_fn: user is the cli_progress. */
void cli_progress_cb(void *user, const char *stage, double fraction);
/* End an open bar line (before an error or the summary). */
void cli_progress_end(cli_progress *p);

/* A step that may report its own stages (loading a model: reading and
 * repacking the weights, planning): when it is still running after 2 s, a
 * thread says so on stderr ("xllm: loading MODEL: loading  40%  (3.1 s)" in
 * a log, redrawn on a terminal; "... " when the step reports nothing), and
 * end says how long it took. Nothing is printed for a quick step. */
typedef struct cli_busy {
    void *impl;
} cli_busy;
void cli_busy_begin(cli_busy *b, const char *what);
void cli_busy_end(cli_busy *b);
/* An xllm_progress_fn for a step's own stages (user: the cli_busy's impl):
 * once the step has run 2 s ($XLLM_PROGRESS_AFTER seconds when set), its
 * stage and percentage are shown (a line per stage and tenth in a log). */
void cli_busy_progress(void *user, const char *stage, double fraction);

/* xllm_model_load inside a cli_busy "loading PATH" with the library's load
 * progress (stages and percentages; quiet: no lines). */
xllm_model *cli_load_model(const char *path, const xllm_model_options *opts, xllm_error *err, int quiet);

/* SIGINT/SIGTERM remove the temporary files of writers in progress
 * (xllm_remove_temp_files), then end the process by the same signal. */
void cli_remove_temps_on_interrupt(void);

/* "1.2 MB" style size of n bytes into buf. */
const char *cli_size(double bytes, char *buf, size_t cap);

#endif
