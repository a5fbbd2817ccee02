/* The sum of a contiguous f32 array, vectorised.
 *
 * NumPy's float32 sum (pairwise, eight scalar accumulators in 128-element blocks) runs
 * at ~3 floats per ns here, where a vector loop is bound by memory: a 1M-element sum
 * took 250-280 us against 170 in PyTorch's. This one keeps NumPy's accuracy class with
 * a fixed order of additions, so that it gives the same bits on any instruction set
 * and any number of threads:
 *  - the array is cut into blocks of BLOCK (2048) floats; in a block, lane l of 128
 *    adds the elements l, l + 128, l + 256, ... in order (16 each), starting from 0.0
 *    (as NumPy's and PyTorch's sums do: negative zeros sum to +0.0);
 *  - the 128 lanes are summed pairwise: lane i += lane i + 64 (i < 64), then + 32,
 *    ... + 1 (lane 0);
 *  - the block sums are summed pairwise: sum(s, n) = sum(s, n / 2) + sum(s + n / 2,
 *    n - n / 2).
 * One source for every build (below): AVX-512 holds the 128 lanes in 8 zmm registers,
 * AVX2 in 16 ymm, the baseline build in SSE registers. On one
 * thread: 2.5 us for 32K elements (NumPy 14), 18 for 256K (NumPy 101), 147 for 1M
 * (NumPy 420, the array past the L2 cache); chunks of blocks split over the compiled
 * pool at two threads took as long or longer (150 and 906 us for 1M and 4M against
 * 147 and 778: bound by memory once past the cache).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define LANES 128
#define BLOCK (16 * LANES)

static int use_avx2 = 0;
static int use_avx512 = 0;

/* One block (BLOCK floats; a last, shorter one is zero-padded first: adding +0.0 to a
 * lane's sum, which starts at +0.0, changes nothing), written once with GCC vector
 * extensions and compiled per instruction set: lanes 16k..16k+15 in z[k]; the lane
 * tree's steps of 64, 32 and 16 lanes are whole-vector adds, those of 8..1 scalar. */
typedef float f32x16 __attribute__((vector_size(64)));
#define BLOCK_SUM(NAME, ATTR)                                                                     \
    ATTR static float NAME(const float *x) {                                                      \
        f32x16 z[8] = {{0}};                                                                      \
        for (int j = 0; j < BLOCK / LANES; j++)                                                   \
            for (int k = 0; k < 8; k++) {                                                         \
                f32x16 v;                                                                         \
                memcpy(&v, x + j * LANES + 16 * k, sizeof v);                                     \
                z[k] = z[k] + v;                                                                  \
            }                                                                                     \
        for (int k = 0; k < 4; k++) z[k] = z[k] + z[k + 4];                                       \
        for (int k = 0; k < 2; k++) z[k] = z[k] + z[k + 2];                                       \
        float lanes[16];                                                                          \
        const f32x16 v = z[0] + z[1];                                                             \
        memcpy(lanes, &v, sizeof lanes);                                                          \
        for (int step = 8; step >= 1; step /= 2)                                                  \
            for (int i = 0; i < step; i++) lanes[i] = lanes[i] + lanes[i + step];                 \
        return lanes[0];                                                                          \
    }
#pragma GCC diagnostic ignored "-Wpsabi" /* (the vectors stay inside each function) */
BLOCK_SUM(block_generic, )
#ifdef TALLOW_X86
BLOCK_SUM(block_avx2, AVX2)
BLOCK_SUM(block_avx512, AVX512F)
#endif

/* The sums of the n floats' blocks into sums[]. */
static void block_sums(const float *x, int64_t n, float *sums, int avx2, int avx512) {
    float (*block)(const float *) = block_generic;
#ifdef TALLOW_X86
    block = avx512 ? block_avx512 : avx2 ? block_avx2 : block_generic;
#else
    (void)avx2, (void)avx512;
#endif
    for (int64_t b = 0; b * BLOCK < n; b++) {
        const int64_t m = n - b * BLOCK < BLOCK ? n - b * BLOCK : BLOCK;
        if (m == BLOCK) {
            sums[b] = block(x + b * BLOCK);
        } else {
            float last[BLOCK] = {0};
            memcpy(last, x + b * BLOCK, (size_t)m * sizeof(float));
            sums[b] = block(last);
        }
    }
}

static float tree(const float *s, int64_t n) {
    if (n == 1) return s[0];
    const int64_t h = n / 2;
    return tree(s, h) + tree(s + h, n - h);
}

/* sum_f32(x) -> float: the sum of a C-contiguous float32 buffer (any shape; 0.0 for
 * no elements). */
static PyObject *py_sum_f32(PyObject *self, PyObject *x) {
    (void)self;
    Py_buffer v;
    if (PyObject_GetBuffer(x, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const char *f = v.format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (v.itemsize != 4 || f[0] != 'f' || f[1] != 0) {
        PyBuffer_Release(&v);
        return PyErr_Format(PyExc_TypeError, "sum_f32: a float32 buffer is needed");
    }
    const int64_t n = v.len / 4, blocks = (n + BLOCK - 1) / BLOCK;
    float total = 0.0f;
    if (n > 0) {
        float *sums = (float *)malloc((size_t)blocks * sizeof(float));
        if (!sums) {
            PyBuffer_Release(&v);
            return PyErr_NoMemory();
        }
        const float *data = (const float *)v.buf;
        const int avx2 = use_avx2, avx512 = use_avx2 && use_avx512;
        Py_BEGIN_ALLOW_THREADS
        block_sums(data, n, sums, avx2, avx512);
        total = tree(sums, blocks);
        Py_END_ALLOW_THREADS
        free(sums);
    }
    PyBuffer_Release(&v);
    return PyFloat_FromDouble((double)total);
}

TALLOW_SIMD_SWITCH(use_avx2)
TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

static PyMethodDef methods[] = {
    {"sum_f32", py_sum_f32, METH_O, "The sum of a C-contiguous float32 buffer (a fixed order: the same bits on any ISA)."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 build."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 build is used."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 build."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 build is used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_reduce",
                                       "Sums of tallow's CPU storage in a fixed order.", -1, methods};

PyMODINIT_FUNC PyInit__reduce(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    return PyModule_Create(&moduledef);
}
