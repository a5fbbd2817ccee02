/* Stride-2 3x3 convolutions (padding 1, dilation 1) of f32 NCHW images in 3/4 of the
 * multiply-adds: the middle kernel column as a product of its own, the outer two by
 * Winograd F(4, 2) along the rows.
 *
 * Output pixel (i, j) reads padded input columns 2j, 2j + 1 and 2j + 2. The middle
 * one (kernel column 1) is the image's even column 2j: a product over the 3 * c_in
 * rows (channel, kernel row) of "middle planes", each kernel row's columns one run of
 * oh * ow floats (the stride-2 tap planes of conv_images, for one kernel column). The
 * outer two (kernel columns 0 and 2) read the image's odd columns only: P_m = x[2m - 1]
 * (P_0 the padding's zero), y_j = g0 P_j + g2 P_(j+1), a 2-tap correlation, which
 * F(4, 2) computes 4 outputs at a time from 5 inputs d_u = P_(4t+u) in 5 products
 * instead of 8 (Lavin & Gray, 2015; interpolation points 0, 1, -1, 2 and infinity):
 *
 *   U = G g,  G   = [[1/2, 0], [-1/2, -1/2], [-1/6, 1/6], [1/6, 1/3], [0, 1]]
 *   V = B^T d, B^T = [[2, -1, -2, 1, 0], [0, -2, -1, 1, 0], [0, 2, -3, 1, 0],
 *                     [0, -1, 0, 1, 0], [0, 2, -1, -2, 1]]
 *   y = A^T M, A^T = [[1, 1, 1, 1, 0], [0, 1, -1, 2, 0], [0, 1, 1, 4, 0], [0, 1, -1, 8, 1]]
 *
 * with M[xi] = U[xi] (c_out, 3 c_in) @ V[xi] (3 c_in, oh * tw): five products of tw =
 * ceil(ow / 4) columns per output row. Per output: 3 + 3 * 5 / 4 = 6.75 multiply-adds
 * per channel pair instead of 9. (The 2-D form, F(4x4, 2x2) on the odd rows too, needs
 * 5.06, but four sub-convolutions of 1 to 25 positions.)
 *
 * Each image's planes are built once per thread (`conv_s2`): for each channel, each
 * image row the kernel reads (odd rows and the padding row -1 first, then even rows,
 * so that each kernel row's windows are one run) is split into its even pixels (the
 * middle plane's row) and odd pixels (a row of the tiles' inputs), then the odd rows'
 * tiles transformed, 16 tiles a vector. The six products read their planes in place
 * (tallow_windows, one run per window), then the output transform adds the outer
 * columns' outputs to the middle one's.
 *
 * Rounding: the transforms only add and subtract (B^T's -3 d2 comes as (d3 - d2) +
 * 2 (d1 - d2), and doubling is exact, as A^T's 2, 4 and 8 scalings), in one fixed
 * order in every build, and U is computed once per call (in any build: halvings and
 * correctly rounded divisions by 6): the same bits at any thread count and
 * instruction set.
 * Relative errors against a float64 reference are a few times the direct sum's
 * (about 1e-6 of the output's scale), as Winograd F(4, 3)'s.
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
static int use_avx512 = 0;

#define XI 5    /* F(4, 2)'s positions */
#define SLABS 6 /* the kernel's: the middle column's taps, then U[0..4] */

typedef struct {
    int64_t nb, nc, co, h, w, oh, ow, tw;
    int64_t groups;          /* units per image: blocks of output channels */
    const float *x, *u;      /* u (SLABS, co, 3 nc) */
    float *y;
    const int64_t *mid_off;  /* each product row's (channel, kernel row) run in the middle planes */
    const int64_t *tile_off; /* ... and in a position's tile planes */
    const uint16_t *inner;   /* per 16 tiles of a channel: the lanes whose tile does not start a row */
    _Atomic int *failed;
    _Atomic int *nonfinite;  /* an output block held an infinity or a NaN */
} s2_job;

/* Rows of a channel's planes: odd image rows -1, 1, ..., 2 oh - 1 (oh + 1), then even
 * rows 0, 2, ..., 2 oh - 2 (oh). Kernel row 0 reads rows 2i - 1 (the first oh), row 2
 * rows 2i + 1 (from the second), row 1 rows 2i (the even ones). */
static inline int64_t plane_rows(const s2_job *s) { return 2 * s->oh + 1; }
static inline int64_t image_row(const s2_job *s, int64_t rho) {
    return rho <= s->oh ? 2 * rho - 1 : 2 * (rho - s->oh - 1);
}
static inline int64_t window_row(const s2_job *s, int64_t ki) { return ki == 0 ? 0 : ki == 2 ? 1 : s->oh + 1; }

/* An image's scratch: the middle planes, the tile planes (XI of them), one channel's odd
 * pixels, the products' outputs for a block of channels. Each plane set ends with the
 * TALLOW_READ_PAST floats a last part-panel reads past its run. */
static inline int64_t mid_floats(const s2_job *s) { return s->nc * plane_rows(s) * s->ow + TALLOW_READ_PAST; }
static inline int64_t tile_plane_floats(const s2_job *s) { return s->nc * plane_rows(s) * s->tw; }
static inline int64_t tiles_floats(const s2_job *s) { return XI * tile_plane_floats(s) + TALLOW_READ_PAST; }
static inline int64_t odd_floats(const s2_job *s) { return plane_rows(s) * 4 * s->tw + 64; }
static inline int64_t block_rows(const s2_job *s) { return (s->co + s->groups - 1) / s->groups + 8; }
static inline int64_t out_floats(const s2_job *s) { return XI * block_rows(s) * s->oh * s->tw; }
static inline int64_t wide_floats(const s2_job *s) { return 4 * s->oh * s->tw + 64; }

