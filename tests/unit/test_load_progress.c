/*
 * test_load_progress.c - xllm_model_options.progress: a load reports stage
 * "loading" from 0 to 1 (never backwards, nothing above 1), then "planning"
 * 0 and 1 when it plans; a model whose weights are repacked for the kernels
 * (q4 on avx2/avx512) also reports fractions in between. Every format: an HF
 * directory, a GGUF file and an .xllm file (converted here to q4). A failing
 * load reports nothing after its error, and no callback means no reports.
 */
#include "test.h"
#include "xllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int n, n_between, n_plan, bad;
    char last_stage[32];
    double last;
} seen;

static void cb(void *user, const char *stage, double f) {
    seen *s = user;
    s->n++;
    if (!(f >= 0 && f <= 1)) s->bad = 1;
    if (!strcmp(stage, "loading")) {
        if (strcmp(s->last_stage, "") && strcmp(s->last_stage, "loading")) s->bad = 1; /* loading comes first */
        if (!strcmp(s->last_stage, "loading") && f < s->last) s->bad = 1;
        if (f > 0 && f < 1) s->n_between++;
    } else if (!strcmp(stage, "planning")) {
        if (strcmp(s->last_stage, "loading") && strcmp(s->last_stage, "planning")) s->bad = 1;
        if (!strcmp(s->last_stage, "loading") && s->last != 1.0) s->bad = 1; /* loading ended at 1 */
        s->n_plan++;
    } else {
        s->bad = 1;
    }
    snprintf(s->last_stage, sizeof s->last_stage, "%s", stage);
    s->last = f;
}

static seen load(const char *path, int plan) {
    seen s;
    memset(&s, 0, sizeof s);
    xllm_model_options o = xllm_model_options_default();
    o.no_plan = !plan;
    o.plan_cache = NULL;
    o.n_threads = 1;
    o.progress = cb;
    o.progress_user = &s;
    xllm_error err;
    xllm_model *m = xllm_model_load(path, &o, &err);
    CHECK_MSG(m != NULL, "%s: %s", path, m ? "" : err.message);
    xllm_model_free(m);
    CHECK_MSG(!s.bad && s.n >= 2 && !strcmp(s.last_stage, plan ? "planning" : "loading") && s.last == 1.0,
              "%s: %d reports, last %s %g, bad %d", path, s.n, s.last_stage, s.last, s.bad);
    CHECK_MSG(plan ? s.n_plan == 2 : s.n_plan == 0, "%s: %d planning reports", path, s.n_plan);
    fprintf(stderr, "  %-60s %d reports, %d between 0 and 1\n", path, s.n, s.n_between);
    return s;
}

int main(void) {
    const char *src = XLLM_SOURCE_DIR "/models/stories260k";
    load(src, 0);
    load(src, 1);
    load(XLLM_SOURCE_DIR "/tests/data/gguf/stories260k.gguf", 0);
    char dir[] = "/tmp/xllm-progress-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/q4.xllm", dir);
    xllm_error err;
    xllm_convert_options co = xllm_convert_options_default();
    co.dtype = "q4";
    CHECK_MSG(xllm_convert(XLLM_SOURCE_DIR "/tests/data/tiny/llama", path, &co, &err) == XLLM_OK, "%s", err.message);
    seen s = load(path, 1);
#if defined(__x86_64__)
    /* avx2 and avx512 repack q4 matrices at load: the weights' progress shows in between */
    const char *rp = getenv("XLLM_REPACK");
    if (__builtin_cpu_supports("avx2") && !(rp && !strcmp(rp, "0")))
        CHECK_MSG(s.n_between >= 1, "q4 .xllm: no fraction between 0 and 1 (%d reports)", s.n);
#else
    (void)s;
#endif
    /* a failed load: no report after the error; and nothing without a callback */
    seen f;
    memset(&f, 0, sizeof f);
    xllm_model_options o = xllm_model_options_default();
    o.progress = cb;
    o.progress_user = &f;
    CHECK(xllm_model_load(XLLM_SOURCE_DIR "/no/such/model", &o, &err) == NULL && f.n == 0);
    unlink(path);
    rmdir(dir);
    return test_report("test_load_progress");
}
