/* Winograd F(2x2, 3x3) transforms for stride-1 3x3 convolutions of f32 NCHW images
 * (and F(4, 3) for 1x3 kernels).
 *
 * A 3x3 convolution computed on 2x2 output tiles needs 16 products per tile and
 * channel pair instead of 36 (Lavin & Gray, "Fast Algorithms for Convolutional
 * Neural Networks", 2015): with U = G g G^T (the kernel, 4x4 per channel pair),
 * V = B^T d B (each 4x4 input tile) and Y = A^T M A, where for each of the 16
 * positions xi M[xi] = U[xi] @ V[xi] is one matrix product over the input channels.
 * The products are tallow's f32 GEMM (batched over xi, split over the pool); this
 * module does the three transforms:
 *
 *  - kernel_transform(k, u, co, ci): k (co, ci, 3, 3) -> u (16, co, ci);
 *  - input_transform(x, v, nb, nc, h, w, ph, pw, th, tw): x (nb, nc, h, w) ->
 *    v (16, nc, T), T = nb * th * tw tiles, tile t = (b * th + ty) * tw + tx reading
 *    input rows 2ty - ph .. +3 and columns 2tx - pw .. +3, zero outside the image;
 *  - output_transform(m, y, nb, nco, oh, ow, th, tw): m (16, nco, T) -> y (nb, nco,
 *    oh, ow), the tiles past oh / ow cropped;
 *  - the same three for 1x3 kernels (a 1-D convolution), F(4, 3) along each row:
 *    kernel_transform_row, input_transform_row(x, v, nb, nc, h, w, pw, tw) and
 *    output_transform_row(m, y, nb, nco, h, ow, tw), 6 positions, T = nb * h * tw;
 *  - for the kernel gradient, the adjoints of the output and kernel transforms
 *    (grad_transform, kernel_grad_transform and their _row forms, below).
 *
 * The input and output transforms only add and subtract; units are image planes,
 * each written by one thread in a fixed order, so results are bit-identical at any
 * thread count.  The pass-by-pass loops run over whole rows of tiles (contiguous in
 * every plane), compiled twice: for the baseline instruction set and with AVX2
 * enabled, chosen at run time.  conv's 3x3 form and the kernel gradient's 3x3 inputs
 * compute their tiles with a vector's lanes over 16 channels instead (below, "the
 * forward in channel lanes"), with an AVX-512 build as well.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "_gemm.h"
#include "_workers.h"

static int use_avx2 = 0;
static int use_avx512 = 0; /* the 3x3 channel-lane tiles in zmm registers (set_avx512) */

/* Sizes: parse_ints, none negative. */
static int ints(PyObject *const *args, Py_ssize_t start, Py_ssize_t count, int64_t *out) {
    if (!parse_ints(args, start, count, out)) return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (out[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "winograd: negative size");
            return 0;
        }
    }
    return 1;
}

typedef struct {
    int64_t nb, nc, h, w, ph, pw, oh, ow, th, tw;
    const float *src;
    float *dst;
    _Atomic int *failed; /* set when a chunk could not allocate its scratch rows */
    int flip;            /* kernel transforms: write U of the flipped kernel (flipped_position) */
    int swapped;         /* kernel_transform_row: k given as (c_in, c_out, 1, 3) */
} wg_job;

/* ------------------------------------------------------------------ kernel: U = G g G^T */
/* G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].  KBLOCK input channels at a
 * time into a local block, copied out as 16 runs: written straight to the 16 planes
 * (4 KiB-aliased when co * ci is a multiple of 1024) a 256x256 kernel took 2.5 ms. */
#define KBLOCK 64
/* The 16 values of n kernels (9 taps each, `stride` floats apart) into blk[xi][0, n). */
static inline __attribute__((always_inline)) void kernel_block(const float *src, int64_t stride, int64_t n,
                                                                float blk[16][KBLOCK]) {
    for (int r = 0; r < 3; r++) {
        /* g G^T for kernel row r: (a, (a + b + d) / 2, (a - b + d) / 2, d) */
        float h0[KBLOCK], h1[KBLOCK], h2[KBLOCK], h3[KBLOCK];
#pragma GCC ivdep
        for (int64_t c = 0; c < n; c++) {
            float a = src[c * stride + 3 * r], b = src[c * stride + 3 * r + 1], d = src[c * stride + 3 * r + 2];
            h0[c] = a;
            h1[c] = 0.5f * (a + b + d);
            h2[c] = 0.5f * (a - b + d);
            h3[c] = d;
        }
        /* G (g G^T): row r of the kernel feeds output rows 0 (r = 0), 1 and 2 (all), 3 (r = 2) */
        float *hs[4] = {h0, h1, h2, h3};
        for (int q = 0; q < 4; q++) {
            const float *h = hs[q];
            float *u0 = blk[q], *u1 = blk[4 + q], *u2 = blk[8 + q], *u3 = blk[12 + q];
#pragma GCC ivdep
            for (int64_t c = 0; c < n; c++) {
                float v = h[c];
                if (r == 0) {
                    u0[c] = v;
                    u1[c] = v;
                    u2[c] = v;
                } else if (r == 1) {
                    u1[c] = u1[c] + v;
                    u2[c] = u2[c] - v;
                } else {
                    u1[c] = 0.5f * (u1[c] + v);
                    u2[c] = 0.5f * (u2[c] + v);
                    u3[c] = v;
                }
            }
        }
    }
}

/* Where position xi of U goes for the kernel flipped along both axes (a stride-1
 * transposed convolution's): G J = P G, J reversing the three taps and P swapping
 * rows 0 and 3 of G, so G (J g J) G^T = P U P^T: U's positions permuted, no new sums.
 * (The 1x3 kernels' F(4, 3) has no such permutation: their transform reads the taps
 * reversed.) */
static inline int flipped_position(int xi) {
    static const int p[4] = {3, 1, 2, 0};
    return 4 * p[xi / 4] + p[xi % 4];
}

#ifdef TALLOW_X86
/* kernel_block on 16 kernels at a time, their 9 taps gathered into 9 zmm registers (the
 * same sums in the same order: the same bits). Read tap by tap through the stride, a
 * 256x256 kernel's transform took 0.8 ms on one thread, ~37 cycles a kernel. */
static AVX512F void kernel_block_zmm(const float *src, int64_t stride, int64_t n, float blk[16][KBLOCK]) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)stride));
    const __m512 half = _mm512_set1_ps(0.5f);
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        const __mmask16 mask = n - i0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i0)) - 1);
        const float *s = src + i0 * stride;
        __m512 h[3][4];
        for (int r = 0; r < 3; r++) { /* g G^T for kernel row r */
            __m512 a = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx, s + 3 * r, 4);
            __m512 b = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx, s + 3 * r + 1, 4);
            __m512 d = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx, s + 3 * r + 2, 4);
            h[r][0] = a;
            h[r][1] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(a, b), d));
            h[r][2] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(a, b), d));
            h[r][3] = d;
        }
        for (int q = 0; q < 4; q++) { /* G (g G^T), column q */
            const __m512 u[4] = {h[0][q], _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(h[0][q], h[1][q]), h[2][q])),
                                 _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(h[0][q], h[1][q]), h[2][q])),
                                 h[2][q]};
            for (int p = 0; p < 4; p++) _mm512_storeu_ps(blk[4 * p + q] + i0, u[p]);
        }
    }
}
#endif

/* The 16 values of n kernels (9 taps each, `stride` floats apart, from src) into runs of
 * n floats at dst, planes `plane` floats apart, KBLOCK kernels at a time (flip: at the
 * positions of the flipped kernel's U, flipped_position). */
static inline __attribute__((always_inline)) void kernel_run(const float *src, int64_t stride, int64_t n, float *dst,
                                                              int64_t plane, int flip) {
#ifdef TALLOW_X86
    const int zmm = use_avx512 && use_avx2 && stride <= INT32_MAX / 16; /* (the gathers' int32 offsets) */
#endif
    float blk[16][KBLOCK] __attribute__((aligned(64)));
    for (int64_t i0 = 0; i0 < n; i0 += KBLOCK) {
        const int64_t m = n - i0 < KBLOCK ? n - i0 : KBLOCK;
#ifdef TALLOW_X86
        if (zmm)
            kernel_block_zmm(src + i0 * stride, stride, m, blk);
        else
#endif
            kernel_block(src + i0 * stride, stride, m, blk);
        for (int xi = 0; xi < 16; xi++)
            memcpy(dst + (flip ? flipped_position(xi) : xi) * plane + i0, blk[xi], (size_t)m * sizeof(float));
    }
}

/* Output channel o's row of every plane of u (16, co, ci): its ci kernels, contiguous. */
static inline __attribute__((always_inline)) void kernel_rows(const float *k, float *u, int64_t co, int64_t ci,
                                                               int64_t o, int flip) {
    kernel_run(k + o * ci * 9, 9, ci, u + o * ci, co * ci, flip);
}

/* The same values transposed: input channel c's row of every plane of ut (16, ci, co),
 * its co kernels ci * 9 floats apart; the layout the channel-lane convolution's
 * products read as their B, rows contiguous (read in place for a band of few tiles,
 * where a transposed B was packed again by every band). */
static inline __attribute__((always_inline)) void kernel_cols(const float *k, float *ut, int64_t co, int64_t ci,
                                                               int64_t c, int flip) {
    kernel_run(k + c * 9, ci * 9, co, ut + c * co, co * ci, flip);
}

/* ------------------------------------------------------------------ input: V = B^T d B */
/* B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
 * A plane (b, c) at a time: its zero-padded rows are copied split into even and odd
 * columns (tile tx reads even columns tx, tx + 1 and odd ones tx, tx + 1), so every
 * loop below is unit-stride; the plane's 16 outputs are gathered in scratch and
 * copied out as 16 runs of th * tw floats (16 interleaved narrow streams, 4 KiB-
 * aliased when the planes are a multiple of 4 KiB apart, ran 2-3x slower). */
/* One zero-padded image row (NULL: a row of padding) split into its even and odd
 * columns: padded column x (image column x - pw) lands in e[x / 2] or o[x / 2]; half
 * values each. */
static inline __attribute__((always_inline)) void split_row(const float *row, int64_t w, int64_t pw, int64_t half,
                                                             float *e, float *o) {
    if (!row) {
        memset(e, 0, (size_t)half * sizeof(float));
        memset(o, 0, (size_t)half * sizeof(float));
        return;
    }
    /* Image column c is padded column c + pw: even padded columns go to e, odd to o.
     * With pw = 2q + r, image column 2i (2i + 1) lands in e or o at slot i + q (plus
     * one for the odd image columns when r = 1): the row is one deinterleave of its
     * pairs, a loop of w / 2 (8 for a 16-wide image: one AVX2 iteration, where the
     * interior of padded pairs had been 7, all scalar). */
    const int64_t q = pw / 2, r = pw % 2, pairs = w / 2;
    float *ev = r ? o : e, *od = r ? e : o; /* where image columns 2i and 2i + 1 go */
    const int64_t ev0 = q, od0 = q + r;     /* and their first slots */
    /* the slots outside the image (padding and the tiles' overhang) */
    for (int64_t x = 0; x < half; x++) {
        if (x < ev0 || x >= ev0 + (w + 1) / 2) ev[x] = 0.0f;
        if (x < od0 || x >= od0 + pairs) od[x] = 0.0f;
    }
    /* the columns past the last tile are not needed */
    int64_t n = pairs;
    if (ev0 + n > half) n = half - ev0;
    if (od0 + n > half) n = half - od0;
    if (n < 0) n = 0;
#pragma GCC ivdep
    for (int64_t i = 0; i < n; i++) {
        ev[ev0 + i] = row[2 * i];
        od[od0 + i] = row[2 * i + 1];
    }
    for (int64_t i = n; i < pairs; i++) { /* one side may still have room */
        if (ev0 + i < half) ev[ev0 + i] = row[2 * i];
        if (od0 + i < half) od[od0 + i] = row[2 * i + 1];
    }
    if (w % 2 && ev0 + pairs < half) ev[ev0 + pairs] = row[w - 1];
}

