/* tallow's worker pool for the compiled kernels: splitting one product of a
 * decode step (10-100 us of work) across threads for about a microsecond of
 * hand-off, without the collapse of a busy-waiting pool on a loaded machine.
 *
 * Design (measurements in docs/design.md):
 *  - want - 1 persistent pthreads (want = tallow's thread setting, passed by
 *    set_threads); with one thread none exist.  They never touch Python.
 *  - A job is a function over [0, total) cut into chunks, a few per thread, in one
 *    contiguous region per thread.  Each thread claims its own region's chunks in
 *    order (one stream through the weights, where chunks dealt round-robin from one
 *    shared counter interleave the threads' streams; docs/decisions.md), then
 *    whatever is left of the others'.  The caller works
 *    too, so a worker that is not running (its core taken by another process) costs
 *    nothing: the caller claims the chunks it would have done.  The counters sit on
 *    cache lines of their own.
 *  - An idle worker spins on the job counter for a bounded time (spin_us, 300
 *    microseconds: the gaps between the products of a decode step or of a
 *    training step's backward pass), then sleeps on a futex; a caller wakes
 *    sleepers only when there are some.
 *  - A caller whose last chunks are still held by a worker spins for a bounded
 *    time, then sleeps on a futex until they are done: when the worker was
 *    preempted, the caller's core goes to it instead of being burnt in a spin.
 *  - One job at a time: a second caller (another Python thread) runs its task on
 *    its own thread instead of waiting.
 *  - fork: the child has none of the parent's threads; an atfork handler gives it a
 *    fresh dispatch lock and no workers, and it starts its own on its first split
 *    (the parent never waits in fork: a job of Python pieces needs the GIL that the
 *    forking thread holds).
 *  - Python pieces (run_pieces): the backend's NumPy and BLAS work splits over the
 *    same threads, each piece called under the GIL (its NumPy or C work releases it).
 * Linux only (futex); elsewhere threads() is 1 and every task runs on the caller.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_workers.h"

#if defined(__linux__)
#define POOL_ENABLED 1
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

#define MAX_THREADS 64
#define CHUNKS_PER_THREAD 4
#define MAX_CHUNK_BYTES (64 << 10)
#define MAX_CHUNKS 65536

static int want = 1; /* threads a split uses, the caller included */

/* A thread that runs its own share of a larger job (one batch of several run on
 * Python threads at once: parallel.serial()) keeps its tasks on itself: threads() is
 * 1 there and run() calls the task in place. */
static _Thread_local int serial_here = 0;

/* Set by run_pieces on its caller while it dispatches: a job of Python pieces, each
 * hundreds of microseconds and with the caller's Python work between jobs, after
 * which a worker sleeps at once rather than spinning for the next (a spinning worker
 * would take the core that Python work needs, as the blocking pool before it never did). */
static _Thread_local int coarse_here = 0;

#ifdef POOL_ENABLED
static pthread_mutex_t dispatch_lock = PTHREAD_MUTEX_INITIALIZER;
static int nworkers = 0;
static pthread_t workers[MAX_THREADS];

#define LINE _Alignas(64)
static LINE _Atomic uint32_t gen;        /* job number; the workers' futex word */
static _Atomic int stop_flag;
static LINE _Atomic int sleepers;        /* workers asleep (or about to be) on gen */
/* (job number << 32) | next chunk of each thread's region, a cache line each */
static struct { LINE _Atomic uint64_t next; } cursors[MAX_THREADS];
static _Atomic uint32_t job_per; /* chunks per region */
static _Atomic int job_regions;
static LINE _Atomic uint32_t done;       /* chunks finished; the caller's futex word */
static _Atomic int caller_waiting;
/* The job; written before its number is published, read after (see run). */
static _Atomic(tallow_task_fn) job_fn;
static _Atomic(void *) job_ctx;
static _Atomic int64_t job_total, job_chunk;
static _Atomic uint32_t job_nchunks;
static _Atomic int job_coarse; /* the job is of Python pieces (coarse_here of its caller) */

