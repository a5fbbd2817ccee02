/* Compiled steps of a Llama decoder layer on contiguous f32 arrays (tallow's decode path):
 * rms_norm (with the residual add fused), interleaved rotary embedding fused with the
 * key/value cache write, causal attention over the cache, silu(gate) * up, and f32 / f16
 * matrix-vector products.  The float kernels are written once (_ops_body.h) and
 * compiled for the baseline instruction set and for AVX2+FMA, chosen at import; both
 * builds give the same bits.  These are float computations whose rounding differs from
 * the Tensor-level ops' only in summation order; the tests compare within f32 tolerance.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "_workers.h"

static int use_avx2 = 0;


/* ------------------------------------------------------------------ the builds */
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
/* (The 32-byte vectors pass between static, inlined functions of one build only.) */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef struct {
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a x */
    float (*row)(const void *w, int half, int64_t k, const float *x); /* a weight row . x */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    float (*exp_shift_sum)(float *p, int64_t n, float mx);
    void (*silu_mul)(const float *g, const float *u, float *out, int64_t n);
} ops_set;

#define SUFFIX generic
#define TARGET
#include "_ops_body.h"
#undef SUFFIX
#undef TARGET
#ifdef TALLOW_X86
#define SUFFIX avx2
#define TARGET AVX2
#define BUILD_AVX2
#include "_ops_body.h"
#undef SUFFIX
#undef TARGET
#undef BUILD_AVX2
#define OPS (use_avx2 ? &ops_avx2 : &ops_generic)
#else
#define OPS (&ops_generic)
#endif

/* ------------------------------------------------------------------ arguments */
static int ints(PyObject *const *args, Py_ssize_t first, Py_ssize_t count, int64_t *out) {
    for (Py_ssize_t i = 0; i < count; i++) {
        out[i] = PyLong_AsLongLong(args[first + i]);
        if (out[i] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative size or position");
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ rms_norm */
static void rms_row(const float *x, const float *w, float *out, int64_t dim, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t i = 0; i < dim; i++) out[i] = (x[i] * r) * w[i];
}

/* rms_norm(x, w, out, rows, dim, eps, residual_or_None): with a residual y, first x += y. */
static PyObject *py_rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "rms_norm takes 7 arguments");
    int64_t d[2];
    if (!ints(args, 3, 2, d)) return NULL;
    float eps = (float)PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return NULL;
    int64_t rows = d[0], dim = d[1];
    int has_res = args[6] != Py_None;
    buf_t b[4];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], has_res, rows * dim * 4, "x") && get_buf(args[1], &b[1], 0, dim * 4, "w") &&
        get_buf(args[2], &b[2], 1, rows * dim * 4, "out") &&
        (!has_res || get_buf(args[6], &b[3], 0, rows * dim * 4, "residual"))) {
        float *x = (float *)b[0].view.buf, *out = (float *)b[2].view.buf;
        const float *w = (const float *)b[1].view.buf;
        for (int64_t r = 0; r < rows; r++) {
            float *xr = x + r * dim;
            if (has_res) {
                const float *y = (const float *)b[3].view.buf + r * dim;
                for (int64_t i = 0; i < dim; i++) xr[i] += y[i];
            }
            rms_row(xr, w, out + r * dim, dim, eps);
        }
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 4);
    return res;
}

/* ------------------------------------------------------------------ rope + cache write */
/* rope_store(qkv, s, nh, nkv, d, cos, sin, pos0, q_out, kcache, vcache, ctx):
 * qkv (s, (nh + 2 nkv) d): rows [q heads | k heads | v heads]; the interleaved rotation
 * (pairs x[2i], x[2i+1]) of q goes to q_out (s, nh, d), of k to kcache (nkv, ctx, d) at
 * position pos0 + row, v is copied to vcache.  cos/sin: (ctx, d/2). */
static void rope_pair(const float *x, float *y, const float *c, const float *sn, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        y[2 * i] = x0 * c[i] - x1 * sn[i];
        y[2 * i + 1] = x0 * sn[i] + x1 * c[i];
    }
}

