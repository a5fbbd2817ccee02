/* tallow's f32 matrix product C = A @ B (+ C) (+ bias row) on the compiled worker pool.
 *
 * Why its own kernel: a single-threaded OpenBLAS call per row block does not run two
 * at once here (docs/design.md, "Thread policy"), so the mid-sized products of a
 * training step (64x256x256) could not use a second core.  This kernel shares no
 * state between threads but the read-only operands.
 *
 * Design (GotoBLAS/BLIS loop nest, measurements in docs/design.md):
 *  - A and B are read through arbitrary element strides (transposed and sliced views,
 *    negative strides, a batch stride of 0 for a broadcast operand): packing reads
 *    them, so no caller copies.
 *  - B is packed per K chunk (KC rows) into NR = 16 column panels, zero-padded; A is
 *    read in place by the micro-kernel (MR = 6 rows, any strides) when its rows are
 *    contiguous, and packed into MR-row panels (k-major) when they are not (a
 *    transposed A, read a column apart per k) and there are 4+ panels to reuse it.
 *  - The micro-kernel keeps a 6x16 tile in 12 ymm accumulators (AVX2+FMA): per k,
 *    two loads of B, six broadcasts of A, twelve FMAs.  Edge tiles run the same
 *    kernel (missing A rows read row 0 again, B panels are zero-padded) and are
 *    stored through a small buffer.  A scalar C kernel serves CPUs without AVX2.
 *    With AVX-512 the tiles are two panels wide, 8 rows high (and 6 where that
 *    leaves fewer rows computed: eight_rows), so that the usual 64-512 rows leave
 *    no tile part-empty.
 *  - Work units are (batch item, column block, row block).  Every output element is
 *    one tile's register sum over each K chunk, added to C chunk by chunk in the
 *    same order, whatever the units: results are bit-identical at any thread count
 *    (K chunking depends on k only).
 *  - Splitting: one unit per call on one thread; with spare CPUs (the pool's load
 *    check) and enough work, columns (then rows) are cut into a few units per
 *    thread, claimed from the pool's counter.
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

#if defined(__linux__)
#include <pthread.h>
#endif

#define MR 6
#define TILE8 8         /* the AVX-512 kernel's tile height (kernel_avx512_8, tile_rows) */
#define NR 16
#define KC 256          /* K chunk: a 16-column panel of B (16 KiB) stays in L1 */
#define MC 120          /* rows of A per pass over the panels: 120 KiB, in L2 */
#define NC_MAX 512      /* columns per unit on one thread: packed B 512 KiB, L2/L3 */
#define NC_MIN 32       /* narrowest column block a split makes */
#define UNITS_PER_THREAD 3

enum { F_LOAD = 1, F_BIAS = 2 };

static int use_avx2 = 0;
/* Smallest product (multiply-adds) split across threads; below, one call on the caller. */
static int64_t split_min = 1 << 18;
/* Units of at most this many rows read B in place instead of packing it. */
static int64_t direct_b_rows = 48;
static int split_threads(int64_t work);

typedef void (*kernel_fn)(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t bs,
                          float *c, int64_t ldc, int mr, int nr, int flags, const float *bias);
/* Two adjacent 16-column panels at once (the second `boff` floats after the first). */
typedef void (*kernel2_fn)(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t boff,
                           int64_t bs, float *c, int64_t ldc, int mr, int nr, int flags, const float *bias);
/* The 6x32 AVX-512 kernel on CPUs that have it (set_avx512 switches it off). */
static int use_avx512 = 0;
/* ... and with it, 8-row tiles (eight_rows; set_tile8 switches them off: 6-row ones). */
static int use_tile8 = 1;

/* ------------------------------------------------------------------ micro-kernels */
/* Store a tile (rows `width` floats apart in t): C = (flags & F_LOAD ? C : 0) + acc (+ bias),
 * mr x nr of it. */
static inline void store_tile_w(const float *t, int width, float *c, int64_t ldc, int mr, int nr, int flags,
                                const float *bias) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = t[i * width + j];
            if (flags & F_LOAD) v = c[i * ldc + j] + v;
            if (flags & F_BIAS) v = v + bias[j];
            c[i * ldc + j] = v;
        }
}

static inline void store_tile(const float *t, float *c, int64_t ldc, int mr, int nr, int flags, const float *bias) {
    store_tile_w(t, NR, c, ldc, mr, nr, flags, bias);
}

static void kernel_scalar(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t bs,
                          float *c, int64_t ldc, int mr, int nr, int flags, const float *bias) {
    float acc[MR * NR];
    memset(acc, 0, sizeof acc);
    const float *rows[MR];
    for (int i = 0; i < MR; i++) rows[i] = a + (i < mr ? i : 0) * rs;
    for (int64_t p = 0, o = 0; p < kc; p++, o += cs, b += bs)
        for (int i = 0; i < MR; i++) {
            float av = rows[i][o];
            for (int j = 0; j < NR; j++) acc[i * NR + j] += av * b[j];
        }
    store_tile(acc, c, ldc, mr, nr, flags, bias);
}

#ifdef TALLOW_X86
static AVX2 void kernel_avx2(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t bs,
                             float *c, int64_t ldc, int mr, int nr, int flags, const float *bias) {
    const float *a0 = a, *a1 = a + (mr > 1 ? rs : 0), *a2 = a + (mr > 2 ? 2 * rs : 0);
    const float *a3 = a + (mr > 3 ? 3 * rs : 0), *a4 = a + (mr > 4 ? 4 * rs : 0), *a5 = a + (mr > 5 ? 5 * rs : 0);
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    int64_t o = 0;
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), t;
        b += bs;
        t = _mm256_broadcast_ss(a0 + o); c00 = _mm256_fmadd_ps(t, b0, c00); c01 = _mm256_fmadd_ps(t, b1, c01);
        t = _mm256_broadcast_ss(a1 + o); c10 = _mm256_fmadd_ps(t, b0, c10); c11 = _mm256_fmadd_ps(t, b1, c11);
        t = _mm256_broadcast_ss(a2 + o); c20 = _mm256_fmadd_ps(t, b0, c20); c21 = _mm256_fmadd_ps(t, b1, c21);
        t = _mm256_broadcast_ss(a3 + o); c30 = _mm256_fmadd_ps(t, b0, c30); c31 = _mm256_fmadd_ps(t, b1, c31);
        t = _mm256_broadcast_ss(a4 + o); c40 = _mm256_fmadd_ps(t, b0, c40); c41 = _mm256_fmadd_ps(t, b1, c41);
        t = _mm256_broadcast_ss(a5 + o); c50 = _mm256_fmadd_ps(t, b0, c50); c51 = _mm256_fmadd_ps(t, b1, c51);
        o += cs;
    }
    __m256 acc[2 * MR] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    if (mr == MR && nr == NR) {
        __m256 bias0 = _mm256_setzero_ps(), bias1 = bias0;
        if (flags & F_BIAS) { bias0 = _mm256_loadu_ps(bias); bias1 = _mm256_loadu_ps(bias + 8); }
        for (int i = 0; i < MR; i++) {
            float *ci = c + i * ldc;
            __m256 v0 = acc[2 * i], v1 = acc[2 * i + 1];
            if (flags & F_LOAD) { v0 = _mm256_add_ps(_mm256_loadu_ps(ci), v0); v1 = _mm256_add_ps(_mm256_loadu_ps(ci + 8), v1); }
            if (flags & F_BIAS) { v0 = _mm256_add_ps(v0, bias0); v1 = _mm256_add_ps(v1, bias1); }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        }
        return;
    }
    float t[MR * NR] __attribute__((aligned(32)));
    for (int i = 0; i < 2 * MR; i++) _mm256_store_ps(t + 8 * i, acc[i]);
    store_tile(t, c, ldc, mr, nr, flags, bias);
}
#endif