static inline int64_t input_scratch_floats(const wg_job *j) {
    int64_t half = j->tw + 1;
    return (2 * j->th + 2) * 2 * half + 8 * half + 16 * j->th * j->tw;
}

static inline __attribute__((always_inline)) void input_plane(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, c = u % j->nc, th = j->th, tw = j->tw, half = tw + 1;
    const int64_t tiles = j->nb * th * tw, plane = j->nc * tiles, rows = 2 * th + 2;
    const float *img = j->src + u * j->h * j->w;
    float *even = scratch, *odd = even + rows * half, *t = odd + rows * half, *out = t + 8 * half;
    /* padded row y (input row y - ph), column x (input column x - pw): even[y][x / 2] or odd */
    for (int64_t y = 0; y < rows; y++) {
        int64_t iy = y - j->ph;
        split_row(iy >= 0 && iy < j->h ? img + iy * j->w : NULL, j->w, j->pw, half, even + y * half,
                  odd + y * half);
    }
    for (int64_t ty = 0; ty < th; ty++) {
        const float *e0 = even + 2 * ty * half, *e1 = e0 + half, *e2 = e1 + half, *e3 = e2 + half;
        const float *o0 = odd + 2 * ty * half, *o1 = o0 + half, *o2 = o1 + half, *o3 = o2 + half;
        float *te[4], *to[4];
        for (int i = 0; i < 4; i++) {
            te[i] = t + i * half;
            to[i] = t + (4 + i) * half;
        }
#pragma GCC ivdep
        for (int64_t x = 0; x < half; x++) { /* B^T d: down the four rows */
            te[0][x] = e0[x] - e2[x];
            te[1][x] = e1[x] + e2[x];
            te[2][x] = e2[x] - e1[x];
            te[3][x] = e1[x] - e3[x];
            to[0][x] = o0[x] - o2[x];
            to[1][x] = o1[x] + o2[x];
            to[2][x] = o2[x] - o1[x];
            to[3][x] = o1[x] - o3[x];
        }
        for (int i = 0; i < 4; i++) { /* (B^T d) B: across, columns (e[x], o[x], e[x+1], o[x+1]) */
            const float *e = te[i], *o = to[i];
            float *v0 = out + (4 * i) * th * tw + ty * tw, *v1 = v0 + th * tw, *v2 = v1 + th * tw, *v3 = v2 + th * tw;
#pragma GCC ivdep
            for (int64_t x = 0; x < tw; x++) {
                v0[x] = e[x] - e[x + 1];
                v1[x] = o[x] + e[x + 1];
                v2[x] = e[x + 1] - o[x];
                v3[x] = o[x] - o[x + 1];
            }
        }
    }
    float *dst = j->dst + c * tiles + b * th * tw;
    for (int xi = 0; xi < 16; xi++)
        memcpy(dst + xi * plane, out + xi * th * tw, (size_t)(th * tw) * sizeof(float));
}

/* ------------------------------------------------------------------ output: Y = A^T M A */
/* A^T = [[1, 1, 1, 0], [0, 1, -1, -1]].  scratch: a row of tiles' four outputs (4 * tw)
 * and two output rows (4 * tw). */
static inline int64_t output_scratch_floats(const wg_job *j) { return 8 * j->tw; }

static inline __attribute__((always_inline)) void output_plane(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, o = u % j->nc, tw = j->tw, tiles = j->nb * j->th * tw, plane = j->nc * tiles;
    float *img = j->dst + u * j->oh * j->ow;
    float *y00 = scratch, *y01 = y00 + tw, *y10 = y01 + tw, *y11 = y10 + tw, *r0 = y11 + tw, *r1 = r0 + 2 * tw;
    for (int64_t ty = 0; ty < j->th; ty++) {
        const float *m = j->src + o * tiles + (b * j->th + ty) * tw;
        const float *m0 = m, *m1 = m + plane, *m2 = m + 2 * plane, *m3 = m + 3 * plane;
        const float *m4 = m + 4 * plane, *m5 = m + 5 * plane, *m6 = m + 6 * plane, *m7 = m + 7 * plane;
        const float *m8 = m + 8 * plane, *m9 = m + 9 * plane, *m10 = m + 10 * plane, *m11 = m + 11 * plane;
        const float *m12 = m + 12 * plane, *m13 = m + 13 * plane, *m14 = m + 14 * plane, *m15 = m + 15 * plane;
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) {
            /* A^T M: rows 0 + 1 + 2 and 1 - 2 - 3, per column q */
            float s00 = m0[x] + m4[x] + m8[x], s01 = m1[x] + m5[x] + m9[x];
            float s02 = m2[x] + m6[x] + m10[x], s03 = m3[x] + m7[x] + m11[x];
            float s10 = m4[x] - m8[x] - m12[x], s11 = m5[x] - m9[x] - m13[x];
            float s12 = m6[x] - m10[x] - m14[x], s13 = m7[x] - m11[x] - m15[x];
            y00[x] = s00 + s01 + s02;
            y01[x] = s01 - s02 - s03;
            y10[x] = s10 + s11 + s12;
            y11[x] = s11 - s12 - s13;
        }
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) {
            r0[2 * x] = y00[x];
            r0[2 * x + 1] = y01[x];
            r1[2 * x] = y10[x];
            r1[2 * x + 1] = y11[x];
        }
        memcpy(img + 2 * ty * j->ow, r0, (size_t)j->ow * sizeof(float));
        if (2 * ty + 1 < j->oh) memcpy(img + (2 * ty + 1) * j->ow, r1, (size_t)j->ow * sizeof(float));
    }
}

/* ------------------------------------------------------------------ 1x3 kernels: F(4, 3) per row */
/* A 1x3 kernel (a 1-D convolution is one of height 1) convolves each image row on its
 * own: tiles of 4 outputs from 6 inputs, 6 positions (U = G g, V = B^T d, Y = A^T m over
 * the points 0, 1, -1, 2, -2 and infinity), tile t = (b * h + y) * tw + tx reading padded
 * columns 4 tx .. 4 tx + 5.  1.5 multiplies per output and input channel where F(2, 3)
 * has 2 and im2col 3: the products over the channels (most of the time) are 0.75x as
 * long as F(2, 3)'s.  Its rounding is a few times F(2, 3)'s (G's sixths and 24ths, the
 * transforms' 4s and 8s): about 2e-6 of the output's scale against float64 for 64-256
 * channels, F(2, 3)'s 3e-7 to 5e-7.
 *
 *   B^T = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
 *          [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
 *   G   = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6],
 *          [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]]
 *   A^T = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
 *
 * The flipped kernel (a stride-1 transposed convolution's) is the same sums over the
 * taps reversed. */
#define ROW_POSITIONS 6
static inline __attribute__((always_inline)) void kernel_row_1x3(const float *k, float *u, int64_t co, int64_t ci,
                                                                  int64_t o, int flip, int swapped) {
    const int64_t plane = co * ci;
    float *u0 = u + o * ci, *u1 = u0 + plane, *u2 = u1 + plane, *u3 = u2 + plane, *u4 = u3 + plane, *u5 = u4 + plane;
    /* kernel (o, c)'s taps: k (co, ci, 1, 3), or swapped, k (ci, co, 1, 3) (a transposed
     * convolution's, read in place: NumPy's copy of its transpose, runs of 3 floats, took
     * 80 µs for 64 x 64 channels, a twelfth of the layer's input gradient) */
    const float *src = swapped ? k + o * 3 : k + o * ci * 3;
    const int64_t step = swapped ? co * 3 : 3;
    const int first = flip ? 2 : 0, last = 2 - first;
#pragma GCC ivdep
    for (int64_t c = 0; c < ci; c++) {
        float a = src[step * c + first], b = src[step * c + 1], d = src[step * c + last];
        float s = a + d, q = a + 4.0f * d;
        u0[c] = 0.25f * a;
        u1[c] = -(s + b) / 6.0f;
        u2[c] = -(s - b) / 6.0f;
        u3[c] = (q + 2.0f * b) / 24.0f;
        u4[c] = (q - 2.0f * b) / 24.0f;
        u5[c] = d;
    }
}

/* A row of w values split into n of each of four phases: p[r][i] = row[4 i + r - shift],
 * zero outside [0, w).  Between the edges the row is read in place (through a padded
 * copy of the row, 28% of the transforms' time sat on the first load after the copy). */
static inline __attribute__((always_inline)) void split_row4(const float *row, int64_t w, int64_t shift, int64_t n,
                                                              float *p0, float *p1, float *p2, float *p3) {
    /* i in [lo, hi): 4 i - shift >= 0 and 4 i + 3 - shift < w (shift >= 0) */
    int64_t lo = (shift + 3) / 4, hi = (w + shift) / 4;
    if (hi > n) hi = n;
    if (lo > hi) hi = lo; /* (none in place) */
    float *p[4] = {p0, p1, p2, p3};
    for (int64_t i = 0; i < n; i++) {
        if (i == lo) i = hi;
        if (i >= n) break;
        for (int r = 0; r < 4; r++) {
            int64_t x = 4 * i + r - shift;
            p[r][i] = x >= 0 && x < w ? row[x] : 0.0f;
        }
    }
    const float *src = row - shift;
#pragma GCC ivdep
    for (int64_t i = lo; i < hi; i++) {
        p0[i] = src[4 * i];
        p1[i] = src[4 * i + 1];
        p2[i] = src[4 * i + 2];
        p3[i] = src[4 * i + 3];
    }
}

/* scratch: the row's four phases (tw + 1 each), and the plane's 6 runs */
static inline int64_t input_row_scratch_floats(const wg_job *j) { return 4 * (j->tw + 1) + 6 * j->h * j->tw; }

static inline __attribute__((always_inline)) void input_plane_1x3(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, c = u % j->nc, h = j->h, tw = j->tw, n = tw + 1;
    const int64_t tiles = j->nb * h * tw, plane = j->nc * tiles;
    const float *img = j->src + u * h * j->w;
    float *p0 = scratch, *p1 = p0 + n, *p2 = p1 + n, *p3 = p2 + n, *out = p3 + n;
    for (int64_t y = 0; y < h; y++) {
        split_row4(img + y * j->w, j->w, j->pw, n, p0, p1, p2, p3);
        float *v0 = out + y * tw, *v1 = v0 + h * tw, *v2 = v1 + h * tw, *v3 = v2 + h * tw, *v4 = v3 + h * tw,
              *v5 = v4 + h * tw;
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) { /* d0 .. d5 = p0[x], p1[x], p2[x], p3[x], p0[x + 1], p1[x + 1] */
            float d0 = p0[x], d1 = p1[x], d2 = p2[x], d3 = p3[x], d4 = p0[x + 1], d5 = p1[x + 1];
            float e = d4 - d2, f = 2.0f * (d3 - d1);
            v0[x] = (4.0f * d0 - 5.0f * d2) + d4;
            v1[x] = (d3 + d4) - 4.0f * (d1 + d2);
            v2[x] = (d4 - d3) + 4.0f * (d1 - d2);
            v3[x] = e + f;
            v4[x] = e - f;
            v5[x] = (4.0f * d1 - 5.0f * d3) + d5;
        }
    }
    float *dst = j->dst + c * tiles + b * h * tw;
    for (int xi = 0; xi < ROW_POSITIONS; xi++)
        memcpy(dst + xi * plane, out + xi * h * tw, (size_t)(h * tw) * sizeof(float));
}

