/* Compiled convolution and pooling passes on contiguous f32 NCHW arrays, split over
 * tallow's worker pool (_workers.h).
 *
 * A convolution is im2col and tallow's f32 product (_gemm.h), as in candle:
 *
 *  - conv_images: an image's columns and the product k (co, rows) @ cols (rows, pos),
 *    one image (or one block of its output channels) per unit of the pool;
 *  - conv_transpose_images: kt (rows, ci) @ x[b] then col2im, one image (or one block
 *    of its output channels) per unit;
 *  - kernel_grad_parts: dk = sum over images of g[b] @ cols[b]^T, the images cut into
 *    parts (a count the caller takes from the batch alone), each part one unit;
 *  - im2col / col2im of a whole batch, for the grouped convolutions;
 *  - max / average pooling forward and backward; units are planes.
 *
 * The units build their columns a block of output rows at a time (COLUMN_FLOATS at
 * most), in the thread's scratch, so that the product reads them from the cache.
 * Every unit is computed by one thread in a fixed order, units never write the same
 * memory, and the blocks follow the shape alone: results are bit-identical at any
 * thread count.
 *
 * Each pass is written once, as plain C loops; TASK_BUILDS compiles it for the
 * baseline instruction set and for AVX2 (target attributes: the compiler vectorises
 * the same source for each) and the module picks one at run time. The build is
 * compiled without FMA contraction (setup.py), so both builds compute the same
 * operations in the same order: the same bits.
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

#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* (the row copies stay loops: as memcpy calls, rows of 8-32 floats spent more in the
 * call than in the copy) */
#define NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))

/* TASK_BUILDS(NAME): NAME##_base and NAME##_avx2, pool tasks that run the
 * always-inlined NAME(p, lo, hi) compiled for each instruction set (the compiler
 * vectorises the same source for each); TASK(NAME) is the one this CPU and the
 * module's switch (set_simd) ask for. (No AVX-512 build: the compiler's 16-lane
 * strided loads made the 2x2 pools several times slower than its 8-lane ones.) */
#ifdef TALLOW_X86
#define TASK_BUILDS(NAME)                                                                         \
    static NO_MEMCPY_CALLS void NAME##_base(void *p, int64_t lo, int64_t hi) { NAME(p, lo, hi); } \
    static NO_MEMCPY_CALLS __attribute__((target("avx2"))) void NAME##_avx2(void *p, int64_t lo, int64_t hi) { \
        NAME(p, lo, hi);                                                                          \
    }
#define TASK(NAME) (use_avx2 ? NAME##_avx2 : NAME##_base)
#else
#define TASK_BUILDS(NAME)                                                                         \
    static NO_MEMCPY_CALLS void NAME##_base(void *p, int64_t lo, int64_t hi) { NAME(p, lo, hi); }
#define TASK(NAME) NAME##_base
#endif

/* ------------------------------------------------------------------ geometry */
/* A convolution window walk: images nc x h x w, an oh x ow grid of windows of
 * kh x kw taps, strides, padding and dilation. */
typedef struct {
    int64_t nb, nc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} geom_t;

static int parse_geom(PyObject *const *args, Py_ssize_t start, geom_t *g) {
    int64_t a[14];
    if (!parse_ints(args, start, 14, a)) return 0;
    for (int i = 0; i < 14; i++)
        if (a[i] < 0 || (i >= 4 && i <= 7 && a[i] < 1) || (i >= 10 && i <= 11 && a[i] < 1)) {
            PyErr_SetString(PyExc_ValueError, "conv geometry: bad sizes");
            return 0;
        }
    geom_t t = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]};
    *g = t;
    return 1;
}