/* 300 us: the gaps between the products of a training step (autograd's Python between
 * them) are 50-150 us; a worker asleep by then is woken late for each product. */
static _Atomic long worker_spin_ns = 300000, caller_spin_ns = 20000;
/* statistics: jobs split, chunks, chunks done by workers, caller sleeps */
static _Atomic uint64_t st_jobs, st_chunks, st_worker_chunks, st_caller_sleeps;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static inline void futex_wake(_Atomic uint32_t *addr, int count) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

/* Claim and run chunks of job g until none are left (or the job is no longer g).  Thread
 * `me` (the caller 0, worker i i + 1) takes its own region's chunks first, in order, so
 * each thread streams one contiguous stretch of the weights; then it takes what is left
 * of the others' regions (a late or preempted thread's share).  The chunks it ran are
 * counted into `done` once, when it leaves. */
static void work(uint32_t g, int me) {
    tallow_task_fn fn = atomic_load_explicit(&job_fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&job_ctx, memory_order_acquire);
    int64_t total = atomic_load_explicit(&job_total, memory_order_acquire);
    int64_t chunk = atomic_load_explicit(&job_chunk, memory_order_acquire);
    uint32_t nchunks = atomic_load_explicit(&job_nchunks, memory_order_acquire);
    uint32_t per = atomic_load_explicit(&job_per, memory_order_acquire);
    int regions = atomic_load_explicit(&job_regions, memory_order_acquire);
    uint32_t ran = 0;
    for (int k = 0; k < regions; k++) {
        _Atomic uint64_t *cur = &cursors[(me + k) % regions].next;
        uint32_t end = ((me + k) % regions + 1) * per;
        if (end > nchunks) end = nchunks;
        uint64_t c = atomic_load(cur);
        for (;;) {
            /* A later job's number here means these fields may be that job's: leave. */
            if ((uint32_t)(c >> 32) != g) goto out;
            if ((uint32_t)c >= end) break;
            if (!atomic_compare_exchange_weak(cur, &c, c + 1)) continue;
            int64_t lo = (int64_t)(uint32_t)c * chunk, hi = lo + chunk < total ? lo + chunk : total;
            fn(ctx, lo, hi);
            ran++;
            c = atomic_load(cur);
        }
    }
out:
    if (ran == 0) return;
    if (me) atomic_fetch_add_explicit(&st_worker_chunks, ran, memory_order_relaxed);
    uint32_t d = atomic_fetch_add(&done, ran) + ran;
    if (d == nchunks && atomic_load(&caller_waiting)) futex_wake(&done, 1);
}

/* Spin on the job number for `limit` ns, then sleep on it; returns the new number. */
static uint32_t wait_for_job(uint32_t seen, long limit) {
    uint32_t g;
    long t0 = now_ns();
    for (unsigned i = 1;; i++) {
        g = atomic_load_explicit(&gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 >= limit) break;
    }
    for (;;) {
        atomic_fetch_add(&sleepers, 1);
        g = atomic_load(&gen);
        if (g == seen) futex_wait(&gen, seen);
        atomic_fetch_sub(&sleepers, 1);
        g = atomic_load(&gen);
        if (g != seen) return g;
    }
}

static uint32_t start_gen[MAX_THREADS]; /* the job number when worker i was made */

static void *worker_main(void *arg) {
    int me = (int)(uintptr_t)arg;
    uint32_t seen = start_gen[me - 1];
    long spin = atomic_load_explicit(&worker_spin_ns, memory_order_relaxed);
    for (;;) {
        seen = wait_for_job(seen, spin);
        if (atomic_load(&stop_flag)) return NULL;
        work(seen, me);
        spin = atomic_load(&job_coarse) ? 0 : atomic_load_explicit(&worker_spin_ns, memory_order_relaxed);
    }
}

