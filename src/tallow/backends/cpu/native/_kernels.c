/* Compiled CPU kernels of tallow's quantized matmul: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
 * weights in layouts of their GGUF size, and the K-quants Q4K and Q6K (further down).
 *
 * Arithmetic: ggml's generic vec_dot, bit for bit the numba path of
 * tallow.quantized.  An activation row is quantized to Q8_0 (d = amax / 127,
 * q = x / d rounded half to even, the stored d rounded to f16); each 32-element block
 * contributes (float(isum) * d_w) * d_x, where isum is the exact integer dot
 * product, added to the row's f32 sum in block order.  The SIMD code computes
 * the integer sums with byte dot products (vpmaddubsw, or vpdpbusd with AVX-512
 * VNNI) and the float steps with separate multiplies and adds, never fused
 * (the file is compiled with -ffp-contract=off), so every path gives the same
 * bits.
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
 * The CPU features are checked once at import (__builtin_cpu_supports); the
 * AVX2 and AVX-512 VNNI functions carry target attributes, so the module itself
 * is compiled for the baseline ISA and runs anywhere (scalar C fallback).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "_workers.h"

/* Formats of the 32-element blocks (the K-quants' numbers follow further down). */
enum { FMT_Q4_0 = 0, FMT_Q8_0 = 1, FMT_Q5_0 = 4, FMT_Q4_1 = 5, FMT_Q5_1 = 6 };
enum { ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512VNNI = 2 };
static const char *isa_names[] = {"scalar", "avx2", "avx512vnni"};
static int best_isa = ISA_SCALAR;
static int active_isa = ISA_SCALAR;

#define QK 32
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
/* The nibble formats: Q4_1/Q5_1 carry block minimums m (added as m_w * s_x, s_x the
 * Q8_1 activation's stored sum), Q5_0/Q5_1 a fifth bit, Q4_0/Q5_0 an offset (8, 16). */
static inline int has_min(int fmt) { return fmt == FMT_Q4_1 || fmt == FMT_Q5_1; }
static inline int has_high(int fmt) { return fmt == FMT_Q5_0 || fmt == FMT_Q5_1; }
static inline int zero_of(int fmt) { return fmt == FMT_Q4_0 ? 8 : fmt == FMT_Q5_0 ? 16 : 0; }
static inline int64_t high_at(int fmt) { return has_min(fmt) ? 32 : 16; }
static inline int64_t quants_at(int fmt) { return 16 + (has_min(fmt) ? 16 : 0) + (has_high(fmt) ? 32 : 0); }

/* ------------------------------------------------------------------ f16 <-> f32 */

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

/* Activation rounding, the one rule of every path: ties to even, as ggml's x86
 * quantize_row_q8_0 (_mm256_cvtps_epi32) and its Q8K quantizer (nearest_int) do;
 * rintf rounds in the default mode, round to nearest even. */
static inline float round_even(float v) { return rintf(v); }

/* ----------------------------------------------------- activation quantization (Q8_0) */
/* x (k,) -> xq (k,) int8, xd (k/32,) stored scales, xs (k/32,) integer sums, and when
 * xsf is not NULL Q8_1's stored block sums (the same quantization as Q8_0's).
 * Returns 0 on a non-finite input (the caller then takes the NumPy codec's path). */
static int quantize_q8_0_row(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xs, float *xsf) {
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0.0f;
        for (int t = 0; t < QK; t++) {
            float a = fabsf(xb[t]);
            if (!(a <= 3.4028235e38f)) return 0;
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.0f;
        float inv = d == 0.0f ? 0.0f : 1.0f / d;
        int32_t total = 0;
        for (int t = 0; t < QK; t++) {
            int q = (int)round_even(xb[t] * inv);
            xq[b * QK + t] = (int8_t)q;
            total += q;
        }
        xd[b] = f16_round(d);
        xs[b] = total;
        if (xsf) xsf[b] = f16_round((float)total * d); /* Q8_1's s: f16(sum q * d), d unrounded */
    }
    return 1;
}

/* ------------------------------------------------------------------ scalar kernels */
/* Each kernel computes rows [8 g0, 8 g1) of out (m, n) for m activation rows. */
typedef void (*kernel_fn)(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                          const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out,
                          int64_t n);

static inline void store_rows(float *out_row, int64_t g, int64_t n, const float *acc) {
    for (int j = 0; j < ROWS; j++) {
        int64_t row = g * ROWS + j;
        if (row < n) out_row[row] = acc[j];
    }
}

/* The nibble formats (Q4_0, Q5_0, Q4_1, Q5_1): per row and block, the exact integer sum of
 * the unsigned values times the activation, less zero * (the activation's sum), then
 * ((isum * d_w) * d_x), plus m_w * s_x for the formats with minimums. */
static inline void nib_scalar(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                              const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out,
                              int64_t n) {
    const int64_t bb = block_bytes(fmt), k = nb * QK, qa = quants_at(fmt), ha = high_at(fmt);
    const int zero = zero_of(fmt), hm = has_min(fmt), hh = has_high(fmt);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *wg = w + g * nb * bb;
        for (int64_t i = 0; i < m; i++) {
            float acc[ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = wg + b * bb;
                const int8_t *x = xq + i * k + b * QK;
                float dx = xd[i * nb + b];
                int32_t zx = zero * xs[i * nb + b];
                for (int r = 0; r < ROWS; r++) {
                    uint16_t hd;
                    memcpy(&hd, blk + 2 * r, 2);
                    int32_t isum = 0;
                    for (int v = 0; v < 4; v++) {
                        uint32_t mlo = 0, mhi = 0;
                        if (hh) {
                            memcpy(&mlo, blk + ha + 4 * v, 4);
                            memcpy(&mhi, blk + ha + 16 + 4 * v, 4);
                        }
                        for (int j = 0; j < 4; j++) {
                            uint8_t byte = blk[qa + 32 * v + 4 * r + j];
                            int32_t lo = (byte & 15) | (int32_t)(((mlo >> (4 * r + j)) & 1u) << 4);
                            int32_t hi = (byte >> 4) | (int32_t)(((mhi >> (4 * r + j)) & 1u) << 4);
                            isum += lo * x[4 * v + j] + hi * x[16 + 4 * v + j];
                        }
                    }
                    isum -= zx;
                    float f = ((float)isum * half_to_float(hd)) * dx;
                    if (hm) {
                        uint16_t hmin;
                        memcpy(&hmin, blk + 16 + 2 * r, 2);
                        f = f + half_to_float(hmin) * xsf[i * nb + b];
                    }
                    acc[r] += f;
                }
            }
            store_rows(out + i * n, g, n, acc);
        }
    }
}

