/* The kernels of _gemm.c, written once.  _gemm.c includes this file once per instruction
 * set (_vec_builds.h); the micro-kernels carry FUSED and CONTRACT_ON: acc + a * b is one
 * fused multiply-add where the build has FMA.  It fills K(build), the build's entry in
 * _gemm.c's table.
 *
 * Bits: an output element is the same chain in every build, acc = acc + a * b over k in
 * order from 0, then (C +) acc (+ bias); the builds with FMA round each step once, the
 * baseline build twice (it has no FMA), so those two kinds differ and builds of one
 * kind agree.  Which tile, panel or thread computes an element does not enter it. */

#include "_vec_body.h"

#define NV (NR / VW) /* vectors per panel row */

/* C = (flags & F_LOAD ? C : 0) + acc (+ bias), on mr of a tile's `rows` rows and nr of its
 * columns (`panels` panels; acc row by row, panels * NV vectors a row).  A part tile
 * goes under lane masks with AVX-512 (through a buffer, float by float, it cost a
 * 10-column layer's product more than its FMAs) and through a buffer elsewhere. */
INLINE void K(store_tile)(const VF *acc, int rows, int panels, float *c, int64_t ldc, int mr, int nr, int flags,
                          const float *bias) {
    const int w = panels * NV;
    if (mr == rows && nr == panels * NR) {
        for (int i = 0; i < rows; i++)
            for (int v = 0; v < w; v++) {
                float *cv = c + i * ldc + v * VW;
                VF x = acc[i * w + v];
                if (flags & F_LOAD) x = K(load)(cv) + x;
                if (flags & F_BIAS) x = x + K(load)(bias + v * VW);
                K(store)(cv, x);
            }
        return;
    }
#if VW == 16
    for (int v = 0; v < w; v++) {
        const unsigned m = K(lanes)(0, nr - v * VW);
        const VF bv = flags & F_BIAS ? K(load_masked)((VF){0}, bias + v * VW, m) : (VF){0};
        for (int i = 0; i < mr; i++) {
            float *cv = c + i * ldc + v * VW;
            VF x = acc[i * w + v];
            if (flags & F_LOAD) x = K(load_masked)((VF){0}, cv, m) + x;
            if (flags & F_BIAS) x = x + bv;
            K(store_masked)(cv, x, m);
        }
    }
#else
    float t[TILE8 * 2 * NR];
    memcpy(t, acc, (size_t)rows * w * sizeof(VF));
    store_tile_w(t, panels * NR, c, ldc, mr, nr, flags, bias);
#endif
}

/* ROWS rows x PANELS 16-column panels of C over kc steps, in ROWS * PANELS * NV vector
 * accumulators: per step, the panels' row of B loaded (the second panel boff floats after
 * the first), each A value broadcast and multiplied into them.  Rows past mr re-read row 0
 * (not stored).  B's row p is at BROW: b + p * bs, or b + off[p] (the _rows kernels: a
 * convolution's windows read in place, tallow_windows). */
#define G_KERNEL(NAME, ROWS, PANELS, BARG, BROW)                                                                  \
    TARGET FUSED static void K(NAME)(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *b,           \
                                     int64_t boff, BARG, float *c, int64_t ldc, int mr, int nr, int flags,         \
                                     const float *bias) {                                                          \
        CONTRACT_ON                                                                                                \
        const float *ar[ROWS];                                                                                     \
        VF acc[ROWS * PANELS * NV];                                                                                \
        _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) ar[i] = a + (mr > i ? i * rs : 0);                  \
        _Pragma("GCC unroll 32") for (int i = 0; i < ROWS * PANELS * NV; i++) acc[i] = (VF){0};                    \
        int64_t o = 0;                                                                                             \
        _Pragma("GCC unroll 4") for (int64_t p = 0; p < kc; p++) {                                                 \
            const float *bp = BROW;                                                                                \
            VF bv[PANELS * NV];                                                                                    \
            _Pragma("GCC unroll 8") for (int v = 0; v < PANELS * NV; v++)                                          \
                bv[v] = K(load)(bp + (v / NV) * boff + (v % NV) * VW);                                             \
            _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) {                                               \
                const float t = ar[i][o];                                                                          \
                _Pragma("GCC unroll 8") for (int v = 0; v < PANELS * NV; v++) acc[i * PANELS * NV + v] += t * bv[v]; \
            }                                                                                                      \
            o += cs;                                                                                               \
        }                                                                                                          \
        K(store_tile)(acc, ROWS, PANELS, c, ldc, mr, nr, flags, bias);                                             \
    }