#ifdef TALLOW_X86
/* A two-panel tile's accumulators (two per row) into C: mr of its `rows` rows, nr of its
 * 32 columns, C = (flags & F_LOAD ? C : 0) + acc (+ bias) as store_tile_w does (the same
 * adds in the same order); a part tile's columns under masks, its missing rows not
 * stored (a tile stored through a buffer, float by float, cost a 10-column layer's
 * product more than its FMAs). */
static AVX512F inline __attribute__((always_inline)) void store_rows_zmm(const __m512 *acc, int rows, float *c,
                                                                          int64_t ldc, int mr, int nr, int flags,
                                                                          const float *bias) {
    const int whole = mr == rows && nr == 2 * NR;
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - NR);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
    if (flags & F_BIAS) {
        bias0 = whole ? _mm512_loadu_ps(bias) : _mm512_maskz_loadu_ps(m0, bias);
        bias1 = whole ? _mm512_loadu_ps(bias + NR) : _mm512_maskz_loadu_ps(m1, bias + NR);
    }
    if (whole) {
        for (int i = 0; i < rows; i++) {
            float *ci = c + i * ldc;
            __m512 v0 = acc[2 * i], v1 = acc[2 * i + 1];
            if (flags & F_LOAD) { v0 = _mm512_add_ps(_mm512_loadu_ps(ci), v0); v1 = _mm512_add_ps(_mm512_loadu_ps(ci + NR), v1); }
            if (flags & F_BIAS) { v0 = _mm512_add_ps(v0, bias0); v1 = _mm512_add_ps(v1, bias1); }
            _mm512_storeu_ps(ci, v0);
            _mm512_storeu_ps(ci + NR, v1);
        }
        return;
    }
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        __m512 v0 = acc[2 * i], v1 = acc[2 * i + 1];
        if (flags & F_LOAD) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + NR), v1);
        }
        if (flags & F_BIAS) { v0 = _mm512_add_ps(v0, bias0); v1 = _mm512_add_ps(v1, bias1); }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + NR, m1, v1);
    }
}

/* ROWS rows x two panels (32 columns) in 2 * ROWS zmm accumulators: per k two loads of
 * B, ROWS broadcasts of A, 2 * ROWS FMAs, each over twice the columns of the AVX2
 * kernel's.  Rows past mr re-read row 0 (their sums are not stored).  Every element is
 * the same chain of FMAs in the same order as there: the same bits.  B's row p is at b
 * + p * bs, or at b + off[p] (the _rows kernels: a convolution's windows read in
 * place, tallow_windows, no packing).  6 rows (kernel_avx512, 12 accumulators) and 8
 * (kernel_avx512_8, 16): the tile AVX-512 products are cut into (eight_rows), so that
 * a multiple of 8 rows (64-512 channels, a batch of 64) leaves no tile part-empty,
 * where 6-row tiles computed 66 rows for 64 and 132 for 128. */
#define KERNEL_AVX512(NAME, ROWS, BSTEP, BROW)                                                          \
    static AVX512F void NAME(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t boff, \
                             BSTEP, float *c, int64_t ldc, int mr, int nr, int flags, const float *bias) {    \
        const float *ar[ROWS];                                                                                \
        __m512 acc[2 * ROWS];                                                                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) {                                              \
            ar[i] = a + (mr > i ? i * rs : 0);                                                                \
            acc[2 * i] = acc[2 * i + 1] = _mm512_setzero_ps();                                                \
        }                                                                                                     \
        int64_t o = 0;                                                                                        \
        _Pragma("GCC unroll 4") for (int64_t p = 0; p < kc; p++) {                                            \
            const float *bp = BROW;                                                                           \
            const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + boff);                           \
            _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) {                                          \
                const __m512 t = _mm512_set1_ps(ar[i][o]);                                                    \
                acc[2 * i] = _mm512_fmadd_ps(t, b0, acc[2 * i]);                                              \
                acc[2 * i + 1] = _mm512_fmadd_ps(t, b1, acc[2 * i + 1]);                                      \
            }                                                                                                 \
            o += cs;                                                                                          \
        }                                                                                                     \
        store_rows_zmm(acc, ROWS, c, ldc, mr, nr, flags, bias);                                               \
    }
KERNEL_AVX512(kernel_avx512, MR, int64_t bs, b + p * bs)
KERNEL_AVX512(kernel_avx512_rows, MR, const int64_t *off, b + off[p])
KERNEL_AVX512(kernel_avx512_8, TILE8, int64_t bs, b + p * bs)
KERNEL_AVX512(kernel_avx512_8_rows, TILE8, const int64_t *off, b + off[p])
#endif

/* The two-panel kernel, or NULL (one panel at a time). */
static kernel2_fn kernel2(void) {
#ifdef TALLOW_X86
    if (use_avx2 && use_avx512) return kernel_avx512;
#endif
    return NULL;
}

static kernel_fn kernel(void) {
#ifdef TALLOW_X86
    if (use_avx2) return kernel_avx2;
#endif
    return kernel_scalar;
}

/* ------------------------------------------------------------------ packing */
#ifdef TALLOW_X86
/* A full 16-column panel of a column-major B (rows contiguous in k: a Linear layer's
 * weight, transposed): 8x8 blocks transposed in registers instead of 16 scalar
 * stores per k. Returns the rows done (a multiple of 8); the caller does the rest. */
static AVX2 int64_t pack_b_cols_avx2(const float *src, int64_t cs, int64_t kc, float *dst) {
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8)
        for (int g = 0; g < 2; g++) {
            const float *c0 = src + (int64_t)(8 * g) * cs + p;
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(c0 + i * cs);
            transpose8x8_ps(r);
            float *d = dst + p * NR + 8 * g;
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(d + i * NR, r[i]);
        }
    return p;
}

/* r[i][l] <- r[l][i] */
static AVX512F inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
            t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    }
}