static PyObject *py_rope_store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 12) return PyErr_Format(PyExc_TypeError, "rope_store takes 12 arguments");
    int64_t a[4], pos0, ctx;
    if (!ints(args, 1, 4, a) || !ints(args, 7, 1, &pos0) || !ints(args, 11, 1, &ctx)) return NULL;
    int64_t s = a[0], nh = a[1], nkv = a[2], d = a[3], half = d / 2, width = (nh + 2 * nkv) * d;
    if (d % 2 || pos0 + s > ctx) return PyErr_Format(PyExc_ValueError, "rope_store: odd head size or past the context");
    buf_t b[6];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, s * width * 4, "qkv") && get_buf(args[5], &b[1], 0, ctx * half * 4, "cos") &&
        get_buf(args[6], &b[2], 0, ctx * half * 4, "sin") && get_buf(args[8], &b[3], 1, s * nh * d * 4, "q_out") &&
        get_buf(args[9], &b[4], 1, nkv * ctx * d * 4, "kcache") && get_buf(args[10], &b[5], 1, nkv * ctx * d * 4, "vcache")) {
        const float *qkv = (const float *)b[0].view.buf;
        float *q = (float *)b[3].view.buf, *kc = (float *)b[4].view.buf, *vc = (float *)b[5].view.buf;
        for (int64_t r = 0; r < s; r++) {
            const float *row = qkv + r * width;
            int64_t pos = pos0 + r;
            const float *c = (const float *)b[1].view.buf + pos * half, *sn = (const float *)b[2].view.buf + pos * half;
            for (int64_t h = 0; h < nh; h++) rope_pair(row + h * d, q + (r * nh + h) * d, c, sn, half);
            for (int64_t h = 0; h < nkv; h++) {
                rope_pair(row + (nh + h) * d, kc + (h * ctx + pos) * d, c, sn, half);
                memcpy(vc + (h * ctx + pos) * d, row + (nh + nkv + h) * d, (size_t)d * 4);
            }
        }
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 6);
    return res;
}

/* ------------------------------------------------------------------ attention */
/* Query heads [h0 + lo, h0 + hi) of every row: the unit tallow's pool splits (_workers.h).
 * The heads of the range that share a key/value head are taken together, so that each
 * cached key and value is read once for all of them; each head's arithmetic is the
 * same whatever the grouping or the split (its dot products, softmax and sums in
 * position order), so the results do not depend on the thread count. */
typedef struct {
    const float *q, *kc, *vc;
    float *out, *scores; /* scores: (pos0 + s) floats per head of [h0, h1) */
    int64_t s, nh, group, d, ctx, pos0, h0;
    float scale;
} att_job;

#define ATT_MAX_GROUP 64

static void att_task(void *p, int64_t lo, int64_t hi) {
    const att_job *j = (const att_job *)p;
    const int64_t d = j->d, stride = j->pos0 + j->s;
    for (int64_t r = 0; r < j->s; r++) {
        const int64_t total = j->pos0 + r + 1;
        for (int64_t a = j->h0 + lo, b; a < j->h0 + hi; a = b) {
            const int64_t kv = a / j->group;
            b = (kv + 1) * j->group;
            if (b > j->h0 + hi) b = j->h0 + hi;
            if (b - a > ATT_MAX_GROUP) b = a + ATT_MAX_GROUP;
            const float *K = j->kc + kv * j->ctx * d, *V = j->vc + kv * j->ctx * d;
            const float *qh[ATT_MAX_GROUP];
            float *sc[ATT_MAX_GROUP], mx[ATT_MAX_GROUP];
            const int64_t n = b - a;
            for (int64_t i = 0; i < n; i++) {
                qh[i] = j->q + (r * j->nh + a + i) * d;
                sc[i] = j->scores + (a + i - j->h0) * stride;
                mx[i] = -INFINITY;
            }
            for (int64_t t = 0; t < total; t++)
                for (int64_t i = 0; i < n; i++) {
                    const float v = OPS->dot(qh[i], K + t * d, d) * j->scale;
                    sc[i][t] = v;
                    mx[i] = v > mx[i] ? v : mx[i];
                }
            for (int64_t i = 0; i < n; i++) {
                const float inv = 1.0f / OPS->exp_shift_sum(sc[i], total, mx[i]);
                for (int64_t t = 0; t < total; t++) sc[i][t] *= inv;
                memset(j->out + (r * j->nh + a + i) * d, 0, (size_t)d * 4);
            }
            for (int64_t t = 0; t < total; t++)
                for (int64_t i = 0; i < n; i++) OPS->axpy(j->out + (r * j->nh + a + i) * d, sc[i][t], V + t * d, d);
        }
    }
}

/* attention(q, kcache, vcache, out, s, nh, nkv, d, ctx, pos0, scale, h0, h1): causal
 * softmax attention of queries q (s, nh, d) at positions pos0.. over the cache, heads
 * [h0, h1); out (s, nh, d).  The heads split across tallow's pool when the cache they
 * read is worth it. */
