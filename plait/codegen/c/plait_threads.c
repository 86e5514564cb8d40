/* plait's thread pool (interface and contract in plait_threads.h).
 *
 * Why not OpenMP's parallel regions: a region ends at a barrier that waits for every
 * thread of the team, including one that has not even started because its CPU was taken
 * (by another process, the hypervisor, or another runtime's spinning threads).  On a
 * 2-vCPU virtual machine that makes a 0.3 ms inference take 1-3 ms now and then.  Here
 * a call posts a task, runs it on the calling thread too, and then waits only for the
 * workers that have joined it; a worker that arrives after the task is closed skips it.
 * This is the design of onnxruntime's pool.
 *
 * A worker that joins a task and then loses its CPU mid-share (another process's
 * threads, e.g. torch's OpenMP workers spinning for milliseconds after each torch
 * operation, or a loaded machine) makes the caller wait until the scheduler gives it the
 * CPU back: milliseconds for a call that takes a tenth of that on one thread.  So the
 * caller spins 300 us at most for its workers, then sleeps (its CPU goes idle, and the
 * scheduler may move the waiting worker there), and a worker that leaves the task long
 * after the caller finished its own share (200 us, and more than half that share) is
 * *late*: the calls of the next few milliseconds run on the calling thread alone, a
 * period that doubles while the probes that follow are late too (up to half a second)
 * and halves when one is not.  The pool is then never much slower than one thread, and
 * back to all of them soon after the contention ends (plait_pool_report counts what
 * happened).  Ordinary delays are not late: a worker's last chunk ending some tens of
 * microseconds after the caller's (its CPU a little slower), or the caller's own
 * wake-up after it slept (on a virtual machine 30-80 us: that is why it spins that
 * long first, and why lateness is measured to the time the worker left).
 *
 * Workers spin 300 us for the next task (the gap between the kernels of one inference,
 * and a caller still finishing a longer share), yielding every 64 pauses, then sleep on
 * a condition variable (a wake-up from there takes 30-130 us on a virtual machine, more
 * than many a task); a worker idle for a second exits (and
 * frees its scratch), so a process that loads many libraries does not keep a thread per
 * library.  Workers are joinable: before the runtime unloads a library it calls
 * plait_release, which stops and joins them (no thread is left in code about to be
 * unmapped) and frees every thread's scratch.  A second caller while the pool is busy (a nested call, or another
 * application thread) runs its call on its own thread.  After fork() the child starts
 * with no workers.  Built without threads (PLAIT_THREADS undefined: the compiler
 * has no -pthread), every call runs on the calling thread.  No OpenMP runtime is
 * involved: a library needs nothing but libc (and libpthread on old glibc). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#endif
#include "plait_threads.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef PLAIT_THREADS
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#endif

/* ----------------------------------------------------------------- scratch */

/* Each thread's scratch buffers, in a record of its own that is also on a list of all
 * records: plait_release frees every thread's buffers when the library is unloaded
 * (the thread-local pointer alone would leave them unreachable once the library, and
 * with it the thread-local block, is gone). */
typedef struct plait_scratch_rec {
    float* buf[PLAIT_SCRATCH_SLOTS];
    size_t cap[PLAIT_SCRATCH_SLOTS];
    struct plait_scratch_rec* next;
} plait_scratch_rec;

static plait_scratch_rec* plait_scratch_all = NULL;   /* every thread's record */
static char plait_scratch_lock;                       /* guards the list (a spin lock:
                                                       * taken once per thread) */
static __thread plait_scratch_rec* plait_scratch_mine;
/* plait_free_all_scratch frees every record: a thread's pointer is valid only while
 * its generation is the current one */
static unsigned plait_scratch_gen;
static __thread unsigned plait_scratch_mine_gen;

static void plait_scratch_lock_take(void) {
    while (__atomic_test_and_set(&plait_scratch_lock, __ATOMIC_ACQUIRE)) {
    }
}

static void plait_scratch_lock_drop(void) { __atomic_clear(&plait_scratch_lock, __ATOMIC_RELEASE); }

#ifdef PLAIT_THREADS
/* A thread that is not one of the pool's workers (the application's: a server's thread
 * per request) frees its record when it exits, through a pthread key's destructor;
 * plait_release deletes the key (the destructor is the library's code). */