/* For tap column kj: the output columns [*j0, *j1) whose input column is inside the image. */
ALWAYS_INLINE void valid_cols(const geom_t *g, int64_t kj, int64_t *j0, int64_t *j1) {
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

/* Output rows per block of columns: as many as keep a block's columns within
 * COLUMN_FLOATS (at least one row), from the shape alone. */
#define COLUMN_FLOATS ((int64_t)1 << 17)
static int64_t block_rows(const geom_t *g) {
    int64_t per_row = g->nc * g->kh * g->kw * g->ow, n = per_row ? COLUMN_FLOATS / per_row : g->oh;
    return n < 1 ? 1 : n > g->oh ? (g->oh ? g->oh : 1) : n;
}

/* ------------------------------------------------------------------ im2col / col2im */
/* Plane `src`'s columns for output rows [i0, i1): column row ki * kw + kj (one per tap)
 * at dst + (ki * kw + kj) * rs, position (i - i0) * ow + j = src[i*sh - ph + ki*dh,
 * j*sw - pw + kj*dw], zero outside the image. */
ALWAYS_INLINE void plane_columns(const geom_t *g, const float *src, float *dst, int64_t rs, int64_t i0,
                                 int64_t i1) {
    const int64_t ow = g->ow, sw = g->sw;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
            float *d = dst + (ki * g->kw + kj) * rs;
            int64_t j0, j1;
            valid_cols(g, kj, &j0, &j1);
            for (int64_t i = i0; i < i1; i++, d += ow) {
                const int64_t r = i * g->sh - g->ph + ki * g->dh;
                if (r < 0 || r >= g->h) {
                    for (int64_t j = 0; j < ow; j++) d[j] = 0.0f;
                    continue;
                }
                /* column j of the window reads row[j * sw] (only for j in [j0, j1)) */
                const float *row = src + r * g->w + kj * g->dw - g->pw;
                for (int64_t j = 0; j < j0; j++) d[j] = 0.0f;
                if (sw == 1) {
#pragma GCC ivdep
                    for (int64_t j = j0; j < j1; j++) d[j] = row[j];
                } else if (sw == 2) { /* (a constant stride: vectorised) */
#pragma GCC ivdep
                    for (int64_t j = j0; j < j1; j++) d[j] = row[j * 2];
                } else {
#pragma GCC ivdep
                    for (int64_t j = j0; j < j1; j++) d[j] = row[j * sw];
                }
                for (int64_t j = j1; j < ow; j++) d[j] = 0.0f;
            }
        }
}

/* The adjoint: plane `out` += the columns of input rows [i0, i1) (col2im's geometry:
 * h x w the output plane, oh x ow the grid of columns), in the order (ki, kj, i, j). */
ALWAYS_INLINE void plane_add_columns(const geom_t *g, const float *src, float *out, int64_t rs, int64_t i0,
                                     int64_t i1) {
    const int64_t ow = g->ow, sw = g->sw;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
            const float *s = src + (ki * g->kw + kj) * rs;
            int64_t j0, j1;
            valid_cols(g, kj, &j0, &j1);
            for (int64_t i = i0; i < i1; i++, s += ow) {
                const int64_t r = i * g->sh - g->ph + ki * g->dh;
                if (r < 0 || r >= g->h) continue;
                float *row = out + r * g->w + kj * g->dw - g->pw;
                if (sw == 1) {
#pragma GCC ivdep
                    for (int64_t j = j0; j < j1; j++) row[j] += s[j];
                } else {
                    for (int64_t j = j0; j < j1; j++) row[j * sw] += s[j];
                }
            }
        }
}

/* An image's columns for output rows [i0, i1): (rows, (i1 - i0) * ow), channel after
 * channel. */
ALWAYS_INLINE void image_columns(const geom_t *g, const float *xb, float *cols, int64_t i0, int64_t i1) {
    const int64_t n = (i1 - i0) * g->ow, taps = g->kh * g->kw;
    for (int64_t c = 0; c < g->nc; c++) plane_columns(g, xb + c * g->h * g->w, cols + c * taps * n, n, i0, i1);
}

/* Whether an image's columns are the image itself: a 1x1 kernel, no padding, stride 1
 * over the whole image (rows = channels, positions = pixels). */
static int columns_are_image(const geom_t *g) {
    return g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0 && g->sh == 1 && g->sw == 1 &&
           g->oh == g->h && g->ow == g->w;
}

/* im2col / col2im of a whole batch: cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*ow + j],
 * so that (b, rows, pos) and (rows, b, pos) layouts come from the same pass; units are
 * image planes (b, c). col2im zeroes and fills its own output plane. */
typedef struct {
    geom_t g;
    float *x, *cols; /* col2im: x is the output, cols the input */
    int64_t sb, sr;
} cols_job;

ALWAYS_INLINE void im2col_task(void *p, int64_t lo, int64_t hi) {
    const cols_job *jb = (const cols_job *)p;
    const geom_t *g = &jb->g;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / g->nc, c = u % g->nc;
        float *dst = jb->cols + b * jb->sb + c * g->kh * g->kw * jb->sr;
        plane_columns(g, jb->x + u * g->h * g->w, dst, jb->sr, 0, g->oh);
    }
}

