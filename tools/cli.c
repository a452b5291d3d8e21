/*
 * cli.c - the shared parts of the `xllm` command (see cli.h): messages,
 * the model-path check, the default model, progress lines and interrupts.
 */
#include "cli.h"
#include "xllm.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the progress whose bar line may be open: a message first ends that line */
static cli_progress *g_open;

static void end_open_line(void) {
    if (g_open) cli_progress_end(g_open);
}

int cli_fail(const char *fmt, ...) {
    end_open_line();
    va_list ap;
    va_start(ap, fmt);
    fputs("xllm: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

void cli_note(const char *fmt, ...) {
    end_open_line();
    va_list ap;
    va_start(ap, fmt);
    fputs("xllm: note: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_unknown_option(const char *cmd, const char *opt) {
    return cli_fail("%s for %s: %s (see 'xllm %s --help')", opt[0] == '-' ? "unknown option" : "unexpected argument",
                    cmd, opt, cmd);
}

int cli_needs_value(const char *opt) { return cli_fail("%s needs a value", opt); }

int cli_fail_err(const xllm_error *e) { return cli_fail("%s", e->message); }

const char *cli_arg_value(cli_args *a, const char *flag) {
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "xllm: error: %s needs a value\n", flag);
        a->bad = 1;
        return NULL;
    }
    return a->argv[++a->i];
}

int cli_opt_int(cli_args *a, const char *f, long lo, long hi, long *out) {
    const char *v = cli_arg_value(a, f);
    return v ? cli_int(f, v, lo, hi, out) : 1;
}

int cli_opt_float(cli_args *a, const char *f, double lo, double hi, int lo_open, float *out) {
    const char *v = cli_arg_value(a, f);
    return v ? cli_float(f, v, lo, hi, lo_open, out) : 1;
}

int cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 1, k = 0;
    for (const char *c = s; *c; c++) cap += *c == ','; /* at most one id per comma-separated field */
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',') || k == cap) {
            free(v);
            return 0;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (!k) { /* an empty list is not a prompt (and was leaked by the callers' error path) */
        free(v);
        return 0;
    }
    *ids = v;
    *n = k;
    return 1;
}

void cli_print_ids_json(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputc(']', f);
}

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

/* ---------------------------------------------------------- numeric values */

int cli_int(const char *flag, const char *v, long lo, long hi, long *out) {
    if (!v) return cli_needs_value(flag);
    char *end;
    errno = 0;
    /* strtol would skip spaces and take a sign: only digits (and '-' when negatives are allowed) lead */
    int lead_ok = (v[0] >= '0' && v[0] <= '9') || (v[0] == '-' && lo < 0);
    long x = lead_ok ? strtol(v, &end, 10) : 0;
    if (!lead_ok || errno || end == v || *end || x < lo || x > hi)
        return cli_fail("%s needs an integer from %ld to %ld, got \"%s\"", flag, lo, hi, v);
    *out = x;
    return 0;
}

int cli_float(const char *flag, const char *v, double lo, double hi, int lo_open, float *out) {
    if (!v) return cli_needs_value(flag);
    char *end;
    double x = (v[0] == '-' || v[0] == '.' || (v[0] >= '0' && v[0] <= '9')) ? strtod(v, &end) : NAN;
    /* strtod's ERANGE on underflow is fine (the value is ~0); overflow gives inf, refused below */
    if (!isfinite(x) || end == v || *end || x < lo || x > hi || (lo_open && (float)x <= (float)lo)) {
        if (lo_open) return cli_fail("%s needs a number above %g, up to %g, got \"%s\"", flag, lo, hi, v);
        return cli_fail("%s needs a number from %g to %g, got \"%s\"", flag, lo, hi, v);
    }
    *out = (float)x;
    return 0;
}

int cli_seed(const char *flag, const char *v, int random_ok, unsigned long long *out, int *has) {
    if (!v) return cli_needs_value(flag);
    if (random_ok && !strcmp(v, "-1")) {
        *has = 0;
        return 0;
    }
    char *end;
    errno = 0;
    int lead_ok = v[0] >= '0' && v[0] <= '9'; /* strtoull would take " -1" as 2^64 - 1 */
    unsigned long long x = lead_ok ? strtoull(v, &end, 10) : 0;
    if (!lead_ok || errno || *end)
        return cli_fail("%s needs an integer from 0 to 18446744073709551615%s, got \"%s\"", flag,
                        random_ok ? " (or -1: a random seed)" : "", v);
    *out = x;
    *has = 1;
    return 0;
}

