"""Every copy of every native kernel family, on the instruction sets this CPU runs.

Each case is a small model built once for the ``c`` target (its library holds one copy of
each family per instruction set of the architecture); each test runs it with the
families capped at one ISA (``plait.target.c.use_isa``), checks that the library really
runs the copy the cap allows (its ISA report: that ISA's, or for a family without a copy
of it, such as pooling without AVX-512, the best one below; and that
``cpu_features()`` predicts the same), that the single native entry point (where main
makes several native calls) and the VM path give the same bits, and compares the output
with numpy in float64 — rtol and atol 1e-4 (float32 sums of up to 864 products of values
in [-1, 1]), 1e-5 for the generated kernels (short sums), Winograd 5e-5 of the largest
output (its error scales with the outputs), pooling exact.  Shapes hit the edges: rows
and columns that are not multiples of the 6 x 16 (AVX-512: 6 x 32) tile, K not a
multiple of the 4-step unroll and beyond one 384-deep block, channel counts that are not
multiples of the vector width, stride 2, dilation, padding, 1x1 convolutions read in
place, the transposed product of small images (pixels as rows), the fused pooling,
Winograd F(2x2) and F(4x4) with odd image sizes, attention
with odd lengths, head sizes past 32 lanes and a causal mask, grouped and depthwise
convolutions (plait_dwconv.c: 3x3, 5x5, 7x7, stride 2, dilation, asymmetric padding, a
channel multiplier, several channels per group, rows of 7 to 75 columns, bias, residual,
relu, ReLU6, SiLU and GELU (both forms), planes on the register tile, channels in the
lanes and input rows read in place, each case every way; and the generated depthwise kernel), a
squeeze-and-excite gate (plait_se_scale), and generated
elementwise, reduction, layer-norm, GELU (erf and tanh) and SiLU kernels (that they give
the same bits in every copy: tests/codegen/test_codegen_run.py).  ISAs the CPU lacks
are skipped with the reason.  A registered family without a case fails
``test_every_registered_family_has_a_case``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from graph_helpers import (  # tests/target
    avg_pool_reference,
    build_graph,
    const,
    conv2d_reference,
    emit,
    max_pool_reference,
)

import plait
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas, chosen_copy, host_arch
from plait.codegen.c.variants import ISAS as VARIANT_ISAS
from plait.runtime import VirtualMachine
from plait.target.c import build_isas, cpu_features, library_isas, use_isa
from plait.target.c.kernels import FAMILIES

RNG = np.random.default_rng(5)
ISAS = arch_isas(host_arch(), tuple(VARIANT_ISAS))
"""Every instruction set of this architecture (int8 families have VNNI copies)."""


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


Case = tuple[dict[str, tuple[int, ...]], Callable[..., Any], list[np.ndarray], np.ndarray,
             float, str, dict[str, Any]]


def _matmul() -> Case:
    a, b = _rand(2, 37, 400), _rand(2, 400, 45)
    return ({"a": a.shape, "b": b.shape}, lambda bb, p: emit(bb, "matmul", p[0], p[1]),
            [a, b], np.matmul(a.astype(np.float64), b), 1e-4, "gemm", {})


def _linear() -> Case:
    x, w, bias, r = _rand(5, 13), _rand(17, 13), _rand(17), _rand(5, 17)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "linear", p[0], const(w), const(bias))
        return emit(bb, "relu", emit(bb, "add", y, p[1]))

    ref = np.maximum(x.astype(np.float64) @ w.T + bias + r, 0)
    return {"x": x.shape, "r": r.shape}, body, [x, r], ref, 1e-4, "gemm", {}


def _gemv() -> Case:
    """A product of 3 rows by a weight kept (N, K) (the decode family's plait_gemv,
    c.DispatchDecode) with bias and residual; N 37 and K 45: tails of the 4-row blocks
    and of the 16-lane sums."""
    x, w, bias, r = _rand(3, 45), _rand(37, 45), _rand(37), _rand(3, 37)

    def body(bb: Any, p: Any) -> Any:
        return emit(bb, "add", emit(bb, "linear", p[0], const(w), const(bias)), p[1])

    ref = x.astype(np.float64) @ w.T + bias + r
    return ({"x": x.shape, "r": r.shape}, body, [x, r], ref, 1e-4, "decode",
            {"decode_min_weights": 0})


def _conv(xshape: tuple[int, ...], wshape: tuple[int, ...], strides: tuple[int, int],
          padding: tuple[int, int, int, int], dilation: tuple[int, int],
          family: str = "conv", epilogue: bool = True, winograd: int = 4) -> Callable[[], Case]:
    def case() -> Case:
        x, w = _rand(*xshape), _rand(*wshape)
        ref = conv2d_reference(x, w, strides, padding, dilation)
        b, r = _rand(wshape[0]), _rand(*ref.shape)

        def body(bb: Any, p: Any) -> Any:
            y = emit(bb, "conv2d", p[0], const(w), strides=strides, padding=padding,
                     dilation=dilation)
            if epilogue:
                y = emit(bb, "add", y, const(b.reshape(-1, 1, 1)))
                y = emit(bb, "relu", emit(bb, "add", y, p[1]))
            return y

        if epilogue:
            ref = np.maximum(ref + b.reshape(1, -1, 1, 1) + r, 0)
        tol = 5e-5 * float(np.abs(ref).max()) if family == "winograd" else 1e-4
        return ({"x": x.shape, "r": r.shape}, body, [x, r], ref, tol, family,
                {"winograd": winograd})
    return case


def _conv_pool() -> Case:
    x, w, b = _rand(1, 3, 6, 16), _rand(7, 3, 3, 3), _rand(7)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1, 1, 1))
        y = emit(bb, "relu", emit(bb, "add", y, const(b.reshape(7, 1, 1))))
        return emit(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2))

    conv = np.maximum(conv2d_reference(x, w, padding=(1, 1, 1, 1)) + b.reshape(1, 7, 1, 1), 0)
    ref = max_pool_reference(conv, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0))
    return {"x": x.shape}, body, [x], ref, 1e-4, "conv", {}


def _attention(q_shape: tuple[int, ...] = (2, 3, 9, 8), sk: int = 21, dv: int = 24
               ) -> Case:
    q = _rand(*q_shape)
    k, v = _rand(*q_shape[:2], sk, q_shape[3]), _rand(*q_shape[:2], sk, dv)

    def body(bb: Any, p: Any) -> Any:
        kt = emit(bb, "permute_dims", p[1], axes=(0, 1, 3, 2))
        s = emit(bb, "divide", emit(bb, "matmul", p[0], kt),
                 const(np.array([np.sqrt(8.0)], np.float32)))
        return emit(bb, "matmul", emit(bb, "softmax", s, axis=-1), p[2])

    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(8.0)
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True) @ v
    return {"q": q.shape, "k": k.shape, "v": v.shape}, body, [q, k, v], ref, 1e-4, \
        "attention", {}


def _masked_attention() -> Case:
    """A causal mask (-inf above the diagonal) added to the scaled scores: 13 queries and
    keys, head size 5, 3 heads (the mask broadcast over heads: a stride of 0)."""
    q, k, v = _rand(1, 3, 13, 5), _rand(1, 3, 13, 5), _rand(1, 3, 13, 11)
    mask = np.triu(np.full((13, 13), -np.inf, np.float32), 1)

    def body(bb: Any, p: Any) -> Any:
        s = emit(bb, "matmul", p[0], emit(bb, "permute_dims", p[1], axes=(0, 1, 3, 2)))
        s = emit(bb, "multiply", s, const(np.array([0.4], np.float32)))
        s = emit(bb, "add", s, const(mask))
        return emit(bb, "matmul", emit(bb, "softmax", s, axis=-1), p[2])

    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * np.float32(0.4) + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True) @ v
    return {"q": q.shape, "k": k.shape, "v": v.shape}, body, [q, k, v], ref, 1e-4, \
        "attention", {}


def _grouped(c: int, hw: tuple[int, int], k: int, strides: tuple[int, int],
             dilation: tuple[int, int], groups: int | None = None, out: int | None = None,
             padding: tuple[int, int, int, int] | None = None, act: str = "relu",
             residual: bool = False, native: bool = True,
             family: str = "dwconv", winograd: int | None = None) -> Callable[[], Case]:
    """A grouped convolution (default: depthwise, groups = channels) with bias, an
    optional residual and an activation (relu, ReLU6, SiLU, or GELU: ``gelu`` the erf
    form, ``gelu_tanh`` the tanh form, against math.erf and numpy's tanh in float64),
    padding k // 2 *
    dilation unless given: the dwconv family (``plait_dwconv.c``; ``family`` "conv" or
    "winograd" where the channels per group make it a convolution per group, Winograd
    forced to F(``winograd``) when given), or with ``native`` false the generated kernel
    (depthwise=False)."""
    g = groups or c
    o = out or c

    def case() -> Case:
        x, w, b = _rand(2, c, *hw), _rand(o, c // g, k, k), _rand(o)
        pad = padding or (k // 2 * dilation[0], k // 2 * dilation[1]) * 2
        cg, og = c // g, o // g
        ref = np.concatenate([conv2d_reference(x[:, i * cg:(i + 1) * cg],
                                               w[i * og:(i + 1) * og], strides, pad, dilation)
                              for i in range(g)], axis=1)
        ref = ref + b.reshape(1, o, 1, 1)
        r = _rand(*ref.shape)
        if residual:
            ref = ref + r

        def body(bb: Any, p: Any) -> Any:
            y = emit(bb, "conv2d", p[0], const(w), strides=strides, padding=pad,
                     dilation=dilation, groups=g)
            y = emit(bb, "add", y, const(b.reshape(o, 1, 1)))
            if residual:
                y = emit(bb, "add", y, p[1])
            if act == "relu":
                return emit(bb, "relu", y)
            if act == "relu6":
                return emit(bb, "clip", emit(bb, "clip", y, min=0.0), max=6.0)
            if act in ("gelu", "gelu_tanh"):
                return emit(bb, "gelu", y, approximate="tanh" if act == "gelu_tanh" else "none")
            return emit(bb, "multiply", y, emit(bb, "sigmoid", y))

        if act == "relu":
            ref = np.maximum(ref, 0)
        elif act == "relu6":
            ref = np.clip(ref, 0, 6)
        elif act == "gelu":
            ref = 0.5 * ref * (1 + np.vectorize(math.erf)(ref / math.sqrt(2)))
        elif act == "gelu_tanh":
            u = math.sqrt(2 / math.pi) * (ref + 0.044715 * ref ** 3)
            ref = 0.5 * ref * (1 + np.tanh(u))
        else:
            ref = ref / (1 + np.exp(-ref))
        shapes = {"x": x.shape, "r": r.shape} if residual else {"x": x.shape}
        inputs = [x, r] if residual else [x]
        if not native:
            return shapes, body, inputs, ref, 1e-5, "kernels", {"depthwise": False}
        return shapes, body, inputs, ref, 1e-4, family, (
            {"winograd": winograd} if winograd else {})
    return case


def _grouped_1d(c: int, length: int, k: int, groups: int, padding: tuple[int, int],
                dilation: int = 1) -> Case:
    """A grouped 1-D convolution with bias and GELU (wav2vec2's positional convolution,
    small: the gelu folds into a product's epilogue), as conv2d of height 1 on the conv
    family (a product per group), against a float64 reference (math.erf)."""
    x, w, b = _rand(1, c, length), _rand(c, c // groups, k), _rand(c)
    cg = c // groups
    ref = np.concatenate([conv2d_reference(x[:, None, i * cg:(i + 1) * cg].transpose(0, 2, 1, 3),
                                           w[i * cg:(i + 1) * cg, :, None],
                                           padding=(0, padding[0], 0, padding[1]),
                                           dilation=(1, dilation))
                          for i in range(groups)], axis=1)[:, :, 0] + b.reshape(1, c, 1)
    ref = 0.5 * ref * (1 + np.vectorize(math.erf)(ref / math.sqrt(2)))

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv1d", p[0], const(w), padding=padding, dilation=dilation,
                 groups=groups)
        return emit(bb, "gelu", emit(bb, "add", y, const(b.reshape(c, 1))))

    return {"x": x.shape}, body, [x], ref, 1e-4, "conv", {}


def _squeeze_excite() -> Case:
    """A squeeze-and-excite gate (plait_se_scale, the dwconv family): the mean of each
    of 2 x 37 planes of 5 x 7, 1x1 convolutions 37 -> 9 -> 37 with biases, SiLU (as
    exported: x * sigmoid(x)), sigmoid, the input scaled."""
    x, w1, b1 = _rand(2, 37, 5, 7), _rand(9, 37, 1, 1), _rand(9, 1, 1)
    w2, b2 = _rand(37, 9, 1, 1), _rand(37, 1, 1)

    def body(bb: Any, p: Any) -> Any:
        h = emit(bb, "add", emit(bb, "conv2d", emit(bb, "global_avg_pool2d", p[0]),
                                 const(w1)), const(b1))
        h = emit(bb, "multiply", h, emit(bb, "sigmoid", h))
        g = emit(bb, "add", emit(bb, "conv2d", h, const(w2)), const(b2))
        return emit(bb, "multiply", p[0], emit(bb, "sigmoid", g))

    x64 = x.astype(np.float64)
    h = x64.mean((2, 3)) @ w1.reshape(9, 37).T + b1.reshape(-1)
    g = (h / (1 + np.exp(-h))) @ w2.reshape(37, 9).T + b2.reshape(-1)
    ref = x64 / (1 + np.exp(-g))[:, :, None, None]
    return {"x": x.shape}, body, [x], ref, 1e-5, "dwconv", {}


def _norm_gelu() -> Case:
    """layer_norm over 45 values, GELU in its erf and tanh forms and SiLU: generated
    kernels with plait's float32 exp, erf and tanh, vectorized in every copy."""
    x, g, b = _rand(7, 45) * 3, _rand(45), _rand(45)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "layer_norm", p[0], const(g), const(b), axes=(-1,), epsilon=1e-5)
        e = emit(bb, "gelu", y)
        t = emit(bb, "gelu", p[0], approximate="tanh")
        return emit(bb, "add", emit(bb, "add", e, t), emit(bb, "silu", p[0]))

    x64 = x.astype(np.float64)
    y = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    y = y * g + b
    erf = np.vectorize(math.erf)
    ref = (0.5 * y * (1 + erf(y / math.sqrt(2)))
           + 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
           + x64 / (1 + np.exp(-x64)))
    return {"x": x.shape}, body, [x], ref, 1e-5, "kernels", {}


def _pool(shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
          p: tuple[int, int, int, int]) -> Callable[[], Case]:
    def case() -> Case:
        x = _rand(*shape)
        x.reshape(-1)[::37] = np.nan

        def body(bb: Any, prm: Any) -> Any:
            return emit(bb, "max_pool2d", prm[0], pool_size=k, strides=s, dilation=d,
                        padding=p)

        return ({"x": shape}, body, [x], max_pool_reference(x, k, s, d, p), 0.0, "pool",
                {})
    return case


def _generated() -> Case:
    """softmax and an elementwise chain: generated (fused) kernels, no library call."""
    x = _rand(7, 45)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "softmax", p[0], axis=-1)
        return emit(bb, "multiply", emit(bb, "add", y, p[0]), p[0])

    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True) + x64) * x64
    return {"x": x.shape}, body, [x], ref, 1e-5, "kernels", {"gemm": False}