#define NIB_SCALAR(NAME, FMT)                                                                     \
    static void NAME(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,     \
                     const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, \
                     int64_t n) {                                                                 \
        nib_scalar(FMT, w, nb, g0, g1, xq, xd, xs, xsf, m, out, n);                              \
    }
NIB_SCALAR(q4_0_scalar, FMT_Q4_0)
NIB_SCALAR(q5_0_scalar, FMT_Q5_0)
NIB_SCALAR(q4_1_scalar, FMT_Q4_1)
NIB_SCALAR(q5_1_scalar, FMT_Q5_1)

static void q8_0_scalar(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                        const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n) {
    (void)xs; (void)xsf;
    const int64_t bb = block_bytes(FMT_Q8_0), k = nb * QK;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *wg = w + g * nb * bb;
        for (int64_t i = 0; i < m; i++) {
            float acc[ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = wg + b * bb;
                const int8_t *x = xq + i * k + b * QK;
                float dx = xd[i * nb + b];
                for (int r = 0; r < ROWS; r++) {
                    uint16_t hd;
                    memcpy(&hd, blk + 2 * r, 2);
                    int32_t isum = 0;
                    for (int v = 0; v < 8; v++)
                        for (int j = 0; j < 4; j++)
                            isum += (int32_t)(int8_t)blk[16 + 32 * v + 4 * r + j] * x[4 * v + j];
                    acc[r] += ((float)isum * half_to_float(hd)) * dx;
                }
            }
            store_rows(out + i * n, g, n, acc);
        }
    }
}

#ifdef TALLOW_X86
/* ------------------------------------------------------------------ AVX2 kernels */

static inline int32_t load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

AVX2 static inline void store_acc(float *out_row, int64_t g, int64_t n, __m256 acc) {
    if (g * ROWS + ROWS <= n) {
        _mm256_storeu_ps(out_row + g * ROWS, acc);
    } else {
        float tmp[ROWS];
        _mm256_storeu_ps(tmp, acc);
        store_rows(out_row, g, n, tmp);
    }
}

/* A fifth-bit mask word -> 32 bytes, 16 where its bit is set (ggml's bytes_from_bits_32). */
AVX2 static inline __m256i high_bits(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(16));
}

/* One group of eight weight rows of a nibble format against R activation rows (R = 1..4,
 * a constant after inlining, so the accumulators stay in registers). */
#define NIB_GROUP(NAME, ATTR, FMT, DOT16)                                                          \
    ATTR static inline __attribute__((always_inline)) void NAME##_rows(                           \
        const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xs,     \
        const float *xsf, int64_t i0, const int R, float *out, int64_t n, int64_t g) {            \
        const int64_t k = nb * QK, bb = block_bytes(FMT), qa = quants_at(FMT), ha = high_at(FMT); \
        const __m256i mask = _mm256_set1_epi8(15);                                                \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),           \
                         _mm256_setzero_ps()};                                                    \
        for (int64_t b = 0; b < nb; b++) {                                                        \
            const uint8_t *blk = wg + b * bb;                                                     \
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));                  \
            __m256 mw = has_min(FMT) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16))) \
                                     : _mm256_setzero_ps();                                       \
            __m256i lo[4], hi[4];                                                                 \
            for (int v = 0; v < 4; v++) {                                                         \
                __m256i W = _mm256_loadu_si256((const __m256i *)(blk + qa + 32 * v));            \
                lo[v] = _mm256_and_si256(W, mask);                                                \
                hi[v] = _mm256_and_si256(_mm256_srli_epi16(W, 4), mask);                          \
                if (has_high(FMT)) {                                                              \
                    lo[v] = _mm256_or_si256(lo[v], high_bits(blk + ha + 4 * v));                 \
                    hi[v] = _mm256_or_si256(hi[v], high_bits(blk + ha + 16 + 4 * v));            \
                }                                                                                 \
            }                                                                                     \
            for (int r = 0; r < R; r++) {                                                         \
                const int8_t *x = xq + (i0 + r) * k + b * QK;                                     \
                __m256i s32;                                                                      \
                DOT16                                                                             \
                if (zero_of(FMT))                                                                 \
                    s32 = _mm256_sub_epi32(s32, _mm256_set1_epi32(zero_of(FMT) * xs[(i0 + r) * nb + b])); \
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s32), dw);                            \
                f = _mm256_mul_ps(f, _mm256_set1_ps(xd[(i0 + r) * nb + b]));                      \
                if (has_min(FMT)) f = _mm256_add_ps(f, _mm256_mul_ps(mw, _mm256_set1_ps(xsf[(i0 + r) * nb + b]))); \
                acc[r] = _mm256_add_ps(acc[r], f);                                                \
            }                                                                                     \
        }                                                                                         \
        for (int r = 0; r < R; r++) store_acc(out + (i0 + r) * n, g, n, acc[r]);                  \
    }

/* vpmaddubsw: pairs of (0..15) x (-127..127) products; eight of them per 16-bit lane
 * stay below 2^15, so they are summed in 16 bits and widened once. */