/* ---------------------------------------------------------------- models */

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static int dir_looks_like_model(const char *path) {
    char buf[PATH_MAX + 32];
    struct stat st;
    snprintf(buf, sizeof buf, "%s/config.json", path);
    if (stat(buf, &st) == 0) return 1;
    DIR *d = opendir(path);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) found = has_suffix(e->d_name, ".safetensors");
    closedir(d);
    return found;
}

static int file_looks_like_model(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1; /* unreadable: let the library say why */
    unsigned char magic[8] = {0};
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return (n >= 4 && !memcmp(magic, "GGUF", 4)) || (n == 8 && !memcmp(magic, "XLLM\r\n\x1a\n", 8));
}

int cli_check_model(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return cli_fail("%s: no such model; a model is " CLI_MODEL_FORMATS, path ? path : "(none)");
    if (S_ISDIR(st.st_mode) ? dir_looks_like_model(path) : file_looks_like_model(path)) return 0;
    return cli_fail("%s: not a model; a model is " CLI_MODEL_FORMATS, path);
}

#ifndef XLLM_SOURCE_MODEL
#define XLLM_SOURCE_MODEL ""
#endif

const char *cli_default_model(char *buf, size_t cap) {
    const char *env = getenv("XLLM_MODEL");
    if (env && *env) return env;
    struct stat st;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *dir = dirname(exe);
        /* installed (<prefix>/bin -> <prefix>/share/xllm), the build directory
         * inside the repository (build/ -> models/), deeper build trees */
        const char *rel[] = {"/../share/xllm/models/stories260k", "/../models/stories260k",
                             "/../../models/stories260k", "/models/stories260k"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(buf, cap, "%s%s", dir, rel[i]);
            if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) return buf;
        }
    }
    /* the source tree this binary was built from */
    if (XLLM_SOURCE_MODEL[0] && stat(XLLM_SOURCE_MODEL, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(buf, cap, "%s", XLLM_SOURCE_MODEL);
        return buf;
    }
    if (stat("models/stories260k", &st) == 0 && S_ISDIR(st.st_mode)) return "models/stories260k";
    return NULL;
}

/* -------------------------------------------------------------- progress */

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_init(cli_progress *p, const char *command) {
    memset(p, 0, sizeof *p);
    p->command = command;
    p->tty = isatty(2);
    p->t0 = cli_now();
    p->pct = -1;
}

void cli_progress_cb(void *user, const char *stage, double f) {
    cli_progress *p = user;
    if (!stage) stage = "working";
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    int pct = (int)(f * 100.0);
    if (strcmp(stage, p->stage)) {
        cli_progress_end(p);
        snprintf(p->stage, sizeof p->stage, "%s", stage);
        p->pct = -1;
    }
    double el = cli_now() - p->t0;
    if (p->tty) {
        if (pct == p->pct) return;
        p->pct = pct;
        char bar[31];
        int fill = pct * 30 / 100;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r%-13s [%s] %3d%%  %6.1f s", stage, bar, pct, el);
        p->open_line = 1;
        g_open = p;
        if (pct >= 100) cli_progress_end(p);
    } else {
        /* a log: each tenth, once */
        int step = pct / 10 * 10;
        if (step <= p->pct) return;
        p->pct = step;
        fprintf(stderr, "xllm %s: %-12s %3d%%  (%.1f s)\n", p->command, stage, step, el);
    }
    fflush(stderr);
}

void cli_progress_end(cli_progress *p) {
    if (p->open_line) {
        fputc('\n', stderr);
        fflush(stderr);
        p->open_line = 0;
    }
    if (g_open == p) g_open = NULL;
}

