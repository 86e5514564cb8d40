"""The ``c`` target's int8 kernels: weight packing and call records.

Four kernel families (copies for AVX512-VNNI, AVX512, AVX-VNNI, AVX2 and the baseline,
one chosen at load time), declared in ``plait_int8.h``: ``qgemm`` (``plait_qgemm.c``)
computes 8-bit products with int32 accumulation and a fused output stage:
``out((A - za) @ (B - zb) +
bias)`` where ``out`` keeps int32, requantizes to uint8/int8 (the multiplier per
column or one, the output zero point, round half to even, saturation) or scales to
float32 (plus a float bias, relu); ``qconv`` (``plait_qconv.c``) runs convolutions as
the transposed product (``plait_qconv2d``: the weights times panels of the padded
image) on the same register tile and output stage (``plait_qtile.h``), depthwise
convolutions on a kernel of their own; ``qelementwise`` (``plait_qelementwise.c``)
QLinearAdd, QLinearMul, QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
a 256-entry table lookup (call record in :mod:`.lookup`);
``qrows`` (``plait_qrows.c``, call records in :mod:`.rows`) QLinearSoftmax and the
layer normalization between quantized tensors.

This module knows no op: a dispatch pass (a dialect's, say) decides what a call
computes and describes it with :class:`QGemmCall` or :class:`QDepthwiseCall`; this
module packs constant weights at compile time (:func:`pack_b`,
:func:`pack_conv_weights`: the panels the dot products stream, with the zero points and
sums the zero-point correction needs) and writes the call's C wrapper (recorded with
:func:`plait.target.c.kernels.registry.record_calls`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.deferred import deferred_constant
from plait.ir.expr import Constant, Expr

from ..registry import KernelFamily, register_family
from ..wrapper import DESC, Buffer, Local, NativeCall, Ref, Struct, emit_call

QNR = 16
"""The columns of a packed B panel (``PLAIT_Q_NR``)."""

OUT_KINDS = {"int32": "PLAIT_Q_OUT_I32", "uint8": "PLAIT_Q_OUT_U8", "int8": "PLAIT_Q_OUT_S8",
             "float32": "PLAIT_Q_OUT_F32"}
"""The output dtypes of the kernels and their C names."""


def shifted(b: np.ndarray) -> np.ndarray:
    """An 8-bit ``b`` as the int32 values the kernels multiply: int8 as it is, uint8
    minus 128 (its zero point is shifted the same way, which keeps ``b - zb``)."""
    b = np.asarray(b)
    return b.astype(np.int32) - (128 if b.dtype == np.uint8 else 0)


def _check_8bit(b: np.ndarray, what: str) -> np.ndarray:
    b = np.asarray(b)
    if b.dtype not in (np.uint8, np.int8):
        raise ValueError(f"{what}: the weights must be uint8 or int8, got {b.dtype} {b.shape}")
    return b


def _put_shifted(dst: np.ndarray, src: np.ndarray) -> None:
    """Write the 8-bit ``src`` into the int8 ``dst`` as the kernels read it: int8 as it
    is, uint8 minus 128 (the same bits with the top one flipped); no wider copy."""
    dst[...] = src.view(np.int8)
    if src.dtype == np.uint8:
        np.bitwise_xor(dst, np.int8(-128), out=dst)


def _unshifted(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The inverse of :func:`_put_shifted`: the int8 ``a`` (a copy is made) as ``dtype``."""
    out = np.array(a, np.int8, order="C")
    if dtype == np.uint8:
        np.bitwise_xor(out, np.int8(-128), out=out)
    return out.view(dtype)


PAIR_LIMIT = 128
"""The most that the positive (or negative) weights of a pair of channels may sum to for
``vpmaddubsw`` (uint8 x int8 pairs summed with int16 saturation) to be exact on any image
byte: 255 * 128 = 32640 <= 32767."""

CLAMP_SHARE = 64
"""Weights are clamped into safe pairs (:func:`pack_conv_rows`) only when the corrections
are at most one per this many weights; past it the rows stay as they are (mode 0)."""


