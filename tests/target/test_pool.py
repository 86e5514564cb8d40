"""c.DispatchPool: max_pool2d through plait_pool.c, checked against a numpy reference
(exact: a maximum involves no rounding)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import avg_pool_reference, max_pool_reference  # tests/target

import plait
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Call, ExternFunc
from plait.ir.visitor import post_order
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.target.c import DispatchPool

RNG = np.random.default_rng(3)


_reference = max_pool_reference


def _one_pool_call(x: np.ndarray, prefix: str, op: str, **attrs: object) -> np.ndarray:
    """``op(x, **attrs)`` built for c: c.DispatchPool makes it one call of a wrapper
    named ``prefix...``; its result."""
    param = Var("x", TensorType(x.shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [param]):
        with bb.dataflow():
            y = bb.emit_output(make_call(op, param, **attrs))
        bb.emit_func_output(y)
    mod = bb.get()
    lowered = DispatchPool()(mod.with_attrs(phase="optimization"))
    calls = [n.args[0].symbol for n in post_order(lowered["main"].body)
             if isinstance(n, Call) and isinstance(n.args[0], ExternFunc)]
    assert len(calls) == 1 and calls[0].startswith(prefix), calls
    return VirtualMachine(plait.build(mod, "c"))["main"](x)


CASES = [
    ((1, 32, 224, 224), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),   # the CNN's stem
    ((2, 3, 17, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ((1, 4, 9, 11), (3, 2), (1, 3), (1, 1), (0, 1, 2, 0)),
    ((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2)),        # dilation
    ((1, 5, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),      # ResNet's stem, threaded
    ((2, 3, 10, 23), (2, 3), (3, 3), (1, 1), (0, 2, 1, 0)),        # stride 3, uneven pads
    ((1, 2, 9, 8), (2, 2), (2, 2), (1, 1), (0, 0, 1, 1)),          # odd padded row
    ((1, 3, 6, 5), (4, 4), (1, 1), (1, 1), (3, 3, 3, 3)),          # pads of k - 1
    ((1, 2, 11, 17), (3, 2), (2, 3), (1, 2), (1, 0, 2, 1)),        # stride 3 + dilation
]


@pytest.mark.parametrize("shape,k,s,d,p", CASES)
def test_max_pool2d_matches_reference(shape, k, s, d, p) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::97] = np.nan
    ref = _reference(x, k, s, d, p)
    got = _one_pool_call(x, "plait_max_pool2d_", "max_pool2d", pool_size=k, strides=s,
                         dilation=d, padding=p)
    np.testing.assert_array_equal(got, ref)


GLOBAL_AVG_CASES = [
    # (shape, op, attrs): planes of 49 (MobileNetV2's head: 3 vectors of 16 and a tail),
    # fewer floats than a vector, one float, no whole vector on 8 lanes either, enough
    # floats to split the planes over the threads (>= 65536), a batch
    ((1, 37, 7, 7), "global_avg_pool2d", {}),
    ((1, 5, 3, 2), "global_avg_pool2d", {}),
    ((2, 3, 1, 1), "global_avg_pool2d", {}),
    ((1, 9, 13, 17), "mean", {"axis": (2, 3), "keepdims": True}),
    ((1, 1408, 7, 7), "mean", {"axis": (-2, -1), "keepdims": False}),   # threaded
    ((3, 20, 5, 9), "mean", {"axis": (3, 2), "keepdims": False}),
    # EfficientNet's head as HF writes it: one window wider than the image, ceil_mode
    ((1, 1280, 7, 7), "avg_pool2d", {"pool_size": (1280, 1280), "strides": (1280, 1280),
                                     "ceil_mode": True}),
    ((1, 6, 5, 3), "avg_pool2d", {"pool_size": (5, 3)}),
    ((2, 4, 6, 3), "adaptive_avg_pool2d", {"output_size": (1, 1)}),
]


@pytest.mark.parametrize("shape,op,attrs", GLOBAL_AVG_CASES)
def test_global_average_matches_numpy(shape, op, attrs) -> None:  # type: ignore[no-untyped-def]
    """global_avg_pool2d, mean over H and W and the average poolings that are one go to
    plait_pool.c's global average (one call, no generated kernel), within 1e-6 relative
    of numpy's float64 mean (float32 sums of at most 221 values in [-0.5, 1.5]: a few
    ulp); inf and NaN in a plane propagate as in numpy."""
    x = RNG.uniform(-1, 1, shape).astype(np.float32) + 0.5
    x.reshape(-1)[5] = np.inf
    x.reshape(-1)[-1] = np.nan
    keep = op != "mean" or attrs["keepdims"]
    ref = x.astype(np.float64).mean(axis=(2, 3), keepdims=keep)
    got = _one_pool_call(x, "plait_global_avg_pool2d_", op, **attrs)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


AVG_CASES = [
    # (shape, k, s, d, p, ceil_mode, count_include_pad)
    ((1, 64, 56, 56), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), False, False),  # PoolFormer, threaded
    ((2, 3, 17, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False, True),
    ((1, 4, 9, 11), (3, 2), (1, 3), (1, 1), (0, 1, 2, 0), False, True),      # stride 3
    ((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2), False, False),    # dilation
    ((1, 8, 14, 14), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), False, False),    # DenseNet's
    ((1, 5, 7, 9), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), True, False),       # ceil: ResNet-D's
    ((1, 3, 10, 11), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True, True),
    ((1, 2, 4, 37), (5, 4), (1, 1), (1, 1), (2, 1, 2, 2), False, False),     # 4 or 5 rows
]


@pytest.mark.parametrize("shape,k,s,d,p,ceil,count_pad", AVG_CASES)
def test_avg_pool2d_matches_reference(shape, k, s, d, p, ceil,  # type: ignore[no-untyped-def]
                                      count_pad) -> None:
    """avg_pool2d goes to plait_pool.c's row-wise average (one call): within 1e-5
    relative of a float64 brute force (float32 sums of a few values); NaN and inf in a
    window propagate."""
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::101] = np.nan
    x.reshape(-1)[50::211] = np.inf
    got = _one_pool_call(x, "plait_avg_pool2d_", "avg_pool2d", pool_size=k, strides=s,
                         dilation=d, padding=p, ceil_mode=ceil, count_include_pad=count_pad)
    ref = avg_pool_reference(x, got.shape[2], got.shape[3], k, s, d, p, count_pad)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_global_average_it_cannot_take_stays_generated() -> None:
    """A mean over other axes or an average pooling over an image of symbolic size (its
    window may not cover it) is not taken; one whose window does not cover the image (or
    that is padded or dilated) is an average pooling (plait_avg_pool2d)."""
    param = Var("x", TensorType((1, 4, 5, 6), "float32"))
    sym = Var("y", TensorType((1, 4, "h", 6), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [param, sym]):
        with bb.dataflow():
            a = bb.emit(make_call("mean", param, axis=(1, 2), keepdims=True))
            b = bb.emit(make_call("avg_pool2d", sym, pool_size=(5, 6), strides=(5, 6)))
            c = bb.emit(make_call("avg_pool2d", param, pool_size=(2, 2), strides=(2, 2)))
            d = bb.emit(make_call("avg_pool2d", param, pool_size=(5, 6), padding=(1, 1, 0, 0),
                                  strides=(5, 6)))
            e = bb.emit(make_call("adaptive_avg_pool2d", param, output_size=(2, 1)))
            y = bb.emit_output(plait.ir.Tuple([a, b, c, d, e]))
        bb.emit_func_output(y)
    lowered = DispatchPool()(bb.get().with_attrs(phase="optimization"))
    calls = [n.args[0].symbol for n in post_order(lowered["main"].body)
             if isinstance(n, Call) and isinstance(n.args[0], ExternFunc)]
    assert len(calls) == 2 and all(c.startswith("plait_avg_pool2d_") for c in calls), calls