/* Publish a new job number and wake sleeping workers. */
static void publish(uint32_t g) {
    atomic_store(&gen, g);
    if (atomic_load(&sleepers) > 0) futex_wake(&gen, INT_MAX);
}

/* Under dispatch_lock. */
static void stop_workers(void) {
    if (nworkers == 0) return;
    atomic_store(&stop_flag, 1);
    publish(atomic_load(&gen) + 1);
    for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
    nworkers = 0;
    atomic_store(&stop_flag, 0);
}

/* Under dispatch_lock: want - 1 workers running (fewer if threads cannot be made). */
static void ensure_workers(void) {
    int target = want - 1;
    if (nworkers == target) return;
    stop_workers();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    uint32_t g = atomic_load(&gen);
    for (int i = 0; i < target; i++) {
        start_gen[nworkers] = g;
        if (pthread_create(&workers[nworkers], &attr, worker_main, (void *)(uintptr_t)(nworkers + 1)) != 0) break;
#if defined(__GLIBC__)
        pthread_setname_np(workers[nworkers], "tallow-pool");
#endif
        nworkers++;
    }
    pthread_attr_destroy(&attr);
}

static void pool_run(tallow_task_fn fn, void *ctx, int64_t total, int64_t grain, int64_t bytes) {
    if (total <= 0) return;
    if (grain < 1) grain = 1;
    if (serial_here) { /* this thread runs one part of a job split elsewhere */
        fn(ctx, 0, total);
        return;
    }
    if (pthread_mutex_trylock(&dispatch_lock) != 0) { /* another caller's job is running */
        fn(ctx, 0, total);
        return;
    }
    ensure_workers();
    int threads = nworkers + 1;
    /* A few chunks per thread (the late or slow one takes fewer), and none longer
     * than MAX_CHUNK_BYTES of weights (a few microseconds). */
    int64_t nchunks = (int64_t)threads * CHUNKS_PER_THREAD;
    if (bytes / MAX_CHUNK_BYTES > nchunks) nchunks = bytes / MAX_CHUNK_BYTES;
    if (nchunks > (total + grain - 1) / grain) nchunks = (total + grain - 1) / grain;
    if (nchunks > MAX_CHUNKS) nchunks = MAX_CHUNKS;
    if (threads < 2 || nchunks < 2) {
        pthread_mutex_unlock(&dispatch_lock);
        fn(ctx, 0, total);
        return;
    }
    int64_t chunk = (total + nchunks - 1) / nchunks;
    nchunks = (total + chunk - 1) / chunk;
    uint32_t g = atomic_load(&gen) + 1;
    /* Close the regions under the new number first: a worker still holding the previous
     * number cannot claim from here on, whatever fields it reads. */
    uint32_t per = (uint32_t)((nchunks + threads - 1) / threads);
    for (int r = 0; r < threads; r++) atomic_store(&cursors[r].next, ((uint64_t)g << 32) | 0xffffffffu);
    atomic_store_explicit(&job_fn, fn, memory_order_release);
    atomic_store_explicit(&job_ctx, ctx, memory_order_release);
    atomic_store_explicit(&job_total, total, memory_order_release);
    atomic_store_explicit(&job_chunk, chunk, memory_order_release);
    atomic_store_explicit(&job_nchunks, (uint32_t)nchunks, memory_order_release);
    atomic_store_explicit(&job_per, per, memory_order_release);
    atomic_store_explicit(&job_regions, threads, memory_order_release);
    atomic_store(&job_coarse, coarse_here);
    atomic_store(&done, 0);
    for (int r = 0; r < threads; r++) atomic_store(&cursors[r].next, ((uint64_t)g << 32) | ((uint64_t)r * per));
    publish(g);
    work(g, 0);
    if (atomic_load(&done) != (uint32_t)nchunks) {
        long limit = atomic_load_explicit(&caller_spin_ns, memory_order_relaxed), t0 = now_ns();
        for (unsigned i = 1; atomic_load_explicit(&done, memory_order_acquire) != (uint32_t)nchunks; i++) {
            cpu_relax();
            if ((i & 63) == 0 && now_ns() - t0 >= limit) {
                atomic_fetch_add_explicit(&st_caller_sleeps, 1, memory_order_relaxed);
                atomic_store(&caller_waiting, 1);
                uint32_t d;
                while ((d = atomic_load(&done)) != (uint32_t)nchunks) futex_wait(&done, d);
                atomic_store(&caller_waiting, 0);
                break;
            }
        }
    }
    atomic_fetch_add_explicit(&st_jobs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st_chunks, (uint64_t)nchunks, memory_order_relaxed);
    pthread_mutex_unlock(&dispatch_lock);
}

