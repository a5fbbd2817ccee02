/* Compiled convolution and pooling passes on contiguous f32 NCHW arrays, split over
 * tallow's worker pool (_workers.h):
 *
 *  - im2col / col2im with the padding, stride and dilation handled in the gather
 *    (no padded copy of the images, no padded output to crop; strided windows go
 *    through the image's phase planes): units are image planes (b, c), so every
 *    unit writes its own columns or its own output plane;
 *  - a direct convolution for layers whose columns would be short (a first layer's
 *    1-16 input channels): no column matrix at all, each output row computed from
 *    the input rows it reads, which a chunk copies once per image into zero-padded
 *    scratch rows (one per stride phase); units are output rows (b, y);
 *  - the direct kernel gradient of the same layers; units are input-row taps;
 *  - max / average pooling forward and backward; units are planes.
 *
 * Every unit is computed by one thread in a fixed order, and units never write the
 * same memory, so results are bit-identical at any thread count.  The pool splits a
 * task only when it is worth it (pool_worth: size and the machine's load).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "_gemm.h"
#include "_workers.h"

static int use_avx2 = 0;
static int use_avx512 = 0; /* the flat direct convolution's 16-lane blocks (set_avx512) */

/* ------------------------------------------------------------------ geometry */
/* A convolution window walk: images nc x h x w, an oh x ow grid of windows of
 * kh x kw taps, strides, padding and dilation. */
typedef struct {
    int64_t nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} geom_t;

/* For tap column kj: the output columns [*j0, *j1) whose input column is inside the image. */
static inline void valid_cols(const geom_t *g, int64_t kj, int64_t *j0, int64_t *j1) {
    int64_t off = g->pw - kj * g->dw; /* input column of output column j: j*sw - off */
    int64_t lo = off > 0 ? (off + g->sw - 1) / g->sw : 0;
    int64_t top = g->w - 1 + off; /* j*sw <= top */
    int64_t hi = top < 0 ? 0 : top / g->sw + 1;
    if (lo > g->ow) lo = g->ow;
    if (hi > g->ow) hi = g->ow;
    if (hi < lo) hi = lo;
    *j0 = lo;
    *j1 = hi;
}

static int parse_geom(PyObject *const *args, Py_ssize_t start, geom_t *g) {
    int64_t a[14];
    if (!parse_ints(args, start, 14, a)) return 0;
    geom_t t = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]};
    for (int i = 0; i < 14; i++)
        if (a[i] < 0 || (i >= 4 && i <= 7 && a[i] < 1) || (i >= 10 && i <= 11 && a[i] < 1)) {
            PyErr_SetString(PyExc_ValueError, "conv geometry: bad sizes");
            return 0;
        }
    *g = t;
    return 1;
}

/* ------------------------------------------------------------------ im2col / col2im */
/* Columns: cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*ow + j] = x[b, c, i*sh - ph + ki*dh,
 * j*sw - pw + kj*dw], zero outside the image.  sb, sr: the strides of an image and a row,
 * so that (b, rows, pos) and (rows, b, pos) layouts come from the same pass. */
typedef struct {
    geom_t g;
    float *x, *cols; /* col2im: x is the output, cols the input */
    int64_t sb, sr;
    _Atomic int *failed; /* set when a chunk could not allocate its phase planes */
} cols_job;

/* Strided windows (sh or sw > 1) read and write the image through its phase planes:
 * phase (py, px) holds pixels (m * sh + py, n * sw + px), so a tap's columns, which
 * step sh rows and sw columns through the image, are runs of one phase plane.  The
 * image is split into phases once (im2col) or merged from them once (col2im), and
 * every tap's copy or add is unit-stride: per-element strided gathers and scatter-adds
 * took 25-35% of a stride-2 layer's time. */
static inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Phase-plane geometry: hp x wp pixels each, sh * sw planes. */
static inline int64_t phase_rows(const geom_t *g) { return (g->h + g->sh - 1) / g->sh; }
static inline int64_t phase_cols(const geom_t *g) { return (g->w + g->sw - 1) / g->sw; }
static inline int64_t phase_floats(const geom_t *g) { return g->sh * g->sw * phase_rows(g) * phase_cols(g); }

/* A tap's row and column offsets in phase planes: image row i * sh - ph + ki * dh is
 * phase row (i + qy) of phase py. */
static inline void tap_phase(int64_t k, int64_t d, int64_t pad, int64_t s, int64_t *q, int64_t *ph) {
    *q = floor_div(k * d - pad, s);
    *ph = k * d - pad - *q * s;
}

/* im2col's phase planes carry zero margins: `top` rows and `left` columns before each
 * plane's pixels and enough after them that every tap's window, rows i + qy and
 * columns j + qx for i < oh and j < ow, lies inside the plane. A tap's row of columns
 * is then one copy of ow floats, the padding read as zeros: no bounds per row, no
 * zeroed prefix and suffix, no scalar remainder of a 15-float row. */
typedef struct {
    int64_t top, left, rows, cols;
} margins_t;

static inline void phase_margins(const geom_t *g, margins_t *m) {
    const int64_t q0y = floor_div(-g->ph, g->sh), q1y = floor_div((g->kh - 1) * g->dh - g->ph, g->sh);
    const int64_t q0x = floor_div(-g->pw, g->sw), q1x = floor_div((g->kw - 1) * g->dw - g->pw, g->sw);
    const int64_t hp = phase_rows(g), wp = phase_cols(g), need_r = g->oh + q1y, need_c = g->ow + q1x;
    m->top = q0y < 0 ? -q0y : 0;
    m->left = q0x < 0 ? -q0x : 0;
    m->rows = m->top + (need_r > hp ? need_r : hp);
    m->cols = m->left + (need_c > wp ? need_c : wp);
}

static inline int64_t padded_phase_floats(const geom_t *g) {
    margins_t m;
    phase_margins(g, &m);
    return g->sh * g->sw * m.rows * m.cols;
}

#ifdef TALLOW_X86
/* n zeros at d, a masked store per 16 (margins of a float or two: a memset call each
 * cost as much as the row's copy) */
static AVX512F inline void zero_run(float *d, int64_t n) {
    for (; n >= 16; n -= 16, d += 16) _mm512_storeu_ps(d, _mm512_setzero_ps());
    if (n > 0) _mm512_mask_storeu_ps(d, first_lanes(n), _mm512_setzero_ps());
}

/* split_phases for two column phases: each image row's even and odd pixels into the
 * two planes of its row phase in one pass, 32 pixels a pair of zmm registers (the
 * plain loops, a plane at a time, read every row twice a float apart: a stride-2
 * layer's 32x32 images, 18% of its forward). */
static AVX512F void split_phases_w2(const geom_t *g, const margins_t *mg, const float *x, float *P) {
    const int64_t hp = phase_rows(g), sh = g->sh, h = g->h, w = g->w;
    const int64_t rows = mg->rows, cols = mg->cols, top = mg->top, left = mg->left, plane = rows * cols;
    const int64_t n0 = (w + 1) / 2, n1 = w / 2; /* even and odd pixels of a row */
    for (int64_t py = 0; py < sh; py++)
        for (int64_t pr = 0; pr < rows; pr++) {
            float *d0 = P + 2 * py * plane + pr * cols, *d1 = d0 + plane;
            const int64_t m = pr - top, r = m * sh + py;
            if (m < 0 || m >= hp || r >= h) {
                zero_run(d0, cols);
                zero_run(d1, cols);
                continue;
            }
            zero_run(d0, left);
            zero_run(d1, left);
            const float *src = x + r * w;
            int64_t n = 0;
            for (; 2 * n + 32 <= w; n += 16) {
                __m512 e, o;
                row_phases(src, 2 * n, w, &e, &o);
                _mm512_storeu_ps(d0 + left + n, e);
                _mm512_storeu_ps(d1 + left + n, o);
            }
            for (int64_t c = 2 * n; c < w; c++) (c & 1 ? d1 : d0)[left + c / 2] = src[c];
            zero_run(d0 + left + n0, cols - left - n0);
            zero_run(d1 + left + n1, cols - left - n1);
        }
}
#endif

/* The image's phase planes with their zero margins (phase_margins) into P (the sizes
 * in locals, not reloaded after each store). */
static inline __attribute__((always_inline)) void split_phases(const geom_t *g, const margins_t *mg, const float *x,
                                                                float *P) {
    const int64_t hp = phase_rows(g), sh = g->sh, sw = g->sw, h = g->h, w = g->w;
    const int64_t rows = mg->rows, cols = mg->cols, top = mg->top, left = mg->left;
#ifdef TALLOW_X86
    if (sw == 2 && use_avx512 && use_avx2) {
        split_phases_w2(g, mg, x, P);
        return;
    }
#endif
    for (int64_t py = 0; py < sh; py++)
        for (int64_t px = 0; px < sw; px++) {
            float *plane = P + (py * sw + px) * rows * cols;
            const int64_t n1 = (w - px + sw - 1) / sw; /* columns inside the image */
            for (int64_t pr = 0; pr < rows; pr++) {
                float *dst = plane + pr * cols;
                const int64_t m = pr - top, r = m * sh + py;
                if (m < 0 || m >= hp || r >= h) {
                    memset(dst, 0, (size_t)cols * sizeof(float));
                    continue;
                }
                for (int64_t n = 0; n < left; n++) dst[n] = 0.0f;
                float *d = dst + left;
                const float *src = x + r * w + px;
                if (sw == 2) {
#pragma GCC ivdep
                    for (int64_t n = 0; n < n1; n++) d[n] = src[2 * n];
                } else {
                    for (int64_t n = 0; n < n1; n++) d[n] = src[n * sw];
                }
                for (int64_t n = left + n1; n < cols; n++) dst[n] = 0.0f;
            }
        }
}

static inline __attribute__((always_inline)) void merge_phases(const geom_t *g, const float *P, float *x) {
    const int64_t hp = phase_rows(g), wp = phase_cols(g);
    for (int64_t r = 0; r < g->h; r++) {
        int64_t py = r % g->sh, m = r / g->sh;
        float *dst = x + r * g->w;
        const float *row0 = P + ((py * g->sw) * hp + m) * wp;
        if (g->sw == 2) {
            const float *row1 = row0 + hp * wp;
            int64_t pairs = g->w / 2;
#pragma GCC ivdep
            for (int64_t n = 0; n < pairs; n++) {
                dst[2 * n] = row0[n];
                dst[2 * n + 1] = row1[n];
            }
            if (g->w & 1) dst[g->w - 1] = row0[pairs];
        } else {
            for (int64_t col = 0; col < g->w; col++) dst[col] = row0[(col % g->sw) * hp * wp + col / g->sw];
        }
    }
}

static inline __attribute__((always_inline)) void im2col_plane(const cols_job *jb, int64_t u, float *phases) {
    const geom_t *g = &jb->g;
    int64_t b = u / g->nc, c = u % g->nc;
    const float *src = jb->x + u * g->h * g->w;
    if (g->sh > 1 || g->sw > 1) { /* through the phase planes, margins included */
        margins_t mg;
        phase_margins(g, &mg);
        split_phases(g, &mg, src, phases);
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                float *dst = jb->cols + b * jb->sb + ((c * g->kh + ki) * g->kw + kj) * jb->sr;
                int64_t qy, py, qx, px;
                tap_phase(ki, g->dh, g->ph, g->sh, &qy, &py);
                tap_phase(kj, g->dw, g->pw, g->sw, &qx, &px);
                /* output (i, j) reads phase row i + qy, column j + qx (the sizes in locals:
                 * read through g inside the loop, they were reloaded after every store) */
                const float *row = phases + (py * g->sw + px) * mg.rows * mg.cols + (qy + mg.top) * mg.cols + qx + mg.left;
                const int64_t oh = g->oh, ow = g->ow, pitch = mg.cols;
                for (int64_t i = 0; i < oh; i++, dst += ow, row += pitch) {
#pragma GCC ivdep
                    for (int64_t j = 0; j < ow; j++) dst[j] = row[j]; /* short rows: inline, not memcpy */
                }
            }
        return;
    }
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
            float *dst = jb->cols + b * jb->sb + ((c * g->kh + ki) * g->kw + kj) * jb->sr;
            int64_t j0, j1;
            valid_cols(g, kj, &j0, &j1);
            for (int64_t i = 0; i < g->oh; i++, dst += g->ow) {
                int64_t r = i * g->sh - g->ph + ki * g->dh;
                if (r < 0 || r >= g->h) {
                    memset(dst, 0, (size_t)g->ow * sizeof(float));
                    continue;
                }
                const float *row = src + r * g->w + kj * g->dw - g->pw; /* column j of the window */
                for (int64_t j = 0; j < j0; j++) dst[j] = 0.0f;
#pragma GCC ivdep
                for (int64_t j = j0; j < j1; j++) dst[j] = row[j]; /* short rows: inline, not memcpy */
                for (int64_t j = j1; j < g->ow; j++) dst[j] = 0.0f;
            }
        }
}

/* The adjoint: x[b, c] = sum over taps of the columns that read each pixel, in the
 * order (ki, kj, i, j); each unit zeroes and fills its own output plane (or its phase
 * planes, merged into it at the end: the same sums in the same order). */
static inline __attribute__((always_inline)) void col2im_plane(const cols_job *jb, int64_t u, float *phases) {
    const geom_t *g = &jb->g;
    int64_t b = u / g->nc, c = u % g->nc;
    float *out = jb->x + u * g->h * g->w;
    const int strided = g->sh > 1 || g->sw > 1;
    const int64_t hp = phase_rows(g), wp = phase_cols(g);
    if (strided)
        memset(phases, 0, (size_t)phase_floats(g) * sizeof(float));
    else
        memset(out, 0, (size_t)(g->h * g->w) * sizeof(float));
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
            const float *src = jb->cols + b * jb->sb + ((c * g->kh + ki) * g->kw + kj) * jb->sr;
            int64_t j0, j1, qy, py, qx, px;
            valid_cols(g, kj, &j0, &j1);
            tap_phase(ki, g->dh, g->ph, g->sh, &qy, &py);
            tap_phase(kj, g->dw, g->pw, g->sw, &qx, &px);
            float *plane = strided ? phases + (py * g->sw + px) * hp * wp : out;
            for (int64_t i = 0; i < g->oh; i++, src += g->ow) {
                int64_t r = i * g->sh - g->ph + ki * g->dh;
                if (r < 0 || r >= g->h) continue;
                float *row = strided ? plane + (i + qy) * wp + qx : out + r * g->w + kj * g->dw - g->pw;
#pragma GCC ivdep
                for (int64_t j = j0; j < j1; j++) row[j] += src[j];
            }
        }
    if (strided) merge_phases(g, phases, out);
}

static inline int64_t cols_scratch_floats(const geom_t *g) {
    /* (im2col's planes with margins; col2im's, without, fit in the same room) */
    return g->sh > 1 || g->sw > 1 ? padded_phase_floats(g) : 0;
}