/* pack_b_cols_avx2 with AVX-512: 16 columns x 16 rows a block, one 16x16 transpose in
 * registers (a Linear layer's forward packs its whole weight at each call: with 10
 * input rows, 256 -> 256, the product takes 0.94x the 8x8 blocks' time, 64 rows 0.98x).
 * Returns the rows done (a multiple of 16). */
static AVX512F int64_t pack_b_cols_zmm(const float *src, int64_t cs, int64_t kc, float *dst) {
    int64_t p = 0;
    for (; p + 16 <= kc; p += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * cs + p);
        transpose16(r);
        for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + (p + i) * NR, r[i]);
    }
    return p;
}
#endif

/* B rows [0, kc) x columns [0, nc) (strides rs, cs) -> 16-column panels, k-major, zero-padded. */
static void pack_b(const float *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, float *dst) {
    if (cs == 1 && nc >= NR) {
        /* row-major B: row by row across all the full panels, so that B is read in
         * order (panel by panel, the reads step a whole row apart: a 1024-column B
         * read 4 KiB apart, which the prefetchers do not follow) */
        const int64_t full = nc / NR;
        for (int64_t p = 0; p < kc; p++) {
            const float *row = b + p * rs;
            for (int64_t q = 0; q < full; q++) memcpy(dst + q * kc * NR + p * NR, row + q * NR, NR * sizeof(float));
        }
        if (full * NR == nc) return;
        b += full * NR, dst += full * kc * NR, nc -= full * NR;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += NR, dst += kc * NR) {
        int nr = nc - j0 < NR ? (int)(nc - j0) : NR;
        const float *src = b + j0 * cs;
        if (rs == 1) { /* a transposed B: each column is contiguous */
            int64_t p0 = 0;
#ifdef TALLOW_X86
            if (use_avx2 && use_avx512 && nr == NR) p0 = pack_b_cols_zmm(src, cs, kc, dst);
            if (use_avx2 && nr == NR) p0 += pack_b_cols_avx2(src + p0, cs, kc - p0, dst + p0 * NR);
#endif
            if (nr < NR) memset(dst, 0, (size_t)kc * NR * sizeof(float));
            for (int j = 0; j < nr; j++) {
                const float *col = src + j * cs;
                for (int64_t p = p0; p < kc; p++) dst[p * NR + j] = col[p];
            }
        } else {
            for (int64_t p = 0; p < kc; p++) {
                const float *row = src + p * rs;
                int j = 0;
                for (; j < nr; j++) dst[p * NR + j] = row[j * cs];
                for (; j < NR; j++) dst[p * NR + j] = 0.0f;
            }
        }
    }
}

/* The runs of output positions [p0, p0 + m) within output rows (ow each): at lane
 * dof, source offset sof from a window, n floats; returns their count. */
static int position_runs(const tallow_windows *w, int64_t p0, int64_t m, int8_t *dof, int64_t *sof, int8_t *n) {
    int runs = 0;
    for (int64_t p = p0, d = 0; p < p0 + m; runs++) {
        int64_t col = p % w->ow, len = w->ow - col < p0 + m - p ? w->ow - col : p0 + m - p;
        dof[runs] = (int8_t)d, sof[runs] = (p / w->ow) * w->pitch + col, n[runs] = (int8_t)len;
        d += len, p += len;
    }
    return runs;
}

/* B given as windows (tallow_windows, a convolution's columns not built): rows [pc, pc
 * + kc) x columns [j0, j0 + nc) into the panels pack_b makes of the built columns, the
 * same values. A panel's 16 columns are runs within output rows, the same for every
 * row of B; rows are read in order, as pack_b reads a row-major B. */
#define WIN_PANELS (NC_MAX / NR)
#ifdef TALLOW_X86
/* A panel's row of 16 as one register: each run loaded into its lanes under a mask
 * (the lanes before it read from before the run: masked, not touched), one store. As
 * scalar copies, runs of 8 or 12 floats (8x8 or 28x28 outputs) cost more than building
 * the columns. */
static AVX512F void pack_windows_zmm(const tallow_windows *w, int64_t pc, int64_t kc, int64_t panels,
                                     const int8_t *runs, int8_t dof[][NR], int8_t n[][NR], int64_t sof[][NR],
                                     float *dst) {
    __mmask16 mask[WIN_PANELS][NR];
    for (int64_t q = 0; q < panels; q++)
        for (int r = 0; r < runs[q]; r++) mask[q][r] = (__mmask16)(((1u << n[q][r]) - 1) << dof[q][r]);
    for (int64_t p = 0; p < kc; p++) {
        const float *row = w->base + w->row_off[pc + p];
        float *o = dst + p * NR;
        for (int64_t q = 0; q < panels; q++) {
            __m512 v = _mm512_setzero_ps();
            for (int r = 0; r < runs[q]; r++) v = _mm512_mask_loadu_ps(v, mask[q][r], row + sof[q][r] - dof[q][r]);
            _mm512_storeu_ps(o + q * kc * NR, v);
        }
    }
}
#endif
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* runs of 1-16 floats: inline */
static void pack_b_windows(const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float *dst) {
    const int64_t panels = (nc + NR - 1) / NR;
    /* each panel's runs: at dst offset dof, source offset sof (from the row's window), n floats */
    int8_t runs[WIN_PANELS], dof[WIN_PANELS][NR], n[WIN_PANELS][NR];
    int64_t sof[WIN_PANELS][NR];
    int whole = 1; /* every panel one run of NR */
    for (int64_t q = 0; q < panels; q++) {
        const int64_t d = nc - q * NR < NR ? nc - q * NR : NR; /* the panel's columns */
        runs[q] = (int8_t)position_runs(w, j0 + q * NR, d, dof[q], sof[q], n[q]);
        if (d < NR) memset(dst + q * kc * NR, 0, (size_t)(kc * NR) * sizeof(float)); /* zero-padded */
        whole &= runs[q] == 1 && d == NR;
    }
#ifdef TALLOW_X86
    if (use_avx512 && use_avx2 && !whole) {
        pack_windows_zmm(w, pc, kc, panels, runs, dof, n, sof, dst);
        return;
    }
#endif
    for (int64_t p = 0; p < kc; p++) {
        const float *row = w->base + w->row_off[pc + p];
        float *o = dst + p * NR;
        if (whole) {
            for (int64_t q = 0; q < panels; q++) memcpy(o + q * kc * NR, row + sof[q][0], NR * sizeof(float));
            continue;
        }
        for (int64_t q = 0; q < panels; q++)
            for (int r = 0; r < runs[q]; r++) {
                float *od = o + q * kc * NR + dof[q][r];
                const float *src = row + sof[q][r];
                for (int i = 0; i < n[q][r]; i++) od[i] = src[i];
            }
    }
}

#ifdef TALLOW_X86
/* pack_b_windows_t on 16 positions x 16 windows at a time: each window's 16 positions
 * loaded under masks (position_runs), the block transposed in registers, 16 stores. */