static inline int64_t output_row_scratch_floats(const wg_job *j) { return 4 * j->tw; }

static inline __attribute__((always_inline)) void output_plane_1x3(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, o = u % j->nc, h = j->oh, tw = j->tw, tiles = j->nb * h * tw;
    const int64_t plane = j->nc * tiles;
    float *img = j->dst + u * h * j->ow;
    for (int64_t y = 0; y < h; y++) {
        const float *m0 = j->src + o * tiles + (b * h + y) * tw, *m1 = m0 + plane, *m2 = m1 + plane, *m3 = m2 + plane;
        const float *m4 = m3 + plane, *m5 = m4 + plane;
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) {
            float a = m1[x] + m2[x], bb = m1[x] - m2[x], cc = m3[x] + m4[x], dd = m3[x] - m4[x];
            scratch[4 * x] = m0[x] + a + cc;
            scratch[4 * x + 1] = bb + 2.0f * dd;
            scratch[4 * x + 2] = a + 4.0f * cc;
            scratch[4 * x + 3] = (bb + 8.0f * dd) + m5[x];
        }
        memcpy(img + y * j->ow, scratch, (size_t)j->ow * sizeof(float));
    }
}

/* ------------------------------------------------------------------ kernel gradient */
/* The forward pass is linear in U: Y = A^T (U . V) A per tile, so the kernel's gradient
 * is dk = G^T dU G with dU[xi] = sum over tiles of (A dY A^T)[xi] V[xi] - for each of the
 * 16 positions a product (c_out, T) @ (T, c_in) of the transformed output gradient and
 * the forward's transformed input. The two transforms below are the adjoints of the
 * output and kernel transforms:
 *
 *  - grad_transform(dy, w, nb, nco, oh, ow, th, tw): dy (nb, nco, oh, ow) -> w (16, nco, T),
 *    each 2x2 tile (zero past oh / ow) to A dY A^T, A = [[1, 0], [1, 1], [1, -1], [0, -1]];
 *  - kernel_grad_transform(m, dk, co, ci): m (16, co, ci) -> dk (co, ci, 3, 3) = G^T M G;
 *  - and the same for 1x3 kernels (F(4, 3)): grad_transform_row(dy, w, nb, nco, h, ow,
 *    tw) -> (6, nco, nb * h * tw) and kernel_grad_transform_row(m, dk, co, ci) -> (co, ci,
 *    1, 3). */
static inline int64_t grad_scratch_floats(const wg_job *j) { return 4 * j->tw + 16 * j->th * j->tw; }

static inline __attribute__((always_inline)) void grad_plane(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, o = u % j->nc, th = j->th, tw = j->tw;
    const int64_t tiles = j->nb * th * tw, plane = j->nc * tiles, run = th * tw;
    const float *img = j->src + u * j->oh * j->ow;
    float *ea = scratch, *ob = ea + tw, *ec = ob + tw, *od = ec + tw, *out = od + tw;
    for (int64_t ty = 0; ty < th; ty++) {
        /* the tile's rows: a b / c d = even and odd columns of output rows 2ty and 2ty + 1 */
        split_row(img + 2 * ty * j->ow, j->ow, 0, tw, ea, ob);
        split_row(2 * ty + 1 < j->oh ? img + (2 * ty + 1) * j->ow : NULL, j->ow, 0, tw, ec, od);
        float *w0 = out + ty * tw;
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) {
            /* A dY: rows (p, q) = (a, b), (a + c, b + d), (a - c, b - d), (-c, -d); each row
             * times A^T: (p, p + q, p - q, -q) */
            float a = ea[x], bb = ob[x], c = ec[x], d = od[x];
            float p1 = a + c, q1 = bb + d, p2 = a - c, q2 = bb - d;
            w0[x] = a;
            w0[run + x] = a + bb;
            w0[2 * run + x] = a - bb;
            w0[3 * run + x] = -bb;
            w0[4 * run + x] = p1;
            w0[5 * run + x] = p1 + q1;
            w0[6 * run + x] = p1 - q1;
            w0[7 * run + x] = -q1;
            w0[8 * run + x] = p2;
            w0[9 * run + x] = p2 + q2;
            w0[10 * run + x] = p2 - q2;
            w0[11 * run + x] = -q2;
            w0[12 * run + x] = -c;
            w0[13 * run + x] = -c - d;
            w0[14 * run + x] = d - c;
            w0[15 * run + x] = d;
        }
    }
    float *dst = j->dst + o * tiles + b * run;
    for (int xi = 0; xi < 16; xi++) memcpy(dst + xi * plane, out + xi * run, (size_t)run * sizeof(float));
}

/* G^T M G for the c_in channels of output channel o, KBLOCK at a time through a local
 * block (the 9 taps of a channel pair are interleaved in dk). G^T = [[1, 1/2, 1/2, 0],
 * [0, 1/2, -1/2, 0], [0, 1/2, 1/2, 1]]: a column (m0, m1, m2, m3) gives
 * (m0 + (m1 + m2) / 2, (m1 - m2) / 2, (m1 + m2) / 2 + m3). */
#ifdef TALLOW_X86
/* kernel_grad_rows 16 channel pairs at a time in zmm registers (the same sums in the
 * same order: the same bits), each tap's 16 values scattered to their place among
 * the pairs' interleaved taps. */
static AVX512F void kernel_grad_rows_zmm(const float *m, float *dk, int64_t co, int64_t ci, int64_t o) {
    const int64_t plane = co * ci;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(9));
    const __m512 half = _mm512_set1_ps(0.5f);
    for (int64_t c0 = 0; c0 < ci; c0 += 16) {
        const __mmask16 mask = ci - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ci - c0)) - 1);
        const float *src = m + o * ci + c0;
        __m512 t[3][4];
        for (int q = 0; q < 4; q++) { /* G^T M: down each column q */
            __m512 m0 = _mm512_maskz_loadu_ps(mask, src + q * plane), m1 = _mm512_maskz_loadu_ps(mask, src + (4 + q) * plane);
            __m512 m2 = _mm512_maskz_loadu_ps(mask, src + (8 + q) * plane), m3 = _mm512_maskz_loadu_ps(mask, src + (12 + q) * plane);
            __m512 h = _mm512_mul_ps(half, _mm512_add_ps(m1, m2));
            t[0][q] = _mm512_add_ps(m0, h);
            t[1][q] = _mm512_mul_ps(half, _mm512_sub_ps(m1, m2));
            t[2][q] = _mm512_add_ps(h, m3);
        }
        float *dst = dk + (o * ci + c0) * 9;
        for (int r = 0; r < 3; r++) { /* (G^T M) G: across each row r */
            __m512 h = _mm512_mul_ps(half, _mm512_add_ps(t[r][1], t[r][2]));
            _mm512_mask_i32scatter_ps(dst + 3 * r, mask, idx, _mm512_add_ps(t[r][0], h), 4);
            _mm512_mask_i32scatter_ps(dst + 3 * r + 1, mask, idx, _mm512_mul_ps(half, _mm512_sub_ps(t[r][1], t[r][2])), 4);
            _mm512_mask_i32scatter_ps(dst + 3 * r + 2, mask, idx, _mm512_add_ps(h, t[r][3]), 4);
        }
    }
}
#endif

static inline __attribute__((always_inline)) void kernel_grad_rows(const float *m, float *dk, int64_t co,
                                                                    int64_t ci, int64_t o) {
#ifdef TALLOW_X86
    if (use_avx512 && use_avx2) {
        kernel_grad_rows_zmm(m, dk, co, ci, o);
        return;
    }
#endif
    const int64_t plane = co * ci;
    float blk[9][KBLOCK];
    for (int64_t c0 = 0; c0 < ci; c0 += KBLOCK) {
        const int64_t n = ci - c0 < KBLOCK ? ci - c0 : KBLOCK;
        const float *src = m + o * ci + c0;
        float t[3][4][KBLOCK];
        for (int q = 0; q < 4; q++) { /* G^T M: down each column q */
            const float *m0 = src + q * plane, *m1 = src + (4 + q) * plane;
            const float *m2 = src + (8 + q) * plane, *m3 = src + (12 + q) * plane;
            float *t0 = t[0][q], *t1 = t[1][q], *t2 = t[2][q];
#pragma GCC ivdep
            for (int64_t c = 0; c < n; c++) {
                float half = 0.5f * (m1[c] + m2[c]);
                t0[c] = m0[c] + half;
                t1[c] = 0.5f * (m1[c] - m2[c]);
                t2[c] = half + m3[c];
            }
        }
        for (int r = 0; r < 3; r++) { /* (G^T M) G: across each row r */
            const float *t0 = t[r][0], *t1 = t[r][1], *t2 = t[r][2], *t3 = t[r][3];
            float *k0 = blk[3 * r], *k1 = blk[3 * r + 1], *k2 = blk[3 * r + 2];
#pragma GCC ivdep
            for (int64_t c = 0; c < n; c++) {
                float half = 0.5f * (t1[c] + t2[c]);
                k0[c] = t0[c] + half;
                k1[c] = 0.5f * (t1[c] - t2[c]);
                k2[c] = half + t3[c];
            }
        }
        float *dst = dk + (o * ci + c0) * 9;
        for (int64_t c = 0; c < n; c++)
            for (int tap = 0; tap < 9; tap++) dst[c * 9 + tap] = blk[tap][c];
    }
}

/* The row form's adjoints: W = A dy per tile of 4 outputs (zero past ow), A = (A^T)^T;
 * dk = G^T m. scratch: the row's four phases (tw each), the plane's 6 runs. */
static inline int64_t grad_row_scratch_floats(const wg_job *j) { return 4 * j->tw + 6 * j->oh * j->tw; }

static inline __attribute__((always_inline)) void grad_plane_1x3(const wg_job *j, int64_t u, float *scratch) {
    const int64_t b = u / j->nc, o = u % j->nc, h = j->oh, tw = j->tw, run = h * tw;
    const int64_t tiles = j->nb * run, plane = j->nc * tiles;
    const float *img = j->src + u * h * j->ow;
    float *q0 = scratch, *q1 = q0 + tw, *q2 = q1 + tw, *q3 = q2 + tw, *out = q3 + tw;
    for (int64_t y = 0; y < h; y++) {
        split_row4(img + y * j->ow, j->ow, 0, tw, q0, q1, q2, q3);
        float *w0 = out + y * tw;
#pragma GCC ivdep
        for (int64_t x = 0; x < tw; x++) { /* A (y0, y1, y2, y3) */
            float y0 = q0[x], y1 = q1[x], y2 = q2[x], y3 = q3[x];
            float s = y0 + y2, t = y1 + y3, s2 = y0 + 4.0f * y2, t2 = 2.0f * y1 + 8.0f * y3;
            w0[x] = y0;
            w0[run + x] = s + t;
            w0[2 * run + x] = s - t;
            w0[3 * run + x] = s2 + t2;
            w0[4 * run + x] = s2 - t2;
            w0[5 * run + x] = y3;
        }
    }
    float *dst = j->dst + o * tiles + b * run;
    for (int xi = 0; xi < ROW_POSITIONS; xi++)
        memcpy(dst + xi * plane, out + xi * run, (size_t)run * sizeof(float));
}