#define COLS_TASK(NAME, ATTR, per_plane)                                                          \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const cols_job *jb = (const cols_job *)p;                                                 \
        int64_t n = cols_scratch_floats(&jb->g);                                                  \
        float *phases = n ? (float *)malloc((size_t)n * sizeof(float)) : NULL;                    \
        if (n && !phases) {                                                                       \
            atomic_store(jb->failed, 1);                                                          \
            return;                                                                               \
        }                                                                                         \
        for (int64_t u = lo; u < hi; u++) per_plane(jb, u, phases);                               \
        free(phases);                                                                             \
    }
#define COLS_TASKS(SUFFIX, ATTR)                                                                  \
    COLS_TASK(im2col_task##SUFFIX, ATTR, im2col_plane)                                            \
    COLS_TASK(col2im_task##SUFFIX, ATTR, col2im_plane)

/* (no-tree-loop-distribute-patterns: the row copies stay loops; as memcpy calls, rows
 * of 8-32 floats spent more in the call than in the copy) */
#define NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
COLS_TASKS(_base, NO_MEMCPY_CALLS)
#ifdef TALLOW_X86
COLS_TASKS(_avx2, AVX2 NO_MEMCPY_CALLS)
#endif

/* conv_images(x, k, y, co, geometry[, units]): the im2col convolution an image at a
 * time, one chunk of units per task of the pool, `units` per image (each a block of
 * output channels, whole 6-row tiles: image_group): the image's zero-margined planes
 * in this thread's scratch, then its product k (co, rows) @ cols (rows, oh * ow) into
 * y[b] through the capsule of the f32 kernel, the columns packed straight from the
 * planes' windows (product_windows; set_windows(False): built first, as im2col does).
 * Gathering the whole batch's columns and then splitting the products over the
 * threads left each core reading columns the other one wrote, from a buffer past the
 * L2 cache.  Same sums, same bits, for any units and either way. */
typedef struct {
    geom_t g;
    const float *x, *k; /* conv_transpose_images (below): x, kernel^T */
    float *y;           /* conv_transpose_images: the output */
    int64_t ch;         /* the kernel's other channel count: c_out (conv_images), c_in (transposed) */
    const int64_t *row_off; /* conv_images with windows: each column row's window in an image's planes */
    int64_t groups;         /* conv_images: units per image, each a block of the output channels */
    int64_t flat;           /* conv_images: the product's columns in flat_windows, else 0 */
    int64_t taps;           /* conv_images: an image's tap planes' floats (tap_planes_floats), else 0 */
    _Atomic int *failed;
} images_job;

/* conv_images packs its products' columns straight from the image's zero-margined
 * (phase) planes (tallow_windows) instead of building them (set_windows). */
static int use_windows = 1;
static int use_flat = 1; /* the flat columns (flat_windows) where they apply (set_flat) */

/* Floats of one channel's planes with their margins (phase_margins; stride 1: one plane). */
static inline int64_t channel_planes_floats(const geom_t *g) { return padded_phase_floats(g); }

/* Each column row's window (r = (c * kh + ki) * kw + kj) in an image's planes: channel
 * c's planes one after another, the tap's phase plane, row qy and column qx of it
 * (phase_margins, as im2col_plane reads them); a new array (PyMem_Free), or NULL when
 * out of memory. */
static int64_t *window_offsets(const geom_t *g) {
    int64_t *off = (int64_t *)PyMem_Malloc((size_t)(g->nc * g->kh * g->kw) * sizeof(int64_t));
    if (!off) return NULL;
    margins_t mg;
    phase_margins(g, &mg);
    const int64_t per = channel_planes_floats(g), plane = mg.rows * mg.cols;
    for (int64_t c = 0, r = 0; c < g->nc; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++, r++) {
                int64_t qy, py, qx, px;
                tap_phase(ki, g->dh, g->ph, g->sh, &qy, &py);
                tap_phase(kj, g->dw, g->pw, g->sw, &qx, &px);
                off[r] = c * per + (py * g->sw + px) * plane + (qy + mg.top) * mg.cols + qx + mg.left;
            }
    return off;
}

/* Image b's planes, channel after channel (window_offsets' layout), into P. */
static inline __attribute__((always_inline)) void image_planes(const geom_t *g, const margins_t *mg, const float *x,
                                                                int64_t b, float *P) {
    const int64_t per = channel_planes_floats(g), hw = g->h * g->w;
    const float *xb = x + b * g->nc * hw;
    for (int64_t c = 0; c < g->nc; c++) split_phases(g, mg, xb + c * hw, P + c * per);
}

/* Whether an image's columns are the image itself: a 1x1 kernel, no padding, stride 1
 * over the whole image (rows = channels, positions = pixels). */
static inline int columns_are_image(const geom_t *g) {
    return g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0 && g->sh == 1 && g->sw == 1 &&
           g->oh == g->h && g->ow == g->w;
}

/* Image b's columns (rows, oh * ow) into cols, its phase planes (strided windows) in
 * the scratch after them (cols_scratch_floats). */
static inline __attribute__((always_inline)) void image_columns(const geom_t *g, const float *x, int64_t b,
                                                                 float *cols) {
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;
    cols_job jb;
    memset(&jb, 0, sizeof jb);
    jb.g = *g, jb.g.nb = 1, jb.cols = cols, jb.sb = 0, jb.sr = pos;
    jb.x = (float *)x + b * g->nc * g->h * g->w;
    for (int64_t c = 0; c < g->nc; c++) im2col_plane(&jb, c, cols + rows * pos);
}

/* Outputs narrower than a panel's 16 columns (a 7x7 or 14x14 image) make panels that
 * cut across output rows, which the product packs from the windows. Flat instead: the
 * product's column p = i * pitch + j (pitch: the planes' row length) reads every
 * window's row at base + row_off[r] + p, one run for the whole image, so that its
 * panels are read in place (kernel_avx512_rows), and the columns j >= ow are computed
 * into a scratch block and dropped. Each output is the same sum as from the packed
 * columns: the same bits. The columns (oh * pitch, rounded up to a panel) when AVX-512
 * reads them in place and they are at most 1.25x the packed product's (a 7x7 image's
 * 63 of 64 against 49 of 64; 10x10 and 14x14 ones 1.14x and 1.08x: their forward
 * 0.84-1.03x the packed product's time, a 512-channel 7x7 one 0.92-0.95x), else 0. */
static int64_t flat_windows(const geom_t *g) {
    margins_t mg;
    phase_margins(g, &mg);
    const int64_t flat = (g->oh * mg.cols + 15) / 16 * 16, packed = (g->oh * g->ow + 15) / 16 * 16;
    if (!(use_avx2 && use_avx512) || g->ow % 16 == 0 || flat * 4 > packed * 5 || flat > 512) return 0;
    return flat;
}

/* Strided layers' columns as tap planes, read in place: no phase planes, no packing.
 * For each channel, kernel column kj and row phase py (the rows i * sh + py that some
 * tap row reads), a plane of ow columns whose pixel (u, j) is the zero-padded image's
 * at row (u + q0) * sh + py and column j * sw - pw + kj * dw (q0: the phase's first
 * tap row offset, tap_phase). Tap (ki, kj)'s columns are then oh whole rows of its
 * plane: one run of oh * ow floats from row qy - q0, which the AVX-512 kernel reads
 * where it lies (kernel_avx512_8_rows, every 16-column panel part of that run), and the
 * taps of one phase share its plane's rows (a 3x3 kernel at stride 2: 6 rows of planes
 * per channel for 9 taps, 0.69x the columns' floats). Building them is a copy of each
 * image row per kernel column, stride-2 columns picked by a permute. Each output is
 * the same sum of the same products as from the packed columns: the same bits. The
 * stride-2 3x3 64->128 layer (batch 4 of 32x32), where the phase planes and the
 * packing were 11% of the forward: see docs/design.md. */
static int use_tap_planes = 1;

/* Rows of row phase py's planes and the first tap row offset q0 in them (0: no tap). */
static int64_t tap_phase_rows(const geom_t *g, int64_t py, int64_t *q0) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t q, p;
        tap_phase(ki, g->dh, g->ph, g->sh, &q, &p);
        if (p != py) continue;
        lo = q < lo ? q : lo;
        hi = q > hi ? q : hi;
    }
    *q0 = lo;
    return lo > hi ? 0 : g->oh + hi - lo;
}

/* Rows of a channel's planes for one kernel column (every row phase's). */
static int64_t tap_rows(const geom_t *g) {
    int64_t n = 0, q0;
    for (int64_t py = 0; py < g->sh; py++) n += tap_phase_rows(g, py, &q0);
    return n;
}

/* An image's tap planes, channel after channel, then the TALLOW_READ_PAST floats a last
 * part-panel reads past the last plane's end (zeros; their columns are never stored). */
static int64_t tap_planes_floats(const geom_t *g) { return g->nc * g->kw * tap_rows(g) * g->ow + TALLOW_READ_PAST; }

/* Whether conv_images reads a layer's columns from tap planes: strided windows, the
 * AVX-512 kernel (without it, panels are packed: the phase planes serve). */
static int tap_planes_apply(const geom_t *g) {
    return use_tap_planes && use_avx2 && use_avx512 && (g->sh > 1 || g->sw > 1);
}

/* Each column row's run in an image's tap planes (window_offsets' order); a new array
 * (PyMem_Free), or NULL when out of memory. */
static int64_t *tap_offsets(const geom_t *g) {
    int64_t *off = (int64_t *)PyMem_Malloc((size_t)(g->nc * g->kh * g->kw) * sizeof(int64_t));
    if (!off) return NULL;
    const int64_t rows = tap_rows(g), per = g->kw * rows * g->ow;
    for (int64_t c = 0, r = 0; c < g->nc; c++)
        for (int64_t ki = 0; ki < g->kh; ki++) {
            int64_t qy, py, q0, first = 0; /* the phase's first row among the rows */
            tap_phase(ki, g->dh, g->ph, g->sh, &qy, &py);
            for (int64_t p = 0; p < py; p++) first += tap_phase_rows(g, p, &q0);
            tap_phase_rows(g, py, &q0);
            for (int64_t kj = 0; kj < g->kw; kj++, r++)
                off[r] = c * per + (kj * rows + first + qy - q0) * g->ow;
        }
    return off;
}

#ifdef TALLOW_X86
/* Row u of every kernel column's plane from image row src (w pixels; outside it the
 * padding's zeros): dst[kj * plane + j] = pixel j * sw - pw + kj * dw, 16 columns a
 * store, read under masks (stride 2: two loads and a permute), the last stored under
 * a mask. (Copying the row into a zero-padded buffer first cost more than the rest:
 * every load straddled the buffer's two fresh stores, which do not forward.) */
static AVX512F void tap_row(const geom_t *g, const float *src, float *dst, int64_t plane) {
    const int64_t ow = g->ow, sw = g->sw, w = g->w;
    for (int64_t kj = 0; kj < g->kw; kj++, dst += plane) {
        for (int64_t j = 0; j < ow; j += 16) {
            const __mmask16 m = first_lanes(ow - j);
            const int64_t c0 = j * sw - g->pw + kj * g->dw; /* column of output column j */
            __m512 v;
            if (sw == 1) {
                const __mmask16 in = (__mmask16)inside_mask(c0, w);
                v = in == 0xFFFF ? _mm512_loadu_ps(src + c0) : _mm512_maskz_loadu_ps(in, src + c0);
            } else if (sw == 2) {
                __m512 odd;
                row_phases(src, c0, w, &v, &odd);
            } else {
                float t[16];
                for (int64_t i = 0; i < 16; i++) {
                    const int64_t c = c0 + i * sw;
                    t[i] = c >= 0 && c < w ? src[c] : 0.0f;
                }
                v = _mm512_loadu_ps(t);
            }
            if (m == 0xFFFF)
                _mm512_storeu_ps(dst + j, v);
            else
                _mm512_mask_storeu_ps(dst + j, m, v);
        }
    }
}

/* Whether every kernel column of a stride-2 layer reads its row phase at most one
 * column either side of the output's (tap_row_s2): 3x3 kernels under padding 0-2, 5x5
 * under 1-3. */
static int taps_near(const geom_t *g) {
    if (g->sw != 2) return 0;
    for (int64_t kj = 0; kj < g->kw; kj++) {
        const int64_t shift = floor_div(kj * g->dw - g->pw, 2);
        if (shift < -1 || shift > 1) return 0;
    }
    return 1;
}

/* tap_row at stride 2 where taps_near: each 16-column block's even and odd pixels
 * picked once from two loads, every kernel column's run that phase shifted by at most
 * one column (an align with the block before or after; zeros outside the row). One
 * load pair per block instead of one per kernel column: a stride-2 3x3 layer's planes
 * in half tap_row's time (18 us an image of 64x32x32, against 35). */
static AVX512F void tap_row_s2(const geom_t *g, const float *src, float *dst, int64_t plane) {
    const int64_t ow = g->ow, w = g->w;
    __m512 pe = _mm512_setzero_ps(), po = pe, ce, co, ne, no;
    row_phases(src, 0, w, &ce, &co);
    for (int64_t j = 0; j < ow; j += 16) {
        row_phases(src, 2 * (j + 16), w, &ne, &no); /* (past the row: zeros, read under masks) */
        const __mmask16 m = first_lanes(ow - j);
        float *d = dst + j;
        for (int64_t kj = 0; kj < g->kw; kj++, d += plane) {
            const int64_t off = kj * g->dw - g->pw, shift = floor_div(off, 2), odd = off - 2 * shift;
            const __m512 prev = odd ? po : pe, cur = odd ? co : ce, next = odd ? no : ne;
            const __m512 v = shift < 0 ? _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(cur), _mm512_castps_si512(prev), 15))
                             : shift > 0 ? _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(cur), 1))
                                         : cur;
            if (m == 0xFFFF)
                _mm512_storeu_ps(d, v);
            else
                _mm512_mask_storeu_ps(d, m, v);
        }
        pe = ce, po = co, ce = ne, co = no;
    }
}

/* Image b's tap planes into T (tap_planes_floats). */
static AVX512F void image_tap_planes(const geom_t *g, const float *x, int64_t b, float *T) {
    const int64_t rows = tap_rows(g), plane = rows * g->ow, hw = g->h * g->w;
    const int near = taps_near(g);
    for (int64_t c = 0; c < g->nc; c++) {
        const float *xc = x + (b * g->nc + c) * hw;
        float *Tc = T + c * g->kw * plane;
        for (int64_t py = 0, u0 = 0; py < g->sh; py++) {
            int64_t q0;
            const int64_t n = tap_phase_rows(g, py, &q0);
            for (int64_t u = 0; u < n; u++) {
                const int64_t r = (u + q0) * g->sh + py; /* the image row (or padding) */
                float *dst = Tc + (u0 + u) * g->ow;
                if (r < 0 || r >= g->h)
                    for (int64_t kj = 0; kj < g->kw; kj++) memset(dst + kj * plane, 0, (size_t)g->ow * sizeof(float));
                else if (near)
                    tap_row_s2(g, xc + r * g->w, dst, plane);
                else
                    tap_row(g, xc + r * g->w, dst, plane);
            }
            u0 += n;
        }
    }
    memset(T + g->nc * g->kw * plane, 0, TALLOW_READ_PAST * sizeof(float));
}
#endif

