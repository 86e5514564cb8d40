"""The thread pool of native libraries (plait/codegen/c/plait_threads.c) and the outlined
parallel loops of generated kernels.

Results are checked against numpy (float32, rtol 1e-6: the same operations in the same
order per element).  Thread counts and fork() are checked in a child process of their
own, with OMP_NUM_THREADS=2, so the test does not depend on the machine's CPU count.
"""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from plait.codegen.c import NativeLibrary, compile_kernels
from plait.codegen.c.compiler import NativeUnavailableError, find_compiler
from plait.kernel import parse_kernels

KERNELS = '''
@kernel
def rows(x: Buffer((m, n), "float32"), out: Buffer((m, n), "float32", output=True)):
    for r in range(m):
        s = float32(r) * 0.5
        tmp = alloc((4,), "float32")
        tmp[0] = s + 1.0
        for j in parallel(n):
            out[r, j] = x[r, j] * tmp[0] + s

@kernel
def huge_scratch(
    x: Buffer((n,), "float32"),
    size: Buffer((k, 0), "float32"),
    y: Buffer((n,), "float32", output=True),
):
    for i in parallel(n):
        tmp = alloc((k,), "float32")
        tmp[0] = x[i]
        y[i] = tmp[0]

@kernel
def scale(x: Buffer((n,), "float32"), y: Buffer((n,), "float32", output=True)):
    for i in parallel(n):
        y[i] = x[i] * 3.0 + 1.0
'''


def _compiler_or_skip() -> None:
    try:
        find_compiler()
    except NativeUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def lib() -> NativeLibrary:
    _compiler_or_skip()
    return compile_kernels(parse_kernels(KERNELS))


def test_parallel_body_is_outlined_with_what_it_uses(lib: NativeLibrary) -> None:
    """The parallel loop inside a serial loop reads the serial loop's variable, a let
    variable and a local buffer defined outside it: all travel to the outlined body."""
    src = lib.sources["plait_kernels.c"]
    assert "plait_parallel_range(plait_k_rows_par0" in src
    assert "#pragma omp parallel" not in src
    x = np.random.default_rng(0).standard_normal((3, 40000)).astype(np.float32)
    r = np.arange(3, dtype=np.float32)[:, None] * np.float32(0.5)
    np.testing.assert_allclose(lib.get("rows")(x), x * (r + 1) + r, rtol=1e-6)
    small = x[:, :100]   # below the parallel threshold: one call on this thread
    np.testing.assert_allclose(lib.get("rows")(small), small * (r + 1) + r, rtol=1e-6)


def test_a_failed_allocation_on_a_worker_reaches_the_kernel_status(lib: NativeLibrary) -> None:
    x = np.ones(40000, np.float32)
    assert lib.get("huge_scratch")(x, np.empty((3, 0), np.float32))[0] == 1.0
    with pytest.raises(RuntimeError, match="'huge_scratch' failed with status 1"):
        lib.get("huge_scratch")(x, np.empty((2**42, 0), np.float32))


def test_concurrent_callers(lib: NativeLibrary) -> None:
    """Two application threads calling at once: one uses the pool, the other runs its
    call on its own thread; both results are right."""
    f = lib.get("scale")
    xs = [np.random.default_rng(i).standard_normal(100000).astype(np.float32) for i in (1, 2)]
    bad: list[int] = []

    def work(x: np.ndarray) -> None:
        for _ in range(50):
            if not np.array_equal(f(x), x * np.float32(3) + np.float32(1)):
                bad.append(1)

    ts = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


