/* profile_report.c - the --profile report: JSON file + stderr table (see profile_report.h). */
#include "profile_report.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdio.h>

int profile_write(const char *path) {
    xllm_error err;
    char *json;
    if (xllm_profile_report(&json, &err)) {
        fprintf(stderr, "xllm: error: %s\n", err.message);
        return 1;
    }
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", json) < 0 || fclose(f) != 0) {
        fprintf(stderr, "xllm: error: cannot write %s\n", path);
        xllm_free(json);
        return 1;
    }
    cJSON *root = cJSON_Parse(json);
    xllm_free(json);
    if (!root) return 0;
    fprintf(stderr, "\nkernel profile (%s): %.1f ms in operators\n", path,
            cJSON_GetObjectItem(root, "total_ms")->valuedouble);
    fprintf(stderr, "%-30s %10s %7s %9s %9s %9s\n", "operator", "ms", "share", "calls", "GFLOP/s", "GB/s");
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetObjectItem(root, "ops")) {
        /* a fused operator is reported under the operator it grew from, with what it absorbed */
        const cJSON *fused = cJSON_GetObjectItem(op, "fused");
        char name[96];
        snprintf(name, sizeof name, "%s%s%s", cJSON_GetObjectItem(op, "op")->valuestring,
                 cJSON_IsString(fused) ? " fused: " : "", cJSON_IsString(fused) ? fused->valuestring : "");
        fprintf(stderr, "%-30s %10.2f %6.1f%% %9.0f %9.2f %9.2f\n", name,
                cJSON_GetObjectItem(op, "ms")->valuedouble, 100 * cJSON_GetObjectItem(op, "share")->valuedouble,
                cJSON_GetObjectItem(op, "calls")->valuedouble, cJSON_GetObjectItem(op, "gflop_s")->valuedouble,
                cJSON_GetObjectItem(op, "gb_s")->valuedouble);
    }
    cJSON_Delete(root);
    return 0;
}
