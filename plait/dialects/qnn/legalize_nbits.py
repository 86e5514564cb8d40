"""The lowering of ``qnn.matmul_nbits`` to core ops: dequantize, then ``linear``.

Every target runs it (on ``c``, for the calls the weight-only kernels do not take):
the packed weights stay packed in the executable and are unpacked at each call
(``bitwise_and`` and ``floor_divide`` split a byte into its two 4-bit values),
``float32(q - z) * scale`` element by element, exactly the reference's dequantization
(:func:`.nbits.dequantize_weights`), then the float32 product.  With ``accuracy_level``
4 the activations are first quantized to int8 per block by core ops (the reference's
``qa`` and ``sa``, :func:`.nbits.quantize_activations`) and replaced by ``qa * sa``:
the product is then the reference's up to the rounding of the float32 products and sums
(each ``qa * sa`` is rounded once, where the reference sums each block in integers).
"""

from __future__ import annotations

from plait.ir.expr import Call, Expr, Tuple
from plait.ir.types import TensorType
from plait.op.registry import make_call

from . import nbits as NB
from .legalize import Lowering, lowering


def _unpacked(lw: Lowering, x: Expr, bits: int, rows: int, length: int) -> Expr:
    """The uint8 ``x`` (``rows`` leading) unpacked to ``rows x length`` int32 values
    (low nibble first for 4 bits), the packing's padding cut off."""
    if bits == 4:
        lo = lw.op("bitwise_and", x, lw.const(15, "uint8"))
        hi = lw.op("floor_divide", x, lw.const(16, "uint8"))
        x = lw.op("concat", Tuple((lw.op("expand_dims", lo, axis=-1),
                                   lw.op("expand_dims", hi, axis=-1))), axis=-1)
    flat = lw.op("reshape", x, shape=(rows, -1))
    cut = lw.op("strided_slice", flat, axes=(1,), begin=(0,), end=(length,))
    return lw.cast(cut, "int32")


def _int8_activations(lw: Lowering, a: Expr, k: int, bs: int) -> Expr:
    """``a (..., K)`` quantized to int8 per block of ``bs`` along K and back to float32:
    ``qa * sa`` (:func:`.nbits.quantize_activations`), the same shape."""
    if not isinstance(a.ty, TensorType) or a.ty.shape is None:
        raise lw.fail("accuracy_level=4 needs the rank of a to quantize its blocks")
    blocks = NB.k_blocks(k, bs)
    rows = lw.op("reshape", a, shape=(-1, k))
    if blocks * bs != k:
        rows = lw.op("pad", rows, pad_width=(0, 0, 0, blocks * bs - k))
    blk = lw.op("reshape", rows, shape=(-1, blocks, bs))
    amax = lw.op("max", lw.op("abs", blk), axis=(2,), keepdims=True)
    f32 = "float32"
    zero = lw.op("equal", amax, lw.const(0.0, f32))
    safe = lw.op("where", zero, lw.const(1.0, f32), amax)
    recip = lw.op("where", zero, lw.const(0.0, f32), lw.op("divide", lw.const(127.0, f32), safe))
    q = lw.op("clip", lw.op("round", lw.op("multiply", blk, recip)), min=-127.0, max=127.0)
    back = lw.op("multiply", q, lw.op("divide", amax, lw.const(127.0, f32)))
    flat = lw.op("reshape", back, shape=(-1, blocks * bs))
    if blocks * bs != k:
        flat = lw.op("strided_slice", flat, axes=(1,), begin=(0,), end=(k,))
    return lw.op("reshape", flat, shape=tuple(a.ty.shape))  # type: ignore[union-attr]


@lowering("matmul_nbits")
def _matmul_nbits(lw: Lowering) -> Expr:
    """``linear(a, W, bias)`` with ``W = float32(q - z) * scale`` computed by core ops."""
    call: Call = lw.call
    k, n, bits, bs = (int(call.attrs[x]) for x in ("K", "N", "bits", "block_size"))
    blocks = NB.k_blocks(k, bs)
    a, b, scales, zps = call.args[:4]
    q = _unpacked(lw, b, bits, n, k)
    z = lw.op("repeat", _unpacked(lw, zps, bits, n, blocks), repeats=bs, axis=1)
    s = lw.op("repeat", scales, repeats=bs, axis=1)
    z = lw.op("strided_slice", z, axes=(1,), begin=(0,), end=(k,))
    s = lw.op("strided_slice", s, axes=(1,), begin=(0,), end=(k,))
    w = lw.op("multiply", lw.cast(lw.op("subtract", q, z), "float32"), s)
    if int(call.attrs.get("accuracy_level", 0)) == NB.ACT_INT8_LEVEL:
        a = _int8_activations(lw, a, k, bs)
    return make_call("linear", a, w, *call.args[4:])


__all__: list[str] = []