/* The first output channel of block i of an image's `groups` (whole tiles of 8 rows). */
static inline int64_t channel_block(const s2_job *s, int64_t i) {
    if (i >= s->groups) return s->co;
    const int64_t tiles = (s->co + 7) / 8;
    return 8 * (tiles * i / s->groups);
}

/* ------------------------------------------------------------------ the transforms */
/* V = B^T d and y = A^T m in one order of adds (see above): every build computes these. */
#define TILE_INPUTS(d0, d1, d2, d3, d4, ADD, SUB, v)                                              \
    do {                                                                                          \
        const __typeof__(d0) a_ = SUB(d0, d2), b_ = SUB(d1, d3), e_ = SUB(d3, d2), f_ = SUB(d1, d2); \
        v[0] = ADD(ADD(a_, a_), SUB(d3, d1));                                                     \
        v[1] = SUB(e_, ADD(d1, d1));                                                              \
        v[2] = ADD(e_, ADD(f_, f_));                                                              \
        v[3] = SUB(d3, d1);                                                                       \
        v[4] = ADD(ADD(b_, b_), SUB(d4, d2));                                                     \
    } while (0)
#define TILE_OUTPUTS(m, ADD, SUB, MUL, y)                                                         \
    do {                                                                                          \
        const __typeof__(m[0]) s_ = ADD(m[1], m[2]), df_ = SUB(m[1], m[2]);                       \
        y[0] = ADD(ADD(m[0], s_), m[3]);                                                          \
        y[1] = ADD(df_, MUL(m[3], 2.0f));                                                         \
        y[2] = ADD(s_, MUL(m[3], 4.0f));                                                          \
        y[3] = ADD(ADD(df_, MUL(m[3], 8.0f)), m[4]);                                              \
    } while (0)
#define S_ADD(a, b) ((a) + (b))
#define S_SUB(a, b) ((a) - (b))
#define S_MUL(a, b) ((a) * (b))

/* U (SLABS, co, 3 nc) of k (co, nc, 3, 3): row o, column 3 c + ki; slab 0 the middle
 * column's taps, slabs 1..5 G (g0, g2) of the outer ones. Kernel row r = o * 3 nc + 3 c
 * + ki (of n = co * 3 nc) has its three taps at k[3 r + 0, 1, 2] and its slab values at
 * u[s * n + r]. */
#define KERNEL_SLABS(NAME, ATTR)                                                                  \
    static ATTR void NAME(const float *k, float *u, int64_t n, int64_t r0, int64_t r1) {          \
        float *q = u, *u0 = u + n, *u1 = u + 2 * n, *u2 = u + 3 * n, *u3 = u + 4 * n, *u4 = u + 5 * n; \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const float g0 = k[3 * r], g1 = k[3 * r + 1], g2 = k[3 * r + 2];                      \
            q[r] = g1;                                                                            \
            u0[r] = 0.5f * g0;                                                                    \
            u1[r] = -0.5f * (g0 + g2);                                                            \
            u2[r] = (g2 - g0) / 6.0f;                                                             \
            u3[r] = (g0 + (g2 + g2)) / 6.0f;                                                      \
            u4[r] = g2;                                                                           \
        }                                                                                         \
    }
KERNEL_SLABS(kernel_slabs_base, )
#ifdef TALLOW_X86
KERNEL_SLABS(kernel_slabs_avx2, AVX2)

/* kernel_slabs 16 kernel rows at a time: their 48 taps are 3 vectors, each tap's 16
 * picked by two permutes (the compiler's own loop took 10 cycles a row). */
static AVX512F void kernel_slabs_zmm(const float *k, float *u, int64_t n, int64_t r0, int64_t r1) {
    __m512i lo[3], hi[3];
    for (int t = 0; t < 3; t++) {
        int a[16], b[16];
        for (int l = 0; l < 16; l++) {
            const int i = 3 * l + t; /* tap t of row l: float i of the 48 */
            a[l] = i < 32 ? i : 0;   /* from the first two vectors */
            b[l] = i < 32 ? l : 16 + i - 32; /* then the third's over the rest */
        }
        lo[t] = _mm512_loadu_si512(a), hi[t] = _mm512_loadu_si512(b);
    }
    const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f), six = _mm512_set1_ps(6.0f);
    int64_t r = r0;
    for (; r + 16 <= r1; r += 16) {
        const __m512 a = _mm512_loadu_ps(k + 3 * r), b = _mm512_loadu_ps(k + 3 * r + 16), c = _mm512_loadu_ps(k + 3 * r + 32);
        __m512 g[3];
        for (int t = 0; t < 3; t++) g[t] = _mm512_permutex2var_ps(_mm512_permutex2var_ps(a, lo[t], b), hi[t], c);
        _mm512_storeu_ps(u + r, g[1]);
        _mm512_storeu_ps(u + n + r, _mm512_mul_ps(half, g[0]));
        _mm512_storeu_ps(u + 2 * n + r, _mm512_mul_ps(mhalf, _mm512_add_ps(g[0], g[2])));
        _mm512_storeu_ps(u + 3 * n + r, _mm512_div_ps(_mm512_sub_ps(g[2], g[0]), six));
        _mm512_storeu_ps(u + 4 * n + r, _mm512_div_ps(_mm512_add_ps(g[0], _mm512_add_ps(g[2], g[2])), six));
        _mm512_storeu_ps(u + 5 * n + r, g[2]);
    }
    kernel_slabs_base(k, u, n, r, r1); /* (the last rows, in the same operations) */
}
#endif