static AVX512F void pack_windows_t_zmm(const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc,
                                       float *dst) {
    const int64_t panels = (nc + NR - 1) / NR;
    int8_t dof[NR], n[NR];
    int64_t sof[NR];
    __mmask16 mask[NR];
    for (int64_t pa = 0; pa < kc; pa += NR) {
        const int64_t m = kc - pa < NR ? kc - pa : NR;
        const int runs = position_runs(w, pc + pa, m, dof, sof, n);
        for (int r = 0; r < runs; r++) mask[r] = (__mmask16)(((1u << n[r]) - 1) << dof[r]);
        for (int64_t q = 0; q < panels; q++) {
            __m512 v[16];
            for (int l = 0; l < NR; l++) {
                v[l] = _mm512_setzero_ps();
                const int64_t j = j0 + q * NR + l;
                if (j >= j0 + nc) continue;
                const float *win = w->base + w->row_off[j];
                for (int r = 0; r < runs; r++) v[l] = _mm512_mask_loadu_ps(v[l], mask[r], win + sof[r] - dof[r]);
            }
            transpose16(v);
            float *o = dst + q * kc * NR + pa * NR;
            for (int i = 0; i < m; i++) _mm512_storeu_ps(o + i * NR, v[i]);
        }
    }
}
#endif

/* B = the windows transposed (a kernel gradient's cols^T): rows [pc, pc + kc) are
 * positions, columns [j0, j0 + nc) windows, into 16-column panels, zero-padded: the
 * values pack_b makes of the built columns' transpose. */
static void pack_b_windows_t(const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float *dst) {
#ifdef TALLOW_X86
    if (use_avx512 && use_avx2) {
        pack_windows_t_zmm(w, pc, kc, j0, nc, dst);
        return;
    }
#endif
    for (int64_t q = 0; q * NR < nc; q++) {
        float *o = dst + q * kc * NR;
        const int64_t cols = nc - q * NR < NR ? nc - q * NR : NR;
        for (int64_t p = 0; p < kc; p++) {
            const int64_t pos = pc + p, d = (pos / w->ow) * w->pitch + pos % w->ow;
            int64_t l = 0;
            for (; l < cols; l++) o[p * NR + l] = w->base[w->row_off[j0 + q * NR + l] + d];
            for (; l < NR; l++) o[p * NR + l] = 0.0f;
        }
    }
}

/* With the AVX-512 kernels, a block of mc rows is cut into 8-row tiles
 * (kernel_avx512_8) and then 6-row ones, as many 8-row ones as leave the fewest rows
 * computed (64 or 128 rows: all of them; 10: none, two 6-row tiles; 20: one and two):
 * the rows the 8-row tiles cover (a multiple of 8, or mc), then the tile at row ir is
 * 8 rows high below it and MR above. */
static int64_t eight_rows(int64_t mc) {
    int64_t best = -1, rows = 0;
    for (int64_t a = 0; a <= (mc + TILE8 - 1) / TILE8; a++) {
        const int64_t rest = mc - TILE8 * a, cost = TILE8 * a + (rest > 0 ? (rest + MR - 1) / MR * MR : 0);
        if (best < 0 || cost <= best) best = cost, rows = TILE8 * a; /* (a tie: fewer, taller tiles) */
    }
    return rows < mc ? rows : mc;
}
static inline int64_t tile_rows(int64_t ir, int64_t e8) { return ir < e8 ? TILE8 : MR; }

/* Whether a product run by the two-panel kernel `kern2` (NULL: none) is cut into 8-row
 * tiles: with AVX-512, unless set_tile8 switched them off. */
static inline int tiles_of_eight(kernel2_fn kern2) { return kern2 != NULL && use_tile8; }

/* A rows [0, mc) x columns [0, kc) -> panels of tile_rows each (e8: eight_rows, or 0),
 * k-major (a panel of h rows: rs 1, cs h; the panel of rows ir.. at dst + ir * kc), for
 * an A whose rows are not contiguous (run_unit reads those in place). Rows past mc are
 * not written: the kernels do not read them (mr < h). */
static void pack_a(const float *a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int64_t e8, float *dst) {
    for (int64_t i0 = 0, h; i0 < mc; i0 += h, dst += kc * h) {
        h = tile_rows(i0, e8);
        const int mr = mc - i0 < h ? (int)(mc - i0) : (int)h;
        const float *src = a + i0 * rs;
        if (rs == 1 && mr == MR && h == MR) {
            /* a transposed A: a panel's values per k are contiguous (a fixed-size copy,
             * two moves, where the general loop below stored float by float) */
            for (int64_t p = 0; p < kc; p++) memcpy(dst + p * MR, src + p * cs, MR * sizeof(float));
        } else if (rs == 1 && mr == TILE8) {
            for (int64_t p = 0; p < kc; p++) memcpy(dst + p * TILE8, src + p * cs, TILE8 * sizeof(float));
        } else {
            for (int64_t p = 0; p < kc; p++)
                for (int i = 0; i < mr; i++) dst[p * h + i] = src[i * rs + p * cs];
        }
    }
}

/* ------------------------------------------------------------------ per-thread buffers */
typedef struct {
    float *b, *a;
    size_t bcap, acap;
} scratch_t;

#if defined(__linux__)
static pthread_key_t scratch_key;
static int scratch_key_ok = 0;
static void scratch_free(void *p) {
    scratch_t *s = (scratch_t *)p;
    free(s->b);
    free(s->a);
    free(s);
}
#endif
static _Thread_local scratch_t *tls_scratch = NULL;

static float *grow(float **buf, size_t *cap, size_t floats) {
    if (*cap >= floats) return *buf;
    free(*buf);
    size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
    *buf = (float *)aligned_alloc(64, bytes);
    *cap = *buf ? floats : 0;
    return *buf;
}

static scratch_t *scratch(void) {
    if (!tls_scratch) {
        tls_scratch = (scratch_t *)calloc(1, sizeof(scratch_t));
#if defined(__linux__)
        if (tls_scratch && scratch_key_ok) pthread_setspecific(scratch_key, tls_scratch); /* freed at thread exit */
#endif
    }
    return tls_scratch;
}

/* ------------------------------------------------------------------ the product */
typedef struct {
    const float *a, *b, *bias;
    float *c;
    int64_t m, n, k, batch;
    int64_t ldc; /* C's row stride (n, but for a product into columns of a wider C) */
    int64_t sab, rsa, csa, sbb, rsb, csb; /* element strides (batch, row, column) */
    int64_t nbw, nnb, mbh, nmb;            /* column block width and count, row block height and count */
    int accumulate;
    kernel_fn kern;
    kernel2_fn kern2; /* two panels at once, or NULL */
    const tallow_windows *win; /* B as windows (b unused), or NULL */
    _Atomic int failed;
} gemm_job;

