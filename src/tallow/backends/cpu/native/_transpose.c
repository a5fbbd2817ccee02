/* Transposing copies: a strided view with unit stride along its second-to-last dim
 * (a transposed matrix, or a batch of them) copied into a row-major array.
 *
 * transpose_copy(src, dst, split=True): src and dst have one shape (..., R, C) and item size (1,
 * 2, 4 or 8 bytes); src's stride along R is the item size, dst's along C. Read in
 * source order and written in destination order, one of the two walks a cache line
 * per element; here both move through 32 x 32 tiles that stay in L1, and 4-byte items
 * go through register transposes (_vec_body.h: 4 x 4 blocks in the baseline build,
 * 8 x 8 with AVX2, 16 x 16 with AVX-512, chosen at import). NumPy's own copy of a 2048 x 2048
 * f32 transpose takes ~32 ms on the machine of docs/benchmarks.md, its slices tile by
 * tile ~17 ms, this pass ~3 ms.
 *
 * Units are (matrix, block of 32 rows of R) and go over the compiled pool (unless
 * split is false); a copy moves values only, so any split gives the same result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "_workers.h"

static int use_avx2 = 0, use_avx512 = 0;

/* ------------------------------------------------------------------ the builds */
#define VEC_BODY "_vec_body.h"
#include "_vec_builds.h"
typedef void (*transpose_fn)(const float *s, int64_t ss, float *d, int64_t ds, int64_t nr, int64_t nc);

/* The build in use: the CPU's widest, narrowed by set_simd / set_avx512. */
static transpose_fn transpose_floats(void) {
#ifdef TALLOW_X86
    if (use_avx2) return use_avx512 ? transpose_floats_avx512 : transpose_floats_avx2;
#endif
    return transpose_floats_generic;
}

#define TILE 32
#define MAX_DIMS 32

typedef struct {
    const char *src;
    char *dst;
    int ndim, item;
    transpose_fn floats; /* 4-byte items, when both walking strides are whole words */
    int64_t shape[MAX_DIMS], ss[MAX_DIMS], ds[MAX_DIMS]; /* strides in bytes */
    int64_t row_blocks;
} tr_job;

/* The byte offsets of matrix number m (over the leading dims) in src and dst. */
static void matrix_offsets(const tr_job *j, int64_t m, int64_t *so, int64_t *dof) {
    int64_t s = 0, d = 0;
    for (int k = j->ndim - 3; k >= 0; k--) {
        int64_t i = m % j->shape[k];
        m /= j->shape[k];
        s += i * j->ss[k];
        d += i * j->ds[k];
    }
    *so = s;
    *dof = d;
}

/* One tile, element by element: d[r][c] = s[r][c], s unit-stride along r (sc: its
 * stride along c), d unit-stride along c (dr: its stride along r). */
#define SCALAR_TILE(T)                                                                        \
    static void tile_##T(const char *s, char *d, int64_t nr, int64_t nc, int64_t sc, int64_t dr) { \
        for (int64_t r = 0; r < nr; r++) {                                                    \
            T *out = (T *)(d + r * dr);                                                       \
            const char *in = s + r * (int64_t)sizeof(T);                                      \
            for (int64_t c = 0; c < nc; c++) out[c] = *(const T *)(in + c * sc);              \
        }                                                                                     \
    }
SCALAR_TILE(uint8_t)
SCALAR_TILE(uint16_t)
SCALAR_TILE(uint32_t)
SCALAR_TILE(uint64_t)

static void transpose_task(void *p, int64_t lo, int64_t hi) {
    const tr_job *j = (const tr_job *)p;
    const int64_t R = j->shape[j->ndim - 2], C = j->shape[j->ndim - 1];
    const int64_t sc = j->ss[j->ndim - 1], dr = j->ds[j->ndim - 2], item = j->item;
    for (int64_t u = lo; u < hi; u++) {
        int64_t m = u / j->row_blocks, r0 = (u % j->row_blocks) * TILE, nr = R - r0 < TILE ? R - r0 : TILE;
        int64_t so, dof;
        matrix_offsets(j, m, &so, &dof);
        for (int64_t c0 = 0; c0 < C; c0 += TILE) {
            int64_t nc = C - c0 < TILE ? C - c0 : TILE;
            const char *s = j->src + so + r0 * item + c0 * sc;
            char *d = j->dst + dof + r0 * dr + c0 * item;
            switch (item) {
            case 4:
                if (j->floats) j->floats((const float *)s, sc / 4, (float *)d, dr / 4, nr, nc);
                else tile_uint32_t(s, d, nr, nc, sc, dr);
                break;
            case 8: tile_uint64_t(s, d, nr, nc, sc, dr); break;
            case 2: tile_uint16_t(s, d, nr, nc, sc, dr); break;
            default: tile_uint8_t(s, d, nr, nc, sc, dr); break;
            }
        }
    }
}