/* image_tap_planes where it is compiled (tap_planes_apply asks for AVX-512). */
static void tap_planes(const geom_t *g, const float *x, int64_t b, float *T) {
#ifdef TALLOW_X86
    image_tap_planes(g, x, b, T);
#else
    (void)g, (void)x, (void)b, (void)T;
#endif
}

/* The first of n rows in block i of `blocks` (i = blocks: n), on whole tiles of the
 * product's rows (image_group: an image's output channels): 8 with AVX-512 (a
 * 128-channel layer in two blocks of 64, not 66 and 62), else 6. Each element is the
 * same product's sum whichever block computes it: the same bits for any count. */
static inline int64_t tile_block(int64_t n, int64_t blocks, int64_t i) {
    if (i >= blocks) return n;
    const int64_t h = use_avx2 && use_avx512 ? 8 : 6, tiles = (n + h - 1) / h;
    return h * (tiles * i / blocks);
}
static inline int64_t image_group(const images_job *ij, int64_t gi) { return tile_block(ij->ch, ij->groups, gi); }

/* The first of n columns in block i of `blocks`, on whole pairs of the product's
 * 16-column panels (i = blocks: n). */
static inline int64_t pair_block(int64_t n, int64_t blocks, int64_t i) {
    if (i >= blocks) return n;
    const int64_t pairs = (n + 31) / 32;
    return 32 * (pairs * i / blocks);
}

#define IMAGES_TASK(NAME, ATTR)                                                                   \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const images_job *ij = (const images_job *)p;                                             \
        const geom_t *g = &ij->g;                                                                 \
        const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;                          \
        const int64_t ph = cols_scratch_floats(g);                                                \
        const int64_t planes = g->nc * channel_planes_floats(g), flat = ij->flat;                  \
        /* flat: the planes, the reads past the last one (zeros), the block's columns */         \
        const size_t floats = ij->taps ? (size_t)ij->taps                                        \
                              : !ij->row_off ? (size_t)(rows * pos + ph)                          \
                              : (size_t)(planes + (flat ? flat + ij->ch * flat : 0));             \
        float *cols = scratch_get(floats);                                                        \
        if (!cols) {                                                                              \
            atomic_store(ij->failed, 1);                                                          \
            return;                                                                               \
        }                                                                                         \
        margins_t mg;                                                                             \
        phase_margins(g, &mg);                                                                    \
        float *wide = cols + planes + flat;                                                       \
        if (flat) memset(cols + planes, 0, (size_t)flat * sizeof(float));                        \
        const tallow_windows win = {cols, ij->row_off, flat ? flat : g->ow, flat ? flat : mg.cols, 0, flat > 0, 0}; \
        const tallow_windows twin = {cols, ij->row_off, pos, pos, 0, 1, 1}; /* the tap planes' runs */ \
        int64_t made = -1; /* the image whose planes or columns are in the scratch */             \
        for (int64_t u = lo; u < hi; u++) {                                                       \
            const int64_t b = u / ij->groups, o0 = image_group(ij, u % ij->groups);              \
            const int64_t o1 = image_group(ij, u % ij->groups + 1);                               \
            if (o0 >= o1) continue;                                                               \
            float *y = ij->y + (b * ij->ch + o0) * pos;                                           \
            const float *k = ij->k + o0 * rows;                                                   \
            int ok;                                                                               \
            if (ij->taps) { /* the tap planes, read in place */                                   \
                if (made != b) tap_planes(g, ij->x, b, cols);                                     \
                ok = tallow_gemm->product_windows(k, rows, 1, &twin, y, pos, o1 - o0, pos, rows, 0); \
            } else if (ij->row_off && flat) { /* the product over the flat columns, then each row out */ \
                if (made != b) image_planes(g, &mg, ij->x, b, cols);                              \
                ok = tallow_gemm->product_windows(k, rows, 1, &win, wide, flat, o1 - o0, flat, rows, 0); \
                for (int64_t o = 0; ok && o < o1 - o0; o++)                                       \
                    for (int64_t i = 0; i < g->oh; i++)                                           \
                        memcpy(y + o * pos + i * g->ow, wide + o * flat + i * mg.cols,            \
                               (size_t)g->ow * sizeof(float));                                    \
            } else if (ij->row_off) { /* the planes, the product packed from their windows */    \
                if (made != b) image_planes(g, &mg, ij->x, b, cols);                              \
                ok = tallow_gemm->product_windows(k, rows, 1, &win, y, pos, o1 - o0, pos, rows, 0); \
            } else {                                                                              \
                if (made != b) image_columns(g, ij->x, b, cols);                                  \
                ok = tallow_gemm->product(k, 0, rows, 1, cols, 0, pos, 1, y, 1, o1 - o0, pos, rows, 0); \
            }                                                                                     \
            made = b;                                                                             \
            if (!ok) {                                                                            \
                atomic_store(ij->failed, 1);                                                      \
                break;                                                                            \
            }                                                                                     \
        }                                                                                         \
        scratch_done(cols, floats);                                                               \
    }
IMAGES_TASK(images_task_base, NO_MEMCPY_CALLS)
#ifdef TALLOW_X86
IMAGES_TASK(images_task_avx2, AVX2 NO_MEMCPY_CALLS)
#endif

/* conv_transpose_images(x, kt, out, ci, geometry): the transposed convolution an image
 * at a time, one chunk of images per task of the pool: image b's columns kt (rows, ci)
 * @ x[b] (ci, h * w) in this thread's scratch, then col2im of them into out[b] (each
 * output plane zeroed and summed in place). The batch's products first and then its
 * col2im wrote every image's columns out past the L2 cache (4.7 MB for a stride-2
 * 64->32 layer of 16 images) and read them back from there. The geometry is col2im's
 * (nc: output channels, h x w: the output, oh x ow: the input); rows = nc * kh * kw.
 * The same products and the same sums in the same order: the same bits. */
#define T_IMAGES_TASK(NAME, ATTR)                                                                 \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const images_job *tj = (const images_job *)p;                                             \
        const geom_t *g = &tj->g;                                                                 \
        const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;                          \
        const int64_t ph = cols_scratch_floats(g);                                                \
        const size_t floats = (size_t)(rows * pos + ph);                                          \
        float *cols = scratch_get(floats);                                                        \
        if (!cols) {                                                                              \
            atomic_store(tj->failed, 1);                                                          \
            return;                                                                               \
        }                                                                                         \
        cols_job jb;                                                                              \
        memset(&jb, 0, sizeof jb);                                                                \
        jb.g = *g, jb.g.nb = 1, jb.cols = cols, jb.sb = 0, jb.sr = pos;                           \
        for (int64_t b = lo; b < hi; b++) {                                                       \
            if (!tallow_gemm->product(tj->k, 0, tj->ch, 1, tj->x + b * tj->ch * pos, 0, pos, 1, cols, 1, rows, \
                                      pos, tj->ch, 0)) {                                          \
                atomic_store(tj->failed, 1);                                                      \
                break;                                                                            \
            }                                                                                     \
            jb.x = tj->y + b * g->nc * g->h * g->w;                                               \
            for (int64_t c = 0; c < g->nc; c++) col2im_plane(&jb, c, cols + rows * pos);          \
        }                                                                                         \
        scratch_done(cols, floats);                                                               \
    }
T_IMAGES_TASK(t_images_task_base, NO_MEMCPY_CALLS)
#ifdef TALLOW_X86
T_IMAGES_TASK(t_images_task_avx2, AVX2 NO_MEMCPY_CALLS)
#endif

/* conv_images(x, k, y, co, nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow[, units]): x (nb,
 * nc, h, w), k (co, nc * kh * kw), y (nb, co, oh, ow); and conv_transpose_images(x, kt,
 * out, ci, <col2im's geometry>): x (nb, ci, oh, ow), kt (nc * kh * kw, ci), out (nb, nc,
 * h, w). Both overwrite their output (zeros for an empty product). */
static PyObject *images_call(PyObject *const *args, Py_ssize_t nargs, int transposed) {
    const char *name = transposed ? "conv_transpose_images" : "conv_images";
    if (nargs != 18 && (transposed || nargs != 19))
        return PyErr_Format(PyExc_TypeError, transposed ? "%s takes 18 arguments" : "%s takes 18 or 19 arguments", name);
    images_job ij;
    ij.groups = 1;
    if (!parse_ints(args, 3, 1, &ij.ch) || !parse_geom(args, 4, &ij.g) || (nargs == 19 && !parse_ints(args, 18, 1, &ij.groups)))
        return NULL;
    if (ij.ch < 1) return PyErr_Format(PyExc_ValueError, "%s: bad channel count", name);
    if (ij.groups < 1 || ij.groups > ij.ch) return PyErr_Format(PyExc_ValueError, "%s: bad group count", name);
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "%s: the product module is missing", name);
    const geom_t *g = &ij.g;
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow, image = g->nc * g->h * g->w;
    const int64_t x_floats = g->nb * (transposed ? ij.ch * pos : image);
    const int64_t y_floats = g->nb * (transposed ? image : ij.ch * pos);
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "x") &&
        get_buf(args[1], &b[1], 0, ij.ch * rows * 4, transposed ? "kt" : "k") &&
        get_buf(args[2], &b[2], 1, y_floats * 4, transposed ? "out" : "y")) {
        ij.x = (const float *)b[0].view.buf, ij.k = (const float *)b[1].view.buf, ij.y = (float *)b[2].view.buf;
        ij.row_off = NULL;
        ij.flat = 0;
        int64_t *off = NULL;
        /* (without AVX-512, panels that cut the output rows are packed a float at a
         * time: slower than building the columns, 1.3x for 28-wide outputs) */
        const int windows = !transposed && use_windows && rows > 0 && ((use_avx2 && use_avx512) || g->ow % 16 == 0);
        ij.taps = windows && tap_planes_apply(g) ? tap_planes_floats(g) : 0;
        if (windows && !(ij.row_off = off = ij.taps ? tap_offsets(g) : window_offsets(g))) {
            release(b, 3);
            return PyErr_NoMemory();
        }
        if (windows && use_flat && !ij.taps) ij.flat = flat_windows(g);
        _Atomic int failed = 0;
        ij.failed = &failed;
        tallow_task_fn fn = transposed ? t_images_task_base : images_task_base;
#ifdef TALLOW_X86
        if (use_avx2) fn = transposed ? t_images_task_avx2 : images_task_avx2;
#endif
        Py_BEGIN_ALLOW_THREADS
        if (pos > 0 && rows > 0)
            tallow_pool_run(fn, &ij, g->nb * ij.groups, 1, (x_floats + y_floats + ij.ch * rows) * 4);
        else
            memset(ij.y, 0, (size_t)y_floats * sizeof(float));
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
        PyMem_Free(off);
    }
    release(b, 3);
    return res;
}

/* py_set_NAME(on) / py_NAME(): a module switch (a test or a bench compares both ways). */
#define MODULE_SWITCH(NAME, VAR)                                                                  \
    static PyObject *py_set_##NAME(PyObject *self, PyObject *arg) {                               \
        (void)self;                                                                               \
        int on = PyObject_IsTrue(arg);                                                            \
        if (on < 0) return NULL;                                                                  \
        VAR = on;                                                                                 \
        Py_RETURN_NONE;                                                                           \
    }                                                                                             \
    static PyObject *py_##NAME(PyObject *self, PyObject *noargs) {                                \
        (void)self, (void)noargs;                                                                 \
        return PyBool_FromLong(VAR);                                                              \
    }
MODULE_SWITCH(windows, use_windows)
MODULE_SWITCH(flat, use_flat)
MODULE_SWITCH(tap_planes, use_tap_planes)

static PyObject *py_conv_images(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return images_call(args, nargs, 0);
}

static PyObject *py_conv_transpose_images(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return images_call(args, nargs, 1);
}

/* kernel_grad_parts(x, g, parts_out, parts, co, geometry): the im2col kernel gradient
 * dk = sum over images of g[b] (co, oh * ow) @ cols[b]^T, the images cut into `parts`
 * ranges (a count the caller takes from the shape alone), each range summed image by
 * image into its own (co, rows) by one task (each image's planes in that thread's
 * scratch, cols^T packed from their windows; a 1x1 stride-1 kernel's columns, the
 * image itself, read in place), then the parts added in order into parts_out[0]: the
 * same bits at any thread count. `units` cuts each part's product into blocks, one
 * task each, so that fewer parts than threads (a single image) still use them all:
 * blocks of columns (windows, each packing only its own) when packed from windows,
 * else of rows; each element the same sum. */
typedef struct {
    geom_t g;
    const float *x, *gr;
    float *parts_out;
    int64_t co, parts, units;
    const int64_t *row_off; /* the columns as windows of each image's planes (window_offsets), or NULL */
    _Atomic int *failed;
} kparts_job;