/* The kernel's slabs over the pool, SLAB_ROWS kernel rows a unit (a 512x512 kernel's
 * took 0.2 ms on one thread: a single image's whole product at 16x16). */
#define SLAB_ROWS 4096
typedef struct {
    const float *k;
    float *u;
    int64_t n;
} slabs_job;

static void slabs_task(void *p, int64_t lo, int64_t hi) {
    const slabs_job *j = (const slabs_job *)p;
    const int64_t r0 = lo * SLAB_ROWS, r1 = hi * SLAB_ROWS < j->n ? hi * SLAB_ROWS : j->n;
#ifdef TALLOW_X86
    if (use_avx2 && use_avx512) return kernel_slabs_zmm(j->k, j->u, j->n, r0, r1);
    if (use_avx2) return kernel_slabs_avx2(j->k, j->u, j->n, r0, r1);
#endif
    kernel_slabs_base(j->k, j->u, j->n, r0, r1);
}

/* ------------------------------------------------------------------ planes: the baseline */
/* Image b's middle planes into mid and tile planes into t, through odd (a channel's odd
 * pixels, rows 4 tw wide). */
#define IMAGE_PLANES(NAME, ATTR)                                                                  \
    static ATTR void NAME(const s2_job *s, int64_t b, float *mid, float *t, float *odd) {         \
        const int64_t rows = plane_rows(s), ow = s->ow, tw = s->tw, w = s->w, hw = s->h * s->w;  \
        const int64_t tp = tile_plane_floats(s);                                                  \
        for (int64_t c = 0; c < s->nc; c++) {                                                     \
            const float *xc = s->x + (b * s->nc + c) * hw;                                        \
            for (int64_t rho = 0; rho < rows; rho++) {                                            \
                const int64_t r = image_row(s, rho);                                              \
                float *m = mid + (c * rows + rho) * ow, *o = odd + rho * 4 * tw;                  \
                if (r < 0 || r >= s->h) {                                                         \
                    memset(m, 0, (size_t)ow * sizeof(float));                                     \
                    memset(o, 0, (size_t)(4 * tw) * sizeof(float));                               \
                    continue;                                                                     \
                }                                                                                 \
                const float *src = xc + r * w;                                                    \
                for (int64_t j = 0; j < ow; j++) m[j] = src[2 * j];                               \
                for (int64_t j = 0; j < 4 * tw; j++) o[j] = 2 * j + 1 < w ? src[2 * j + 1] : 0.0f; \
            }                                                                                     \
            for (int64_t rho = 0; rho < rows; rho++) {                                            \
                const float *o = odd + rho * 4 * tw;                                              \
                float *dst = t + (c * rows + rho) * tw;                                           \
                for (int64_t q = 0; q < tw; q++) {                                                \
                    float v[XI];                                                                  \
                    const float d0 = q > 0 ? o[4 * q - 1] : 0.0f;                                 \
                    TILE_INPUTS(d0, o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3], S_ADD, S_SUB, v); \
                    for (int xi = 0; xi < XI; xi++) dst[xi * tp + q] = v[xi];                     \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }
IMAGE_PLANES(image_planes_base, )
#ifdef TALLOW_X86
IMAGE_PLANES(image_planes_avx2, AVX2)
#endif

/* Output channels [o0, o1) of image b: y (the middle column's product, there already)
 * plus A^T of the products m (XI, o1 - o0, oh * tw). */
#define IMAGE_OUTPUTS(NAME, ATTR)                                                                 \
    static ATTR void NAME(const s2_job *s, const float *m, int64_t b, int64_t o0, int64_t o1, float *unused) { \
        (void)unused;                                                                             \
        const int64_t ow = s->ow, tw = s->tw, nt = s->oh * tw, ms = (o1 - o0) * nt;              \
        for (int64_t o = o0; o < o1; o++) {                                                       \
            float *y = s->y + (b * s->co + o) * s->oh * ow;                                       \
            const float *mo = m + (o - o0) * nt;                                                  \
            for (int64_t n = 0; n < nt; n++) {                                                    \
                const int64_t i = n / tw, q = n % tw;                                             \
                float mv[XI], yv[4];                                                              \
                for (int xi = 0; xi < XI; xi++) mv[xi] = mo[xi * ms + n];                         \
                TILE_OUTPUTS(mv, S_ADD, S_SUB, S_MUL, yv);                                        \
                for (int64_t u = 0; u < 4 && 4 * q + u < ow; u++) y[i * ow + 4 * q + u] += yv[u]; \
            }                                                                                     \
        }                                                                                         \
    }
IMAGE_OUTPUTS(image_outputs_base, )
#ifdef TALLOW_X86
IMAGE_OUTPUTS(image_outputs_avx2, AVX2)
#endif

/* ------------------------------------------------------------------ planes: AVX-512 */
#ifdef TALLOW_X86
#define Z_ADD(a, b) _mm512_add_ps(a, b)
#define Z_SUB(a, b) _mm512_sub_ps(a, b)
#define Z_MUL(a, b) _mm512_mul_ps(a, _mm512_set1_ps(b))


/* The permutes that pick value u of each of 16 tiles of 4 floats out of two vector
 * pairs (lanes 0-7 from the first pair, 8-15 from the second). */
static AVX512F inline void tile_picks(__m512i pick[4]) {
    for (int u = 0; u < 4; u++) {
        int idx[16];
        for (int l = 0; l < 16; l++) idx[l] = (4 * l + u) & 31;
        pick[u] = _mm512_loadu_si512(idx);
    }
}

/* image_planes with each image row split by row_phases (16 output columns a pair of
 * loads) and the tiles transformed 16 at a time: the odd pixels of 16 tiles are 4
 * vectors, picked apart by permutes into d1..d4 (d_(u+1) of tile n is odd pixel 4n + u
 * of the channel's rows), d0 the tile before's d4 (zero where a tile starts a row). */
static AVX512F void image_planes_zmm(const s2_job *s, int64_t b, float *mid, float *t, float *odd) {
    const int64_t rows = plane_rows(s), ow = s->ow, tw = s->tw, w = s->w, hw = s->h * s->w;
    const int64_t tp = tile_plane_floats(s), tiles = rows * tw, wide = 4 * tw;
    __m512i pick[4];
    tile_picks(pick);
    memset(odd + rows * wide, 0, 64 * sizeof(float)); /* (read by a last part-group) */
    for (int64_t c = 0; c < s->nc; c++) {
        const float *xc = s->x + (b * s->nc + c) * hw;
        for (int64_t rho = 0; rho < rows; rho++) {
            const int64_t r = image_row(s, rho);
            float *m = mid + (c * rows + rho) * ow, *o = odd + rho * wide;
            const int in = r >= 0 && r < s->h;
            for (int64_t j = 0; j < wide; j += 16) {
                __m512 e = _mm512_setzero_ps(), od = e;
                if (in) row_phases(xc + r * w, 2 * j, w, &e, &od);
                if (j < ow) _mm512_mask_storeu_ps(m + j, first_lanes(ow - j), e);
                _mm512_mask_storeu_ps(o + j, first_lanes(wide - j), od);
            }
        }
        float *dst = t + c * tiles;
        __m512 prev = _mm512_setzero_ps();
        for (int64_t n0 = 0; n0 < tiles; n0 += 16) {
            const float *src = odd + 4 * n0;
            const __m512 a = _mm512_loadu_ps(src), bb = _mm512_loadu_ps(src + 16);
            const __m512 cc = _mm512_loadu_ps(src + 32), dd = _mm512_loadu_ps(src + 48);
            __m512 d[5], v[XI];
            for (int u = 0; u < 4; u++)
                d[u + 1] = _mm512_mask_blend_ps(0xFF00, _mm512_permutex2var_ps(a, pick[u], bb),
                                                _mm512_permutex2var_ps(cc, pick[u], dd));
            d[0] = _mm512_castsi512_ps(_mm512_maskz_alignr_epi32(
                s->inner[n0 / 16], _mm512_castps_si512(d[4]), _mm512_castps_si512(prev), 15));
            prev = d[4];
            TILE_INPUTS(d[0], d[1], d[2], d[3], d[4], Z_ADD, Z_SUB, v);
            const __mmask16 k = first_lanes(tiles - n0);
            for (int xi = 0; xi < XI; xi++) _mm512_mask_storeu_ps(dst + xi * tp + n0, k, v[xi]);
        }
    }
}

/* image_outputs 16 tiles at a time: their outputs are 64 floats in a row of whole
 * tiles (4 tw wide), their 4 vectors interleaved by permutes. Where ow = 4 tw those rows
 * are the output's, added in place; else they are made in `wide` (4 oh tw floats and 64
 * more) and each output row's first ow added from there. */
static AVX512F void image_outputs_zmm(const s2_job *s, const float *m, int64_t b, int64_t o0, int64_t o1, float *wide) {
    const int64_t nt = s->oh * s->tw, ms = (o1 - o0) * nt, ow = s->ow, whole = 4 * s->tw;
    const int in_place = ow == whole;
    int lo[16], hi[16], c4[16], d4[16];
    for (int l = 0; l < 16; l++) {
        lo[l] = (l % 2 ? 16 : 0) + l / 2, hi[l] = lo[l] + 8;
        c4[l] = (l % 4 < 2 ? 0 : 16) + 2 * (l / 4) + l % 2, d4[l] = c4[l] + 8;
    }
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    const __m512i ic = _mm512_loadu_si512(c4), id = _mm512_loadu_si512(d4);
    for (int64_t o = o0; o < o1; o++) {
        float *y = s->y + (b * s->co + o) * s->oh * s->ow;
        const float *mo = m + (o - o0) * nt;
        for (int64_t n0 = 0; n0 < nt; n0 += 16) {
            const int64_t left = nt - n0;
            const __mmask16 k = first_lanes(left);
            __m512 mv[XI], yv[4], out[4];
            for (int xi = 0; xi < XI; xi++) mv[xi] = _mm512_maskz_loadu_ps(k, mo + xi * ms + n0);
            TILE_OUTPUTS(mv, Z_ADD, Z_SUB, Z_MUL, yv);
            const __m512 s0 = _mm512_permutex2var_ps(yv[0], ilo, yv[1]), s1 = _mm512_permutex2var_ps(yv[0], ihi, yv[1]);
            const __m512 s2 = _mm512_permutex2var_ps(yv[2], ilo, yv[3]), s3 = _mm512_permutex2var_ps(yv[2], ihi, yv[3]);
            out[0] = _mm512_permutex2var_ps(s0, ic, s2), out[1] = _mm512_permutex2var_ps(s0, id, s2);
            out[2] = _mm512_permutex2var_ps(s1, ic, s3), out[3] = _mm512_permutex2var_ps(s1, id, s3);
            float *yp = (in_place ? y : wide) + 4 * n0;
            for (int q = 0; q < 4; q++) {
                const int64_t floats = 4 * left - 16 * q;
                if (floats <= 0) break;
                const __mmask16 kq = first_lanes(floats);
                if (in_place)
                    _mm512_mask_storeu_ps(yp + 16 * q, kq, _mm512_add_ps(_mm512_maskz_loadu_ps(kq, yp + 16 * q), out[q]));
                else
                    _mm512_storeu_ps(yp + 16 * q, out[q]);
            }
        }
        for (int64_t i = 0; !in_place && i < s->oh; i++)
            for (int64_t j = 0; j < ow; j += 16) {
                const __mmask16 k = first_lanes(ow - j);
                float *yp = y + i * ow + j;
                _mm512_mask_storeu_ps(yp, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, yp), _mm512_maskz_loadu_ps(k, wide + i * whole + j)));
            }
    }
}
#endif