#define Q4_DOT_AVX2                                                                               \
    {                                                                                             \
        __m256i s16 = _mm256_setzero_si256();                                                     \
        for (int v = 0; v < 4; v++) {                                                             \
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[v], _mm256_set1_epi32(load_i32(x + 4 * v)))); \
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[v], _mm256_set1_epi32(load_i32(x + 16 + 4 * v)))); \
        }                                                                                         \
        s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));                                       \
    }
/* 5-bit values: sixteen products of up to 31 x 127 would pass 2^15, so the low and
 * high halves are summed in 16 bits separately (eight products each). */
#define Q5_DOT_AVX2                                                                               \
    {                                                                                             \
        __m256i sa = _mm256_setzero_si256(), sb = _mm256_setzero_si256();                         \
        for (int v = 0; v < 4; v++) {                                                             \
            sa = _mm256_add_epi16(sa, _mm256_maddubs_epi16(lo[v], _mm256_set1_epi32(load_i32(x + 4 * v)))); \
            sb = _mm256_add_epi16(sb, _mm256_maddubs_epi16(hi[v], _mm256_set1_epi32(load_i32(x + 16 + 4 * v)))); \
        }                                                                                         \
        s32 = _mm256_add_epi32(_mm256_madd_epi16(sa, _mm256_set1_epi16(1)),                       \
                               _mm256_madd_epi16(sb, _mm256_set1_epi16(1)));                      \
    }
#define Q4_DOT_VNNI                                                                               \
    {                                                                                             \
        s32 = _mm256_setzero_si256();                                                             \
        for (int v = 0; v < 4; v++) {                                                             \
            s32 = _mm256_dpbusd_epi32(s32, lo[v], _mm256_set1_epi32(load_i32(x + 4 * v)));       \
            s32 = _mm256_dpbusd_epi32(s32, hi[v], _mm256_set1_epi32(load_i32(x + 16 + 4 * v)));  \
        }                                                                                         \
    }

NIB_GROUP(q4_0_avx2, AVX2, FMT_Q4_0, Q4_DOT_AVX2)
NIB_GROUP(q4_0_vnni, AVX512, FMT_Q4_0, Q4_DOT_VNNI)
NIB_GROUP(q5_0_avx2, AVX2, FMT_Q5_0, Q5_DOT_AVX2)
NIB_GROUP(q5_0_vnni, AVX512, FMT_Q5_0, Q4_DOT_VNNI)
NIB_GROUP(q4_1_avx2, AVX2, FMT_Q4_1, Q4_DOT_AVX2)
NIB_GROUP(q4_1_vnni, AVX512, FMT_Q4_1, Q4_DOT_VNNI)
NIB_GROUP(q5_1_avx2, AVX2, FMT_Q5_1, Q5_DOT_AVX2)
NIB_GROUP(q5_1_vnni, AVX512, FMT_Q5_1, Q4_DOT_VNNI)

#define Q8_0_GROUP(NAME, ATTR, DOT)                                                                \
    ATTR static inline __attribute__((always_inline)) void NAME##_rows(                           \
        const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xs,     \
        const float *xsf, int64_t i0, const int R, float *out, int64_t n, int64_t g) {            \
        (void)xs; (void)xsf;                                                                      \
        const int64_t k = nb * QK;                                                                \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),           \
                         _mm256_setzero_ps()};                                                    \
        for (int64_t b = 0; b < nb; b++) {                                                        \
            const uint8_t *blk = wg + b * 272;                                                    \
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));                  \
            for (int r = 0; r < R; r++) {                                                         \
                const int8_t *x = xq + (i0 + r) * k + b * QK;                                     \
                __m256i s32 = _mm256_setzero_si256();                                             \
                for (int v = 0; v < 8; v++) {                                                     \
                    __m256i W = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * v));        \
                    __m256i xs4 = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(x + 4 * v)), W);   \
                    DOT                                                                           \
                }                                                                                 \
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s32), dw);                            \
                f = _mm256_mul_ps(f, _mm256_set1_ps(xd[(i0 + r) * nb + b]));                      \
                acc[r] = _mm256_add_ps(acc[r], f);                                                \
            }                                                                                     \
        }                                                                                         \
        for (int r = 0; r < R; r++) store_acc(out + (i0 + r) * n, g, n, acc[r]);                  \
    }

/* |w| x sign(x, w) = w x; a pair of products is at most 2 * 128 * 127 < 2^15. */
#define Q8_DOT_AVX2                                                                               \
    s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(W), xs4), \
                                                  _mm256_set1_epi16(1)));
#define Q8_DOT_VNNI s32 = _mm256_dpbusd_epi32(s32, _mm256_abs_epi8(W), xs4);

Q8_0_GROUP(q8_0_avx2, AVX2, Q8_DOT_AVX2)
Q8_0_GROUP(q8_0_vnni, AVX512, Q8_DOT_VNNI)

/* quantize_q8_0_row with eight lanes: the same float operations (x * inv, then
 * round half to even), so the same integers. */
