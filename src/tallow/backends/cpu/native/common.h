/* Helpers shared by tallow's compiled CPU modules (_kernels.c, _ops.c, _conv.c,
 * _gemm.c, _step.c, _transpose.c, _reduce.c): the CPU feature checks and the Python
 * switch between a module's SIMD and baseline builds, the exact f16 -> f32 conversion
 * of the scalar code, and the buffer-protocol wrappers every entry point validates its
 * arrays with.  Include after Python.h. */
#ifndef TALLOW_NATIVE_COMMON_H
#define TALLOW_NATIVE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TALLOW_X86 1
/* The functions that use AVX2 carry this target attribute; the modules themselves
 * are compiled for the baseline instruction set and pick at run time. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512F __attribute__((target("avx2,fma,f16c,avx512f")))
#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

/* A METH_FASTCALL entry of a module's method table. */
#define FC(name) (PyCFunction)(void (*)(void))name, METH_FASTCALL

/* ------------------------------------------------------------------ CPU features */
/* AVX2 with FMA and F16C: what every "avx2" function here needs. */
static inline int cpu_has_avx2(void) {
#ifdef TALLOW_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* AVX-512 with the byte dot product (VNNI) and the byte/word and 256-bit forms. */
static inline int cpu_has_avx512vnni(void) {
#ifdef TALLOW_X86
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* AVX-512 Foundation (and the AVX2 set): the 16-lane float kernels. */
static inline int cpu_has_avx512f(void) {
#ifdef TALLOW_X86
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* set_avx512(on) / avx512() of a module whose 16-lane kernels are chosen by `flag` (they
 * run only while its AVX2 builds, `simd`, are on too). */
#define TALLOW_AVX512_SWITCH(flag, simd)                                                              \
    static PyObject *py_set_avx512(PyObject *self, PyObject *arg) {                                   \
        (void)self;                                                                                   \
        int on = PyObject_IsTrue(arg);                                                                \
        if (on < 0) return NULL;                                                                      \
        if (on && !cpu_has_avx512f()) return PyErr_Format(PyExc_ValueError, "this CPU has no AVX-512"); \
        flag = on;                                                                                    \
        Py_RETURN_NONE;                                                                               \
    }                                                                                                 \
    static PyObject *py_avx512(PyObject *self, PyObject *noargs) {                                    \
        (void)self;                                                                                   \
        (void)noargs;                                                                                 \
        return PyBool_FromLong(flag && simd);                                                         \
    }

/* ------------------------------------------------------------------ per-thread scratch */
/* A task's scratch buffer, kept per thread between calls up to KEEP_SCRATCH_FLOATS
 * (4 MiB): a fresh half-megabyte malloc per chunk is an mmap whose page faults, taken
 * under the process's memory lock, serialised two threads.  Larger ones are allocated
 * and freed each time.  A module calls scratch_init() once at import. */
#define KEEP_SCRATCH_FLOATS ((size_t)1 << 20)
typedef struct {
    float *buf;
    size_t cap;
} thread_scratch_t;
static _Thread_local thread_scratch_t *tls_thread_scratch = NULL;
#if defined(__linux__)
#include <pthread.h>
static pthread_key_t thread_scratch_key;
static int thread_scratch_key_ok = 0;
static inline void thread_scratch_free(void *p) {
    thread_scratch_t *t = (thread_scratch_t *)p;
    free(t->buf);
    free(t);
}
#endif

static inline void scratch_init(void) {
#if defined(__linux__)
    thread_scratch_key_ok = pthread_key_create(&thread_scratch_key, thread_scratch_free) == 0;
#endif
}

/* At least `floats` of scratch for this thread, or NULL; give it back with scratch_done. */
static inline float *scratch_get(size_t floats) {
    if (floats > KEEP_SCRATCH_FLOATS) return (float *)malloc(floats * sizeof(float));
    if (!tls_thread_scratch) {
        tls_thread_scratch = (thread_scratch_t *)calloc(1, sizeof(thread_scratch_t));
        if (!tls_thread_scratch) return NULL;
#if defined(__linux__)
        if (thread_scratch_key_ok) pthread_setspecific(thread_scratch_key, tls_thread_scratch); /* freed at exit */
#endif
    }
    if (tls_thread_scratch->cap < floats) {
        free(tls_thread_scratch->buf);
        tls_thread_scratch->buf = (float *)malloc(floats * sizeof(float));
        tls_thread_scratch->cap = tls_thread_scratch->buf ? floats : 0;
    }
    return tls_thread_scratch->buf;
}

static inline void scratch_done(float *buf, size_t floats) {
    if (floats > KEEP_SCRATCH_FLOATS) free(buf);
}

/* dst[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ..., the `count` parts of n
 * floats each added in order (dst may be parts[0]): sums made in parts of a batch,
 * the same bits whichever thread made each part. */
static inline void sum_parts(float *dst, const float *parts, int64_t count, int64_t n) {
    if (dst != parts) memcpy(dst, parts, (size_t)n * sizeof(float));
    for (int64_t part = 1; part < count; part++)
        for (int64_t i = 0; i < n; i++) dst[i] += parts[part * n + i];
}

/* ------------------------------------------------------------------ the SIMD switch */
/* set_simd(on) / simd() of a module whose SIMD functions are chosen by `flag` (its
 * use_avx2): on asks for the AVX2 builds, which this CPU must support. */
#ifdef TALLOW_X86
#define TALLOW_SIMD_CHECK(on)                                                                         \
    if ((on) && !cpu_has_avx2()) return PyErr_Format(PyExc_ValueError, "this CPU has no AVX2/FMA/F16C");
#else
#define TALLOW_SIMD_CHECK(on)                                                                         \
    if (on) return PyErr_Format(PyExc_ValueError, "no SIMD kernels for this CPU");
#endif
#define TALLOW_SIMD_SWITCH(flag)                                                                      \
    static PyObject *py_set_simd(PyObject *self, PyObject *arg) {                                     \
        (void)self;                                                                                   \
        int on = PyObject_IsTrue(arg);                                                                \
        if (on < 0) return NULL;                                                                      \
        TALLOW_SIMD_CHECK(on)                                                                         \
        flag = on;                                                                                    \
        Py_RETURN_NONE;                                                                               \
    }                                                                                                 \
    static PyObject *py_simd(PyObject *self, PyObject *noargs) {                                      \
        (void)self;                                                                                   \
        (void)noargs;                                                                                 \
        return PyBool_FromLong(flag);                                                                 \
    }

/* ------------------------------------------------------------------ f16 -> f32 */
static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ------------------------------------------------------------------ arguments */
/* args[start .. start + count) as int64 into out; 0 with an exception set. */
static inline int parse_ints(PyObject *const *args, Py_ssize_t start, Py_ssize_t count, int64_t *out) {
    for (Py_ssize_t i = 0; i < count; i++) {
        out[i] = PyLong_AsLongLong(args[start + i]);
        if (out[i] == -1 && PyErr_Occurred()) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ results */
/* An entry point's return after its task ran: MemoryError if a chunk could not get its
 * scratch (`failed`), else None. */
static inline PyObject *none_or_no_memory(int failed) {
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ buffers */
typedef struct {
    Py_buffer view;
    int held;
} buf_t;

/* A C-contiguous buffer of at least min_bytes (writable if asked); 0 with an exception set. */
static inline int get_buf(PyObject *obj, buf_t *b, int writable, Py_ssize_t min_bytes, const char *what) {
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return 0;
    b->held = 1;
    if (b->view.len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need at least %zd", what, b->view.len, min_bytes);
        return 0;
    }
    return 1;
}

static inline void release(buf_t *bufs, int count) {
    for (int i = 0; i < count; i++)
        if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
}

#endif /* TALLOW_NATIVE_COMMON_H */