static PyObject *py_transpose_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || nargs > 3) return PyErr_Format(PyExc_TypeError, "transpose_copy takes 2 or 3 arguments");
    int split = nargs > 2 ? PyObject_IsTrue(args[2]) : 1;
    if (split < 0) return NULL;
    Py_buffer sb, db;
    if (PyObject_GetBuffer(args[0], &sb, PyBUF_STRIDED_RO) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &db, PyBUF_STRIDED) < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    PyObject *res = NULL;
    int nd = sb.ndim, item = (int)sb.itemsize;
    if (nd < 2 || nd > MAX_DIMS || db.ndim != nd) {
        PyErr_SetString(PyExc_ValueError, "transpose_copy: two arrays of one shape, 2 to 32 dims");
    } else if (db.itemsize != item || !(item == 1 || item == 2 || item == 4 || item == 8)) {
        PyErr_SetString(PyExc_ValueError, "transpose_copy: one item size of 1, 2, 4 or 8 bytes");
    } else if ((sb.strides[nd - 2] != item && sb.shape[nd - 2] > 1) || (db.strides[nd - 1] != item && db.shape[nd - 1] > 1)) {
        /* (a dim of one element has no stride to speak of) */
        PyErr_SetString(PyExc_ValueError,
                        "transpose_copy: the source needs unit stride along its second-to-last dim, "
                        "the destination along its last");
    } else {
        tr_job j;
        memset(&j, 0, sizeof j);
        j.ndim = nd;
        j.item = item;
        int64_t outer = 1, n = 1;
        int ok = 1;
        for (int k = 0; k < nd; k++) {
            if (sb.shape[k] != db.shape[k]) ok = 0;
            j.shape[k] = sb.shape[k];
            j.ss[k] = sb.strides[k];
            j.ds[k] = db.strides[k];
            if (k < nd - 2) outer *= sb.shape[k];
            n *= sb.shape[k];
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "transpose_copy: the shapes differ");
        } else {
            if (n > 0) {
                j.src = (const char *)sb.buf;
                j.dst = (char *)db.buf;
                if (item == 4 && j.ss[nd - 1] % 4 == 0 && j.ds[nd - 2] % 4 == 0) j.floats = transpose_floats();
                j.row_blocks = (j.shape[nd - 2] + TILE - 1) / TILE;
                int64_t units = outer * j.row_blocks, bytes = 2 * n * item;
                Py_BEGIN_ALLOW_THREADS
                if (split) tallow_pool_run(transpose_task, &j, units, 1, bytes);
                else transpose_task(&j, 0, units);
                Py_END_ALLOW_THREADS
            }
            Py_INCREF(Py_None);
            res = Py_None;
        }
    }
    PyBuffer_Release(&db);
    PyBuffer_Release(&sb);
    return res;
}

TALLOW_SIMD_SWITCH(use_avx2)
TALLOW_AVX512_SWITCH(use_avx512, use_avx2)

static PyMethodDef methods[] = {
    {"transpose_copy", FC(py_transpose_copy), "dst = src for a transposed src and a row-major dst, tiled."},
    {"set_simd", py_set_simd, METH_O, "Use (True) or not the AVX2 and AVX-512 builds (8 x 8, 16 x 16 blocks)."},
    {"simd", py_simd, METH_NOARGS, "Whether the AVX2 or AVX-512 build is used."},
    {"set_avx512", py_set_avx512, METH_O, "Use (True) or not the AVX-512 build (16 x 16 blocks)."},
    {"avx512", py_avx512, METH_NOARGS, "Whether the AVX-512 build is used."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_transpose",
                                       "Tiled transposing copies of tallow's CPU storage.", -1, methods};

PyMODINIT_FUNC PyInit__transpose(void) {
#ifdef TALLOW_X86
    use_avx2 = cpu_has_avx2();
    use_avx512 = cpu_has_avx512f();
#endif
    tallow_pool_import();
    return PyModule_Create(&moduledef);
}
