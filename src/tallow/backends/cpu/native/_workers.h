/* tallow's compiled worker pool, as the kernel modules see it.
 *
 * The pool lives in its own extension module (_workers.c), so that the quantized
 * kernels (_kernels) and the float decode steps (_ops) share one set of
 * threads; a module reaches it through a capsule with tallow_pool_import() at
 * its own import.  Without the pool (not built, or not importable) every
 * product runs on the calling thread: tallow_pool_threads() is then 1.
 *
 * A task is split into chunks over [0, total) (units the caller chooses: groups
 * of eight weight rows, rows); fn(ctx, lo, hi) computes one chunk and must not
 * touch Python objects.  tallow_pool_run is called with the GIL released; it
 * returns when every chunk is done.
 */
#ifndef TALLOW_WORKERS_H
#define TALLOW_WORKERS_H

#include <Python.h>
#include <stdint.h>

#define TALLOW_POOL_CAPSULE "tallow.backends.cpu.native._workers._C_API"
#define TALLOW_POOL_ABI 1

typedef void (*tallow_task_fn)(void *ctx, int64_t lo, int64_t hi);

typedef struct {
    int abi;
    /* Threads a split may use now, the caller included (1: do not split). */
    int (*threads)(void);
    /* Run fn over [0, total) in chunks of at least `grain` units, on the pool's
     * threads and the caller's; without the GIL.  `bytes`: the weight bytes the
     * whole task streams (chunks are kept small enough that a worker preempted
     * in the middle of one delays the caller little), or < 0 if unknown. */
    void (*run)(tallow_task_fn fn, void *ctx, int64_t total, int64_t grain, int64_t bytes);
    /* Whether a product that streams this many weight bytes is worth splitting
     * (the hand-off costs about a microsecond; a small product stays on the caller). */
    int (*worth)(int64_t bytes);
} tallow_pool_api;

static const tallow_pool_api *tallow_pool = NULL;

/* A sibling module's C table (its `_C_API` capsule named `capsule`), or NULL with the
 * error cleared when the module or the capsule is missing. */
static inline const void *tallow_capsule(const char *module, const char *capsule) {
    /* Not PyCapsule_Import: it follows attributes from the top package, and this runs
     * while the native package is still being imported (not yet an attribute). */
    PyObject *mod = PyImport_ImportModule(module);
    PyObject *cap = mod ? PyObject_GetAttrString(mod, "_C_API") : NULL;
    const void *table = cap ? PyCapsule_GetPointer(cap, capsule) : NULL;
    Py_XDECREF(cap); /* the module keeps the capsule, and the table is static */
    Py_XDECREF(mod);
    if (!table) PyErr_Clear();
    return table;
}

/* At module import: the pool's table, or NULL (the error cleared) when it is missing. */
static inline void tallow_pool_import(void) {
    tallow_pool = (const tallow_pool_api *)tallow_capsule("tallow.backends.cpu.native._workers", TALLOW_POOL_CAPSULE);
    if (tallow_pool && tallow_pool->abi != TALLOW_POOL_ABI) tallow_pool = NULL;
}

static inline int tallow_pool_threads(void) { return tallow_pool ? tallow_pool->threads() : 1; }

/* fn over [0, total): split across the pool when it has threads and a product streaming
 * `bytes` bytes is worth it (bytes < 0: always), else one call on this thread. */
static inline void tallow_pool_run(tallow_task_fn fn, void *ctx, int64_t total, int64_t grain, int64_t bytes) {
    if (tallow_pool && total > grain && tallow_pool->threads() > 1 && (bytes < 0 || tallow_pool->worth(bytes)))
        tallow_pool->run(fn, ctx, total, grain, bytes);
    else if (total > 0)
        fn(ctx, 0, total);
}

#endif