AVX2 static int quantize_q8_0_row_avx2(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xs, float *xsf) {
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(3.4028235e38f);
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        __m256 v[4], amax = _mm256_setzero_ps();
        int finite = 0xff;
        for (int u = 0; u < 4; u++) {
            v[u] = _mm256_loadu_ps(xb + 8 * u);
            __m256 a = _mm256_andnot_ps(sign, v[u]);
            finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_LE_OQ));
            amax = _mm256_max_ps(amax, a);
        }
        if (finite != 0xff) return 0;
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float d = _mm_cvtss_f32(m4) / 127.0f;
        float inv = d == 0.0f ? 0.0f : 1.0f / d;
        __m256 vinv = _mm256_set1_ps(inv);
        __m256i qi[4], total = _mm256_setzero_si256();
        for (int u = 0; u < 4; u++) {
            __m256 p = _mm256_mul_ps(v[u], vinv);
            qi[u] = _mm256_cvttps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            total = _mm256_add_epi32(total, qi[u]);
        }
        __m256i q16a = _mm256_packs_epi32(qi[0], qi[1]), q16b = _mm256_packs_epi32(qi[2], qi[3]);
        __m256i q8 = _mm256_packs_epi16(q16a, q16b);
        q8 = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(xq + b * QK), q8);
        __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
        t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
        xs[b] = _mm_cvtsi128_si32(t4);
        xd[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT)));
        if (xsf) {
            float sd = (float)xs[b] * d;
            xsf[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(sd), _MM_FROUND_TO_NEAREST_INT)));
        }
    }
    return 1;
}

#define DRIVER(NAME, ATTR, FMT)                                                                    \
    ATTR static void NAME(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, \
                          const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, \
                          int64_t n) {                                                            \
        const int64_t gb = nb * block_bytes(FMT);                                                 \
        for (int64_t g = g0; g < g1; g++) {                                                       \
            const uint8_t *wg = w + g * gb;                                                       \
            int64_t i = 0;                                                                        \
            for (; i + 4 <= m; i += 4) NAME##_rows(wg, nb, xq, xd, xs, xsf, i, 4, out, n, g);          \
            switch (m - i) {                                                                      \
            case 3: NAME##_rows(wg, nb, xq, xd, xs, xsf, i, 3, out, n, g); break;                      \
            case 2: NAME##_rows(wg, nb, xq, xd, xs, xsf, i, 2, out, n, g); break;                      \
            case 1: NAME##_rows(wg, nb, xq, xd, xs, xsf, i, 1, out, n, g); break;                      \
            default: break;                                                                       \
            }                                                                                     \
        }                                                                                         \
    }

DRIVER(q4_0_avx2, AVX2, FMT_Q4_0)
DRIVER(q4_0_vnni, AVX512, FMT_Q4_0)
DRIVER(q8_0_avx2, AVX2, FMT_Q8_0)
DRIVER(q8_0_vnni, AVX512, FMT_Q8_0)
DRIVER(q5_0_avx2, AVX2, FMT_Q5_0)
DRIVER(q5_0_vnni, AVX512, FMT_Q5_0)
DRIVER(q4_1_avx2, AVX2, FMT_Q4_1)
DRIVER(q4_1_vnni, AVX512, FMT_Q4_1)
DRIVER(q5_1_avx2, AVX2, FMT_Q5_1)
DRIVER(q5_1_vnni, AVX512, FMT_Q5_1)
#endif /* TALLOW_X86 */

static int quantize_row(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xs, float *xsf) {
#ifdef TALLOW_X86
    if (active_isa >= ISA_AVX2) return quantize_q8_0_row_avx2(x, k, xq, xd, xs, xsf);
#endif
    return quantize_q8_0_row(x, k, xq, xd, xs, xsf);
}

static kernel_fn pick_kernel(int fmt) {
#ifdef TALLOW_X86
    if (active_isa == ISA_AVX512VNNI) {
        switch (fmt) {
        case FMT_Q4_0: return q4_0_vnni;
        case FMT_Q5_0: return q5_0_vnni;
        case FMT_Q4_1: return q4_1_vnni;
        case FMT_Q5_1: return q5_1_vnni;
        default: return q8_0_vnni;
        }
    }
    if (active_isa == ISA_AVX2) {
        switch (fmt) {
        case FMT_Q4_0: return q4_0_avx2;
        case FMT_Q5_0: return q5_0_avx2;
        case FMT_Q4_1: return q4_1_avx2;
        case FMT_Q5_1: return q5_1_avx2;
        default: return q8_0_avx2;
        }
    }
#endif
    switch (fmt) {
    case FMT_Q4_0: return q4_0_scalar;
    case FMT_Q5_0: return q5_0_scalar;
    case FMT_Q4_1: return q4_1_scalar;
    case FMT_Q5_1: return q5_1_scalar;
    default: return q8_0_scalar;
    }
}


/* ================================================================== K-quants (Q4K, Q6K)
 * Activations are Q8K (256 per block: iscale = -127 / (the first element of largest
 * magnitude), q = iscale x rounded half to even, clamped to [-128, 127], d = 1 / iscale,
 * sixteen 16-element sums), as the numba path's quantizer.  Per super-block, as the
 * numba kernel: isum = sum over sub-blocks of (integer scale x exact sub-block sum),
 * then Q6K adds (d_w d_x) isum and Q4K (d_w d_x) isum - (dmin_w d_x) msum, where msum
 * = sum of the eight minimums x their 32-element activation sums.
 * Layouts (eight rows interleaved four bytes at a time, as above), per super-block:
 *   Q6Kx8: d 8 x f16 (16) | scales [16 sub-blocks][8 rows] int8 (128) |
 *          values -32..31 as bytes, vector v = elements 4v..4v+3 of each row (2048)
 *   Q4Kx8: d 8 x f16 (16) | dmin 8 x f16 (16) | scales [8][8] (64) | mins [8][8] (64) |
 *          nibbles (1024): vector 8c + v holds bytes 32c + 4v.. of each row's 128, whose
 *          low nibbles are elements 4v.. of sub-block 2c and high ones of sub-block 2c + 1
 */
enum { FMT_Q4K = 2, FMT_Q6K = 3 };
#define QKK 256
static inline int64_t kblock_bytes(int fmt) { return fmt == FMT_Q6K ? 16 + 128 + 2048 : 32 + 128 + 1024; }

