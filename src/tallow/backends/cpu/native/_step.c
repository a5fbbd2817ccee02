/* Element-wise passes of a training step that NumPy makes in two (a temporary array,
 * then a second pass over it): an optimiser's update `dst = dst + src * alpha` and
 * ReLU's gradient `grad * (x > 0)`. Each is one pass here, with NumPy's roundings: the
 * product rounded, then the sum (the module is built with -ffp-contract=off, so no
 * FMA), and the mask a 1.0 or 0.0 factor (so a negative gradient at x <= 0 gives -0.0
 * and a NaN or infinite one NaN, as the composed rule does). Each pass is written once
 * and compiled for the baseline and for AVX2, chosen at import. On
 * contiguous f32 / f64 arrays; the callers fall back to NumPy for anything else.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

static int use_avx2 = 0;

/* ReLU's gradient as a compare-and-mask on vectors (GCC vector extensions): a branch
 * per element, which the compiler keeps for a float comparison, mispredicts on signs at
 * random. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
#pragma GCC diagnostic ignored "-Wpsabi" /* (the vectors stay inside each function) */

#define RELU_GRAD(NAME, ATTR, T, VT, MT, W)                                                       \
    ATTR static void NAME(const T *x, const T *g, T *o, int64_t n) {                              \
        const VT one = (VT){0} + (T)1;                                                            \
        int64_t i = 0;                                                                            \
        for (; i + W <= n; i += W) {                                                              \
            VT xv, gv;                                                                            \
            memcpy(&xv, x + i, sizeof xv);                                                        \
            memcpy(&gv, g + i, sizeof gv);                                                        \
            gv = gv * (VT)((xv > 0) & (MT)one);                                                   \
            memcpy(o + i, &gv, sizeof gv);                                                        \
        }                                                                                         \
        for (; i < n; i++) o[i] = g[i] * (x[i] > 0 ? (T)1 : (T)0);                                \
    }

/* Each pass written once, compiled for the baseline and for AVX2. */
#define LOOPS(SUFFIX, ATTR)                                                                       \
    ATTR static void add_scaled_f32##SUFFIX(float *d, const float *s, float a, int64_t n) {       \
        for (int64_t i = 0; i < n; i++) d[i] = d[i] + s[i] * a;                                   \
    }                                                                                             \
    ATTR static void add_scaled_f64##SUFFIX(double *d, const double *s, double a, int64_t n) {    \
        for (int64_t i = 0; i < n; i++) d[i] = d[i] + s[i] * a;                                   \
    }                                                                                             \
    RELU_GRAD(relu_grad_f32##SUFFIX, ATTR, float, f32x8, i32x8, 8)                                \
    RELU_GRAD(relu_grad_f64##SUFFIX, ATTR, double, f64x4, i64x4, 4)

LOOPS(_base, )
#ifdef TALLOW_X86
LOOPS(_avx2, AVX2)
#endif

/* A C-contiguous f32 or f64 buffer (writable if asked); 0 with an exception set. */
static int get_floats(PyObject *obj, buf_t *b, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return 0;
    b->held = 1;
    const char *f = b->view.format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (!((f[0] == 'f' && b->view.itemsize == 4) || (f[0] == 'd' && b->view.itemsize == 8)) || f[1] != 0)
        return PyErr_Format(PyExc_TypeError, "%s: a float32 or float64 buffer is needed", what), 0;
    return 1;
}

/* The item size shared by `count` float buffers of one length, else 0 with an error. */
static int same_floats(const buf_t *b, int count, const char *name) {
    for (int i = 1; i < count; i++) {
        if (b[i].view.itemsize != b[0].view.itemsize)
            return PyErr_Format(PyExc_TypeError, "%s: the buffers' dtypes differ", name), 0;
        if (b[i].view.len != b[0].view.len)
            return PyErr_Format(PyExc_ValueError, "%s: the buffers' sizes differ", name), 0;
    }
    return (int)b[0].view.itemsize;
}

/* add_scaled(dst, src, alpha): dst = dst + src * alpha, in place. */
static PyObject *py_add_scaled(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "add_scaled takes 3 arguments");
    double alpha = PyFloat_AsDouble(args[2]);
    if (alpha == -1.0 && PyErr_Occurred()) return NULL;
    buf_t b[2];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    int size;
    if (get_floats(args[0], &b[0], 1, "add_scaled dst") && get_floats(args[1], &b[1], 0, "add_scaled src") &&
        (size = same_floats(b, 2, "add_scaled"))) {
        int64_t n = b[0].view.len / size;
        void *d = b[0].view.buf;
        const void *s = b[1].view.buf;
        Py_BEGIN_ALLOW_THREADS
        if (size == 4) {
#ifdef TALLOW_X86
            if (use_avx2) add_scaled_f32_avx2(d, s, (float)alpha, n); else
#endif
            add_scaled_f32_base(d, s, (float)alpha, n);
        } else {
#ifdef TALLOW_X86
            if (use_avx2) add_scaled_f64_avx2(d, s, alpha, n); else
#endif
            add_scaled_f64_base(d, s, alpha, n);
        }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 2);
    return res;
}

/* relu_grad(x, grad, out): out = grad * (x > 0). */
static PyObject *py_relu_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "relu_grad takes 3 arguments");
    buf_t b[3];
    memset(b, 0, sizeof b);
    PyObject *res = NULL;
    int size;
    if (get_floats(args[0], &b[0], 0, "relu_grad x") && get_floats(args[1], &b[1], 0, "relu_grad grad") &&
        get_floats(args[2], &b[2], 1, "relu_grad out") && (size = same_floats(b, 3, "relu_grad"))) {
        int64_t n = b[0].view.len / size;
        const void *x = b[0].view.buf, *g = b[1].view.buf;
        void *o = b[2].view.buf;
        Py_BEGIN_ALLOW_THREADS
        if (size == 4) {
#ifdef TALLOW_X86
            if (use_avx2) relu_grad_f32_avx2(x, g, o, n); else
#endif
            relu_grad_f32_base(x, g, o, n);
        } else {
#ifdef TALLOW_X86
            if (use_avx2) relu_grad_f64_avx2(x, g, o, n); else
#endif
            relu_grad_f64_base(x, g, o, n);
        }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        res = Py_None;
    }
    release(b, 3);
    return res;
}

TALLOW_SIMD_SWITCH(use_avx2)

static PyMethodDef methods[] = {
    {"add_scaled", FC(py_add_scaled), "dst = dst + src * alpha in place (contiguous f32/f64)."},
    {"relu_grad", FC(py_relu_grad), "out = grad * (x > 0) (contiguous f32/f64)."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 build of the loops."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 build of the loops is used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_step",
                                       "One-pass element-wise kernels of tallow's training steps.", -1,
                                       methods};

PyMODINIT_FUNC PyInit__step(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
#endif
    return PyModule_Create(&moduledef);
}
