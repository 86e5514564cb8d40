"""BLAS-backed library functions: ``blas.matmul``, ``blas.linear`` and ``blas.conv2d``.

numpy's ``matmul`` calls the BLAS it was built with (OpenBLAS, MKL, Accelerate) for
float32/float64 matrices; these functions are thin destination-passing wrappers that
compute straight into the output (no temporary result), and ``conv2d`` is im2col plus
one batched matrix product per group.  The ``c`` target's dispatch pass sends those
three ops here; everything else becomes generated kernels.

Like every packed function they are called as ``fn(*inputs, *outputs, **attrs)``; the
``@alloc`` forms (``fn(*inputs, **attrs) -> result``) serve results whose shape is only
known at run time.  numpy only: part of the runtime.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import numpy_ops
from .packed import has_func, register_func
from .window import expand_ints, expand_padding

OPS = ("matmul", "linear", "conv2d")
"""The ops with a BLAS-backed function here."""


def _out(name: str, out: Any, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"blas.{name}: the output must be a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"blas.{name}: output has shape {out.shape}, but the result has shape "
                         f"{shape}")
    return out


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """``out = x @ y`` (numpy matmul semantics) computed into ``out``."""
    numpy_ops.matmul_into(x, y, _out("matmul", out, _matmul_shape(x.shape, y.shape)))


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    sa = (1,) + a if len(a) == 1 else a
    sb = b + (1,) if len(b) == 1 else b
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    return batch + (sa[-2],) * (len(a) > 1) + (sb[-1],) * (len(b) > 1)


def linear(x: np.ndarray, weight: np.ndarray, *rest: np.ndarray) -> None:
    """``out = x @ weight.T (+ bias)``: called as ``(x, weight, out)`` or ``(x, weight,
    bias, out)``."""
    if len(rest) not in (1, 2):
        raise TypeError(f"blas.linear: expected (x, weight, [bias,] out), got {2 + len(rest)} "
                        "arrays")
    out = _out("linear", rest[-1], x.shape[:-1] + (weight.shape[0],))
    numpy_ops.matmul_into(x, weight.T, out)
    if len(rest) == 2:
        np.add(out, rest[0], out=out)


def _conv2d_nchw(x: np.ndarray, w: np.ndarray, out: np.ndarray, strides: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], groups: int) -> None:
    """NCHW data, OIHW weight: im2col, then ``(O/g, C/g*KH*KW) @ (N, C/g*KH*KW, P)``
    per group, written into ``out`` viewed as (N, O, P)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh, ow = out.shape[2:]
    out3 = out.reshape(n, o, oh * ow)
    og = o // groups
    pointwise = kh == kw == 1 and sh == sw == 1 and not any(padding)
    if not pointwise and any(padding):
        xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), x.dtype)
        xp[:, :, pt:pt + h, pl:pl + wd] = x
    else:
        xp = x
    k = cg * kh * kw
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        if pointwise:
            cols = xg.reshape(n, cg, h * wd)
        else:
            cols = _im2col(xg, kh, kw, oh, ow, sh, sw, dh, dw).reshape(n, k, oh * ow)
        wm = w[g * og:(g + 1) * og].reshape(og, k)
        if groups == 1:
            np.matmul(wm, cols, out=out3)
        else:
            np.matmul(wm, cols, out=out3[:, g * og:(g + 1) * og])


_SCRATCH = threading.local()


def _scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized array of ``shape`` in this thread's scratch buffer, which grows
    to the largest im2col matrix asked for and is reused by every later call (a fresh
    multi-megabyte ``np.empty`` per convolution costs its page faults each time).  The
    result is only valid until the next call in the same thread."""
    nbytes = math.prod(shape) * dtype.itemsize
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _SCRATCH.buf = np.empty(nbytes, np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def _im2col(x: np.ndarray, kh: int, kw: int, oh: int, ow: int, sh: int, sw: int, dh: int,
            dw: int) -> np.ndarray:
    """The (N, C, KH, KW, OH, OW) patches of the (already padded) ``x``, contiguous, in
    the thread's scratch buffer (valid until the next ``_im2col`` in this thread)."""
    win = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]
    cols = _scratch((*x.shape[:2], kh, kw, oh, ow), x.dtype)
    np.copyto(cols, win.transpose(0, 1, 4, 5, 2, 3))
    return cols


def conv2d(data: np.ndarray, weight: np.ndarray, out: np.ndarray, *,
           strides: Any = (1, 1), padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1),
           groups: int = 1, data_layout: str = "NCHW", kernel_layout: str = "OIHW") -> None:
    """2-D convolution (the ``conv2d`` op's attributes) by im2col and BLAS matrix
    products, computed into ``out``.  Other layouts are transposed to NCHW/OIHW."""
    x = data if data_layout == "NCHW" else data.transpose(0, 3, 1, 2)
    w = weight if kernel_layout == "OIHW" else weight.transpose(3, 2, 0, 1)
    s = expand_ints(strides, 2)
    p = expand_padding(padding, 2)
    d = expand_ints(dilation, 2)
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = (h + p[0] + p[2] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + p[1] + p[3] - d[1] * (kw - 1) - 1) // s[1] + 1
    nchw = (n, o, oh, ow)
    _out("conv2d", out, nchw if data_layout == "NCHW" else (n, oh, ow, o))
    if data_layout == "NCHW" and out.flags.c_contiguous:
        _conv2d_nchw(x, w, out, s, p, d, groups)
        return
    tmp = np.empty(nchw, out.dtype)
    _conv2d_nchw(x, w, tmp, s, p, d, groups)
    out[...] = tmp.transpose(0, 2, 3, 1) if data_layout == "NHWC" else tmp


def _alloc(name: str) -> Any:
    """The value-returning form of op ``name`` (the numpy reference, which is BLAS-backed
    too), for results of run-time shape."""
    return numpy_ops.IMPLS[name]


for _name, _fn in (("matmul", matmul), ("linear", linear), ("conv2d", conv2d)):
    if not has_func(f"blas.{_name}"):
        register_func(f"blas.{_name}", _fn)
        register_func(f"blas.{_name}@alloc", _alloc(_name))

__all__ = ["OPS", "conv2d", "linear", "matmul"]