def _int8_product() -> Case:
    """An int8 product (the qgemm family, reached through the qnn dialect's dispatch):
    quantize, u8 x s8 matmul with per-column zero points, int32 bias, per-column
    requantization, dequantize; exact against the dialect's reference."""
    from plait.dialects.qnn import reference as R

    rng = np.random.default_rng(5)
    x = _rand(2, 7, 45)
    w = rng.integers(-128, 128, (45, 37)).astype(np.int8)
    zb = rng.integers(-128, 128, 37).astype(np.int8)
    bias = rng.integers(-3000, 3000, 37).astype(np.int32)
    xs, xz = np.asarray(0.01, np.float32), np.asarray(131, np.uint8)
    si = rng.uniform(1e-4, 1e-3, 37).astype(np.float32)
    so, zo = np.asarray(0.05, np.float32), np.asarray(7, np.uint8)

    def body(bb: Any, p: Any) -> Any:
        q = emit(bb, "qnn.quantize", p[0], const(xs), const(xz))
        acc = emit(bb, "qnn.matmul", q, const(w), const(xz), const(zb))
        acc = emit(bb, "add", acc, const(bias))
        y = emit(bb, "qnn.requantize", acc, const(si), const(np.int32(0)), const(so), const(zo))
        return emit(bb, "qnn.dequantize", y, const(so), const(zo))

    q = R.quantize(x, xs, xz, out_dtype="uint8")
    acc = R.matmul(q, w, xz, zb) + bias
    ref = R.dequantize(R.requantize_op(acc, si, np.int32(0), so, zo), so, zo)
    return {"x": x.shape}, body, [x], ref, 0.0, "qgemm", {}


