/* Compiled CPU kernels of tallow's quantized matmul: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
 * weights in layouts of their GGUF size, the K-quants Q4K, Q5K and Q6K, and IQ4_XS.
 *
 * Arithmetic: ggml's generic vec_dot, bit for bit the numba path of
 * tallow.backends.cpu.quantized.  An activation row is quantized to Q8_0 (d = amax /
 * 127, q = x / d rounded half to even, the stored d rounded to f16); each 32-element
 * block contributes (float(isum) * d_w) * d_x, where isum is the exact integer dot
 * product, added to the row's f32 sum in block order.  The K-quants take Q8K
 * activations (below).  Ties round half to even on every path, as ggml's x86
 * quantizers (_mm256_cvtps_epi32) do.
 *
 * The kernels are written once (_kernels_body.h) and compiled three times: for the
 * baseline instruction set (the reference), for AVX2 and for AVX-512 VNNI, chosen at
 * run time by CPU feature checks (set_isa narrows the choice).  The builds differ
 * only in how they compute the exact integer sums (byte dot products: vpmaddubsw, or
 * vpdpbusd with VNNI); the float steps are the same operations in the same order, never
 * fused (the file is compiled with -ffp-contract=off), so every build gives the same bits.
 * The VNNI build also has tiled kernels for products of many activation rows
 * (_kernels_tiled.h), bit-identical to its row kernels.
 *
 * Weight layout ("x8"): the rows of a weight are taken eight at a time; for
 * each block position the eight rows' f16 scales (16 bytes) are followed by
 * their quants interleaved four bytes at a time, so that one 32-byte load holds
 * four consecutive bytes of each of the eight rows and one broadcast activation
 * word multiplies all of them: the 32-bit lanes of the integer sum are the eight
 * rows, with no horizontal sum.
 *   Q4_0x8: 16 + 128 bytes per block (the GGUF size): vector v holds byte 4v+j of
 *           each row's 16 packed bytes, whose low nibble is element 4v+j and high
 *           nibble element 16+4v+j.
 *   Q8_0x8: 16 + 256 bytes: vector v holds elements 4v..4v+3 of each row.
 *   Q4_1x8: 16 (d) + 16 (m, eight f16) + 128 (nibbles as Q4_0): the GGUF size.
 *   Q5_0x8: 16 (d) + 32 (fifth bits) + 128 (nibbles as Q4_0): the GGUF size; the fifth
 *           bits as eight 32-bit masks, words 0..3 for the low nibbles of vector v and
 *           4..7 for the high ones, bit 4r + j the bit of row r's byte j in that vector
 *           (so one mask widens to the vector's 32 bytes with a byte shuffle).
 *   Q5_1x8: 16 (d) + 16 (m) + 32 (fifth bits) + 128: the GGUF size.
 * The K-quants, per 256-element super-block:
 *   Q6Kx8: d 8 x f16 (16) | scales [16 sub-blocks][8 rows] int8 (128) | per chunk c of
 *          64 elements (384): the low four bits of the values + 32 as Q4Kx8's nibble
 *          vectors 8c.. (256), then their top two bits (128): vector h, byte 4r + j, bits
 *          4, 6, 0, 2 (s = 0..3) for nibble vector 4(h mod 2) + s's byte 4r + j, its low
 *          nibble for h < 2, high for h >= 2 (the GGUF size)
 *   Q4Kx8: d 8 x f16 (16) | dmin 8 x f16 (16) | scales [8][8] (64) | mins [8][8] (64) |
 *          nibbles (1024): vector 8c + v holds bytes 32c + 4v.. of each row's 128, whose
 *          low nibbles are elements 4v.. of sub-block 2c and high ones of sub-block 2c + 1
 *   Q5Kx8: Q4Kx8 with the fifth bits (256) before the nibbles: mask word 8 sb + v (as
 *          Q5_0's, bit 4r + j) holds those of the bytes vector v widens for sub-block sb
 *   IQ4XSx8: d 8 x f16 (16) | scales - 32 [8][8] int8 (64) | level indices as Q4Kx8's
 *          nibbles (1024), looked up in ggml's sixteen kvalues_iq4nl levels
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "_workers.h"

enum { FMT_Q4_0 = 0, FMT_Q8_0 = 1, FMT_Q4K = 2, FMT_Q6K = 3, FMT_Q5_0 = 4, FMT_Q4_1 = 5, FMT_Q5_1 = 6, FMT_Q5K = 7,
       FMT_IQ4XS = 8 };
enum { ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512VNNI = 2 };
static const char *isa_names[] = {"scalar", "avx2", "avx512vnni"};
static int best_isa = ISA_SCALAR;

#define QK 32
#define QKK 256
#define ROWS 8

/* Bytes of one block position of a group of eight rows; 0 for a format that is not one of these. */
static inline int64_t block_bytes(int fmt) {
    switch (fmt) {
    case FMT_Q4_0: return 16 + 128;
    case FMT_Q8_0: return 16 + 256;
    case FMT_Q5_0: return 16 + 32 + 128;
    case FMT_Q4_1: return 16 + 16 + 128;
    case FMT_Q5_1: return 16 + 16 + 32 + 128;
    default: return 0;
    }
}
static inline int is_kquant(int fmt) { return fmt == FMT_Q4K || fmt == FMT_Q6K || fmt == FMT_Q5K || fmt == FMT_IQ4XS; }
static inline int64_t kblock_bytes(int fmt) {
    switch (fmt) {
    case FMT_Q6K: return 16 + 128 + 1024 + 512;
    case FMT_Q5K: return 32 + 128 + 256 + 1024;
    case FMT_IQ4XS: return 16 + 64 + 1024;
    default: return 32 + 128 + 1024;
    }
}
static inline int64_t fmt_bytes(int fmt) { return is_kquant(fmt) ? kblock_bytes(fmt) : block_bytes(fmt); }
static inline int64_t fmt_block(int fmt) { return is_kquant(fmt) ? QKK : QK; }
/* The nibble formats: Q4_1/Q5_1 carry block minimums m (added as m_w * s_x, s_x the
 * Q8_1 activation's stored sum), Q5_0/Q5_1 a fifth bit, Q4_0/Q5_0 an offset (8, 16). */