/* ------------------------------------------------------------------ the task */
typedef void (*planes_fn)(const s2_job *, int64_t, float *, float *, float *);
typedef void (*outputs_fn)(const s2_job *, const float *, int64_t, int64_t, int64_t, float *);

static void builds(planes_fn *planes, outputs_fn *outputs) {
    *planes = image_planes_base, *outputs = image_outputs_base;
#ifdef TALLOW_X86
    if (use_avx2) *planes = image_planes_avx2, *outputs = image_outputs_avx2;
    if (use_avx2 && use_avx512) {
        *planes = image_planes_zmm, *outputs = image_outputs_zmm;
    }
#endif
}

/* Whether n floats are finite (in the build's instructions). */
static int floats_finite(const float *x, int64_t n) {
#ifdef TALLOW_X86
    if (use_avx2) return all_finite_avx2(x, n);
#endif
    return all_finite(x, n);
}

/* Units [lo, hi): unit u is image u / groups, its block u % groups of output channels. */
static void s2_task(void *p, int64_t lo, int64_t hi) {
    const s2_job *s = (const s2_job *)p;
    const int64_t K = 3 * s->nc, pos = s->oh * s->ow, nt = s->oh * s->tw;
    const int64_t mf = mid_floats(s), tf = tiles_floats(s), of = odd_floats(s);
    const size_t floats = (size_t)(mf + tf + of + out_floats(s) + wide_floats(s));
    float *mid = scratch_get(floats);
    if (!mid) {
        atomic_store(s->failed, 1);
        return;
    }
    float *tiles = mid + mf, *odd = tiles + tf, *m = odd + of, *wide = m + out_floats(s);
    /* (the last part-panels' reads past the planes: zeros, never stored) */
    memset(mid + mf - TALLOW_READ_PAST, 0, TALLOW_READ_PAST * sizeof(float));
    memset(tiles + tf - TALLOW_READ_PAST, 0, TALLOW_READ_PAST * sizeof(float));
    planes_fn planes;
    outputs_fn outputs;
    builds(&planes, &outputs);
    const tallow_windows wmid = {mid, s->mid_off, pos, pos, 0, 1, 1};
    int64_t made = -1;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / s->groups, o0 = channel_block(s, u % s->groups), o1 = channel_block(s, u % s->groups + 1);
        if (o0 >= o1) continue;
        if (made != b) planes(s, b, mid, tiles, odd);
        made = b;
        const int64_t rows = o1 - o0;
        int ok = tallow_gemm->product_windows(s->u + o0 * K, K, 1, &wmid, s->y + (b * s->co + o0) * pos, pos, rows,
                                              pos, K, 0);
        for (int xi = 0; ok && xi < XI; xi++) {
            const tallow_windows wt = {tiles + xi * tile_plane_floats(s), s->tile_off, nt, nt, 0, 1, 1};
            ok = tallow_gemm->product_windows(s->u + ((1 + xi) * s->co + o0) * K, K, 1, &wt, m + xi * rows * nt, nt,
                                              rows, nt, K, 0);
        }
        if (!ok) {
            atomic_store(s->failed, 1);
            break;
        }
        outputs(s, m, b, o0, o1, wide);
        /* (checked here, in the cache: the transforms spread a non-finite value) */
        if (!floats_finite(s->y + (b * s->co + o0) * pos, rows * pos)) atomic_store(s->nonfinite, 1);
    }
    scratch_done(mid, floats);
}

