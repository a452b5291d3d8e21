/*
 * test.h - a minimal unit-test harness: CHECK records a failure with file and
 * line and continues; main returns test_report() (nonzero when any failed).
 */
#ifndef XLLM_TEST_H
#define XLLM_TEST_H

#include <math.h>
#include <stdio.h>

static int g_test_failures, g_test_checks;

#define CHECK(cond) do { g_test_checks++; if (!(cond)) { g_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { g_test_checks++; if (!(cond)) { g_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g", (double)(a), (double)(b))

static inline int test_report(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failures\n", name, g_test_checks, g_test_failures);
    return g_test_failures ? 1 : 0;
}

/* Source-tree root, for fixtures (set by CMake). */
#ifndef XLLM_SOURCE_DIR
#define XLLM_SOURCE_DIR "."
#endif

#endif