static pthread_mutex_t plait_scratch_key_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t plait_scratch_key;
static int plait_scratch_key_made;   /* written under plait_scratch_key_lock */

static void plait_scratch_free_rec(plait_scratch_rec* r);

/* Take the calling thread's record r off the list of all records and forget it as the
 * thread's own; 0 (and nothing done) when r is not the thread's live record: none was
 * made, or plait_free_all_scratch freed every record since (the generation moved on). */
static int plait_scratch_unlink_mine(plait_scratch_rec* r) {
    if (r == NULL || plait_scratch_mine != r
            || plait_scratch_mine_gen != __atomic_load_n(&plait_scratch_gen, __ATOMIC_ACQUIRE))
        return 0;
    plait_scratch_lock_take();
    for (plait_scratch_rec** at = &plait_scratch_all; *at != NULL; at = &(*at)->next) {
        if (*at == r) {
            *at = r->next;
            break;
        }
    }
    plait_scratch_lock_drop();
    plait_scratch_mine = NULL;
    return 1;
}

/* The key's destructor: the exiting thread's record, unless plait_release freed every
 * record since it was made (then the generation moved on). */
static void plait_scratch_at_exit(void* p) {
    plait_scratch_rec* r = (plait_scratch_rec*)p;
    if (plait_scratch_unlink_mine(r)) plait_scratch_free_rec(r);
}

/* Register r to be freed when the calling thread exits. */
static void plait_scratch_on_exit(plait_scratch_rec* r) {
    pthread_mutex_lock(&plait_scratch_key_lock);
    if (!plait_scratch_key_made &&
            pthread_key_create(&plait_scratch_key, plait_scratch_at_exit) == 0)
        plait_scratch_key_made = 1;
    if (plait_scratch_key_made) pthread_setspecific(plait_scratch_key, r);
    pthread_mutex_unlock(&plait_scratch_key_lock);
}

/* The calling thread's record is freed already: nothing for the destructor. */
static void plait_scratch_forget(void) {
    pthread_mutex_lock(&plait_scratch_key_lock);
    if (plait_scratch_key_made) pthread_setspecific(plait_scratch_key, NULL);
    pthread_mutex_unlock(&plait_scratch_key_lock);
}

/* No destructor of this library's code runs after it is unloaded. */
static void plait_scratch_drop_key(void) {
    pthread_mutex_lock(&plait_scratch_key_lock);
    if (plait_scratch_key_made) pthread_key_delete(plait_scratch_key);
    plait_scratch_key_made = 0;
    pthread_mutex_unlock(&plait_scratch_key_lock);
}
#endif

float* plait_scratch(int slot, size_t floats) {
    plait_scratch_rec* r = plait_scratch_mine;
    if (r == NULL || plait_scratch_mine_gen != __atomic_load_n(&plait_scratch_gen,
                                                               __ATOMIC_ACQUIRE)) {
        r = (plait_scratch_rec*)calloc(1, sizeof *r);
        if (r == NULL) return NULL;
        plait_scratch_lock_take();
        r->next = plait_scratch_all;
        plait_scratch_all = r;
        plait_scratch_mine_gen = plait_scratch_gen;
        plait_scratch_lock_drop();
        plait_scratch_mine = r;
#ifdef PLAIT_THREADS
        plait_scratch_on_exit(r);
#endif
    }
    if (floats > r->cap[slot]) {
        free(r->buf[slot]);
        r->buf[slot] = NULL;
        r->cap[slot] = 0;
        void* p = NULL;
        if (posix_memalign(&p, 64, floats * sizeof(float))) return NULL;
        r->buf[slot] = (float*)p;
        r->cap[slot] = floats;
    }
    return r->buf[slot];
}

static void plait_scratch_free_rec(plait_scratch_rec* r) {
    for (int s = 0; s < PLAIT_SCRATCH_SLOTS; ++s) free(r->buf[s]);
    free(r);
}

#ifdef PLAIT_THREADS
/* Free the calling thread's buffers and record (a worker that exits). */
static void plait_free_scratch(void) {
    plait_scratch_rec* r = plait_scratch_mine;
    if (!plait_scratch_unlink_mine(r)) return;
    plait_scratch_forget();
    plait_scratch_free_rec(r);
}
#endif