ALWAYS_INLINE void col2im_task(void *p, int64_t lo, int64_t hi) {
    const cols_job *jb = (const cols_job *)p;
    const geom_t *g = &jb->g;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / g->nc, c = u % g->nc;
        float *out = jb->x + u * g->h * g->w;
        memset(out, 0, (size_t)(g->h * g->w) * sizeof(float));
        plane_add_columns(g, jb->cols + b * jb->sb + c * g->kh * g->kw * jb->sr, out, jb->sr, 0, g->oh);
    }
}
TASK_BUILDS(im2col_task)
TASK_BUILDS(col2im_task)

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
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow;
    /* the furthest column element written or read, from the two strides */
    const int64_t need = g->nb && rows && pos ? ((g->nb - 1) * jb.sb + (rows - 1) * jb.sr + pos) * 4 : 0;
    const int64_t img = g->nb * g->nc * g->h * g->w * 4;
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    int ok = adjoint ? get_buf(args[0], &b[0], 0, need, "cols") && get_buf(args[1], &b[1], 1, img, "x")
                     : get_buf(args[0], &b[1], 0, img, "x") && get_buf(args[1], &b[0], 1, need, "cols");
    if (ok) {
        jb.cols = (float *)b[0].view.buf;
        jb.x = (float *)b[1].view.buf;
        tallow_task_fn fn = adjoint ? TASK(col2im_task) : TASK(im2col_task);
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, &jb, g->nb * g->nc, plane_grain(g->kh * g->kw * pos), need + img);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
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

/* ------------------------------------------------------------------ im2col and the product */
/* The first of n channels in block i of `blocks`, on whole 8-row tiles of the product
 * (i = blocks: n). Each element is the same product's sum whichever block computes it:
 * the same bits for any count. */
static int64_t channel_block(int64_t n, int64_t blocks, int64_t i) {
    if (i >= blocks) return n;
    const int64_t tiles = (n + 7) / 8;
    return 8 * (tiles * i / blocks);
}

/* conv_images / conv_transpose_images / kernel_grad_parts. */
typedef struct {
    geom_t g;
    const float *x, *k; /* kernel_grad_parts: k is the output gradient */
    float *y;           /* the output (kernel_grad_parts: its parts) */
    int64_t ch;         /* the kernel's other channel count: c_out (forward, kernel gradient), c_in (transposed) */
    int64_t units;      /* units per image (forward) or per part (kernel gradient): blocks of channels */
    int64_t parts;      /* kernel_grad_parts: parts of the batch */
    _Atomic int *failed;
} images_job;

/* Unit u: blocks of output channels [o0, o1) of image u / units. For each block of
 * output rows, the image's columns in the scratch, then the product k[o0:o1] @ cols,
 * straight into y when the block is the whole image, else through the scratch. */
ALWAYS_INLINE void forward_task(void *p, int64_t lo, int64_t hi) {
    const images_job *ij = (const images_job *)p;
    const geom_t *g = &ij->g;
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow, br = block_rows(g);
    const int64_t n_max = br * g->ow, whole = br >= g->oh;
    const size_t floats = (size_t)(rows * n_max + (whole ? 0 : ij->ch * n_max));
    float *cols = scratch_get(floats);
    if (!cols) {
        atomic_store(ij->failed, 1);
        return;
    }
    float *tmp = cols + rows * n_max;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / ij->units, o0 = channel_block(ij->ch, ij->units, u % ij->units);
        const int64_t m = channel_block(ij->ch, ij->units, u % ij->units + 1) - o0;
        if (m <= 0) continue;
        const float *xb = ij->x + b * g->nc * g->h * g->w, *k = ij->k + o0 * rows;
        float *y = ij->y + (b * ij->ch + o0) * pos;
        for (int64_t i0 = 0; i0 < g->oh; i0 += br) {
            const int64_t i1 = i0 + br < g->oh ? i0 + br : g->oh, n = (i1 - i0) * g->ow;
            image_columns(g, xb, cols, i0, i1);
            float *c = whole ? y : tmp;
            if (!tallow_gemm->product(k, 0, rows, 1, cols, 0, n, 1, c, 1, m, n, rows, 0)) {
                atomic_store(ij->failed, 1);
                goto done;
            }
            if (!whole)
                for (int64_t o = 0; o < m; o++) memcpy(y + o * pos + i0 * g->ow, tmp + o * n, (size_t)n * sizeof(float));
        }
    }
