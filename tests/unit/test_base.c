/* test_base.c - allocator accounting, dtype conversion, error formatting. */
#include "test.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"

#include <string.h>

int main(void) {
    size_t before = xllm_allocated_bytes();
    char *p = mem_malloc(100);
    CHECK(xllm_allocated_bytes() == before + 100);
    p = mem_realloc(p, 300);
    CHECK(xllm_allocated_bytes() == before + 300);
    xllm_free(p);
    CHECK(xllm_allocated_bytes() == before);
    void *a = mem_malloc_aligned(1000);
    CHECK(((uintptr_t)a & 63) == 0);
    mem_free_aligned(a);
    CHECK(xllm_allocated_bytes() == before);
    CHECK(mem_malloc_array((size_t)-1, 16) == NULL);

    /* f16: 1.0, -2.0, smallest subnormal, 65504, inf */
    uint16_t h[] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
    float f[5];
    dtype_to_f32(XLLM_DT_F16, h, f, 5);
    CHECK(f[0] == 1.0f && f[1] == -2.0f);
    CHECK_NEAR(f[2], 5.960464477539063e-08, 1e-15);
    CHECK(f[3] == 65504.0f);
    CHECK(isinf(f[4]));
    uint16_t b[] = {0x3f80, 0xc040};
    dtype_to_f32(XLLM_DT_BF16, b, f, 2);
    CHECK(f[0] == 1.0f && f[1] == -3.0f);

    xllm_error e;
    CHECK(err_setf(&e, XLLM_ERR_IO, "x %d", 5) == XLLM_ERR_IO);
    err_prefix(&e, "file.bin");
    CHECK(strcmp(e.message, "file.bin: x 5") == 0);
    return test_report("test_base");
}
