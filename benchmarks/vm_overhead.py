"""VM overhead per instruction, and planned peak memory against the sum of all
intermediate tensors.

    python benchmarks/vm_overhead.py

1. A chain of N tiny elementwise ops (`add` on 4-element tensors) is built for the
   numpy target and run on the VM.  The same packed functions are also called directly
   from a Python loop with preallocated outputs.  The difference per instruction is the
   VM's own overhead (dispatch, register traffic, allocation instructions).
2. For the models of the end-to-end tests (MLP, conv block, attention block) and a deep
   chain, the executable's planned peak (``planned_peak_bytes``: the arena plus
   allocations that escape) is compared with the sum of every intermediate tensor
   (``naive_peak_bytes``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plait  # noqa: E402
from plait.ir import BlockBuilder, TensorType, Var  # noqa: E402
from plait.op import make_call  # noqa: E402
from plait.runtime import VirtualMachine, get_func  # noqa: E402


def chain_module(n: int, shape: tuple[int, ...] = (4,)):
    x = Var("x", TensorType(shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for _ in range(n):
                v = bb.emit(make_call("add", v, x))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    return bb.get()


def best_of(fn, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def vm_overhead(n: int = 2000) -> None:
    exe = plait.build(chain_module(n), "numpy")
    vm = VirtualMachine(exe)
    f = vm["main"]
    x = np.ones(4, np.float32)
    f(x)
    instrs = len(exe.functions["main"].instructions)
    t_vm = best_of(lambda: f(x))
    add = get_func("numpy.add")
    outs = [np.empty(4, np.float32) for _ in range(n)]

    def direct() -> None:
        v = x
        for o in outs:
            add(v, x, o)
            v = o

    t_direct = best_of(direct)
    per_instr = t_vm / instrs * 1e9
    overhead = (t_vm - t_direct) / instrs * 1e9
    print("VM overhead (numpy target, chain of", n, "adds on 4 floats)")
    print(f"  instructions executed      {instrs}")
    print(f"  VM run                     {t_vm * 1e3:8.3f} ms  ({per_instr:6.0f} ns/instruction)")
    print(f"  same packed calls, direct  {t_direct * 1e3:8.3f} ms")
    print(f"  VM overhead                {overhead:6.0f} ns/instruction")


def memory_plans() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
    from test_numpy_models import ATTENTION, CONV_BLOCK, MLP  # noqa: PLC0415

    print("\nPlanned peak memory vs the sum of all intermediate tensors")
    print(f"  {'model':<22}{'planned':>12}{'sum':>12}{'ratio':>8}")
    models = {
        "mlp (batch n)": MLP,
        "conv-bn-relu-pool": CONV_BLOCK,
        "attention block": ATTENTION,
    }
    for name, text in models.items():
        exe = plait.build(plait.parse(text), "numpy")
        _report(name, exe)
    exe = plait.build(chain_module(1000, (256, 256)), "numpy")
    _report("chain of 1000 adds", exe)


def _report(name: str, exe) -> None:
    planned = exe.attrs["planned_peak_bytes"]
    naive = exe.attrs["naive_peak_bytes"]
    ratio = f"{planned / naive:7.3f}" if naive else "    n/a"
    print(f"  {name:<22}{planned:>12,}{naive:>12,}{ratio:>8}")


if __name__ == "__main__":
    vm_overhead()
    memory_plans()