/* Free every thread's buffers and records (when no thread runs the library's code any
 * more: the library is being unloaded). */
static void plait_free_all_scratch(void) {
    plait_scratch_lock_take();
    plait_scratch_rec* r = plait_scratch_all;
    plait_scratch_all = NULL;
    __atomic_add_fetch(&plait_scratch_gen, 1, __ATOMIC_RELEASE);
    plait_scratch_lock_drop();
    while (r != NULL) {
        plait_scratch_rec* next = r->next;
        plait_scratch_free_rec(r);
        r = next;
    }
    plait_scratch_mine = NULL;
}

/* --------------------------------------------------------------------- jobs */

/* 1 on the pool's workers, 0 on every other thread (a caller) */
static __thread int plait_is_worker;

int64_t plait_take_job(int64_t* ends, int64_t n) {
    if (n >= ((int64_t)1 << 31)) {   /* no room for two counts: the front only */
        int64_t j = __atomic_fetch_add(ends, 1, __ATOMIC_RELAXED);
        return j < n ? j : -1;
    }
    const int back = plait_is_worker;
    int64_t v = __atomic_load_n(ends, __ATOMIC_RELAXED);
    for (;;) {
        const int64_t front = v & 0xffffffff, taken = front + (v >> 32);
        if (taken >= n) return -1;
        const int64_t w = back ? v + ((int64_t)1 << 32) : v + 1;
        if (__atomic_compare_exchange_n(ends, &v, w, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return back ? n - 1 - (v >> 32) : front;
    }
}

/* ------------------------------------------------------------------- ranges */

typedef struct {
    plait_range_fn fn;
    void* ctx;
    int64_t n, chunk, chunks;
    int64_t ends;   /* the chunks taken (plait_take_job) */
} plait_range_task;

static void plait_range_run(void* arg) {
    plait_range_task* t = (plait_range_task*)arg;
    for (int64_t c; (c = plait_take_job(&t->ends, t->chunks)) >= 0;) {
        const int64_t lo = c * t->chunk;
        t->fn(t->ctx, lo, t->n - lo < t->chunk ? t->n : lo + t->chunk);
    }
}

/* The threads a parallel call over n jobs gets (at most n); 0 when it is done already:
 * nothing to do, or one thread, which ran fn(ctx, 0, n) */
static int plait_range_threads(plait_range_fn fn, void* ctx, int64_t n, int nthreads) {
    if (n <= 0) return 0;
    if (nthreads > n) nthreads = (int)n;
    if (nthreads <= 1) {
        fn(ctx, 0, n);
        return 0;
    }
    return nthreads;
}

void plait_parallel_range(plait_range_fn fn, void* ctx, int64_t n, int nthreads) {
    if ((nthreads = plait_range_threads(fn, ctx, n, nthreads)) == 0) return;
    /* four chunks per thread: a thread that starts late takes fewer of them; the caller
     * takes them from the front, the workers from the back (plait_take_job) */
    int64_t pieces = 4 * (int64_t)nthreads;
    const int64_t chunk = (n + pieces - 1) / pieces;
    plait_range_task t = {fn, ctx, n, chunk, (n + chunk - 1) / chunk, 0};
    plait_parallel(plait_range_run, &t, nthreads);
}

typedef struct {
    plait_range_fn fn;
    void* ctx;
    int64_t n;
    int64_t ends;   /* the jobs taken (plait_take_job) */
} plait_each_task;

static void plait_each_run(void* arg) {
    plait_each_task* t = (plait_each_task*)arg;
    for (int64_t j; (j = plait_take_job(&t->ends, t->n)) >= 0;) t->fn(t->ctx, j, j + 1);
}

void plait_parallel_each(plait_range_fn fn, void* ctx, int64_t n, int nthreads) {
    if ((nthreads = plait_range_threads(fn, ctx, n, nthreads)) == 0) return;
    plait_each_task t = {fn, ctx, n, 0};
    plait_parallel(plait_each_run, &t, nthreads);
}

#ifdef PLAIT_THREADS
/* --------------------------------------------------------------------- pool */

#define PLAIT_POOL_MAX 256
#define PLAIT_POOL_SPIN_NS 300000      /* a worker spins this long for the next task */
#define PLAIT_POOL_YIELD 64      /* pauses between yields (and clock reads) while spinning */
#define PLAIT_POOL_IDLE_NS 1000000000L   /* a worker asleep this long exits */
#define PLAIT_POOL_WAIT_SPIN_NS 300000   /* the caller spins this long for its workers */
#define PLAIT_POOL_LATE_NS 200000        /* a worker that leaves this long after the caller
                                          * has finished its own share, and later than
                                          * half that share, is late */
#define PLAIT_POOL_SERIAL_MIN_NS 2000000L     /* serial period after a first late wait */
#define PLAIT_POOL_SERIAL_MAX_NS 500000000L   /* the longest serial period */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int64_t gen;       /* tasks posted so far */
    int64_t closed;    /* the last task whose caller has finished its own share */
    int64_t active;    /* workers inside (or deciding whether to join) a task */
    int64_t left_ns;   /* when a worker last left a task (plait_now_ns) */
    int64_t seats;     /* workers the current task may still take */
    int64_t sleepers;  /* workers waiting on wake */
    int busy;          /* a caller is using the pool */
    int workers;       /* threads running */
    plait_task_fn fn;
    void* arg;
    pthread_cond_t done;   /* the last worker of a task has left (a caller sleeps on it) */
    int waiting;           /* the caller sleeps on done */
    /* contention (the caller's, under busy): calls before serial_until run on the
     * calling thread; backoff is the next serial period after a late wait */
    int64_t serial_until, backoff;
    /* counts for plait_pool_report */
    int64_t n_parallel, n_serial, n_late, wait_ns, late_ns;
    /* the worker threads (joinable, so that plait_release can wait until none runs the
     * library's code): a slot is free, running, or exited (waiting to be joined) */
    int stop;          /* plait_release asks every worker to exit */
    pthread_t thread[PLAIT_POOL_MAX];
    unsigned char slot[PLAIT_POOL_MAX];
} plait_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, 0,
                NULL, NULL, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, 0, 0, {0}, {0}};