static inline __attribute__((always_inline)) void kernel_grad_row_1x3(const float *m, float *dk, int64_t co,
                                                                       int64_t ci, int64_t o) {
    const int64_t plane = co * ci;
    const float *m0 = m + o * ci, *m1 = m0 + plane, *m2 = m1 + plane, *m3 = m2 + plane, *m4 = m3 + plane;
    const float *m5 = m4 + plane;
    float *dst = dk + o * ci * 3;
    for (int64_t c = 0; c < ci; c++) {
        float a = m1[c] + m2[c], bb = m1[c] - m2[c], cc = m3[c] + m4[c], dd = m3[c] - m4[c];
        dst[3 * c] = (0.25f * m0[c] - a / 6.0f) + cc / 24.0f;
        dst[3 * c + 1] = (0.5f * dd - bb) / 6.0f;
        dst[3 * c + 2] = (cc - a) / 6.0f + m5[c];
    }
}

/* ------------------------------------------------------------------ whole convolutions */
/* conv(x, u, y, ...) and conv_row: the three passes for a few images at a time, one
 * chunk of images per task of the pool, so that each core reads back only the tiles
 * it wrote (split pass by pass, half of each pass's input came from the other core's
 * cache), and so that a few images' tiles stay in the cache from one pass to the
 * next (a 64->64 layer, batch 8 of 16x16: 1.93 -> 1.65 ms on one thread, 1.61 -> 1.31
 * ms on two).  The products are the capsule's (`_gemm.h`), on the task's thread, over
 * a group of images whose tiles (input and output, all positions) fit in about
 * `group_bytes`; the same sums as the pass-by-pass path, so the same bits. */
typedef struct {
    int64_t nb, nc, co, h, w, ph, pw, oh, ow, th, tw; /* th = h for a 1x3 kernel */
    int row;                                           /* 1x3 kernel: F(4, 3) per image row */
    int64_t bands; /* conv's 3x3 form: tile-row bands per image, one pool unit each (1: whole images) */
    /* conv_groups: each unit one image and one group of output channels, transforming
     * its own columns of U^T from the kernel k (flip: k is a transposed convolution's,
     * (nc, co, 3, 3)); u unused */
    int64_t groups;
    const float *k;
    int flip;
    const float *x, *u;
    float *y;
    _Atomic int *failed;
} conv_job;

static int64_t group_bytes = 256 << 10;


static inline int64_t conv_positions(const conv_job *c) { return c->row ? ROW_POSITIONS : 16; }

/* Images per product: their tiles (input and output, every position) in group_bytes. */
static inline int64_t conv_group(const conv_job *c) {
    int64_t per_image = conv_positions(c) * (c->nc + c->co) * c->th * c->tw * (int64_t)sizeof(float);
    int64_t g = group_bytes / (per_image > 0 ? per_image : 1);
    return g < 1 ? 1 : g;
}

/* A 1x3 kernel's input tiles of images [i0, i0 + n) into v (6, nc, n * h * tw), through
 * `in` (3x3 kernels take LANES_INPUTS, below). */
static inline __attribute__((always_inline)) void group_inputs(const conv_job *c, wg_job *in, int64_t i0, int64_t n,
                                                                float *v, float *scratch) {
    in->nb = n, in->src = c->x + i0 * c->nc * c->h * c->w, in->dst = v;
    for (int64_t q = 0; q < n * c->nc; q++) input_plane_1x3(in, q, scratch);
}

/* conv_row's task (3x3 kernels take LANES_CONV_TASK, below). */
#define CONV_TASK(NAME, ATTR)                                                                     \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const conv_job *c = (const conv_job *)p;                                                  \
        const int64_t P = conv_positions(c), run = c->th * c->tw;                                 \
        int64_t g = conv_group(c);                                                                \
        if (g > hi - lo) g = hi - lo;                                                             \
        wg_job in = {g, c->nc, c->h, c->w, c->ph, c->pw, 0, 0, c->th, c->tw, NULL, NULL, c->failed}; \
        wg_job out = {g, c->co, 0, 0, 0, 0, c->oh, c->ow, c->th, c->tw, NULL, NULL, c->failed};   \
        int64_t in_s = input_row_scratch_floats(&in), out_s = output_row_scratch_floats(&out);    \
        const size_t floats = (size_t)(P * (c->nc + c->co) * g * run + in_s + out_s);                \
        float *v = scratch_get(floats);                                                             \
        if (!v) {                                                                                 \
            atomic_store(c->failed, 1);                                                           \
            return;                                                                               \
        }                                                                                         \
        float *m = v + P * c->nc * g * run, *s_in = m + P * c->co * g * run, *s_out = s_in + in_s; \
        for (int64_t i0 = lo; i0 < hi; i0 += g) {                                                 \
            const int64_t n = hi - i0 < g ? hi - i0 : g, tiles = n * run;                         \
            out.nb = n;                                                                           \
            group_inputs(c, &in, i0, n, v, s_in);                                                 \
            if (!tallow_gemm->product(c->u, c->co * c->nc, c->nc, 1, v, c->nc * tiles, tiles, 1, m, P, c->co, \
                                      tiles, c->nc, 0)) {                                         \
                atomic_store(c->failed, 1);                                                       \
                break;                                                                            \
            }                                                                                     \
            out.src = m, out.dst = c->y + i0 * c->co * c->oh * c->ow;                             \
            for (int64_t q = 0; q < n * c->co; q++) output_plane_1x3(&out, q, s_out);             \
        }                                                                                         \
        scratch_done(v, floats);                                                                    \
    }

/* ------------------------------------------------------------------ the forward in channel lanes */
/* conv's 3x3 form runs its transforms with a vector's lanes over 16 channels, not over
 * a row's tiles: a 16x16 image has rows of 8 tiles, so the tile-row loops above ran
 * one short vector per row between their pointer set-ups, about 3 cycles per float
 * of V.  Per image and block of 16 channels, the zero-padded input is transposed once
 * into pixels of 16 channels (8x8 register transposes); each tile is then 16 vector
 * loads, 32 adds and 16 vector stores into V (16, tiles, channels rounded up to 16),
 * the product runs as M[xi] (tiles, co) = V[xi] @ U^T[xi] (the kernel transformed into
 * (16, nc, co): kernel_transform_t), and the output transform
 * reads 16 output channels of a tile per load and writes pixels of 16 channels,
 * transposed back into the NCHW planes.  Every value is the same arithmetic in the
 * same order as the tile-row passes (and each product element the same FMA chain
 * over the input channels): the same bits. */
#define LANES 16
/* The lanes are computed a vector at a time: one of 16 (a zmm register) in the AVX-512
 * build, two of 8 in the others (a 16-float vector type in an AVX2 build went through
 * the stack, half a vector at a time). */
typedef float vec16_t __attribute__((vector_size(64), aligned(4)));
typedef float vec8_t __attribute__((vector_size(32), aligned(4)));

static inline int64_t round_lanes(int64_t c) { return (c + LANES - 1) / LANES * LANES; }

/* Channels [c0, c0 + cr) of an image (`img`: channel c0's plane, planes hw floats apart)
 * into xp (hp, wp, LANES): padded pixel (y, x) is image pixel (y - ph, x - pw), zero
 * outside the image and in the lanes past cr (ph < 0: a band of rows further down).
 * The SIMD form moves 8 pixels x 8 channels per register transpose. */
#define TO_LANES(NAME, ATTR, SIMD)                                                                \
    static ATTR inline __attribute__((always_inline)) void NAME(                                  \
        const float *img, int64_t hw, int64_t h, int64_t w, int64_t ph, int64_t pw, int cr, int64_t hp, \
        int64_t wp, float *xp) {                                                                  \
        memset(xp, 0, (size_t)(hp * wp * LANES) * sizeof(float));                                \
        const int64_t nx = w < wp - pw ? w : wp - pw;                                             \
        for (int64_t iy = ph < 0 ? -ph : 0; iy < h && iy + ph < hp; iy++) {                       \
            float *row = xp + ((iy + ph) * wp + pw) * LANES;                                      \
            const float *src = img + iy * w;                                                      \
            int64_t ix = 0;                                                                       \
            if (SIMD && cr == LANES) ix = to_lanes_8x8(src, hw, nx, row);                         \
            for (; ix < nx; ix++)                                                                 \
                for (int l = 0; l < cr; l++) row[ix * LANES + l] = src[l * hw + ix];              \
        }                                                                                         \
    }

/* xl (oh rows of wl pixels, LANES channels each) into cr NCHW planes from `y` (channel
 * o0's plane, planes ohw floats apart), the first ow pixels of each row. */
#define FROM_LANES(NAME, ATTR, SIMD)                                                              \
    static ATTR inline __attribute__((always_inline)) void NAME(                                  \
        const float *yl, int64_t wl, float *y, int64_t ohw, int64_t oh, int64_t ow, int cr) {     \
        for (int64_t oy = 0; oy < oh; oy++) {                                                     \
            const float *row = yl + oy * wl * LANES;                                              \
            float *dst = y + oy * ow;                                                             \
            int64_t ox = 0;                                                                       \
            if (SIMD && cr == LANES) ox = from_lanes_8x8(row, ow, ohw, dst);                      \
            for (; ox < ow; ox++)                                                                 \
                for (int l = 0; l < cr; l++) dst[l * ohw + ox] = row[ox * LANES + l];             \
        }                                                                                         \
    }

#ifdef TALLOW_X86
/* 16 channel rows (hw floats apart) -> pixels of 16 lanes, 8 pixels at a time; returns
 * the pixels done. */
static AVX2 inline __attribute__((always_inline)) int64_t to_lanes_8x8(const float *src, int64_t hw, int64_t nx,
                                                                        float *row) {
    int64_t ix = 0;
    for (; ix + 8 <= nx; ix += 8)
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (8 * half + i) * hw + ix);
            transpose8x8_ps(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(row + (ix + j) * LANES + 8 * half, r[j]);
        }
    return ix;
}

/* Pixels of 16 lanes -> 16 channel rows (ohw floats apart), 8 pixels at a time. */
static AVX2 inline __attribute__((always_inline)) int64_t from_lanes_8x8(const float *row, int64_t ow, int64_t ohw,
                                                                          float *dst) {
    int64_t ox = 0;
    for (; ox + 8 <= ow; ox += 8)
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(row + (ox + j) * LANES + 8 * half);
            transpose8x8_ps(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (8 * half + i) * ohw + ox, r[i]);
        }
    return ox;
}
TO_LANES(to_lanes_simd, AVX2, 1)
FROM_LANES(from_lanes_simd, AVX2, 1)
#endif
/* (the baseline forms never call the 8x8 helpers) */
#define to_lanes_8x8(src, hw, nx, row) 0
#define from_lanes_8x8(row, ow, ohw, dst) 0
TO_LANES(to_lanes_base, , 0)
FROM_LANES(from_lanes_base, , 0)
#undef to_lanes_8x8
#undef from_lanes_8x8

/* The per-tile transforms on 16 lanes, VT vectors (VW floats) at a time: LANE_TILES(SFX,
 * VT, VW) defines input_tiles##SFX and output_tiles##SFX.
 *
 * input_tiles: V = B^T d B of every tile of one image's channel block, xp (hp, wp,
 * LANES) -> v rows t0 + ty * tw + tx, columns [c0, c0 + LANES), planes `vplane` floats
 * apart (rows civ).
 * output_tiles: Y = A^T M A of every tile of one image, m rows t0 + ty * tw + tx (planes
 * `mplane` floats apart, rows co), columns [o0, o0 + LANES) -> yl (2 th, 2 tw, LANES).
 * The arithmetic of input_plane and output_plane, in their order. */
