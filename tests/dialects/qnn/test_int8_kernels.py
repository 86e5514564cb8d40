"""The c target's int8 kernels (plait_qgemm.c, reached through qnn.DispatchInt8): every
copy this CPU runs (PLAIT_ISA = avx512vnni, avxvnni, avx512, avx2, baseline) equals the
reference (:mod:`plait.dialects.qnn.reference`) exactly, integer for integer and float
bit for bit, on odd shapes: K and N not multiples of the vector width, M tails, batched
and broadcast products, per-tensor and per-channel parameters, uint8 and int8 on both
sides, zero points at the extremes of their range, requantizations that saturate,
convolutions with stride, padding and dilation, depthwise convolutions, a computed B
(the attention products of a QDQ encoder) and a zero point computed at run time
(dynamic quantization)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from qnn_helpers import assert_same, rand_q

import plait
from plait.dialects.qnn import reference as R
from plait.dialects.qnn.dispatch import dispatch_int8
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant, Tuple, TupleGetItem
from plait.op import make_call
from plait.runtime.vm import VirtualMachine
from plait.target.c import cpu_features, library_isas, use_isa
from plait.transform import Sequential, make_pass

F32 = np.float32
ISAS = ("avx512vnni", "avxvnni", "avx512", "avx2", "baseline")
COPY = {"avx512vnni": "avx512vnni", "avxvnni": "avxvnni", "avx512": "avx512", "avx2": "avx2",
        "baseline": "baseline"}
"""The copy of the qgemm family each cap runs."""


class Chain:
    """A product and its output stage in a module: ``build(bb, inputs)`` emits it and
    returns the result; ``expected(feeds)`` is the reference."""

    def __init__(self, name: str, feeds: list[np.ndarray],
                 build: Callable[[BlockBuilder, list[Var]], Any],
                 expected: Callable[[list[np.ndarray]], np.ndarray]) -> None:
        self.name, self.feeds, self.build, self.expected = name, feeds, build, expected


def _c(x: Any) -> Constant:
    return Constant(np.asarray(x))


def _emit(bb: BlockBuilder, op: str, *args: Any, **attrs: Any) -> Any:
    return bb.emit(make_call(op, *[a if not isinstance(a, np.ndarray | np.generic) else _c(a)
                                   for a in args], **attrs))


def _wrap32(v: np.ndarray) -> np.ndarray:
    return (np.asarray(v, np.int64) % (1 << 32)).astype(np.uint32).view(np.int32)


def _chains(rng: np.random.Generator) -> list[Chain]:
    out: list[Chain] = []

    def q(dt: str, shape: Any) -> np.ndarray:
        return rand_q(rng, dt, shape)

    def requant(dt_out: str, n: int, per_col: bool, big: bool = False) -> tuple:
        si = np.asarray(rng.uniform(1e-4, 1e-3, n) if per_col else rng.uniform(1e-4, 1e-3), F32)
        so = np.asarray(rng.uniform(0.001, 0.004) if big else rng.uniform(0.05, 0.2), F32)
        lo, hi = R.qrange(dt_out)
        zo = np.asarray(rng.integers(lo, hi + 1), dt_out)
        return si, so, zo

    # matmuls with constant B: (a dtype, b dtype, batch shape, M, K, N, zero points)
    shapes = [("uint8", "int8", (2,), 5, 33, 37), ("int8", "int8", (), 7, 5, 17),
              ("uint8", "uint8", (), 13, 1, 70), ("int8", "uint8", (3,), 1, 66, 16),
              ("uint8", "int8", (), 6, 64, 32)]
    for i, (da, db, bdims, m, k, n) in enumerate(shapes):
        a = q(da, bdims + (m, k))
        b = q(db, (k, n))
        lo_a = R.qrange(da)
        za = np.asarray(lo_a[1] if i % 2 else lo_a[0], da)          # extremes
        zb = q(db, (n,)) if i % 2 == 0 else np.asarray(R.qrange(db)[i % 3 == 0], db)
        bias = rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32) if i == 0 else \
            rng.integers(-5000, 5000, n).astype(np.int32)
        dt_out = "uint8" if i % 2 == 0 else "int8"
        si, so, zo = requant(dt_out, n, per_col=i % 2 == 0, big=i == 1)
        acc_ref = R.matmul(a, b, za, zb)

        def build_q(bb: BlockBuilder, xs: list[Var], b=b, za=za, zb=zb, bias=bias, si=si,
                    so=so, zo=zo) -> Any:
            acc = _emit(bb, "qnn.matmul", xs[0], b, za, zb)
            acc = _emit(bb, "add", acc, bias)
            return _emit(bb, "qnn.requantize", acc, si, np.int32(3), so, zo)

        def want_q(f: list[np.ndarray], acc_ref=acc_ref, bias=bias, si=si, so=so,
                   zo=zo) -> np.ndarray:
            return R.requantize_op(acc_ref + bias, si, np.int32(3), so, zo)

        out.append(Chain(f"matmul_q_{i}", [a], build_q, want_q))

        # then a QLinearAdd of a constant per column (QOperator's bias add), the
        # result as either operand; i == 2 adds a scalar
        cvec = q(dt_out, (1,) if i == 2 else (n,))
        pa = (F32(so), zo, cvec, F32(rng.uniform(0.05, 0.2)), np.asarray(zo), F32(0.3),
              np.asarray(R.qrange(dt_out)[i % 2], dt_out))

        def build_qa(bb: BlockBuilder, xs: list[Var], build_q=build_q, pa=pa,
                     first=i % 2 == 0) -> Any:
            y = build_q(bb, xs)
            args = (y, *pa[:2], *pa[2:5]) if first else (pa[2], *pa[3:5], y, *pa[:2])
            return _emit(bb, "qnn.add", *args, *pa[5:])

        def want_qa(f: list[np.ndarray], want_q=want_q, pa=pa, first=i % 2 == 0
                    ) -> np.ndarray:
            y = want_q(f)
            args = (y, *pa[:2], *pa[2:5]) if first else (pa[2], *pa[3:5], y, *pa[:2])
            return R.add(*args, *pa[5:])

        out.append(Chain(f"matmul_q_add_{i}", [a], build_qa, want_qa))

        # and a residual after it: a QLinearAdd with a tensor of the output's shape
        res = q(dt_out, bdims + (m, n))
        pr = (F32(0.3), np.asarray(pa[6]), F32(0.2), np.asarray(pa[6]), F32(0.4),
              np.asarray(R.qrange(dt_out)[0] + 7, dt_out))

        def build_res(bb: BlockBuilder, xs: list[Var], build_qa=build_qa, pr=pr,
                      first=i % 3 == 0) -> Any:
            y = build_qa(bb, xs[:1])
            args = (y, *pr[:2], xs[1], *pr[2:4]) if first else (xs[1], *pr[:2], y, *pr[2:4])
            return _emit(bb, "qnn.add", *args, *pr[4:])

        def want_res(f: list[np.ndarray], want_qa=want_qa, pr=pr, first=i % 3 == 0
                     ) -> np.ndarray:
            y = want_qa(f[:1])
            args = (y, *pr[:2], f[1], *pr[2:4]) if first else (f[1], *pr[:2], y, *pr[2:4])
            return R.add(*args, *pr[4:])

        out.append(Chain(f"matmul_q_add_residual_{i}", [a, res], build_res, want_res))

        # or a float bias between a dequantize and a quantize (a QDQ model whose bias
        # the quantizer left in float: ALBERT's)
        fb = rng.normal(size=(n,)).astype(F32) if i != 2 else np.asarray([0.25], F32)
        pf = (F32(so), zo, F32(rng.uniform(0.05, 0.3)),
              np.asarray(R.qrange(dt_out)[1 - i % 2], dt_out))

        def build_fb(bb: BlockBuilder, xs: list[Var], build_q=build_q, pf=pf, fb=fb,
                     first=i % 2 == 1) -> Any:
            y = _emit(bb, "qnn.dequantize", build_q(bb, xs), *pf[:2])
            y = _emit(bb, "add", y, fb) if first else _emit(bb, "add", fb, y)
            return _emit(bb, "qnn.quantize", y, *pf[2:])

        def want_fb(f: list[np.ndarray], want_q=want_q, pf=pf, fb=fb,
                    dt_out=dt_out) -> np.ndarray:
            y = (R.dequantize(want_q(f), *pf[:2]) + fb).astype(F32)
            return R.quantize(y, *pf[2:], out_dtype=dt_out)

        out.append(Chain(f"matmul_q_float_bias_{i}", [a], build_fb, want_fb))

        def build_i(bb: BlockBuilder, xs: list[Var], b=b, za=za, zb=zb) -> Any:
            return _emit(bb, "qnn.matmul", xs[0], b, za, zb)

        out.append(Chain(f"matmul_i32_{i}", [a], build_i,
                         lambda f, acc_ref=acc_ref: acc_ref))

    # dynamic quantization: a zero point and a scale computed at run time, float out
    a = q("uint8", (9, 45))
    b1 = q("int8", (45, 21))
    fb = rng.normal(size=21).astype(F32)
    za = np.asarray(255, "uint8")
    s = np.asarray(0.0123, F32)

    def build_dyn(bb: BlockBuilder, xs: list[Var]) -> Any:
        acc = _emit(bb, "qnn.matmul", xs[0], b1, xs[1], np.int8(0))
        y = _emit(bb, "cast", acc, dtype="float32")
        y = _emit(bb, "multiply", y, xs[2])
        y = _emit(bb, "add", y, fb)
        return _emit(bb, "relu", y)

    def want_dyn(f: list[np.ndarray]) -> np.ndarray:
        acc = R.matmul(f[0], b1, f[1], np.int8(0))
        y = (acc.astype(F32) * f[2]).astype(F32)
        return np.maximum((y + fb).astype(F32), F32(0))

    out.append(Chain("matmul_dynamic", [a, za, s], build_dyn, want_dyn))

    # the float output of MatMulIntegerToFloat: dequantize (per column) and a bias
    a = q("int8", (3, 4, 29))
    b2 = q("int8", (29, 19))
    sc = rng.uniform(1e-4, 1e-2, 19).astype(F32)
    fb2 = rng.normal(size=19).astype(F32)

    def build_dq(bb: BlockBuilder, xs: list[Var]) -> Any:
        acc = _emit(bb, "qnn.matmul", xs[0], b2, np.int8(-128), np.int8(3))
        y = _emit(bb, "qnn.dequantize", acc, sc, np.int32(0), axis=-1)
        return _emit(bb, "add", y, fb2)

    def want_dq(f: list[np.ndarray]) -> np.ndarray:
        acc = R.matmul(f[0], b2, np.int8(-128), np.int8(3))
        return (R.dequantize(acc, sc, np.int32(0), axis=-1) + fb2).astype(F32)

    out.append(Chain("matmul_dequantize", [a], build_dq, want_dq))

    # a zero point per row of A
    a = q("uint8", (11, 23))
    b3 = q("int8", (23, 18))
    zar = q("uint8", (11,))

    def build_rows(bb: BlockBuilder, xs: list[Var]) -> Any:
        return _emit(bb, "qnn.matmul", xs[0], b3, zar, np.int8(-7))

    out.append(Chain("matmul_za_rows", [a], build_rows,
                     lambda f: R.matmul(f[0], b3, zar, np.int8(-7))))

    # computed B: batched (attention scores) and one B for every row
    for i, (da, db, bshape) in enumerate((("uint8", "uint8", (2, 23, 18)),
                                          ("int8", "int8", (23, 18)))):
        a = q(da, (2, 19, 23))
        bb_ = q(db, bshape)
        za = np.asarray(R.qrange(da)[i], da)
        zb = np.asarray(R.qrange(db)[1 - i], db)
        si, so, zo = requant("uint8", 18, per_col=False)

        def build_rt(bb: BlockBuilder, xs: list[Var], za=za, zb=zb, si=si, so=so,
                     zo=zo) -> Any:
            acc = _emit(bb, "qnn.matmul", xs[0], xs[1], za, zb)
            return _emit(bb, "qnn.requantize", acc, si, np.int32(0), so, zo)

        def want_rt(f: list[np.ndarray], za=za, zb=zb, si=si, so=so, zo=zo) -> np.ndarray:
            return R.requantize_op(R.matmul(f[0], f[1], za, zb), si, np.int32(0), so, zo)

        out.append(Chain(f"matmul_computed_b_{i}", [a, bb_], build_rt, want_rt))

    # convolutions: (x dtype, w dtype, x shape, cout, kernel, attrs)
    convs = [("uint8", "int8", (2, 5, 9, 8), 7, (3, 3),
              {"strides": (2, 1), "padding": (1, 0, 1, 1), "dilation": (1, 2)}),
             ("int8", "int8", (1, 3, 11, 13), 33, (3, 3), {"padding": (1, 1, 1, 1)}),
             ("uint8", "uint8", (1, 16, 6, 5), 17, (1, 1), {"strides": (2, 2)}),
             # rows longer than a panel (16 pixels read as one run of the image)
             ("int8", "int8", (2, 4, 5, 37), 13, (3, 3), {"padding": (1, 1, 1, 1)}),
             # taps in groups of 4 gathered pixel by pixel: stride 2, a panel over rows
             ("uint8", "int8", (1, 8, 16, 16), 20, (3, 3),
              {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
             ("uint8", "uint8", (2, 6, 8, 8), 9, (3, 3), {"padding": (1, 1, 1, 1)}),
             # two groups per kernel row; dilation along H only
             ("int8", "int8", (1, 5, 12, 11), 6, (5, 5), {"padding": (2, 2, 2, 2)}),
             ("int8", "uint8", (1, 4, 10, 10), 5, (3, 3),
              {"dilation": (2, 1), "padding": (2, 1, 2, 1)}),
             # 1x1 over contiguous rows; a 2x2 kernel tap by tap, uneven padding
             ("uint8", "int8", (1, 7, 8, 8), 11, (1, 1), {}),
             ("uint8", "int8", (1, 3, 9, 10), 5, (2, 2), {"padding": (0, 1, 1, 0)}),
             # grouped (not depthwise): RegNet's many channels per group, groups whose
             # rows start inside a tile, a channel multiplier, 1x1 and tap by tap
             ("uint8", "int8", (2, 12, 9, 9), 18, (3, 3),
              {"groups": 3, "strides": (2, 2), "padding": (1, 1, 1, 1)}),
             ("int8", "int8", (1, 8, 7, 19), 10, (3, 3), {"groups": 2, "padding": (1, 1, 1, 1)}),
             ("uint8", "int8", (1, 4, 6, 6), 8, (1, 1), {"groups": 4}),
             ("uint8", "uint8", (1, 6, 8, 7), 9, (2, 2), {"groups": 3, "dilation": (1, 2)}),
             # the 8-bit output stage from the tiles: rows wider than a job's 64 columns
             # (jobs inside a row: no column dropped, the plane's element not the
             # column), and a 1x1 of 63 pixels (a last part vector), both with a residual
             ("uint8", "int8", (1, 3, 4, 100), 6, (3, 3), {"padding": (1, 1, 1, 1)}),
             ("int8", "int8", (1, 5, 7, 9), 6, (1, 1), {})]
    zero_zw = (1, 4, 9, 15)   # symmetric weights: no column sums
    for i, (dx, dw, xs_, cout, (kh, kw), attrs) in enumerate(convs):
        x = q(dx, xs_)
        w = q(dw, (cout, xs_[1] // attrs.get("groups", 1), kh, kw))
        zx = np.asarray(R.qrange(dx)[1 - i % 2], dx)
        zw = q(dw, (cout,)) if i not in zero_zw else np.asarray(0, dw)
        bias = rng.integers(-3000, 3000, (cout, 1, 1)).astype(np.int32)
        si, so, zo = requant("uint8", cout, per_col=True)

        def build_c(bb: BlockBuilder, xs: list[Var], w=w, zx=zx, zw=zw, bias=bias, si=si,
                    so=so, zo=zo, attrs=attrs) -> Any:
            acc = _emit(bb, "qnn.conv2d", xs[0], w, zx, zw, **attrs)
            acc = _emit(bb, "add", acc, bias)
            return _emit(bb, "qnn.requantize", acc, si, np.int32(0), so, zo, axis=1)

        def want_c(f: list[np.ndarray], w=w, zx=zx, zw=zw, bias=bias, si=si, so=so, zo=zo,
                   attrs=attrs) -> np.ndarray:
            acc = R.conv2d(f[0], w, zx, zw, **attrs)
            return R.requantize_op(acc + bias, si, np.int32(0), so, zo, axis=1)

        out.append(Chain(f"conv_q_{i}", [x], build_c, want_c))

        if i in (0, 3, 4, 14, 15):
            # a residual QLinearAdd on the convolution's output (NCHW rows)
            oshape = R.conv2d(x, w, zx, zw, **attrs).shape
            res = q("uint8", oshape)
            pr = (F32(so), np.asarray(zo), F32(0.07), np.asarray(100, np.uint8), F32(0.09),
                  np.asarray(3, np.uint8))

            def build_cr(bb: BlockBuilder, xs: list[Var], build_c=build_c, pr=pr,
                         first=i != 3) -> Any:
                y = build_c(bb, xs[:1])
                args = (y, *pr[:2], xs[1], *pr[2:4]) if first else (xs[1], *pr[2:4], y,
                                                                      *pr[:2])
                return _emit(bb, "qnn.add", *args, *pr[4:])

            def want_cr(f: list[np.ndarray], want_c=want_c, pr=pr, first=i != 3
                        ) -> np.ndarray:
                y = want_c(f[:1])
                args = (y, *pr[:2], f[1], *pr[2:4]) if first else (f[1], *pr[2:4], y,
                                                                    *pr[:2])
                return R.add(*args, *pr[4:])

            out.append(Chain(f"conv_q_residual_{i}", [x, res], build_cr, want_cr))

        def build_ci(bb: BlockBuilder, xs: list[Var], w=w, zx=zx, zw=zw, attrs=attrs) -> Any:
            return _emit(bb, "qnn.conv2d", xs[0], w, zx, zw, **attrs)

        out.append(Chain(f"conv_i32_{i}", [x], build_ci,
                         lambda f, w=w, zx=zx, zw=zw, attrs=attrs:
                         R.conv2d(f[0], w, zx, zw, **attrs)))

    # depthwise convolutions: strided (row by row), stride 1 (rows of the padded width
    # at once, in several blocks of rows), a row wider than the accumulators
    dws = [("uint8", "int8", (2, 10, 9, 7), {"strides": (1, 2), "padding": (1, 1, 1, 0)}),
           ("int8", "uint8", (2, 10, 9, 7), {"strides": (1, 2), "padding": (1, 1, 1, 0)}),
           ("uint8", "int8", (1, 6, 8, 8), {"padding": (1, 1, 1, 1)}),
           ("int8", "int8", (1, 3, 9, 300), {"padding": (2, 0, 1, 2), "dilation": (2, 1)}),
           ("uint8", "uint8", (1, 2, 3, 1030), {"padding": (1, 1, 1, 1)}),
           # strided along W (the plane's rows split into column phases): stride 2 as
           # MobileNet's, stride 3 with a dilation along W
           ("uint8", "int8", (1, 5, 12, 12), {"strides": (2, 2), "padding": (0, 0, 1, 1)}),
           ("int8", "int8", (1, 4, 11, 13),
            {"strides": (2, 3), "padding": (1, 2, 0, 1), "dilation": (1, 2)}),
           # stride 2 along W on rows long enough for the vector split into phases (32
           # values, then 16, then one by one; odd and even left padding)
           ("uint8", "int8", (1, 3, 6, 53), {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
           ("int8", "uint8", (1, 2, 5, 70), {"strides": (2, 2), "padding": (0, 0, 1, 0)}),
           # stride 1 in float32 lanes: a 5x5 kernel (the taps' loop not unrolled), rows
           # in groups of 4 with a last group of 1, 3 vectors a row (the last one spills
           # into the next row), the image's last row read through a copy; a row of 17
           ("int8", "int8", (2, 5, 13, 37), {"padding": (2, 2, 2, 2), "kernel": (5, 5)}),
           ("uint8", "int8", (1, 4, 6, 17), {"padding": (0, 1, 0, 1)}),
           # stride 2 along H only: rows of 20 into two row phases
           ("int8", "int8", (1, 3, 9, 20), {"strides": (2, 1), "padding": (1, 1, 1, 1)}),
           # stride 2 on planes past 32 KB in float32 (the int16 planes): blocks of whole
           # output rows summed in vectors of the copy's width, the last columns one by
           # one (1019 and 995 sums a block)
           ("uint8", "int8", (1, 5, 100, 100), {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
           ("int8", "uint8", (1, 3, 90, 97), {"strides": (2, 2), "padding": (1, 2, 2, 1)})]
    for i, (dx, dw, xs_, attrs) in enumerate(dws):
        c = xs_[1]
        x = q(dx, xs_)
        attrs = dict(attrs)
        w = q(dw, (c, 1, *attrs.pop("kernel", (3, 3))))
        zx = np.asarray(R.qrange(dx)[i % 2], dx)
        zw = q(dw, (c,))
        attrs = dict(attrs, groups=c)
        si, so, zo = requant("int8", c, per_col=True)
        sc = np.asarray(0.003, F32)

        def build_d(bb: BlockBuilder, xs: list[Var], w=w, zx=zx, zw=zw, si=si, so=so, zo=zo,
                    attrs=attrs, sc=sc, i=i) -> Any:
            acc = _emit(bb, "qnn.conv2d", xs[0], w, zx, zw, **attrs)
            if i != 1:
                return _emit(bb, "qnn.requantize", acc, si, np.int32(0), so, zo, axis=1)
            y = _emit(bb, "cast", acc, dtype="float32")
            return _emit(bb, "multiply", y, sc)

        def want_d(f: list[np.ndarray], w=w, zx=zx, zw=zw, si=si, so=so, zo=zo, attrs=attrs,
                   sc=sc, i=i) -> np.ndarray:
            acc = R.conv2d(f[0], w, zx, zw, **attrs)
            if i != 1:
                return R.requantize_op(acc, si, np.int32(0), so, zo, axis=1)
            return (acc.astype(F32) * sc).astype(F32)

        out.append(Chain(f"depthwise_{i}", [x], build_d, want_d))

    # QLinearConcat: inputs on the output's scale copied, the others through their
    # tables (plait_qlookup), along the channels and along the last axis
    for i, (dt, axis) in enumerate((("uint8", 1), ("int8", -1))):
        shapes_c = [(2, 3, 4, 5), (2, 2, 4, 5), (2, 1, 4, 5)] if axis == 1 else \
            [(2, 3, 4, 5), (2, 3, 4, 2), (2, 3, 4, 7)]
        xs_c = [q(dt, sh) for sh in shapes_c]
        ys_c, yz_c = F32(0.05), np.asarray(R.qrange(dt)[0] + 9, dt)
        sc_c = [ys_c, F32(0.031), F32(0.07)]
        zp_c = [yz_c, np.asarray(R.qrange(dt)[1] - 20, dt), yz_c]

        def build_cat(bb: BlockBuilder, xs: list[Var], sc_c=sc_c, zp_c=zp_c, ys_c=ys_c,
                      yz_c=yz_c, axis=axis) -> Any:
            return bb.emit(make_call("qnn.concat", Tuple(tuple(xs)),
                                     Tuple(tuple(_c(v) for v in sc_c)),
                                     Tuple(tuple(_c(v) for v in zp_c)), _c(ys_c), _c(yz_c),
                                     axis=axis))

        out.append(Chain(f"concat_{i}", xs_c, build_cat,
                         lambda f, sc_c=sc_c, zp_c=zp_c, ys_c=ys_c, yz_c=yz_c, axis=axis:
                         R.concat(f, sc_c, zp_c, ys_c, yz_c, axis=axis)))

    # QLinearAdd and QLinearMul (plait_qadd, plait_qmul): same shapes, a scalar on
    # either side, a row vector (the output's trailing dimension); ratios that
    # saturate both ways
    adds = [("uint8", (3, 70), (3, 70), 0.02, 0.03, 0.025),
            ("int8", (2, 5, 33), (2, 5, 33), 0.5, 0.01, 0.004),
            ("uint8", (), (4, 19), 0.02, 0.03, 0.025),
            ("int8", (4, 19), (1,), 0.02, 0.03, 0.025),
            ("uint8", (6, 130), (130,), 0.01, 0.2, 0.05)]
    for i, (dt, sa_, sb_, fa, fb_, fc) in enumerate(adds):
        a_ = q(dt, sa_)
        b_ = q(dt, sb_)
        pa = [np.asarray(fa, F32), q(dt, ()), np.asarray(fb_, F32), q(dt, ()),
              np.asarray(fc, F32), q(dt, ())]

        for op, ref in (("qnn.add", R.add), ("qnn.mul", R.mul)):
            def build_bin(bb: BlockBuilder, xs: list[Var], pa=pa, op=op) -> Any:
                return _emit(bb, op, xs[0], pa[0], pa[1], xs[1], pa[2], pa[3], pa[4], pa[5])

            out.append(Chain(f"{op[4:]}_{i}", [a_, b_], build_bin,
                             lambda f, pa=pa, ref=ref: ref(f[0], pa[0], pa[1], f[1], pa[2],
                                                           pa[3], pa[4], pa[5])))

    # quantize (plait_quantize): per tensor with NaN, infinities, ties and values out of
    # range; a scale computed at run time; per channel; dequantize (plait_dequantize)
    xq = rng.normal(size=(2, 7, 37)).astype(F32) * 3
    xq.flat[:8] = [np.nan, np.inf, -np.inf, 2.5 * 0.05, -3.5 * 0.05, 1e30, -1e30, 0.5 * 0.05]
    for i, dt in enumerate(("uint8", "int8")):
        zq = q(dt, ())
        sq = np.asarray(0.05, F32)

        def build_qt(bb: BlockBuilder, xs: list[Var], zq=zq, sq=sq) -> Any:
            return _emit(bb, "qnn.quantize", xs[0], sq, zq)

        out.append(Chain(f"quantize_{i}", [xq], build_qt,
                         lambda f, zq=zq, sq=sq: R.quantize_op(f[0], sq, zq)))
        zq_c = q(dt, (7,))
        sq_c = rng.uniform(0.01, 0.1, 7).astype(F32)

        def build_qc(bb: BlockBuilder, xs: list[Var], zq_c=zq_c, sq_c=sq_c) -> Any:
            return _emit(bb, "qnn.quantize", xs[0], sq_c, zq_c, axis=1)

        out.append(Chain(f"quantize_axis_{i}", [xq], build_qc,
                         lambda f, z=zq_c, s=sq_c: R.quantize_op(f[0], s, z, axis=1)))
        xd = q(dt, (3, 7, 11))

        def build_dq_t(bb: BlockBuilder, xs: list[Var], zq_c=zq_c, sq_c=sq_c) -> Any:
            return _emit(bb, "qnn.dequantize", xs[0], sq_c, zq_c, axis=-2)

        out.append(Chain(f"dequantize_axis_{i}", [xd], build_dq_t,
                         lambda f, z=zq_c, s=sq_c: R.dequantize(f[0], s, z, axis=-2)))

    def build_qrt(bb: BlockBuilder, xs: list[Var]) -> Any:
        return _emit(bb, "qnn.quantize", xs[0], xs[1], np.uint8(131))

    out.append(Chain("quantize_runtime_scale", [xq, np.asarray(0.0371, F32)], build_qrt,
                     lambda f: R.quantize_op(f[0], f[1], np.uint8(131))))
    xd = q("int8", (5, 23))

    def build_dqs(bb: BlockBuilder, xs: list[Var]) -> Any:
        return _emit(bb, "qnn.dequantize", xs[0], np.asarray(0.0173, F32), np.int8(-3))

    out.append(Chain("dequantize_tensor", [xd], build_dqs,
                     lambda f: R.dequantize(f[0], np.asarray(0.0173, F32), np.int8(-3))))

    # DynamicQuantizeLinear (plait_dynamic_quantize): a range over 0, one all positive
    # (min clamped to 0), an empty one (scale 1); each of the three results
    # ranges of several blocks reduced on two threads (150009 elements: blocks do not
    # divide it, the quantization runs in one piece; 128 x 3072: it runs in pieces), the
    # extremes and a NaN in the last block's tail lanes, all negative with -0.0
    big = rng.normal(size=(3, 50003)).astype(F32)
    big[2, 50002], big[0, 7] = 9.5, -7.25
    wide = rng.normal(size=(128, 3072)).astype(F32)
    wide[127, 3071], wide[64, 1] = -11.0, 6.0
    with_nan = rng.normal(size=(3, 50003)).astype(F32)
    with_nan[2, 50001] = np.nan
    negative = -rng.uniform(0.0, 2.0, (7, 1001)).astype(F32)
    negative[3, 500] = -0.0
    dyn = [rng.normal(size=(3, 41)).astype(F32) * 2,
           rng.uniform(0.5, 3.0, (2, 19)).astype(F32), np.zeros((5, 3), F32),
           big, wide, with_nan, negative]

    def want_dyn(f: list[np.ndarray], k: int) -> np.ndarray:
        with np.errstate(invalid="ignore"):   # the NaN case's zero point (0, as the kernel's)
            return R.dynamic_quantize(f[0])[k]

    for i, xv in enumerate(dyn):
        for k in range(3):
            def build_dyn_q(bb: BlockBuilder, xs: list[Var], k=k) -> Any:
                t = _emit(bb, "qnn.dynamic_quantize", xs[0])
                return bb.emit(TupleGetItem(t, k))

            out.append(Chain(f"dynamic_quantize_{i}_{k}", [xv], build_dyn_q,
                             lambda f, k=k: want_dyn(f, k)))
    return out


def _module(chains: list[Chain]) -> plait.IRModule:
    params: list[Var] = []
    for c in chains:
        for j, f in enumerate(c.feeds):
            params.append(Var(f"{c.name}_{j}", TensorType(f.shape, f.dtype.name)))
    bb = BlockBuilder()
    it = iter(params)
    with bb.function("main", params):
        with bb.dataflow():
            outs = [c.build(bb, [next(it) for _ in c.feeds]) for c in chains]
            out = bb.emit_output(Tuple(tuple(outs)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def built() -> tuple[list[Chain], Any]:
    chains = _chains(np.random.default_rng(7))
    return chains, plait.build(_module(chains), "c")


def test_every_product_reaches_the_int8_kernels(built: tuple[list[Chain], Any]) -> None:
    chains, _ = built
    mod = Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(_module(chains))
    text = str(dispatch_int8(mod))
    assert "qnn.matmul" not in text and "qnn.conv2d" not in text
    assert "qnn.requantize" not in text and "qnn.dequantize" not in text
    assert text.count("plait_qdw_") >= 2
    assert "qnn.add" not in text and "qnn.quantize" not in text and "qnn.mul" not in text
    assert text.count("plait_qadd_") >= 5
    assert text.count(".add_kind = 1") >= 1 and text.count(".add_kind = 2") >= 1
    assert text.count(".add2_kind = 1") >= 1 and text.count(".add2_kind = 2") >= 1
    assert text.count(".add_kind = 3") >= 3
    assert "qnn.dynamic_quantize" not in text
    assert "qnn.concat" not in text and text.count("plait_qlookup_") >= 2


@pytest.mark.parametrize("isa", ISAS)
def test_every_kernel_copy_equals_the_reference(built: tuple[list[Chain], Any], isa: str
                                                ) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    chains, exe = built
    feeds = [f for c in chains for f in c.feeds]
    with use_isa(isa):
        vm = VirtualMachine(exe)
        got = vm["main"](*feeds)
        assert library_isas(exe)["qgemm"]["chosen"] == COPY[isa]
    for c, g in zip(chains, got):
        assert_same(np.asarray(g), c.expected(c.feeds), f"{c.name} on {isa}")


def test_int8_kernels_run_in_parallel_bit_exactly() -> None:
    """A product big enough for the library's threads (split over column blocks and
    rows) computes the same integers."""
    rng = np.random.default_rng(11)
    a = rand_q(rng, "uint8", (70, 300))
    b = rand_q(rng, "int8", (300, 150))
    zb = rand_q(rng, "int8", (150,))
    x = Var("a", TensorType(a.shape, "uint8"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(_emit(bb, "qnn.matmul", x, b, np.uint8(9), zb))
        bb.emit_func_output(y)
    got = VirtualMachine(plait.build(bb.get(), "c"))["main"](a)
    assert_same(np.asarray(got), R.matmul(a, b, np.uint8(9), zb), "parallel matmul")


def test_pack_b_column_terms_wrap_like_int32() -> None:
    """The column terms of a packed B are int32 modulo 2^32 (a K so long that K * zb
    leaves int32 is still exact)."""
    from plait.target.c.kernels.int8 import pack_b, shifted

    b = np.full((3, 2), 255, np.uint8)
    panels, zbp, corr = pack_b(b, np.asarray([0, 255], np.uint8))
    assert panels.dtype == np.int8 and panels.size == 4 * 16 + 8
    assert list(zbp[:2]) == [-128, 127]
    col = shifted(b).sum(axis=0)
    assert list(corr[:2]) == list(_wrap32(col - 3 * np.asarray([-128, 127])))


def _trained_like(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Weights spread like a trained layer's (most of them small, a few pairs of
    channels of a tap at the extremes): what onnxruntime's quantizer writes, so that
    ``pack_conv_rows`` clamps a few pairs (mode 1) rather than keeping the rows."""
    z = 128 if dtype == "uint8" else 0
    w = np.clip(np.rint(rng.normal(0, 20, shape)) + z, z - 128, z + 127)
    flat = w.reshape(shape[0], shape[1], -1)
    for i in range(min(shape[0], 6)):   # pairs of channels 2j, 2j+1 at one tap
        j = 2 * int(rng.integers(0, shape[1] // 2))
        t = int(rng.integers(0, flat.shape[2]))
        flat[i, j:j + 2, t] = (z + 127, z + 127 - i) if i % 2 else (z - 128, z - 120 + i)
    return w.astype(dtype)


@pytest.mark.parametrize("isa", ISAS)
def test_conv_with_clamped_weight_pairs_equals_the_reference(isa: str) -> None:
    """Weights with a few pairs of channels past vpmaddubsw's int16 range (the AVX2
    copy's products of safe pairs, the others' plain dot products, every copy the
    corrections after the sums): int32 sums and requantized outputs equal the
    reference, on images at the extremes of their range; several blocks of K (576 >
    4 * 128), groups, zero points that need the column sums, two threads."""
    from plait.target.c.kernels.int8 import pack_conv_rows

    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    rng = np.random.default_rng(5)
    cases = [("uint8", "int8", (1, 64, 12, 11), 30, {"padding": (1, 1, 1, 1)}),
             ("int8", "uint8", (2, 8, 9, 9), 14, {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
             ("uint8", "int8", (1, 16, 8, 8), 24, {"groups": 2, "padding": (1, 1, 1, 1)}),
             ("uint8", "uint8", (1, 32, 40, 40), 40, {"kernel": (1, 1)})]
    chains = []
    for i, (dx, dw, xs_, cout, attrs) in enumerate(cases):
        attrs = dict(attrs)
        kh, kw = attrs.pop("kernel", (3, 3))
        groups = attrs.get("groups", 1)
        w = _trained_like(rng, dw, (cout, xs_[1] // groups, kh, kw))
        packed = pack_conv_rows(w, groups)
        lo, hi = R.qrange(dx)
        x = rng.choice(np.array([lo, hi, lo + 1, hi - 1, (lo + hi) // 2]), xs_).astype(dx)
        zx = np.asarray(lo + 3 if i % 2 else hi - 3, dx)
        zw = np.asarray(R.qrange(dw)[0] + 100, dw) if dw == "uint8" else np.asarray(0, dw)
        si, so = np.asarray(rng.uniform(1e-4, 1e-3, cout), F32), F32(0.3)
        zo = np.asarray(17, np.uint8)

        def build_i(bb: BlockBuilder, xs: list[Var], w=w, zx=zx, zw=zw, attrs=attrs) -> Any:
            return _emit(bb, "qnn.conv2d", xs[0], w, zx, zw, **attrs)

        def build_q(bb: BlockBuilder, xs: list[Var], w=w, zx=zx, zw=zw, attrs=attrs, si=si,
                    so=so, zo=zo) -> Any:
            acc = _emit(bb, "qnn.conv2d", xs[0], w, zx, zw, **attrs)
            return _emit(bb, "qnn.requantize", acc, si, np.int32(0), so, zo, axis=1)

        acc = R.conv2d(x, w, zx, zw, **attrs)
        chains.append(Chain(f"clamped_i32_{i}", [x], build_i, lambda f, acc=acc: acc))
        chains.append(Chain(f"clamped_q_{i}", [x], build_q,
                            lambda f, acc=acc, si=si, so=so, zo=zo:
                            R.requantize_op(acc, si, np.int32(0), so, zo, axis=1)))
        kp = -(-(xs_[1] // groups) // 4) * 4 * kh * kw
        rows = groups * -(-(cout // groups) // 12) * 12
        mode, count = packed[rows * kp:rows * kp + 8].view(np.int32)
        assert mode == 1 and count >= 3, (mode, count)
    exe = plait.build(_module(chains), "c")
    feeds = [f for c in chains for f in c.feeds]
    with use_isa(isa):
        got = VirtualMachine(exe)["main"](*feeds)
        assert library_isas(exe)["qconv"]["chosen"] == COPY[isa]
    for c, g in zip(chains, got):
        assert_same(np.asarray(g), c.expected(c.feeds), f"{c.name} on {isa}")


@pytest.mark.parametrize("isa", ISAS)
def test_matmul_with_clamped_weight_pairs_equals_the_reference(isa: str) -> None:
    """A constant B with a few pairs of K values past vpmaddubsw's int16 range (packed in
    mode 1: the AVX2 copy's products of safe pairs, every copy the corrections after
    the tile), A at the extremes of its range: int32 sums and requantized outputs equal
    the reference; uint8 and int8 on both sides, odd K and N, a batch of rows."""
    from plait.target.c.kernels.int8 import b_corrections

    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    rng = np.random.default_rng(8)
    chains = []
    for i, (da, db, m, k, n) in enumerate([("uint8", "int8", 13, 131, 37),
                                           ("int8", "uint8", 40, 64, 50)]):
        b = _trained_like(rng, db, (n, k, 1, 1))[:, :, 0, 0].T.copy()
        assert b_corrections(b) >= 3
        lo, hi = R.qrange(da)
        a = rng.choice(np.array([lo, hi, lo + 1, hi - 1, (lo + hi) // 2]), (m, k)).astype(da)
        za = np.asarray(lo + 5, da)
        zb = np.asarray(R.qrange(db)[0] + 120, db) if db == "uint8" else np.asarray(0, db)
        si, so, zo = np.asarray(rng.uniform(1e-4, 1e-3, n), F32), F32(0.5), np.uint8(9)
        acc = R.matmul(a, b, za, zb)

        def build_i(bb: BlockBuilder, xs: list[Var], b=b, za=za, zb=zb) -> Any:
            return _emit(bb, "qnn.matmul", xs[0], b, za, zb)

        def build_q(bb: BlockBuilder, xs: list[Var], b=b, za=za, zb=zb, si=si, so=so,
                    zo=zo) -> Any:
            y = _emit(bb, "qnn.matmul", xs[0], b, za, zb)
            return _emit(bb, "qnn.requantize", y, si, np.int32(0), so, zo, axis=-1)

        chains.append(Chain(f"clamped_mm_i32_{i}", [a], build_i, lambda f, acc=acc: acc))
        chains.append(Chain(f"clamped_mm_q_{i}", [a], build_q,
                            lambda f, acc=acc, si=si, so=so, zo=zo:
                            R.requantize_op(acc, si, np.int32(0), so, zo, axis=-1)))
    exe = plait.build(_module(chains), "c")
    feeds = [f for c in chains for f in c.feeds]
    with use_isa(isa):
        got = VirtualMachine(exe)["main"](*feeds)
        assert library_isas(exe)["qgemm"]["chosen"] == COPY[isa]
    for c, g in zip(chains, got):
        assert_same(np.asarray(g), c.expected(c.feeds), f"{c.name} on {isa}")