done:
    scratch_done(cols, floats);
}

/* Unit u: output channels [c0, c1) (a block, in whole 8-channel tiles) of image u /
 * units: for each block of input rows, their columns kt[c0:c1] (rows, ci) @ x[b][:,
 * block] in the scratch, then added into out[b] (col2im's geometry: nc output
 * channels of h x w, the oh x ow input grid), each plane zeroed first. An output
 * plane's sums do not depend on the blocks of channels: the same bits for any units. */
ALWAYS_INLINE void transposed_task(void *p, int64_t lo, int64_t hi) {
    const images_job *ij = (const images_job *)p;
    const geom_t *g = &ij->g;
    const int64_t taps = g->kh * g->kw, pos = g->oh * g->ow, br = block_rows(g), plane = g->h * g->w;
    const size_t floats = (size_t)(g->nc * taps * br * g->ow);
    float *cols = scratch_get(floats);
    if (!cols) {
        atomic_store(ij->failed, 1);
        return;
    }
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / ij->units, c0 = channel_block(g->nc, ij->units, u % ij->units);
        const int64_t c1 = channel_block(g->nc, ij->units, u % ij->units + 1);
        if (c0 >= c1) continue;
        float *out = ij->y + (b * g->nc + c0) * plane;
        const float *xb = ij->x + b * ij->ch * pos, *kt = ij->k + c0 * taps * ij->ch;
        memset(out, 0, (size_t)((c1 - c0) * plane) * sizeof(float));
        for (int64_t i0 = 0; i0 < g->oh; i0 += br) {
            const int64_t i1 = i0 + br < g->oh ? i0 + br : g->oh, n = (i1 - i0) * g->ow;
            if (!tallow_gemm->product(kt, 0, ij->ch, 1, xb + i0 * g->ow, 0, pos, 1, cols, 1, (c1 - c0) * taps, n,
                                      ij->ch, 0)) {
                atomic_store(ij->failed, 1);
                goto done;
            }
            for (int64_t c = 0; c < c1 - c0; c++)
                plane_add_columns(g, cols + c * taps * n, out + c * plane, n, i0, i1);
        }
    }
done:
    scratch_done(cols, floats);
}

/* Unit t: part t / units (images [a, z)), its rows [r0, r1) of the output gradient's
 * channels: dk[r0:r1] = sum over the part's images and blocks of output rows of
 * g[b][r0:r1, block] @ cols^T, in that order (a 1x1 stride-1 kernel's columns, the
 * image itself, read in place). */
ALWAYS_INLINE void kernel_grad_task(void *p, int64_t lo, int64_t hi) {
    const images_job *kj = (const images_job *)p;
    const geom_t *g = &kj->g;
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow, co = kj->ch;
    const int in_place = columns_are_image(g);
    const int64_t br = in_place ? g->oh : block_rows(g);
    const size_t floats = in_place ? 0 : (size_t)(rows * br * g->ow);
    float *cols = in_place ? NULL : scratch_get(floats);
    if (!in_place && !cols) {
        atomic_store(kj->failed, 1);
        return;
    }
    for (int64_t t = lo; t < hi; t++) {
        const int64_t part = t / kj->units, r0 = channel_block(co, kj->units, t % kj->units);
        const int64_t r1 = channel_block(co, kj->units, t % kj->units + 1);
        if (r0 >= r1) continue;
        const int64_t a = g->nb * part / kj->parts, z = g->nb * (part + 1) / kj->parts;
        float *dk = kj->y + (part * co + r0) * rows;
        if (a == z) memset(dk, 0, (size_t)((r1 - r0) * rows) * sizeof(float));
        for (int64_t b = a; b < z; b++)
            for (int64_t i0 = 0; i0 < g->oh; i0 += br) {
                const int64_t i1 = i0 + br < g->oh ? i0 + br : g->oh, n = (i1 - i0) * g->ow;
                const float *xb = kj->x + b * g->nc * g->h * g->w, *c = xb;
                if (!in_place) {
                    image_columns(g, xb, cols, i0, i1);
                    c = cols;
                }
                /* dk (+)= g[b][r0:r1, block] (m, n) @ cols^T (n, rows); in place, cols^T
                 * is x[b] read transposed (row = pixel, column = channel) */
                const float *gb = kj->k + (b * co + r0) * pos + i0 * g->ow;
                if (!tallow_gemm->product(gb, 0, pos, 1, c, 0, 1, in_place ? pos : n, dk, 1, r1 - r0, rows, n,
                                          b > a || i0 > 0)) {
                    atomic_store(kj->failed, 1);
                    goto done;
                }
            }
    }
done:
    if (cols) scratch_done(cols, floats);
}
TASK_BUILDS(forward_task)
TASK_BUILDS(transposed_task)
TASK_BUILDS(kernel_grad_task)