#define LD(T, p) (*(const T *)(p))
#define ST(T, p) (*(T *)(p))
#define LANE_TILES(SFX, VT, VW)                                                                   \
    static inline __attribute__((always_inline)) void input_tiles##SFX(                           \
        const float *xp, int64_t wp, int64_t th, int64_t tw, float *v, int64_t vplane, int64_t civ, int64_t t0, \
        int64_t c0) {                                                                             \
        for (int64_t ty = 0; ty < th; ty++)                                                       \
            for (int64_t tx = 0; tx < tw; tx++)                                                   \
                for (int h = 0; h < LANES; h += VW) {                                             \
                    const float *p = xp + (2 * ty * wp + 2 * tx) * LANES + h;                     \
                    VT t[4][4];                                                                   \
                    for (int j = 0; j < 4; j++) { /* B^T d: down the tile's four rows */          \
                        VT d0 = LD(VT, p + j * LANES), d1 = LD(VT, p + (wp + j) * LANES);                 \
                        VT d2 = LD(VT, p + (2 * wp + j) * LANES), d3 = LD(VT, p + (3 * wp + j) * LANES);  \
                        t[0][j] = d0 - d2;                                                        \
                        t[1][j] = d1 + d2;                                                        \
                        t[2][j] = d2 - d1;                                                        \
                        t[3][j] = d1 - d3;                                                        \
                    }                                                                             \
                    float *dst = v + (t0 + ty * tw + tx) * civ + c0 + h;                          \
                    for (int i = 0; i < 4; i++) { /* (B^T d) B: across */                         \
                        ST(VT, dst + (4 * i) * vplane) = t[i][0] - t[i][2];                           \
                        ST(VT, dst + (4 * i + 1) * vplane) = t[i][1] + t[i][2];                       \
                        ST(VT, dst + (4 * i + 2) * vplane) = t[i][2] - t[i][1];                       \
                        ST(VT, dst + (4 * i + 3) * vplane) = t[i][1] - t[i][3];                       \
                    }                                                                             \
                }                                                                                 \
    }                                                                                             \
    static inline __attribute__((always_inline)) void output_tiles##SFX(                          \
        const float *m, int64_t mplane, int64_t co, int64_t t0, int64_t o0, int64_t th, int64_t tw, float *yl) { \
        const int64_t wl = 2 * tw;                                                                \
        for (int64_t ty = 0; ty < th; ty++)                                                       \
            for (int64_t tx = 0; tx < tw; tx++)                                                   \
                for (int h = 0; h < LANES; h += VW) {                                             \
                    const float *q = m + (t0 + ty * tw + tx) * co + o0 + h;                       \
                    VT x[16];                                                                     \
                    for (int xi = 0; xi < 16; xi++) x[xi] = LD(VT, q + xi * mplane);                  \
                    /* A^T M: rows 0 + 1 + 2 and 1 - 2 - 3, per column */                        \
                    VT s00 = x[0] + x[4] + x[8], s01 = x[1] + x[5] + x[9];                        \
                    VT s02 = x[2] + x[6] + x[10], s03 = x[3] + x[7] + x[11];                      \
                    VT s10 = x[4] - x[8] - x[12], s11 = x[5] - x[9] - x[13];                      \
                    VT s12 = x[6] - x[10] - x[14], s13 = x[7] - x[11] - x[15];                    \
                    float *y = yl + (2 * ty * wl + 2 * tx) * LANES + h;                           \
                    ST(VT, y) = s00 + s01 + s02;                                                      \
                    ST(VT, y + LANES) = s01 - s02 - s03;                                              \
                    ST(VT, y + wl * LANES) = s10 + s11 + s12;                                         \
                    ST(VT, y + (wl + 1) * LANES) = s11 - s12 - s13;                                   \
                }                                                                                 \
    }
LANE_TILES(_v8, vec8_t, 8)
LANE_TILES(_v16, vec16_t, 16)
#undef LD
#undef ST

/* V (16, n * bh * tw, civ) of tile rows [ty0, ty0 + bh) of images [i0, i0 + n): each
 * image's channel blocks through xp (TO: the build's to_lanes; SFX: its vector width). */
#define LANES_INPUTS(c, TO, SFX, i0, n, ty0, bh, v, civ, xp)                                      \
    do {                                                                                          \
        const int64_t hw_ = (c)->h * (c)->w, wp_ = 2 * (c)->tw + 2, run_ = (bh) * (c)->tw;        \
        for (int64_t b_ = 0; b_ < (n); b_++)                                                      \
            for (int64_t c0_ = 0; c0_ < (c)->nc; c0_ += LANES) {                                  \
                TO((c)->x + (((i0) + b_) * (c)->nc + c0_) * hw_, hw_, (c)->h, (c)->w, (c)->ph - 2 * (ty0), \
                   (c)->pw, (int)((c)->nc - c0_ < LANES ? (c)->nc - c0_ : LANES), 2 * (bh) + 2, wp_, (xp)); \
                input_tiles##SFX((xp), wp_, (bh), (c)->tw, (v), (n) * run_ * (civ), (civ), b_ * run_, c0_); \
            }                                                                                     \
    } while (0)

/* xp's floats: one image's channel block, zero-padded (LANES_INPUTS). */
static inline int64_t lanes_input_floats(const conv_job *c) { return (2 * c->th + 2) * (2 * c->tw + 2) * LANES; }

/* The task: conv's units [lo, hi): images, a group at a time (as CONV_TASK), or with
 * c->bands > 1 each image's bands of tile rows, one at a time (a single image, or too
 * few to share out, split over the threads: every tile is computed on its own, and each
 * product element is the same FMA chain over the input channels however the tiles are
 * cut, so the bits do not depend on the bands). */
#define LANES_CONV_TASK(NAME, ATTR, TO, FROM, SFX)                                                \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const conv_job *c = (const conv_job *)p;                                                  \
        const int64_t run = c->th * c->tw, civ = round_lanes(c->nc), bands = c->bands;            \
        const int64_t ohw = c->oh * c->ow;                                                        \
        int64_t g = bands > 1 ? 1 : conv_group(c);                                                \
        if (g > hi - lo) g = hi - lo;                                                             \
        const size_t floats = (size_t)(16 * (civ + c->co) * g * run + LANES + lanes_input_floats(c) + \
                                       4 * run * LANES);                                          \
        float *v = scratch_get(floats);                                                           \
        if (!v) {                                                                                 \
            atomic_store(c->failed, 1);                                                           \
            return;                                                                               \
        }                                                                                         \
        /* (m has LANES floats of slack: a last partial block of channels reads past co) */      \
        float *m = v + 16 * civ * g * run, *xp = m + 16 * c->co * g * run + LANES, *yl = xp + lanes_input_floats(c); \
        for (int64_t u0 = lo; u0 < hi; u0 += g) {                                                 \
            /* n images from i0, tile rows [ty0, ty0 + bh) of each (output rows from oy0) */      \
            const int64_t n = hi - u0 < g ? hi - u0 : g, i0 = u0 / bands, band = u0 % bands;      \
            const int64_t ty0 = c->th * band / bands, bh = c->th * (band + 1) / bands - ty0;      \
            const int64_t brun = bh * c->tw, tiles = n * brun, oy0 = 2 * ty0;                     \
            const int64_t boh = (2 * (ty0 + bh) < c->oh ? 2 * (ty0 + bh) : c->oh) - oy0;          \
            LANES_INPUTS(c, TO, SFX, i0, n, ty0, bh, v, civ, xp);                                 \
            /* M[xi] (tiles, co) = V[xi] (tiles, nc) @ U^T[xi] (nc, co) */                        \
            if (!tallow_gemm->product(v, tiles * civ, civ, 1, c->u, c->co * c->nc, c->co, 1, m, 16, tiles, c->co, \
                                      c->nc, 0)) {                                                \
                atomic_store(c->failed, 1);                                                       \
                break;                                                                            \
            }                                                                                     \
            for (int64_t b = 0; b < n; b++)                                                       \
                for (int64_t o0 = 0; o0 < c->co; o0 += LANES) {                                   \
                    output_tiles##SFX(m, tiles * c->co, c->co, b * brun, o0, bh, c->tw, yl);      \
                    FROM(yl, 2 * c->tw, c->y + ((i0 + b) * c->co + o0) * ohw + oy0 * c->ow, ohw, boh, c->ow, \
                         (int)(c->co - o0 < LANES ? c->co - o0 : LANES));                         \
                }                                                                                 \
        }                                                                                         \
        scratch_done(v, floats);                                                                  \
    }

LANES_CONV_TASK(conv_lanes_base, , to_lanes_base, from_lanes_base, _v8)
#ifdef TALLOW_X86
LANES_CONV_TASK(conv_lanes_avx2, AVX2, to_lanes_simd, from_lanes_simd, _v8)
LANES_CONV_TASK(conv_lanes_avx512, AVX512F, to_lanes_simd, from_lanes_simd, _v16)
#endif

/* Columns [o0, o1) of U^T (16, nc, co) into ut (16, nc, o1 - o0): the values of
 * kernel_transform_t (or, flip, kernel_transform's with the positions permuted) from the
 * same kernel_block sums. */
static inline __attribute__((always_inline)) void ut_columns(const conv_job *c, int64_t o0, int64_t o1, float *ut) {
    const int64_t nc = c->nc, co = c->co, cw = o1 - o0;
    for (int64_t ch = 0; ch < nc; ch++)
        if (c->flip) /* k (nc, co, 3, 3): row ch, kernels o0.. contiguous (kernel_rows) */
            kernel_run(c->k + (ch * co + o0) * 9, 9, cw, ut + ch * cw, nc * cw, 1);
        else /* k (co, nc, 3, 3): kernels o0.. of input channel ch, nc * 9 apart (kernel_cols) */
            kernel_run(c->k + (o0 * nc + ch) * 9, nc * 9, cw, ut + ch * cw, nc * cw, 0);
}

/* The output channels of group `grp` of `groups`: whole blocks of LANES. */
static inline void group_channels(const conv_job *c, int64_t grp, int64_t *o0, int64_t *o1) {
    const int64_t blocks = (c->co + LANES - 1) / LANES;
    *o0 = LANES * (blocks * grp / c->groups);
    *o1 = LANES * (blocks * (grp + 1) / c->groups);
    if (*o1 > c->co) *o1 = c->co;
}

/* conv_groups' task: unit u is image u / groups, output channels of group u % groups.
 * A single image on two threads: split in bands, both threads read all of U (1 MB for
 * 128 channels) written by the kernel transform split over them, from the other
 * core's cache half of the time; here each thread transforms the columns of U it
 * multiplies by, in its own cache, and the input transform (a fifth of the product's
 * time) is done by both. Each product element is the same FMA chain over the input
 * channels, so the same bits as conv. */