enum { PLAIT_SLOT_FREE, PLAIT_SLOT_RUNNING, PLAIT_SLOT_EXITED };

static pthread_once_t plait_pool_once = PTHREAD_ONCE_INIT;

static inline int64_t plait_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One step of a spin-wait.  Every PLAIT_POOL_YIELD steps it yields the CPU: when a
 * worker and the thread it waits for share one CPU (more threads than the CPUs the
 * process gets), spinning would take the time that thread needs. */
static inline void plait_relax(int step) {
    if (step % PLAIT_POOL_YIELD == PLAIT_POOL_YIELD - 1) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Wait for a task newer than `seen`; its generation, or -1 when the worker should exit
 * (idle for PLAIT_POOL_IDLE_NS; it has left the count of workers then). */
static int64_t plait_pool_wait(int64_t seen, int slot) {
    int64_t g;
    const int64_t start = plait_now_ns();
    for (int spins = 0;; ++spins) {
        if ((g = __atomic_load_n(&plait_pool.gen, __ATOMIC_SEQ_CST)) != seen) return g;
        if (__atomic_load_n(&plait_pool.stop, __ATOMIC_SEQ_CST)) break;
        if (spins % PLAIT_POOL_YIELD == PLAIT_POOL_YIELD - 1
            && plait_now_ns() - start > PLAIT_POOL_SPIN_NS)
            break;
        plait_relax(spins);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += PLAIT_POOL_IDLE_NS % 1000000000L;
    until.tv_sec += PLAIT_POOL_IDLE_NS / 1000000000L + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&plait_pool.lock);
    __atomic_fetch_add(&plait_pool.sleepers, 1, __ATOMIC_SEQ_CST);
    while ((g = __atomic_load_n(&plait_pool.gen, __ATOMIC_SEQ_CST)) == seen) {
        if (plait_pool.stop
            || (pthread_cond_timedwait(&plait_pool.wake, &plait_pool.lock, &until) == ETIMEDOUT
                && __atomic_load_n(&plait_pool.gen, __ATOMIC_SEQ_CST) == seen)) {
            g = -1;
            plait_pool.workers--;
            plait_pool.slot[slot] = PLAIT_SLOT_EXITED;
            break;
        }
    }
    __atomic_fetch_sub(&plait_pool.sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&plait_pool.lock);
    return g;
}

static int64_t plait_pool_start_gen[PLAIT_POOL_MAX];

static void* plait_pool_worker(void* arg) {
    const int slot = (int)(intptr_t)arg;
    int64_t seen = plait_pool_start_gen[slot];   /* the generation when it was started */
    plait_is_worker = 1;
    for (;;) {
        int64_t g = plait_pool_wait(seen, slot);
        if (g < 0) break;
        seen = g;
        /* Join, unless the task is closed already: then its caller may have returned
         * (and posted another), so nothing of it may be touched.  Counting itself active
         * before that check makes a caller that closes the task afterwards wait for it. */
        __atomic_fetch_add(&plait_pool.active, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&plait_pool.closed, __ATOMIC_SEQ_CST) < g
            && __atomic_fetch_sub(&plait_pool.seats, 1, __ATOMIC_SEQ_CST) > 0) {
            plait_task_fn fn = __atomic_load_n(&plait_pool.fn, __ATOMIC_SEQ_CST);
            void* arg = __atomic_load_n(&plait_pool.arg, __ATOMIC_SEQ_CST);
            fn(arg);
        }
        /* the last to leave wakes a caller that sleeps waiting for it (it set waiting
         * before reading active: one of the two sees the other's write); the time it
         * left tells the caller how late it was (not counting the caller's own wake-up) */
        __atomic_store_n(&plait_pool.left_ns, plait_now_ns(), __ATOMIC_SEQ_CST);
        if (__atomic_sub_fetch(&plait_pool.active, 1, __ATOMIC_SEQ_CST) == 0
            && __atomic_load_n(&plait_pool.waiting, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&plait_pool.lock);
            pthread_cond_broadcast(&plait_pool.done);
            pthread_mutex_unlock(&plait_pool.lock);
        }
    }
    plait_free_scratch();
    return NULL;
}

