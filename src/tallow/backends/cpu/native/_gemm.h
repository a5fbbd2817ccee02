/* tallow's f32 matrix product, as the other kernel modules see it.
 *
 * _gemm.c publishes one entry through a capsule (as _workers.c does the pool): a
 * product on the calling thread, for a module whose own task (one split over the
 * pool) contains products: the convolution builds an image's columns and multiplies
 * them in one task, so that no pass reads what another core wrote.
 * Without the module (not built, or not importable) tallow_gemm is NULL and the
 * caller keeps its other path.
 */
#ifndef TALLOW_GEMM_H
#define TALLOW_GEMM_H

#include <Python.h>
#include <stdint.h>

#include "_workers.h" /* tallow_capsule */

#define TALLOW_GEMM_CAPSULE "tallow.backends.cpu.native._gemm._C_API"
#define TALLOW_GEMM_ABI 5

/* A convolution's columns described, not built: row r's column j (output position j,
 * ow to an output row) is base[row_off[r] + (j / ow) * pitch + j % ow], a window of a
 * zero-margined (phase) plane. `transposed`: the product's b is their transpose (row j
 * = position j, column r = window r: a kernel gradient's cols^T). `in_place`: whole
 * 16-column panels are read where they lie by the AVX-512 build, not packed (the flat
 * columns of narrow outputs, one run per window). `read_past` (with in_place, and each
 * window one run: ow = pitch = the product's columns): a last part-panel is read in
 * place too, up to TALLOW_READ_PAST floats past a run's end (the caller leaves them
 * readable; their columns are never stored). */
#define TALLOW_READ_PAST 16
typedef struct {
    const float *base;
    const int64_t *row_off;
    int64_t ow, pitch;
    int transposed, in_place, read_past;
} tallow_windows;

typedef struct {
    int abi;
    /* c (batch, m, n), contiguous = (accumulate ? c : 0) + a (batch, m, k) @ b (batch, k,
     * n), read through the element strides (batch, row, column; a batch stride of 0
     * broadcasts), on the calling thread, the same bits as the Python-facing product.
     * Returns 0 when its scratch could not be allocated. */
    int (*product)(const float *a, int64_t sab, int64_t rsa, int64_t csa, const float *b, int64_t sbb, int64_t rsb,
                   int64_t csb, float *c, int64_t batch, int64_t m, int64_t n, int64_t k, int accumulate);
    /* The same (one matrix) with b (k, n) given as windows or their transpose (packed
     * straight from them: the bits of the product of the built columns), c's rows ldc
     * floats apart (the columns of a wider matrix). */
    int (*product_windows)(const float *a, int64_t rsa, int64_t csa, const tallow_windows *b, float *c, int64_t ldc,
                           int64_t m, int64_t n, int64_t k, int accumulate);
} tallow_gemm_api;

static const tallow_gemm_api *tallow_gemm = NULL;

/* At module import: the product's table, or NULL (the error cleared) when it is missing. */
static inline void tallow_gemm_import(void) {
    tallow_gemm = (const tallow_gemm_api *)tallow_capsule("tallow.backends.cpu.native._gemm", TALLOW_GEMM_CAPSULE);
    if (tallow_gemm && tallow_gemm->abi != TALLOW_GEMM_ABI) tallow_gemm = NULL;
}

#endif