def b_panels_size(k: int, n: int, corrections: int = 0) -> int:
    """The int8 elements of :func:`pack_b_panels`'s result for a ``K x N`` matrix: the
    panels, then the tail (mode and count, then 12 bytes per correction)."""
    return -(-n // QNR) * QNR * (-(-k // 4) * 4) + 8 + 12 * max(corrections, 0)


_PANEL_BLOCK = 64
"""Panels :func:`pack_b_panels` fills at a time (its transient is that many columns)."""


def _b_unsafe(b: np.ndarray) -> np.ndarray:
    """The pairs of K values (rows 2i, 2i+1 of a column, K padded with 0 to even) of the
    8-bit ``K x N`` ``b``, shifted to int8, past :data:`PAIR_LIMIT` (boolean ``K/2 x
    N``)."""
    k, n = b.shape
    s = np.zeros((k + k % 2, n), np.int16)
    s[:k] = b.astype(np.int16) - (128 if b.dtype == np.uint8 else 0)
    pairs = s.reshape(-1, 2, n)
    pos = np.maximum(pairs, 0).sum(axis=1)
    neg = np.minimum(pairs, 0).sum(axis=1)
    return (pos > PAIR_LIMIT) | (neg < -PAIR_LIMIT)


def b_corrections(b: np.ndarray) -> int:
    """The corrections :func:`pack_b_panels` records for ``b`` (-1: mode 0, none)."""
    b = _check_8bit(b, "pack_b")
    n = int(_b_unsafe(b).sum())
    return n if n * CLAMP_SHARE <= max(b.size, 1) else -1


def pack_b_panels(b: np.ndarray) -> np.ndarray:
    """The int8 panels ``[ceil(N/16)][Kp/4][16][4]`` of the ``K x N`` 8-bit matrix ``b``
    (Kp: K rounded up to 4; zero-padded; uint8 shifted to int8), flat: what
    ``plait_qgemm`` streams, written a block of panels at a time; then a tail of int32
    values: the mode, the count of corrections and the corrections (column, k,
    residual), sorted by column.  Mode 1 (as :func:`pack_conv_rows`'): in each pair of
    a column's K values (rows 2i, 2i+1) whose positive or negative values sum past 128,
    the second keeps what the limit leaves and the rest is a correction the kernel adds
    to the sums (the residual times A's byte); with more than one correction in
    :data:`CLAMP_SHARE` values, mode 0: the panels as they are."""
    b = _check_8bit(b, "pack_b")
    if b.ndim != 2:
        raise ValueError(f"pack_b: b must be a matrix, got shape {b.shape}")
    k, n = b.shape
    kp, npan = -(-k // 4) * 4, -(-n // QNR)
    out = np.zeros((npan, kp // 4, QNR, 4), np.int8)
    for p0 in range(0, npan, _PANEL_BLOCK):
        p1 = min(npan, p0 + _PANEL_BLOCK)
        c0, c1 = p0 * QNR, min(n, p1 * QNR)
        blk = np.zeros((kp, (p1 - p0) * QNR), np.int8)
        _put_shifted(blk[:k, :c1 - c0], b[:, c0:c1])
        out[p0:p1] = blk.reshape(kp // 4, 4, p1 - p0, QNR).transpose(2, 0, 3, 1)
    unsafe = _b_unsafe(b)
    count = int(unsafe.sum())
    mode = 1 if count * CLAMP_SHARE <= max(b.size, 1) else 0
    tail = [np.array([mode, count if mode else 0], np.int32)]
    if mode and count:
        col, i = np.nonzero(unsafe.T)    # by column, then k
        k0, k1 = 2 * i, 2 * i + 1
        first = out[col // QNR, k0 // 4, col % QNR, k0 % 4].astype(np.int32)
        second = out[col // QNR, k1 // 4, col % QNR, k1 % 4].astype(np.int32)
        keep = np.where(first + second > 0, PAIR_LIMIT - first, -PAIR_LIMIT - first)
        out[col // QNR, k1 // 4, col % QNR, k1 % 4] = keep.astype(np.int8)
        tail.append(np.stack([col, k1, second - keep], axis=1).astype(np.int32).reshape(-1))
    return np.concatenate([out.reshape(-1), np.concatenate(tail).view(np.int8)])


def unpack_b_panels(panels: np.ndarray, k: int, n: int, dtype: Any) -> np.ndarray:
    """The ``K x N`` matrix of ``dtype`` (uint8 or int8) :func:`pack_b_panels` packed
    into ``panels``, bit for bit (its corrections added back)."""
    kp, npan = -(-k // 4) * 4, -(-n // QNR)
    size = npan * QNR * kp
    panels = np.asarray(panels, np.int8)
    tail = panels[size:].copy().view(np.int32)
    full = panels[:size].reshape(npan, kp // 4, QNR, 4).transpose(1, 3, 0, 2).reshape(
        kp, npan * QNR).copy()
    if tail[0] == 1 and tail[1]:
        col, kk, res = tail[2:2 + 3 * int(tail[1])].reshape(-1, 3).T
        full[kk, col] = (full[kk, col].astype(np.int32) + res).astype(np.int8)
    return _unshifted(full[:k, :n], np.dtype(dtype))


def b_terms(b: np.ndarray, zb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shifted zero points ``zb'[n]`` of the ``K x N`` 8-bit ``b`` (``zb`` one, or
    one per column) and its column terms ``colsum(B'[:, n]) - K * zb'[n]`` (int32,
    modulo 2^32), each zero-padded to whole panels."""
    b = _check_8bit(b, "pack_b")
    k, n = b.shape
    shift = 128 if b.dtype == np.uint8 else 0
    zbs = np.broadcast_to(np.asarray(zb).astype(np.int64).reshape(-1), (n,)) - shift
    colsum = b.sum(axis=0, dtype=np.int64) - shift * k
    corr = ((colsum - k * zbs) % (1 << 32)).astype(np.uint32).view(np.int32)
    width = -(-n // QNR) * QNR
    zpad = np.zeros(width, np.int32)
    zpad[:n] = zbs.astype(np.int32)
    cpad = np.zeros(width, np.int32)
    cpad[:n] = corr
    return zpad, cpad


def pack_b(b: np.ndarray, zb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``K x N`` 8-bit matrix ``b`` with zero point ``zb`` (one, or one per column)
    packed for ``plait_qgemm``: the int8 panels ``[ceil(N/16)][Kp/4][16][4]`` (Kp: K
    rounded up to 4, zero-padded), the shifted zero points ``zb'[n]`` and the column
    terms ``colsum(B'[:, n]) - K * zb'[n]`` (int32, modulo 2^32)."""
    return (pack_b_panels(b), *b_terms(b, zb))


def packed_b_constants(b: np.ndarray, zb: np.ndarray) -> tuple[Constant, Constant, Constant]:
    """The constants of :func:`pack_b`: the panels computed when code generation first
    reads them (:mod:`plait.ir.deferred`: the pipeline holds ``b`` only, and ``b`` goes
    once packed if nothing else holds it; the kept graph unpacks it bit for bit), the
    zero points and column terms (a few bytes per column) at once."""
    b = _check_8bit(b, "pack_b")
    k, n = (int(d) for d in b.shape)
    dtype = b.dtype
    zp, corr = b_terms(b, zb)

    def inverse(p: np.ndarray) -> np.ndarray:
        return unpack_b_panels(p, k, n, dtype)

    panels = deferred_constant(b, pack_b_panels, (b_panels_size(k, n, b_corrections(b)),),
                               np.int8, inverse=inverse)
    return panels, Constant(zp), Constant(corr)


CONV_ROWS = 12
"""Packed convolution weights come in blocks of this many rows (output channels),
interleaved (every copy's tile height divides it: 6, 4, 3)."""


def _conv_layout(shape: tuple[int, ...], conv_groups: int = 1) -> tuple[int, int]:
    """(Kp = ceil(C / 4) * 4 * KH * KW, packed rows) of the packed weights of ``O x C x
    KH x KW`` (C: a group's channels): each convolution group's rows (``conv_groups`` >
    1) padded to a multiple of :data:`CONV_ROWS`, so every tile lies in one block of
    rows."""
    o, c, kh, kw = shape
    og = o // max(conv_groups, 1)
    return -(-c // 4) * 4 * kh * kw, max(conv_groups, 1) * -(-og // CONV_ROWS) * CONV_ROWS


def _row_index(o: int, conv_groups: int) -> np.ndarray:
    """The packed row of each of the ``o`` output channels (a group's rows start at a
    multiple of :data:`CONV_ROWS`)."""
    og = o // max(conv_groups, 1)
    ogp = -(-og // CONV_ROWS) * CONV_ROWS
    r = np.arange(o)
    return (r // og) * ogp + r % og


def _conv_matrix(w: np.ndarray, conv_groups: int) -> tuple[np.ndarray, int, int]:
    """(the packed rows' matrix ``rows x Kp`` of ``O x C x KH x KW`` 8-bit weights, not
    interleaved yet, Kp, rows): shifted to int8, K in the order (j, kh, kw, channel
    4j..4j+3), zero-padded."""
    o, c, kh, kw = w.shape
    kp, rows = _conv_layout(w.shape, conv_groups)
    cb = -(-c // 4)
    full = np.zeros((o, cb * 4, kh, kw), np.int8)
    _put_shifted(full[:, :c], w)
    flat = np.zeros((rows, kp), np.int8)
    flat[_row_index(o, conv_groups)] = full.reshape(o, cb, 4, kh, kw).transpose(
        0, 1, 3, 4, 2).reshape(o, kp)
    return flat, kp, rows


def _unsafe_pairs(flat: np.ndarray) -> np.ndarray:
    """The pairs (bytes 2i, 2i+1 of a row: two channels of one tap) of the int8 matrix
    ``flat`` whose positive or negative weights sum past :data:`PAIR_LIMIT` (a boolean
    ``rows x Kp/2``)."""
    pairs = flat.reshape(flat.shape[0], -1, 2).astype(np.int16)
    pos = np.maximum(pairs, 0).sum(axis=2)
    neg = np.minimum(pairs, 0).sum(axis=2)
    return (pos > PAIR_LIMIT) | (neg < -PAIR_LIMIT)


def conv_corrections(w: np.ndarray, conv_groups: int = 1) -> int:
    """The corrections :func:`pack_conv_rows` records for ``w`` (-1: none, the rows
    unclamped, mode 0)."""
    flat, kp, rows = _conv_matrix(_check_8bit(w, "pack_conv_weights"), conv_groups)
    n = int(_unsafe_pairs(flat).sum())
    return n if n * CLAMP_SHARE <= max(w.size, 1) else -1


def conv_rows_size(shape: tuple[int, ...], conv_groups: int, corrections: int) -> int:
    """The int8 elements of :func:`pack_conv_rows`'s result: the rows, then the tail
    (mode and count, then 12 bytes per correction)."""
    kp, rows = _conv_layout(shape, conv_groups)
    return rows * kp + 8 + 12 * max(corrections, 0)


def pack_conv_rows(w: np.ndarray, conv_groups: int = 1) -> np.ndarray:
    """The int8 rows of ``O x C x KH x KW`` 8-bit weights as ``plait_qconv2d`` reads
    them (uint8 shifted): K in the order (j, kh, kw, channel 4j..4j+3), the channels
    zero-padded to a multiple of 4; each convolution group's rows zero-padded to a
    multiple of :data:`CONV_ROWS`; blocks of 12 rows interleaved by 4 bytes
    (``[rows / 12][Kp / 4][12][4]``: a tile's rows at one group of 4 taps side by
    side), flat; then a tail of int32 values: the mode, the count of corrections and
    the corrections (packed row, k, residual), sorted by row.

    Mode 1: every pair of channels of a tap (bytes 2i, 2i+1 of a row) is safe for
    ``vpmaddubsw`` (:data:`PAIR_LIMIT`): in a pair whose positive (negative) weights
    sum past 128 (-128), the second weight keeps only what the limit leaves, and the
    rest is a correction that the kernel adds to the sums after the product (the
    residual times the image's byte, exact modulo 2^32 as every sum).  Real models have
    about one such pair in 10,000 weights; with more than one in :data:`CLAMP_SHARE`
    (uniform random weights) the rows stay as they are (mode 0, no corrections) and
    the AVX2 copy widens to int16 instead."""
    w = _check_8bit(w, "pack_conv_weights")
    flat, kp, rows = _conv_matrix(w, conv_groups)
    unsafe = _unsafe_pairs(flat)
    n = int(unsafe.sum())
    mode = 1 if n * CLAMP_SHARE <= max(w.size, 1) else 0
    tail = [np.array([mode, n if mode else 0], np.int32)]
    if mode and n:
        r, i = np.nonzero(unsafe)
        a = flat[r, 2 * i].astype(np.int32)
        b = flat[r, 2 * i + 1].astype(np.int32)
        keep = np.where(a + b > 0, PAIR_LIMIT - a, -PAIR_LIMIT - a)
        flat[r, 2 * i + 1] = keep.astype(np.int8)
        tail.append(np.stack([r, 2 * i + 1, b - keep], axis=1).astype(np.int32).reshape(-1))
    body = flat.reshape(rows // CONV_ROWS, CONV_ROWS, kp // 4, 4).transpose(0, 2, 1, 3)
    return np.concatenate([body.reshape(-1), np.concatenate(tail).view(np.int8)])


def unpack_conv_rows(packed: np.ndarray, shape: tuple[int, ...], dtype: Any,
                     conv_groups: int = 1) -> np.ndarray:
    """The weights of ``shape`` and ``dtype`` :func:`pack_conv_rows` packed, bit for bit
    (its corrections added back)."""
    o, c, kh, kw = shape
    kp, rows = _conv_layout(shape, conv_groups)
    packed = np.asarray(packed, np.int8)
    tail = packed[rows * kp:].copy().view(np.int32)
    flat = packed[:rows * kp].reshape(rows // CONV_ROWS, kp // 4, CONV_ROWS, 4).transpose(
        0, 2, 1, 3).reshape(rows, kp).copy()
    if tail[0] == 1 and tail[1]:
        r, k, res = tail[2:2 + 3 * int(tail[1])].reshape(-1, 3).T
        flat[r, k] = (flat[r, k].astype(np.int32) + res).astype(np.int8)
    flat = flat[_row_index(o, conv_groups)]
    cb = -(-c // 4)
    full = flat.reshape(o, cb, kh, kw, 4).transpose(0, 1, 4, 2, 3).reshape(o, cb * 4, kh, kw)
    return _unshifted(full[:, :c], np.dtype(dtype))


def conv_terms(w: np.ndarray, zw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shifted zero points ``zw'[o]`` and row terms ``rowsum(W'[o]) - K * zw'[o]``
    (int32 modulo 2^32) of ``O x ...`` 8-bit weights, one per output channel (the
    channels :func:`pack_conv_rows` pads with add nothing: their weights are 0 and the
    image's column sums leave them out)."""
    w = _check_8bit(w, "pack_conv_weights")
    o = w.shape[0]
    zp, corr = b_terms(w.reshape(o, -1).T, zw)
    return np.ascontiguousarray(zp[:o]), np.ascontiguousarray(corr[:o])


def pack_conv_weights(w: np.ndarray, zw: np.ndarray, conv_groups: int = 1
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``O x C x KH x KW`` 8-bit weights with zero point ``zw`` (one or per output
    channel; a grouped convolution's ``C`` its channels per group) packed for
    ``plait_qconv2d``: the rows of :func:`pack_conv_rows`, the shifted zero points
    ``zw'[o]`` and ``rowsum(W'[o]) - K * zw'[o]`` (int32 modulo 2^32)."""
    return (pack_conv_rows(w, conv_groups), *conv_terms(w, zw))


def packed_conv_constants(w: np.ndarray, zw: np.ndarray, conv_groups: int = 1
                          ) -> tuple[Constant, Constant, Constant]:
    """The constants of :func:`pack_conv_weights`, the rows computed when first read
    (as :func:`packed_b_constants`'s panels; the kept graph unpacks ``w``)."""
    w = _check_8bit(w, "pack_conv_weights")
    shape, dtype = tuple(int(d) for d in w.shape), w.dtype
    zp, corr = conv_terms(w, np.array(zw))
    size = conv_rows_size(shape, conv_groups, conv_corrections(w, conv_groups))

    def make(src: np.ndarray) -> np.ndarray:
        return pack_conv_rows(src, conv_groups)

    def inverse(p: np.ndarray) -> np.ndarray:
        return unpack_conv_rows(p, shape, dtype, conv_groups)

    packed = deferred_constant(w, make, (size,), np.int8, inverse=inverse)
    return packed, Constant(zp), Constant(corr)


def centered_depthwise(w: np.ndarray, zw: np.ndarray) -> np.ndarray:
    """Depthwise weights ``C x 1 x KH x KW`` minus their zero point (one or per
    channel) as int32 ``[C][KH][KW]``, what ``plait_qconv2d_depthwise`` reads."""
    w = np.asarray(w)
    z = np.asarray(zw).astype(np.int32).reshape(-1)
    c = w.shape[0]
    z = np.broadcast_to(z, (c,))
    return np.ascontiguousarray((w.astype(np.int32) - z.reshape(-1, 1, 1, 1))[:, 0])


def centered_depthwise_constant(w: np.ndarray, zw: np.ndarray) -> Constant:
    """The constant of :func:`centered_depthwise` (int32: four times the weights),
    computed when first read; the kept graph adds the zero point back, bit for bit."""
    w = _check_8bit(w, "centered_depthwise")
    c, _, kh, kw = (int(d) for d in w.shape)
    dtype = w.dtype
    zw = np.array(zw)
    z = np.broadcast_to(zw.astype(np.int32).reshape(-1), (c,)).reshape(c, 1, 1)

    def make(src: np.ndarray) -> np.ndarray:
        return centered_depthwise(src, zw)

    def inverse(p: np.ndarray) -> np.ndarray:
        return (p + z).astype(dtype).reshape(c, 1, kh, kw)

    return deferred_constant(w, make, (c, kh, kw), np.int32, inverse=inverse)


@dataclass
class QOut:
    """The output stage of a call: ``dtype`` (int32, uint8, int8, float32), the int32
    ``bias`` per column, the ``scale`` (a multiplier, per column when it has ``N``
    values), the output zero point ``zo``, the float ``fbias`` per column, ``relu``;
    for an 8-bit output, a QLinearAdd of a constant per column after it: ``add_kind``
    (0: none, 1, 2 or 3 as ``plait_q_out``'s), the float32 ``add_c`` (one value, or
    per column with ``add_cols``), ``add_r``, ``add_r2``, ``add_fixed`` (kind 3: the
    float bias between ``fz1``/``fs1`` and ``fz2``/``fs2``); then a QLinearAdd
    of an 8-bit tensor of the output's shape, ``add2_kind`` (0: none, 1 or 2),
    ``add2_t``, ``add2_r``, ``add2_rt``, ``add2_fixed``."""

    dtype: str = "int32"
    bias: Expr | None = None
    scale: Expr | None = None
    scale_cols: bool = False
    zo: int = 0
    fbias: Expr | None = None
    relu: bool = False
    add_kind: int = 0
    add_c: Expr | None = None
    add_cols: bool = False
    add_r: float = 0.0
    add_r2: float = 0.0
    add_fixed: float = 0.0
    fz1: int = 0
    fs1: float = 0.0
    fz2: int = 0
    fs2: float = 0.0
    add2_kind: int = 0
    add2_t: Expr | None = None
    add2_r: float = 0.0
    add2_rt: float = 0.0
    add2_fixed: float = 0.0


Wrapper = tuple[str, str, CFunction, list[Expr]]
"""A call's wrapper: (symbol, C code, CFunction, the call's arguments in order)."""


@dataclass
class _Operands:
    """The buffers of a wrapper being described, with the expressions they are bound to
    (in parameter order)."""

    buffers: list[Buffer] = field(default_factory=list)
    exprs: list[Expr] = field(default_factory=list)

    def add(self, name: str, e: Expr) -> Ref:
        ty = e.ty
        shape = tuple(int(d) for d in ty.shape)  # type: ignore[union-attr]
        self.buffers.append(Buffer(name, shape, ty.dtype))  # type: ignore[union-attr]
        self.exprs.append(e)
        return Ref(name)

    def out_stage(self, o: QOut) -> Struct:
        """The ``plait_q_out`` initializer of ``o`` (its buffers added)."""
        fields: list[tuple[str, Any]] = [("kind", Ref(OUT_KINDS[o.dtype]))]
        if o.bias is not None:
            fields.append(("bias", self.add("bias", o.bias)))
        if o.scale is not None:
            fields += [("scale", self.add("scale", o.scale)), ("scale_cols", int(o.scale_cols))]
        if o.fbias is not None:
            fields.append(("fbias", self.add("fbias", o.fbias)))
        fields += [("zo", int(o.zo)), ("relu", int(o.relu))]
        if o.add_kind:
            assert o.add_c is not None
            fields += [("add_kind", int(o.add_kind)), ("add_c", self.add("addc", o.add_c)),
                       ("add_cols", int(o.add_cols)), ("add_r", float(o.add_r)),
                       ("add_r2", float(o.add_r2)), ("add_fixed", float(o.add_fixed))]
            if o.add_kind == 3:
                fields += [("fz1", int(o.fz1)), ("fs1", float(o.fs1)), ("fz2", int(o.fz2)),
                           ("fs2", float(o.fs2))]
        if o.add2_kind:
            assert o.add2_t is not None
            fields += [("add2_kind", int(o.add2_kind)), ("add2_t", self.add("addt", o.add2_t)),
                       ("add2_r", float(o.add2_r)), ("add2_rt", float(o.add2_rt)),
                       ("add2_fixed", float(o.add2_fixed))]
        return Struct(tuple(fields))

    def finish(self, kind: str, entry: str, args: tuple[Any, ...], desc_type: str | None,
               desc: Sequence[tuple[str, Any]], out_shape: tuple[int, ...], out_dtype: str,
               locals_: tuple[Local, ...] = ()) -> Wrapper:
        call = NativeCall(kind, entry, (*self.buffers, Buffer("out", out_shape, out_dtype,
                                                              out=True)),
                          args, desc_type, tuple(desc), guard=False, locals=locals_)
        name, code, fn = emit_call(call)
        return name, code, fn, list(self.exprs)


def _signed(e: Expr) -> int:
    return int(e.ty.dtype == "int8")  # type: ignore[union-attr]


@dataclass
class QGemmCall:
    """A call of ``plait_qgemm``: ``a`` (8-bit, ``batch x M x K`` in row-major order),
    its zero point ``za`` (one value, or one per row with ``za_rows``), B
    either ``packed`` (the three constants of :func:`packed_b_constants`) or the 8-bit tensor ``b``
    (``batch x K x N``, or one ``K x N`` for all: ``b_batched``) with zero point ``zb``
    (``zb_cols``: per column); ``out`` its output stage; the output ``batch x M x N``."""

    M: int
    N: int
    K: int
    batch: int
    a: Expr
    za: Expr
    out: QOut
    out_shape: tuple[int, ...]
    za_rows: bool = False
    packed: tuple[Constant, Constant, Constant] | None = None
    b: Expr | None = None
    zb: Expr | None = None
    zb_cols: bool = False
    b_batched: bool = False

    def wrapper(self) -> Wrapper:
        """(symbol, C code, CFunction, the call's arguments in order)."""
        w = _Operands()
        m, n, k = self.M, self.N, self.K
        desc: list[tuple[str, Any]] = [
            ("M", m), ("N", n), ("K", k), ("batch", self.batch), ("a", w.add("a", self.a)),
            ("a_signed", _signed(self.a)), ("lda_r", k), ("lda_c", 1), ("a_bs", m * k),
            ("ldc_r", n), ("ldc_c", 1), ("c_bs", m * n), ("za", w.add("za", self.za)),
            ("za_rows", int(self.za_rows))]
        if self.packed is not None:
            bp, zbp, corr = self.packed
            desc += [("bp", w.add("bp", bp)), ("b_zp", w.add("bzp", zbp)),
                     ("b_corr", w.add("bcorr", corr))]
        else:
            assert self.b is not None and self.zb is not None
            desc += [("b", w.add("b", self.b)), ("b_signed", _signed(self.b)), ("ldb_r", n),
                     ("ldb_c", 1), ("b_bs", k * n if self.b_batched else 0),
                     ("zb", w.add("zb", self.zb)), ("zb_cols", int(self.zb_cols))]
        desc += [("out", w.out_stage(self.out)), ("c", Ref("out"))]
        return w.finish("qgemm", "plait_qgemm", (DESC,), "plait_qgemm_problem", desc,
                        self.out_shape, self.out.dtype)


QCONV_FIELDS = ("N", "C", "H", "W", "O", "KH", "KW", "SH", "SW", "DH", "DW", "PT", "PL",
                "OH", "OW", "K", "GR")
"""The shape fields of ``plait_qconv_problem``, in order."""


@dataclass
class QConvCall:
    """A call of ``plait_qconv2d``: the NCHW image ``x`` (8-bit) with zero point ``zx``,
    the weights of :func:`packed_conv_constants`, the descriptor ``(N, C, H, W, O, KH, KW,
    SH, SW, DH, DW, PT, PL, OH, OW, K, GR)`` (K = C/GR*KH*KW; GR the convolution's
    groups) and the output stage (column: the channel)."""

    x: Expr
    zx: Expr
    packed: tuple[Constant, Constant, Constant]
    desc: tuple[int, ...]
    out: QOut
    out_shape: tuple[int, ...]

    def wrapper(self) -> Wrapper:
        w = _Operands()
        wp, zp, corr = self.packed
        desc: list[tuple[str, Any]] = list(zip(QCONV_FIELDS, self.desc))
        desc += [("x", w.add("x", self.x)), ("x_signed", _signed(self.x)),
                 ("zx", w.add("zx", self.zx)), ("w", w.add("w", wp)),
                 ("w_zp", w.add("wzp", zp)), ("w_corr", w.add("wcorr", corr)),
                 ("out", w.out_stage(self.out)), ("c", Ref("out"))]
        return w.finish("qconv", "plait_qconv2d", (DESC,), "plait_qconv_problem", desc,
                        self.out_shape, self.out.dtype)


QDW_FIELDS = ("N", "C", "H", "W", "KH", "KW", "SH", "SW", "DH", "DW", "PT", "PL", "OH", "OW")
"""The fields of ``plait_qdw_desc``, in order."""


@dataclass
class QDepthwiseCall:
    """A call of ``plait_qconv2d_depthwise``: the NCHW image ``x`` (8-bit) with zero point
    ``zx``, the weights of :func:`centered_depthwise_constant`, the descriptor ``(N, C, H, W, KH,
    KW, SH, SW, DH, DW, PT, PL, OH, OW)`` and the output stage (column: the channel)."""

    x: Expr
    zx: Expr
    w: Constant
    desc: tuple[int, ...]
    out: QOut
    out_shape: tuple[int, ...]

    def wrapper(self) -> Wrapper:
        w = _Operands()
        x, zx = w.add("x", self.x), w.add("zx", self.zx)
        wc = w.add("w", self.w)
        stage = Local("o", "plait_q_out", w.out_stage(self.out).fields)
        args = (DESC, x, _signed(self.x), zx, wc, Ref("&o"), Ref("out"))
        return w.finish("qdw", "plait_qconv2d_depthwise", args, "plait_qdw_desc",
                        tuple(zip(QDW_FIELDS, self.desc)), self.out_shape, self.out.dtype,
                        (stage,))


@dataclass
class QAddCall:
    """A call of ``plait_qadd`` (QLinearAdd): 8-bit ``a`` and ``b`` of one dtype, each
    with as many elements as the output or repeating (a scalar, or the output's
    trailing dimensions), the float32 constants ``ra``, ``rb``, ``fixed`` of the
    reference and ``a_first`` (A is one value per span: folded first)."""

    a: Expr
    b: Expr
    ra: float
    rb: float
    fixed: float
    a_first: bool
    out_shape: tuple[int, ...]

    def wrapper(self) -> Wrapper:
        return _binary_wrapper("qadd", self.a, self.b, self.out_shape, (
            ("a_first", int(self.a_first)), ("ra", float(self.ra)), ("rb", float(self.rb)),
            ("fixed", float(self.fixed))))


@dataclass
class QMulCall:
    """A call of ``plait_qmul`` (QLinearMul): 8-bit ``a`` and ``b`` of one dtype, each
    with as many elements as the output or repeating (as :class:`QAddCall`'s), their
    zero points, the output's ``zc`` and the float32 ``ratio = (sa * sb) / sc``; with
    ``rep_inner`` > 1 each value of the repeating operand covers that many consecutive
    output elements (a per-channel operand of an NCHW output)."""

    a: Expr
    b: Expr
    za: int
    zb: int
    zc: int
    ratio: float
    out_shape: tuple[int, ...]
    rep_inner: int = 1

    def wrapper(self) -> Wrapper:
        return _binary_wrapper("qmul", self.a, self.b, self.out_shape, (
            ("za", int(self.za)), ("zb", int(self.zb)), ("zc", int(self.zc)),
            ("ratio", float(self.ratio)), ("rep_inner", int(self.rep_inner))))


def _binary_wrapper(kind: str, a: Expr, b: Expr, out_shape: tuple[int, ...],
                    rest: tuple[tuple[str, Any], ...]) -> Wrapper:
    """The wrapper of ``plait_<kind>`` (``plait_qadd``/``plait_qmul``): its descriptor
    ``{n, a_len, b_len, is_signed, <rest>}`` and the two operands."""
    w = _Operands()
    desc = (("n", int(np.prod(out_shape))), ("a_len", int(np.prod(a.ty.shape))),  # type: ignore[union-attr]
            ("b_len", int(np.prod(b.ty.shape))), ("is_signed", _signed(a)),  # type: ignore[union-attr]
            *rest)
    args = (DESC, w.add("a", a), w.add("b", b), Ref("out"))
    return w.finish(kind, f"plait_{kind}", args, f"plait_{kind}_desc", desc, out_shape,
                    a.ty.dtype)  # type: ignore[union-attr]


@dataclass
class QParamCall:
    """A call of ``plait_quantize`` (``quantize``: float32 ``x`` to the dtype of the
    zero point) or ``plait_dequantize`` (8-bit ``x`` to float32): ``scale`` (float32)
    and ``zp`` one value, or one per channel of ``axis``."""

    quantize: bool
    x: Expr
    scale: Expr
    zp: Expr
    axis: int | None
    out_shape: tuple[int, ...]

    def wrapper(self) -> Wrapper:
        w = _Operands()
        shape = self.out_shape
        if self.axis is None:
            outer, ch, inner = 1, 1, int(np.prod(shape))
        else:
            outer = int(np.prod(shape[:self.axis]))
            ch = int(shape[self.axis])
            inner = int(np.prod(shape[self.axis + 1:]))
        zdt = self.zp.ty.dtype  # type: ignore[union-attr]
        desc = (("outer", outer), ("ch", ch), ("inner", inner),
                ("per_channel", int(self.axis is not None)), ("q_signed", _signed(self.zp)))
        args = (DESC, w.add("x", self.x), w.add("scale", self.scale), w.add("zp", self.zp),
                Ref("out"))
        return w.finish("qquant" if self.quantize else "qdequant",
                        "plait_quantize" if self.quantize else "plait_dequantize", args,
                        "plait_qparam_desc", desc, shape, zdt if self.quantize else "float32")


@dataclass
class QDynamicQuantizeCall:
    """A call of ``plait_dynamic_quantize`` (DynamicQuantizeLinear to uint8): float32
    ``x`` in; the quantized tensor, its float32 scale and uint8 zero point out."""

    x: Expr
    out_shape: tuple[int, ...]

    def wrapper(self) -> Wrapper:
        shape = self.out_shape
        buffers = (Buffer("x", shape), Buffer("y", shape, "uint8", out=True),
                   Buffer("scale", (), out=True), Buffer("zp", (), "uint8", out=True))
        call = NativeCall("qdynq", "plait_dynamic_quantize", buffers,
                          (int(np.prod(shape)), Ref("x"), Ref("y"), Ref("scale"), Ref("zp")),
                          guard=False)
        name, code, fn = emit_call(call)
        return name, code, fn, [self.x]


INT8_ISAS = ("avx512vnni", "avx512", "avxvnni", "avx2", "baseline")
"""The copies of the int8 families: dot-product instructions where the CPU has them;
AVX-512 without VNNI widens to int16 (vpmaddwd on zmm)."""

register_family(KernelFamily("qgemm", "plait_qgemm.c", ("plait_qgemm",), isas=INT8_ISAS,
                             package=__name__, header="plait_int8.h"))
register_family(KernelFamily("qconv", "plait_qconv.c",
                             ("plait_qconv2d", "plait_qconv2d_depthwise"), isas=INT8_ISAS,
                             package=__name__, header="plait_int8.h"))
register_family(KernelFamily("qelementwise", "plait_qelementwise.c",
                             ("plait_qadd", "plait_qmul", "plait_quantize", "plait_dequantize",
                              "plait_dynamic_quantize", "plait_qlookup"), isas=INT8_ISAS,
                             package=__name__, header="plait_int8.h"))
register_family(KernelFamily("qrows", "plait_qrows.c", ("plait_qsoftmax", "plait_qlayer_norm"),
                             isas=INT8_ISAS, package=__name__, header="plait_int8.h"))

__all__ = ["CONV_ROWS", "INT8_ISAS", "OUT_KINDS", "QAddCall", "QConvCall", "QDepthwiseCall",
           "QDynamicQuantizeCall", "QGemmCall", "QMulCall", "QNR", "QParamCall",
           "QOut", "centered_depthwise", "pack_b", "pack_conv_weights",
           "shifted"]