/* A forked child has none of its parent's threads. */
static void plait_pool_after_fork(void) {
    pthread_mutex_init(&plait_pool.lock, NULL);
    pthread_cond_init(&plait_pool.wake, NULL);
    pthread_cond_init(&plait_pool.done, NULL);
    plait_pool.waiting = 0;
    plait_pool.workers = 0;
    plait_pool.stop = 0;
    for (int i = 0; i < PLAIT_POOL_MAX; ++i) plait_pool.slot[i] = PLAIT_SLOT_FREE;
    plait_pool.active = 0;
    plait_pool.sleepers = 0;
    plait_pool.busy = 0;
}

static void plait_pool_init(void) { pthread_atfork(NULL, NULL, plait_pool_after_fork); }

/* Start workers up to `want`; how many there are. */
static int plait_pool_grow(int want) {
    pthread_once(&plait_pool_once, plait_pool_init);
    if (want > PLAIT_POOL_MAX) want = PLAIT_POOL_MAX;
    pthread_mutex_lock(&plait_pool.lock);
    for (int i = 0; i < PLAIT_POOL_MAX && plait_pool.workers < want; ++i) {
        if (plait_pool.slot[i] == PLAIT_SLOT_RUNNING) continue;
        if (plait_pool.slot[i] == PLAIT_SLOT_EXITED) {   /* it has left its loop */
            pthread_join(plait_pool.thread[i], NULL);
            plait_pool.slot[i] = PLAIT_SLOT_FREE;
        }
        plait_pool_start_gen[i] = __atomic_load_n(&plait_pool.gen, __ATOMIC_SEQ_CST);
        if (pthread_create(&plait_pool.thread[i], NULL, plait_pool_worker, (void*)(intptr_t)i))
            break;
        plait_pool.slot[i] = PLAIT_SLOT_RUNNING;
        plait_pool.workers++;
    }
    int n = plait_pool.workers;
    pthread_mutex_unlock(&plait_pool.lock);
    return n;
}

/* Wait until no worker is inside the task: spin PLAIT_POOL_WAIT_SPIN_NS (yielding now
 * and then, for a worker that shares this CPU), then sleep on done.  The time waited in
 * ns (0 when nobody was inside). */