#define GROUPS_CONV_TASK(NAME, ATTR, TO, FROM, SFX)                                               \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const conv_job *c = (const conv_job *)p;                                                  \
        const int64_t run = c->th * c->tw, civ = round_lanes(c->nc), ohw = c->oh * c->ow;         \
        const int64_t cmax = LANES * (((c->co + LANES - 1) / LANES + c->groups - 1) / c->groups); \
        const size_t floats = (size_t)(16 * (civ + cmax) * run + LANES + lanes_input_floats(c) +  \
                                       4 * run * LANES + 16 * c->nc * cmax);                      \
        float *v = scratch_get(floats);                                                           \
        if (!v) {                                                                                 \
            atomic_store(c->failed, 1);                                                           \
            return;                                                                               \
        }                                                                                         \
        float *m = v + 16 * civ * run, *xp = m + 16 * cmax * run + LANES, *yl = xp + lanes_input_floats(c); \
        float *ut = yl + 4 * run * LANES;                                                         \
        for (int64_t u = lo; u < hi; u++) {                                                       \
            const int64_t i0 = u / c->groups;                                                     \
            int64_t o0, o1;                                                                       \
            group_channels(c, u % c->groups, &o0, &o1);                                           \
            const int64_t cw = o1 - o0;                                                           \
            if (cw <= 0) continue;                                                                \
            ut_columns(c, o0, o1, ut);                                                            \
            LANES_INPUTS(c, TO, SFX, i0, 1, 0, c->th, v, civ, xp);                                \
            /* M[xi] (tiles, cw) = V[xi] (tiles, nc) @ U^T[xi][:, o0:o1] (nc, cw) */              \
            if (!tallow_gemm->product(v, run * civ, civ, 1, ut, c->nc * cw, cw, 1, m, 16, run, cw, c->nc, 0)) { \
                atomic_store(c->failed, 1);                                                       \
                break;                                                                            \
            }                                                                                     \
            for (int64_t b0 = o0; b0 < o1; b0 += LANES) {                                         \
                output_tiles##SFX(m, run * cw, cw, 0, b0 - o0, c->th, c->tw, yl);                 \
                FROM(yl, 2 * c->tw, c->y + (i0 * c->co + b0) * ohw, ohw, c->oh, c->ow,            \
                     (int)(o1 - b0 < LANES ? o1 - b0 : LANES));                                   \
            }                                                                                     \
        }                                                                                         \
        scratch_done(v, floats);                                                                  \
    }

GROUPS_CONV_TASK(conv_groups_base, , to_lanes_base, from_lanes_base, _v8)
#ifdef TALLOW_X86
GROUPS_CONV_TASK(conv_groups_avx2, AVX2, to_lanes_simd, from_lanes_simd, _v8)
GROUPS_CONV_TASK(conv_groups_avx512, AVX512F, to_lanes_simd, from_lanes_simd, _v16)
#endif

static tallow_task_fn groups_task(void) {
#ifdef TALLOW_X86
    if (use_avx2 && use_avx512) return conv_groups_avx512;
    if (use_avx2) return conv_groups_avx2;
#endif
    return conv_groups_base;
}

/* The 3x3 convolution's task: 16 lanes a zmm register with AVX-512, two ymm with AVX2. */
static tallow_task_fn lanes_task(void) {
#ifdef TALLOW_X86
    if (use_avx2 && use_avx512) return conv_lanes_avx512;
    if (use_avx2) return conv_lanes_avx2;
#endif
    return conv_lanes_base;
}

/* kernel_grad_parts(x, g, du, ...) and its _row form: the kernel gradient's products
 * dU[xi] = W[xi] @ V[xi]^T a few images at a time, the two transforms of a group of
 * images (in `group_bytes`) feeding one product added into the part's sum.  The images
 * are cut into `parts` ranges (chosen by the caller from the shape alone), each summed
 * into its own dU by one task, then the parts added in order: the same bits at any
 * thread count, each core reading back only the tiles it wrote. */
typedef struct {
    conv_job c;     /* the convolution's sizes; c.y unused */
    const float *g; /* the output gradient (nb, co, oh, ow) */
    float *du;      /* parts x (P, co, nc) */
    int64_t parts;
} kgrad_job;