/* A full panel of a column-major B (each column contiguous along k: a Linear layer's
 * weight, transposed) into dst, k-major: VW x VW blocks through registers (the rows'
 * constant stride keeps the stores' addresses in registers). Returns the rows done (a
 * multiple of VW); the caller copies the rest. */
TARGET static int64_t K(pack_cols)(const float *src, int64_t cs, int64_t kc, float *dst) {
    int64_t p = 0;
    for (; p + VW <= kc; p += VW)
        for (int g = 0; g < NV; g++) {
            VF r[VW];
            for (int i = 0; i < VW; i++) r[i] = K(load)(src + (g * VW + i) * cs + p);
            K(transpose)(r);
            for (int i = 0; i < VW; i++) K(store)(dst + (p + i) * NR + g * VW, r[i]);
        }
    return p;
}

G_KERNEL(one, MR, 1, int64_t bs, b + p * bs)
#if VW == NR
/* Where a panel row is one vector (AVX-512), tiles two panels wide, 6 and 8 rows high
 * (12 and 16 of the 32 registers): a multiple of 8 rows (64-512 channels, a batch of 64)
 * leaves no tile part-empty (eight_rows), where 6-row tiles computed 66 rows for 64. */
G_KERNEL(one8, TILE8, 1, int64_t bs, b + p * bs)
G_KERNEL(two, MR, 2, int64_t bs, b + p * bs)
G_KERNEL(two8, TILE8, 2, int64_t bs, b + p * bs)
G_KERNEL(rows, MR, 2, const int64_t *off, b + off[p])
G_KERNEL(rows8, TILE8, 2, const int64_t *off, b + off[p])

/* pack_b_windows' panels, a panel's row of 16 as one vector: each run loaded into its
 * lanes under a mask, one store (as float-by-float copies, runs of 8 or 12 floats, 8x8 or
 * 28x28 outputs, cost more than building the columns). */
TARGET static void K(pack_windows)(const tallow_windows *w, int64_t pc, int64_t kc, int64_t panels,
                                   const int8_t *runs, int8_t dof[][NR], int8_t n[][NR], int64_t sof[][NR],
                                   float *dst) {
    unsigned mask[WIN_PANELS][NR];
    for (int64_t q = 0; q < panels; q++)
        for (int r = 0; r < runs[q]; r++) mask[q][r] = K(lanes)(dof[q][r], n[q][r]);
    for (int64_t p = 0; p < kc; p++) {
        const float *row = w->base + w->row_off[pc + p];
        for (int64_t q = 0; q < panels; q++) {
            VF v = {0};
            for (int r = 0; r < runs[q]; r++) v = K(load_masked)(v, row + sof[q][r] - dof[q][r], mask[q][r]);
            K(store)(dst + q * kc * NR + p * NR, v);
        }
    }
}

/* pack_b_windows_t on 16 positions x 16 windows at a time: each window's 16 positions
 * loaded under masks (position_runs), the block transposed in registers, 16 stores. */
TARGET static void K(pack_windows_t)(const tallow_windows *w, int64_t pc, int64_t kc, int64_t j0, int64_t nc,
                                     float *dst) {
    const int64_t panels = (nc + NR - 1) / NR;
    int8_t dof[NR], n[NR];
    int64_t sof[NR];
    unsigned mask[NR];
    for (int64_t pa = 0; pa < kc; pa += NR) {
        const int64_t m = kc - pa < NR ? kc - pa : NR;
        const int runs = position_runs(w, pc + pa, m, dof, sof, n);
        for (int r = 0; r < runs; r++) mask[r] = K(lanes)(dof[r], n[r]);
        for (int64_t q = 0; q < panels; q++) {
            VF v[NR];
            for (int l = 0; l < NR; l++) {
                v[l] = (VF){0};
                if (q * NR + l >= nc) continue;
                const float *win = w->base + w->row_off[j0 + q * NR + l];
                for (int r = 0; r < runs; r++) v[l] = K(load_masked)(v[l], win + sof[r] - dof[r], mask[r]);
            }
            K(transpose)(v);
            for (int i = 0; i < m; i++) K(store)(dst + q * kc * NR + (pa + i) * NR, v[i]);
        }
    }
}
#endif

TARGET static void K(thin)(const gemm_job *j, const float *A, const float *B, float *C, int64_t i0, int64_t i1) {
    thin_dots(j, A, B, C, i0, i1);
}

#if VW == NR
static const gemm_build K(build) = {K(one), K(one8), K(two), K(two8), K(rows), K(rows8),
                                    K(pack_cols), K(pack_windows), K(pack_windows_t), K(thin)};
#else
static const gemm_build K(build) = {K(one), NULL, NULL, NULL, NULL, NULL, K(pack_cols), NULL, NULL, K(thin)};
#endif

#undef NV
#undef G_KERNEL