#else
static void pool_run(tallow_task_fn fn, void *ctx, int64_t total, int64_t grain, int64_t bytes) {
    (void)grain;
    (void)bytes;
    if (total > 0) fn(ctx, 0, total);
}
#endif

static int pool_threads(void) { return serial_here ? 1 : want; }

static int64_t min_split_bytes = 32 << 10;

#ifdef POOL_ENABLED
/* ---- the machine's load: split only when the pool's threads can all run at once.
 * Every SAMPLE_NS a caller reads the number of runnable tasks (/proc/loadavg's
 * "running/total"), less its own (itself and the workers not asleep), into a moving
 * average.  When that many other tasks plus the pool's threads exceed the CPUs, a
 * split would make its threads queue behind the others (a waiting caller, a worker
 * spinning on a core someone else wants): products then stay on the caller, as with
 * one thread, until the load falls again. */
#define SAMPLE_NS 10000000L
static _Atomic long next_sample;
static _Atomic int sampling, contended, load_check = 1;
static double others_avg; /* under `sampling` */
static int load_fd = -2, ncpus = 0;

static char load_path[512] = "/proc/loadavg";

static void sample_load(void) {
    if (load_fd == -2) load_fd = open(load_path, O_RDONLY | O_CLOEXEC);
    if (ncpus == 0) {
        cpu_set_t set;
        ncpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpus < 1) ncpus = 1;
    }
    char buf[128];
    ssize_t len = load_fd >= 0 ? pread(load_fd, buf, sizeof buf - 1, 0) : -1;
    if (len <= 0) return; /* no /proc: never contended */
    buf[len] = 0;
    /* "0.52 0.58 0.59 3/467 12345": the fourth field's numerator */
    char *p = buf;
    for (int field = 0; field < 3 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    if (!p) return;
    long running = strtol(p, NULL, 10);
    long ours = 1 + (nworkers - atomic_load(&sleepers));
    double others = running > ours ? (double)(running - ours) : 0.0;
    /* A sample without other tasks halves the average: a CPU-bound process shows in
     * every sample, while a transient one (a short job, another library's workers
     * spinning for a few milliseconds after its call) is gone, and the splits resume
     * one sample later rather than three. */
    others_avg = others > 0.0 ? 0.75 * others_avg + 0.25 * others : 0.5 * others_avg;
    /* hysteresis: contended from three quarters of a task over the spare CPUs (a
     * CPU-bound process, always runnable, gets there in five samples), free again below
     * half a task.  Short-lived system tasks (kernel threads, agents), runnable in a
     * third of the samples on an otherwise idle 2-CPU machine, stay under it: with the
     * thresholds at a half and a quarter they kept half of the 2-thread splits on one
     * thread. */
    double spare = (double)(ncpus - want);
    int was = atomic_load(&contended);
    atomic_store(&contended, was ? others_avg > spare + 0.5 : others_avg > spare + 0.75);
}