/* ------------------------------------------------------------------ the kernel gradient */
/* The forward is linear in the middle taps and in U, so with dY the output gradient:
 * the middle column's gradient is dY (c_out, oh * ow) @ the middle planes' windows^T,
 * and U's is dU[xi] = W[xi] (c_out, oh * tw) @ V[xi]^T with W = A dY per tile (the
 * adjoint of the output transform: W0 = dy0, W1 = dy0 + dy1 + dy2 + dy3, W2 = dy0 - dy1
 * + dy2 - dy3, W3 = dy0 + 2 dy1 + 4 dy2 + 8 dy3, W4 = dy3, outputs past ow read as
 * zeros); then (g0, g2) = G^T dU. Six products of the planes the forward builds, summed
 * over the images of a part of the batch (the parts' count follows the batch alone),
 * the parts added in order: the same bits at any thread count. */
#define TILE_GRADS(y0, y1, y2, y3, ADD, SUB, MUL, w)                                              \
    do {                                                                                          \
        w[0] = y0;                                                                                \
        w[1] = ADD(ADD(y0, y1), ADD(y2, y3));                                                     \
        w[2] = SUB(ADD(y0, y2), ADD(y1, y3));                                                     \
        w[3] = ADD(ADD(y0, MUL(y1, 2.0f)), ADD(MUL(y2, 4.0f), MUL(y3, 8.0f)));                    \
        w[4] = y3;                                                                                \
    } while (0)