static int64_t plait_pool_join(void) {
    if (__atomic_load_n(&plait_pool.active, __ATOMIC_SEQ_CST) == 0) return 0;
    int64_t start = plait_now_ns();
    for (int step = 0; __atomic_load_n(&plait_pool.active, __ATOMIC_SEQ_CST) != 0; ++step) {
        if (step % PLAIT_POOL_YIELD == PLAIT_POOL_YIELD - 1
            && plait_now_ns() - start > PLAIT_POOL_WAIT_SPIN_NS) {
            pthread_mutex_lock(&plait_pool.lock);
            __atomic_store_n(&plait_pool.waiting, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&plait_pool.active, __ATOMIC_SEQ_CST) != 0) {
                struct timespec until;   /* (a bound, not needed for correctness) */
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 10000000;
                until.tv_sec += until.tv_nsec / 1000000000;
                until.tv_nsec %= 1000000000;
                pthread_cond_timedwait(&plait_pool.done, &plait_pool.lock, &until);
            }
            __atomic_store_n(&plait_pool.waiting, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&plait_pool.lock);
            break;
        }
        plait_relax(step);
    }
    return plait_now_ns() - start;
}

void plait_parallel(plait_task_fn fn, void* arg, int nthreads) {
    int idle = 0;
    if (nthreads <= 1 || !__atomic_compare_exchange_n(&plait_pool.busy, &idle, 1, 0,
                                                      __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        fn(arg);
        return;
    }
    const int64_t t0 = plait_now_ns();
    if (t0 < plait_pool.serial_until) {   /* a worker was late lately: this thread alone */
        __atomic_store_n(&plait_pool.n_serial, plait_pool.n_serial + 1, __ATOMIC_RELAXED);
        fn(arg);
        __atomic_store_n(&plait_pool.busy, 0, __ATOMIC_RELEASE);
        return;
    }
    int workers = __atomic_load_n(&plait_pool.workers, __ATOMIC_RELAXED);
    if (workers < nthreads - 1) workers = plait_pool_grow(nthreads - 1);
    __atomic_store_n(&plait_pool.seats, nthreads - 1 < workers ? nthreads - 1 : workers,
                     __ATOMIC_SEQ_CST);
    __atomic_store_n(&plait_pool.fn, fn, __ATOMIC_SEQ_CST);
    __atomic_store_n(&plait_pool.arg, arg, __ATOMIC_SEQ_CST);
    int64_t g = __atomic_add_fetch(&plait_pool.gen, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&plait_pool.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&plait_pool.lock);
        pthread_cond_broadcast(&plait_pool.wake);
        pthread_mutex_unlock(&plait_pool.lock);
    }
    fn(arg);
    __atomic_store_n(&plait_pool.closed, g, __ATOMIC_SEQ_CST);
    const int64_t own = plait_now_ns() - t0;
    const int64_t waited = plait_pool_join();
    /* late: a worker held part of the task long after the caller had done the rest.
     * Measured to the time the last worker left (a caller that slept also waited for
     * its own wake-up: 30-80 us on a virtual machine, no sign of a worker's trouble) */
    const int64_t tail = waited > 0 ? __atomic_load_n(&plait_pool.left_ns, __ATOMIC_SEQ_CST)
                                          - (t0 + own) : 0;
    if (tail > PLAIT_POOL_LATE_NS && 2 * tail > own) {
        int64_t b = plait_pool.backoff * 2;
        b = b < PLAIT_POOL_SERIAL_MIN_NS ? PLAIT_POOL_SERIAL_MIN_NS
            : b > PLAIT_POOL_SERIAL_MAX_NS ? PLAIT_POOL_SERIAL_MAX_NS : b;
        plait_pool.backoff = b;
        plait_pool.serial_until = t0 + own + waited + b;
        __atomic_store_n(&plait_pool.n_late, plait_pool.n_late + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&plait_pool.late_ns, plait_pool.late_ns + waited, __ATOMIC_RELAXED);
    } else {
        plait_pool.backoff = plait_pool.backoff / 2 < PLAIT_POOL_SERIAL_MIN_NS
                                 ? 0 : plait_pool.backoff / 2;
    }
    __atomic_store_n(&plait_pool.n_parallel, plait_pool.n_parallel + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&plait_pool.wait_ns, plait_pool.wait_ns + waited, __ATOMIC_RELAXED);
    __atomic_store_n(&plait_pool.busy, 0, __ATOMIC_RELEASE);
}