def _weight_only() -> Case:
    """Weight-only int4 products (the wquant family, reached through the qnn dialect's
    dispatch): 14 rows (the tiled prefill product) and 1 row (the decode matrix-vector
    product) against the same packed weights (groups of 32, K 80: a short last block;
    N 37: a partial tile), with a bias."""
    from plait.dialects.qnn import nbits
    from plait.dialects.qnn import reference as R

    x, v = _rand(2, 7, 80), _rand(1, 80)
    b, s, z = nbits.quantize_blockwise(_rand(37, 80), 4, 32)
    bias = _rand(37)
    attrs = {"K": 80, "N": 37, "bits": 4, "block_size": 32}

    def body(bb: Any, p: Any) -> Any:
        w = (const(b), const(s), const(z), const(bias))
        return emit(bb, "add", emit(bb, "qnn.matmul_nbits", p[0], *w, **attrs),
                    emit(bb, "qnn.matmul_nbits", p[1], *w, **attrs))

    wt = nbits.dequantize_weights(b, s, z, 80, 4, 32).astype(np.float64)
    ref = (x.astype(np.float64) @ wt.T + bias) + (v.astype(np.float64) @ wt.T + bias)
    assert np.allclose(ref, R.matmul_nbits(x, b, s, z, bias, **attrs)
                       + R.matmul_nbits(v, b, s, z, bias, **attrs), rtol=1e-5, atol=1e-5)
    return {"x": x.shape, "v": v.shape}, body, [x, v], ref, 1e-4, "wquant", {}