enum { FORWARD, TRANSPOSED, KERNEL_GRAD };

/* conv_images(x, k, y, co, geometry[, units]): x (nb, nc, h, w), k (co, nc * kh * kw),
 * y (nb, co, oh, ow).
 * conv_transpose_images(x, kt, out, ci, <col2im's geometry>[, units]): x (nb, ci, oh,
 * ow), kt (nc * kh * kw, ci), out (nb, nc, h, w).
 * kernel_grad_parts(x, g, parts_out, parts, co, geometry[, units]): x (nb, nc, h, w), g
 * (nb, co, oh, ow), parts_out (parts, co, nc * kh * kw), the parts' sum in parts_out[0].
 * All overwrite their output (zeros for an empty product). */
static PyObject *images_call(PyObject *const *args, Py_ssize_t nargs, int kind) {
    static const char *names[] = {"conv_images", "conv_transpose_images", "kernel_grad_parts"};
    const char *name = names[kind];
    const Py_ssize_t at = kind == KERNEL_GRAD ? 5 : 4; /* the geometry's first argument */
    if (nargs != at + 14 && nargs != at + 15)
        return PyErr_Format(PyExc_TypeError, "%s: wrong number of arguments", name);
    images_job ij;
    int64_t counts[2];
    ij.units = 1, ij.parts = 1;
    if (!parse_ints(args, 3, at - 3, counts) || !parse_geom(args, at, &ij.g) ||
        (nargs == at + 15 && !parse_ints(args, at + 14, 1, &ij.units)))
        return NULL;
    if (kind == KERNEL_GRAD)
        ij.parts = counts[0], ij.ch = counts[1];
    else
        ij.ch = counts[0];
    if (ij.ch < 1 || ij.parts < 1) return PyErr_Format(PyExc_ValueError, "%s: bad channel or part count", name);
    if (ij.units < 1 || ij.units > (kind == TRANSPOSED ? (ij.g.nc > 0 ? ij.g.nc : 1) : ij.ch))
        return PyErr_Format(PyExc_ValueError, "%s: bad unit count", name);
    if (!tallow_gemm) return PyErr_Format(PyExc_RuntimeError, "%s: the product module is missing", name);
    const geom_t *g = &ij.g;
    const int64_t rows = g->nc * g->kh * g->kw, pos = g->oh * g->ow, image = g->nc * g->h * g->w;
    const int64_t x_floats = g->nb * (kind == TRANSPOSED ? ij.ch * pos : image);
    const int64_t k_floats = kind == KERNEL_GRAD ? g->nb * ij.ch * pos : ij.ch * rows;
    const int64_t y_floats = kind == KERNEL_GRAD ? ij.parts * ij.ch * rows : g->nb * (kind == TRANSPOSED ? image : ij.ch * pos);
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, x_floats * 4, "x") && get_buf(args[1], &b[1], 0, k_floats * 4, "kernel") &&
        get_buf(args[2], &b[2], 1, y_floats * 4, "out")) {
        ij.x = (const float *)b[0].view.buf, ij.k = (const float *)b[1].view.buf, ij.y = (float *)b[2].view.buf;
        _Atomic int failed = 0;
        ij.failed = &failed;
        tallow_task_fn fn = kind == FORWARD ? TASK(forward_task) : kind == TRANSPOSED ? TASK(transposed_task)
                                                                                    : TASK(kernel_grad_task);
        const int64_t units = kind == KERNEL_GRAD ? ij.parts * ij.units : g->nb * ij.units;
        Py_BEGIN_ALLOW_THREADS
        if (pos > 0 && rows > 0) {
            tallow_pool_run(fn, &ij, units, 1, (x_floats + y_floats + k_floats) * 4);
            if (kind == KERNEL_GRAD && !atomic_load(&failed)) sum_parts(ij.y, ij.y, ij.parts, ij.ch * rows);
        } else {
            memset(ij.y, 0, (size_t)(kind == KERNEL_GRAD ? ij.ch * rows : y_floats) * sizeof(float));
        }
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
    }
    release(b, 3);
    return res;
}