static int quantize_q8k_row(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xbs) {
    for (int64_t b = 0; b < k / QKK; b++) {
        const float *xb = x + b * QKK;
        float amax = 0.0f, mx = 0.0f;
        for (int t = 0; t < QKK; t++) {
            float a = fabsf(xb[t]);
            if (!(a <= 3.4028235e38f)) return 0;
            if (a > amax) { amax = a; mx = xb[t]; }
        }
        int8_t *q = xq + b * QKK;
        if (mx == 0.0f) {
            memset(q, 0, QKK);
            xd[b] = 0.0f;
        } else {
            float iscale = -127.0f / mx;
            for (int t = 0; t < QKK; t++) {
                float v = round_even(iscale * xb[t]);
                v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
                q[t] = (int8_t)v;
            }
            xd[b] = 1.0f / iscale;
        }
        for (int u = 0; u < 16; u++) {
            int32_t acc = 0;
            for (int t = 0; t < 16; t++) acc += q[16 * u + t];
            xbs[b * 16 + u] = acc;
        }
    }
    return 1;
}

typedef void (*kkernel_fn)(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                           const float *xd, const int32_t *xbs, int64_t m, float *out, int64_t n);

static void q6k_scalar(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, const float *xd,
                       const int32_t *xbs, int64_t m, float *out, int64_t n) {
    (void)xbs;
    const int64_t bb = kblock_bytes(FMT_Q6K), k = nb * QKK;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t i = 0; i < m; i++) {
            float acc[ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (g * nb + b) * bb;
                const int8_t *x = xq + i * k + b * QKK;
                float dx = xd[i * nb + b];
                for (int r = 0; r < ROWS; r++) {
                    int32_t isum = 0;
                    for (int sb = 0; sb < 16; sb++) {
                        int32_t sum = 0;
                        for (int v = 4 * sb; v < 4 * sb + 4; v++)
                            for (int j = 0; j < 4; j++)
                                sum += (int32_t)(int8_t)blk[144 + 32 * v + 4 * r + j] * x[4 * v + j];
                        isum += sum * (int32_t)(int8_t)blk[16 + 8 * sb + r];
                    }
                    uint16_t hd;
                    memcpy(&hd, blk + 2 * r, 2);
                    acc[r] += (half_to_float(hd) * dx) * (float)isum;
                }
            }
            store_rows(out + i * n, g, n, acc);
        }
}

static void q4k_scalar(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, const float *xd,
                       const int32_t *xbs, int64_t m, float *out, int64_t n) {
    const int64_t bb = kblock_bytes(FMT_Q4K), k = nb * QKK;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t i = 0; i < m; i++) {
            float acc[ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (g * nb + b) * bb;
                const int8_t *x = xq + i * k + b * QKK;
                const int32_t *bs = xbs + (i * nb + b) * 16;
                float dx = xd[i * nb + b];
                for (int r = 0; r < ROWS; r++) {
                    int32_t isum = 0, msum = 0;
                    for (int c = 0; c < 4; c++) {
                        int32_t lo = 0, hi = 0;
                        for (int v = 0; v < 8; v++)
                            for (int j = 0; j < 4; j++) {
                                uint8_t byte = blk[160 + 32 * (8 * c + v) + 4 * r + j];
                                lo += (int32_t)(byte & 15) * x[64 * c + 4 * v + j];
                                hi += (int32_t)(byte >> 4) * x[64 * c + 32 + 4 * v + j];
                            }
                        isum += lo * (int32_t)blk[32 + 8 * (2 * c) + r] + hi * (int32_t)blk[32 + 8 * (2 * c + 1) + r];
                    }
                    for (int u = 0; u < 8; u++) msum += (int32_t)blk[96 + 8 * u + r] * (bs[2 * u] + bs[2 * u + 1]);
                    uint16_t hd, hm;
                    memcpy(&hd, blk + 2 * r, 2);
                    memcpy(&hm, blk + 16 + 2 * r, 2);
                    acc[r] += (half_to_float(hd) * dx) * (float)isum - (half_to_float(hm) * dx) * (float)msum;
                }
            }
            store_rows(out + i * n, g, n, acc);
        }
}

#ifdef TALLOW_X86
AVX2 static void q6k_avx2(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, const float *xd,
                          const int32_t *xbs, int64_t m, float *out, int64_t n) {
    (void)xbs;
    const int64_t bb = kblock_bytes(FMT_Q6K), k = nb * QKK;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = g0; g < g1; g++)
        for (int64_t i = 0; i < m; i++) {
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (g * nb + b) * bb;
                const int8_t *x = xq + i * k + b * QKK;
                __m256i isum = _mm256_setzero_si256();
                for (int sb = 0; sb < 16; sb++) {
                    __m256i s16 = _mm256_setzero_si256(), s16b = _mm256_setzero_si256();
                    for (int v = 4 * sb; v < 4 * sb + 4; v += 2) {
                        /* |x| x sign(w, x): |x| <= 128, |w| <= 32, so a lane of two pairs stays below 2^15 */
                        __m256i W0 = _mm256_loadu_si256((const __m256i *)(blk + 144 + 32 * v));
                        __m256i W1 = _mm256_loadu_si256((const __m256i *)(blk + 144 + 32 * (v + 1)));
                        __m256i x0 = _mm256_set1_epi32(load_i32(x + 4 * v)), x1 = _mm256_set1_epi32(load_i32(x + 4 * v + 4));
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_abs_epi8(x0), _mm256_sign_epi8(W0, x0)));
                        s16b = _mm256_add_epi16(s16b, _mm256_maddubs_epi16(_mm256_abs_epi8(x1), _mm256_sign_epi8(W1, x1)));
                    }
                    __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_madd_epi16(s16b, ones));
                    __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 16 + 8 * sb)));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s32, sc));
                }
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
                __m256 f = _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xd[i * nb + b])), _mm256_cvtepi32_ps(isum));
                acc = _mm256_add_ps(acc, f);
            }
            store_acc(out + i * n, g, n, acc);
        }
}