CHILD = '''
import os, sys, time
import numpy as np
from plait.codegen.c import NativeLibrary
lib = NativeLibrary.load(sys.argv[1])
f = lib.get("scale")
x = np.arange(100000, dtype=np.float32)
ref = x * np.float32(3) + np.float32(1)
threads = lambda: len(os.listdir("/proc/self/task"))
before = threads()
assert np.array_equal(f(x), ref)
started = threads()
assert started == before + 1, (before, started)   # one worker for OMP_NUM_THREADS=2
for _ in range(100):
    assert np.array_equal(f(x), ref)
assert threads() == started                        # reused, not one per call
pid = os.fork()
if pid == 0:   # the child has no workers; its calls still run (and start its own)
    ok = np.array_equal(f(x), ref) and np.array_equal(f(x), ref)
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert status == 0, status
deadline = time.time() + 10
while threads() > before and time.time() < deadline:
    time.sleep(0.1)
assert threads() == before                         # an idle worker exits
assert np.array_equal(f(x), ref)                   # and comes back when needed
print("ok")
'''


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_workers_start_once_exit_when_idle_and_survive_fork(lib: NativeLibrary) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PLAIT_NUM_THREADS"}
    env["OMP_NUM_THREADS"] = "2"
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(lib.path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


SERIAL_CHILD = '''
import os, sys
import numpy as np
from plait.codegen.c import NativeLibrary
f = NativeLibrary.load(sys.argv[1]).get("scale")
x = np.arange(100000, dtype=np.float32)
before = len(os.listdir("/proc/self/task"))
assert np.array_equal(f(x), x * np.float32(3) + np.float32(1))
print(len(os.listdir("/proc/self/task")) - before)
'''


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_plait_num_threads_wins_over_omp_num_threads(lib: NativeLibrary) -> None:
    for plait_threads, started in (("1", "0"), ("2", "1")):
        env = dict(os.environ, OMP_NUM_THREADS="2" if plait_threads == "1" else "1",
                   PLAIT_NUM_THREADS=plait_threads)
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(SERIAL_CHILD), str(lib.path)],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == started, (plait_threads, r.stderr)


def test_no_openmp_runtime_is_linked(lib: NativeLibrary) -> None:
    """Threads come from the pool (pthreads); OpenMP is used for its simd hints only,
    so a built library runs where libgomp is not installed."""
    assert b"libgomp" not in lib.data and b"omp_get" not in lib.data
    assert "#pragma omp simd" in lib.sources["plait_kernels.c"]