/* The pool's counts as JSON (exported: the one public symbol of the pool). */
__attribute__((visibility("default"))) const char* plait_pool_report(void) {
    static __thread char buf[256];
    snprintf(buf, sizeof buf,
             "{\"threads\": %d, \"workers\": %d, \"parallel\": %lld, \"serial\": %lld, "
             "\"late\": %lld, \"wait_ns\": %lld, \"late_ns\": %lld, \"backoff_ns\": %lld}",
             plait_max_threads(), __atomic_load_n(&plait_pool.workers, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.n_parallel, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.n_serial, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.n_late, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.wait_ns, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.late_ns, __ATOMIC_RELAXED),
             (long long)__atomic_load_n(&plait_pool.backoff, __ATOMIC_RELAXED));
    return buf;
}

/* Stop the pool's workers, wait until each has left the library's code (joined), and
 * free every thread's scratch: what the runtime calls before it unloads the library
 * (dlclose), when no thread is inside the library's functions.  The pool starts again
 * on the next parallel call, should there be one. */
__attribute__((visibility("default"))) void plait_release(void) {
    pthread_t running[PLAIT_POOL_MAX];
    int n = 0;
    pthread_mutex_lock(&plait_pool.lock);
    plait_pool.stop = 1;
    pthread_cond_broadcast(&plait_pool.wake);
    for (int i = 0; i < PLAIT_POOL_MAX; ++i) {
        if (plait_pool.slot[i] != PLAIT_SLOT_FREE) running[n++] = plait_pool.thread[i];
    }
    pthread_mutex_unlock(&plait_pool.lock);
    for (int i = 0; i < n; ++i) pthread_join(running[i], NULL);
    pthread_mutex_lock(&plait_pool.lock);
    for (int i = 0; i < PLAIT_POOL_MAX; ++i) plait_pool.slot[i] = PLAIT_SLOT_FREE;
    plait_pool.stop = 0;
    plait_pool.workers = 0;
    pthread_mutex_unlock(&plait_pool.lock);
    plait_free_all_scratch();
    plait_scratch_drop_key();
}

/* A positive thread count from the environment variable `name` (the first number of
 * OMP_NUM_THREADS's list), or 0. */
static int plait_env_threads(const char* name) {
    const char* v = getenv(name);
    if (v == NULL) return 0;
    char* end = NULL;
    long n = strtol(v, &end, 10);
    return end != v && n > 0 ? (n > PLAIT_POOL_MAX + 1 ? PLAIT_POOL_MAX + 1 : (int)n) : 0;
}

/* The threads of a parallel call: the count below, capped by the calling thread's cap. */
static __thread int plait_thread_cap = 0;   /* plait_set_thread_cap: this thread's cap */

int plait_set_thread_cap(int n) {
    const int old = plait_thread_cap;
    plait_thread_cap = n > 0 ? n : 0;
    return old;
}

static int plait_uncapped_threads(void);

int plait_max_threads(void) {
    const int n = plait_uncapped_threads();
    return plait_thread_cap > 0 && plait_thread_cap < n ? plait_thread_cap : n;
}

/* PLAIT_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this process may run on; read
 * once, on the first call (as OpenMP reads its settings once). */
static int plait_uncapped_threads(void) {
    static int cached = 0;
    int n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (n > 0) return n;
    n = plait_env_threads("PLAIT_NUM_THREADS");
    if (n == 0) n = plait_env_threads("OMP_NUM_THREADS");
#if defined(__linux__) && defined(CPU_COUNT)
    if (n == 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    }
#endif
#ifdef _SC_NPROCESSORS_ONLN
    if (n == 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
#endif
    if (n < 1) n = 1;
    if (n > PLAIT_POOL_MAX + 1) n = PLAIT_POOL_MAX + 1;
    __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    return n;
}
#else
void plait_parallel(plait_task_fn fn, void* arg, int nthreads) {
    (void)nthreads;
    fn(arg);
}

int plait_max_threads(void) { return 1; }

int plait_set_thread_cap(int n) {
    (void)n;
    return 0;
}

__attribute__((visibility("default"))) void plait_release(void) { plait_free_all_scratch(); }

__attribute__((visibility("default"))) const char* plait_pool_report(void) {
    return "{\"threads\": 1, \"workers\": 0, \"parallel\": 0, \"serial\": 0, "
           "\"late\": 0, \"wait_ns\": 0, \"late_ns\": 0, \"backoff_ns\": 0}";
}
#endif