#define KPARTS_TASK(NAME, ATTR)                                                                   \
    static ATTR void NAME(void *p, int64_t lo, int64_t hi) {                                      \
        const kparts_job *kj = (const kparts_job *)p;                                             \
        const geom_t *g = &kj->g;                                                                 \
        const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;                          \
        const int in_place = columns_are_image(g); /* read, not copied */                       \
        const int64_t ph = cols_scratch_floats(g);                                                \
        margins_t mg;                                                                             \
        phase_margins(g, &mg);                                                                    \
        const size_t floats = in_place ? 0 : kj->row_off ? (size_t)(g->nc * channel_planes_floats(g)) \
                                                         : (size_t)(rows * pos + ph);             \
        float *scratch = in_place ? NULL : scratch_get(floats), *cols = scratch;                  \
        if (!in_place && !scratch) {                                                              \
            atomic_store(kj->failed, 1);                                                          \
            return;                                                                               \
        }                                                                                         \
        int64_t made = -1; /* the image whose planes or columns are in the scratch */             \
        for (int64_t t = lo; t < hi; t++) {                                                       \
            const int64_t part = t / kj->units, ui = t % kj->units;                               \
            /* the unit's block: columns (windows) when packed from them, else rows */           \
            int64_t r0 = 0, r1 = kj->co, c0 = 0, c1 = rows;                                       \
            if (kj->row_off)                                                                      \
                c0 = pair_block(rows, kj->units, ui), c1 = pair_block(rows, kj->units, ui + 1);   \
            else                                                                                  \
                r0 = tile_block(kj->co, kj->units, ui), r1 = tile_block(kj->co, kj->units, ui + 1); \
            if (r0 >= r1 || c0 >= c1) continue;                                                   \
            const int64_t a = g->nb * part / kj->parts, z = g->nb * (part + 1) / kj->parts;       \
            float *dk = kj->parts_out + (part * kj->co + r0) * rows + c0;                         \
            for (int64_t r = r0; a == z && r < r1; r++)                                           \
                memset(dk + (r - r0) * rows, 0, (size_t)(c1 - c0) * sizeof(float));               \
            for (int64_t b = a; b < z; b++) {                                                     \
                const float *gb = kj->gr + (b * kj->co + r0) * pos;                               \
                int ok;                                                                           \
                if (kj->row_off) { /* dk (+)= g[b] @ cols^T packed from the planes' windows */    \
                    if (made != b) image_planes(g, &mg, kj->x, b, cols);                          \
                    const tallow_windows win = {cols, kj->row_off + c0, g->ow, mg.cols, 1, 0, 0}; \
                    ok = tallow_gemm->product_windows(gb, pos, 1, &win, dk, rows, kj->co, c1 - c0, pos, b > a); \
                } else {                                                                          \
                    if (in_place)                                                                 \
                        cols = (float *)kj->x + b * rows * pos;                                   \
                    else if (made != b)                                                           \
                        image_columns(g, kj->x, b, cols);                                         \
                    /* dk (+)= g[b] (co, pos) @ cols^T (pos, rows) */                             \
                    ok = tallow_gemm->product(gb, 0, pos, 1, cols, 0, 1, pos, dk, 1, r1 - r0, rows, pos, b > a); \
                }                                                                                 \
                made = b;                                                                         \
                if (!ok) {                                                                        \
                    atomic_store(kj->failed, 1);                                                  \
                    break;                                                                        \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        if (scratch) scratch_done(scratch, floats);                                               \
    }
KPARTS_TASK(kparts_task_base, NO_MEMCPY_CALLS)
#ifdef TALLOW_X86
KPARTS_TASK(kparts_task_avx2, AVX2 NO_MEMCPY_CALLS)
#endif

/* kernel_grad_parts(x, g, parts_out, parts, co, nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh,
 * dw, oh, ow[, units]): x (nb, nc, h, w), g (nb, co, oh, ow), parts_out (parts, co, nc *
 * kh * kw). */
static PyObject *py_kernel_grad_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 19 && nargs != 20) return PyErr_Format(PyExc_TypeError, "kernel_grad_parts takes 19 or 20 arguments");
    kparts_job kj;
    int64_t pc[2];
    kj.units = 1;
    if (!parse_ints(args, 3, 2, pc) || !parse_geom(args, 5, &kj.g) || (nargs == 20 && !parse_ints(args, 19, 1, &kj.units)))
        return NULL;
    kj.parts = pc[0], kj.co = pc[1];
    if (kj.parts < 1 || kj.co < 1) return PyErr_Format(PyExc_ValueError, "kernel_grad_parts: bad part or channel count");
    if (kj.units < 1 || kj.units > kj.co) return PyErr_Format(PyExc_ValueError, "kernel_grad_parts: bad unit count");
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "kernel_grad_parts: the product module is missing");
    const geom_t *g = &kj.g;
    int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, g->nb * g->nc * g->h * g->w * 4, "x") &&
        get_buf(args[1], &b[1], 0, g->nb * kj.co * pos * 4, "g") &&
        get_buf(args[2], &b[2], 1, kj.parts * kj.co * rows * 4, "parts_out")) {
        kj.x = (const float *)b[0].view.buf, kj.gr = (const float *)b[1].view.buf;
        kj.parts_out = (float *)b[2].view.buf;
        kj.row_off = NULL;
        int64_t *off = NULL;
        if (use_windows && !columns_are_image(g) && rows > 0 && !(kj.row_off = off = window_offsets(g))) {
            release(b, 3);
            return PyErr_NoMemory();
        }
        _Atomic int failed = 0;
        kj.failed = &failed;
        tallow_task_fn fn = kparts_task_base;
#ifdef TALLOW_X86
        if (use_avx2) fn = kparts_task_avx2;
#endif
        Py_BEGIN_ALLOW_THREADS
        if (pos > 0 && rows > 0) {
            tallow_pool_run(fn, &kj, kj.parts * kj.units, 1, g->nb * (g->nc * g->h * g->w + kj.co * pos) * 4);
            if (!atomic_load(&failed)) sum_parts(kj.parts_out, kj.parts_out, kj.parts, kj.co * rows);
        } else {
            memset(kj.parts_out, 0, (size_t)(kj.co * rows) * sizeof(float));
        }
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
        PyMem_Free(off);
    }
    release(b, 3);
    return res;
}

/* Planes per chunk: enough that a chunk is a few microseconds of copying. */
static int64_t plane_grain(int64_t floats_per_plane) {
    int64_t grain = 4096 / (floats_per_plane + 1);
    return grain < 1 ? 1 : grain;
}

/* im2col(x, cols, sb, sr, nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
 * col2im(cols, x, sb, sr, <the same geometry>): x (nb, nc, h, w) overwritten. */
static PyObject *cols_call(PyObject *const *args, Py_ssize_t nargs, int adjoint) {
    const char *name = adjoint ? "col2im" : "im2col";
    if (nargs != 18) return PyErr_Format(PyExc_TypeError, "%s takes 18 arguments", name);
    cols_job jb;
    int64_t s[2];
    if (!parse_ints(args, 2, 2, s) || !parse_geom(args, 4, &jb.g)) return NULL;
    jb.sb = s[0];
    jb.sr = s[1];
    const geom_t *g = &jb.g;
    int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;
    /* the furthest column element written or read, from the two strides */
    int64_t need = g->nb && rows && pos ? ((g->nb - 1) * jb.sb + (rows - 1) * jb.sr + pos) * 4 : 0;
    int64_t img = g->nb * g->nc * g->h * g->w * 4;
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    int ok = adjoint ? get_buf(args[0], &b[0], 0, need, "cols") && get_buf(args[1], &b[1], 1, img, "x")
                     : get_buf(args[0], &b[1], 0, img, "x") && get_buf(args[1], &b[0], 1, need, "cols");
    if (ok) {
        jb.cols = (float *)b[0].view.buf;
        jb.x = (float *)b[1].view.buf;
        int64_t units = g->nb * g->nc;
        _Atomic int failed = 0;
        jb.failed = &failed;
        tallow_task_fn fn = adjoint ? col2im_task_base : im2col_task_base;
#ifdef TALLOW_X86
        if (use_avx2) fn = adjoint ? col2im_task_avx2 : im2col_task_avx2;
#endif
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, &jb, units, plane_grain(g->kh * g->kw * pos), need + img);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 2);
    return res;
}

static PyObject *py_im2col(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return cols_call(args, nargs, 0);
}

static PyObject *py_col2im(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return cols_call(args, nargs, 1);
}

/* ------------------------------------------------------------------ direct convolution */
/* out[b, co, y, x] = sum over (ci, ki, kj) of k[co, ci, ki, kj] * x[b, ci, y*sh - ph + ki*dh,
 * x*sw - pw + kj*dw], in that summation order (with FMA on AVX2).  One unit is an output
 * row (b, y): its input rows, ci x kh of them, are copied into zero-padded scratch rows,
 * one per stride phase (phase p holds padded columns p, p + sw, ...), so that the taps
 * of output columns x..x+7 are eight consecutive floats. With stride 1 and AVX2 the
 * flat form below (direct_flat_task) runs instead, with the same sums. */
typedef struct {
    geom_t g;
    const float *x, *k;
    float *out;
    int64_t co;
    int64_t plen;  /* floats of one phase row */
    int64_t xblk;  /* output columns computed per block, rounded up to 16 */
    int64_t hp;    /* padded rows per input plane held in scratch (planes mode), else 0 */
    int64_t *tap_off; /* per tap (ci, ki, kj): where its inputs start in the scratch rows */
    float *kpack;     /* the kernel per block of channels, [tap][channel in block] */
    _Atomic int *failed; /* set when a chunk could not allocate its scratch */
    /* flat form (stride 1): padded width, floats per padded plane, 16-position blocks
     * per image, and per tap its shift in the planes (else all 0 / NULL) */
    int64_t fw, fplane, fblocks;
    int64_t *flat_off;
    int wide; /* the flat form's AVX-512 blocks (direct_block_size's `wide`) */
    int few;  /* 4 (at most 4 output channels) or 2 (5-8): blocks at once, AVX-512 */
    /* AVX-512 flat form, per 16-position block of an image: which lanes are outputs
     * (column < ow, row < oh) and where the first of them goes in an output plane */
    uint16_t *fmask;
    int64_t *fdst;
} direct_job;

/* The channel blocks the kernels walk.  AVX2 (16 positions in two registers per
 * channel): six while more than four channels remain, except eight (two blocks of four
 * waste none), then four.  AVX-512 (`wide`: 16 positions in one register per channel):
 * sixteen while that many remain (sixteen accumulators: eight waited on the FMA
 * latency), then twelve while more than eight remain, then eight.
 * Returns the block at o0. */
static inline int64_t direct_block_size(int64_t co, int64_t o0, int wide) {
    int64_t left = co - o0;
    if (wide) return left >= 16 ? 16 : left > 8 ? 12 : 8;
    return left > 4 && left != 8 ? 6 : 4;
}

/* One image row into sw zero-padded phase rows of plen floats: padded column t = c + pw
 * goes to phase t % sw, slot t / sw (dst zeroed by the caller). */
static void phase_row(float *dst, const float *src, int64_t w, int64_t pw, int64_t sw, int64_t plen) {
    if (sw == 1) {
        int64_t n = w < plen - pw ? w : plen - pw;
        if (n > 0) memcpy(dst + pw, src, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t ph = 0; ph < sw; ph++) {
        /* the first image column of this phase: c + pw = ph (mod sw), c >= 0 */
        int64_t c0 = ((ph - pw) % sw + sw) % sw;
        float *d = dst + ph * plen;
        for (int64_t c = c0, slot = (c0 + pw) / sw; c < w && slot < plen; c += sw, slot++) d[slot] = src[c];
    }
}

/* scratch: nc*kh rows of sw phases of plen floats, and one block of co x xblk outputs */
static float *direct_rows(const direct_job *jb, float *scratch, int64_t b, int64_t y) {
    const geom_t *g = &jb->g;
    int64_t sw = g->sw, plen = jb->plen;
    float *rows = scratch;
    for (int64_t ci = 0; ci < g->nc; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++) {
            float *pr = rows + (ci * g->kh + ki) * sw * plen;
            memset(pr, 0, (size_t)(sw * plen) * sizeof(float));
            int64_t r = y * g->sh - g->ph + ki * g->dh;
            if (r < 0 || r >= g->h) continue;
            phase_row(pr, jb->x + ((b * g->nc + ci) * g->h + r) * g->w, g->w, g->pw, sw, plen);
        }
    return rows;
}

static void direct_row_scalar(const direct_job *jb, const float *rows, float *acc, int64_t b, int64_t y) {
    const geom_t *g = &jb->g;
    int64_t ow = g->ow;
    for (int64_t o = 0; o < jb->co; o++) {
        float *dst = jb->out + ((b * jb->co + o) * g->oh + y) * ow;
        for (int64_t x = 0; x < ow; x++) acc[x] = 0.0f;
        const float *kk = jb->k + o * g->nc * g->kh * g->kw;
        int64_t taps = g->nc * g->kh * g->kw;
        for (int64_t tap = 0; tap < taps; tap++) {
            const float *src = rows + jb->tap_off[tap];
            float wv = kk[tap];
            for (int64_t x = 0; x < ow; x++) acc[x] = fmaf(wv, src[x], acc[x]);
        }
        memcpy(dst, acc, (size_t)ow * sizeof(float));
    }
}

#ifdef TALLOW_X86
/* NCO output channels x 16 columns per register block (2 * NCO accumulators): per tap
 * two loads, NCO broadcasts and 2 * NCO FMAs.  Channels past the layer's last (nco <
 * NCO) are computed with channel o0's weights and not stored. */
/* a[2q], a[2q + 1]: channel q of the block at the 16 positions from `base`, summed over
 * the taps in order (tap t's inputs at base + off[t], its weights kp[t * NCO + q]). */
#define DIRECT_TAPS(NCO, a, base, off)                                                                 \
    _Pragma("GCC unroll 12") for (int q = 0; q < 2 * NCO; q++) a[q] = _mm256_setzero_ps();             \
    for (int64_t tap = 0; tap < taps; tap++) {                                                         \
        const float *src = (base) + (off)[tap];                                                        \
        __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);                               \
        _Pragma("GCC unroll 6") for (int q = 0; q < NCO; q++) {                                        \
            __m256 w = _mm256_broadcast_ss(kp + tap * NCO + q);                                        \
            a[2 * q] = _mm256_fmadd_ps(w, v0, a[2 * q]);                                               \
            a[2 * q + 1] = _mm256_fmadd_ps(w, v1, a[2 * q + 1]);                                       \
        }                                                                                              \
    }