/* W (XI, co, oh * tw) of one image's output gradient dy (co, oh, ow). */
#define IMAGE_GRADS(NAME, ATTR)                                                                   \
    static ATTR void NAME(const s2_job *s, const float *dy, float *wt) {                          \
        const int64_t ow = s->ow, tw = s->tw, nt = s->oh * tw, ws = s->co * nt;                  \
        for (int64_t o = 0; o < s->co; o++)                                                       \
            for (int64_t n = 0; n < nt; n++) {                                                    \
                const int64_t i = n / tw, q = n % tw;                                             \
                const float *row = dy + (o * s->oh + i) * ow;                                     \
                float d[4], w[XI];                                                                \
                for (int u = 0; u < 4; u++) d[u] = 4 * q + u < ow ? row[4 * q + u] : 0.0f;        \
                TILE_GRADS(d[0], d[1], d[2], d[3], S_ADD, S_SUB, S_MUL, w);                       \
                for (int xi = 0; xi < XI; xi++) wt[xi * ws + o * nt + n] = w[xi];                 \
            }                                                                                     \
    }
IMAGE_GRADS(image_grads_base, )
#ifdef TALLOW_X86
IMAGE_GRADS(image_grads_avx2, AVX2)

/* image_grads 16 tiles at a time where every tile is 4 whole outputs (ow = 4 tw): the
 * 16 tiles' gradients are 64 floats in a row, picked apart into dy0..dy3 by permutes
 * (as the planes' odd pixels are). */
static AVX512F void image_grads_zmm(const s2_job *s, const float *dy, float *wt) {
    const int64_t nt = s->oh * s->tw, ws = s->co * nt;
    __m512i pick[4];
    tile_picks(pick);
    for (int64_t o = 0; o < s->co; o++) {
        const float *src = dy + o * nt * 4;
        float *dst = wt + o * nt;
        for (int64_t n0 = 0; n0 < nt; n0 += 16) {
            const int64_t left = 4 * (nt - n0);
            __m512 v[4], d[4], w[XI];
            for (int q = 0; q < 4; q++) v[q] = _mm512_maskz_loadu_ps(first_lanes(left - 16 * q), src + 4 * n0 + 16 * q);
            for (int u = 0; u < 4; u++)
                d[u] = _mm512_mask_blend_ps(0xFF00, _mm512_permutex2var_ps(v[0], pick[u], v[1]),
                                            _mm512_permutex2var_ps(v[2], pick[u], v[3]));
            TILE_GRADS(d[0], d[1], d[2], d[3], Z_ADD, Z_SUB, Z_MUL, w);
            const __mmask16 k = first_lanes(nt - n0);
            for (int xi = 0; xi < XI; xi++) _mm512_mask_storeu_ps(dst + xi * ws + n0, k, w[xi]);
        }
    }
}
#endif

typedef struct {
    s2_job s;
    const float *dy; /* (nb, co, oh, ow) */
    float *du;       /* (parts, SLABS, co, 3 nc) */
    int64_t parts;
} kgrad_job;

/* Part p: images [p * nb / parts, (p + 1) * nb / parts) summed into du[p] (each image's
 * input and output gradient checked first, in the cache: a non-finite one stops it). */
static void kgrad_task(void *p, int64_t lo, int64_t hi) {
    const kgrad_job *kj = (const kgrad_job *)p;
    const s2_job *s = &kj->s;
    const int64_t K = 3 * s->nc, pos = s->oh * s->ow, nt = s->oh * s->tw;
    const int64_t mf = mid_floats(s), tf = tiles_floats(s), of = odd_floats(s);
    const size_t floats = (size_t)(mf + tf + of + XI * s->co * nt);
    float *mid = scratch_get(floats);
    if (!mid) {
        atomic_store(s->failed, 1);
        return;
    }
    float *tiles = mid + mf, *odd = tiles + tf, *wt = odd + of;
    planes_fn planes;
    outputs_fn unused;
    builds(&planes, &unused);
    void (*grads)(const s2_job *, const float *, float *) = image_grads_base;
#ifdef TALLOW_X86
    if (use_avx2) grads = use_avx512 && s->ow == 4 * s->tw ? image_grads_zmm : image_grads_avx2;
#endif
    const tallow_windows wmid = {mid, s->mid_off, pos, pos, 1, 0, 0};
    for (int64_t part = lo; part < hi && !atomic_load(s->nonfinite); part++) {
        float *du = kj->du + part * SLABS * s->co * K;
        const int64_t b0 = part * s->nb / kj->parts, b1 = (part + 1) * s->nb / kj->parts;
        int ok = 1;
        for (int64_t b = b0; ok && b < b1; b++) {
            const float *dy = kj->dy + b * s->co * pos, *xb = s->x + b * s->nc * s->h * s->w;
            if (!floats_finite(xb, s->nc * s->h * s->w) || !floats_finite(dy, s->co * pos)) {
                atomic_store(s->nonfinite, 1);
                break;
            }
            planes(s, b, mid, tiles, odd);
            grads(s, dy, wt);
            ok = tallow_gemm->product_windows(dy, pos, 1, &wmid, du, K, s->co, K, pos, b > b0);
            for (int xi = 0; ok && xi < XI; xi++) {
                const tallow_windows wt_ = {tiles + xi * tile_plane_floats(s), s->tile_off, nt, nt, 1, 0, 0};
                ok = tallow_gemm->product_windows(wt + xi * s->co * nt, nt, 1, &wt_, du + (1 + xi) * s->co * K, K,
                                                  s->co, K, nt, b > b0);
            }
        }
        if (!ok) {
            atomic_store(s->failed, 1);
            break;
        }
    }
    scratch_done(mid, floats);
}