static PyObject *py_conv_images(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return images_call(args, nargs, FORWARD);
}

static PyObject *py_conv_transpose_images(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return images_call(args, nargs, TRANSPOSED);
}

static PyObject *py_kernel_grad_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return images_call(args, nargs, KERNEL_GRAD);
}

/* ------------------------------------------------------------------ pooling */
/* Windows kh x kw at strides sh, sw over planes h x w, no padding; units are planes. */
typedef struct {
    int64_t planes, h, w, kh, kw, sh, sw, oh, ow;
    const float *x, *g;
    float *out;
    float scale;
    _Atomic int *failed; /* the backward's tap offsets could not be allocated */
} pool_job;

/* The max pool's pick, a select (vectorised) rather than a branch: "is this tap
 * larger" is a coin toss on real data. The tap wins when it is larger or NaN, so the
 * first maximum, or the last NaN, is kept, as in PyTorch. */
#define TAKES(v, o) (((v) > (o)) | ((v) != (v)))

/* Windows per block of a row's arg-max (the backward's stack arrays). */
#define POOL_BLOCK 64

/* The pools' passes take the column stride and the window as arguments that
 * POOL_SHAPES calls with constants for the usual 2x2 windows of stride 2 (the
 * compiler unrolls the taps and vectorises the loop over the windows) and for the
 * column strides 1 and 2 (vectorised loads), else with the variables. */
#define POOL_SHAPES(FN, j, ...)                                                                    \
    ((j)->kh == 2 && (j)->kw == 2 && (j)->sw == 2 ? FN(2, 2, 2, j, __VA_ARGS__)                    \
     : (j)->sw == 1                               ? FN(1, (j)->kh, (j)->kw, j, __VA_ARGS__)        \
     : (j)->sw == 2                               ? FN(2, (j)->kh, (j)->kw, j, __VA_ARGS__)        \
                                                  : FN((j)->sw, (j)->kh, (j)->kw, j, __VA_ARGS__))

/* The rows' loops read the window's sizes from locals and write through restrict
 * pointers: through the job, every store could have changed them, and the loops
 * stayed scalar. */

/* out = max of the window, for a whole output row. */
ALWAYS_INLINE void max_pool_row(const int64_t sw, const int64_t kh, const int64_t kw, const pool_job *j,
                                const float *restrict win, float *restrict out) {
    const int64_t ow = j->ow, w = j->w;
    for (int64_t c = 0; c < ow; c++) {
        float best = win[c * sw];
        for (int64_t di = 0; di < kh; di++)
            for (int64_t dj = di == 0 ? 1 : 0; dj < kw; dj++) {
                const float v = win[di * w + c * sw + dj];
                best = TAKES(v, best) ? v : best;
            }
        out[c] = best;
    }
}

ALWAYS_INLINE void max_pool_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++)
        for (int64_t i = 0; i < j->oh; i++)
            POOL_SHAPES(max_pool_row, j, j->x + (u * j->h + i * j->sh) * j->w, j->out + (u * j->oh + i) * j->ow);
}

/* gx[the window's maximum (as max_pool_task picks it)] += g for a row of windows:
 * the winning taps of a block of windows found with selects, then each window's
 * gradient added at its winner (`off`: a tap's place from its window's corner), the
 * windows in order. */
ALWAYS_INLINE void max_pool_backward_row(const int64_t sw, const int64_t kh, const int64_t kw, const pool_job *j,
                                         const float *restrict win, const float *restrict g, float *restrict gx,
                                         const int64_t *restrict off) {
    const int64_t ow = j->ow, w = j->w;
    int32_t tap[POOL_BLOCK];
    for (int64_t c0 = 0; c0 < ow; c0 += POOL_BLOCK) {
        const int64_t n = ow - c0 < POOL_BLOCK ? ow - c0 : POOL_BLOCK;
        const float *restrict wb = win + c0 * sw;
        for (int64_t c = 0; c < n; c++) {
            float best = wb[c * sw];
            int32_t t = 0;
            for (int64_t di = 0; di < kh; di++)
                for (int64_t dj = di == 0 ? 1 : 0; dj < kw; dj++) {
                    const float v = wb[di * w + c * sw + dj];
                    const int take = TAKES(v, best);
                    best = take ? v : best;
                    t = take ? (int32_t)(di * kw + dj) : t;
                }
            tap[c] = t;
        }
        for (int64_t c = 0; c < n; c++) gx[(c0 + c) * sw + off[tap[c]]] += g[c0 + c];
    }
}