#define DIRECT_BLOCK(NCO)                                                                              \
    AVX2 static void direct_block##NCO(const direct_job *jb, const float *rows, float *acc, int64_t b,     \
                                       int64_t y, int64_t o0, int64_t nco) {                            \
        const geom_t *g = &jb->g;                                                                      \
        int64_t ow = g->ow, taps = g->nc * g->kh * g->kw;                                              \
        const float *kp = jb->kpack + o0 * taps; /* [tap][NCO] */                                     \
        (void)nco;                                                                                     \
        for (int64_t x0 = 0; x0 < ow; x0 += 16) {                                                      \
            __m256 a[2 * NCO];                                                                         \
            DIRECT_TAPS(NCO, a, rows + x0, jb->tap_off)                                                \
            int64_t n = ow - x0 < 16 ? ow - x0 : 16;                                                   \
            _Pragma("GCC unroll 6") for (int q = 0; q < NCO; q++) {                                    \
                if (q >= nco) break;                                                                   \
                float *dst = jb->out + ((b * jb->co + o0 + q) * g->oh + y) * ow + x0;                  \
                if (n == 16) {                                                                         \
                    _mm256_storeu_ps(dst, a[2 * q]);                                                   \
                    _mm256_storeu_ps(dst + 8, a[2 * q + 1]);                                           \
                } else {                                                                               \
                    _mm256_storeu_ps(acc, a[2 * q]);                                                   \
                    _mm256_storeu_ps(acc + 8, a[2 * q + 1]);                                           \
                    memcpy(dst, acc, (size_t)n * sizeof(float));                                       \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }
DIRECT_BLOCK(4)
DIRECT_BLOCK(6)

/* Blocks of six channels (twelve accumulators hide the FMA latency better than eight)
 * while more than four remain, except eight (two blocks of four waste none). */
AVX2 static void direct_row_avx2(const direct_job *jb, const float *rows, float *acc, int64_t b, int64_t y) {
    int64_t o0 = 0, co = jb->co;
    while (o0 < co) {
        int64_t left = co - o0;
        if (direct_block_size(co, o0, 0) == 6) {
            direct_block6(jb, rows, acc, b, y, o0, left < 6 ? left : 6);
            o0 += 6;
        } else {
            direct_block4(jb, rows, acc, b, y, o0, left < 4 ? left : 4);
            o0 += 4;
        }
    }
}

/* Stride 1, the flat form: with each input plane zero-padded to fw = w + 2 pw columns,
 * output position p = y * fw + x reads tap (ci, ki, kj) at p + ki * dh * fw + kj * dw of
 * plane ci, one shift per tap for every position; blocks of 16 positions run over the
 * image's flat range (26 output columns: 93% of the lanes hold outputs, 81% in blocks of
 * 16 per row), and the positions past ow are computed and dropped. Every output's sum
 * is the same FMAs in the same order as the row form's: the same bits. */
#define DIRECT_FLAT_BLOCK(NCO)                                                                         \
    AVX2 static void direct_flat_block##NCO(const direct_job *jb, const float *planes, float *wide,        \
                                            int64_t p0, int64_t o0, int64_t nco) {                     \
        const geom_t *g = &jb->g;                                                                      \
        int64_t taps = g->nc * g->kh * g->kw, span = jb->fblocks * 16;                                 \
        const float *kp = jb->kpack + o0 * taps;                                                       \
        __m256 a[2 * NCO];                                                                             \
        DIRECT_TAPS(NCO, a, planes + p0, jb->flat_off)                                                 \
        /* constant indices, so that a stays in registers */                                          \
        _Pragma("GCC unroll 6") for (int q = 0; q < NCO; q++) {                                        \
            if (q >= nco) break;                                                                       \
            float *dst = wide + (o0 + q) * span + p0;                                                  \
            _mm256_storeu_ps(dst, a[2 * q]);                                                           \
            _mm256_storeu_ps(dst + 8, a[2 * q + 1]);                                                   \
        }                                                                                              \
    }
DIRECT_FLAT_BLOCK(4)
DIRECT_FLAT_BLOCK(6)

/* One channel's 16-position block straight into its output plane: the lanes that are
 * outputs (column < ow, row < oh) are consecutive in the plane (a row's last column is
 * followed by the next row's first), so a compress and a masked store of that many
 * lanes write them all; `d` is the plane offset of the first. Staging the blocks in
 * padded-width rows and copying each output row out (a memcpy of ow floats per channel
 * and row) took a third of a first layer's time. */
AVX512F static inline void flat_put(float *plane, __m512 v, uint16_t m, int64_t d) {
    if (m == 0xFFFF) {
        _mm512_storeu_ps(plane + d, v);
        return;
    }
    __mmask16 n = (__mmask16)((1u << __builtin_popcount(m)) - 1);
    _mm512_mask_storeu_ps(plane + d, n, _mm512_maskz_compress_ps((__mmask16)m, v));
}

/* The same with AVX-512: NCO channels x 16 positions, one register per channel (per
 * tap one load, NCO broadcasts and NCO FMAs, twice the AVX2 block's columns per FMA),
 * stored with flat_put; every output is the same FMAs in the same order: the same
 * bits. Block j of image b. */
#define DIRECT_FLAT_WIDE(NCO)                                                                          \
    AVX512F static void direct_flat_wide##NCO(const direct_job *jb, const float *planes, int64_t b,        \
                                              int64_t j, int64_t o0, int64_t nco) {                    \
        const geom_t *g = &jb->g;                                                                      \
        int64_t taps = g->nc * g->kh * g->kw, p0 = j * 16, plane = g->oh * g->ow;                      \
        const float *kp = jb->kpack + o0 * taps;                                                       \
        const float *base = planes + p0;                                                               \
        __m512 a[NCO];                                                                                 \
        _Pragma("GCC unroll 16") for (int q = 0; q < NCO; q++) a[q] = _mm512_setzero_ps();             \
        for (int64_t tap = 0; tap < taps; tap++) {                                                     \
            __m512 v = _mm512_loadu_ps(base + jb->flat_off[tap]);                                      \
            _Pragma("GCC unroll 16") for (int q = 0; q < NCO; q++)                                     \
                a[q] = _mm512_fmadd_ps(_mm512_set1_ps(kp[tap * NCO + q]), v, a[q]);                    \
        }                                                                                              \
        float *img = jb->out + (b * jb->co + o0) * plane;                                              \
        _Pragma("GCC unroll 16") for (int q = 0; q < NCO; q++) {                                       \
            if (q >= nco) break;                                                                       \
            flat_put(img + q * plane, a[q], jb->fmask[j], jb->fdst[j]);                                \
        }                                                                                              \
    }
DIRECT_FLAT_WIDE(8)
DIRECT_FLAT_WIDE(12)
DIRECT_FLAT_WIDE(16)

/* Few output channels (a first layer's input gradient: 16 channels back to 3 or 8),
 * several 16-position blocks of one image at once: NCO channels x NB blocks in NCO * NB
 * = 16 zmm accumulators, per tap NB loads, NCO broadcasts and 16 FMAs (4 x 64: the
 * AVX2 block of 4 channels x 16 positions had eight accumulators and 0.75 loads per
 * FMA; 8 x 32: the 16-lane block of 8 channels, eight accumulators, waited on the FMA
 * latency). The kernel is packed in blocks of NCO. Blocks j .. j + nblk - 1 of image b
 * are stored (nblk <= NB: the last ones of an image or a chunk; the blocks past them
 * are computed from the planes' slack and dropped). Same sums, same bits. */
#define DIRECT_FLAT_FEW(NCO, NB)                                                                       \
    AVX512F static void direct_flat_few##NCO(const direct_job *jb, const float *planes, int64_t b,         \
                                             int64_t j, int64_t nblk) {                                \
        const geom_t *g = &jb->g;                                                                      \
        int64_t taps = g->nc * g->kh * g->kw, p0 = j * 16, plane = g->oh * g->ow;                      \
        const float *kp = jb->kpack, *base = planes + p0;                                              \
        __m512 a[NCO * NB], v[NB];                                                                     \
        _Pragma("GCC unroll 16") for (int q = 0; q < NCO * NB; q++) a[q] = _mm512_setzero_ps();        \
        for (int64_t tap = 0; tap < taps; tap++) {                                                     \
            const float *src = base + jb->flat_off[tap];                                               \
            _Pragma("GCC unroll 4") for (int i = 0; i < NB; i++) v[i] = _mm512_loadu_ps(src + 16 * i); \
            _Pragma("GCC unroll 8") for (int q = 0; q < NCO; q++) {                                    \
                __m512 w = _mm512_set1_ps(kp[tap * NCO + q]);                                          \
                _Pragma("GCC unroll 4") for (int i = 0; i < NB; i++)                                   \
                    a[NB * q + i] = _mm512_fmadd_ps(w, v[i], a[NB * q + i]);                           \
            }                                                                                          \
        }                                                                                              \
        float *img = jb->out + b * jb->co * plane;                                                     \
        _Pragma("GCC unroll 8") for (int q = 0; q < NCO; q++) {                                        \
            if (q >= jb->co) break;                                                                    \
            _Pragma("GCC unroll 4") for (int i = 0; i < NB; i++)                                       \
                if (i < nblk) flat_put(img + q * plane, a[NB * q + i], jb->fmask[j + i], jb->fdst[j + i]); \
        }                                                                                              \
    }
DIRECT_FLAT_FEW(4, 4)
DIRECT_FLAT_FEW(8, 2)

/* The outputs of image b at flat positions [pa, pb), from the wide rows to the image. */
static void direct_flat_flush(const direct_job *jb, const float *wide, int64_t b, int64_t pa, int64_t pb) {
    const geom_t *g = &jb->g;
    int64_t span = jb->fblocks * 16;
    for (int64_t y = pa / jb->fw; y < g->oh && y * jb->fw < pb; y++) {
        int64_t x0 = pa - y * jb->fw, x1 = pb - y * jb->fw;
        if (x0 < 0) x0 = 0;
        if (x1 > g->ow) x1 = g->ow;
        if (x1 <= x0) continue;
        for (int64_t o = 0; o < jb->co; o++)
            memcpy(jb->out + ((b * jb->co + o) * g->oh + y) * g->ow + x0, wide + o * span + y * jb->fw + x0,
                   (size_t)(x1 - x0) * sizeof(float));
    }
}

/* Image b's nc zero-padded planes (fplane floats each: hp rows of fw, then zeros for
 * the furthest tap of the last block), and `slack` more zeros after the last. */
static void flat_planes(const direct_job *jb, float *planes, int64_t b, int64_t slack) {
    const geom_t *g = &jb->g;
    memset(planes, 0, (size_t)(g->nc * jb->fplane + slack) * sizeof(float));
    for (int64_t ci = 0; ci < g->nc; ci++)
        for (int64_t r = 0; r < g->h; r++)
            memcpy(planes + ci * jb->fplane + (r + g->ph) * jb->fw + g->pw,
                   jb->x + ((b * g->nc + ci) * g->h + r) * g->w, (size_t)g->w * sizeof(float));
}

/* AVX2: scratch holds the image's planes (flat_planes) and its outputs at width fw (co
 * rows of fblocks * 16), copied out row by row as they complete */
AVX2 static void direct_flat_task(void *p, int64_t lo, int64_t hi) {
    const direct_job *jb = (const direct_job *)p;
    const geom_t *g = &jb->g;
    int64_t co = jb->co, span = jb->fblocks * 16;
    float *planes = (float *)malloc((size_t)(g->nc * jb->fplane + co * span) * sizeof(float));
    if (!planes) {
        atomic_store(jb->failed, 1);
        return;
    }
    float *wide = planes + g->nc * jb->fplane;
    int64_t filled = -1, pa = 0, pb = 0;
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / jb->fblocks, p0 = (u % jb->fblocks) * 16;
        if (b != filled) {
            if (filled >= 0) direct_flat_flush(jb, wide, filled, pa, pb);
            flat_planes(jb, planes, b, 0);
            filled = b;
            pa = p0;
        }
        pb = p0 + 16;
        for (int64_t o0 = 0; o0 < co;) {
            int64_t left = co - o0;
            if (direct_block_size(co, o0, 0) == 6) {
                direct_flat_block6(jb, planes, wide, p0, o0, left < 6 ? left : 6);
                o0 += 6;
            } else {
                direct_flat_block4(jb, planes, wide, p0, o0, left < 4 ? left : 4);
                o0 += 4;
            }
        }
        /* the rows completed so far go out now, between the blocks' FMAs, not in one
         * burst per image: the output's writes to memory overlap the arithmetic */
        const int64_t edge = pb / jb->fw * jb->fw;
        if (edge - pa >= jb->fw) {
            direct_flat_flush(jb, wide, b, pa, edge);
            pa = edge;
        }
    }
    if (filled >= 0) direct_flat_flush(jb, wide, filled, pa, pb);
    free(planes);
}

/* The planes' slack for direct_flat_few's blocks past an image's last (never stored). */
#define FLAT_FEW_SLACK (3 * 16)

/* AVX-512: scratch holds the image's planes; the blocks go straight to the output
 * (flat_put). Up to 8 channels, `few` blocks of one image at a time; more, one block
 * at a time in channel blocks of 16, 12 or 8. */
AVX512F static void direct_flat_task512(void *p, int64_t lo, int64_t hi) {
    const direct_job *jb = (const direct_job *)p;
    const geom_t *g = &jb->g;
    int64_t co = jb->co;
    float *planes = (float *)malloc((size_t)(g->nc * jb->fplane + FLAT_FEW_SLACK) * sizeof(float));
    if (!planes) {
        atomic_store(jb->failed, 1);
        return;
    }
    int64_t filled = -1;
    for (int64_t u = lo; u < hi;) {
        int64_t b = u / jb->fblocks, j = u % jb->fblocks;
        if (b != filled) {
            flat_planes(jb, planes, b, FLAT_FEW_SLACK);
            filled = b;
        }
        if (jb->few) {
            int64_t n = jb->few;
            if (n > hi - u) n = hi - u;
            if (n > jb->fblocks - j) n = jb->fblocks - j;
            if (jb->few == 4) direct_flat_few4(jb, planes, b, j, n);
            else direct_flat_few8(jb, planes, b, j, n);
            u += n;
            continue;
        }
        for (int64_t o0 = 0; o0 < co;) {
            int64_t left = co - o0;
            int64_t nb = direct_block_size(co, o0, 1);
            if (nb == 16) {
                direct_flat_wide16(jb, planes, b, j, o0, 16);
                o0 += 16;
            } else if (nb == 12) {
                direct_flat_wide12(jb, planes, b, j, o0, left < 12 ? left : 12);
                o0 += 12;
            } else {
                direct_flat_wide8(jb, planes, b, j, o0, left < 8 ? left : 8);
                o0 += 8;
            }
        }
        u++;
    }
    free(planes);
}
#endif

/* Planes mode: all the padded input rows of image b (nc planes of hp rows, each row sw
 * phases of plen floats), copied once for every output row of a chunk that reads them;
 * output row y's taps start y * sh rows further.  Copying each output row's kh input
 * rows again (kh - 1 of them shared with the row before) took about half of a first
 * layer's time. */
static void direct_planes(const direct_job *jb, float *planes, int64_t b) {
    const geom_t *g = &jb->g;
    int64_t row = g->sw * jb->plen;
    for (int64_t ci = 0; ci < g->nc; ci++)
        for (int64_t rp = 0; rp < jb->hp; rp++) {
            float *pr = planes + (ci * jb->hp + rp) * row;
            memset(pr, 0, (size_t)row * sizeof(float));
            int64_t r = rp - g->ph;
            if (r < 0 || r >= g->h) continue;
            phase_row(pr, jb->x + ((b * g->nc + ci) * g->h + r) * g->w, g->w, g->pw, g->sw, jb->plen);
        }
}

#define DIRECT_PLANES_MAX (1 << 20)

static size_t direct_scratch_floats(const direct_job *jb) {
    const geom_t *g = &jb->g;
    return (size_t)(g->nc * (jb->hp ? jb->hp : g->kh) * g->sw * jb->plen);
}

static void direct_task(void *p, int64_t lo, int64_t hi) {
    const direct_job *jb = (const direct_job *)p;
    const geom_t *g = &jb->g;
    size_t nrows = direct_scratch_floats(jb);
    /* scratch rows plus one accumulator row (at least 16 floats) */
    size_t accn = (size_t)(g->ow > 16 ? g->ow : 16);
    float *scratch = (float *)malloc((nrows + accn) * sizeof(float));
    if (!scratch) {
        atomic_store(jb->failed, 1);
        return;
    }
    float *acc = scratch + nrows;
    int64_t filled = -1; /* the image whose planes are in scratch */
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / g->oh, y = u % g->oh;
        const float *rows;
        if (jb->hp) {
            if (b != filled) direct_planes(jb, scratch, b);
            filled = b;
            rows = scratch + y * g->sh * g->sw * jb->plen;
        } else {
            rows = direct_rows(jb, scratch, b, y);
        }
#ifdef TALLOW_X86
        if (use_avx2) {
            direct_row_avx2(jb, rows, acc, b, y);
            continue;
        }
#endif
        direct_row_scalar(jb, rows, acc, b, y);
    }
    free(scratch);
}

/* The kernel (co, taps) repacked per channel block as [tap][channel in block], so that a
 * block's weights for one tap are consecutive (one pointer for the FMAs' broadcasts);
 * missing channels of a last block repeat its first.  NULL with MemoryError set. */
static float *pack_kernel(const float *k, int64_t co, int64_t taps, int wide) {
    int64_t padded = 0;
    for (int64_t o0 = 0; o0 < co; o0 += direct_block_size(co, o0, wide)) padded += direct_block_size(co, o0, wide);
    float *p = (float *)PyMem_Malloc((size_t)(padded * taps) * sizeof(float));
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int64_t o0 = 0; o0 < co; o0 += direct_block_size(co, o0, wide)) {
        int64_t nb = direct_block_size(co, o0, wide);
        float *blk = p + o0 * taps;
        for (int64_t t = 0; t < taps; t++)
            for (int64_t q = 0; q < nb; q++) blk[t * nb + q] = k[(o0 + (o0 + q < co ? q : 0)) * taps + t];
    }
    return p;
}