/* Kernel rows [r0, r1) of dk (co, nc, 3, 3): du's parts added in order (slab by slab),
 * then the middle taps as they are and the outer ones G^T dU, in one order. */
#define KERNEL_FROM_SLABS(NAME, ATTR)                                                             \
    static ATTR void NAME(float *du, int64_t parts, float *dk, int64_t n, int64_t r0, int64_t r1) { \
        for (int slab = 0; slab < SLABS; slab++) {                                                \
            float *sum = du + slab * n;                                                           \
            for (int64_t p = 1; p < parts; p++) {                                                 \
                const float *add = du + (p * SLABS + slab) * n;                                   \
                for (int64_t r = r0; r < r1; r++) sum[r] += add[r];                               \
            }                                                                                     \
        }                                                                                         \
        const float *q = du, *d0 = du + n, *d1 = du + 2 * n, *d2 = du + 3 * n, *d3 = du + 4 * n;  \
        const float *d4 = du + 5 * n;                                                             \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const float sixths = (d3[r] - d2[r]) / 6.0f;                                          \
            dk[3 * r] = 0.5f * (d0[r] - d1[r]) + sixths;                                          \
            dk[3 * r + 1] = q[r];                                                                 \
            dk[3 * r + 2] = ((d2[r] + (d3[r] + d3[r])) / 6.0f - 0.5f * d1[r]) + d4[r];            \
        }                                                                                         \
    }
KERNEL_FROM_SLABS(kernel_from_slabs_base, )
#ifdef TALLOW_X86
KERNEL_FROM_SLABS(kernel_from_slabs_avx2, AVX2)
KERNEL_FROM_SLABS(kernel_from_slabs_zmm, AVX512F)
#endif

typedef struct {
    float *du, *dk;
    int64_t parts, n;
} from_slabs_job;

static void from_slabs_task(void *p, int64_t lo, int64_t hi) {
    const from_slabs_job *j = (const from_slabs_job *)p;
    const int64_t r0 = lo * SLAB_ROWS, r1 = hi * SLAB_ROWS < j->n ? hi * SLAB_ROWS : j->n;
#ifdef TALLOW_X86
    if (use_avx2 && use_avx512) return kernel_from_slabs_zmm(j->du, j->parts, j->dk, j->n, r0, r1);
    if (use_avx2) return kernel_from_slabs_avx2(j->du, j->parts, j->dk, j->n, r0, r1);
#endif
    kernel_from_slabs_base(j->du, j->parts, j->dk, j->n, r0, r1);
}

/* ------------------------------------------------------------------ Python */
/* The sizes of a call (args[first ..]: nb, nc, co, h, w, then `groups` when asked)
 * checked into s, and its tables: each product row's runs (off: the middle planes', then
 * the tile planes') and the row starts among each 16 tiles (inner). 0 with an
 * exception set (PyMem_Free both either way). */
static int s2_setup(const char *name, PyObject *const *args, Py_ssize_t first, int with_groups, s2_job *s,
                    int64_t **off, uint16_t **inner) {
    int64_t a[6] = {0, 0, 0, 0, 0, 1};
    const int count = with_groups ? 6 : 5;
    *off = NULL, *inner = NULL;
    if (!parse_ints(args, first, count, a)) return 0;
    memset(s, 0, sizeof *s);
    s->nb = a[0], s->nc = a[1], s->co = a[2], s->h = a[3], s->w = a[4], s->groups = a[5];
    for (int i = 0; i < 6; i++)
        if (a[i] < 1 || a[i] > ((int64_t)1 << 31)) return PyErr_Format(PyExc_ValueError, "%s: bad size", name), 0;
    if (s->groups > (s->co + 7) / 8)
        return PyErr_Format(PyExc_ValueError, "%s: more groups than blocks of 8 channels", name), 0;
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "%s: the product module is missing", name), 0;
    s->oh = (s->h + 1) / 2, s->ow = (s->w + 1) / 2, s->tw = (s->ow + 3) / 4;
    const int64_t K = 3 * s->nc, rows = plane_rows(s), groups_of_16 = (rows * s->tw + 15) / 16;
    *off = (int64_t *)PyMem_Malloc((size_t)(2 * K) * sizeof(int64_t));
    *inner = (uint16_t *)PyMem_Malloc((size_t)groups_of_16 * sizeof(uint16_t));
    if (!*off || !*inner) return PyErr_NoMemory(), 0;
    for (int64_t c = 0; c < s->nc; c++)
        for (int64_t ki = 0; ki < 3; ki++) {
            (*off)[3 * c + ki] = (c * rows + window_row(s, ki)) * s->ow;
            (*off)[K + 3 * c + ki] = (c * rows + window_row(s, ki)) * s->tw;
        }
    for (int64_t g = 0; g < groups_of_16; g++) {
        uint16_t bits = 0;
        for (int l = 0; l < 16; l++)
            if ((16 * g + l) % s->tw) bits |= (uint16_t)(1u << l);
        (*inner)[g] = bits;
    }
    s->mid_off = *off, s->tile_off = *off + K, s->inner = *inner;
    return 1;
}

/* conv_s2(x, k, y, nb, nc, co, h, w, groups): x (nb, nc, h, w) convolved with k (co, nc, 3,
 * 3) at stride 2 under padding 1 into y (nb, co, oh, ow), oh = (h + 1) // 2 and ow = (w
 * + 1) // 2; each image's output channels in `groups` blocks (whole tiles of 8), one
 * pool unit each. Returns whether every output is finite (a non-finite input spreads
 * through the transforms: the caller takes another path). */
