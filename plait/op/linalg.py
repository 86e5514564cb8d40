"""Linear algebra operators."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType, Type
from .infer import broadcast_shapes, same_dtype, tensor_arg
from .registry import InferContext, register_op


def infer_matmul(ctx: InferContext) -> Type:
    a, b = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
    dtype = same_dtype(ctx, [a, b])
    if a.shape is None or b.shape is None:
        return TensorType(None, dtype)
    if len(a.shape) == 0 or len(b.shape) == 0:
        ctx.fail("matmul does not take scalars (use multiply)", arg=0 if not a.shape else 1)
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(
            f"matmul: the contracted dimensions differ: x has {k1} (shape {a.shape}), "
            f"y has {k2} (shape {b.shape})",
            arg=1,
        )
    batch = broadcast_shapes(ctx, [sa[:-2], sb[:-2]])
    assert batch is not None
    out = batch + ((sa[-2],) if len(a.shape) > 1 else ()) + ((sb[-1],) if len(b.shape) > 1 else ())
    return TensorType(out, dtype)


register_op(
    "matmul",
    inputs=("x", "y"),
    infer_type=infer_matmul,
    pattern="out_elemwise_fusable",
    reference=np.matmul,
    doc="matrix product with numpy semantics (batched, broadcasting, 1-D promotion)",
)