/* Windows that tile the plane (strides = window, as max_pool2d's default): each input
 * element is in one window at most, so a row of windows writes its kh input rows
 * outright, 0 + the gradient at each winner (the bits of the adding route) and zero
 * elsewhere, with selects the compiler vectorises, where the route scatters into a
 * zeroed plane. (`off` unused: the rows' shared signature.) */
ALWAYS_INLINE void max_pool_backward_tiles_row(const int64_t sw, const int64_t kh, const int64_t kw,
                                               const pool_job *j, const float *restrict win,
                                               const float *restrict g, float *restrict gx,
                                               const int64_t *restrict off) {
    (void)off;
    const int64_t ow = j->ow, w = j->w;
    float tap[POOL_BLOCK];
    for (int64_t c0 = 0; c0 < ow; c0 += POOL_BLOCK) {
        const int64_t n = ow - c0 < POOL_BLOCK ? ow - c0 : POOL_BLOCK;
        const float *restrict wb = win + c0 * sw;
        for (int64_t c = 0; c < n; c++) {
            float best = wb[c * sw], t = 0.0f;
            for (int64_t di = 0; di < kh; di++)
                for (int64_t dj = di == 0 ? 1 : 0; dj < kw; dj++) {
                    const float v = wb[di * w + c * sw + dj];
                    const int take = TAKES(v, best);
                    best = take ? v : best;
                    t = take ? (float)(di * kw + dj) : t;
                }
            tap[c] = t;
        }
        for (int64_t di = 0; di < kh; di++) {
            float *restrict row = gx + di * w + c0 * sw;
            for (int64_t c = 0; c < n; c++) {
                const float routed = 0.0f + g[c0 + c];
                for (int64_t dj = 0; dj < kw; dj++) row[c * sw + dj] = tap[c] == (float)(di * kw + dj) ? routed : 0.0f;
            }
        }
    }
}

/* Each unit routes its plane's rows of windows in order: tiling windows write their
 * rows outright (the rest of the plane zeroed), others add into the zeroed plane in
 * blocks of POOL_BLOCK windows. */
ALWAYS_INLINE void max_pool_backward_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    int64_t *off = (int64_t *)malloc((size_t)(j->kh * j->kw) * sizeof(int64_t));
    if (!off) {
        atomic_store(j->failed, 1);
        return;
    }
    for (int64_t t = 0; t < j->kh * j->kw; t++) off[t] = (t / j->kw) * j->w + t % j->kw;
    const int tiling = j->sh == j->kh && j->sw == j->kw;
    for (int64_t u = lo; u < hi; u++) {
        const float *x = j->x + u * j->h * j->w, *g = j->g + u * j->oh * j->ow;
        float *gx = j->out + u * j->h * j->w;
        if (tiling) {
            const int64_t covered = j->ow * j->kw; /* columns in a window */
            for (int64_t i = 0; i < j->oh; i++) {
                float *rows = gx + i * j->sh * j->w;
                POOL_SHAPES(max_pool_backward_tiles_row, j, x + i * j->sh * j->w, g + i * j->ow, rows, off);
                for (int64_t di = 0; di < j->kh && covered < j->w; di++)
                    memset(rows + di * j->w + covered, 0, (size_t)(j->w - covered) * sizeof(float));
            }
            const int64_t done = j->oh * j->kh; /* rows in a window */
            memset(gx + done * j->w, 0, (size_t)((j->h - done) * j->w) * sizeof(float));
            continue;
        }
        memset(gx, 0, (size_t)(j->h * j->w) * sizeof(float));
        for (int64_t i = 0; i < j->oh; i++)
            POOL_SHAPES(max_pool_backward_row, j, x + i * j->sh * j->w, g + i * j->ow, gx + i * j->sh * j->w, off);
    }
    free(off);
}

/* out = scale * (the window's sum in row-major tap order), for a whole output row. */
ALWAYS_INLINE void avg_pool_row(const int64_t sw, const int64_t kh, const int64_t kw, const pool_job *j,
                                const float *restrict win, float *restrict out) {
    const int64_t ow = j->ow, w = j->w;
    const float scale = j->scale;
    for (int64_t c = 0; c < ow; c++) {
        float acc = 0.0f;
        for (int64_t di = 0; di < kh; di++)
            for (int64_t dj = 0; dj < kw; dj++) acc += win[di * w + c * sw + dj];
        out[c] = acc * scale;
    }
}