const char *cli_size(double b, char *buf, size_t cap) {
    if (b >= 1e9) snprintf(buf, cap, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, cap, "%.1f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, cap, "%.1f kB", b / 1e3);
    else snprintf(buf, cap, "%.0f B", b);
    return buf;
}

/* ------------------------------------------------------------------ busy */

/* Seconds before a step says it is running (XLLM_PROGRESS_AFTER overrides:
 * tests and impatient users). */
static double busy_after(void) {
    const char *e = getenv("XLLM_PROGRESS_AFTER");
    char *end;
    double v = e ? strtod(e, &end) : 2.0;
    return e && end != e && *end == 0 && v >= 0 && v < 3600 ? v : 2.0;
}

typedef struct busy_state {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, printed, tty;
    double t0;
    char what[512];
    char stage[48];   /* from the step's progress callback ("" = none yet) */
    double frac;
    int shown;        /* log: stage and tenth last printed (tenth + 11 * stage changes) */
    char shown_stage[48];
} busy_state;

static void deadline_in(struct timespec *ts, double s) {
    clock_gettime(CLOCK_REALTIME, ts);
    long ns = ts->tv_nsec + (long)((s - (double)(long)s) * 1e9);
    ts->tv_sec += (time_t)s + ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

/* One report (b->mu held): on a terminal a line redrawn in place; in a log a
 * line per stage and tenth, with the elapsed time. */
static void busy_show(busy_state *b) {
    double el = cli_now() - b->t0;
    int pct = (int)(b->frac * 100.0);
    if (b->tty) {
        if (b->stage[0]) fprintf(stderr, "\r%s: %-10s %3d%%  %.0f s   ", b->what, b->stage, pct, el);
        else fprintf(stderr, "\r%s ... %.0f s", b->what, el);
    } else {
        int tenth = pct / 10;
        int same_stage = !strcmp(b->stage, b->shown_stage);
        if (b->printed && same_stage && tenth <= b->shown) return;
        if (b->stage[0]) fprintf(stderr, "xllm: %s: %-10s %3d%%  (%.1f s)\n", b->what, b->stage, tenth * 10, el);
        else if (!b->printed) fprintf(stderr, "xllm: %s ...\n", b->what);
        b->shown = tenth;
        snprintf(b->shown_stage, sizeof b->shown_stage, "%s", b->stage);
    }
    fflush(stderr);
    b->printed = 1;
}

static void *busy_main(void *arg) {
    busy_state *b = arg;
    struct timespec ts;
    pthread_mutex_lock(&b->mu);
    deadline_in(&ts, busy_after());
    while (!b->done && pthread_cond_timedwait(&b->cv, &b->mu, &ts) == 0) {
    }
    while (!b->done) {
        busy_show(b);
        deadline_in(&ts, b->tty ? 0.5 : 0.25);
        while (!b->done && pthread_cond_timedwait(&b->cv, &b->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

void cli_busy_progress(void *user, const char *stage, double f) {
    busy_state *b = user;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    snprintf(b->stage, sizeof b->stage, "%s", stage ? stage : "");
    b->frac = f < 0 ? 0 : f > 1 ? 1 : f;
    /* past the threshold, a log gets each stage and tenth as it happens (the thread polls in between) */
    if (!b->tty && cli_now() - b->t0 >= busy_after()) busy_show(b);
    pthread_mutex_unlock(&b->mu);
}

void cli_busy_begin(cli_busy *h, const char *what) {
    busy_state *b = calloc(1, sizeof *b);
    h->impl = NULL;
    if (!b) return;
    snprintf(b->what, sizeof b->what, "%s", what);
    b->tty = isatty(2);
    b->t0 = cli_now();
    b->shown = -1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (pthread_create(&b->thread, NULL, busy_main, b) != 0) {
        free(b);
        return;
    }
    h->impl = b;
}

void cli_busy_end(cli_busy *h) {
    busy_state *b = h->impl;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    if (b->printed) {
        if (b->tty) fprintf(stderr, "\r%s ... done in %.1f s%20s\n", b->what, cli_now() - b->t0, "");
        else fprintf(stderr, "xllm: %s: done in %.1f s\n", b->what, cli_now() - b->t0);
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    h->impl = NULL;
}

xllm_model *cli_load_model(const char *path, const xllm_model_options *opts, xllm_error *err, int quiet) {
    cli_busy b = {NULL};
    char what[600];
    snprintf(what, sizeof what, "loading %s", path);
    if (!quiet) cli_busy_begin(&b, what);
    xllm_model_options o = opts ? *opts : xllm_model_options_default();
    cli_model_options_from_env(&o);
    if (b.impl && !o.progress) { /* the library's stages and percentages (xllm_model_options.progress) */
        o.progress = cli_busy_progress;
        o.progress_user = b.impl;
    }
    xllm_model *m = xllm_model_load(path, &o, err);
    cli_busy_end(&b);
    return m;
}

/* ------------------------------------------------------------ interrupts */

static void on_interrupt(int sig) {
    xllm_remove_temp_files();
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_remove_temps_on_interrupt(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        /* a signal ignored on entry (nohup, a background job) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}