static PyObject *py_attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13) return PyErr_Format(PyExc_TypeError, "attention takes 13 arguments");
    int64_t a[6], hr[2];
    if (!ints(args, 4, 6, a) || !ints(args, 11, 2, hr)) return NULL;
    float scale = (float)PyFloat_AsDouble(args[10]);
    if (PyErr_Occurred()) return NULL;
    int64_t s = a[0], nh = a[1], nkv = a[2], d = a[3], ctx = a[4], pos0 = a[5];
    if (nkv == 0 || nh % nkv || pos0 + s > ctx || hr[1] > nh || hr[0] > hr[1])
        return PyErr_Format(PyExc_ValueError, "attention: bad heads, positions or head range");
    buf_t b[4];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, s * nh * d * 4, "q") && get_buf(args[1], &b[1], 0, nkv * ctx * d * 4, "kcache") &&
        get_buf(args[2], &b[2], 0, nkv * ctx * d * 4, "vcache") && get_buf(args[3], &b[3], 1, s * nh * d * 4, "out")) {
        const int64_t heads = hr[1] - hr[0];
        float *scores = (float *)PyMem_RawMalloc((size_t)((heads ? heads : 1) * (pos0 + s)) * 4);
        /* whole groups per chunk when there are enough of them to go round */
        const int64_t grain = nkv >= 2 * tallow_pool_threads() ? nh / nkv : 1;
        if (!scores) {
            release(b, 4);
            return PyErr_NoMemory();
        }
        att_job job = {(const float *)b[0].view.buf, (const float *)b[1].view.buf, (const float *)b[2].view.buf,
                       (float *)b[3].view.buf, scores, s, nh, nh / nkv, d, ctx, pos0, hr[0], scale};
        /* Worth a split as a product streaming 2 bytes per head, position and element would
         * be: a head's keys and values come from the cache, several times faster. */
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(att_task, &job, heads, grain, heads * (pos0 + s) * d * 2);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(scores);
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 4);
    return res;
}

/* causal_softmax(scores, s, group, total, pos0, scale, r0, r1): scores (r, s, group, total)
 * for blocks r in [r0, r1): row (i, g) keeps its first pos0 + i + 1 entries, scaled and
 * softmaxed; the rest (later positions) become 0. */
static PyObject *py_causal_softmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "causal_softmax takes 8 arguments");
    int64_t a[4], rr[2];
    if (!ints(args, 1, 4, a) || !ints(args, 6, 2, rr)) return NULL;
    float scale = (float)PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return NULL;
    int64_t s = a[0], group = a[1], total = a[2], pos0 = a[3];
    if (pos0 + s > total) return PyErr_Format(PyExc_ValueError, "causal_softmax: positions past the scores");
    buf_t b[1];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 1, rr[1] * s * group * total * 4, "scores")) {
        float *sc = (float *)b[0].view.buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t r = rr[0]; r < rr[1]; r++)
            for (int64_t i = 0; i < s; i++)
                for (int64_t g = 0; g < group; g++) {
                    float *p = sc + ((r * s + i) * group + g) * total;
                    int64_t valid = pos0 + i + 1;
                    float mx = -INFINITY;
                    for (int64_t t = 0; t < valid; t++) {
                        p[t] *= scale;
                        mx = p[t] > mx ? p[t] : mx;
                    }
                    float inv = 1.0f / OPS->exp_shift_sum(p, valid, mx);
                    for (int64_t t = 0; t < valid; t++) p[t] *= inv;
                    memset(p + valid, 0, (size_t)(total - valid) * 4);
                }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 1);
    return res;
}

/* ------------------------------------------------------------------ silu * mul */
/* silu_mul(gu, s, f, out): gu (s, 2f) rows [gate | up] -> out (s, f) = silu(gate) * up. */
static PyObject *py_silu_mul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "silu_mul takes 4 arguments");
    int64_t a[2];
    if (!ints(args, 1, 2, a)) return NULL;
    int64_t s = a[0], f = a[1];
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, s * 2 * f * 4, "gu") && get_buf(args[3], &b[1], 1, s * f * 4, "out")) {
        const float *gu = (const float *)b[0].view.buf;
        float *out = (float *)b[1].view.buf;
        for (int64_t r = 0; r < s; r++) {
            const float *g = gu + r * 2 * f, *u = g + f;
            float *o = out + r * f;
            OPS->silu_mul(g, u, o, f);
        }
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 2);
    return res;
}

