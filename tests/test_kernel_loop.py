"""benchmarks/kernel_loop.py: a model's most expensive native call, run from a C loop.

The loop must call the same function the VM calls, with the model's constants: its
output is checked against numpy (float64, rtol/atol 1e-4) for the random input it made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant
from plait.op import make_call
from plait.runtime import VirtualMachine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import kernel_loop  # noqa: E402


def _dense_relu_then_exp(x_shape: tuple[int, int], w: np.ndarray, b: np.ndarray):  # type: ignore[no-untyped-def]
    """main(x) = exp(relu(x @ w.T + b)) * 0.5: a product with constant operands (one
    native call) and a cheap elementwise kernel after it (another)."""
    x = Var("x", TensorType(x_shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(make_call("linear", x, Constant(w)))
            y = bb.emit(make_call("add", y, Constant(b)))
            y = bb.emit(make_call("relu", y))
            y = bb.emit(make_call("exp", y))
            out = bb.emit_output(make_call("multiply", y, Constant(np.float32(0.5))))
        bb.emit_func_output(out)
    return bb.get()


def test_the_loop_runs_the_heaviest_call_with_the_models_constants() -> None:
    rng = np.random.default_rng(3)
    w = rng.uniform(-1, 1, (48, 200)).astype(np.float32)
    b = rng.uniform(-1, 1, 48).astype(np.float32)
    exe = plait.build(_dense_relu_then_exp((40, 200), w, b), "c")
    vm = VirtualMachine(exe)
    x = rng.uniform(-1, 1, (40, 200)).astype(np.float32)
    name = kernel_loop.heaviest_call(vm, x)
    assert name.startswith("plait_gemm_")   # the product, not the elementwise kernel

    loop = kernel_loop.KernelLoop(exe, name)
    out = loop()
    a = loop.arrays[0]                       # the random input the loop made
    ref = np.maximum(a.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

    times = loop.timed(7, 0.0)
    assert len(times) == 7 and all(0 < t < 1 for t in times)


def test_the_loop_refuses_what_it_cannot_run() -> None:
    exe = plait.build(_dense_relu_then_exp((4, 8), np.ones((3, 8), np.float32),
                                           np.zeros(3, np.float32)), "c")
    with pytest.raises(ValueError, match="no native function 'nope'"):
        kernel_loop.KernelLoop(exe, "nope")
    numpy_exe = plait.build(_dense_relu_then_exp((4, 8), np.ones((3, 8), np.float32),
                                                 np.zeros(3, np.float32)), "numpy")
    with pytest.raises(ValueError, match="no native call"):
        kernel_loop.heaviest_call(VirtualMachine(numpy_exe), np.ones((4, 8), np.float32))
