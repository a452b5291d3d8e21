/*
 * bench_load.c - how long opening a model takes, beside the cost of merely
 * reading its bytes, measured in the same run.
 *
 * An .xllm file is mmap-ed and its tensor table parsed; no weight is copied,
 * so loading should cost a small fraction of one pass over the file. Printed:
 * load time (open + verify + parse + bind + scratch/KV allocation), the time
 * of a sequential read of the whole file (page cache warm), and their ratio.
 *
 *   bench_load MODEL [-r 5]
 */
#include "xllm.h"
#include "../tools/options_env.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* read the file once through a 4 MiB buffer; returns bytes read */
static double read_all(const char *path, double *seconds) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    size_t cap = 4 << 20;
    char *buf = malloc(cap);
    double t0 = now(), total = 0;
    ssize_t n;
    unsigned long sink = 0;
    while ((n = read(fd, buf, cap)) > 0) {
        total += (double)n;
        sink += (unsigned char)buf[n / 2];
    }
    *seconds = now() - t0;
    close(fd);
    free(buf);
    return total + (double)(sink & 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.xllm [-r REPEATS]\n", argv[0]);
        return 1;
    }
    int R = 5;
    if (argc >= 4 && !strcmp(argv[2], "-r")) R = atoi(argv[3]);
    double read_s = 0, bytes = read_all(argv[1], &read_s); /* also warms the page cache */
    read_all(argv[1], &read_s);
    double best = 1e9, sum = 0;
    for (int r = 0; r < R; r++) {
        xllm_error err;
        xllm_model_options o = xllm_model_options_default();
        cli_model_options_from_env(&o); /* XLLM_CPU, XLLM_PLAN, ... as the CLI */
        o.max_batch_seqs = 1;
        o.max_context = 256;
        double t0 = now();
        xllm_model *m = xllm_model_load(argv[1], &o, &err);
        double t = now() - t0;
        if (!m) {
            fprintf(stderr, "error: %s\n", err.message);
            return 1;
        }
        xllm_model_free(m);
        sum += t;
        if (t < best) best = t;
    }
    printf("model              %s (%.1f MB)\n", argv[1], bytes / 1e6);
    printf("load               %.2f ms mean of %d, best %.2f ms\n", 1e3 * sum / R, R, 1e3 * best);
    printf("read whole file    %.2f ms (%.1f GB/s, page cache warm)\n", 1e3 * read_s, bytes / read_s / 1e9);
    printf("load / read        %.4f\n", (sum / R) / read_s);
    return 0;
}
