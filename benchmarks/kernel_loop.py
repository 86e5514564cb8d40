"""One native call of a plait-c model, timed in a C loop: no Python between the calls.

``spread.py --kernel-loop`` adds it as the backend ``plait-c-kernel``, taking turns with
the others.  Set against ``plait-c`` (the same model through the VM) it separates what
the kernel costs from what calling it from Python costs; on a model of one layer
(``mlp-layer1``) it also sets the bare kernel against onnxruntime.

The call is the model's most expensive one (by one profiled run of the VM).  Its
constant arguments are the model's own; the others are random arrays of the shapes the
function declares (timing a dense kernel does not depend on the values).  The loop is a
small C function compiled with the system compiler; it calls the function through the
same entry point the VM uses.
"""

from __future__ import annotations

import ctypes
from typing import Any

LOOP_SOURCE = r"""
#include <stdint.h>
#include <time.h>

typedef int (*plait_entry)(void** argv, int64_t* sizes);

static double plait_bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Untimed calls for `warm` seconds (at least one), then `n` timed ones into out[]; the
 * first non-zero status stops it and is returned. */
int plait_bench_loop(plait_entry f, void** argv, int64_t* sizes, double warm, int64_t n,
                     double* out) {
    double end = plait_bench_now() + warm;
    int status = f(argv, sizes);
    while (status == 0 && plait_bench_now() < end) status = f(argv, sizes);
    for (int64_t i = 0; status == 0 && i < n; ++i) {
        double t = plait_bench_now();
        status = f(argv, sizes);
        out[i] = plait_bench_now() - t;
    }
    return status;
}
"""


def heaviest_call(vm: Any, *args: Any) -> str:
    """The native function whose calls took the most time in one profiled run of
    ``main``."""
    from plait.runtime.native import native_loader

    _, entries = vm.profile("main", *args)
    seconds: dict[str, float] = {}
    for e in entries:
        seconds[e.callee] = seconds.get(e.callee, 0.0) + e.seconds
    native = [c for c in seconds if native_loader(vm.executable, c) is not None]
    if not native:
        raise ValueError("the model makes no native call (is it built for the c target?)")
    return max(native, key=seconds.__getitem__)


class KernelLoop:
    """``name``'s first call in ``main``, ready to run in the C loop."""

    def __init__(self, exe: Any, name: str) -> None:
        import numpy as np

        from plait.codegen.c.compiler import compile_shared
        from plait.runtime.executable import Call, Const
        from plait.runtime.native import native_loader
        from plait.runtime.vm import aligned_storage

        fn = native_loader(exe, name)
        if fn is None:
            raise ValueError(f"no native function {name!r} in the executable")
        if fn.size_vars:
            raise ValueError(f"{fn.signature} has size variables: the loop needs static "
                             "shapes (build the model for fixed input shapes)")
        call = next((ins for ins in exe.functions["main"].instructions
                     if isinstance(ins, Call) and ins.func == name), None)
        if call is None:
            raise ValueError(f"`main` does not call {name!r} directly")
        rng = np.random.default_rng(0)
        self.arrays = []
        for arg, p in zip(call.args, fn.params, strict=True):
            if isinstance(arg, Const):   # as the VM passes it
                a = np.ascontiguousarray(exe.constants[arg.index], dtype=p.dtype)
            else:   # in 64-byte-aligned storage, as the VM allocates its registers
                nbytes = int(np.prod(p.shape, dtype=np.int64)) * p.dtype.itemsize
                a = aligned_storage(nbytes).view(p.dtype).reshape(p.shape)
                a[...] = rng.standard_normal(p.shape) if p.dtype.kind == "f" else 0
            self.arrays.append(a)
        self.name = name
        self.output = self.arrays[fn.num_inputs]
        self._argv = (ctypes.c_void_p * max(1, len(self.arrays)))(
            *(a.ctypes.data for a in self.arrays))
        self._sizes = (ctypes.c_int64 * 1)()
        self._entry = ctypes.c_void_p(fn.entry_address)
        lib = ctypes.CDLL(str(compile_shared({"plait_bench_loop.c": LOOP_SOURCE})))
        self._loop = lib.plait_bench_loop
        self._loop.restype = ctypes.c_int
        self._loop.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_double, ctypes.c_int64,
                               ctypes.POINTER(ctypes.c_double)]

    def timed(self, runs: int, warm: float) -> list[float]:
        """Untimed calls for ``warm`` seconds (at least one), then the seconds of each of
        ``runs`` timed calls."""
        out = (ctypes.c_double * max(1, runs))()
        status = self._loop(self._entry, self._argv, self._sizes, warm, runs, out)
        if status != 0:
            raise RuntimeError(f"native function {self.name!r} failed with status {status}")
        return list(out[:runs])

    def __call__(self) -> Any:
        """One call (untimed); the first output."""
        self.timed(0, 0.0)
        return self.output
