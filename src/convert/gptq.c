/* gptq.c - column-by-column quantization with error feedback (see gptq.h). */
#include "convert/gptq.h"
#include "base/alloc.h"
#include "base/error.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* In-place lower Cholesky factor of the n x n matrix a (row-major). 0 on success. */
static int cholesky(double *a, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int64_t k = 0; k < j; k++) s -= a[j * n + k] * a[j * n + k];
        if (!(s > 0)) return -1;
        double l = sqrt(s);
        a[j * n + j] = l;
        for (int64_t i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (int64_t k = 0; k < j; k++) t -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = t / l;
        }
        for (int64_t k = j + 1; k < n; k++) a[j * n + k] = 0;
    }
    return 0;
}

/* u = upper Cholesky factor of H^-1 (H^-1 = u^T u), with damping added to H. */
static int inverse_factor(const double *H, int64_t n, double damp, double *u, double *tmp) {
    double mean = 0;
    for (int64_t i = 0; i < n; i++) mean += H[i * n + i];
    mean = mean / (double)n;
    if (!(mean > 0)) mean = 1;
    memcpy(tmp, H, sizeof(double) * (size_t)(n * n));
    for (int64_t i = 0; i < n; i++) tmp[i * n + i] += damp * mean + (H[i * n + i] == 0 ? 1.0 : 0.0);
    if (cholesky(tmp, n)) return -1; /* tmp = L */
    /* Linv (lower) into u */
    memset(u, 0, sizeof(double) * (size_t)(n * n));
    for (int64_t i = 0; i < n; i++) {
        u[i * n + i] = 1.0 / tmp[i * n + i];
        for (int64_t j = 0; j < i; j++) {
            double s = 0;
            for (int64_t k = j; k < i; k++) s += tmp[i * n + k] * u[k * n + j];
            u[i * n + j] = -s / tmp[i * n + i];
        }
    }
    /* H^-1 = Linv^T Linv into tmp */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            double s = 0;
            for (int64_t k = i; k < n; k++) s += u[k * n + i] * u[k * n + j];
            tmp[i * n + j] = tmp[j * n + i] = s;
        }
    if (cholesky(tmp, n)) return -1; /* H^-1 = M M^T, M lower */
    for (int64_t i = 0; i < n; i++) /* u = M^T (upper) */
        for (int64_t j = 0; j < n; j++) u[i * n + j] = tmp[j * n + i];
    return 0;
}

xllm_status gptq_quantize(dtype_t t, int group, float *W, int64_t rows, int64_t cols, const double *H, void *out,
                          xllm_error *err) {
    size_t nn = (size_t)(cols * cols), ng = (size_t)(cols / group);
    double *u = mem_malloc_array(nn, sizeof(double)), *tmp = mem_malloc_array(nn, sizeof(double));
    float *imp = mem_malloc_array((size_t)cols, sizeof(float));
    float *d = mem_malloc_array((size_t)rows * ng, sizeof(float)), *m = mem_malloc_array((size_t)rows * ng, sizeof(float));
    int8_t *q = mem_malloc_array((size_t)(rows * cols), 1);
    xllm_status st = XLLM_OK;
    if (!u || !tmp || !imp || !d || !m || !q) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory for GPTQ (%lld columns)", (long long)cols);
        goto done;
    }
    int ok = -1;
    for (double damp = 0.01; damp < 10 && ok; damp *= 10) ok = inverse_factor(H, cols, damp, u, tmp);
    if (ok) {
        st = err_setf(err, XLLM_ERR_FORMAT, "GPTQ: calibration matrix is not positive definite");
        goto done;
    }
    for (int64_t i = 0; i < cols; i++) imp[i] = (float)(H[i * cols + i] + 1e-12);
    for (int64_t j0 = 0; j0 < cols; j0 += group) {
        int64_t g = j0 / group;
        for (int64_t r = 0; r < rows; r++)
            quant_group_params(t, group, W + r * cols + j0, imp + j0, &d[(size_t)r * ng + g], &m[(size_t)r * ng + g]);
        for (int64_t j = j0; j < j0 + group; j++) {
            double ujj = u[j * cols + j];
            const double *urow = u + j * cols;
            for (int64_t r = 0; r < rows; r++) {
                float *w = W + r * cols;
                float dd = d[(size_t)r * ng + g], mm = m[(size_t)r * ng + g];
                int lvl = quant_level(t, w[j], dd, mm);
                q[r * cols + j] = (int8_t)lvl;
                double e = ((double)w[j] - quant_value(t, lvl, dd, mm)) / ujj;
                for (int64_t k = j + 1; k < cols; k++) w[k] -= (float)(e * urow[k]);
            }
        }
    }
    size_t rb = quant_row_bytes(t, group, cols);
    for (int64_t r = 0; r < rows; r++)
        quant_pack_row(t, group, q + r * cols, d + (size_t)r * ng, m + (size_t)r * ng, cols, (char *)out + (size_t)r * rb);
done:
    xllm_free(u);
    xllm_free(tmp);
    xllm_free(imp);
    xllm_free(d);
    xllm_free(m);
    xllm_free(q);
    return st;
}