/* flat_put's table for every block of an image (fmask, fdst); 0 when out of memory. */
static int flat_stores(direct_job *jb) {
    const geom_t *g = &jb->g;
    jb->fmask = (uint16_t *)PyMem_Malloc((size_t)jb->fblocks * sizeof(uint16_t));
    jb->fdst = (int64_t *)PyMem_Malloc((size_t)jb->fblocks * sizeof(int64_t));
    if (!jb->fmask || !jb->fdst) return 0;
    for (int64_t j = 0; j < jb->fblocks; j++) {
        uint16_t m = 0;
        int64_t d = 0;
        for (int i = 15; i >= 0; i--) { /* down, so that d ends at the first output lane */
            int64_t p = j * 16 + i, y = p / jb->fw, x = p % jb->fw;
            if (y < g->oh && x < g->ow) {
                m |= (uint16_t)(1u << i);
                d = y * g->ow + x;
            }
        }
        jb->fmask[j] = m;
        jb->fdst[j] = d;
    }
    return 1;
}

/* direct(x, k, out, co, nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow) */
static PyObject *py_direct(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 18) return PyErr_Format(PyExc_TypeError, "direct takes 18 arguments");
    direct_job jb;
    if (!parse_ints(args, 3, 1, &jb.co) || !parse_geom(args, 4, &jb.g)) return NULL;
    const geom_t *g = &jb.g;
    if (jb.co < 1 || g->nc * g->kh * g->kw > (1 << 16))
        return PyErr_Format(PyExc_ValueError, "direct: bad channel counts");
    jb.xblk = (g->ow + 15) / 16 * 16;
    /* a phase row covers the last block's 16 columns plus the furthest tap */
    jb.plen = jb.xblk + ((g->kw - 1) * g->dw) / g->sw + 1;
    int64_t taps = g->nc * g->kh * g->kw;
    /* planes mode unless an image's padded planes would pass DIRECT_PLANES_MAX floats */
    jb.hp = g->oh > 0 ? (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1 : 0;
    if (g->nc * jb.hp * g->sw * jb.plen > DIRECT_PLANES_MAX) jb.hp = 0;
    jb.tap_off = (int64_t *)PyMem_Malloc((size_t)taps * sizeof(int64_t));
    if (!jb.tap_off) return PyErr_NoMemory();
    for (int64_t ci = 0, tap = 0; ci < g->nc; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++, tap++) {
                int64_t t = kj * g->dw;
                /* planes mode: padded row ki * dh of plane ci; else scratch row (ci, ki) */
                int64_t row = jb.hp ? ci * jb.hp + ki * g->dh : ci * g->kh + ki;
                jb.tap_off[tap] = row * g->sw * jb.plen + (t % g->sw) * jb.plen + t / g->sw;
            }
    /* the flat form: stride 1, the AVX2 kernels, an image's padded planes in scratch */
    jb.fw = jb.fplane = jb.fblocks = 0;
    jb.flat_off = NULL;
    jb.fmask = NULL;
    jb.fdst = NULL;
    jb.wide = jb.few = 0;
    if (g->sh == 1 && g->sw == 1 && use_avx2 && g->oh > 0 && g->ow > 0) {
        int64_t fw = g->w + 2 * g->pw, hp = g->h + 2 * g->ph;
        int64_t blocks = (g->oh * fw + 15) / 16;
        int64_t fplane = blocks * 16 + (g->kh - 1) * g->dh * fw + (g->kw - 1) * g->dw;
        if (fplane < hp * fw) fplane = hp * fw;
        if (g->nc * fplane <= DIRECT_PLANES_MAX) {
            jb.flat_off = (int64_t *)PyMem_Malloc((size_t)taps * sizeof(int64_t));
            if (!jb.flat_off) {
                PyMem_Free(jb.tap_off);
                return PyErr_NoMemory();
            }
            for (int64_t ci = 0, tap = 0; ci < g->nc; ci++)
                for (int64_t ki = 0; ki < g->kh; ki++)
                    for (int64_t kj = 0; kj < g->kw; kj++, tap++)
                        jb.flat_off[tap] = ci * fplane + ki * g->dh * fw + kj * g->dw;
            jb.fw = fw, jb.fplane = fplane, jb.fblocks = blocks;
            /* up to 8 channels: several blocks of positions at once (direct_flat_few;
             * up to 4 keep the AVX2 packing, in blocks of 4) */
            int avx512 = use_avx512 && use_avx2;
            jb.wide = avx512 && jb.co > 4;
            jb.few = !avx512 ? 0 : jb.co <= 4 ? 4 : jb.co <= 8 ? 2 : 0;
            if (avx512 && !flat_stores(&jb)) {
                PyMem_Free(jb.fmask);
                PyMem_Free(jb.fdst);
                PyMem_Free(jb.flat_off);
                PyMem_Free(jb.tap_off);
                return PyErr_NoMemory();
            }
        }
    }
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    jb.kpack = NULL;
    if (get_buf(args[0], &b[0], 0, g->nb * g->nc * g->h * g->w * 4, "x") &&
        get_buf(args[1], &b[1], 0, jb.co * taps * 4, "k") &&
        get_buf(args[2], &b[2], 1, g->nb * jb.co * g->oh * g->ow * 4, "out") &&
        (jb.kpack = pack_kernel((const float *)b[1].view.buf, jb.co, taps, jb.wide)) != NULL) {
        jb.x = (const float *)b[0].view.buf;
        jb.k = (const float *)b[1].view.buf;
        jb.out = (float *)b[2].view.buf;
        int64_t row_macs = jb.co * taps * g->ow;
        int64_t grain = 16384 / (row_macs + 1);
        /* planes mode: each chunk copies the planes of every image it touches, so chunks
         * are a few per thread (as long as possible), not a few rows each */
        int64_t per_chunk = g->nb * g->oh / (4 * tallow_pool_threads());
        if (jb.hp && per_chunk > grain) grain = per_chunk;
        _Atomic int failed = 0;
        jb.failed = &failed;
        Py_BEGIN_ALLOW_THREADS
#ifdef TALLOW_X86
        if (jb.flat_off) { /* blocks of 16 positions; chunks of a few per thread, as planes mode */
            int64_t units = g->nb * jb.fblocks, fgrain = units / (4 * tallow_pool_threads());
            tallow_pool_run(jb.fmask ? direct_flat_task512 : direct_flat_task, &jb, units, fgrain < 1 ? 1 : fgrain,
                            g->nb * g->oh * row_macs);
        } else
#endif
        tallow_pool_run(direct_task, &jb, g->nb * g->oh, grain < 1 ? 1 : grain, g->nb * g->oh * row_macs);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 3);
    PyMem_Free(jb.flat_off);
    PyMem_Free(jb.fmask);
    PyMem_Free(jb.fdst);
    PyMem_Free(jb.tap_off);
    PyMem_Free(jb.kpack);
    return res;
}

/* ------------------------------------------------------------------ direct kernel gradient */
/* gk[co, ci, ki, kj] = sum over (b, y, x) of g[b, co, y, x] * x[b, ci, y*sh - ph + ki*dh,
 * x*sw - pw + kj*dw]: a convolution's kernel gradient without a column matrix, for the
 * same few-channel layers as the direct convolution.  One unit is one input-row tap
 * (ci, ki) and up to three kj: for every image its input rows (one per output row y)
 * are copied once into zero-padded phase rows, then every block of three output
 * channels multiplies eight columns of the gradient with the three taps' inputs into
 * nine vector sums, kept in registers over the image's rows.  The sums run over
 * (b, y, x) in order and are reduced lane by lane at the end, the same at any thread
 * count (the flat form below: per range of images, KGRAD_PARTS of them at most, the
 * ranges added in order; each chunk pads only its ranges' gradients). */
typedef struct {
    geom_t g;
    const float *x, *gr;
    float *gk;
    int64_t co, plen;
    _Atomic int *failed; /* set when a chunk could not allocate its rows */
    /* flat form: the images in `parts` ranges, each range's sums in part_out (parts x
     * co x taps), added in order into gk at the end */
    int64_t parts;
    float *part_out;
    int wide; /* the flat form's AVX-512 kernel (kgrad_flat_wide) */
} kgrad_job;

/* The flat kernel gradient's image ranges: a count that follows the batch alone. */
#define KGRAD_PARTS 4

#define KG_CO 3
#define KG_TAPS 3

#ifdef TALLOW_X86
AVX2 static inline float hsum8(__m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

AVX2 static void kgrad_task(void *p, int64_t lo, int64_t hi) {
    const kgrad_job *jb = (const kgrad_job *)p;
    const geom_t *g = &jb->g;
    int64_t sw = g->sw, plen = jb->plen, ow = g->ow, co = jb->co;
    int64_t ntb = (g->kw + KG_TAPS - 1) / KG_TAPS, ncb = (co + KG_CO - 1) / KG_CO;
    int64_t taps = g->nc * g->kh * g->kw;
    /* an image's input rows for this tap row (one per output row, sw phases each),
     * then the sums */
    size_t rows_floats = (size_t)(g->oh * sw * plen);
    float *rows = (float *)malloc((rows_floats + (size_t)(ncb * KG_CO * KG_TAPS * 8)) * sizeof(float));
    if (!rows) {
        atomic_store(jb->failed, 1);
        return;
    }
    float *sums = rows + rows_floats;
    int32_t lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t u = lo; u < hi; u++) {
        int64_t r = u / ntb, tb = u % ntb, ci = r / g->kh, ki = r % g->kh;
        int64_t nt = g->kw - tb * KG_TAPS < KG_TAPS ? g->kw - tb * KG_TAPS : KG_TAPS;
        int64_t off[KG_TAPS];
        for (int64_t t = 0; t < KG_TAPS; t++) {
            int64_t kj = tb * KG_TAPS + (t < nt ? t : 0), d = kj * g->dw;
            off[t] = (d % sw) * plen + d / sw;
        }
        /* the output rows whose input row is inside the image: [y0, y1) */
        int64_t y0 = 0, y1 = g->oh;
        while (y0 < y1 && y0 * g->sh - g->ph + ki * g->dh < 0) y0++;
        while (y1 > y0 && (y1 - 1) * g->sh - g->ph + ki * g->dh >= g->h) y1--;
        memset(sums, 0, (size_t)(ncb * KG_CO * KG_TAPS * 8) * sizeof(float));
        for (int64_t b = 0; b < g->nb; b++) {
            /* every output row's input row copied once per image (a row of padding adds
             * nothing and is skipped), then each channel block's nine sums stay in
             * registers over all the rows: the same sums, in the same order, as adding
             * row by row */
            for (int64_t y = y0; y < y1; y++) {
                float *pr = rows + y * sw * plen;
                memset(pr, 0, (size_t)(sw * plen) * sizeof(float));
                int64_t rr = y * g->sh - g->ph + ki * g->dh;
                phase_row(pr, jb->x + ((b * g->nc + ci) * g->h + rr) * g->w, g->w, g->pw, sw, plen);
            }
            for (int64_t cb = 0; cb < ncb; cb++) {
                const float *gp[KG_CO];
                for (int q = 0; q < KG_CO; q++) {
                    int64_t o = cb * KG_CO + q < co ? cb * KG_CO + q : cb * KG_CO;
                    gp[q] = jb->gr + (b * co + o) * g->oh * ow;
                }
                float *sp = sums + cb * KG_CO * KG_TAPS * 8;
                __m256 a[KG_CO * KG_TAPS];
                for (int q = 0; q < KG_CO * KG_TAPS; q++) a[q] = _mm256_loadu_ps(sp + 8 * q);
                for (int64_t y = y0; y < y1; y++) {
                    const float *pr = rows + y * sw * plen;
                    for (int64_t x0 = 0; x0 < ow; x0 += 8) {
                        int64_t n = ow - x0 < 8 ? ow - x0 : 8;
                        /* a last partial block: the lanes past the row read nothing */
                        __m256i m = _mm256_loadu_si256((const __m256i *)(lanes + 8 - n));
                        __m256 gv[KG_CO], v[KG_TAPS];
                        if (n == 8) {
                            for (int q = 0; q < KG_CO; q++) gv[q] = _mm256_loadu_ps(gp[q] + y * ow + x0);
                            for (int t = 0; t < KG_TAPS; t++) v[t] = _mm256_loadu_ps(pr + off[t] + x0);
                        } else {
                            for (int q = 0; q < KG_CO; q++) gv[q] = _mm256_maskload_ps(gp[q] + y * ow + x0, m);
                            for (int t = 0; t < KG_TAPS; t++) v[t] = _mm256_maskload_ps(pr + off[t] + x0, m);
                        }
                        for (int q = 0; q < KG_CO; q++)
                            for (int t = 0; t < KG_TAPS; t++)
                                a[q * KG_TAPS + t] = _mm256_fmadd_ps(gv[q], v[t], a[q * KG_TAPS + t]);
                    }
                }
                for (int q = 0; q < KG_CO * KG_TAPS; q++) _mm256_storeu_ps(sp + 8 * q, a[q]);
            }
        }
        for (int64_t o = 0; o < co; o++)
            for (int64_t t = 0; t < nt; t++) {
                const float *sp = sums + ((o / KG_CO) * KG_CO * KG_TAPS + (o % KG_CO) * KG_TAPS + t) * 8;
                jb->gk[o * taps + (ci * g->kh + ki) * g->kw + tb * KG_TAPS + t] = hsum8(_mm256_loadu_ps(sp));
            }
    }
    free(rows);
}

/* Stride 1: the flat form. With the image zero-padded to W = w + 2 pw columns and the
 * gradient to W columns (zeros past ow), output position p = y * W + x reads tap (ki,
 * kj) at p + ki * dh * W + kj * dw of the padded plane: one shift per tap, the same
 * for every position, so a sum runs over one flat range of oh * W positions (rounded up
 * to 8; the extra are zeros of the padded gradient) instead of row by row with a
 * partial block at each row's end (26 columns: 81% of the lanes used, now 93%). The
 * positions past ow multiply a zero of the gradient by real image values, so an image
 * holding an infinity or a NaN takes the row form instead (0 * inf would add a NaN
 * the true sum does not have). Four
 * output channels by three taps: twelve sums in registers. Image by image, each unit
 * of the chunk (a tap row of one input channel) in turn, the padded gradient made once
 * per image; each sum runs over (b, p) in order and is reduced lane by lane at the end,
 * the same at any thread count. */
#define KF_CO 4

typedef struct {
    int64_t wp, hp, npos, plane; /* padded width and rows, flat positions (x 8), plane floats */
} flat_geom;

static flat_geom kgrad_flat_geom(const geom_t *g) {
    flat_geom f;
    f.wp = g->w + 2 * g->pw;
    f.hp = g->h + 2 * g->ph;
    f.npos = (g->oh * f.wp + 7) / 8 * 8;
    /* the furthest read: the last position block plus the largest tap shift */
    f.plane = f.npos + (g->kh - 1) * g->dh * f.wp + (g->kw - 1) * g->dw;
    if (f.plane < f.hp * f.wp) f.plane = f.hp * f.wp;
    return f;
}

