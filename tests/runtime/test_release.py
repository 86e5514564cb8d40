"""Native libraries are released when nothing uses them (plait/runtime/unload.py).

``python tests/runtime/test_release.py 2000`` prints the figures of the 2,000-model run
(RSS, descriptors and library counts at the 500th and the last model).

A library is unmapped, its thread pool joined, its threads' scratch freed and its memory
file closed once the last VM, function or module of it is gone; at most
``KEEP_RECENT`` libraries no longer in use stay mapped.  The 2,000-model test runs in a
child process under a 1,024 open-file limit (before, every distinct model kept a
descriptor for the life of the process: the 1,017th failed with "Too many open files").
Distinct models are made cheaply: one library compiled once, whose copies differ in a
constant the model adds to its input (patched into the library's bytes), so each is a
library of its own to the loader, and each output is checked against numpy (exact:
float32 additions of small integers).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.codegen.c.compiler import NativeUnavailableError, find_compiler
from plait.runtime import VirtualMachine, native

PROC = Path("/proc/self/fd").is_dir() and hasattr(os, "memfd_create")

MODEL = '''
import dataclasses, hashlib, struct
import numpy as np
import plait
from plait.codegen.c import CFunction, CSource
from plait.target.c import add_c_source

TAG = b"plait-nonce-tag\\0"
SOURCE = CSource("""#include <stddef.h>
#include <stdint.h>
#include <string.h>
float* plait_scratch(int slot, size_t floats);
struct plait_nonce { char tag[16]; int32_t k; };
__attribute__((used)) const volatile struct plait_nonce plait_test_nonce =
    {"plait-nonce-tag", 0};
/* y = x + k, k the constant patched into each copy of the library; grab = n floats of
 * the calling thread's scratch, every page touched */
int addk(const float* x, const float* grab, float* y, long n, long g) {
    if (g > 0) {
        float* s = plait_scratch(0, (size_t)g);
        if (s == NULL) return 1;
        memset(s, 1, (size_t)g * sizeof(float));
    }
    (void)grab;
    float k = (float)plait_test_nonce.k;
    for (long i = 0; i < n; ++i) y[i] = x[i] + k;
    return 0;
}""", (CFunction("addk", ((("n",), "float32"), (("g", 0), "float32"), (("n",), "float32")),
                  returns="int"),), "addk.c")
MODULE = add_c_source(plait.parse("""
@module
class Module:
    @function
    def main(x: Tensor((n,), "float32"),
             grab: Tensor((g, 0), "float32")) -> Tensor((n,), "float32"):
        with dataflow():
            y = call_extern(extern("addk"), (x, grab), out=Tensor((n,), "float32"))
            output(y)
        return y
"""), SOURCE)


def variant(exe, k):
    """``exe`` with its library's constant set to ``k``: another library, another model."""
    base = exe.libs["c"]
    at = base.index(TAG) + len(TAG)
    lib = base[:at] + struct.pack("<i", k) + base[at + 4:]
    return dataclasses.replace(exe, libs={"c": lib},
                               lib_digests={"c": hashlib.sha256(lib).hexdigest()})
'''

MANY = MODEL + '''
import json, os, resource, sys
from plait.runtime import VirtualMachine
from plait.runtime.native import library_stats

resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
exe = plait.build(MODULE, "c")
x, grab = np.arange(8, dtype=np.float32), np.empty((0, 0), np.float32)


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


marks = {}
for k in range(1, int(sys.argv[1]) + 1):
    out = VirtualMachine(variant(exe, k))["main"](x, grab)
    if not np.array_equal(out, x + np.float32(k)):
        sys.exit(f"model {k}: {out} is not {x + k}")
    if k in (500, int(sys.argv[1])):
        marks[k] = {"rss_mb": rss_mb(), "fds": len(os.listdir("/proc/self/fd")),
                    **library_stats()}
