/* plait's thread pool: the one place a native library runs work on several threads.
 * Generated kernels (their parallel loops, outlined by plait.codegen.c.emit) and the
 * C target's kernel families (plait_gemm.c...) all call it, so one set of worker
 * threads serves a whole model.  Every library gets its own copy (plait_threads.c, linked into it); its
 * symbols are hidden, so two libraries in one process never share or mix state. */
#ifndef PLAIT_THREADS_H
#define PLAIT_THREADS_H
#include <stddef.h>
#include <stdint.h>
#if defined(__GNUC__) && !defined(_WIN32)
#define PLAIT_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_HIDDEN
#endif

typedef void (*plait_task_fn)(void* arg);
typedef void (*plait_range_fn)(void* ctx, int64_t lo, int64_t hi);

/* fn(arg) on the calling thread and on up to nthreads - 1 workers; returns when every
 * thread that started it has returned.  fn takes its work from a counter in arg: any
 * thread may do any share, and the calling thread all of it (a worker that has not
 * started by the time the work is gone skips the task instead of being waited for). */
PLAIT_HIDDEN void plait_parallel(plait_task_fn fn, void* arg, int nthreads);

/* fn(ctx, lo, hi) over [0, n) in chunks taken from a shared counter, on up to nthreads
 * threads (nthreads <= 1: one call fn(ctx, 0, n) on this thread). */
PLAIT_HIDDEN void plait_parallel_range(plait_range_fn fn, void* ctx, int64_t n, int nthreads);

/* fn(ctx, j, j + 1) for every job j of [0, n), each taken alone as a thread gets to it
 * (plait_take_job: the caller from the front, the workers from the back), on up to
 * nthreads threads.  For work that streams memory in jobs of similar size (the decode
 * products): the threads finish within one job of each other, where the four chunks a
 * thread of plait_parallel_range gets can leave one waiting for a chunk's time. */
PLAIT_HIDDEN void plait_parallel_each(plait_range_fn fn, void* ctx, int64_t n, int nthreads);

/* Jobs 0 .. n-1 of a parallel call taken from both ends: the calling thread takes them
 * from the front, the workers from the back, each exactly once (*ends starts at 0, the
 * front's and the back's counts packed in one word).  The next job, or -1 when none is
 * left.  So with two threads the caller computes the first jobs and the worker the last
 * ones in every call: kernels whose jobs are ordered the same way (the pixels of an
 * image, top to bottom) read, in the next layer, what the same thread (its CPU's
 * caches) wrote in the previous one; a shared counter dealt the jobs out in the order
 * threads asked.  Needs n < 2^31 (more jobs: all from the front). */
PLAIT_HIDDEN int64_t plait_take_job(int64_t* ends, int64_t n);

/* How many threads a parallel call may use: OMP_NUM_THREADS, or the CPUs this process
 * may run on; 1 when the library was built without threads. */
PLAIT_HIDDEN int plait_max_threads(void);

/* Cap the threads of the parallel calls this thread makes at `n` (0: no cap) until the
 * next call; returns the previous cap.  The C API of a library exported with
 * plait.export_library sets it around a run (its option num_threads). */
PLAIT_HIDDEN int plait_set_thread_cap(int n);

/* Per-thread scratch buffer `slot` (0 .. PLAIT_SCRATCH_SLOTS - 1) of at least `floats`
 * floats, 64-byte aligned; it only grows, a worker frees its own when it exits, and
 * plait_release (before the library is unloaded) frees every thread's.
 * NULL when out of memory. */
#define PLAIT_SCRATCH_SLOTS 5
PLAIT_HIDDEN float* plait_scratch(int slot, size_t floats);
#endif