AVX2 static void q4k_avx2(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq, const float *xd,
                          const int32_t *xbs, int64_t m, float *out, int64_t n) {
    const int64_t bb = kblock_bytes(FMT_Q4K), k = nb * QKK;
    const __m256i ones = _mm256_set1_epi16(1), mask = _mm256_set1_epi8(15);
    for (int64_t g = g0; g < g1; g++)
        for (int64_t i = 0; i < m; i++) {
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + (g * nb + b) * bb;
                const int8_t *x = xq + i * k + b * QKK;
                const int32_t *bs = xbs + (i * nb + b) * 16;
                __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
                for (int c = 0; c < 4; c++) {
                    /* (0..15) x (-128..127): eight pairs per 16-bit lane stay below 2^15 */
                    __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
                    for (int v = 0; v < 8; v++) {
                        __m256i W = _mm256_loadu_si256((const __m256i *)(blk + 160 + 32 * (8 * c + v)));
                        __m256i xl = _mm256_set1_epi32(load_i32(x + 64 * c + 4 * v));
                        __m256i xh = _mm256_set1_epi32(load_i32(x + 64 * c + 32 + 4 * v));
                        lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(_mm256_and_si256(W, mask), xl));
                        hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(W, 4), mask), xh));
                    }
                    __m256i scl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 32 + 8 * (2 * c))));
                    __m256i sch = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 32 + 8 * (2 * c + 1))));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(_mm256_madd_epi16(lo16, ones), scl));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(_mm256_madd_epi16(hi16, ones), sch));
                }
                for (int u = 0; u < 8; u++) {
                    __m256i mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 96 + 8 * u)));
                    msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(mn, _mm256_set1_epi32(bs[2 * u] + bs[2 * u + 1])));
                }
                __m256 vdx = _mm256_set1_ps(xd[i * nb + b]);
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
                __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
                __m256 f = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(dw, vdx), _mm256_cvtepi32_ps(isum)),
                                         _mm256_mul_ps(_mm256_mul_ps(dm, vdx), _mm256_cvtepi32_ps(msum)));
                acc = _mm256_add_ps(acc, f);
            }
            store_acc(out + i * n, g, n, acc);
        }
}
#endif

static kkernel_fn pick_kkernel(int fmt) {
#ifdef TALLOW_X86
    if (active_isa >= ISA_AVX2) return fmt == FMT_Q6K ? q6k_avx2 : q4k_avx2;
#endif
    return fmt == FMT_Q6K ? q6k_scalar : q4k_scalar;
}

/* ------------------------------------------------------------------ Python bindings */

/* quantize_q8_0(x f32 (m*k), m, k, xq int8 (m*k), xd f32 (m*k/32), xs i32 (m*k/32)[, xsf f32 (m*k/32)])
 * -> bool; xsf: Q8_1's stored sums, for the formats with block minimums. */
static PyObject *py_quantize_q8_0(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 && nargs != 7) return PyErr_Format(PyExc_TypeError, "quantize_q8_0 takes 6 or 7 arguments");
    int64_t m = PyLong_AsLongLong(args[1]), k = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (m < 0 || k <= 0 || k % QK) return PyErr_Format(PyExc_ValueError, "quantize_q8_0: bad m=%lld k=%lld", (long long)m, (long long)k);
    buf_t b[5];
    memset(b, 0, sizeof b);
    int64_t nb = k / QK;
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, m * k * 4, "x") && get_buf(args[3], &b[1], 1, m * k, "xq") &&
        get_buf(args[4], &b[2], 1, m * nb * 4, "xd") && get_buf(args[5], &b[3], 1, m * nb * 4, "xs") &&
        (nargs == 6 || get_buf(args[6], &b[4], 1, m * nb * 4, "xsf"))) {
        int ok = 1;
        float *xsf = nargs == 7 ? (float *)b[4].view.buf : NULL;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < m && ok; i++)
            ok = quantize_row((const float *)b[0].view.buf + i * k, k, (int8_t *)b[1].view.buf + i * k,
                              (float *)b[2].view.buf + i * nb, (int32_t *)b[3].view.buf + i * nb,
                              xsf ? xsf + i * nb : NULL);
        Py_END_ALLOW_THREADS
        res = PyBool_FromLong(ok);
    }
    release(b, 5);
    return res;
}

/* matmul_q(fmt, w, n, k, xq, xd, xs, m, out f32 (m*n), g0, g1[, xsf]): rows [8 g0, 8 g1) of out
 * (xsf, Q8_1's sums, required by the formats with block minimums). */
static PyObject *py_matmul_q(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11 && nargs != 12) return PyErr_Format(PyExc_TypeError, "matmul_q takes 11 or 12 arguments");
    int fmt = (int)PyLong_AsLong(args[0]);
    int64_t n = PyLong_AsLongLong(args[2]), k = PyLong_AsLongLong(args[3]), m = PyLong_AsLongLong(args[7]);
    int64_t g0 = PyLong_AsLongLong(args[9]), g1 = PyLong_AsLongLong(args[10]);
    if (PyErr_Occurred()) return NULL;
    if (!block_bytes(fmt) || n < 0 || k <= 0 || k % QK || m < 0)
        return PyErr_Format(PyExc_ValueError, "matmul_q: bad format or shape");
    if (has_min(fmt) && nargs != 12) return PyErr_Format(PyExc_ValueError, "matmul_q: this format needs xsf");
    int64_t groups = (n + ROWS - 1) / ROWS, nb = k / QK;
    if (g0 < 0 || g1 > groups || g0 > g1) return PyErr_Format(PyExc_ValueError, "matmul_q: bad group range");
    buf_t b[6];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, groups * nb * block_bytes(fmt), "w") && get_buf(args[4], &b[1], 0, m * k, "xq") &&
        get_buf(args[5], &b[2], 0, m * nb * 4, "xd") && get_buf(args[6], &b[3], 0, m * nb * 4, "xs") &&
        get_buf(args[8], &b[4], 1, m * n * 4, "out") &&
        (nargs == 11 || get_buf(args[11], &b[5], 0, m * nb * 4, "xsf"))) {
        kernel_fn fn = pick_kernel(fmt);
        const float *xsf = nargs == 12 ? (const float *)b[5].view.buf : NULL;
        Py_BEGIN_ALLOW_THREADS
        fn((const uint8_t *)b[0].view.buf, nb, g0, g1, (const int8_t *)b[1].view.buf, (const float *)b[2].view.buf,
           (const int32_t *)b[3].view.buf, xsf, m, (float *)b[4].view.buf, n);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 6);
    return res;
}

