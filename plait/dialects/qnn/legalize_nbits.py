"""The lowering of ``qnn.matmul_nbits`` to core ops: dequantize, then ``linear``.

Every target runs it (on ``c``, for the calls the weight-only kernels do not take):
the packed weights stay packed in the executable and are unpacked at each call
(``bitwise_and`` and ``floor_divide`` split a byte into its two 4-bit values),
``float32(q - z) * scale`` element by element, exactly the reference's dequantization
(:func:`.nbits.dequantize_weights`), then the float32 product.
"""

from __future__ import annotations

from plait.ir.expr import Call, Expr, Tuple
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
    return make_call("linear", a, w, *call.args[4:])


__all__: list[str] = []