def _int8_conv(groups: int) -> Callable[[], Case]:
    """An int8 convolution (the qconv family): quantize, a 3x3 convolution of 5 to 7
    channels with per-channel zero points (``groups=1``: the transposed product) or a
    depthwise one of 6 channels (``groups=6``), stride 2, padding, requantize,
    dequantize; exact against the dialect's reference."""
    def make() -> Case:
        from plait.dialects.qnn import reference as R

        rng = np.random.default_rng(7)
        c, o = (5, 7) if groups == 1 else (6, 6)
        x = _rand(2, c, 9, 11)
        w = rng.integers(-128, 128, (o, c // groups, 3, 3)).astype(np.int8)
        xs, zx = np.asarray(0.01, np.float32), np.asarray(131, np.uint8)
        zw = rng.integers(-9, 9, o).astype(np.int8)
        si = rng.uniform(1e-3, 1e-2, o).astype(np.float32)
        so, zo = np.asarray(0.5, np.float32), np.asarray(7, np.uint8)
        attrs = dict(strides=(2, 2), padding=(1, 1, 1, 0), groups=groups)

        def body(bb: Any, p: Any) -> Any:
            q = emit(bb, "qnn.quantize", p[0], const(xs), const(zx))
            acc = emit(bb, "qnn.conv2d", q, const(w), const(zx), const(zw), **attrs)
            y = emit(bb, "qnn.requantize", acc, const(si), const(np.int32(0)), const(so),
                     const(zo), axis=1)
            return emit(bb, "qnn.dequantize", y, const(so), const(zo))

        q = R.quantize(x, xs, zx, out_dtype="uint8")
        acc = R.conv2d(q, w, zx, zw, **attrs)
        y = R.requantize_op(acc, si, np.int32(0), so, zo, axis=1)
        return {"x": x.shape}, body, [x], R.dequantize(y, so, zo), 0.0, "qconv", {}

    return make


def _int8_elementwise() -> Case:
    """int8 elementwise kernels (the qelementwise family): quantize two float tensors
    (one a row vector), QLinearAdd them, QLinearMul by the first, dequantize; exact
    against the dialect's reference."""
    from plait.dialects.qnn import reference as R

    x, r = _rand(3, 70) * 2, _rand(70)
    f = np.float32
    sx, zx = np.asarray(0.02, f), np.asarray(120, np.uint8)
    sr, zr = np.asarray(0.01, f), np.asarray(9, np.uint8)
    sa, za = np.asarray(0.03, f), np.asarray(128, np.uint8)
    sm, zm = np.asarray(0.05, f), np.asarray(3, np.uint8)

    def body(bb: Any, p: Any) -> Any:
        qx = emit(bb, "qnn.quantize", p[0], const(sx), const(zx))
        qr = emit(bb, "qnn.quantize", p[1], const(sr), const(zr))
        a = emit(bb, "qnn.add", qx, const(sx), const(zx), qr, const(sr), const(zr), const(sa),
                 const(za))
        m = emit(bb, "qnn.mul", a, const(sa), const(za), qx, const(sx), const(zx), const(sm),
                 const(zm))
        return emit(bb, "qnn.dequantize", m, const(sm), const(zm))

    qx, qr = R.quantize(x, sx, zx, out_dtype="uint8"), R.quantize(r, sr, zr, out_dtype="uint8")
    a = R.add(qx, sx, zx, qr, sr, zr, sa, za)
    ref = R.dequantize(R.mul(a, sa, za, qx, sx, zx, sm, zm), sm, zm)
    return {"x": x.shape, "r": r.shape}, body, [x, r], ref, 0.0, "qelementwise", {}


def _activations() -> Case:
    """ReLU6 (two clips) after a strided convolution and its bias, SiLU after a product:
    the native epilogue's activation (``plait_act_tile``) on odd tiles."""
    x, w, b = _rand(1, 5, 11, 13) * 4, _rand(7, 5, 3, 3), _rand(7)
    a, wl = _rand(14, 37) * 3, _rand(37, 21)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), strides=(2, 2), padding=(1, 1, 1, 1))
        y = emit(bb, "add", y, const(b.reshape(7, 1, 1)))
        y = emit(bb, "clip", emit(bb, "clip", y, min=0.0), max=6.0)
        m = emit(bb, "matmul", p[1], const(wl))
        s = emit(bb, "multiply", m, emit(bb, "sigmoid", m))
        return emit(bb, "add", emit(bb, "reshape", y, shape=(14, 21)), s)

    conv = conv2d_reference(x, w, (2, 2), (1, 1, 1, 1)) + b.reshape(1, 7, 1, 1)
    m = a.astype(np.float64) @ wl
    silu = m / (1 + np.exp(-m))
    ref = np.clip(conv, 0, 6).reshape(14, 21) + silu
    return {"x": x.shape, "a": a.shape}, body, [x, a], ref, 1e-4, "gemm", {}


def _silu_extremes() -> Case:
    """SiLU after a product whose bias puts its outputs at the edges of the activation's
    range (inf, -inf, NaN, beyond +-88 where exp overflows, the largest float): the
    native epilogue (plait_act_tile, 21 columns: a vectorized loop and its tail) matches
    numpy's x / (1 + exp(-x)) (NaN where numpy's is; -inf gives NaN, as -inf / inf)."""
    a, wl = _rand(9, 13), _rand(13, 21)
    b = _rand(21) * 3
    b[[0, 5, 16, 20]] = [np.inf, -np.inf, np.nan, -1e30]
    b[[1, 6, 17, 19]] = [-88.5, 88.5, -100.0, 3.4e38]

    def body(bb: Any, p: Any) -> Any:
        m = emit(bb, "add", emit(bb, "matmul", p[0], const(wl)), const(b))
        return emit(bb, "multiply", m, emit(bb, "sigmoid", m))

    m = a.astype(np.float64) @ wl + b
    with np.errstate(over="ignore", invalid="ignore"):
        ref = m / (1 + np.exp(-m))
    return {"a": a.shape}, body, [a], ref, 1e-4, "gemm", {}


