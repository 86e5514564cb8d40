"""Modules of qnn calls for the tests: each case is one qnn op applied to random data
(graph parameters) with constant quantization parameters, and its reference result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import plait
from plait.dialects.qnn import reference as R
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant, Tuple
from plait.op import make_call


class Data:
    """A graph input (the rest of a case's arguments are constants)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = np.asarray(value)


@dataclass
class Case:
    """``op(*args, **attrs)``; ``args`` hold :class:`Data`, arrays (constants) and
    lists of them (tuples)."""

    name: str
    op: str
    args: Sequence[Any]
    attrs: dict[str, Any] = field(default_factory=dict)

    def feeds(self) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for a in self.args:
            for x in (a if isinstance(a, list) else [a]):
                if isinstance(x, Data):
                    out.append(x.value)
        return out

    def expected(self) -> Any:
        from plait.op import get_op

        def value(a: Any) -> Any:
            if isinstance(a, list):
                return [value(x) for x in a]
            return a.value if isinstance(a, Data) else np.asarray(a)

        ref = get_op(self.op).reference
        assert ref is not None
        return ref(*[value(a) for a in self.args], **self.attrs)


def case_module(cases: Sequence[Case], constant_data: bool = False) -> plait.IRModule:
    """One function ``main`` taking every case's data (or, with ``constant_data``,
    nothing: the data are constants too), returning a tuple of the cases' results (in
    order)."""
    params: list[Var] = []
    for c in cases:
        for i, x in enumerate(c.feeds()):
            params.append(Var(f"{c.name}_{i}", TensorType(x.shape, x.dtype.name)))
    data = iter([Constant(x) for c in cases for x in c.feeds()] if constant_data else params)
    if constant_data:
        params = []
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            outs = []
            for c in cases:
                def expr(a: Any) -> Any:
                    if isinstance(a, list):
                        return Tuple(tuple(expr(x) for x in a))
                    if isinstance(a, Data):
                        return next(data)
                    return Constant(np.asarray(a))

                args = [expr(a) for a in c.args]
                outs.append(bb.emit(make_call(c.op, *args, **c.attrs), c.name))
            out = bb.emit_output(Tuple(tuple(outs)))
        bb.emit_func_output(out)
    return bb.get()


def run_cases(cases: Sequence[Case], target: str) -> list[Any]:
    """Build the cases' module for ``target`` and run it."""
    from plait.runtime.vm import VirtualMachine

    mod = case_module(cases)
    vm = VirtualMachine(plait.build(mod, target))
    feeds = [x for c in cases for x in c.feeds()]
    out = vm["main"](*feeds)
    return [np.asarray(o) if not isinstance(o, tuple | list) else [np.asarray(v) for v in o]
            for o in out]


def assert_same(got: Any, want: Any, what: str) -> None:
    """Equal bit for bit, with the first mismatches in the message."""
    if isinstance(want, tuple | list):
        for g, w in zip(got, want):
            assert_same(g, w, what)
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, g.shape, w.dtype, w.shape)
    bad = np.flatnonzero(~((g == w) | (np.isnan(g) & np.isnan(w)) if g.dtype.kind == "f"
                         else g == w))
    assert not bad.size, (f"{what}: {bad.size} of {g.size} differ; first at "
                          f"{bad[:5]}: got {g.ravel()[bad[:5]]}, want {w.ravel()[bad[:5]]}")


def rand_q(rng: np.random.Generator, dtype: str, shape: Any) -> np.ndarray:
    """Uniform random values of quantized ``dtype``."""
    lo, hi = R.qrange(dtype)
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def scale(rng: np.random.Generator, lo: float = 0.005, hi: float = 0.2) -> np.ndarray:
    """A random float32 scalar scale."""
    return np.asarray(rng.uniform(lo, hi), np.float32)