static inline int has_min(int fmt) { return fmt == FMT_Q4_1 || fmt == FMT_Q5_1; }
static inline int has_high(int fmt) { return fmt == FMT_Q5_0 || fmt == FMT_Q5_1; }
static inline int zero_of(int fmt) { return fmt == FMT_Q4_0 ? 8 : fmt == FMT_Q5_0 ? 16 : 0; }
static inline int64_t high_at(int fmt) { return has_min(fmt) ? 32 : 16; }
static inline int64_t quants_at(int fmt) { return 16 + (has_min(fmt) ? 16 : 0) + (has_high(fmt) ? 32 : 0); }

/* ------------------------------------------------------------------ f32 -> f16 */
/* Round to nearest even, as NumPy's astype(float16) and F16C. */
static inline uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t e = ax >> 23;
    if (e == 0) return (uint16_t)sign; /* f32 subnormals are far below half's */
    uint32_t shift = 126u - e;
    if (shift > 24u) return (uint16_t)sign;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

static inline float f16_round(float f) { return half_to_float(float_to_half(f)); }

/* ------------------------------------------------------------------ the builds */
/* (The 32-byte vectors pass between static, inlined functions of one build only: the
 * baseline build's differing calling convention never meets another's.) */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef uint8_t u8x32 __attribute__((vector_size(32)));
typedef int8_t i8x32 __attribute__((vector_size(32)));
typedef int8_t i8x32u __attribute__((vector_size(32), aligned(1))); /* (may be unaligned) */
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));

typedef struct {
    /* x (k,) -> xq (k,) int8, xd (k/32,) stored scales, xs (k/32,) integer sums and, when
     * xsf is not NULL, Q8_1's stored block sums; 0 on a non-finite input (the caller then
     * takes the NumPy codec's path). */
    int (*quantize_q8_0)(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xs, float *xsf);
    /* x (k,) -> xq (k,) int8, xd (k/256,), xbs (k/16,) the sixteen sums a block; 0 as above */
    int (*quantize_q8k)(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xbs);
    void (*product)(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                    const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n);
    /* product's result by the tiled kernels (_kernels_tiled.h), or NULL in a build
     * without them; returns 0 when it could not run */
    int (*tiled)(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, const float *xd,
                 const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n);
} kernel_set;

#define SUFFIX generic
#define TARGET
#include "_kernels_body.h"
#undef SUFFIX
#undef TARGET
#ifdef TALLOW_X86
#define SUFFIX avx2
#define TARGET AVX2
#define BUILD_AVX2
#include "_kernels_body.h"
#undef SUFFIX
#undef TARGET
#undef BUILD_AVX2
#define SUFFIX vnni
#define TARGET AVX512
#define BUILD_VNNI
#include "_kernels_body.h"
#undef SUFFIX
#undef TARGET
#undef BUILD_VNNI
static const kernel_set *const builds[] = {&kernels_generic, &kernels_avx2, &kernels_vnni};
#else
static const kernel_set *const builds[] = {&kernels_generic};
#endif
static int active_isa = ISA_SCALAR;
/* A product of at least this many activation rows takes the tiled kernels where the build
 * has them (set_tiled_min_rows: the tests compare both paths). */