def _gelu_epilogue() -> Case:
    """GELU (erf form, as torch.onnx exports it) after a product and its bias: the native
    epilogue (plait_gelu_sv on vectors and masked on a row's 21-column tail; c.GELU_RULE
    makes the five ops ``gelu``), with inf, -inf and NaN among the outputs, against
    float64 with math.erf."""
    a, wl = _rand(9, 13) * 2, _rand(13, 21)
    b = _rand(21) * 3
    b[[0, 5, 16]] = [np.inf, -np.inf, np.nan]
    b[[1, 6, 17, 20]] = [-4.0, 4.0, -30.0, 30.0]

    def body(bb: Any, p: Any) -> Any:
        m = emit(bb, "add", emit(bb, "matmul", p[0], const(wl)), const(b))
        d = emit(bb, "divide", m, const(np.array(1.4142135, np.float32)))
        e = emit(bb, "add", emit(bb, "erf", d), const(np.array(1.0, np.float32)))
        return emit(bb, "multiply", emit(bb, "multiply", m, e),
                    const(np.array(0.5, np.float32)))

    m = a.astype(np.float64) @ wl + b
    with np.errstate(invalid="ignore"):
        ref = 0.5 * m * (1 + np.vectorize(math.erf)(m / math.sqrt(2)))
    return {"a": a.shape}, body, [a], ref, 1e-4, "gemm", {}



def _gelu_tanh_epilogue() -> Case:
    """GELU's tanh form as GPT-2 exports it (0.5 x (1 + tanh(c (x + 0.044715 pow(x, 3))))
    after a product and its bias: the native epilogue (plait_gelu_tanh_sv, x sigmoid(2u),
    on vectors and masked on a row's 21-column tail; c.GELU_TANH_RULE makes the eight ops
    ``gelu``), with inf, -inf, NaN and the exp's saturation among the outputs, against
    float64."""
    a, wl = _rand(9, 13) * 2, _rand(13, 21)
    b = _rand(21) * 3
    b[[0, 5, 16]] = [np.inf, -np.inf, np.nan]
    b[[1, 6, 17, 20]] = [-8.0, 8.0, -60.0, 60.0]

    def f(v: float) -> Any:
        return const(np.array(v, np.float32))

    def body(bb: Any, p: Any) -> Any:
        m = emit(bb, "add", emit(bb, "matmul", p[0], const(wl)), const(b))
        k = emit(bb, "multiply", emit(bb, "power", m, f(3.0)), f(0.044715))
        t = emit(bb, "tanh", emit(bb, "multiply", emit(bb, "add", m, k), f(0.7978846)))
        return emit(bb, "multiply", emit(bb, "multiply", m, f(0.5)), emit(bb, "add", t, f(1.0)))

    m = a.astype(np.float64) @ wl + b
    with np.errstate(invalid="ignore", over="ignore"):
        ref = 0.5 * m * (1 + np.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
    return {"a": a.shape}, body, [a], ref, 1e-4, "gemm", {}

def _avg_pool() -> Case:
    """avg_pool2d (plait_pool.c's row-wise average) twice: 3x3 stride 1 padded
    (PoolFormer's; rows of 23, whole vectors and a tail) and 3x2 stride 3 with ceil_mode
    and the padding counted (the column phases), NaN propagating."""
    x = _rand(2, 3, 11, 23)
    x.reshape(-1)[::37] = np.nan

    def body(bb: Any, p: Any) -> Any:
        a = emit(bb, "avg_pool2d", p[0], pool_size=(3, 3), padding=(1, 1, 1, 1))
        b = emit(bb, "avg_pool2d", p[0], pool_size=(3, 2), strides=(1, 3),
                 padding=(0, 1, 2, 0), ceil_mode=True, count_include_pad=True)
        return emit(bb, "concat", plait.ir.Tuple([emit(bb, "reshape", a, shape=(-1,)),
                                                  emit(bb, "reshape", b, shape=(-1,))]),
                    axis=0)

    ra = avg_pool_reference(x, 11, 23, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), False)
    rb = avg_pool_reference(x, 11, 8, (3, 2), (1, 3), (1, 1), (0, 1, 2, 0), True)
    ref = np.concatenate([ra.reshape(-1), rb.reshape(-1)])
    return {"x": x.shape}, body, [x], ref, 1e-5, "pool", {}


def _global_avg() -> Case:
    """global_avg_pool2d (plait_pool.c's global average): planes of 49 floats (whole
    vectors and a tail) and of 5 (a tail only), more than 65536 floats in all so the
    planes are split over the threads."""
    x, y = _rand(1, 1400, 7, 7), _rand(2, 3, 1, 5)

    def body(bb: Any, p: Any) -> Any:
        g = emit(bb, "global_avg_pool2d", p[0])
        return emit(bb, "add", emit(bb, "reshape", g, shape=(2, 700)),
                    emit(bb, "sum", emit(bb, "global_avg_pool2d", p[1])))

    ref = (x.astype(np.float64).mean(axis=(2, 3)).reshape(2, 700)
           + y.astype(np.float64).mean(axis=(2, 3)).sum())
    return {"x": x.shape, "y": y.shape}, body, [x, y], ref, 1e-5, "pool", {}


def _silu_pad() -> Case:
    """SiLU then a zero pad (EfficientNet before a depthwise convolution): the generated
    kernel's loops are split at the pad's bounds (plait/kernel/guard_split.py), odd
    widths so every loop has a vector tail."""
    x = _rand(3, 5, 7) * 4

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "multiply", p[0], emit(bb, "sigmoid", p[0]))
        return emit(bb, "pad", y, pad_width=(0, 0, 1, 2, 2, 1))

    x64 = x.astype(np.float64)
    ref = np.pad(x64 / (1 + np.exp(-x64)), ((0, 0), (1, 2), (2, 1)))
    return {"x": x.shape}, body, [x], ref, 1e-5, "kernels", {"gemm": False}


def _int8_rows() -> Case:
    """int8 row kernels (the qrows family): quantize a float tensor, QLinearSoftmax over
    rows of 37, dequantize; exact against the dialect's reference."""
    from plait.dialects.qnn import reference as R

    x = _rand(11, 37) * 3
    f = np.float32
    sx, zx = np.asarray(0.05, f), np.asarray(128, np.uint8)
    sy, zy = np.asarray(1 / 256, f), np.asarray(0, np.uint8)

    def body(bb: Any, p: Any) -> Any:
        qx = emit(bb, "qnn.quantize", p[0], const(sx), const(zx))
        y = emit(bb, "qnn.softmax", qx, const(sx), const(zx), const(sy), const(zy), axis=-1)
        return emit(bb, "qnn.dequantize", y, const(sy), const(zy))

    qx = R.quantize(x, sx, zx, out_dtype="uint8")
    ref = R.dequantize(R.softmax(qx, sx, zx, sy, zy, axis=-1), sy, zy)
    return {"x": x.shape}, body, [x], ref, 0.0, "qrows", {}


