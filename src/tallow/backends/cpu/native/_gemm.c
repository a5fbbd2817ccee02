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
 *  - The micro-kernel keeps a 6-row tile of one 16-column panel in vector accumulators
 *    (12 ymm with AVX2+FMA): per k, the panel's row of B loaded, six broadcasts of A,
 *    the FMAs.  Edge tiles run the same kernel (missing A rows read row 0 again, B
 *    panels are zero-padded).  With AVX-512 the tiles are two panels wide, 8 rows high
 *    (and 6 where that leaves fewer rows computed: eight_rows), so that the usual
 *    64-512 rows leave no tile part-empty.
 *  - The kernels are written once (_gemm_body.h, _vec_body.h: GCC vector extensions)
 *    and compiled for the baseline instruction set, for AVX2+FMA and for AVX-512,
 *    chosen at import by the CPU's features (set_simd / set_avx512 narrow the choice).
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

#define MR 6
#define TILE8 8         /* the AVX-512 build's tile height (tile_rows) */
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
#define DIRECT_B_ROWS 48
static int split_threads(int64_t work);
/* The AVX-512 build (set_avx512 switches it off: the AVX2 one) on CPUs that have it. */
static int use_avx512 = 0;
/* ... and with it, 8-row tiles (eight_rows; set_tile8 switches them off: 6-row ones). */
static int use_tile8 = 1;

/* A tile of C (kc steps; B's second panel, if any, boff floats after its first, its rows
 * bs apart or at the offsets off). */
typedef void (*kernel_fn)(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t boff,
                          int64_t bs, float *c, int64_t ldc, int mr, int nr, int flags, const float *bias);
typedef void (*rows_kernel_fn)(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b, int64_t boff,
                               const int64_t *off, float *c, int64_t ldc, int mr, int nr, int flags,
                               const float *bias);
typedef struct gemm_job gemm_job;
/* One instruction set's kernels (_gemm_body.h); the two-panel ones and the masked window
 * packing only where a panel row is one vector (AVX-512), else NULL. */
typedef struct {
    kernel_fn one, one8, two, two8; /* MR or TILE8 rows x one or two panels */
    rows_kernel_fn rows, rows8;     /* two panels of windows read in place */
    int64_t (*pack_cols)(const float *src, int64_t cs, int64_t kc, float *dst); /* rows done */
    void (*pack_windows)(const tallow_windows *w, int64_t pc, int64_t kc, int64_t panels, const int8_t *runs,
                         int8_t dof[][NR], int8_t n[][NR], int64_t sof[][NR], float *dst);
    void (*pack_windows_t)(const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float *dst);
    void (*thin)(const gemm_job *j, const float *A, const float *B, float *C, int64_t i0, int64_t i1);
} gemm_build;

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

#define WIN_PANELS (NC_MAX / NR) /* the panels of a unit */

/* ------------------------------------------------------------------ the product */
struct gemm_job {
    const float *a, *b, *bias;
    float *c;
    int64_t m, n, k, batch;
    int64_t ldc; /* C's row stride (n, but for a product into columns of a wider C) */
    int64_t sab, rsa, csa, sbb, rsb, csb; /* element strides (batch, row, column) */
    int64_t nbw, nnb, mbh, nmb;            /* column block width and count, row block height and count */
    int accumulate;
    const gemm_build *bld;
    const tallow_windows *win; /* B as windows (b unused), or NULL */
    _Atomic int failed;
};

/* ------------------------------------------------------------------ thin products */
/* Fewer columns than a panel and few rows, A's rows and B's columns both running
 * along K (csa = rsb = 1): a few-channel convolution's kernel gradient, g (c_out,
 * positions) @ cols^T (positions, c_in * taps), or a narrow last layer. The tiles
 * would compute mostly padding there, after packing B by a strided transpose; here
 * each element is the dot product of two contiguous runs, taken three rows by three
 * columns at a time (nine sums and six loads fill the 16 vector registers) in
 * eight-lane partial sums (lane l sums the k = l mod 8 terms),
 * the lanes then added in order and the last k % 8 terms after them: each element's
 * sum follows k alone, whatever the units. Compiled in each build, never contracted:
 * the same operations, the same bits. */
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

/* ------------------------------------------------------------------ the builds */
#define VEC_BODY "_gemm_body.h"
#include "_vec_builds.h"

/* The build in use: the CPU's widest, narrowed by set_simd / set_avx512. */
static const gemm_build *build(void) {
#ifdef TALLOW_X86
    if (use_avx2) return use_avx512 ? &build_avx512 : &build_avx2;
#endif
    return &build_generic;
}

