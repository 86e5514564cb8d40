"""The ONNX converter of onnxruntime's ``MatMulNBits`` (``com.microsoft``).

A node becomes one ``qnn.matmul_nbits`` with the node's own packed tensors (the op
uses the same layout, :mod:`.nbits`): ``scales`` and ``zero_points`` written flat by
older exporters are reshaped to ``(N, k_blocks)`` and ``(N, bytes)``; omitted zero
points are onnxruntime's default ``2^(bits - 1)``.  ``accuracy_level`` 4 (onnxruntime's
int8 compute) is kept: the activations are quantized to int8 per block as onnxruntime
does (:mod:`.nbits`); every other level computes in float32.  Refused with the reason:
2-bit weights, float zero points (HQQ's), ``g_idx``, prepacked weights, float16
activations.
"""

from __future__ import annotations

from plait.frontend.onnx.context import NodeContext
from plait.frontend.onnx.converters.common import cast, reshape
from plait.frontend.onnx.registry import converter
from plait.ir.expr import Constant, Expr

from . import nbits as NB

MS = "com.microsoft"


@converter("MatMulNBits", domain=MS)
def convert_matmul_nbits(ctx: NodeContext) -> Expr:
    """``qnn.matmul_nbits`` on the node's own packed weights (the same layout); omitted
    zero points are 2^(bits-1), flat scales and zero points are reshaped."""
    k, n = ctx.attr_int("K"), ctx.attr_int("N")
    bits, bs = ctx.attr_int("bits", 4), ctx.attr_int("block_size")
    if bits not in NB.BITS:
        ctx.unsupported(f"bits={bits} (plait takes 4 and 8)", attribute="bits")
    if bs < 1 or (bs * bits) % 8:
        ctx.fail(f"block_size={bs} does not fill whole bytes of {bits}-bit values",
                 attribute="block_size")
    if ctx.has_attr("weight_prepacked") and ctx.attr_int("weight_prepacked"):
        ctx.unsupported("prepacked weights (weight_prepacked=1)", attribute="weight_prepacked")
    if ctx.dtype(0) != "float32":
        ctx.unsupported(f"A of dtype {ctx.dtype(0)} (plait computes MatMulNBits in float32)")
    if ctx.has(4):
        ctx.unsupported("g_idx (input 4, deprecated act-order indices)")
    blocks = NB.k_blocks(k, bs)
    b = reshape(ctx, ctx.x(1), (n, blocks, NB.blob_size(bs, bits)))
    scales = reshape(ctx, cast(ctx, ctx.x(2), "float32"), (n, blocks))
    zcols = NB.zp_cols(blocks, bits)
    if ctx.has(3):
        if ctx.dtype(3) != "uint8":
            ctx.unsupported(f"zero points of dtype {ctx.dtype(3)} (plait takes packed uint8 "
                            "zero points, as onnxruntime's quantizer writes them)")
        zps: Expr = reshape(ctx, ctx.x(3), (n, zcols))
    else:
        zps = Constant(NB.default_zero_points(n, blocks, bits))
    args = [ctx.x(0), b, scales, zps]
    if ctx.has(5):
        args.append(cast(ctx, ctx.x(5), "float32"))
    level = NB.ACT_INT8_LEVEL if ctx.attr_int("accuracy_level", 0) == NB.ACT_INT8_LEVEL else 0
    return ctx.call("qnn.matmul_nbits", *args, K=k, N=n, bits=bits, block_size=bs,
                    accuracy_level=level)
