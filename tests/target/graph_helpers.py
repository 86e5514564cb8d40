"""Small builders and numpy references shared by the c target's tests (test_gemm,
test_attention, test_pool, test_kernel_variants, test_native_aarch64)."""

from __future__ import annotations

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


def conv2d_reference(x: np.ndarray, w: np.ndarray, strides: tuple[int, int] = (1, 1),
                     padding: tuple[int, int, int, int] = (0, 0, 0, 0),
                     dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    """conv2d (NCHW input, OIHW weights; padding top, left, bottom, right) in float64,
    one kernel tap at a time."""
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64),
                ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dilation[0]:i * dilation[0] + strides[0] * (oh - 1) + 1:strides[0],
                       j * dilation[1]:j * dilation[1] + strides[1] * (ow - 1) + 1:strides[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out


def max_pool_reference(x: np.ndarray, k: tuple[int, int], s: tuple[int, int],
                       d: tuple[int, int], p: tuple[int, int, int, int]) -> np.ndarray:
    """Max pooling by brute force over the padded input (padding is -inf: never wins; a
    NaN in a window wins, as in numpy's maximum)."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + p[0] + p[2], w + p[1] + p[3]), -np.inf, np.float32)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh = (h + p[0] + p[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + p[1] + p[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full((n, c, oh, ow), -np.inf, np.float32)
    for i in range(k[0]):
        for j in range(k[1]):
            win = xp[:, :, i * d[0]:i * d[0] + (oh - 1) * s[0] + 1:s[0],
                     j * d[1]:j * d[1] + (ow - 1) * s[1] + 1:s[1]]
            out = np.where(np.isnan(win) | (win > out), win, out)
    return out


def avg_pool_reference(x: np.ndarray, oh: int, ow: int, k: tuple[int, int],
                       s: tuple[int, int], d: tuple[int, int], p: tuple[int, int, int, int],
                       count_pad: bool) -> np.ndarray:
    """Average pooling by brute force, in float64, to ``oh`` x ``ow`` outputs: each the
    sum of its window's taps inside the input over the count of its taps inside the
    input (``count_pad``: inside the input and its padding, top, left, bottom, right)."""
    n, c, h, w = x.shape
    lo_r, hi_r = (-p[0], h + p[2]) if count_pad else (0, h)
    lo_c, hi_c = (-p[1], w + p[3]) if count_pad else (0, w)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = [i * s[0] + a * d[0] - p[0] for a in range(k[0])]
            cols = [j * s[1] + b * d[1] - p[1] for b in range(k[1])]
            count = sum(lo_r <= r < hi_r for r in rows) * sum(lo_c <= q < hi_c for q in cols)
            total = np.zeros((n, c))
            for r in rows:
                for q in cols:
                    if 0 <= r < h and 0 <= q < w:
                        total = total + x[:, :, r, q].astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[:, :, i, j] = total / count
    return out
