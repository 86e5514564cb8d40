"""Small builders shared by the c target's dispatch tests (test_gemm, test_attention)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np

import plait


def build_graph(inputs: dict[str, tuple[int, ...]], fn: Any) -> plait.IRModule:
    """A module ``main(*inputs)`` (float32 parameters) whose dataflow block ``fn(bb,
    params)`` emits; its result is the function's output."""
    from plait.ir import BlockBuilder, TensorType, Var

    params = [Var(n, TensorType(s, "float32")) for n, s in inputs.items()]
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(fn(bb, params))
        bb.emit_func_output(out)
    return bb.get()


def emit(bb: Any, name: str, *args: Any, **attrs: Any) -> Any:
    """Emit a call of op ``name`` into ``bb`` and return its variable."""
    from plait.op import make_call

    return bb.emit(make_call(name, *args, **attrs))


def const(arr: np.ndarray) -> Any:
    """A constant of the array."""
    from plait.ir.expr import Constant

    return Constant(arr)


def passes_with_baseline_isa(code: str) -> None:
    """Run ``code`` (Python that prints ``ok`` when its checks pass) in a fresh process
    with ``PLAIT_GEMM_ISA=baseline``, which forces plait_gemm.c's portable (non-AVX2)
    variants, with this directory importable; fail with its stderr otherwise."""
    prelude = f"import sys\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n"
    env = dict(os.environ, PLAIT_GEMM_ISA="baseline")
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