/* Where the flat form keeps the sum of output channel o and tap t (8 lanes) in a unit's
 * sums: AVX2, [o][t] (blocks of KF_CO channels); AVX-512, [o / 2][t][o % 2] (a pair of
 * channels in one register's halves). */
static inline int64_t kgrad_flat_sum(int wide, int64_t o, int64_t t) {
    return (wide ? ((o / 2) * KG_TAPS + t) * 2 + o % 2 : o * KG_TAPS + t) * 8;
}

/* Output channels the flat form's sums cover: whole blocks (KF_CO, or KW_CO with AVX-512). */
#define KW_CO 8
static inline int64_t kgrad_flat_channels(int wide, int64_t co) {
    int64_t blk = wide ? KW_CO : KF_CO;
    return (co + blk - 1) / blk * blk;
}

/* One tap unit of an image, channel block cb, AVX2: KF_CO channels x 3 taps, twelve sums. */
AVX2 static void kgrad_flat_unit(const kgrad_job *jb, const flat_geom *f, const float *const *xs,
                                 const float *gpad, float *sums, int64_t cb) {
    const float *gp[KF_CO];
    for (int q = 0; q < KF_CO; q++) gp[q] = gpad + (cb * KF_CO + q < jb->co ? cb * KF_CO + q : cb * KF_CO) * f->npos;
    float *sp = sums + cb * KF_CO * KG_TAPS * 8;
    __m256 a[KF_CO * KG_TAPS];
    for (int q = 0; q < KF_CO * KG_TAPS; q++) a[q] = _mm256_loadu_ps(sp + 8 * q);
    for (int64_t pos = 0; pos < f->npos; pos += 8) {
        __m256 v0 = _mm256_loadu_ps(xs[0] + pos), v1 = _mm256_loadu_ps(xs[1] + pos);
        __m256 v2 = _mm256_loadu_ps(xs[2] + pos);
        for (int q = 0; q < KF_CO; q++) {
            __m256 gv = _mm256_loadu_ps(gp[q] + pos);
            a[q * KG_TAPS] = _mm256_fmadd_ps(gv, v0, a[q * KG_TAPS]);
            a[q * KG_TAPS + 1] = _mm256_fmadd_ps(gv, v1, a[q * KG_TAPS + 1]);
            a[q * KG_TAPS + 2] = _mm256_fmadd_ps(gv, v2, a[q * KG_TAPS + 2]);
        }
    }
    for (int q = 0; q < KF_CO * KG_TAPS; q++) _mm256_storeu_ps(sp + 8 * q, a[q]);
}

/* 8 floats in both halves of a register (AVX-512F: as 4 doubles) */
AVX512F static inline __m512 bcast8(const float *p) {
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/* The same with AVX-512: the gradient interleaved by pairs of channels (gil: for pair
 * j and position block m, channel 2j's 8 positions then channel 2j + 1's), each tap's
 * inputs broadcast to both halves, so that one FMA does two AVX2 FMAs' work: each half
 * is one channel's 8 lanes, summed over the same positions in the same order as
 * kgrad_flat_unit's: the same bits. Block cb of KW_CO channels x 3 taps, twelve sums. */
AVX512F static void kgrad_flat_wide(const flat_geom *f, const float *const *xs, const float *gil, float *sums,
                                    int64_t cb) {
    const float *gp = gil + cb * KW_CO * f->npos; /* KW_CO / 2 pairs of 2 * npos floats */
    float *sp = sums + cb * KW_CO * KG_TAPS * 8;
    __m512 a[KW_CO / 2 * KG_TAPS];
    _Pragma("GCC unroll 12") for (int q = 0; q < KW_CO / 2 * KG_TAPS; q++) a[q] = _mm512_loadu_ps(sp + 16 * q);
    for (int64_t pos = 0; pos < f->npos; pos += 8) {
        __m512 v0 = bcast8(xs[0] + pos), v1 = bcast8(xs[1] + pos), v2 = bcast8(xs[2] + pos);
        _Pragma("GCC unroll 4") for (int j = 0; j < KW_CO / 2; j++) {
            __m512 gv = _mm512_loadu_ps(gp + j * 2 * f->npos + 2 * pos);
            /* one load for its three FMAs (folded into each, the 15 loads per 12 FMAs
             * were the loop's limit: 0.71-0.88x the time without) */
            __asm__("" : "+v"(gv));
            a[j * KG_TAPS] = _mm512_fmadd_ps(gv, v0, a[j * KG_TAPS]);
            a[j * KG_TAPS + 1] = _mm512_fmadd_ps(gv, v1, a[j * KG_TAPS + 1]);
            a[j * KG_TAPS + 2] = _mm512_fmadd_ps(gv, v2, a[j * KG_TAPS + 2]);
        }
    }
    _Pragma("GCC unroll 12") for (int q = 0; q < KW_CO / 2 * KG_TAPS; q++) _mm512_storeu_ps(sp + 16 * q, a[q]);
}

/* Image b's gradient into gil, at width W and interleaved by pairs (kgrad_flat_wide):
 * position p = y * W + x of channel o at gil[(o & ~1) * npos + 16 * (p / 8) + 8 * (o & 1)
 * + p % 8], straight from the gradient's rows with masked loads and stores (a memcpy
 * per row and channel, then the interleaving pass, took 40% of the FMAs' time). The
 * positions past ow and the channels past co are never written: zeros from the start. */
AVX512F static void kgrad_interleave(const kgrad_job *jb, const flat_geom *f, int64_t b, float *gil) {
    const geom_t *g = &jb->g;
    int64_t co = jb->co, ow = g->ow, plane = g->oh * ow;
    const float *gb = jb->gr + b * co * plane;
    for (int64_t o = 0; o < co; o += 2) {
        const float *g0 = gb + o * plane, *g1 = o + 1 < co ? g0 + plane : NULL;
        float *dst = gil + o * f->npos;
        for (int64_t y = 0; y < g->oh; y++) {
            int64_t p0 = y * f->wp, p1 = p0 + ow; /* the row's flat positions [p0, p1) */
            for (int64_t m = p0 / 8; m * 8 < p1; m++) {
                int64_t l0 = p0 - 8 * m > 0 ? p0 - 8 * m : 0, l1 = p1 - 8 * m < 8 ? p1 - 8 * m : 8;
                __mmask16 k = (__mmask16)(((1u << l1) - 1) & ~((1u << l0) - 1));
                int64_t at = 8 * m - p0 + y * ow; /* where lane 0 would read in the plane */
                __m512 v = _mm512_maskz_loadu_ps(k, g0 + at);
                if (g1) v = _mm512_mask_loadu_ps(v, (__mmask16)(k << 8), g1 + at - 8);
                _mm512_mask_storeu_ps(dst + 16 * m, g1 ? (__mmask16)(k | k << 8) : k, v);
            }
        }
    }
}

AVX2 static void kgrad_flat_task(void *p, int64_t lo, int64_t hi) {
    const kgrad_job *jb = (const kgrad_job *)p;
    const geom_t *g = &jb->g;
    const flat_geom f = kgrad_flat_geom(g);
    const int wide = jb->wide;
    int64_t co = jb->co, cop = kgrad_flat_channels(wide, co), per_unit = cop * KG_TAPS * 8;
    int64_t ncb = cop / (wide ? KW_CO : KF_CO);
    int64_t ntb = (g->kw + KG_TAPS - 1) / KG_TAPS, taps = g->nc * g->kh * g->kw;
    const int64_t ntu = g->nc * g->kh * ntb; /* tap units per image range */
    /* the image's padded planes, its padded gradient (AVX-512: interleaved, on a cache
     * line, so that each 64-byte load reads one line, not two), the units' sums */
    int64_t grad_floats = wide ? cop * f.npos + 16 : co * f.npos;
    size_t floats = (size_t)(g->nc * f.plane + grad_floats + (hi - lo) * per_unit);
    float *planes = (float *)malloc(floats * sizeof(float));
    if (!planes) {
        atomic_store(jb->failed, 1);
        return;
    }
    float *gpad = planes + g->nc * f.plane, *all_sums = gpad + grad_floats;
    float *gil = (float *)(((uintptr_t)gpad + 63) & ~(uintptr_t)63);
    memset(all_sums, 0, (size_t)((hi - lo) * per_unit) * sizeof(float));
    memset(gpad, 0, (size_t)grad_floats * sizeof(float));
    memset(planes, 0, (size_t)(g->nc * f.plane) * sizeof(float));
    /* unit u: tap unit u % ntu over the images of range u / ntu */
    for (int64_t part = lo / ntu; part * ntu < hi; part++) {
        const int64_t ua = part * ntu > lo ? part * ntu : lo, ub = (part + 1) * ntu < hi ? (part + 1) * ntu : hi;
        const int64_t b0 = g->nb * part / jb->parts, b1 = g->nb * (part + 1) / jb->parts;
        for (int64_t b = b0; b < b1; b++) {
            if (wide) {
                kgrad_interleave(jb, &f, b, gil);
            } else {
                for (int64_t o = 0; o < co; o++) /* the gradient at width W (the columns past ow stay 0) */
                    for (int64_t y = 0; y < g->oh; y++)
                        memcpy(gpad + o * f.npos + y * f.wp, jb->gr + ((b * co + o) * g->oh + y) * g->ow,
                               (size_t)g->ow * sizeof(float));
            }
            for (int64_t ci = 0; ci < g->nc; ci++) /* the input planes (their margins stay 0) */
                for (int64_t y = 0; y < g->h; y++)
                    memcpy(planes + ci * f.plane + (y + g->ph) * f.wp + g->pw,
                           jb->x + ((b * g->nc + ci) * g->h + y) * g->w, (size_t)g->w * sizeof(float));
            /* a channel block's gradient stays in L1 over the units (each unit's sums are
             * its own: the same sums in the same order whatever the loops' nesting) */
            for (int64_t cb = 0; cb < ncb; cb++)
                for (int64_t u = ua; u < ub; u++) {
                    int64_t r = (u % ntu) / ntb, tb = (u % ntu) % ntb, ci = r / g->kh, ki = r % g->kh;
                    int64_t nt = g->kw - tb * KG_TAPS < KG_TAPS ? g->kw - tb * KG_TAPS : KG_TAPS;
                    const float *xs[KG_TAPS];
                    for (int64_t t = 0; t < KG_TAPS; t++)
                        xs[t] = planes + ci * f.plane + ki * g->dh * f.wp + (tb * KG_TAPS + (t < nt ? t : 0)) * g->dw;
                    float *sums = all_sums + (u - lo) * per_unit;
                    if (wide) kgrad_flat_wide(&f, xs, gil, sums, cb);
                    else kgrad_flat_unit(jb, &f, xs, gpad, sums, cb);
                }
        }
        for (int64_t u = ua; u < ub; u++) { /* the range's sums, reduced lane by lane */
            int64_t r = (u % ntu) / ntb, tb = (u % ntu) % ntb, ci = r / g->kh, ki = r % g->kh;
            int64_t nt = g->kw - tb * KG_TAPS < KG_TAPS ? g->kw - tb * KG_TAPS : KG_TAPS;
            const float *sums = all_sums + (u - lo) * per_unit;
            float *out = jb->part_out + part * co * taps;
            for (int64_t o = 0; o < co; o++)
                for (int64_t t = 0; t < nt; t++)
                    out[o * taps + (ci * g->kh + ki) * g->kw + tb * KG_TAPS + t] =
                        hsum8(_mm256_loadu_ps(sums + kgrad_flat_sum(wide, o, t)));
        }
    }
    free(planes);
}
#endif

/* kernel_grad(x, g, gk, co, nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow): gk
 * (co, nc, kh, kw) overwritten; needs the AVX2 kernels (simd()). */
static PyObject *py_kernel_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 18) return PyErr_Format(PyExc_TypeError, "kernel_grad takes 18 arguments");
    kgrad_job jb;
    if (!parse_ints(args, 3, 1, &jb.co) || !parse_geom(args, 4, &jb.g)) return NULL;
    const geom_t *g = &jb.g;
    if (jb.co < 1) return PyErr_Format(PyExc_ValueError, "kernel_grad: bad channel counts");
    if (!use_avx2) return PyErr_Format(PyExc_ValueError, "kernel_grad: needs the AVX2 kernels");
    jb.plen = (g->ow + 7) / 8 * 8 + ((g->kw - 1) * g->dw) / g->sw + 1;
    int64_t taps = g->nc * g->kh * g->kw;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, g->nb * g->nc * g->h * g->w * 4, "x") &&
        get_buf(args[1], &b[1], 0, g->nb * jb.co * g->oh * g->ow * 4, "g") &&
        get_buf(args[2], &b[2], 1, jb.co * taps * 4, "gk")) {
        jb.x = (const float *)b[0].view.buf;
        jb.gr = (const float *)b[1].view.buf;
        jb.gk = (float *)b[2].view.buf;
        _Atomic int failed = 0;
        jb.failed = &failed;
#ifdef TALLOW_X86
        int64_t units = g->nc * g->kh * ((g->kw + KG_TAPS - 1) / KG_TAPS);
        int flat = g->sh == 1 && g->sw == 1 && all_finite(jb.x, g->nb * g->nc * g->h * g->w);
        jb.parts = g->nb < KGRAD_PARTS ? (g->nb > 0 ? g->nb : 1) : KGRAD_PARTS;
        jb.wide = use_avx512 && use_avx2;
        jb.part_out = flat ? (float *)PyMem_Malloc((size_t)(jb.parts * jb.co * taps) * sizeof(float)) : NULL;
        if (flat && !jb.part_out) {
            release(b, 3);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        if (flat) {
            /* the flat form pads each image's gradient once per chunk: one chunk per
             * thread, the images in parts (each chunk pads only its parts' images) */
            units *= jb.parts;
            int64_t threads = tallow_pool_threads(), grain = (units + threads - 1) / threads;
            tallow_pool_run(kgrad_flat_task, &jb, units, grain, g->nb * g->oh * g->ow * jb.co * taps);
            sum_parts(jb.gk, jb.part_out, jb.parts, jb.co * taps);
        } else {
            tallow_pool_run(kgrad_task, &jb, units, 1, g->nb * g->oh * g->ow * jb.co * taps);
        }
        Py_END_ALLOW_THREADS
        PyMem_Free(jb.part_out);
#endif
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 3);
    return res;
}

/* ------------------------------------------------------------------ pooling */
/* Windows kh x kw at strides sh, sw over planes h x w, no padding; units are planes. */
typedef struct {
    int64_t planes, h, w, kh, kw, sh, sw, oh, ow;
    const float *x, *g;
    float *out;
    float scale;
} pool_job;

/* The max pool's pick, without a branch: "is this tap larger" is a coin toss on real
 * data, and a mispredicted branch per tap costs several times the comparison.  The tap
 * wins when it is larger or NaN (so the first maximum, or the last NaN, is kept), as in
 * PyTorch. */
static inline uint32_t pick_mask(float v, float o) {
    return (uint32_t)0 - (uint32_t)((v > o) | (v != v));
}

static inline float pick(float v, float o, uint32_t m) {
    uint32_t bv, bo;
    memcpy(&bv, &v, 4);
    memcpy(&bo, &o, 4);
    bo = (bv & m) | (bo & ~m);
    memcpy(&o, &bo, 4);
    return o;
}