/* B rows [0, kc) x columns [0, nc) (strides rs, cs) -> 16-column panels, k-major, zero-padded. */
static void pack_b(const gemm_build *g, const float *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, float *dst) {
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
            const int64_t p0 = nr == NR ? g->pack_cols(src, cs, kc, dst) : 0;
            if (nr < NR) memset(dst, 0, (size_t)kc * NR * sizeof(float));
            for (int j = 0; j < nr; j++)
                for (int64_t p = p0; p < kc; p++) dst[p * NR + j] = src[j * cs + p];
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


/* B given as windows (tallow_windows, a convolution's columns not built): rows [pc, pc
 * + kc) x columns [j0, j0 + nc) into the panels pack_b makes of the built columns, the
 * same values. A panel's 16 columns are runs within output rows, the same for every
 * row of B; rows are read in order, as pack_b reads a row-major B. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* runs of 1-16 floats: inline */
static void pack_b_windows(const gemm_build *g, const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc, float *dst) {
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
    if (g->pack_windows && !whole) {
        g->pack_windows(w, pc, kc, panels, runs, dof, n, sof, dst);
        return;
    }
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

/* B = the windows transposed (a kernel gradient's cols^T): rows [pc, pc + kc) are
 * positions, columns [j0, j0 + nc) windows, into 16-column panels, zero-padded: the
 * values pack_b makes of the built columns' transpose. */
static void pack_b_windows_t(const gemm_build *g, const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0,
                             int64_t nc, float *dst) {
    if (g->pack_windows_t) {
        g->pack_windows_t(w, pc, kc, j0, nc, dst);
        return;
    }
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


/* With the AVX-512 build, a block of mc rows is cut into 8-row tiles
 * (two8, one8) and then 6-row ones, as many 8-row ones as leave the fewest rows
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

/* Whether a product run by build g is cut into 8-row tiles: with AVX-512 (two-panel
 * tiles), unless set_tile8 switched them off. */
static inline int tiles_of_eight(const gemm_build *g) { return g->two != NULL && use_tile8; }

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
 * then the AVX-512 build reads them through the rows' offsets (its rows kernels), no
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
    const gemm_build *g = j->bld;
    if (is_thin(j)) { /* (a unit is then whole columns: n < NR) */
        g->thin(j, A, B, C, i0, i1);
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
    const int direct_b = !j->win && j->csb == 1 && i1 - i0 <= DIRECT_B_ROWS && rows_spread_in_l1(j->rsb * 4, kc);
    /* the packed B, then the packed A, 64-byte aligned in the thread's scratch (common.h) */
    const size_t bfloats = (size_t)(kc * (direct_b ? 1 : panels) * NR);
    const size_t floats = 16 + bfloats + (pack_rows ? (size_t)(kc * (MC + TILE8)) : 0);
    float *buf = scratch_get(floats);
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *const sb = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63), *const sa = sb + bfloats;
    const int wide = tiles_of_eight(g); /* 8-row tiles (eight_rows) */
    int64_t wsof[WIN_PANELS];
    const int win_direct = j->win && g->rows && windows_whole(j->win, j0, nc, wsof);
    for (int64_t pc = 0; pc < k; pc += kc) {
        int64_t kcur = k - pc < kc ? k - pc : kc;
        const float *bblk = j->win ? NULL : B + pc * j->rsb + j0 * j->csb;
        int64_t full = nc / NR;
        if (win_direct) { /* read in place, but for an odd last panel */
            if (panels & 1) pack_b_windows(g, j->win, pc, kcur, j0 + (panels - 1) * NR, nc - (panels - 1) * NR, sb);
        } else if (j->win && j->win->transposed) pack_b_windows_t(g, j->win, pc, kcur, j0, nc, sb);
        else if (j->win) pack_b_windows(g, j->win, pc, kcur, j0, nc, sb);
        else if (!direct_b) pack_b(g, bblk, j->rsb, j->csb, kcur, nc, sb);
        else if (full < panels) pack_b(g, bblk + full * NR, j->rsb, 1, kcur, nc - full * NR, sb);
        int flags = (pc > 0 || j->accumulate ? F_LOAD : 0) | (pc + kcur == k && j->bias ? F_BIAS : 0);
        for (int64_t ic = i0; ic < i1; ic += MC) { /* (MC: whole tiles of 6 and of 8 rows) */
            int64_t mcur = i1 - ic < MC ? i1 - ic : MC;
            const float *ablk = A + ic * j->rsa + pc * j->csa;
            /* the tile of rows ir..: at ablk + ir * astep, rows ars apart, k steps acs apart
             * (tile_h: its height); packed, each tile is a panel of its own height */
            int64_t ars = j->rsa, acs = j->csa, astep = j->rsa;
            const int64_t e8 = wide ? eight_rows(mcur) : 0;
            if (pack_rows) {
                pack_a(ablk, j->rsa, j->csa, mcur, kcur, e8, sa);
                ablk = sa, ars = 1, astep = kcur;
            }
#define TILES_OF(mcur)                                                                   \
    for (int64_t ir = 0, tile_h; ir < (mcur) && (tile_h = tile_rows(ir, e8)); ir += tile_h)
#define TILE_MR ((int)((mcur) - ir < tile_h ? (mcur) - ir : tile_h))
#define TILE_A ablk + ir * astep, ars, pack_rows ? tile_h : acs
            for (int64_t jr = 0; jr < panels; jr++) {
                const int nr = nc - jr * NR < NR ? (int)(nc - jr * NR) : NR;
                const int nr2 = nc - jr * NR < 2 * NR ? (int)(nc - jr * NR) : 2 * NR; /* a pair's columns */
                const float *bp = sb + jr * kcur * NR;
                int64_t bs = NR;
                if (direct_b && jr < full) {
                    bp = bblk + jr * NR;
                    bs = j->rsb;
                } else if (direct_b) {
                    bp = sb;
                }
                const float *bias = j->bias ? j->bias + j0 + jr * NR : NULL;
                float *cp = C + ic * ldc + j0 + jr * NR;
                if (win_direct && jr + 1 < panels) { /* two panels of windows, in place */
                    const float *wb = j->win->base + wsof[jr];
                    const int64_t boff = wsof[jr + 1] - wsof[jr];
                    TILES_OF(mcur) {
                        (tile_h == TILE8 ? g->rows8 : g->rows)(kcur, TILE_A, wb, boff, j->win->row_off + pc, cp + ir * ldc, ldc, TILE_MR, nr2, flags, bias);
                    }
                    jr++;
                    continue;
                }
                if (win_direct) bp = sb; /* the odd last panel, packed */
                /* two panels read the same way (both in place, or both packed) */
                if (g->two && jr + 1 < (direct_b ? full : panels)) {
                    int64_t boff = direct_b ? NR : kcur * NR;
                    TILES_OF(mcur) {
                        (tile_h == TILE8 ? g->two8 : g->two)(kcur, TILE_A, bp, boff, bs, cp + ir * ldc, ldc, TILE_MR,
                                                             nr2, flags, bias);
                    }
                    jr++;
                    continue;
                }
                TILES_OF(mcur) {
                    (tile_h == TILE8 ? g->one8 : g->one)(kcur, TILE_A, bp, 0, bs, cp + ir * ldc, ldc, TILE_MR, nr,
                                                         flags, bias);
                }
#undef TILES_OF
#undef TILE_MR
#undef TILE_A
            }
        }
    }
    scratch_done(buf, floats);
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
        const int64_t th = tiles_of_eight(j->bld) ? TILE8 : MR;
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
    job.m = m, job.n = n, job.ldc = n, job.k = k, job.batch = batch, job.bld = build();
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
    job.m = m, job.n = n, job.ldc = ldc, job.k = k, job.batch = 1, job.bld = build();
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
    job.m = m, job.n = n, job.ldc = n, job.k = k, job.batch = batch, job.accumulate = accumulate, job.bld = build();
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
    return PyBool_FromLong(tiles_of_eight(build()));
}

/* plan(m, n, k, batch, threads) -> (column block, column blocks, row block, row blocks): the units. */
static PyObject *py_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "plan takes 5 arguments");
    int64_t a[5];
    if (!parse_ints(args, 0, 5, a)) return NULL;
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.m = a[0], job.n = a[1], job.k = a[2], job.batch = a[3], job.bld = build();
    plan(&job, (int)a[4]);
    return Py_BuildValue("(LLLL)", (long long)job.nbw, (long long)job.nnb, (long long)job.mbh, (long long)job.nmb);
}

static PyMethodDef methods[] = {
    {"gemm", FC(py_gemm), "out = (out if accumulate else 0) + a @ b (+ bias): f32, 2-D or batched, any strides."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2+FMA and AVX-512 builds (else the baseline one)."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 build (two panels at once)."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 build is used."},
    {"set_tile8", py_set_tile8, METH_O, "Use (True) or not 8-row tiles with the AVX-512 build (else 6-row ones)."},
    {"tile8", py_tile8, METH_NOARGS, "Whether products are cut into 8-row tiles (AVX-512 on and tile8 set)."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2+FMA or AVX-512 build is used."},
    {"set_split_min", py_set_split_min, METH_O, "Smallest product (multiply-adds) split across threads."},
    {"split_min", py_split_min, METH_NOARGS, "Smallest product (multiply-adds) split across threads."},
    {"plan", FC(py_plan), "The work units of a product at a thread count."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_gemm", "tallow's f32 matrix product kernel.", -1, methods};

PyMODINIT_FUNC PyInit__gemm(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    scratch_init();
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