static int64_t tiled_min_rows = 6;
#define ACTIVE (builds[active_isa])

/* ------------------------------------------------------------------ Python bindings */

/* quantize_q8_0(x f32 (m*k), m, k, xq int8 (m*k), xd f32 (m*k/32), xs i32 (m*k/32)[, xsf f32 (m*k/32)])
 * -> bool (xsf: Q8_1's stored sums, for the formats with block minimums), and with `kq`
 * quantize_q8k(x, m, k, xq, xd f32 (m*k/256), xbs i32 (m*k/16)) -> bool. */
static PyObject *quantize_call(PyObject *const *args, Py_ssize_t nargs, int kq) {
    const char *name = kq ? "quantize_q8k" : "quantize_q8_0";
    if (nargs != 6 && (kq || nargs != 7))
        return PyErr_Format(PyExc_TypeError, "%s takes %s arguments", name, kq ? "6" : "6 or 7");
    int64_t mk[2];
    if (!parse_ints(args, 1, 2, mk)) return NULL;
    const int64_t m = mk[0], k = mk[1], block = kq ? QKK : QK, nb = k / block, sums = kq ? k / 16 : nb;
    if (m < 0 || k <= 0 || k % block)
        return PyErr_Format(PyExc_ValueError, "%s: bad m=%lld k=%lld", name, (long long)m, (long long)k);
    buf_t b[5];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, m * k * 4, "x") && get_buf(args[3], &b[1], 1, m * k, "xq") &&
        get_buf(args[4], &b[2], 1, m * nb * 4, "xd") && get_buf(args[5], &b[3], 1, m * sums * 4, kq ? "xbs" : "xs") &&
        (nargs == 6 || get_buf(args[6], &b[4], 1, m * nb * 4, "xsf"))) {
        const kernel_set *kernels = ACTIVE;
        const float *x = (const float *)b[0].view.buf;
        int8_t *xq = (int8_t *)b[1].view.buf;
        float *xd = (float *)b[2].view.buf, *xsf = nargs == 7 ? (float *)b[4].view.buf : NULL;
        int32_t *xs = (int32_t *)b[3].view.buf;
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < m && ok; i++)
            ok = kq ? kernels->quantize_q8k(x + i * k, k, xq + i * k, xd + i * nb, xs + i * sums)
                    : kernels->quantize_q8_0(x + i * k, k, xq + i * k, xd + i * nb, xs + i * sums, xsf ? xsf + i * nb : NULL);
        Py_END_ALLOW_THREADS
        res = PyBool_FromLong(ok);
    }
    release(b, 5);
    return res;
}

static PyObject *py_quantize_q8_0(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return quantize_call(args, nargs, 0);
}

static PyObject *py_quantize_q8k(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return quantize_call(args, nargs, 1);
}

/* Bytes of the activation sums a row of k has: Q8K's sixteen per block, else one per block. */
static inline int64_t sums_bytes(int fmt, int64_t k) { return is_kquant(fmt) ? k / 16 * 4 : k / QK * 4; }

/* fmt, n, k valid for a product; else 0 with ValueError naming `what`. */
static int check_shape(const char *what, int fmt, int64_t n, int64_t k) {
    if (fmt_bytes(fmt) && n >= 0 && k > 0 && k % fmt_block(fmt) == 0) return 1;
    PyErr_Format(PyExc_ValueError, "%s: bad format %d or shape n=%lld k=%lld (k a positive multiple of the block)",
                 what, fmt, (long long)n, (long long)k);
    return 0;
}

/* matmul(fmt, w, n, k, xq, xd, xs, m, out f32 (m*n), g0, g1[, xsf]): rows [8 g0, 8 g1) of out,
 * from activations quantize_q8_0 (xsf, Q8_1's sums, for the formats with block minimums)
 * or quantize_q8k (the K-quants; xs its sixteen sums a block) made. */