#define MAX_POOL_TAPS 64

#ifdef TALLOW_X86
/* Eight consecutive windows' taps at column stride sw: a load, two loads deinterleaved
 * (sw = 2, the usual 2x2 pool) or a gather. */
AVX2 static inline __m256 load_strided8(const float *p, int64_t sw, __m256i idx) {
    if (sw == 1) return _mm256_loadu_ps(p);
    if (sw == 2) { /* the second load stops at the last tap: never past the row's end */
        __m256 hi = _mm256_maskload_ps(p + 8, _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0));
        __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(p), hi, 0x88);
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
    }
    return _mm256_i32gather_ps(p, idx, 4);
}

/* The max and the winning tap (row-major index in the window) of eight windows of output
 * row i starting at column c0, picked as pick() does. */
AVX2 static inline __m256 max8(const pool_job *j, const float *x, int64_t i, int64_t c0, __m256 *tap) {
    __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)j->sw));
    const float *win = x + i * j->sh * j->w + c0 * j->sw;
    __m256 best = load_strided8(win, j->sw, idx), t = _mm256_setzero_ps();
    for (int64_t di = 0; di < j->kh; di++)
        for (int64_t dj = di == 0 ? 1 : 0; dj < j->kw; dj++) {
            __m256 v = load_strided8(win + di * j->w + dj, j->sw, idx);
            __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            best = _mm256_blendv_ps(best, v, take);
            t = _mm256_blendv_ps(t, _mm256_castsi256_ps(_mm256_set1_epi32((int)(di * j->kw + dj))), take);
        }
    *tap = t;
    return best;
}

/* A row's windows go eight at a time; a last partial block is done again from column
 * ow - 8 (overlapping the previous one), so rows of eight windows or more need no
 * scalar tail.  Rows of fewer than eight are left to the scalar code. */
AVX2 static int64_t max_pool_plane_avx2(const pool_job *j, const float *x, float *out) {
    if (j->ow < 8) return 0;
    for (int64_t i = 0; i < j->oh; i++)
        for (int64_t c = 0; c < j->ow; c += 8) {
            int64_t c0 = c + 8 <= j->ow ? c : j->ow - 8;
            __m256 tap;
            _mm256_storeu_ps(out + i * j->ow + c0, max8(j, x, i, c0, &tap));
        }
    return j->ow;
}

/* The same for the gradient (gx zeroed): an overlapping last block routes only the
 * windows the previous block did not. */
AVX2 static int64_t max_pool_backward_plane_avx2(const pool_job *j, const float *x, const float *g, float *gx) {
    int32_t taps[8];
    int64_t off[MAX_POOL_TAPS]; /* a tap's place in its window, from the window's corner */
    if (j->ow < 8 || j->kh * j->kw > MAX_POOL_TAPS) return 0;
    for (int64_t t = 0; t < j->kh * j->kw; t++) off[t] = (t / j->kw) * j->w + t % j->kw;
    for (int64_t i = 0; i < j->oh; i++) {
        float *row = gx + i * j->sh * j->w;
        const float *grow = g + i * j->ow;
        for (int64_t c = 0; c < j->ow; c += 8) {
            int64_t c0 = c + 8 <= j->ow ? c : j->ow - 8;
            __m256 tap;
            max8(j, x, i, c0, &tap);
            _mm256_storeu_si256((__m256i *)taps, _mm256_castps_si256(tap));
            for (int64_t q = c - c0; q < 8; q++) row[(c0 + q) * j->sw + off[taps[q]]] += grow[c0 + q];
        }
    }
    return j->ow;
}

/* The 2x2 stride-2 pool's gradient (the usual one) written, not added: the windows
 * tile the plane, so every covered pixel gets its window's gradient or zero, two rows
 * of sixteen pixels per eight windows, and only the pixels no window covers (an odd
 * last row or column) are zeroed first.  Returns 0 (nothing done) for other pools
 * and for rows of fewer than eight windows. */
AVX2 static int max_pool2x2_backward_plane_avx2(const pool_job *j, const float *x, const float *g, float *gx) {
    if (j->kh != 2 || j->kw != 2 || j->sh != 2 || j->sw != 2 || j->ow < 8) return 0;
    if (j->w != 2 * j->ow)
        for (int64_t r = 0; r < 2 * j->oh; r++) gx[r * j->w + j->w - 1] = 0.0f;
    if (j->h != 2 * j->oh) memset(gx + (j->h - 1) * j->w, 0, (size_t)j->w * sizeof(float));
    const __m256i t0 = _mm256_set1_epi32(0), t1 = _mm256_set1_epi32(1), t2 = _mm256_set1_epi32(2),
                  t3 = _mm256_set1_epi32(3);
    for (int64_t i = 0; i < j->oh; i++) {
        float *r0 = gx + 2 * i * j->w, *r1 = r0 + j->w;
        for (int64_t c = 0; c < j->ow; c += 8) {
            int64_t c0 = c + 8 <= j->ow ? c : j->ow - 8; /* overlapping last block: same values */
            __m256 tapf;
            max8(j, x, i, c0, &tapf);
            __m256i tap = _mm256_castps_si256(tapf);
            __m256 gv = _mm256_loadu_ps(g + i * j->ow + c0);
            __m256 a = _mm256_and_ps(gv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(tap, t0)));
            __m256 b = _mm256_and_ps(gv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(tap, t1)));
            __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
            _mm256_storeu_ps(r0 + 2 * c0, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(r0 + 2 * c0 + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
            a = _mm256_and_ps(gv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(tap, t2)));
            b = _mm256_and_ps(gv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(tap, t3)));
            lo = _mm256_unpacklo_ps(a, b);
            hi = _mm256_unpackhi_ps(a, b);
            _mm256_storeu_ps(r1 + 2 * c0, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(r1 + 2 * c0 + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
    }
    return 1;
}
#endif

/* out = max of the window (see pick). */
static void max_pool_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++) {
        const float *restrict x = j->x + u * j->h * j->w;
        float *restrict out = j->out + u * j->oh * j->ow;
        int64_t nv = 0;
#ifdef TALLOW_X86
        if (use_avx2) nv = max_pool_plane_avx2(j, x, out);
#endif
        for (int64_t i = 0; i < j->oh; i++)
            for (int64_t c = nv; c < j->ow; c++) {
                const float *win = x + i * j->sh * j->w + c * j->sw;
                float best = win[0];
                for (int64_t di = 0; di < j->kh; di++)
                    for (int64_t dj = di == 0 ? 1 : 0; dj < j->kw; dj++) {
                        float v = win[di * j->w + dj];
                        best = pick(v, best, pick_mask(v, best));
                    }
                out[i * j->ow + c] = best;
            }
    }
}

/* gx[the window's maximum (as max_pool_task picks it)] += g; each unit zeroes its plane. */
static void max_pool_backward_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++) {
        const float *restrict x = j->x + u * j->h * j->w;
        const float *restrict g = j->g + u * j->oh * j->ow;
        float *restrict gx = j->out + u * j->h * j->w;
#ifdef TALLOW_X86
        if (use_avx2 && max_pool2x2_backward_plane_avx2(j, x, g, gx)) continue;
#endif
        memset(gx, 0, (size_t)(j->h * j->w) * sizeof(float));
        int64_t nv = 0;
#ifdef TALLOW_X86
        if (use_avx2) nv = max_pool_backward_plane_avx2(j, x, g, gx);
#endif
        for (int64_t i = 0; i < j->oh; i++)
            for (int64_t c = nv; c < j->ow; c++) {
                int64_t at = i * j->sh * j->w + c * j->sw, arg = at;
                float best = x[at];
                for (int64_t di = 0; di < j->kh; di++)
                    for (int64_t dj = di == 0 ? 1 : 0; dj < j->kw; dj++) {
                        int64_t q = at + di * j->w + dj;
                        float v = x[q];
                        uint32_t m = pick_mask(v, best);
                        best = pick(v, best, m);
                        arg = (int64_t)(((uint64_t)q & (uint64_t)(int64_t)(int32_t)m) |
                                        ((uint64_t)arg & ~(uint64_t)(int64_t)(int32_t)m));
                    }
                gx[arg] += g[i * j->ow + c];
            }
    }
}

/* out = scale * (sum of the window in row-major tap order) */
static void avg_pool_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++) {
        const float *x = j->x + u * j->h * j->w;
        float *out = j->out + u * j->oh * j->ow;
        for (int64_t i = 0; i < j->oh; i++)
            for (int64_t c = 0; c < j->ow; c++) {
                const float *win = x + i * j->sh * j->w + c * j->sw;
                float acc = 0.0f;
                for (int64_t di = 0; di < j->kh; di++)
                    for (int64_t dj = 0; dj < j->kw; dj++) acc += win[di * j->w + dj];
                out[i * j->ow + c] = acc * j->scale;
            }
    }
}

/* gx[every pixel of a window] += scale * g[window], windows in row-major order */
static void avg_pool_backward_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++) {
        const float *g = j->g + u * j->oh * j->ow;
        float *gx = j->out + u * j->h * j->w;
        memset(gx, 0, (size_t)(j->h * j->w) * sizeof(float));
        for (int64_t i = 0; i < j->oh; i++)
            for (int64_t c = 0; c < j->ow; c++) {
                float v = g[i * j->ow + c] * j->scale;
                float *win = gx + i * j->sh * j->w + c * j->sw;
                for (int64_t di = 0; di < j->kh; di++)
                    for (int64_t dj = 0; dj < j->kw; dj++) win[di * j->w + dj] += v;
            }
    }
}

enum { MAX_FWD, MAX_BWD, AVG_FWD, AVG_BWD };

/* max_pool2d(x, out, planes, h, w, kh, kw, sh, sw)
 * max_pool2d_backward(x, g, gx, planes, h, w, kh, kw, sh, sw)
 * avg_pool2d(x, out, planes, h, w, kh, kw, sh, sw)
 * avg_pool2d_backward(g, gx, planes, h, w, kh, kw, sh, sw) */
static PyObject *pool_call(PyObject *const *args, Py_ssize_t nargs, int kind) {
    int narr = kind == MAX_BWD ? 3 : 2;
    if (nargs != narr + 7) return PyErr_Format(PyExc_TypeError, "pooling takes %d arguments", narr + 7);
    int64_t a[7];
    if (!parse_ints(args, narr, 7, a)) return NULL;
    pool_job j;
    memset(&j, 0, sizeof j);
    j.planes = a[0], j.h = a[1], j.w = a[2], j.kh = a[3], j.kw = a[4], j.sh = a[5], j.sw = a[6];
    if (j.planes < 0 || j.kh < 1 || j.kw < 1 || j.sh < 1 || j.sw < 1 || j.h < j.kh || j.w < j.kw)
        return PyErr_Format(PyExc_ValueError, "pooling: bad sizes");
    j.oh = (j.h - j.kh) / j.sh + 1;
    j.ow = (j.w - j.kw) / j.sw + 1;
    j.scale = (float)(1.0 / (double)(j.kh * j.kw));
    int64_t in = j.planes * j.h * j.w * 4, pooled = j.planes * j.oh * j.ow * 4;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    int ok;
    tallow_task_fn fn;
    switch (kind) {
    case MAX_FWD:
    case AVG_FWD:
        ok = get_buf(args[0], &b[0], 0, in, "x") && get_buf(args[1], &b[1], 1, pooled, "out");
        if (ok) j.x = (const float *)b[0].view.buf, j.out = (float *)b[1].view.buf;
        fn = kind == MAX_FWD ? max_pool_task : avg_pool_task;
        break;
    case MAX_BWD:
        ok = get_buf(args[0], &b[0], 0, in, "x") && get_buf(args[1], &b[1], 0, pooled, "g") &&
             get_buf(args[2], &b[2], 1, in, "gx");
        if (ok) j.x = (const float *)b[0].view.buf, j.g = (const float *)b[1].view.buf, j.out = (float *)b[2].view.buf;
        fn = max_pool_backward_task;
        break;
    default:
        ok = get_buf(args[0], &b[0], 0, pooled, "g") && get_buf(args[1], &b[1], 1, in, "gx");
        if (ok) j.g = (const float *)b[0].view.buf, j.out = (float *)b[1].view.buf;
        fn = avg_pool_backward_task;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, &j, j.planes, plane_grain(j.h * j.w), in + pooled);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 3);
    return res;
}

static PyObject *py_max_pool2d(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return pool_call(args, nargs, MAX_FWD);
}
static PyObject *py_max_pool2d_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return pool_call(args, nargs, MAX_BWD);
}
static PyObject *py_avg_pool2d(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return pool_call(args, nargs, AVG_FWD);
}
static PyObject *py_avg_pool2d_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return pool_call(args, nargs, AVG_BWD);
}

TALLOW_SIMD_SWITCH(use_avx2)
TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

#define FC(name) (PyCFunction)(void (*)(void))name, METH_FASTCALL
static PyMethodDef methods[] = {
    {"conv_images", FC(py_conv_images), "im2col and the product an image at a time, one chunk of images per task."},
    {"set_windows", py_set_windows, METH_O, "conv_images: pack the columns from the image's planes (True) or build them."},
    {"windows", py_windows, METH_NOARGS, "Whether conv_images packs its columns from the image's planes."},
    {"set_flat", py_set_flat, METH_O, "conv_images: narrow outputs' columns over the planes' whole rows (True) or packed."},
    {"set_tap_planes", py_set_tap_planes, METH_O, "conv_images: strided layers' columns read in place from tap planes (True) or packed from phase planes."},
    {"tap_planes", py_tap_planes, METH_NOARGS, "Whether conv_images reads strided layers' columns from tap planes."},
    {"flat", py_flat, METH_NOARGS, "Whether conv_images computes narrow outputs over the planes' whole rows."},
    {"conv_transpose_images", FC(py_conv_transpose_images), "The product and col2im an image at a time, one chunk of images per task."},
    {"kernel_grad_parts", FC(py_kernel_grad_parts), "The im2col kernel gradient an image at a time, in parts."},
    {"im2col", FC(py_im2col), "Columns of f32 NCHW images (padding, stride, dilation in the gather)."},
    {"col2im", FC(py_col2im), "The adjoint of im2col: columns summed into f32 NCHW images."},
    {"direct", FC(py_direct), "Direct f32 convolution (no column matrix) for few input channels."},
    {"kernel_grad", FC(py_kernel_grad), "Direct f32 kernel gradient (no column matrix) for few input channels."},
    {"max_pool2d", FC(py_max_pool2d), "Max pooling of f32 planes."},
    {"max_pool2d_backward", FC(py_max_pool2d_backward), "Max pooling's input gradient."},
    {"avg_pool2d", FC(py_avg_pool2d), "Average pooling of f32 planes."},
    {"avg_pool2d_backward", FC(py_avg_pool2d_backward), "Average pooling's input gradient."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 direct convolution."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 flat direct convolution."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 flat direct convolution is used."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 direct convolution is used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_conv",
                                       "Compiled convolution and pooling passes of tallow.", -1, methods};

PyMODINIT_FUNC PyInit__conv(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    scratch_init();
    tallow_gemm_import();
    tallow_pool_import();
    return PyModule_Create(&moduledef);
}