def op_cases(dtype: str, seed: int = 0) -> list[Case]:
    """One case (or a few) of every qnn op on ``dtype`` (uint8 or int8) data, with odd
    shapes, per-tensor and per-channel parameters."""
    rng = np.random.default_rng(seed)

    def q(shape: Any, dt: str = dtype) -> np.ndarray:
        return rand_q(rng, dt, shape)

    def zp(dt: str = dtype) -> np.ndarray:
        return rand_q(rng, dt, ())

    f32 = np.float32
    wdt = "int8"
    cases: list[Case] = []
    x = (rng.normal(size=(2, 5, 7)) * 3).astype(f32)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    cases.append(Case("quantize", "qnn.quantize", [Data(x), scale(rng, 0.01, 0.1), zp()]))
    cases.append(Case("quantize_axis", "qnn.quantize",
                      [Data(x), rng.uniform(0.01, 0.1, 5).astype(f32), q(5)], {"axis": 1}))
    cases.append(Case("dequantize", "qnn.dequantize",
                      [Data(q((3, 4, 5))), rng.uniform(0.01, 0.1, 4).astype(f32), q(4)],
                      {"axis": 1}))
    acc = rng.integers(-20000, 20000, size=(2, 6, 3, 5)).astype(np.int32)
    cases.append(Case("requantize", "qnn.requantize",
                      [Data(acc), rng.uniform(1e-4, 1e-3, 6).astype(f32), np.int32(0),
                       scale(rng, 0.02, 0.2), zp()], {"axis": 1}))
    cases.append(Case("requantize8", "qnn.requantize",
                      [Data(q((4, 9))), scale(rng), zp(), scale(rng), zp()]))
    for groups, cin, cout in ((1, 5, 7), (6, 6, 6)):
        w = np.clip(q((cout, cin // groups, 3, 3), wdt), -127, 127).astype(wdt)
        cases.append(Case(f"conv2d_g{groups}", "qnn.conv2d",
                          [Data(q((2, cin, 9, 8))), w, zp(), np.zeros(cout, wdt)],
                          {"strides": (2, 1), "padding": (1, 0, 1, 1), "dilation": (1, 2),
                           "groups": groups}))
    cases.append(Case("matmul", "qnn.matmul",
                      [Data(q((2, 5, 33))), q((33, 17), wdt), zp(), np.int8(0)]))
    cases.append(Case("matmul_batched", "qnn.matmul",
                      [Data(q((2, 5, 19))), Data(q((2, 19, 7))), zp(), zp()]))
    for name in ("add", "mul"):
        for sa, sb in (((3, 4, 17), (3, 4, 17)), ((3, 4, 17), (4, 1)), ((3, 4, 17), ())):
            cases.append(Case(f"{name}_{len(sb)}", f"qnn.{name}",
                              [Data(q(sa)), scale(rng), zp(), Data(q(sb)), scale(rng), zp(),
                               scale(rng), zp()]))
    unary = [Data(q((3, 4, 5, 6))), scale(rng, 0.01, 0.3), zp(), scale(rng, 0.001, 0.01), zp()]
    cases.append(Case("sigmoid", "qnn.sigmoid", unary))
    cases.append(Case("leaky_relu", "qnn.leaky_relu",
                      [Data(q((3, 10))), scale(rng), zp(), scale(rng), zp()], {"alpha": 0.1}))
    cases.append(Case("softmax", "qnn.softmax",
                      [Data(q((3, 5, 13))), scale(rng, 0.01, 0.3), zp(),
                       np.asarray(1 / 256, f32), np.asarray(R.qrange(dtype)[0], dtype)],
                      {"axis": 1}))
    ys, yz = scale(rng), zp()
    cases.append(Case("concat", "qnn.concat",
                      [[Data(q((2, 3, 5))), Data(q((2, 4, 5)))], [scale(rng), ys], [zp(), yz],
                       ys, yz], {"axis": 1}))
    pool = [Data(q((2, 3, 9, 7))), scale(rng), zp(), scale(rng), zp()]
    cases.append(Case("avg_pool2d", "qnn.avg_pool2d", pool,
                      {"pool_size": (3, 2), "strides": (2, 2), "padding": (1, 0, 1, 1),
                       "ceil_mode": True}))
    cases.append(Case("avg_pool2d_incl", "qnn.avg_pool2d", pool,
                      {"pool_size": (2, 3), "strides": (1, 2), "padding": (0, 1, 1, 1),
                       "count_include_pad": True}))
    cases.append(Case("avg_pool2d_global", "qnn.avg_pool2d", pool, {"pool_size": (9, 7)}))
    cases.append(Case("global_avg_pool2d", "qnn.global_avg_pool2d", pool))
    cases.append(Case("max_pool2d", "qnn.max_pool2d", [Data(q((2, 3, 9, 7)))],
                      {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}))
    cases.append(Case("layer_norm", "qnn.layer_norm",
                      [Data(q((2, 5, 16))), scale(rng), zp(),
                       rng.normal(size=16).astype(f32), rng.normal(size=16).astype(f32),
                       scale(rng, 0.01, 0.05), zp()]))
    xd = (rng.normal(size=(3, 31)) * 2 + 0.5).astype(f32)
    cases.append(Case("dynamic_quantize", "qnn.dynamic_quantize", [Data(xd)]))
    return cases


CaseFilter = Callable[[Case], bool]
