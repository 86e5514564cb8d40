"""The c target's int8 row kernels (plait_qrows.c, reached through qnn.DispatchInt8):
QLinearSoftmax equals the reference (:func:`plait.dialects.qnn.reference.softmax`)
integer for integer; the quantized layer norm equals an independent float64
normalization of the dequantized rows (numpy) rounded to float32 and quantized, and lies
within one step of the reference's float32 arithmetic (a value on a rounding
boundary may round the other way).  Every copy this CPU runs, odd row lengths, row
counts that are not a multiple of the softmax's 8-row blocks, uint8 and int8, and a
case big enough for the threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qnn_helpers import assert_same, rand_q

import plait
from plait.dialects.qnn import reference as R
from plait.dialects.qnn.dispatch import dispatch_int8
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant, Tuple
from plait.op import make_call
from plait.runtime.vm import VirtualMachine
from plait.target.c import cpu_features, library_isas, use_isa
from plait.transform import Sequential, make_pass

F32 = np.float32
ISAS = ("avx512vnni", "avxvnni", "avx512", "avx2", "baseline")

# (dtype, shape, x_scale, y_scale, y zero point)
SOFTMAX = [("uint8", (3, 5, 128), 0.12, 1 / 256, 0), ("int8", (2, 7, 33), 0.05, 1 / 256, -128),
           ("uint8", (9, 3), 0.3, 1 / 255, 0), ("uint8", (1, 17), 0.7, 0.004, 3),
           ("int8", (11, 64), 0.02, 1 / 200, -100)]
# (x dtype, out dtype, shape, x_scale, x zero point, y_scale, y zero point)
LAYER_NORM = [("uint8", "uint8", (2, 9, 768), 0.03, 130, 0.035, 120),
              ("int8", "int8", (5, 33), 0.1, -3, 0.02, 5),
              ("uint8", "uint8", (3, 1), 0.5, 7, 0.1, 128),
              ("int8", "int8", (4, 130), 0.004, 0, 0.01, -20)]


def _c(x: Any) -> Constant:
    return Constant(np.asarray(x))


def _cases(rng: np.random.Generator) -> list[tuple[str, list[np.ndarray], Any, Any]]:
    """(name, feeds, build(bb, vars) -> expr, expected(feeds)) per case."""
    out = []
    for i, (dt, shape, xs, ys, yz) in enumerate(SOFTMAX):
        x = rand_q(rng, dt, shape)
        params = (F32(xs), np.asarray(0, dt), F32(ys), np.asarray(yz, dt))

        def sm(bb: BlockBuilder, v: list[Var], p: Any = params) -> Any:
            return bb.emit(make_call("qnn.softmax", v[0], *map(_c, p), axis=-1))

        out.append((f"softmax_{i}", [x], sm,
                    lambda f, p=params: R.softmax(f[0], *p, axis=-1)))
    for i, (dt, odt, shape, xs, xz, ys, yz) in enumerate(LAYER_NORM):
        x = rand_q(rng, dt, shape)
        d = shape[-1]
        g = rng.uniform(0.5, 1.5, d).astype(F32)
        b = rng.uniform(-0.3, 0.3, d).astype(F32)
        params = (F32(xs), np.asarray(xz, dt), g, b, F32(ys), np.asarray(yz, odt))

        def ln(bb: BlockBuilder, v: list[Var], p: Any = params) -> Any:
            return bb.emit(make_call("qnn.layer_norm", v[0], *map(_c, p), axes=(-1,),
                                     epsilon=1e-5))

        out.append((f"layer_norm_{i}", [x], ln, lambda f, p=params: (p, f[0])))
    return out


def _module(cases: list) -> plait.IRModule:
    params = [Var(f"{name}_{j}", TensorType(f.shape, f.dtype.name))
              for name, feeds, _, _ in cases for j, f in enumerate(feeds)]
    bb = BlockBuilder()
    it = iter(params)
    with bb.function("main", params):
        with bb.dataflow():
            outs = [build(bb, [next(it) for _ in feeds]) for _, feeds, build, _ in cases]
            out = bb.emit_output(Tuple(tuple(outs)))
        bb.emit_func_output(out)
    return bb.get()


def exact_layer_norm(x: np.ndarray, xs: Any, xz: Any, g: np.ndarray, b: np.ndarray,
                     ys: Any, yz: Any) -> np.ndarray:
    """The independent reference: the dequantized rows ``(x - xz) * xs`` normalized in
    float64 (numpy), rounded once to float32, quantized."""
    xf = (x.astype(np.int32) - int(xz)).astype(np.float64) * float(F32(xs))
    m = xf.mean(axis=-1, keepdims=True)
    v = ((xf - m) ** 2).mean(axis=-1, keepdims=True)
    y = ((xf - m) / np.sqrt(v + float(F32(1e-5))) * g.astype(np.float64)
         + b.astype(np.float64)).astype(F32)
    return R.quantize(y, F32(ys), np.asarray(yz), out_dtype=np.asarray(yz).dtype.name)


def _check(name: str, got: np.ndarray, want: Any, feeds: list[np.ndarray], where: str) -> None:
    if name.startswith("softmax"):
        assert_same(got, want, f"{name} {where}")
        return
    params, x = want
    assert_same(got, exact_layer_norm(x, *params[:2], params[2], params[3], *params[4:]),
                f"{name} {where} (float64 normalization)")
    ref = R.layer_norm(x, *params, axes=(-1,), epsilon=1e-5)
    step = np.abs(got.astype(np.int32) - ref.astype(np.int32))
    assert step.max() <= 1, f"{name} {where}: {step.max()} steps from the reference"


@pytest.fixture(scope="module")
def built() -> tuple[list, Any]:
    cases = _cases(np.random.default_rng(3))
    return cases, plait.build(_module(cases), "c")


def test_softmax_and_layer_norm_reach_the_row_kernels(built: tuple[list, Any]) -> None:
    cases, _ = built
    mod = Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(_module(cases))
    text = str(dispatch_int8(mod))
    assert "qnn.softmax" not in text and "qnn.layer_norm" not in text
    assert text.count("extern(\"plait_qsoftmax_") == len(SOFTMAX)
    assert text.count("extern(\"plait_qlayer_norm_") == len(LAYER_NORM)


@pytest.mark.parametrize("isa", ISAS)
def test_every_row_kernel_copy(built: tuple[list, Any], isa: str) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    cases, exe = built
    feeds = [f for _, fs, _, _ in cases for f in fs]
    with use_isa(isa):
        got = VirtualMachine(exe)["main"](*feeds)
        assert library_isas(exe)["qrows"]["chosen"] == isa
    for (name, fs, _, expected), g in zip(cases, got):
        _check(name, np.asarray(g), expected(fs), fs, f"on {isa}")


def test_row_kernels_in_parallel() -> None:
    """Rows enough for the library's threads give the same integers."""
    rng = np.random.default_rng(5)
    x = rand_q(rng, "uint8", (12, 128, 128))
    p = (F32(0.09), np.uint8(0), F32(1 / 256), np.uint8(0))
    v = Var("x", TensorType(x.shape, "uint8"))
    bb = BlockBuilder()
    with bb.function("main", [v]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(make_call("qnn.softmax", v, *map(_c, p), axis=-1)))
        bb.emit_func_output(y)
    got = VirtualMachine(plait.build(bb.get(), "c"))["main"](x)
    assert_same(np.asarray(got), R.softmax(x, *p, axis=-1), "parallel softmax")