/* Whether kc rows of B, `row_bytes` apart, sit in the L1 cache together when read in
 * place: rows a multiple of 4 KiB apart map to one set of a 32 KiB 8-way L1 (a 1024-
 * or 50176-column B), and reading a 16-column panel down them evicts it from itself
 * (1.3-2.2x slower than packing). Allowed while no set needs more than 4 of them. */
static int rows_spread_in_l1(int64_t row_bytes, int64_t kc) {
    if (row_bytes < 0) row_bytes = -row_bytes;
    if (row_bytes % 64) return 1; /* rows straddle lines at shifting offsets */
    int64_t g = 64, step = (row_bytes / 64) % 64;
    while (step) { /* g = gcd(64, step): the rows cycle through 64 / g sets */
        int64_t t = g % step;
        g = step;
        step = t;
    }
    int64_t sets = 64 / g;
    return (kc + sets - 1) / sets <= 4;
}

static int64_t kc_of(int64_t k) {
    int64_t chunks = (k + KC - 1) / KC;
    return (k + chunks - 1) / chunks;
}

/* Whether the windows' columns [j0, j0 + nc) are to be read in place (w->in_place) and
 * are whole panels, each one run of 16 in an output row, each panel's start in sof:
 * then the AVX-512 kernel reads them through the rows' offsets (kernel_avx512_rows), no
 * packing. The flat columns and the tap planes (a strided layer's, each window one run
 * of the product's columns: ow = pitch, its last part-panel read past the run with
 * read_past) ask for it. Windows of output rows 16, 32 or 64 wide read from the phase
 * planes are packed: a 64-byte copy per panel row gave 0.88-1.02x the time of reading
 * them in place over eleven shapes at one and two threads (the stride-2 64->128 layer,
 * batch 4 of 32x32: 0.93x and 0.84-0.88x). */
static int windows_whole(const tallow_windows *w, int64_t j0, int64_t nc, int64_t *sof) {
    const int one_run = w->ow == w->pitch; /* each window one run: a panel starts at its column */
    if (!w->in_place || w->transposed || j0 % NR || nc > NC_MAX || (w->ow % NR && !one_run) ||
        (nc % NR && !(one_run && w->read_past)))
        return 0;
    for (int64_t q = 0; q < (nc + NR - 1) / NR; q++) {
        const int64_t jj = j0 + q * NR;
        sof[q] = (jj / w->ow) * w->pitch + jj % w->ow;
    }
    return 1;
}

/* ------------------------------------------------------------------ thin products */
/* Fewer columns than a panel and few rows, A's rows and B's columns both running
 * along K (csa = rsb = 1): a few-channel convolution's kernel gradient, g (c_out,
 * positions) @ cols^T (positions, c_in * taps), or a narrow last layer. The tiles
 * would compute mostly padding there, after packing B by a strided transpose; here
 * each element is the dot product of two contiguous runs, taken three rows by three
 * columns at a time (nine sums and six loads fill the 16 vector registers) in
 * eight-lane partial sums (lane l sums the k = l mod 8 terms),
 * the lanes then added in order and the last k % 8 terms after them: each element's
 * sum follows k alone, whatever the units. Written once with GCC vector types and
 * compiled for the baseline and for AVX2 (the build has no FMA contraction: the
 * same operations, the same bits). */
#define THIN_ROWS 64 /* at most this many rows */
#define THIN_K 32    /* at least this long a K */
#define THIN_TR 3    /* a block's rows and columns */
#define THIN_TC 3
typedef float thin_f32x8 __attribute__((vector_size(32)));
typedef float thin_f32x8u __attribute__((vector_size(32), aligned(4))); /* an unaligned load */

static inline __attribute__((always_inline)) void thin_dots(const gemm_job *j, const float *A, const float *B,
                                                            float *C, int64_t i0, int64_t i1) {
    const int64_t k = j->k, k8 = k & ~(int64_t)7, n = j->n;
    for (int64_t i = i0; i < i1; i += THIN_TR)
        for (int64_t c0 = 0; c0 < n; c0 += THIN_TC) {
            const float *a[THIN_TR], *b[THIN_TC]; /* a missing row or column repeats the first, not stored */
            for (int r = 0; r < THIN_TR; r++) a[r] = A + (i + r < i1 ? i + r : i) * j->rsa;
            for (int q = 0; q < THIN_TC; q++) b[q] = B + (c0 + q < n ? c0 + q : c0) * j->csb;
            thin_f32x8 acc[THIN_TR][THIN_TC];
            for (int r = 0; r < THIN_TR; r++)
                for (int q = 0; q < THIN_TC; q++) acc[r][q] = (thin_f32x8){0};
            for (int64_t p = 0; p < k8; p += 8) {
                thin_f32x8 av[THIN_TR];
                for (int r = 0; r < THIN_TR; r++) av[r] = *(const thin_f32x8u *)(a[r] + p);
                for (int q = 0; q < THIN_TC; q++) {
                    thin_f32x8 bv = *(const thin_f32x8u *)(b[q] + p);
                    for (int r = 0; r < THIN_TR; r++) acc[r][q] += av[r] * bv;
                }
            }
            for (int r = 0; r < THIN_TR && i + r < i1; r++)
                for (int q = 0; q < THIN_TC && c0 + q < n; q++) {
                    float s = acc[r][q][0];
                    for (int l = 1; l < 8; l++) s += acc[r][q][l];
                    for (int64_t p = k8; p < k; p++) s += a[r][p] * b[q][p];
                    float *c = C + (i + r) * j->ldc + c0 + q;
                    float v = j->accumulate ? *c + s : s;
                    if (j->bias) v = v + j->bias[c0 + q];
                    *c = v;
                }
        }
}

static void thin_dots_base(const gemm_job *j, const float *A, const float *B, float *C, int64_t i0, int64_t i1) {
    thin_dots(j, A, B, C, i0, i1);
}
#ifdef TALLOW_X86
static AVX2 void thin_dots_avx2(const gemm_job *j, const float *A, const float *B, float *C, int64_t i0,
                                int64_t i1) {
    thin_dots(j, A, B, C, i0, i1);
}
#endif

static int is_thin(const gemm_job *j) {
    return !j->win && j->csa == 1 && j->rsb == 1 && j->n < NR && j->m <= THIN_ROWS && j->k >= THIN_K;
}