def test_an_unusable_plait_num_threads_is_named(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """Loading a library with PLAIT_NUM_THREADS set to something that is not a thread
    count warns (the library would silently ignore it)."""
    _compiler_or_skip()
    from plait.runtime import native

    monkeypatch.setattr(native, "_WARNED_THREADS", set())
    monkeypatch.setenv("PLAIT_NUM_THREADS", "two")
    with pytest.warns(RuntimeWarning, match="PLAIT_NUM_THREADS='two' is not a positive integer"):
        lib = compile_kernels(parse_kernels(KERNELS), cache_dir=tmp_path)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(lib.get("scale")(x), x * np.float32(3) + np.float32(1))
    monkeypatch.setenv("PLAIT_NUM_THREADS", "2")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native._check_thread_setting()   # a thread count: silent


LATE_CHILD = r'''
import sys, time
import numpy as np
from plait.codegen.c import CFunction, CSource, compile_kernels
from plait.codegen.c.emit import threads_header_text

CODE = threads_header_text() + """
#include <pthread.h>
#include <time.h>
typedef struct { pthread_t caller; int64_t next, n; float* out; long worker_ns; } job;
static void run(void* arg) {
    job* j = (job*)arg;
    for (int64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED); i < j->n;
         i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) {
        /* the caller's items take 0.2 ms; a worker's worker_ns: one that loses its CPU
         * in the middle of its share */
        int worker = !pthread_equal(pthread_self(), j->caller);
        struct timespec ts = {0, worker ? j->worker_ns : 200000};
        nanosleep(&ts, NULL);
        j->out[i] = (float)i;
    }
}
int late_pool(const float* worker_ms, float* out, int64_t n) {
    job j = {pthread_self(), 0, n, out, (long)(worker_ms[0] * 1e6f)};
    plait_parallel(run, &j, plait_max_threads());
    return 0;
}
"""
fn = CFunction("late_pool", (((1,), "float32"), (("n",), "float32")), returns="int")
lib = compile_kernels({}, c_sources=[CSource(CODE, (fn,), "late_pool.c")],
                      cache_dir=sys.argv[1])
f, report = lib.get("late_pool"), lib.module.pool_report
want = np.arange(16, dtype=np.float32)


def call(worker_ms):
    out = np.zeros(16, np.float32)
    f(np.float32([worker_ms]), out)   # (the function writes `out`, returns None)
    return out


for _ in range(3):   # workers started (a loaded machine may make one late already)
    assert np.array_equal(call(0.2), want)
first = report()
assert first["threads"] == 2 and first["parallel"] + first["serial"] == 3, first
for _ in range(12):  # the worker sleeps 30 ms in its share: late, then serial calls
    assert np.array_equal(call(30), want)
late = report()
n_late, n_serial = late["late"] - first["late"], late["serial"] - first["serial"]
# each late call is followed by a serial period of 2, 4, 8... ms (a call takes 3.2 ms
# on the calling thread): 12 calls give at least 1 late and 3 serial calls
assert n_late >= 1 and n_serial >= 3, (first, late)
# a late wait (the worker's 30 ms less the caller's share, which a loaded machine
# stretches) is over the 50 us threshold, and counted in the waits too
late_ns = late["late_ns"] - first["late_ns"]
assert 50e3 * n_late < late_ns <= late["wait_ns"] - first["wait_ns"], (first, late)
assert late["backoff_ns"] >= 2e6, late
time.sleep(late["backoff_ns"] * 1e-9 + 0.05)   # the serial period is over: a probe
call(0.2)
assert report()["parallel"] == late["parallel"] + 1, (late, report())
print("ok")
'''


def test_a_late_worker_sends_the_next_calls_to_the_calling_thread(tmp_path: Path) -> None:
    """A worker that loses its CPU in the middle of its share (simulated: it sleeps
    30 ms there) makes its caller wait for it (the results stay right), and the calls
    of the next milliseconds then run on the calling thread alone (counted by
    plait_pool_report), until the serial period ends and a call tries the pool again."""
    _compiler_or_skip()
    env = dict(os.environ, PLAIT_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", LATE_CHILD, str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


NOW_NS = r"""#include <pthread.h>
#include <time.h>
static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}"""
"""The C prelude of the children below that spin for a while (``now_ns``)."""


SLOWER_CHILD = r'''
import sys
import numpy as np
from plait.codegen.c import CFunction, CSource, compile_kernels
from plait.codegen.c.emit import threads_header_text

CODE = threads_header_text() + """
@NOW_NS@
typedef struct { pthread_t caller; int64_t next; float* out; } job;
static void run(void* arg) {
    job* j = (job*)arg;
    for (int64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED); i < 2;
         i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) {
        /* busy (not asleep, so on time): the caller's item 50 us, a worker's 150 us */
        int worker = !pthread_equal(pthread_self(), j->caller);
        long end = now_ns() + (worker ? 150000 : 50000);
        while (now_ns() < end) {}
        j->out[i] = (float)i;
    }
}
int slower_pool(float* out) {
    job j = {pthread_self(), 0, out};
    plait_parallel(run, &j, plait_max_threads());
    return 0;
}
"""
fn = CFunction("slower_pool", ((("n",), "float32"),), returns="int")
lib = compile_kernels({}, c_sources=[CSource(CODE, (fn,), "slower_pool.c")],
                      cache_dir=sys.argv[1])
f, report = lib.get("slower_pool"), lib.module.pool_report
out = np.zeros(2, np.float32)
f(out)   # the worker started (and from now on, spinning between the calls, it joins
#          each call at once)
first = report()
for _ in range(20):
    out[:] = 0
    f(out)
    assert np.array_equal(out, [0, 1]), out
last = report()
print(last["parallel"] - first["parallel"], last["late"] - first["late"])
'''.replace("@NOW_NS@", NOW_NS)


def test_a_worker_a_little_slower_than_its_caller_is_not_late(tmp_path: Path) -> None:
    """A worker whose share ends 80 us after its caller's (a 100 us share against its
    180 us one) is not late: the caller spins for it (a caller that slept 20 us into the
    wait woke 30-80 us later on a virtual machine, and that wait counted as late), so
    the calls stay parallel.  (A loaded machine may take a worker's CPU for real once:
    then a few calls run serially.)"""
    _compiler_or_skip()
    env = dict(os.environ, PLAIT_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", SLOWER_CHILD, str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    parallel, late = map(int, r.stdout.split())
    assert parallel >= 14 and late <= 1, r.stdout


ENDS_CHILD = r'''
import sys
import numpy as np
from plait.codegen.c import CFunction, CSource, compile_kernels
from plait.codegen.c.emit import threads_header_text

CODE = threads_header_text() + """
@NOW_NS@
typedef struct { pthread_t caller; int64_t ends, n; float* out; } job;
static void run(void* arg) {
    job* j = (job*)arg;
    const int worker = !pthread_equal(pthread_self(), j->caller);
    for (int64_t i; (i = plait_take_job(&j->ends, j->n)) >= 0;) {
        long end = now_ns() + 20000;   /* 20 us of work per job (busy) */
        while (now_ns() < end) {}
        j->out[i] += worker ? 2.0f : 1.0f;   /* 1: the caller's, 2: a worker's */
    }
}
int two_ends(float* out, int64_t n) {
    job j = {pthread_self(), 0, n, out};
    plait_parallel(run, &j, plait_max_threads());
    return 0;
}
/* jobs taken one after another on this thread (no pool): the front, in order, also
 * past 2^31 jobs (where the back's count has no room) */
int front_only(float* out, int64_t n) {
    int64_t small = 0, big = 0;
    const int64_t huge = ((int64_t)1 << 31) + 5;
    for (int64_t i = 0; i < n; ++i) {
        out[i] = (float)plait_take_job(&small, n);
        if (plait_take_job(&big, huge) != i) return 1;
    }
    return plait_take_job(&small, n) == -1 ? 0 : 2;
}
"""
fns = (CFunction("two_ends", ((("n",), "float32"),), returns="int"),
       CFunction("front_only", ((("n",), "float32"),), returns="int"))
lib = compile_kernels({}, c_sources=[CSource(CODE, fns, "two_ends.c")],
                      cache_dir=sys.argv[1])
f, report = lib.get("two_ends"), lib.module.pool_report
for n in (1, 2, 7, 64):
    out = np.zeros(n, np.float32)
    lib.get("front_only")(out)
    assert np.array_equal(out, np.arange(n)), out
split = 0
for _ in range(20):
    for n in (1, 2, 7, 64):
        out = np.zeros(n, np.float32)
        f(out)
        # every job once; the caller's a prefix, the worker's the rest
        assert set(out.tolist()) <= {1.0, 2.0}, out
        k = int(np.sum(out == 1.0))
        assert np.all(out[:k] == 1.0) and np.all(out[k:] == 2.0), out
        split += n == 64 and 0 < k < n
print(split)
'''.replace("@NOW_NS@", NOW_NS)


def test_jobs_from_both_ends(tmp_path: Path) -> None:
    """plait_take_job: every job is taken exactly once; the calling thread takes them
    from the front and the worker from the back, so the caller's jobs are a prefix
    and the worker's the rest (on an idle machine both take some of 64 jobs of 20 us);
    alone, a thread takes them in order, also when there are more than 2^31."""
    _compiler_or_skip()
    env = dict(os.environ, PLAIT_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", ENDS_CHILD, str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) >= 1, r.stdout   # the worker joined at least once