static PyObject *py_conv_s2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "conv_s2 takes 9 arguments");
    s2_job s;
    int64_t *off;
    uint16_t *inner;
    const int ready = s2_setup("conv_s2", args, 3, 1, &s, &off, &inner);
    const int64_t kfloats = s.co * 3 * s.nc;
    float *u = ready ? (float *)PyMem_Malloc((size_t)(SLABS * kfloats) * sizeof(float)) : NULL;
    if (!u) {
        PyMem_Free(off), PyMem_Free(inner);
        return ready ? PyErr_NoMemory() : NULL;
    }
    const int64_t x_floats = s.nb * s.nc * s.h * s.w, y_floats = s.nb * s.co * s.oh * s.ow;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    _Atomic int failed = 0, nonfinite = 0;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "x") && get_buf(args[1], &b[1], 0, kfloats * 3 * 4, "k") &&
        get_buf(args[2], &b[2], 1, y_floats * 4, "y")) {
        s.x = (const float *)b[0].view.buf, s.y = (float *)b[2].view.buf, s.u = u;
        s.failed = &failed, s.nonfinite = &nonfinite;
        const float *k = (const float *)b[1].view.buf;
        Py_BEGIN_ALLOW_THREADS
        slabs_job sj = {k, u, kfloats};
        tallow_pool_run(slabs_task, &sj, (kfloats + SLAB_ROWS - 1) / SLAB_ROWS, 1, (3 + SLABS) * kfloats * 4);
        tallow_pool_run(s2_task, &s, s.nb * s.groups, 1, (x_floats + y_floats + SLABS * kfloats) * 4);
        Py_END_ALLOW_THREADS
        res = atomic_load(&failed) ? PyErr_NoMemory() : PyBool_FromLong(!atomic_load(&nonfinite));
    }
    release(b, 3);
    PyMem_Free(u), PyMem_Free(off), PyMem_Free(inner);
    return res;
}

/* kernel_grad_s2(x, dy, du, dk, nb, nc, co, h, w, parts): the kernel gradient dk (co, nc, 3,
 * 3) of conv_s2 from x (nb, nc, h, w) and the output gradient dy (nb, co, oh, ow), the
 * batch summed in `parts` parts (1 to nb; each one pool unit, into du (parts, 6, co,
 * 3 nc), then added in order). Returns False, dk untouched, when x or dy holds an
 * infinity or a NaN (the transforms would spread it: the caller takes another path). */
static PyObject *py_kernel_grad_s2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) return PyErr_Format(PyExc_TypeError, "kernel_grad_s2 takes 10 arguments");
    kgrad_job kj;
    int64_t *off;
    uint16_t *inner;
    if (!s2_setup("kernel_grad_s2", args, 4, 0, &kj.s, &off, &inner) || !parse_ints(args, 9, 1, &kj.parts)) {
        PyMem_Free(off), PyMem_Free(inner);
        return NULL;
    }
    s2_job *s = &kj.s;
    if (kj.parts < 1 || kj.parts > s->nb) {
        PyMem_Free(off), PyMem_Free(inner);
        return PyErr_Format(PyExc_ValueError, "kernel_grad_s2: parts must be 1 to the batch");
    }
    const int64_t kfloats = s->co * 3 * s->nc;
    const int64_t x_floats = s->nb * s->nc * s->h * s->w, y_floats = s->nb * s->co * s->oh * s->ow;
    buf_t b[4];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    _Atomic int failed = 0;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "x") && get_buf(args[1], &b[1], 0, y_floats * 4, "dy") &&
        get_buf(args[2], &b[2], 1, kj.parts * SLABS * kfloats * 4, "du") &&
        get_buf(args[3], &b[3], 1, kfloats * 3 * 4, "dk")) {
        s->x = (const float *)b[0].view.buf, kj.dy = (const float *)b[1].view.buf, kj.du = (float *)b[2].view.buf;
        s->failed = &failed;
        _Atomic int nonfinite = 0;
        s->nonfinite = &nonfinite;
        from_slabs_job fj = {kj.du, (float *)b[3].view.buf, kj.parts, kfloats};
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(kgrad_task, &kj, kj.parts, 1, -1);
        if (!atomic_load(&failed) && !atomic_load(&nonfinite))
            tallow_pool_run(from_slabs_task, &fj, (kfloats + SLAB_ROWS - 1) / SLAB_ROWS, 1,
                            (kj.parts * SLABS + 3) * kfloats * 4);
        Py_END_ALLOW_THREADS
        res = atomic_load(&failed) ? PyErr_NoMemory() : PyBool_FromLong(!atomic_load(&nonfinite));
    }
    release(b, 4);
    PyMem_Free(off), PyMem_Free(inner);
    return res;
}

TALLOW_SIMD_SWITCH(use_avx2)
TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

#define FC(name) (PyCFunction)(void (*)(void))name, METH_FASTCALL
static PyMethodDef methods[] = {
    {"conv_s2", FC(py_conv_s2), "A stride-2 3x3 convolution under padding 1: the middle column's product and F(4, 2)."},
    {"kernel_grad_s2", FC(py_kernel_grad_s2), "conv_s2's kernel gradient: the same planes, summed over parts of the batch."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 build."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 build is used."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 build."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 build is used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_winograd_s2",
                                       "Stride-2 3x3 convolutions with Winograd F(4, 2) along the rows.", -1, methods};

PyMODINIT_FUNC PyInit__winograd_s2(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    scratch_init();
    tallow_pool_import();
    tallow_gemm_import();
    return PyModule_Create(&moduledef);
}