/* ------------------------------------------------------------------ float matvec */
/* Rows [r0 + lo, r0 + hi) of a float product: the unit tallow's pool splits (_workers.h);
 * each output element is one thread's whole dot product, so the split changes no sum. */
#define FMV_GRAIN 32
typedef struct {
    const char *w;
    int half;
    const float *x;
    float *out;
    int64_t m, n, k, r0;
} fmv_job;

/* f16 rows are read FMV_AHEAD rows ahead of the one being multiplied: with the
 * conversion in the loop the hardware prefetcher alone left a single-thread f16
 * decode short of memory's pace (docs/decisions.md); f32 rows gained nothing. */
#define FMV_AHEAD 4

static void fmv_task(void *p, int64_t lo, int64_t hi) {
    const fmv_job *j = (const fmv_job *)p;
    const int64_t k = j->k, half = j->half, row_bytes = k * (half ? 2 : 4);
    const int64_t end = j->r0 + hi;
    /* Row by row, every activation row against it while it is in L1. */
    for (int64_t r = j->r0 + lo; r < end; r++) {
        if (half && r + FMV_AHEAD < end) {
            const char *ahead = j->w + (r + FMV_AHEAD) * row_bytes;
            for (int64_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(ahead + line);
        }
        for (int64_t i = 0; i < j->m; i++) {
            const float *xi = j->x + i * k;
            const void *w = half ? (const void *)((const uint16_t *)j->w + r * k) : (const void *)((const float *)j->w + r * k);
            j->out[i * j->n + r] = OPS->row(w, (int)half, k, xi);
        }
    }
}

/* matvec_float(w, half, x, out, m, n, k, r0, r1): out[i, r] = w[r] . x[i] for rows
 * [r0, r1) of an (n, k) weight in f32 (half = 0) or f16 (half = 1), m activation rows. */
static PyObject *py_matvec_float(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "matvec_float takes 9 arguments");
    int64_t a[6];
    int half = PyObject_IsTrue(args[1]);
    if (half < 0 || !ints(args, 4, 5, a)) return NULL;
    int64_t m = a[0], n = a[1], k = a[2], r0 = a[3], r1 = a[4];
    if (r1 > n || r0 > r1) return PyErr_Format(PyExc_ValueError, "matvec_float: bad row range");
    int64_t es = half ? 2 : 4;
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, n * k * es, "w") && get_buf(args[2], &b[1], 0, m * k * 4, "x") &&
        get_buf(args[3], &b[2], 1, m * n * 4, "out")) {
        fmv_job job = {(const char *)b[0].view.buf, half, (const float *)b[1].view.buf, (float *)b[2].view.buf, m, n, k, r0};
        Py_BEGIN_ALLOW_THREADS
        tallow_pool_run(fmv_task, &job, r1 - r0, FMV_GRAIN, (r1 - r0) * k * es);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 3);
    return res;
}

/* f16_to_f32(src, dst, count): convert (for tiles of an f16 weight). */
static PyObject *py_f16_to_f32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "f16_to_f32 takes 3 arguments");
    int64_t n;
    if (!ints(args, 2, 1, &n)) return NULL;
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    if (get_buf(args[0], &b[0], 0, n * 2, "src") && get_buf(args[1], &b[1], 1, n * 4, "dst")) {
        const uint16_t *src = (const uint16_t *)b[0].view.buf;
        float *dst = (float *)b[1].view.buf;
        Py_BEGIN_ALLOW_THREADS
        OPS->f16_to_f32(src, dst, n);
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 2);
    return res;
}

TALLOW_SIMD_SWITCH(use_avx2)

static PyMethodDef methods[] = {
    {"rms_norm", FC(py_rms_norm), "RMS norm of rows, with an optional residual add first."},
    {"rope_store", FC(py_rope_store), "Rotary embedding of q and k, k and v written to the cache."},
    {"attention", FC(py_attention), "Causal attention over the cache."},
    {"silu_mul", FC(py_silu_mul), "silu(gate) * up."},
    {"causal_softmax", FC(py_causal_softmax), "Scaled causal softmax of attention scores."},
    {"matvec_float", FC(py_matvec_float), "f32/f16 weight rows times activation rows."},
    {"f16_to_f32", FC(py_f16_to_f32), "f16 -> f32 conversion."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 versions."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 versions are used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_ops", "Compiled steps of tallow's Llama decode path.", -1, methods};

PyMODINIT_FUNC PyInit__ops(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
#endif
    tallow_pool_import();
    return PyModule_Create(&moduledef);
}