/* A matrix-vector product split by groups of eight weight rows across tallow's pool
 * (_workers.h): every row is computed whole by one thread, so the split never changes a
 * row's sum.  MV_GRAIN groups at least per chunk. */
#define MV_GRAIN 4
typedef struct {
    kernel_fn fn;
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
    j->fn(j->w, j->nb, g0, g1, j->xq, j->xd, j->xs, j->xsf, 1, j->out, j->n);
}

typedef struct {
    kkernel_fn fn;
    const uint8_t *w;
    int64_t nb;
    const int8_t *xq;
    const float *xd;
    const int32_t *xbs;
    float *out;
    int64_t n;
} kmv_job;

static void kmv_task(void *p, int64_t g0, int64_t g1) {
    const kmv_job *j = (const kmv_job *)p;
    j->fn(j->w, j->nb, g0, g1, j->xq, j->xd, j->xbs, 1, j->out, j->n);
}

/* matvec_q(fmt, w, n, k, x f32 (k), out f32 (n)) -> bool: quantize x and multiply in one
 * call (the activation's quantized form lives on the caller's stack), the rows split
 * across tallow's pool when the product is worth it. */
#define STACK_K 16384
static PyObject *py_matvec_q(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "matvec_q takes 6 arguments");
    int fmt = (int)PyLong_AsLong(args[0]);
    int64_t n = PyLong_AsLongLong(args[2]), k = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (!block_bytes(fmt) || n < 0 || k <= 0 || k % QK)
        return PyErr_Format(PyExc_ValueError, "matvec_q: bad format or shape");
    int64_t groups = (n + ROWS - 1) / ROWS, nb = k / QK;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, groups * nb * block_bytes(fmt), "w") && get_buf(args[4], &b[1], 0, k * 4, "x") &&
        get_buf(args[5], &b[2], 1, n * 4, "out")) {
        int8_t stack_q[STACK_K];
        float stack_d[STACK_K / QK];
        int32_t stack_s[STACK_K / QK];
        float stack_sf[STACK_K / QK];
        int8_t *xq = stack_q;
        float *xd = stack_d, *xsf = stack_sf;
        int32_t *xs = stack_s;
        void *heap = NULL;
        if (k > STACK_K) {
            heap = PyMem_RawMalloc((size_t)(k + nb * 12));
            if (!heap) { release(b, 3); return PyErr_NoMemory(); }
            xq = (int8_t *)heap;
            xd = (float *)(xq + k);
            xs = (int32_t *)(xd + nb);
            xsf = (float *)(xs + nb);
        }
        if (!has_min(fmt)) xsf = NULL;
        int ok;
        Py_BEGIN_ALLOW_THREADS
        ok = quantize_row((const float *)b[1].view.buf, k, xq, xd, xs, xsf);
        if (ok) {
            mv_job job = {pick_kernel(fmt), (const uint8_t *)b[0].view.buf, nb, xq, xd, xs, xsf, (float *)b[2].view.buf, n};
            tallow_pool_run(mv_task, &job, groups, MV_GRAIN, groups * nb * block_bytes(fmt));
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(heap);
        res = PyBool_FromLong(ok);
    }
    release(b, 3);
    return res;
}


/* quantize_q8k(x f32 (m*k), m, k, xq int8 (m*k), xd f32 (m*k/256), xbs i32 (m*k/16)) -> bool */
static PyObject *py_quantize_q8k(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "quantize_q8k takes 6 arguments");
    int64_t m = PyLong_AsLongLong(args[1]), k = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (m < 0 || k <= 0 || k % QKK) return PyErr_Format(PyExc_ValueError, "quantize_q8k: bad m or k");
    int64_t nb = k / QKK;
    buf_t b[4];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, m * k * 4, "x") && get_buf(args[3], &b[1], 1, m * k, "xq") &&
        get_buf(args[4], &b[2], 1, m * nb * 4, "xd") && get_buf(args[5], &b[3], 1, m * nb * 64, "xbs")) {
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < m && ok; i++)
            ok = quantize_q8k_row((const float *)b[0].view.buf + i * k, k, (int8_t *)b[1].view.buf + i * k,
                                  (float *)b[2].view.buf + i * nb, (int32_t *)b[3].view.buf + i * nb * 16);
        Py_END_ALLOW_THREADS
        res = PyBool_FromLong(ok);
    }
    release(b, 4);
    return res;
}