static int pool_worth(int64_t bytes) {
    if (bytes < min_split_bytes) return 0;
    if (!atomic_load_explicit(&load_check, memory_order_relaxed)) return 1;
    long now = now_ns();
    if (now >= atomic_load_explicit(&next_sample, memory_order_relaxed) && !atomic_exchange(&sampling, 1)) {
        atomic_store(&next_sample, now + SAMPLE_NS);
        sample_load();
        atomic_store(&sampling, 0);
    }
    return !atomic_load_explicit(&contended, memory_order_relaxed);
}
#else
static int pool_worth(int64_t bytes) { return bytes >= min_split_bytes; }
#endif

static const tallow_pool_api api = {TALLOW_POOL_ABI, pool_threads, pool_run, pool_worth};

#ifdef POOL_ENABLED
static void after_fork_child(void) {
    /* Only the forking thread came along: no workers, and the dispatch lock, which a
     * thread of the parent may have held mid-job, made anew.  The child starts its own
     * workers when it next splits. */
    pthread_mutex_init(&dispatch_lock, NULL);
    nworkers = 0;
    atomic_store(&sleepers, 0);
    atomic_store(&caller_waiting, 0);
    atomic_store(&stop_flag, 0);
    atomic_store(&sampling, 0);
}
#endif

/* ---- Python pieces: fn(*pieces[i]) for every i, on the pool's threads and the caller's.
 * Each call takes the GIL; the pieces' NumPy, BLAS and C work releases it, so they run
 * at once.  After a piece raises, the pieces not yet started are skipped and the first
 * exception is raised to the caller. */
typedef struct {
    PyObject *fn, *pieces;
    int failed; /* read and written under the GIL only */
    PyObject *err_type, *err_value, *err_tb; /* the first exception */
} py_pieces_ctx;

static void py_pieces_task(void *p, int64_t lo, int64_t hi) {
    py_pieces_ctx *c = (py_pieces_ctx *)p;
    PyGILState_STATE gil = PyGILState_Ensure();
    for (int64_t i = lo; i < hi && !c->failed; i++) {
        PyObject *r = PyObject_Call(c->fn, PyList_GET_ITEM(c->pieces, i), NULL);
        if (r) {
            Py_DECREF(r);
        } else if (!c->failed) {
            c->failed = 1;
            PyErr_Fetch(&c->err_type, &c->err_value, &c->err_tb);
        } else {
            PyErr_Clear();
        }
    }
    PyGILState_Release(gil);
}

/* run_pieces(fn, pieces): pieces a list of argument tuples. */
static PyObject *py_run_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "run_pieces takes 2 arguments (fn, pieces)");
    if (!PyCallable_Check(args[0])) return PyErr_Format(PyExc_TypeError, "run_pieces: fn must be callable");
    if (!PyList_CheckExact(args[1])) return PyErr_Format(PyExc_TypeError, "run_pieces: pieces must be a list of tuples");
    Py_ssize_t n = PyList_GET_SIZE(args[1]);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyTuple_CheckExact(PyList_GET_ITEM(args[1], i)))
            return PyErr_Format(PyExc_TypeError, "run_pieces: piece %zd is not a tuple", i);
    /* a copy: a piece that changes the caller's list cannot move the others' items */
    PyObject *pieces = PyList_GetSlice(args[1], 0, n);
    if (!pieces) return NULL;
    py_pieces_ctx c = {args[0], pieces, 0, NULL, NULL, NULL};
    Py_INCREF(c.fn);
    Py_BEGIN_ALLOW_THREADS
    coarse_here = 1;
    tallow_pool_run(py_pieces_task, &c, (int64_t)n, 1, -1);
    coarse_here = 0;
    Py_END_ALLOW_THREADS
    Py_DECREF(c.fn);
    Py_DECREF(pieces);
    if (c.failed) {
        PyErr_Restore(c.err_type, c.err_value, c.err_tb);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ Python */
static PyObject *py_set_threads(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1) return PyErr_Format(PyExc_ValueError, "set_threads: need at least one thread, got %ld", n);
#ifdef POOL_ENABLED
    if (n > MAX_THREADS) n = MAX_THREADS;
    if (n == want) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&dispatch_lock);
    want = (int)n;
    if (want == 1) stop_workers(); /* one thread: no pool threads at all */
    pthread_mutex_unlock(&dispatch_lock);
    Py_END_ALLOW_THREADS