#define KGRAD_TASK(NAME, ATTR, TO, SFX)                                                            \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const kgrad_job *kj = (const kgrad_job *)p;                                               \
        const conv_job *c = &kj->c;                                                               \
        const int64_t P = conv_positions(c), run = c->th * c->tw;                                 \
        const int64_t civ = c->row ? c->nc : round_lanes(c->nc); /* V's row (3x3: channel lanes) */ \
        int64_t g = conv_group(c);                                                                \
        wg_job in = {g, c->nc, c->h, c->w, c->ph, c->pw, 0, 0, c->th, c->tw, NULL, NULL, c->failed}; \
        wg_job gr = {g, c->co, 0, 0, 0, 0, c->oh, c->ow, c->th, c->tw, NULL, NULL, c->failed};    \
        int64_t in_s = c->row ? input_row_scratch_floats(&in) : lanes_input_floats(c);            \
        int64_t gr_s = c->row ? grad_row_scratch_floats(&gr) : grad_scratch_floats(&gr);          \
        const size_t floats = (size_t)(P * (civ + c->co) * g * run + in_s + gr_s);                \
        float *v = scratch_get(floats);                                                             \
        if (!v) {                                                                                 \
            atomic_store(c->failed, 1);                                                           \
            return;                                                                               \
        }                                                                                         \
        float *w = v + P * civ * g * run, *s_in = w + P * c->co * g * run, *s_gr = s_in + in_s; \
        for (int64_t part = lo; part < hi; part++) {                                              \
            const int64_t a = c->nb * part / kj->parts, b = c->nb * (part + 1) / kj->parts;       \
            float *du = kj->du + part * P * c->co * c->nc;                                        \
            if (a == b) memset(du, 0, (size_t)(P * c->co * c->nc) * sizeof(float));              \
            for (int64_t i0 = a; i0 < b; i0 += g) {                                               \
                const int64_t n = b - i0 < g ? b - i0 : g, tiles = n * run;                       \
                gr.nb = n;                                                                        \
                gr.src = kj->g + i0 * c->co * c->oh * c->ow, gr.dst = w;                          \
                if (c->row) group_inputs(c, &in, i0, n, v, s_in);                                 \
                else LANES_INPUTS(c, TO, SFX, i0, n, 0, c->th, v, civ, s_in);                     \
                for (int64_t q = 0; q < n * c->co; q++) {                                         \
                    if (c->row) grad_plane_1x3(&gr, q, s_gr);                                     \
                    else grad_plane(&gr, q, s_gr);                                                \
                }                                                                                 \
                /* du (+)= W (P, co, T) @ V^T (P, T, nc): V (P, nc, T) read across, or the */     \
                /* channel lanes' (P, T, civ) read down */                                        \
                const int64_t vb = civ * tiles, vr = c->row ? 1 : civ, vc = c->row ? tiles : 1;   \
                if (!tallow_gemm->product(w, c->co * tiles, tiles, 1, v, vb, vr, vc, du, P, c->co, c->nc, tiles, \
                                          i0 > a)) {                                              \
                    atomic_store(c->failed, 1);                                                   \
                    break;                                                                        \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        scratch_done(v, floats);                                                                    \
    }

/* ------------------------------------------------------------------ the two builds */
/* A task over units [lo, hi) of `per_unit`, with `floats` of scratch per chunk (none: 0). */
#define PLANE_TASK(NAME, ATTR, per_unit, floats)                                                  \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const wg_job *j = (const wg_job *)p;                                                      \
        int64_t n = floats;                                                                       \
        float *scratch = n ? (float *)malloc((size_t)n * sizeof(float)) : NULL;                   \
        if (n && !scratch) {                                                                      \
            atomic_store(j->failed, 1);                                                           \
            return;                                                                               \
        }                                                                                         \
        for (int64_t u = lo; u < hi; u++) per_unit(j, u, scratch);                                \
        free(scratch);                                                                            \
    }

static inline __attribute__((always_inline)) void kernel_unit(const wg_job *j, int64_t o, float *unused) {
    (void)unused;
    kernel_rows(j->src, j->dst, j->nb, j->nc, o, j->flip); /* nb, nc: c_out, c_in */
}

static inline __attribute__((always_inline)) void kernel_t_unit(const wg_job *j, int64_t c, float *unused) {
    (void)unused;
    kernel_cols(j->src, j->dst, j->nb, j->nc, c, j->flip); /* nb, nc: c_out, c_in */
}

static inline __attribute__((always_inline)) void kernel_row_unit(const wg_job *j, int64_t o, float *unused) {
    (void)unused;
    kernel_row_1x3(j->src, j->dst, j->nb, j->nc, o, j->flip, j->swapped);
}

static inline __attribute__((always_inline)) void kernel_grad_unit(const wg_job *j, int64_t o, float *unused) {
    (void)unused;
    kernel_grad_rows(j->src, j->dst, j->nb, j->nc, o);
}

static inline __attribute__((always_inline)) void kernel_grad_row_unit(const wg_job *j, int64_t o, float *unused) {
    (void)unused;
    kernel_grad_row_1x3(j->src, j->dst, j->nb, j->nc, o);
}

#define BUILD(SUFFIX, ATTR, TO)                                                                     \
    PLANE_TASK(kernel_task##SUFFIX, ATTR, kernel_unit, 0)                                         \
    PLANE_TASK(input_task##SUFFIX, ATTR, input_plane, input_scratch_floats(j))                    \
    PLANE_TASK(output_task##SUFFIX, ATTR, output_plane, output_scratch_floats(j))                 \
    PLANE_TASK(kernel_row_task##SUFFIX, ATTR, kernel_row_unit, 0)                                 \
    PLANE_TASK(input_row_task##SUFFIX, ATTR, input_plane_1x3, input_row_scratch_floats(j))        \
    PLANE_TASK(output_row_task##SUFFIX, ATTR, output_plane_1x3, output_row_scratch_floats(j))     \
    PLANE_TASK(grad_task##SUFFIX, ATTR, grad_plane, grad_scratch_floats(j))                       \
    PLANE_TASK(kernel_grad_task##SUFFIX, ATTR, kernel_grad_unit, 0)                               \
    PLANE_TASK(grad_row_task##SUFFIX, ATTR, grad_plane_1x3, grad_row_scratch_floats(j))           \
    PLANE_TASK(kernel_grad_row_task##SUFFIX, ATTR, kernel_grad_row_unit, 0)                       \
    CONV_TASK(conv_task##SUFFIX, ATTR)                                                            \
    KGRAD_TASK(kgrad_task##SUFFIX, ATTR, TO, _v8)                                                \
    PLANE_TASK(kernel_t_task##SUFFIX, ATTR, kernel_t_unit, 0)

BUILD(_base, , to_lanes_base)
#ifdef TALLOW_X86
BUILD(_avx2, AVX2, to_lanes_simd)
KGRAD_TASK(kgrad_task_avx512, AVX512F, to_lanes_simd, _v16) /* (its 3x3 inputs in zmm registers) */
#endif

enum { KERNEL, INPUT, OUTPUT, KERNEL_ROW, INPUT_ROW, OUTPUT_ROW, GRAD, KERNEL_GRAD, GRAD_ROW, KERNEL_GRAD_ROW, CONV, KGRAD,
       KERNEL_T };

static tallow_task_fn task_of(int kind) {
    static const tallow_task_fn base[] = {kernel_task_base,      input_task_base,     output_task_base,
                                          kernel_row_task_base,  input_row_task_base, output_row_task_base,
                                          grad_task_base,        kernel_grad_task_base,
                                          grad_row_task_base,    kernel_grad_row_task_base,
                                          conv_task_base,        kgrad_task_base,
                                          kernel_t_task_base};
#ifdef TALLOW_X86
    static const tallow_task_fn avx2[] = {kernel_task_avx2,      input_task_avx2,     output_task_avx2,
                                          kernel_row_task_avx2,  input_row_task_avx2, output_row_task_avx2,
                                          grad_task_avx2,        kernel_grad_task_avx2,
                                          grad_row_task_avx2,    kernel_grad_row_task_avx2,
                                          conv_task_avx2,        kgrad_task_avx2,
                                          kernel_t_task_avx2};
    if (use_avx2) return avx2[kind];
#endif
    return base[kind];
}

/* ------------------------------------------------------------------ Python */
/* Runs one transform: checks the two buffers' sizes (floats), then the task over
 * `units` with the GIL released; MemoryError if a chunk could not get its scratch. */
static PyObject *run(PyObject *src, PyObject *dst, int64_t src_floats, int64_t dst_floats, int kind, wg_job *j,
                     int64_t units, int64_t grain) {
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    _Atomic int failed = 0;
    if (get_buf(src, &b[0], 0, src_floats * 4, "winograd source") &&
        get_buf(dst, &b[1], 1, dst_floats * 4, "winograd destination")) {
        j->src = (const float *)b[0].view.buf;
        j->dst = (float *)b[1].view.buf;
        j->failed = &failed;
        tallow_task_fn fn = task_of(kind);
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, j, units, grain < 1 ? 1 : grain, (src_floats + dst_floats) * 4);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 2);
    return res;
}

/* kernel_transform(k, u, co, ci[, flip]), kernel_transform_t and kernel_transform_row: k
 * (co, ci, 3, 3) -> u (16, co, ci) or, transposed, (16, ci, co); k (co, ci, 1, 3) -> u (4,
 * co, ci). flip (0 or 1): U of each kernel flipped along both axes instead (the positions
 * permuted, flipped_position): a stride-1 transposed convolution's kernel, (16, co, ci) is
 * its U^T and (16, ci, co) its U, with no flipped copy of k. */
static PyObject *kernel_call(PyObject *const *args, Py_ssize_t nargs, int row, int transposed) {
    int64_t a[4] = {0, 0, 0, 0};
    if (nargs != 4 && nargs != 5 && !(row && nargs == 6))
        return PyErr_Format(PyExc_TypeError, row ? "%s takes 4 to 6 arguments" : "%s takes 4 or 5 arguments",
                            row ? "kernel_transform_row" : transposed ? "kernel_transform_t" : "kernel_transform");
    if (!ints(args, 2, (Py_ssize_t)nargs - 2, a)) return NULL;
    if (a[2] > 1 || a[2] < 0) return PyErr_Format(PyExc_ValueError, "kernel transform: flip is 0 or 1");
    if (a[3] > 1 || a[3] < 0) return PyErr_Format(PyExc_ValueError, "kernel_transform_row: swapped is 0 or 1");
    wg_job j = {0};
    j.flip = (int)a[2];
    j.swapped = (int)a[3];
    j.nb = a[0]; /* co */
    j.nc = a[1]; /* ci */
    int64_t taps = row ? 3 : 9, positions = row ? ROW_POSITIONS : 16;
    int64_t units = transposed ? a[1] : a[0], across = transposed ? a[0] : a[1]; /* rows written, their length */
    return run(args[0], args[1], a[0] * a[1] * taps, positions * a[0] * a[1],
               row ? KERNEL_ROW : transposed ? KERNEL_T : KERNEL, &j, units, 4096 / (across * (taps + positions) + 1));
}

static PyObject *py_kernel_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kernel_call(args, nargs, 0, 0);
}

static PyObject *py_kernel_transform_t(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kernel_call(args, nargs, 0, 1);
}

/* input_transform(x, v, nb, nc, h, w, ph, pw, th, tw) */
static PyObject *py_input_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[8];
    if (nargs != 10) return PyErr_Format(PyExc_TypeError, "input_transform takes 10 arguments");
    if (!ints(args, 2, 8, a)) return NULL;
    wg_job j = {a[0], a[1], a[2], a[3], a[4], a[5], 0, 0, a[6], a[7], NULL, NULL, NULL};
    if (j.th < (j.h + 2 * j.ph - 2 + 1) / 2 || j.tw < (j.w + 2 * j.pw - 2 + 1) / 2)
        return PyErr_Format(PyExc_ValueError, "input_transform: too few tiles for the output");
    int64_t tiles = j.nb * j.th * j.tw;
    return run(args[0], args[1], j.nb * j.nc * j.h * j.w, 16 * j.nc * tiles, INPUT, &j, j.nb * j.nc,
               4096 / (16 * j.th * j.tw + 1));
}

/* output_transform(m, y, nb, nco, oh, ow, th, tw) */
static PyObject *py_output_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[6];
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "output_transform takes 8 arguments");
    if (!ints(args, 2, 6, a)) return NULL;
    wg_job j = {a[0], a[1], 0, 0, 0, 0, a[2], a[3], a[4], a[5], NULL, NULL, NULL};
    if (2 * j.th < j.oh || 2 * j.tw < j.ow)
        return PyErr_Format(PyExc_ValueError, "output_transform: too few tiles for the output");
    int64_t tiles = j.nb * j.th * j.tw;
    return run(args[0], args[1], 16 * j.nc * tiles, j.nb * j.nc * j.oh * j.ow, OUTPUT, &j, j.nb * j.nc,
               4096 / (16 * j.th * j.tw + 1));
}

TALLOW_SIMD_SWITCH(use_avx2)
TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

/* all_finite(a): whether every float of the C-contiguous f32 buffer a is finite (no
 * exponent of all ones: an infinity or a NaN), for winograd.py, which sends such
 * convolutions elsewhere (the transforms would spread them over their tiles): common.h's
 * all_finite and all_finite_avx2. */

static PyObject *py_all_finite(PyObject *self, PyObject *arg) {
    (void)self;
    buf_t b;
    memset(&b, 0, sizeof b);
    if (!get_buf(arg, &b, 0, 0, "all_finite")) {
        release(&b, 1);
        return NULL;
    }
    if (b.view.itemsize != 4 || b.view.len % 4) {
        release(&b, 1);
        return PyErr_Format(PyExc_TypeError, "all_finite: need an f32 buffer");
    }
    const float *x = (const float *)b.view.buf;
    const int64_t n = b.view.len / 4;
    int ok;
#ifdef TALLOW_X86
    if (use_avx2) ok = all_finite_avx2(x, n);
    else
#endif
        ok = all_finite(x, n);
    release(&b, 1);
    return PyBool_FromLong(ok);
}

static PyObject *py_kernel_transform_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kernel_call(args, nargs, 1, 0);
}

/* input_transform_row(x, v, nb, nc, h, w, pw, tw): x (nb, nc, h, w) -> v (6, nc, nb * h * tw) */
static PyObject *py_input_transform_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[6];
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "input_transform_row takes 8 arguments");
    if (!ints(args, 2, 6, a)) return NULL;
    wg_job j = {a[0], a[1], a[2], a[3], 0, a[4], 0, 0, a[2], a[5], NULL, NULL, NULL};
    if (4 * j.tw < j.w + 2 * j.pw - 2)
        return PyErr_Format(PyExc_ValueError, "input_transform_row: too few tiles for the output");
    int64_t tiles = j.nb * j.h * j.tw;
    return run(args[0], args[1], j.nb * j.nc * j.h * j.w, ROW_POSITIONS * j.nc * tiles, INPUT_ROW, &j, j.nb * j.nc,
               4096 / (ROW_POSITIONS * j.h * j.tw + 1));
}

/* output_transform_row(m, y, nb, nco, h, ow, tw): m (6, nco, nb * h * tw) -> y (nb, nco, h, ow) */
static PyObject *py_output_transform_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[5];
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "output_transform_row takes 7 arguments");
    if (!ints(args, 2, 5, a)) return NULL;
    wg_job j = {a[0], a[1], 0, 0, 0, 0, a[2], a[3], a[2], a[4], NULL, NULL, NULL};
    if (4 * j.tw < j.ow) return PyErr_Format(PyExc_ValueError, "output_transform_row: too few tiles for the output");
    int64_t tiles = j.nb * j.oh * j.tw;
    return run(args[0], args[1], ROW_POSITIONS * j.nc * tiles, j.nb * j.nc * j.oh * j.ow, OUTPUT_ROW, &j, j.nb * j.nc,
               4096 / (ROW_POSITIONS * j.oh * j.tw + 1));
}

/* grad_transform(dy, w, nb, nco, oh, ow, th, tw): dy (nb, nco, oh, ow) -> w (16, nco, T) */
static PyObject *py_grad_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[6];
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "grad_transform takes 8 arguments");
    if (!ints(args, 2, 6, a)) return NULL;
    wg_job j = {a[0], a[1], 0, 0, 0, 0, a[2], a[3], a[4], a[5], NULL, NULL, NULL};
    if (2 * j.th < j.oh || 2 * j.tw < j.ow)
        return PyErr_Format(PyExc_ValueError, "grad_transform: too few tiles for the gradient");
    int64_t tiles = j.nb * j.th * j.tw;
    return run(args[0], args[1], j.nb * j.nc * j.oh * j.ow, 16 * j.nc * tiles, GRAD, &j, j.nb * j.nc,
               4096 / (16 * j.th * j.tw + 1));
}

/* grad_transform_row(dy, w, nb, nco, h, ow, tw): dy (nb, nco, h, ow) -> w (6, nco, nb * h * tw) */
static PyObject *py_grad_transform_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[5];
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "grad_transform_row takes 7 arguments");
    if (!ints(args, 2, 5, a)) return NULL;
    wg_job j = {a[0], a[1], 0, 0, 0, 0, a[2], a[3], a[2], a[4], NULL, NULL, NULL};
    if (4 * j.tw < j.ow) return PyErr_Format(PyExc_ValueError, "grad_transform_row: too few tiles for the gradient");
    int64_t tiles = j.nb * j.oh * j.tw;
    return run(args[0], args[1], j.nb * j.nc * j.oh * j.ow, ROW_POSITIONS * j.nc * tiles, GRAD_ROW, &j, j.nb * j.nc,
               4096 / (ROW_POSITIONS * j.oh * j.tw + 1));
}

/* The sizes (nb, nc, co, h, w, ph, pw, th, tw), or (nb, nc, co, h, w, pw, tw) for a 1x3
 * kernel, into c; whether the tiles cover the output exactly. */
static int conv_geometry(conv_job *c, const int64_t *a, int row) {
    c->row = row, c->nb = a[0], c->nc = a[1], c->co = a[2], c->h = a[3], c->w = a[4];
    if (row) {
        c->ph = 0, c->pw = a[5], c->tw = a[6], c->th = c->oh = c->h;
    } else {
        c->ph = a[5], c->pw = a[6], c->th = a[7], c->tw = a[8], c->oh = c->h + 2 * c->ph - 2;
    }
    c->ow = c->w + 2 * c->pw - 2;
    const int64_t m = row ? 4 : 2; /* outputs per tile along a row */
    return c->oh >= 1 && c->ow >= 1 && m * c->tw >= c->ow && m * c->tw <= c->ow + m - 1 &&
           (row || (2 * c->th >= c->oh && 2 * c->th <= c->oh + 1));
}

/* The end of conv, conv_row and conv_groups: x (args[0]), the kernel (args[1],
 * kernel_floats, bound to *kernel: c->u or c->k) and y (args[2]) checked and bound, then
 * fn over `units` of the pool with the GIL released (`kernel_work` of the kernel's
 * floats in the pool's size hint); MemoryError if a unit could not get its scratch. */