/* One unit: rows [i0, i1) x columns [j0, j1) of batch item bi. */
static void run_unit(gemm_job *j, int64_t u) {
    int64_t ib = u % j->nmb, jb = (u / j->nmb) % j->nnb, bi = u / (j->nmb * j->nnb);
    int64_t i0 = ib * j->mbh, i1 = i0 + j->mbh < j->m ? i0 + j->mbh : j->m;
    int64_t j0 = jb * j->nbw, j1 = j0 + j->nbw < j->n ? j0 + j->nbw : j->n;
    if (i0 >= i1 || j0 >= j1) return;
    const float *A = j->a + bi * j->sab, *B = j->win ? NULL : j->b + bi * j->sbb;
    float *C = j->c + bi * j->m * j->n;
    if (is_thin(j)) { /* (a unit is then whole columns: n < NR) */
#ifdef TALLOW_X86
        if (use_avx2) {
            thin_dots_avx2(j, A, B, C, i0, i1);
            return;
        }
#endif
        thin_dots_base(j, A, B, C, i0, i1);
        return;
    }
    const int64_t ldc = j->ldc, k = j->k, kc = kc_of(k), nc = j1 - j0, panels = (nc + NR - 1) / NR;
    /* A is packed only when its rows are not contiguous: rows read in place, six
     * streams, ran as fast as packed ones for wide products and up to 1.5x faster for
     * narrow ones (2048x576x64: 100 -> 151 GFLOP/s), where packing (a strided store
     * per float) costs more than the few panels reusing it save (docs/design.md). */
    const int pack_rows = j->csa != 1 && nc >= 4 * NR;
    /* Few rows: B is read in place (rows contiguous) rather than packed for so little reuse;
     * only a last partial panel is packed (a full-width read would pass the row's end). */
    const int direct_b = !j->win && j->csb == 1 && i1 - i0 <= direct_b_rows && rows_spread_in_l1(j->rsb * 4, kc);
    scratch_t *s = scratch();
    if (!s || !grow(&s->b, &s->bcap, (size_t)(kc * (direct_b ? 1 : panels) * NR)) ||
        (pack_rows && !grow(&s->a, &s->acap, (size_t)(kc * (MC + TILE8))))) {
        atomic_store(&j->failed, 1);
        return;
    }
    kernel_fn kern = j->kern;
    kernel2_fn kern2 = j->kern2;
    const int wide = tiles_of_eight(kern2); /* 8-row tiles (eight_rows) */
    int64_t wsof[WIN_PANELS];
#ifdef TALLOW_X86
    const int win_direct = j->win && kern2 && windows_whole(j->win, j0, nc, wsof);
#else
    const int win_direct = 0;
#endif
    for (int64_t pc = 0; pc < k; pc += kc) {
        int64_t kcur = k - pc < kc ? k - pc : kc;
        const float *bblk = j->win ? NULL : B + pc * j->rsb + j0 * j->csb;
        int64_t full = nc / NR;
        if (win_direct) { /* read in place, but for an odd last panel */
            if (panels & 1) pack_b_windows(j->win, pc, kcur, j0 + (panels - 1) * NR, nc - (panels - 1) * NR, s->b);
        } else if (j->win && j->win->transposed) pack_b_windows_t(j->win, pc, kcur, j0, nc, s->b);
        else if (j->win) pack_b_windows(j->win, pc, kcur, j0, nc, s->b);
        else if (!direct_b) pack_b(bblk, j->rsb, j->csb, kcur, nc, s->b);
        else if (full < panels) pack_b(bblk + full * NR, j->rsb, 1, kcur, nc - full * NR, s->b);
        int flags = (pc > 0 || j->accumulate ? F_LOAD : 0) | (pc + kcur == k && j->bias ? F_BIAS : 0);
        for (int64_t ic = i0; ic < i1; ic += MC) { /* (MC: whole tiles of 6 and of 8 rows) */
            int64_t mcur = i1 - ic < MC ? i1 - ic : MC;
            const float *ablk = A + ic * j->rsa + pc * j->csa;
            /* the tile of rows ir..: at ablk + ir * astep, rows ars apart, k steps acs apart
             * (tile_h: its height); packed, each tile is a panel of its own height */
            int64_t ars = j->rsa, acs = j->csa, astep = j->rsa;
            const int64_t e8 = wide ? eight_rows(mcur) : 0;
            if (pack_rows) {
                pack_a(ablk, j->rsa, j->csa, mcur, kcur, e8, s->a);
                ablk = s->a, ars = 1, astep = kcur;
            }
#define TILES_OF(mcur)                                                                   \
    for (int64_t ir = 0, tile_h; ir < (mcur) && (tile_h = tile_rows(ir, e8)); ir += tile_h)
#define TILE_MR ((int)((mcur) - ir < tile_h ? (mcur) - ir : tile_h))
#define TILE_A ablk + ir * astep, ars, pack_rows ? tile_h : acs
            for (int64_t jr = 0; jr < panels; jr++) {
                const int nr = nc - jr * NR < NR ? (int)(nc - jr * NR) : NR;
                const int nr2 = nc - jr * NR < 2 * NR ? (int)(nc - jr * NR) : 2 * NR; /* a pair's columns */
                const float *bp = s->b + jr * kcur * NR;
                int64_t bs = NR;
                if (direct_b && jr < full) {
                    bp = bblk + jr * NR;
                    bs = j->rsb;
                } else if (direct_b) {
                    bp = s->b;
                }
                const float *bias = j->bias ? j->bias + j0 + jr * NR : NULL;
                float *cp = C + ic * ldc + j0 + jr * NR;
#ifdef TALLOW_X86
                if (win_direct && jr + 1 < panels) { /* two panels of windows, in place */
                    const float *wb = j->win->base + wsof[jr];
                    const int64_t boff = wsof[jr + 1] - wsof[jr];
                    TILES_OF(mcur) {
                        (tile_h == TILE8 ? kernel_avx512_8_rows : kernel_avx512_rows)(
                            kcur, TILE_A, wb, boff, j->win->row_off + pc, cp + ir * ldc, ldc, TILE_MR, nr2, flags, bias);
                    }
                    jr++;
                    continue;
                }
#endif
                if (win_direct) bp = s->b; /* the odd last panel, packed */
                /* two panels read the same way (both in place, or both packed) */
                if (kern2 && jr + 1 < (direct_b ? full : panels)) {
                    int64_t boff = direct_b ? NR : kcur * NR;
                    TILES_OF(mcur) {
#ifdef TALLOW_X86
                        if (tile_h == TILE8) {
                            kernel_avx512_8(kcur, TILE_A, bp, boff, bs, cp + ir * ldc, ldc, TILE_MR, nr2, flags, bias);
                            continue;
                        }
#endif
                        kern2(kcur, TILE_A, bp, boff, bs, cp + ir * ldc, ldc, TILE_MR, nr2, flags, bias);
                    }
                    jr++;
                    continue;
                }
                TILES_OF(mcur) {
#ifdef TALLOW_X86
                    if (tile_h == TILE8) { /* one panel: the 8-row kernel reading it twice, half stored */
                        kernel_avx512_8(kcur, TILE_A, bp, 0, bs, cp + ir * ldc, ldc, TILE_MR, nr, flags, bias);
                        continue;
                    }
#endif
                    kern(kcur, TILE_A, bp, bs, cp + ir * ldc, ldc, TILE_MR, nr, flags, bias);
                }
#undef TILES_OF
#undef TILE_MR
#undef TILE_A
            }
        }
    }
}