static PyObject *py_matmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11 && nargs != 12) return PyErr_Format(PyExc_TypeError, "matmul takes 11 or 12 arguments");
    int64_t v[7];
    if (!parse_ints(args, 0, 1, v) || !parse_ints(args, 2, 2, v + 1) || !parse_ints(args, 7, 1, v + 3) ||
        !parse_ints(args, 9, 2, v + 4))
        return NULL;
    const int fmt = (int)v[0];
    const int64_t n = v[1], k = v[2], m = v[3], g0 = v[4], g1 = v[5];
    if (!check_shape("matmul", fmt, n, k)) return NULL;
    if (m < 0) return PyErr_Format(PyExc_ValueError, "matmul: m=%lld < 0", (long long)m);
    if (has_min(fmt) && nargs != 12) return PyErr_Format(PyExc_ValueError, "matmul: this format needs xsf");
    const int64_t groups = (n + ROWS - 1) / ROWS, nb = k / fmt_block(fmt);
    if (g0 < 0 || g1 > groups || g0 > g1) return PyErr_Format(PyExc_ValueError, "matmul: bad group range");
    buf_t b[6];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, groups * nb * fmt_bytes(fmt), "w") && get_buf(args[4], &b[1], 0, m * k, "xq") &&
        get_buf(args[5], &b[2], 0, m * nb * 4, "xd") && get_buf(args[6], &b[3], 0, m * sums_bytes(fmt, k), "xs") &&
        get_buf(args[8], &b[4], 1, m * n * 4, "out") && (nargs == 11 || get_buf(args[11], &b[5], 0, m * nb * 4, "xsf"))) {
        const float *xsf = nargs == 12 ? (const float *)b[5].view.buf : NULL;
        const kernel_set *kernels = ACTIVE;
        const uint8_t *w = (const uint8_t *)b[0].view.buf;
        const int8_t *xq = (const int8_t *)b[1].view.buf;
        const float *xd = (const float *)b[2].view.buf;
        const int32_t *xs = (const int32_t *)b[3].view.buf;
        float *out = (float *)b[4].view.buf;
        Py_BEGIN_ALLOW_THREADS
        if (!(kernels->tiled && m >= tiled_min_rows && kernels->tiled(fmt, w, nb, g0, g1, xq, xd, xs, xsf, m, out, n)))
            kernels->product(fmt, w, nb, g0, g1, xq, xd, xs, xsf, m, out, n);
        Py_END_ALLOW_THREADS
        res = Py_NewRef(Py_None);
    }
    release(b, 6);
    return res;
}

/* A matrix-vector product split by groups of eight weight rows across tallow's pool
 * (_workers.h): every row is computed whole by one thread, so the split never changes a
 * row's sum.  MV_GRAIN groups at least per chunk. */
#define MV_GRAIN 4
typedef struct {
    const kernel_set *kernels;
    int fmt;
    const uint8_t *w;
    int64_t nb;
    const int8_t *xq;
    const float *xd;
    const int32_t *xs;
    const float *xsf;
    float *out;
    int64_t n;
} mv_job;

static void mv_task(void *p, int64_t g0, int64_t g1) {
    const mv_job *j = (const mv_job *)p;
    j->kernels->product(j->fmt, j->w, j->nb, g0, g1, j->xq, j->xd, j->xs, j->xsf, 1, j->out, j->n);
}

/* matvec(fmt, w, n, k, x f32 (k), out f32 (n)) -> bool: quantize x and multiply in one
 * call (the activation's quantized form on the caller's stack, or on the heap past
 * STACK_K), the rows split across tallow's pool when the product is worth it.  False on a
 * non-finite x (nothing written). */
#define STACK_K 16384
static PyObject *py_matvec(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "matvec takes 6 arguments");
    int64_t v[3];
    if (!parse_ints(args, 0, 1, v) || !parse_ints(args, 2, 2, v + 1)) return NULL;
    const int fmt = (int)v[0];
    const int64_t n = v[1], k = v[2];
    if (!check_shape("matvec", fmt, n, k)) return NULL;
    const int64_t groups = (n + ROWS - 1) / ROWS, nb = k / fmt_block(fmt), bytes = groups * nb * fmt_bytes(fmt);
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, bytes, "w") && get_buf(args[4], &b[1], 0, k * 4, "x") &&
        get_buf(args[5], &b[2], 1, n * 4, "out")) {
        /* xq (k), xd and xsf (k/32 each at most), xs (k/16 at most), in one buffer */
        int64_t stack_buf[(STACK_K + STACK_K / QK * 8 + STACK_K / 16 * 4) / 8];
        void *heap = NULL;
        int8_t *xq = (int8_t *)stack_buf;
        if (k > STACK_K) {
            heap = PyMem_RawMalloc((size_t)(k + k / QK * 8 + k / 16 * 4));
            if (!heap) {
                release(b, 3);
                return PyErr_NoMemory();
            }
            xq = (int8_t *)heap;
        }
        float *xd = (float *)(xq + k), *xsf = xd + k / QK;
        int32_t *xs = (int32_t *)(xsf + k / QK);
        const kernel_set *kernels = ACTIVE;
        int ok;
        Py_BEGIN_ALLOW_THREADS
        ok = is_kquant(fmt) ? kernels->quantize_q8k((const float *)b[1].view.buf, k, xq, xd, xs)
                            : kernels->quantize_q8_0((const float *)b[1].view.buf, k, xq, xd, xs, has_min(fmt) ? xsf : NULL);
        if (ok) {
            mv_job job = {kernels, fmt, (const uint8_t *)b[0].view.buf, nb, xq, xd, xs, xsf, (float *)b[2].view.buf, n};
            tallow_pool_run(mv_task, &job, groups, MV_GRAIN, bytes);
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(heap);
        res = PyBool_FromLong(ok);
    }
    release(b, 3);
    return res;
}

