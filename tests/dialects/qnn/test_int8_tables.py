"""qnn.DispatchInt8's table rule: a chain of elementwise steps from one 8-bit tensor to
another (a QOperator encoder's GELU island: dequantize, divide, erf, quantize, a
QLinearAdd of a scalar) becomes one ``plait_qlookup`` call whose output equals the
chain's numpy references applied one after the other (exact: the table is those
references evaluated on the 256 codes); a step with a tensor operand ends the chain, and
a single qnn op keeps its own kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
from qnn_helpers import assert_same, rand_q

import plait
from plait.dialects.qnn import reference as R
from plait.dialects.qnn.dispatch import dispatch_int8
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant
from plait.op import make_call
from plait.runtime import numpy_ops as npo
from plait.runtime.vm import VirtualMachine
from plait.transform import Sequential, make_pass

F32 = np.float32


def _c(x: Any) -> Constant:
    return Constant(np.asarray(x))


P = {"xs": F32(0.0225), "xz": np.uint8(132), "es": F32(0.0078), "ez": np.uint8(128),
     "os": F32(0.0079), "oz": np.uint8(0)}


def _gelu_island(dtype: str) -> tuple[plait.IRModule, Any]:
    """``qnn.add(quantize(erf(dequantize(x) / 1.4142135)), 1)`` on an (x, y) pair, then
    ``qnn.mul`` with y (a tensor operand: not part of the chain)."""
    z = np.asarray(P["xz"]).astype(dtype) if dtype == "uint8" else np.int8(4)
    ez = np.asarray(P["ez"]).astype(dtype) if dtype == "uint8" else np.int8(0)
    oz = np.asarray(P["oz"]).astype(dtype) if dtype == "uint8" else np.int8(-128)
    one = np.asarray(255 if dtype == "uint8" else 127, dtype)
    x = Var("x", TensorType((4, 300), dtype))
    y = Var("y", TensorType((4, 300), dtype))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            d = bb.emit(make_call("qnn.dequantize", x, _c(P["xs"]), _c(z)))
            v = bb.emit(make_call("divide", d, _c(F32(1.4142135))))
            e = bb.emit(make_call("erf", v))
            q = bb.emit(make_call("qnn.quantize", e, _c(P["es"]), _c(ez)))
            a = bb.emit(make_call("qnn.add", q, _c(P["es"]), _c(ez), _c(one),
                                  _c(F32(1 / 255)), _c(np.asarray(0, dtype)), _c(P["os"]),
                                  _c(oz)))
            m = bb.emit(make_call("qnn.mul", y, _c(P["xs"]), _c(z), a, _c(P["os"]), _c(oz),
                                  _c(P["os"]), _c(oz)))
            out = bb.emit_output(m)
        bb.emit_func_output(out)

    def reference(xv: np.ndarray, yv: np.ndarray) -> np.ndarray:
        dv = R.dequantize(xv, P["xs"], z)
        ev = npo.erf(npo.divide(dv, np.asarray(F32(1.4142135))))
        qv = R.quantize(ev, P["es"], ez, out_dtype=dtype)
        av = R.add(qv, P["es"], ez, one, F32(1 / 255), np.asarray(0, dtype), P["os"], oz)
        return R.mul(yv, P["xs"], z, av, P["os"], oz, P["os"], oz)

    return bb.get(), reference


def test_a_gelu_island_is_one_table_lookup_equal_to_its_references() -> None:
    rng = np.random.default_rng(2)
    for dtype in ("uint8", "int8"):
        mod, reference = _gelu_island(dtype)
        lowered = dispatch_int8(Sequential([make_pass("Normalize"),
                                            make_pass("LambdaLift")])(mod))
        text = str(lowered)
        assert text.count('extern("plait_qlookup_') == 1, dtype
        assert text.count('extern("plait_qmul_') == 1, dtype
        for op in ("qnn.dequantize", "qnn.quantize", "qnn.add", "erf(", "divide("):
            assert op not in text, (dtype, op)
        xv, yv = rand_q(rng, dtype, (4, 300)), rand_q(rng, dtype, (4, 300))
        got = VirtualMachine(plait.build(mod, "c"))["main"](xv, yv)
        assert_same(np.asarray(got), reference(xv, yv), f"GELU island, {dtype}")


def test_a_single_qnn_step_keeps_its_kernel() -> None:
    x = Var("x", TensorType((8,), "uint8"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make_call("qnn.mul", x, _c(F32(0.1)), _c(np.uint8(3)),
                                           _c(np.uint8(200)), _c(F32(0.01)), _c(np.uint8(0)),
                                           _c(F32(0.2)), _c(np.uint8(1))))
        bb.emit_func_output(out)
    text = str(dispatch_int8(Sequential([make_pass("Normalize"),
                                         make_pass("LambdaLift")])(bb.get())))
    assert 'extern("plait_qmul_' in text and 'extern("plait_qlookup' not in text


def test_a_per_channel_qlinear_mul_runs_on_its_kernel() -> None:
    """A squeeze-excite block's QLinearMul of an NCHW tensor by one value per channel
    (``(1, C, 1, 1)``, either operand) is one ``plait_qmul`` call equal to the
    reference on every copy this CPU runs."""
    from plait.target.c import cpu_features, use_isa

    rng = np.random.default_rng(4)
    for dtype, first in (("uint8", True), ("int8", False)):
        x = Var("x", TensorType((2, 5, 3, 7), dtype))
        s = Var("s", TensorType((1, 5, 1, 1), dtype))
        zs = (np.asarray(3, dtype), np.asarray(100 if dtype == "uint8" else -7, dtype),
              np.asarray(1, dtype))
        p = (F32(0.05), zs[0], F32(0.004), zs[1], F32(0.03), zs[2])
        bb = BlockBuilder()
        with bb.function("main", [x, s]):
            with bb.dataflow():
                ops = (x, _c(p[0]), _c(p[1]), s, _c(p[2]), _c(p[3])) if first else \
                    (s, _c(p[2]), _c(p[3]), x, _c(p[0]), _c(p[1]))
                out = bb.emit_output(make_call("qnn.mul", *ops, _c(p[4]), _c(p[5])))
            bb.emit_func_output(out)
        mod = bb.get()
        text = str(dispatch_int8(Sequential([make_pass("Normalize"),
                                             make_pass("LambdaLift")])(mod)))
        assert 'extern("plait_qmul_' in text and "qnn.mul" not in text, dtype
        xv, sv = rand_q(rng, dtype, (2, 5, 3, 7)), rand_q(rng, dtype, (1, 5, 1, 1))
        args = (xv, *p[:2], sv, *p[2:4]) if first else (sv, *p[2:4], xv, *p[:2])
        want = R.mul(*args, *p[4:])
        exe = plait.build(mod, "c")
        for isa in ("avx512vnni", "avx2", "baseline"):
            if isa not in cpu_features()["supported"]:
                continue
            with use_isa(isa):
                got = VirtualMachine(exe)["main"](xv, sv)
            assert_same(np.asarray(got), want, f"per-channel qmul {dtype} on {isa}")