static void gemm_task(void *ctx, int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; u++) run_unit((gemm_job *)ctx, u);
}

/* Cut the product into units for `threads` threads (1: one unit per batch item and
 * NC_MAX columns). */
static void plan(gemm_job *j, int threads) {
    int64_t n16 = (j->n + NR - 1) / NR * NR;
    j->nbw = n16 < NC_MAX ? n16 : NC_MAX;
    j->mbh = j->m > 0 ? j->m : 1;
    j->nmb = 1;
    if (j->nbw < NR) j->nbw = NR;
    j->nnb = (j->n + j->nbw - 1) / j->nbw;
    if (threads <= 1) return;
    int64_t want = (int64_t)threads * UNITS_PER_THREAD;
    while (j->batch * j->nnb < want && j->nbw >= 2 * NC_MIN) {
        j->nbw = (j->nbw / 2 + NR - 1) / NR * NR;
        j->nnb = (j->n + j->nbw - 1) / j->nbw;
    }
    int64_t units = j->batch * j->nnb;
    if (units < want) { /* too few columns: cut rows too, in whole tiles, at least 4 tiles high */
        const int64_t th = tiles_of_eight(j->kern2) ? TILE8 : MR;
        int64_t parts = (want + units - 1) / units;
        int64_t h = (j->m + parts - 1) / parts;
        h = (h + th - 1) / th * th;
        if (h < 4 * th) h = 4 * th;
        if (h < j->m) {
            j->mbh = h;
            j->nmb = (j->m + h - 1) / h;
        }
    }
}

/* A shared B over a batch of row-contiguous A blocks: one taller product (the same
 * sums, fewer and fuller units). */
static void merge_shared_b(gemm_job *j) {
    if (j->batch > 1 && j->sbb == 0 && j->sab == j->m * j->rsa && j->rsa != 0) {
        j->m = j->m * j->batch, j->batch = 1, j->sab = 0;
    }
}

/* The capsule's product: on the calling thread (inside another module's pool task). */
static int serial_product(const float *a, int64_t sab, int64_t rsa, int64_t csa, const float *b, int64_t sbb,
                          int64_t rsb, int64_t csb, float *c, int64_t batch, int64_t m, int64_t n, int64_t k,
                          int accumulate) {
    if (batch <= 0 || m <= 0 || n <= 0) return 1;
    if (k <= 0) {
        if (!accumulate) memset(c, 0, (size_t)(batch * m * n) * sizeof(float));
        return 1;
    }
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.a = a, job.b = b, job.c = c;
    job.m = m, job.n = n, job.ldc = n, job.k = k, job.batch = batch, job.kern = kernel(), job.kern2 = kernel2();
    job.accumulate = accumulate;
    job.sab = batch > 1 ? sab : 0, job.rsa = rsa, job.csa = csa;
    job.sbb = batch > 1 ? sbb : 0, job.rsb = rsb, job.csb = csb;
    merge_shared_b(&job);
    plan(&job, 1);
    gemm_task(&job, 0, job.batch * job.nnb * job.nmb);
    return !atomic_load(&job.failed);
}