ALWAYS_INLINE void avg_pool_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++)
        for (int64_t i = 0; i < j->oh; i++)
            POOL_SHAPES(avg_pool_row, j, j->x + (u * j->h + i * j->sh) * j->w, j->out + (u * j->oh + i) * j->ow);
}

/* gx[every pixel of a window] += scale * g[window]: rows of windows in order, and in
 * each, tap by tap over the row's windows. */
ALWAYS_INLINE void avg_pool_backward_row(const int64_t sw, const int64_t kh, const int64_t kw, const pool_job *j,
                                         const float *restrict g, float *restrict gx) {
    const int64_t ow = j->ow, w = j->w;
    const float scale = j->scale;
    for (int64_t di = 0; di < kh; di++)
        for (int64_t dj = 0; dj < kw; dj++) {
            float *restrict t = gx + di * w + dj;
            for (int64_t c = 0; c < ow; c++) t[c * sw] += g[c] * scale;
        }
}

ALWAYS_INLINE void avg_pool_backward_task(void *p, int64_t lo, int64_t hi) {
    const pool_job *j = (const pool_job *)p;
    for (int64_t u = lo; u < hi; u++) {
        float *gx = j->out + u * j->h * j->w;
        memset(gx, 0, (size_t)(j->h * j->w) * sizeof(float));
        for (int64_t i = 0; i < j->oh; i++)
            POOL_SHAPES(avg_pool_backward_row, j, j->g + (u * j->oh + i) * j->ow, gx + i * j->sh * j->w);
    }
}
TASK_BUILDS(max_pool_task)
TASK_BUILDS(max_pool_backward_task)
TASK_BUILDS(avg_pool_task)
TASK_BUILDS(avg_pool_backward_task)

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
        fn = kind == MAX_FWD ? TASK(max_pool_task) : TASK(avg_pool_task);
        break;
    case MAX_BWD:
        ok = get_buf(args[0], &b[0], 0, in, "x") && get_buf(args[1], &b[1], 0, pooled, "g") &&
             get_buf(args[2], &b[2], 1, in, "gx");
        if (ok) j.x = (const float *)b[0].view.buf, j.g = (const float *)b[1].view.buf, j.out = (float *)b[2].view.buf;
        fn = TASK(max_pool_backward_task);
        break;
    default:
        ok = get_buf(args[0], &b[0], 0, pooled, "g") && get_buf(args[1], &b[1], 1, in, "gx");
        if (ok) j.g = (const float *)b[0].view.buf, j.out = (float *)b[1].view.buf;
        fn = TASK(avg_pool_backward_task);
    }
    if (ok) {
        _Atomic int failed = 0;
        j.failed = &failed;
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fn, &j, j.planes, plane_grain(j.h * j.w), in + pooled);
        Py_END_ALLOW_THREADS
        res = none_or_no_memory(atomic_load(&failed));
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

static PyMethodDef methods[] = {
    {"conv_images", FC(py_conv_images), "im2col and the product an image (or a block of its channels) per task."},
    {"conv_transpose_images", FC(py_conv_transpose_images), "The product and col2im an image (or a block of its channels) per task."},
    {"kernel_grad_parts", FC(py_kernel_grad_parts), "The im2col kernel gradient, the batch in parts."},
    {"im2col", FC(py_im2col), "Columns of f32 NCHW images (padding, stride, dilation in the gather)."},
    {"col2im", FC(py_col2im), "The adjoint of im2col: columns summed into f32 NCHW images."},
    {"max_pool2d", FC(py_max_pool2d), "Max pooling of f32 planes."},
    {"max_pool2d_backward", FC(py_max_pool2d_backward), "Max pooling's input gradient."},
    {"avg_pool2d", FC(py_avg_pool2d), "Average pooling of f32 planes."},
    {"avg_pool2d_backward", FC(py_avg_pool2d_backward), "Average pooling's input gradient."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 builds of the passes."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 builds are used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_conv",
                                       "Compiled convolution and pooling passes of tallow.", -1, methods};

PyMODINIT_FUNC PyInit__conv(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
#endif
    scratch_init();
    tallow_gemm_import();
    tallow_pool_import();
    return PyModule_Create(&moduledef);
}