#else
    (void)n; /* no pool on this platform: every task runs on the caller */
#endif
    Py_RETURN_NONE;
}

static PyObject *py_threads(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyLong_FromLong(want);
}

static PyObject *py_workers(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
#ifdef POOL_ENABLED
    return PyLong_FromLong(nworkers);
#else
    return PyLong_FromLong(0);
#endif
}

static PyObject *py_enabled(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
#ifdef POOL_ENABLED
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* set_spin(worker_us, caller_us): how long an idle worker, and a caller waiting for a
 * worker's chunk, spin before sleeping. */
static PyObject *py_set_spin(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "set_spin takes 2 arguments");
    double w = PyFloat_AsDouble(args[0]), c = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (!(w >= 0 && c >= 0 && w <= 1e6 && c <= 1e6))
        return PyErr_Format(PyExc_ValueError, "set_spin: microseconds in [0, 1e6]");
#ifdef POOL_ENABLED
    atomic_store(&worker_spin_ns, (long)(w * 1000));
    atomic_store(&caller_spin_ns, (long)(c * 1000));
#endif
    Py_RETURN_NONE;
}

static PyObject *py_set_min_bytes(PyObject *self, PyObject *arg) {
    (void)self;
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "set_min_bytes: need a size >= 0");
    min_split_bytes = n;
    Py_RETURN_NONE;
}

static PyObject *py_min_bytes(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyLong_FromLongLong(min_split_bytes);
}

/* set_load_check(on): whether splits wait for the machine to have CPUs to spare. */
static PyObject *py_set_load_check(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
#ifdef POOL_ENABLED
    atomic_store(&load_check, on);
    if (!on) atomic_store(&contended, 0);
#endif
    Py_RETURN_NONE;
}

/* set_load_file(path): read the runnable count from this file in /proc/loadavg's format
 * from now on, the average restarted (the tests give it made-up loads). */
static PyObject *py_set_load_file(PyObject *self, PyObject *arg) {
    (void)self;
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) return NULL;
    if (strlen(path) >= 512) return PyErr_Format(PyExc_ValueError, "set_load_file: path too long");
#ifdef POOL_ENABLED
    while (atomic_exchange(&sampling, 1)) sched_yield();
    if (load_fd >= 0) close(load_fd);
    load_fd = -2;
    strcpy(load_path, path);
    others_avg = 0.0;
    atomic_store(&contended, 0);
    atomic_store(&next_sample, 0);
    atomic_store(&sampling, 0);
#endif
    Py_RETURN_NONE;
}

/* load(): (contended, other runnable tasks on average, load check on) */
static PyObject *py_load(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
#ifdef POOL_ENABLED
    return Py_BuildValue("(Odi)", atomic_load(&contended) ? Py_True : Py_False, others_avg, (int)atomic_load(&load_check));
#else
    return Py_BuildValue("(Odi)", Py_False, 0.0, 0);
#endif
}

/* set_serial(on): this thread's tasks run in place (returns the previous setting). */
static PyObject *py_set_serial(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int was = serial_here;
    serial_here = on;
    return PyBool_FromLong(was);
}

static PyObject *py_stats(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
#ifdef POOL_ENABLED
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:d,s:d}", "jobs", (unsigned long long)atomic_load(&st_jobs),
                         "chunks", (unsigned long long)atomic_load(&st_chunks), "worker_chunks",
                         (unsigned long long)atomic_load(&st_worker_chunks), "caller_sleeps",
                         (unsigned long long)atomic_load(&st_caller_sleeps), "worker_spin_us",
                         atomic_load(&worker_spin_ns) / 1000.0, "caller_spin_us", atomic_load(&caller_spin_ns) / 1000.0);
#else
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "jobs", 0ULL, "chunks", 0ULL, "worker_chunks", 0ULL, "caller_sleeps", 0ULL);
#endif
}