static int serial_product_windows(const float *a, int64_t rsa, int64_t csa, const tallow_windows *b, float *c,
                                  int64_t ldc, int64_t m, int64_t n, int64_t k, int accumulate) {
    if (m <= 0 || n <= 0) return 1;
    if (k <= 0) {
        for (int64_t i = 0; i < m && !accumulate; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return 1;
    }
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.a = a, job.win = b, job.c = c;
    job.m = m, job.n = n, job.ldc = ldc, job.k = k, job.batch = 1, job.kern = kernel(), job.kern2 = kernel2();
    job.accumulate = accumulate;
    job.rsa = rsa, job.csa = csa;
    plan(&job, 1);
    gemm_task(&job, 0, job.nnb * job.nmb);
    return !atomic_load(&job.failed);
}

static const tallow_gemm_api gemm_api = {TALLOW_GEMM_ABI, serial_product, serial_product_windows};

/* ------------------------------------------------------------------ Python */
typedef struct {
    Py_buffer v;
    int held;
} view_t;

static int float_view(PyObject *obj, view_t *b, int writable, const char *what) {
    int flags = writable ? (PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) : (PyBUF_STRIDED_RO | PyBUF_FORMAT);
    if (PyObject_GetBuffer(obj, &b->v, flags) < 0) return 0;
    b->held = 1;
    const char *f = b->v.format;
    if (b->v.itemsize != 4 || !f || !(strcmp(f, "f") == 0 || strcmp(f, "<f") == 0 || strcmp(f, "=f") == 0)) {
        PyErr_Format(PyExc_TypeError, "gemm: %s must be float32 (format %s)", what, f ? f : "?");
        return 0;
    }
    if (b->v.ndim != 2 && b->v.ndim != 3) {
        PyErr_Format(PyExc_ValueError, "gemm: %s must be 2-D or 3-D, got %d-D", what, b->v.ndim);
        return 0;
    }
    for (int d = 0; d < b->v.ndim; d++)
        if (b->v.strides && b->v.strides[d] % 4 != 0) {
            PyErr_Format(PyExc_ValueError, "gemm: %s has a stride not a multiple of 4 bytes", what);
            return 0;
        }
    return 1;
}

/* (batch, rows, cols, batch stride, row stride, col stride) of a 2-D / 3-D view, in elements. */
static void dims(const Py_buffer *v, int64_t *d) {
    int o = v->ndim - 2;
    d[0] = o ? v->shape[0] : 1;
    d[1] = v->shape[o];
    d[2] = v->shape[o + 1];
    d[3] = o ? v->strides[0] / 4 : 0;
    d[4] = v->strides[o] / 4;
    d[5] = v->strides[o + 1] / 4;
    if (d[0] == 1) d[3] = 0;
}

/* gemm(a, b, out, accumulate=False, bias=None, split=True) */
static PyObject *py_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 3 || nargs > 6) return PyErr_Format(PyExc_TypeError, "gemm takes 3 to 6 arguments");
    int accumulate = nargs > 3 ? PyObject_IsTrue(args[3]) : 0;
    int split = nargs > 5 ? PyObject_IsTrue(args[5]) : 1;
    if (accumulate < 0 || split < 0) return NULL;
    PyObject *bias_obj = nargs > 4 ? args[4] : Py_None;
    view_t v[4];
    memset(v, 0, sizeof v);
    PyObject *res = NULL;
    if (!float_view(args[0], &v[0], 0, "a") || !float_view(args[1], &v[1], 0, "b") ||
        !float_view(args[2], &v[2], 1, "out"))
        goto done;
    int64_t da[6], db[6], dc[6];
    dims(&v[0].v, da);
    dims(&v[1].v, db);
    dims(&v[2].v, dc);
    int64_t batch = dc[0], m = dc[1], n = dc[2], k = da[2];
    if (da[1] != m || db[2] != n || db[1] != k || (da[0] != batch && da[0] != 1) || (db[0] != batch && db[0] != 1)) {
        PyErr_Format(PyExc_ValueError, "gemm: shapes (%lld, %lld, %lld) @ (%lld, %lld, %lld) -> (%lld, %lld, %lld) do not match",
                     (long long)da[0], (long long)da[1], (long long)da[2], (long long)db[0], (long long)db[1],
                     (long long)db[2], (long long)batch, (long long)m, (long long)n);
        goto done;
    }
    const float *bias = NULL;
    if (bias_obj != Py_None) {
        if (PyObject_GetBuffer(bias_obj, &v[3].v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        v[3].held = 1;
        if (v[3].v.itemsize != 4 || v[3].v.len != n * 4 || !v[3].v.format || strchr(v[3].v.format, 'f') == NULL) {
            PyErr_Format(PyExc_ValueError, "gemm: bias must be %lld contiguous float32 values", (long long)n);
            goto done;
        }
        bias = (const float *)v[3].v.buf;
    }
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.a = (const float *)v[0].v.buf, job.b = (const float *)v[1].v.buf, job.c = (float *)v[2].v.buf, job.bias = bias;
    job.m = m, job.n = n, job.ldc = n, job.k = k, job.batch = batch, job.accumulate = accumulate, job.kern = kernel();
    job.kern2 = kernel2();
    job.sab = da[3], job.rsa = da[4], job.csa = da[5], job.sbb = db[3], job.rsb = db[4], job.csb = db[5];
    merge_shared_b(&job);
    if (batch == 0 || m == 0 || n == 0) {
        res = Py_None;
    } else if (k == 0) { /* out = (accumulate ? out : 0) + bias */
        float *c = job.c;
        for (int64_t r = 0; r < batch * m; r++)
            for (int64_t col = 0; col < n; col++) {
                float x = accumulate ? c[r * n + col] : 0.0f;
                c[r * n + col] = bias ? x + bias[col] : x;
            }
        res = Py_None;
    } else {
        int64_t work = job.batch * job.m * job.n * job.k;
        int threads = split ? split_threads(work) : 1;
        plan(&job, threads);
        int64_t units = job.batch * job.nnb * job.nmb;
        Py_BEGIN_ALLOW_THREADS
        if (threads > 1 && units > 1)
            tallow_pool->run(gemm_task, &job, units, 1, units * (64 << 10)); /* one chunk per unit */
        else
            gemm_task(&job, 0, units);
        Py_END_ALLOW_THREADS
        if (atomic_load(&job.failed)) PyErr_NoMemory();
        else res = Py_None;
    }
    Py_XINCREF(res);
done:
    for (int i = 0; i < 4; i++)
        if (v[i].held) PyBuffer_Release(&v[i].v);
    return res;
}

TALLOW_SIMD_SWITCH(use_avx2)

TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

static PyObject *py_set_split_min(PyObject *self, PyObject *arg) {
    (void)self;
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    if (v < 0) return PyErr_Format(PyExc_ValueError, "set_split_min: need >= 0");
    split_min = v;
    Py_RETURN_NONE;
}

static PyObject *py_set_direct_b_rows(PyObject *self, PyObject *arg) {
    (void)self;
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    direct_b_rows = v;
    Py_RETURN_NONE;
}

static PyObject *py_split_min(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyLong_FromLongLong(split_min);
}

/* Threads a product of `work` multiply-adds is split over now (1: on the caller). */
static int split_threads(int64_t work) {
    if (work >= split_min && tallow_pool && tallow_pool->threads() > 1 && tallow_pool->worth(INT64_MAX))
        return tallow_pool->threads();
    return 1;
}

static PyObject *py_threads_for(PyObject *self, PyObject *arg) {
    (void)self;
    long long work = PyLong_AsLongLong(arg);
    if (work == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(split_threads(work));
}

static PyObject *py_set_tile8(PyObject *self, PyObject *arg) {
    (void)self;
    const int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    use_tile8 = on;
    Py_RETURN_NONE;
}

static PyObject *py_tile8(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyBool_FromLong(tiles_of_eight(kernel2()));
}

/* plan(m, n, k, batch, threads) -> (column block, column blocks, row block, row blocks): the units. */
static PyObject *py_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "plan takes 5 arguments");
    int64_t a[5];
    for (int i = 0; i < 5; i++) {
        a[i] = PyLong_AsLongLong(args[i]);
        if (a[i] == -1 && PyErr_Occurred()) return NULL;
    }
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.m = a[0], job.n = a[1], job.k = a[2], job.batch = a[3], job.kern2 = kernel2();
    plan(&job, (int)a[4]);
    return Py_BuildValue("(LLLL)", (long long)job.nbw, (long long)job.nnb, (long long)job.mbh, (long long)job.nmb);
}

#define FC(name) (PyCFunction)(void (*)(void))name, METH_FASTCALL
static PyMethodDef methods[] = {
    {"gemm", FC(py_gemm), "out = (out if accumulate else 0) + a @ b (+ bias): f32, 2-D or batched, any strides."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2+FMA kernel."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 kernel (two panels at once)."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 kernel is used."},
    {"set_tile8", py_set_tile8, METH_O, "Use (True) or not 8-row tiles with the AVX-512 kernel (else 6-row ones)."},
    {"tile8", py_tile8, METH_NOARGS, "Whether products are cut into 8-row tiles (AVX-512 on and tile8 set)."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2+FMA kernel is used."},
    {"set_split_min", py_set_split_min, METH_O, "Smallest product (multiply-adds) split across threads."},
    {"set_direct_b_rows", py_set_direct_b_rows, METH_O, "Units of at most this many rows read B unpacked."},
    {"split_min", py_split_min, METH_NOARGS, "Smallest product (multiply-adds) split across threads."},
    {"threads_for", py_threads_for, METH_O, "Threads a product of this many multiply-adds is split over now."},
    {"plan", FC(py_plan), "The work units of a product at a thread count."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_gemm", "tallow's f32 matrix product kernel.", -1, methods};

PyMODINIT_FUNC PyInit__gemm(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
#if defined(__linux__)
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
#endif
    tallow_pool_import();
    PyObject *m = PyModule_Create(&moduledef);
    if (m) {
        PyModule_AddIntConstant(m, "MR", MR);
        PyModule_AddIntConstant(m, "NR", NR);
        PyModule_AddIntConstant(m, "KC", KC);
        PyModule_AddIntConstant(m, "MC", MC);
        PyModule_AddIntConstant(m, "NC_MAX", NC_MAX);
        PyObject *cap = PyCapsule_New((void *)&gemm_api, TALLOW_GEMM_CAPSULE, NULL);
        if (!cap || PyModule_AddObject(m, "_C_API", cap) < 0) {
            Py_XDECREF(cap);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