print(json.dumps(marks))
'''


def _compiler_or_skip() -> None:
    try:
        find_compiler()
    except NativeUnavailableError as e:
        pytest.skip(str(e))


def _child(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
    return r.stdout


@pytest.mark.skipif(not PROC, reason="needs Linux's /proc and memfd_create")
def test_2000_distinct_models_in_one_process_under_a_1024_file_limit() -> None:
    """2,000 distinct models built (patched), run and dropped one after the other in a
    process limited to 1,024 open files: descriptors and memory stay flat between the
    500th and the 2,000th (bound: 8 MiB of RSS; measured 0), at most KEEP_RECENT
    libraries stay mapped."""
    _compiler_or_skip()
    marks = json.loads(_child(MANY, "2000"))
    at500, at2000 = marks["500"], marks["2000"]
    assert at2000["fds"] == at500["fds"], marks
    assert at2000["rss_mb"] - at500["rss_mb"] < 8, marks
    assert at2000["mapped"] <= native.KEEP_RECENT, marks
    assert at2000["released"] >= 2000 - native.KEEP_RECENT and at2000["kept"] == 0, marks


def _maps_of(digest: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(f"plait-{digest[:12]}" in line for line in f)


@pytest.mark.skipif(not PROC, reason="needs Linux's /proc and memfd_create")
def test_the_last_vm_dropped_unmaps_its_library_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the reuse cache off and the cycle collector off: dropping the VM (the last
    user) unmaps the library and closes its memory file right away."""
    _compiler_or_skip()
    ns: dict = {}
    exec(MODEL, ns)
    exe = ns["variant"](plait.build(ns["MODULE"], "c"), 7)
    digest = exe.lib_digests["c"]
    monkeypatch.setattr(native, "KEEP_RECENT", 0)
    x, grab = np.arange(5, dtype=np.float32), np.empty((0, 0), np.float32)
    native.release_unused_libraries()
    gc.disable()
    try:
        fds = len(os.listdir("/proc/self/fd"))
        stats = native.library_stats()
        vm = VirtualMachine(exe)
        np.testing.assert_array_equal(vm["main"](x, grab), x + np.float32(7))
        assert _maps_of(digest) > 0 and len(os.listdir("/proc/self/fd")) == fds + 1
        del vm
        assert _maps_of(digest) == 0
        assert len(os.listdir("/proc/self/fd")) == fds
        after = native.library_stats()
        assert after["released"] == stats["released"] + 1 and after["kept"] == stats["kept"]
    finally:
        gc.enable()


@pytest.mark.skipif(not PROC, reason="needs Linux's /proc and memfd_create")
def test_libraries_no_longer_used_are_kept_up_to_the_bound() -> None:
    """A VM made again for a model whose last VM is gone finds its library mapped (the
    KEEP_RECENT most recent ones); release_unused_libraries() unmaps them."""
    _compiler_or_skip()
    ns: dict = {}
    exec(MODEL, ns)
    exe = plait.build(ns["MODULE"], "c")
    exes = [ns["variant"](exe, 100 + k) for k in range(native.KEEP_RECENT + 2)]
    x, grab = np.arange(3, dtype=np.float32), np.empty((0, 0), np.float32)
    for k, e in enumerate(exes):
        np.testing.assert_array_equal(VirtualMachine(e)["main"](x, grab), x + 100 + k)
    mapped = [_maps_of(e.lib_digests["c"]) > 0 for e in exes]
    assert mapped == [False] * 2 + [True] * native.KEEP_RECENT
    before = native.library_stats()["released"]
    np.testing.assert_array_equal(VirtualMachine(exes[-1])["main"](x, grab), x + 105)
    assert native.library_stats()["released"] == before   # found, not mapped again
    native.release_unused_libraries()
    assert not any(_maps_of(e.lib_digests["c"]) for e in exes)


RELEASE_CHILD = MODEL + '''
import os
import numpy as np
from plait.codegen.c import NativeLibrary, compile_kernels
from plait.kernel import parse_kernels
from plait.runtime.native import library_stats


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


threads = lambda: len(os.listdir("/proc/self/task"))
scale = compile_kernels(parse_kernels("""
@kernel
def scale(x: Buffer((n,), "float32"), y: Buffer((n,), "float32", output=True)):
    for i in parallel(n):
        y[i] = x[i] * 3.0 + 1.0
"""))
data = scale.data
del scale
x = np.arange(100000, dtype=np.float32)
before = threads()
lib = NativeLibrary.from_bytes(data)
f = lib.get("scale")
assert np.array_equal(f(x), x * np.float32(3) + np.float32(1))
assert threads() == before + 3, (before, threads())   # OMP_NUM_THREADS=4
del f, lib
import plait.runtime.native as native
native.release_unused_libraries()
assert threads() == before, (before, threads())       # joined now, not after 1 s idle
assert library_stats()["mapped"] == 0, library_stats()
pid = os.fork()   # the library's fork handler went with it
if pid == 0:
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
# the calling thread's scratch (64 MiB here) is freed with the library
exe = variant(plait.build(MODULE, "c"), 1)
from plait.runtime import VirtualMachine
small = np.arange(4, dtype=np.float32)
base = rss_mb()
vm = VirtualMachine(exe)
assert np.array_equal(vm["main"](small, np.empty((1 << 24, 0), np.float32)), small + 1)
grown = rss_mb() - base
del vm
native.release_unused_libraries()
print(grown, rss_mb() - base)
'''


@pytest.mark.skipif(not PROC, reason="needs Linux's /proc and memfd_create")
def test_the_pool_is_joined_and_scratch_freed_before_unmapping() -> None:
    """Unmapping a library whose pool has workers: they are joined first (the thread
    count is back at once, and the process neither crashes nor leaves a fork handler
    behind), and the 64 MiB of scratch the calling thread took is given back."""
    _compiler_or_skip()
    env = {k: v for k, v in os.environ.items() if k != "PLAIT_NUM_THREADS"}
    env["OMP_NUM_THREADS"] = "4"
    grown, left = map(float, _child(textwrap.dedent(RELEASE_CHILD), env=env).split())
    assert grown > 60 and left < 8, (grown, left)


if __name__ == "__main__":
    print(_child(MANY, sys.argv[1] if len(sys.argv) > 1 else "2000"), end="")