/* matmul_k(fmt, w, n, k, xq, xd, xbs, m, out, g0, g1) */
static PyObject *py_matmul_k(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) return PyErr_Format(PyExc_TypeError, "matmul_k takes 11 arguments");
    int fmt = (int)PyLong_AsLong(args[0]);
    int64_t n = PyLong_AsLongLong(args[2]), k = PyLong_AsLongLong(args[3]), m = PyLong_AsLongLong(args[7]);
    int64_t g0 = PyLong_AsLongLong(args[9]), g1 = PyLong_AsLongLong(args[10]);
    if (PyErr_Occurred()) return NULL;
    if ((fmt != FMT_Q4K && fmt != FMT_Q6K) || n < 0 || k <= 0 || k % QKK || m < 0)
        return PyErr_Format(PyExc_ValueError, "matmul_k: bad format or shape");
    int64_t groups = (n + ROWS - 1) / ROWS, nb = k / QKK;
    if (g0 < 0 || g1 > groups || g0 > g1) return PyErr_Format(PyExc_ValueError, "matmul_k: bad group range");
    buf_t b[5];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, groups * nb * kblock_bytes(fmt), "w") && get_buf(args[4], &b[1], 0, m * k, "xq") &&
        get_buf(args[5], &b[2], 0, m * nb * 4, "xd") && get_buf(args[6], &b[3], 0, m * nb * 64, "xbs") &&
        get_buf(args[8], &b[4], 1, m * n * 4, "out")) {
        kkernel_fn fn = pick_kkernel(fmt);
        Py_BEGIN_ALLOW_THREADS
        fn((const uint8_t *)b[0].view.buf, nb, g0, g1, (const int8_t *)b[1].view.buf, (const float *)b[2].view.buf,
           (const int32_t *)b[3].view.buf, m, (float *)b[4].view.buf, n);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 5);
    return res;
}

/* matvec_k(fmt, w, n, k, x f32 (k), out f32 (n)) -> bool */
static PyObject *py_matvec_k(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "matvec_k takes 6 arguments");
    int fmt = (int)PyLong_AsLong(args[0]);
    int64_t n = PyLong_AsLongLong(args[2]), k = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if ((fmt != FMT_Q4K && fmt != FMT_Q6K) || n < 0 || k <= 0 || k % QKK)
        return PyErr_Format(PyExc_ValueError, "matvec_k: bad format or shape");
    int64_t groups = (n + ROWS - 1) / ROWS, nb = k / QKK;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[1], &b[0], 0, groups * nb * kblock_bytes(fmt), "w") && get_buf(args[4], &b[1], 0, k * 4, "x") &&
        get_buf(args[5], &b[2], 1, n * 4, "out")) {
        int8_t stack_q[STACK_K];
        float stack_d[STACK_K / QKK];
        int32_t stack_bs[STACK_K / 16];
        int8_t *xq = stack_q;
        float *xd = stack_d;
        int32_t *xbs = stack_bs;
        void *heap = NULL;
        if (k > STACK_K) { /* a wider row (a 70B-class FFN's 28,672 inputs) on the heap */
            heap = PyMem_RawMalloc((size_t)(k + nb * 4 + nb * 64));
            if (!heap) { release(b, 3); return PyErr_NoMemory(); }
            xq = (int8_t *)heap;
            xd = (float *)(xq + k);
            xbs = (int32_t *)(xd + nb);
        }
        int ok;
        Py_BEGIN_ALLOW_THREADS
        ok = quantize_q8k_row((const float *)b[1].view.buf, k, xq, xd, xbs);
        if (ok) {
            kmv_job job = {pick_kkernel(fmt), (const uint8_t *)b[0].view.buf, nb, xq, xd, xbs, (float *)b[2].view.buf, n};
            tallow_pool_run(kmv_task, &job, groups, MV_GRAIN, groups * nb * kblock_bytes(fmt));
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
    (void)self; (void)noargs;
    return PyUnicode_FromString(isa_names[active_isa]);
}

static PyObject *py_best_isa(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyUnicode_FromString(isa_names[best_isa]);
}

/* set_isa(name): use a path at most as wide as the CPU supports (tests compare them). */
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
    return PyErr_Format(PyExc_ValueError, "unknown instruction set %s", name);
}

static PyMethodDef methods[] = {
    {"quantize_q8_0", (PyCFunction)(void (*)(void))py_quantize_q8_0, METH_FASTCALL, "Activation rows to Q8_0."},
    {"matmul_q", (PyCFunction)(void (*)(void))py_matmul_q, METH_FASTCALL, "Quantized matmul over a group range."},
    {"matvec_q", (PyCFunction)(void (*)(void))py_matvec_q, METH_FASTCALL, "Quantize one row and multiply."},
    {"quantize_q8k", (PyCFunction)(void (*)(void))py_quantize_q8k, METH_FASTCALL, "Activation rows to Q8K."},
    {"matmul_k", (PyCFunction)(void (*)(void))py_matmul_k, METH_FASTCALL, "K-quant matmul over a group range."},
    {"matvec_k", (PyCFunction)(void (*)(void))py_matvec_k, METH_FASTCALL, "Quantize one row to Q8K and multiply."},
    {"f16_round", py_f16_round, METH_O, "A float through f16 and back (the scalar conversion)."},
    {"isa", py_isa, METH_NOARGS, "The instruction set the kernels use."},
    {"best_isa", py_best_isa, METH_NOARGS, "The widest instruction set this CPU supports."},
    {"set_isa", py_set_isa, METH_O, "Choose the kernels' instruction set."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_kernels", "tallow's compiled CPU kernels.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) {
#ifdef TALLOW_X86
    best_isa = cpu_has_avx512vnni() ? ISA_AVX512VNNI : cpu_has_avx2() ? ISA_AVX2 : ISA_SCALAR;
#endif
    active_isa = best_isa;
    tallow_pool_import();
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "Q4_0", FMT_Q4_0);
    PyModule_AddIntConstant(m, "Q8_0", FMT_Q8_0);
    PyModule_AddIntConstant(m, "Q5_0", FMT_Q5_0);
    PyModule_AddIntConstant(m, "Q4_1", FMT_Q4_1);
    PyModule_AddIntConstant(m, "Q5_1", FMT_Q5_1);
    PyModule_AddIntConstant(m, "Q4K", FMT_Q4K);
    PyModule_AddIntConstant(m, "Q6K", FMT_Q6K);
    PyModule_AddIntConstant(m, "ROWS", ROWS);
    return m;
}