static PyObject *run_conv(conv_job *c, PyObject *const *args, int64_t kernel_floats, const float **kernel,
                          tallow_task_fn fn, int64_t units, int64_t kernel_work) {
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    _Atomic int failed = 0;
    const int64_t x_floats = c->nb * c->nc * c->h * c->w, y_floats = c->nb * c->co * c->oh * c->ow;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "winograd input") &&
        get_buf(args[1], &b[1], 0, kernel_floats * 4, "winograd kernel") &&
        get_buf(args[2], &b[2], 1, y_floats * 4, "winograd output")) {
        c->x = (const float *)b[0].view.buf, *kernel = (const float *)b[1].view.buf, c->y = (float *)b[2].view.buf;
        c->failed = &failed;
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, c, units, 1, (x_floats + kernel_work + y_floats) * 4);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 3);
    return res;
}

/* conv(x, ut, y, nb, nc, co, h, w, ph, pw, th, tw[, bands]): x (nb, nc, h, w) convolved
 * with the transformed kernel ut (16, nc, co) (kernel_transform_t) into y (nb, co, h +
 * 2 ph - 2, w + 2 pw - 2), each image cut into `bands` bands of tile rows (1 to th;
 * default 1: whole images, a few per product); and conv_row(x, u, y, nb, nc, co, h, w,
 * pw, tw) with u (6, co, nc) into y (nb, co, h, w + 2 pw - 2). */
static PyObject *conv_call(PyObject *const *args, Py_ssize_t nargs, int row) {
    int64_t a[10];
    int count = row ? 7 : 9;
    a[9] = 1; /* conv's bands (optional) */
    if (nargs != 3 + count && (row || nargs != 4 + count))
        return row ? PyErr_Format(PyExc_TypeError, "conv_row takes %d arguments", 3 + count)
                   : PyErr_Format(PyExc_TypeError, "conv takes %d or %d arguments", 3 + count, 4 + count);
    if (!ints(args, 3, nargs - 3, a)) return NULL;
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "winograd: the product module is missing");
    conv_job c;
    memset(&c, 0, sizeof c);
    if (!conv_geometry(&c, a, row))
        return PyErr_Format(PyExc_ValueError, "%s: the tiles do not match the output", row ? "conv_row" : "conv");
    c.bands = a[9];
    if (!row && (c.bands < 1 || c.bands > c.th))
        return PyErr_Format(PyExc_ValueError, "conv: bands must be 1 to th (%lld), got %lld", (long long)c.th,
                            (long long)c.bands);
    const int64_t u_floats = conv_positions(&c) * c.co * c.nc;
    return run_conv(&c, args, u_floats, &c.u, row ? task_of(CONV) : lanes_task(), c.nb * (row ? 1 : c.bands), u_floats);
}

/* conv_groups(x, k, y, nb, nc, co, h, w, ph, pw, th, tw, groups, flip): conv's result
 * from the kernel itself, k (co, nc, 3, 3) (flip: a stride-1 transposed convolution's
 * kernel, (nc, co, 3, 3), flipped), each image's output channels in `groups` groups of
 * whole blocks of 16 (1 to the blocks), one pool unit each transforming its own columns
 * of U^T. The same bits as kernel_transform_t + conv. */
static PyObject *py_conv_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[11];
    if (nargs != 14) return PyErr_Format(PyExc_TypeError, "conv_groups takes 14 arguments");
    if (!ints(args, 3, 11, a)) return NULL;
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "winograd: the product module is missing");
    conv_job c;
    memset(&c, 0, sizeof c);
    if (!conv_geometry(&c, a, 0)) return PyErr_Format(PyExc_ValueError, "conv_groups: the tiles do not match the output");
    c.groups = a[9], c.flip = (int)a[10];
    const int64_t blocks = (c.co + LANES - 1) / LANES;
    if (c.groups < 1 || c.groups > (blocks > 0 ? blocks : 1))
        return PyErr_Format(PyExc_ValueError, "conv_groups: groups must be 1 to the blocks of 16 channels (%lld), got %lld",
                            (long long)(blocks > 0 ? blocks : 1), (long long)c.groups);
    if (a[10] > 1) return PyErr_Format(PyExc_ValueError, "conv_groups: flip is 0 or 1");
    /* (the work hint counts U's floats, as conv's: each unit writes its own columns) */
    return run_conv(&c, args, 9 * c.co * c.nc, &c.k, groups_task(), c.nb * c.groups, 16 * c.co * c.nc);
}

static PyObject *py_conv(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return conv_call(args, nargs, 0);
}

static PyObject *py_conv_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return conv_call(args, nargs, 1);
}

/* kernel_grad_parts(x, g, du, parts, nb, nc, co, h, w, ph, pw, th, tw) and
 * kernel_grad_parts_row(x, g, du, parts, nb, nc, co, h, w, pw, tw): x (nb, nc, h, w), g
 * (nb, co, oh, ow); du (parts, P, co, nc) gets each part's sum and, in du[0], their sum
 * (P = 16, or 6 for the row form). */
static PyObject *kgrad_call(PyObject *const *args, Py_ssize_t nargs, int row) {
    int64_t a[10];
    int count = row ? 8 : 10;
    const char *name = row ? "kernel_grad_parts_row" : "kernel_grad_parts";
    if (nargs != 3 + count) return PyErr_Format(PyExc_TypeError, "%s takes %d arguments", name, 3 + count);
    if (!ints(args, 3, count, a)) return NULL;
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "winograd: the product module is missing");
    kgrad_job kj;
    memset(&kj, 0, sizeof kj);
    conv_job *c = &kj.c;
    kj.parts = a[0];
    if (!conv_geometry(c, a + 1, row) || kj.parts < 1)
        return PyErr_Format(PyExc_ValueError, "%s: the tiles (or parts) do not match the gradient", name);
    const int64_t P = conv_positions(c);
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    _Atomic int failed = 0;
    int64_t x_floats = c->nb * c->nc * c->h * c->w, g_floats = c->nb * c->co * c->oh * c->ow;
    int64_t du_floats = kj.parts * P * c->co * c->nc;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "winograd input") &&
        get_buf(args[1], &b[1], 0, g_floats * 4, "winograd gradient") &&
        get_buf(args[2], &b[2], 1, du_floats * 4, "winograd kernel sums")) {
        c->x = (const float *)b[0].view.buf, kj.g = (const float *)b[1].view.buf, kj.du = (float *)b[2].view.buf;
        c->failed = &failed;
        tallow_task_fn fn = task_of(KGRAD);
#ifdef TALLOW_X86
        if (use_avx2 && use_avx512 && !row) fn = kgrad_task_avx512;
#endif
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, &kj, kj.parts, 1, (x_floats + g_floats) * 4);
        if (!atomic_load(&failed)) sum_parts(kj.du, kj.du, kj.parts, P * c->co * c->nc);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 3);
    return res;
}

static PyObject *py_kernel_grad_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kgrad_call(args, nargs, 0);
}

static PyObject *py_kernel_grad_parts_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kgrad_call(args, nargs, 1);
}

static PyObject *py_set_group_bytes(PyObject *self, PyObject *arg) {
    (void)self;
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    if (v < 0) return PyErr_Format(PyExc_ValueError, "set_group_bytes: need >= 0");
    long long old = group_bytes;
    group_bytes = v;
    return PyLong_FromLongLong(old);
}

/* kernel_grad_transform(m, dk, co, ci) and its _row form: m (16, co, ci) -> dk (co, ci, 3, 3),
 * or m (6, co, ci) -> dk (co, ci, 1, 3). */
static PyObject *kernel_grad_call(PyObject *const *args, Py_ssize_t nargs, int row) {
    int64_t a[2];
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "%s takes 4 arguments",
                            row ? "kernel_grad_transform_row" : "kernel_grad_transform");
    if (!ints(args, 2, 2, a)) return NULL;
    wg_job j = {0};
    j.nb = a[0]; /* co */
    j.nc = a[1]; /* ci */
    int64_t taps = row ? 3 : 9, positions = row ? ROW_POSITIONS : 16;
    return run(args[0], args[1], positions * a[0] * a[1], a[0] * a[1] * taps, row ? KERNEL_GRAD_ROW : KERNEL_GRAD,
               &j, a[0], 4096 / (a[1] * (taps + positions) + 1));
}

static PyObject *py_kernel_grad_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kernel_grad_call(args, nargs, 0);
}

static PyObject *py_kernel_grad_transform_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return kernel_grad_call(args, nargs, 1);
}

#define FC(name) (PyCFunction)(void (*)(void))name, METH_FASTCALL
static PyMethodDef methods[] = {
    {"kernel_transform", FC(py_kernel_transform), "k (co, ci, 3, 3) -> G k G^T as (16, co, ci), f32."},
    {"conv_groups", FC(py_conv_groups), "conv from the kernel, each image's output channels in groups, one unit each."},
    {"kernel_transform_t", FC(py_kernel_transform_t), "k (co, ci, 3, 3) -> G k G^T as (16, ci, co), f32 (for conv)."},
    {"input_transform", FC(py_input_transform), "Input tiles B^T d B as (16, nc, tiles), f32."},
    {"output_transform", FC(py_output_transform), "A^T m A of (16, nco, tiles) into f32 NCHW output."},
    {"kernel_transform_row", FC(py_kernel_transform_row),
     "k (co, ci, 1, 3), or (ci, co, 1, 3) when swapped -> G k as (6, co, ci), f32 (F(4, 3)); flip: taps reversed."},
    {"input_transform_row", FC(py_input_transform_row), "Row tiles B^T d as (6, nc, tiles), f32."},
    {"output_transform_row", FC(py_output_transform_row), "A^T m of (6, nco, tiles) into f32 NCHW output."},
    {"grad_transform", FC(py_grad_transform), "Output-gradient tiles A dY A^T as (16, nco, tiles), f32."},
    {"kernel_grad_transform", FC(py_kernel_grad_transform), "G^T m G of (16, co, ci) into dk (co, ci, 3, 3), f32."},
    {"grad_transform_row", FC(py_grad_transform_row), "Row gradient tiles A dy as (6, nco, tiles), f32."},
    {"kernel_grad_transform_row", FC(py_kernel_grad_transform_row), "G^T m of (6, co, ci) into dk (co, ci, 1, 3), f32."},
    {"conv", FC(py_conv), "x (nb, nc, h, w) convolved with ut (16, nc, co) into y, a few images (or tile-row bands) a task."},
    {"conv_row", FC(py_conv_row), "x (nb, nc, h, w) convolved with u (6, co, nc) (1x3) into y, a few images per task."},
    {"kernel_grad_parts", FC(py_kernel_grad_parts), "The kernel gradient's sums dU a few images at a time, in parts."},
    {"kernel_grad_parts_row", FC(py_kernel_grad_parts_row), "The same for 1x3 kernels (6 positions)."},
    {"set_group_bytes", py_set_group_bytes, METH_O, "Bytes of tiles per product in conv (returns the old value)."},
    {"all_finite", py_all_finite, METH_O, "Whether every float of a C-contiguous f32 buffer is finite."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 build of the transforms."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 build of the transforms is used."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 build of the 3x3 channel-lane tiles."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the 3x3 channel-lane tiles run in AVX-512 registers."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_winograd",
                                       "Winograd F(2x2, 3x3) transforms of tallow's CPU convolutions.", -1,
                                       methods};

PyMODINIT_FUNC PyInit__winograd(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    scratch_init();
    tallow_pool_import();
    tallow_gemm_import();
    return PyModule_Create(&moduledef);
}