/* ---- a task for the tests: every unit of [0, total) counted once, spinning `work_ns` per unit */
typedef struct {
    uint32_t *counts;
    long work_ns;
} count_ctx;

static void count_task(void *p, int64_t lo, int64_t hi) {
    count_ctx *c = (count_ctx *)p;
    for (int64_t i = lo; i < hi; i++) {
#ifdef POOL_ENABLED
        __atomic_fetch_add(&c->counts[i], 1, __ATOMIC_RELAXED);
        if (c->work_ns > 0) {
            long t0 = now_ns();
            while (now_ns() - t0 < c->work_ns) cpu_relax();
        }
#else
        c->counts[i]++;
#endif
    }
}

/* cover(counts uint32 buffer, total, grain, work_ns, repeats, bytes): run count_task
 * `repeats` times as a task of `bytes` weight bytes (< 0: split whatever its size). */
static PyObject *py_cover(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "cover takes 6 arguments");
    long long total = PyLong_AsLongLong(args[1]), grain = PyLong_AsLongLong(args[2]);
    long work_ns = PyLong_AsLong(args[3]), repeats = PyLong_AsLong(args[4]);
    long long bytes = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (total < 0 || grain < 1 || repeats < 0 || work_ns < 0) return PyErr_Format(PyExc_ValueError, "cover: bad arguments");
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    if (view.len < total * 4) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "cover: counts too small");
    }
    count_ctx c = {(uint32_t *)view.buf, work_ns};
    Py_BEGIN_ALLOW_THREADS
    for (long r = 0; r < repeats; r++) tallow_pool_run(count_task, &c, total, grain, bytes);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_threads", py_set_threads, METH_O, "Threads a split uses (1: no pool threads)."},
    {"threads", py_threads, METH_NOARGS, "Threads a split uses."},
    {"workers", py_workers, METH_NOARGS, "Pool threads started now."},
    {"enabled", py_enabled, METH_NOARGS, "Whether this platform has the pool."},
    {"set_spin", (PyCFunction)(void (*)(void))py_set_spin, METH_FASTCALL, "Spin bounds in microseconds."},
    {"set_min_bytes", py_set_min_bytes, METH_O, "Smallest product (weight bytes) that is split."},
    {"min_bytes", py_min_bytes, METH_NOARGS, "Smallest product (weight bytes) that is split."},
    {"set_load_check", py_set_load_check, METH_O, "Split only when the machine has CPUs to spare (default on)."},
    {"set_load_file", py_set_load_file, METH_O, "Where the runnable count is read (/proc/loadavg)."},
    {"load", py_load, METH_NOARGS, "(contended, other runnable tasks, load check on)."},
    {"stats", py_stats, METH_NOARGS, "Counters of split jobs."},
    {"set_serial", py_set_serial, METH_O, "Run this thread's tasks in place (returns the previous setting)."},
    {"cover", (PyCFunction)(void (*)(void))py_cover, METH_FASTCALL, "Test task: count units covered."},
    {"run_pieces", (PyCFunction)(void (*)(void))py_run_pieces, METH_FASTCALL,
     "run_pieces(fn, pieces): fn(*piece) for every tuple of the list, on the pool's threads and this one."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_workers", "tallow's worker pool for compiled kernels.",
                                       -1, methods};

PyMODINIT_FUNC PyInit__workers(void) {
    /* the module can be initialised again (a second interpreter); atfork once */
#ifdef POOL_ENABLED
    static int atfork_done = 0;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, after_fork_child);
        atfork_done = 1;
    }
#endif
    tallow_pool = &api; /* this module's own tasks (cover) use it directly */
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    PyObject *cap = PyCapsule_New((void *)&api, TALLOW_POOL_CAPSULE, NULL);
    if (!cap || PyModule_AddObject(m, "_C_API", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_THREADS", MAX_THREADS);
    return m;
}