static PyObject *py_f16_round(PyObject *self, PyObject *arg) {
    (void)self;
    double v = PyFloat_AsDouble(arg);
    if (PyErr_Occurred()) return NULL;
    return PyFloat_FromDouble(f16_round((float)v));
}

static PyObject *py_isa(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(isa_names[active_isa]);
}

static PyObject *py_best_isa(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(isa_names[best_isa]);
}

/* set_isa(name): use a build at most as wide as the CPU supports (tests compare them). */
static PyObject *py_set_isa(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, isa_names[i]) == 0) {
            if (i > best_isa) return PyErr_Format(PyExc_ValueError, "this CPU does not support %s", name);
            active_isa = i;
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "unknown instruction set %s (scalar, avx2, avx512vnni)", name);
}

/* set_tiled_min_rows(m) -> the old value: the tiled kernels for products of m or more rows. */
static PyObject *py_set_tiled_min_rows(PyObject *self, PyObject *arg) {
    (void)self;
    const long long m = PyLong_AsLongLong(arg);
    if (m == -1 && PyErr_Occurred()) return NULL;
    if (m < 1) return PyErr_Format(PyExc_ValueError, "set_tiled_min_rows: m=%lld < 1", m);
    const long long old = (long long)tiled_min_rows;
    tiled_min_rows = m;
    return PyLong_FromLongLong(old);
}

static PyMethodDef methods[] = {
    {"quantize_q8_0", FC(py_quantize_q8_0), "Activation rows to Q8_0 (Q8_1 with xsf)."},
    {"quantize_q8k", FC(py_quantize_q8k), "Activation rows to Q8K."},
    {"matmul", FC(py_matmul), "Quantized matmul over a group range."},
    {"matvec", FC(py_matvec), "Quantize one row and multiply."},
    {"f16_round", py_f16_round, METH_O, "A float through f16 and back (the scalar conversion)."},
    {"isa", py_isa, METH_NOARGS, "The instruction set the kernels use."},
    {"best_isa", py_best_isa, METH_NOARGS, "The widest instruction set this CPU supports."},
    {"set_isa", py_set_isa, METH_O, "Choose the kernels' instruction set."},
    {"set_tiled_min_rows", py_set_tiled_min_rows, METH_O, "Rows from which the tiled kernels run; returns the old value."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_kernels", "tallow's compiled quantized kernels.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) {
    best_isa = cpu_has_avx512vnni() ? ISA_AVX512VNNI : cpu_has_avx2() ? ISA_AVX2 : ISA_SCALAR;
    active_isa = best_isa;
    tallow_pool_import();
    scratch_init();
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "Q4_0", FMT_Q4_0);
    PyModule_AddIntConstant(m, "Q8_0", FMT_Q8_0);
    PyModule_AddIntConstant(m, "Q5_0", FMT_Q5_0);
    PyModule_AddIntConstant(m, "Q4_1", FMT_Q4_1);
    PyModule_AddIntConstant(m, "Q5_1", FMT_Q5_1);
    PyModule_AddIntConstant(m, "Q4K", FMT_Q4K);
    PyModule_AddIntConstant(m, "Q6K", FMT_Q6K);
    PyModule_AddIntConstant(m, "Q5K", FMT_Q5K);
    PyModule_AddIntConstant(m, "IQ4XS", FMT_IQ4XS);
    PyModule_AddIntConstant(m, "ROWS", ROWS);
    return m;
}