CASES: dict[str, Callable[[], Case]] = {
    "matmul batched, K in two blocks": _matmul,
    "int8 matmul, per-column zero points and requantization": _int8_product,
    "weight-only int4 products, prefill and decode rows": _weight_only,
    "int8 conv 3x3 stride 2, per-channel zero points": _int8_conv(1),
    "int8 depthwise conv 3x3 stride 2": _int8_conv(6),
    "int8 quantize, add, mul, dequantize": _int8_elementwise,
    "int8 softmax over rows of 37": _int8_rows,
    "linear + bias + residual + relu, K 13": _linear,
    "gemv 3 rows + bias + residual, weights (N, K)": _gemv,
    "conv 5 -> 7 channels, stride 2, padding": _conv(
        (2, 5, 11, 13), (7, 5, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "conv dilation 2, asymmetric padding": _conv(
        (1, 3, 12, 10), (10, 3, 3, 3), (1, 1), (2, 1, 2, 3), (2, 2)),
    "conv 1x1 stride 2, read in place": _conv(
        (1, 6, 7, 9), (5, 6, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    # unpadded, the window wider than the stride: a phase-split copy (not gathers), and
    # with one output row (a 1-D convolution, wav2vec2's feature extractor: 64 channels
    # over 1101 frames, past the band threshold) copied whole rather than band by band
    "conv 3x3 stride 2, unpadded (phase-split copy)": _conv(
        (2, 5, 9, 13), (7, 5, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    "conv 1-D 3-wide stride 2, unpadded, 1101 frames (copied whole)": _conv(
        (1, 64, 1, 1101), (20, 64, 1, 3), (1, 2), (0, 0, 0, 0), (1, 1)),
    # output rows of 3 pixels (33 in all): two 16-pixel panels of 6 runs of neighbours
    # each (gathered, on AVX-512; fewer runs take masked loads), a last one of 1 pixel
    "conv stride 2 to 3 pixels a row": _conv(
        (1, 5, 21, 5), (7, 5, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    # a short sum (K 40): the tiles a row panel at a time across the columns (3 wide
    # tiles and 21 columns), 20 rows in 3 panels and 2 rows
    "conv 1x1, short sum, row panels across the columns": _conv(
        (1, 40, 9, 13), (20, 40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    # 14 x 14 pixels in 2 column blocks (7 and 6 panels, the last of 4 columns), the
    # weights smaller than B: the columns alone split on 2 threads
    "conv 1x1 on 14 x 14, columns split": _conv(
        (1, 30, 14, 14), (64, 30, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "conv 1x1 pointwise": _conv((1, 7, 5, 6), (9, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "conv + relu + 2x2 max pool on the tile": _conv_pool,
    # few pixels, many output channels: the rows alone are split between threads (blocks
    # of 17 and 16 panels and 4 rows: 102 + 98) and each thread packs all of the
    # im2col matrix (K 450: two blocks; stride 2)
    "conv 5 x 5 image, rows only": _conv(
        (1, 50, 5, 5), (100, 50, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), winograd=False),
    "conv stride 2 to 5 x 5, rows only": _conv(
        (1, 50, 9, 9), (100, 50, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "conv stride 2 to 7 x 7, rows only": _conv(
        (1, 50, 13, 13), (100, 50, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "conv 1x1 on 7 x 7, rows only": _conv(
        (1, 70, 7, 7), (200, 70, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    # few pixels and a sum of 400: split in two halves on 2 threads, the partial products
    # then added with the epilogue (37 rows: blocks of 19 and 18)
    "conv 1x1 on 9 x 11, K 400, the sum split in two": _conv(
        (1, 400, 9, 11), (37, 400, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    # 49 pixels in two column blocks of 2 panels, fewer output channels than pixels:
    # one column block per thread, rows not split
    "conv stride 2 to 7 x 7, columns split": _conv(
        (1, 40, 13, 13), (27, 40, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    # a padded input of more than 65536 floats is read band by band: each job of the
    # product copies the padded rows its pixels read (blocks of pixels that start and
    # end inside an output row; K blocks that start inside a channel's taps: 450 = 384
    # + 66; images of a batch; stride 2 phase-split; dilation; a 7 x 7 stride-2 stem)
    "conv read band by band, stride 2, 2 images": _conv(
        (2, 3, 151, 151), (10, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "conv read band by band, K in two blocks": _conv(
        (1, 50, 38, 37), (16, 50, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), winograd=False),
    "conv read band by band, dilation 2, asymmetric padding": _conv(
        (1, 4, 131, 127), (9, 4, 3, 3), (1, 1), (2, 1, 2, 3), (2, 2)),
    "conv read band by band, 7 x 7 stride 2": _conv(
        (1, 3, 151, 149), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    # the transposed product (pixels as rows: 49 pixels in 8 panels and a 1-row tail,
    # 320 channels in 10 wide tiles, K 864 in three blocks), chosen by shape; on two
    # threads a job of 5 tiles each
    "conv 7 x 7 image, pixels as rows": _conv(
        (1, 96, 7, 7), (320, 96, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), winograd=False),
    # 2 images, 500 channels: jobs of 8 wide tiles (256 channels) and of 244, each
    # thread packs an image's transposed im2col matrix when it takes its first job of it
    "conv 1x1 on 7 x 7, pixels as rows, 2 images": _conv(
        (2, 512, 7, 7), (500, 512, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    # K 2304: the transposed im2col matrix (124,416 floats) packed once by all threads,
    # then the product, then the transposition (three parallel calls); 300 channels
    "conv 7 x 7 image, pixels as rows, packed once for all threads": _conv(
        (1, 256, 7, 7), (300, 256, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), winograd=False),
    "winograd F(4x4), odd image": _conv(
        (1, 17, 11, 13), (18, 17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd"),
    "winograd F(2x2), odd image": _conv(
        (1, 17, 9, 15), (19, 17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd", winograd=2),
    # 224 tiles in blocks of 32: 7 blocks, the last one cut in two for 2 threads
    "winograd F(4x4), 56 x 56, 48 channels": _conv(
        (1, 48, 56, 56), (20, 48, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd"),
    # 240 tiles in blocks of 32 (15 x 16 tiles): the last 48 cut into 32 and 16
    "winograd F(2x2), 30 x 30, 70 channels": _conv(
        (1, 70, 30, 30), (71, 70, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd",
        winograd=2),
    # more output channels than (padded) tiles: the whole image's input transform is
    # shared and the output channels are split (plait_winograd.c, wino_shared_run);
    # two images, edge tiles, a last panel of 2 and 4 rows
    "winograd F(2x2), weight-heavy, channels split": _conv(
        (2, 40, 7, 9), (50, 40, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd",
        winograd=2),
    "winograd F(4x4), weight-heavy, channels split": _conv(
        (2, 24, 10, 11), (70, 24, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd"),
    # ResNet-50's 256 -> 256 on 14 x 14: 56 tiles in 4 panels, 43 row panels in 6 chunks
    "winograd F(2x2), 256 channels on 14 x 14": _conv(
        (1, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd",
        winograd=2),
    "attention, odd lengths": _attention,
    "attention, head sizes 40 and 33 (tails of 32 lanes)":
        lambda: _attention((1, 2, 7, 40), 37, 33),
    "attention with a causal mask": _masked_attention,
    "depthwise 3x3 stride 2, 19 channels, ReLU6": _grouped(
        19, (11, 13), 3, (2, 2), (1, 1), act="relu6"),
    "depthwise 3x3 stride 2, asymmetric padding, 37 columns": _grouped(
        5, (9, 37), 3, (2, 2), (1, 1), padding=(0, 1, 1, 0)),
    "depthwise 5x5 dilation 2, 5 channels": _grouped(5, (12, 9), 5, (1, 1), (2, 2)),
    "depthwise 5x5 stride 2, SiLU, 35 columns": _grouped(
        6, (17, 35), 5, (2, 2), (1, 1), act="silu"),
    "depthwise 3x3, residual, GELU, 37 columns": _grouped(
        7, (9, 37), 3, (1, 1), (1, 1), act="gelu", residual=True),
    "depthwise 3x3 on 7 x 7, 21 channels, tanh GELU (channels in lanes)": _grouped(
        21, (7, 7), 3, (1, 1), (1, 1), act="gelu_tanh"),
    "depthwise 7x7, residual and relu, 33 columns": _grouped(
        3, (10, 33), 7, (1, 1), (1, 1), residual=True),
    "depthwise 3x3 with channel multiplier 2, stride (1, 2)": _grouped(
        4, (9, 11), 3, (1, 2), (1, 1), out=8),
    "grouped 3x3, 3 channels per group, dilation (2, 1)": _grouped(
        9, (10, 12), 3, (1, 1), (2, 1), groups=3, out=6),
    # large enough for two threads: each plane's output rows in two parts (taken from
    # both ends), filled band by band (its scratch plane is past 32 KB); the others on
    # two threads too, whole planes (jobs from both ends)
    "depthwise 3x3 stride 2 on 113 x 115, residual, ReLU6, rows in parts and bands":
        _grouped(3, (113, 115), 3, (2, 2), (1, 1), padding=(0, 1, 1, 0), act="relu6",
                 residual=True),
    "grouped 3x3, 3 channels and 2 outputs per group, 40 x 41, on 2 threads": _grouped(
        9, (40, 41), 3, (1, 1), (1, 1), groups=3, out=6),
    # from 8 channels per group a product per group (plait_conv.c, plait_conv2d_desc.G):
    # a batch of 2 (each image's groups in turn), stride 2, a residual; 64 channels per
    # group (K 576: two blocks of the sum) with dilation, SiLU, on 2 threads; 48 per
    # group in 1-D with a 16-wide window and GELU
    "grouped 3x3 stride 2, 8 channels per group, residual (a product per group)": _grouped(
        16, (9, 11), 3, (2, 2), (1, 1), groups=2, residual=True, family="conv"),
    "grouped 3x3 dilation 2, 64 channels per group, SiLU, on 2 threads (a product per group)":
        _grouped(128, (12, 13), 3, (1, 1), (2, 2), groups=2, act="silu", family="conv"),
    "grouped 1-D, 48 channels per group, window 16, GELU (a product per group)":
        lambda: _grouped_1d(96, 21, 16, 2, (8, 7)),
    # 3x3 stride 1 with at least 16 channels per group: Winograd per group, F(4x4) on 20
    # x 22 (two images, a residual); F(2x2) forced on 7 x 9 with 48 outputs per group,
    # more than the 32 padded tiles: the shared-V path (wino_shared_run)
    "grouped 3x3, 32 channels per group, residual (Winograd F(4x4) per group)": _grouped(
        64, (20, 22), 3, (1, 1), (1, 1), groups=2, residual=True, family="winograd"),
    "grouped 3x3, 24 in 48 out per group (Winograd F(2x2), shared V)": _grouped(
        48, (7, 9), 3, (1, 1), (1, 1), groups=2, out=96, family="winograd", winograd=2),
    "depthwise 3x3 stride 2 to 14 x 14, 40 channels, residual, ReLU6, on 2 threads":
        _grouped(40, (28, 28), 3, (2, 2), (1, 1), act="relu6", residual=True),
    "depthwise 3x3 on 7 x 7, 160 channels, on 2 threads": _grouped(
        160, (7, 7), 3, (1, 1), (1, 1)),
    "depthwise 3x3 on 7 x 7, 37 channels, ReLU6 (channels in lanes)": _grouped(
        37, (7, 7), 3, (1, 1), (1, 1), act="relu6"),
    "depthwise 5x5 stride 2 to 7 x 7, 21 channels, residual, SiLU (channels in lanes)":
        _grouped(21, (13, 14), 5, (2, 2), (1, 1), act="silu", residual=True),
    "depthwise 7x7 on 14 x 14, 20 channels (channels in lanes with 16 lanes)": _grouped(
        20, (14, 14), 7, (1, 1), (1, 1)),
    # stride 2 with the input rows read in place: 3x3 over 75 output columns (a group of
    # 4 column blocks, then 1, the last partly past the row), no left padding; 5x5 over
    # 40 columns with 2 left, a residual and relu, on 2 threads (whole planes)
    "depthwise 3x3 stride 2 to 75 columns, no left padding (rows in place)": _grouped(
        3, (9, 150), 3, (2, 2), (1, 1), padding=(1, 0, 1, 1), act="relu6"),
    "depthwise 5x5 stride 2 to 40 columns, residual, on 2 threads (rows in place)":
        _grouped(36, (61, 81), 5, (2, 2), (1, 1), padding=(2, 2, 1, 1), residual=True),
    # stride 1 read in place: 14 columns (one block, both edges), 66 columns (4 blocks,
    # then 1) with uneven padding, 5x5 over 70 columns on 2 threads (planes past 32 KB:
    # rows in parts)
    "depthwise 3x3 on 14 x 14, 37 channels, residual, SiLU (rows in place)": _grouped(
        37, (14, 14), 3, (1, 1), (1, 1), act="silu", residual=True),
    "depthwise 3x3 to 66 columns, padding (0, 1, 2, 0) (rows in place)": _grouped(
        3, (12, 67), 3, (1, 1), (1, 1), padding=(0, 1, 2, 0)),
    "depthwise 5x5 on 125 x 70, ReLU6, uneven padding, on 2 threads (rows in place)":
        _grouped(5, (125, 70), 5, (1, 1), (1, 1), padding=(1, 2, 3, 2), act="relu6"),
    "squeeze-and-excite, 37 channels": _squeeze_excite,
    "depthwise 3x3 stride 2 (generated kernel)": _grouped(
        7, (11, 13), 3, (2, 2), (1, 1), native=False),
    "layer norm, erf and tanh GELU, SiLU (generated)": _norm_gelu,
    "max pool 3x3 stride 2 padding": _pool((2, 3, 17, 13), (3, 3), (2, 2), (1, 1),
                                          (1, 1, 1, 1)),
    "max pool dilation 2": _pool((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2)),
    "max pool stride 3, uneven padding": _pool((2, 3, 10, 23), (2, 3), (3, 3), (1, 1),
                                               (0, 2, 1, 0)),
    "generated softmax and elementwise kernels": _generated,
    "generated SiLU + pad, split at the pad's bounds": _silu_pad,
    "ReLU6 and SiLU epilogues": _activations,
    "SiLU epilogue on inf, NaN and beyond the exp's range": _silu_extremes,
    "GELU epilogue (erf form) with inf and NaN": _gelu_epilogue,
    "GELU epilogue (tanh form) with inf and NaN": _gelu_tanh_epilogue,
    "global average pooling": _global_avg,
    "average pooling, padded and strided with ceil_mode": _avg_pool,
}


class _Built(dict):  # type: ignore[type-arg]
    """Each case's executable (one library each, holding every copy the run builds:
    this CPU's under the suite's ``PLAIT_BUILD_ISAS=host``, every copy with ``all``),
    inputs, reference, tolerance and family, built when a test first asks for it (an
    xdist worker builds the cases it runs: the tests of a case on every ISA are
    adjacent).  (The copies this CPU does not run are compiled by
    tests/target/test_build_isas.py.)"""

    def __missing__(self, name: str) -> tuple[Any, list[np.ndarray], np.ndarray, float, str]:
        shapes, body, inputs, ref, tol, family, attrs = CASES[name]()
        exe = plait.build(build_graph(shapes, body), plait.Target("c", **attrs))
        self[name] = (exe, inputs, ref, tol, family)
        return self[name]


@pytest.fixture(scope="module")
def built() -> _Built:
    """The cases' executables, built once each (:class:`_Built`)."""
    return _Built()


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest) -> str:
    """An instruction set of this architecture (skipped when the CPU lacks it)."""
    supported = cpu_features()["supported"]
    if request.param not in supported:
        pytest.skip(f"this CPU does not run {request.param} (it runs {', '.join(supported)})")
    return str(request.param)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", list(CASES))
def test_each_family_matches_numpy_on_every_instruction_set(
        built: dict[str, Any], case: str, isa: str) -> None:
    """The case's family runs the copy the cap allows (as the library reports it and as
    cpu_features() predicts it) and matches numpy; where main makes several native calls
    it runs as one entry point, and the VM path (a call per kernel) gives the same bits
    (the project's models on every copy: tests/e2e/test_single_entry_models.py)."""
    exe, inputs, ref, tol, family = built[case]
    copies = arch_isas(host_arch(), FAMILIES[family].isas if family in FAMILIES else FLOAT_ISAS)
    if isa not in copies and isa not in FLOAT_ISAS:
        pytest.skip(f"family {family} has no {isa} copy (a cap with no copy of its own: "
                    "tests/codegen/test_isa_variants.py)")
    with use_isa(isa):
        vm = VirtualMachine(exe)
        assert vm.entry_point("main") in (None, "main__entry")
        got = vm["main"](*inputs)
        vm_path = VirtualMachine(exe, single_entry=False)["main"](*inputs)
        families = library_isas(exe)
        predicted = cpu_features()["families"]
    built = build_isas()   # the run's PLAIT_BUILD_ISAS (None: every copy)
    copies = tuple(i for i in copies if built is None or i in built)
    assert families[family]["built"] == list(copies)
    assert families[family]["chosen"] == chosen_copy(copies, isa)
    assert all(predicted[name]["chosen"] == f["chosen"] for name, f in families.items())
    assert got.tobytes() == vm_path.tobytes()
    if tol == 0.0:
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


DW_CASES = [name for name, make in CASES.items() if make()[5] == "dwconv"
            and "squeeze" not in name]


@pytest.mark.parametrize("lanes", ["0", "1", "2", "3"])
@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", DW_CASES)
def test_depthwise_cases_on_every_layout(built: dict[str, Any], case: str, isa: str,
                                         lanes: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """plait_dwconv.c picks per call between planes on the register tile, channels in
    the lanes (by the output's width) and, for depthwise 3x3 and 5x5 windows of stride 1
    or 2, the input rows read in place or split into a ring; PLAIT_DW_LANES=0 or 1
    forces one of the first two, 2 the rows in place and 3 the ring where they apply
    (any width; the others choose as usual), so every
    grouped and depthwise case runs each way on every copy (channels in lanes and rows
    in place apply to depthwise calls only: the grouped cases take the tile), against
    numpy with the case's tolerance."""
    exe, inputs, ref, tol, _ = built[case]
    monkeypatch.setenv("PLAIT_DW_LANES", lanes)
    with use_isa(isa):
        got = VirtualMachine(exe)["main"](*inputs)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_every_registered_family_has_a_case() -> None:
    """A kernel family added to plait.target.c.kernels is tested here on every copy:
    add a case for it to CASES."""
    covered = {make()[5] for make in CASES.values()}
    missing = sorted(set(FAMILIES) - covered)
    assert not missing, (f"kernel families {missing} have no case in "
                         "tests/target/test_kernel_variants.py (CASES): add one that runs "
                         "each on odd shapes against numpy")
