"""``FoldBatchNorm``: an inference batch normalization after a convolution with constant
weights becomes part of the convolution.

``batch_norm(conv2d(x, w), gamma, beta, mean, var)`` with every parameter a constant is
``conv2d(x, w * s) + (beta - mean * s)`` per output channel, ``s = gamma / sqrt(var +
epsilon)``; a bias added to the convolution first (``add(conv2d(x, w), b)``) folds as
well (``b * s + beta - mean * s``).  The convolution then runs as one product with a
bias epilogue instead of a product and a normalization pass over its output.

Exporters to ONNX fold batch normalizations themselves (``torch.onnx.export`` does);
``torch.export`` keeps them (``_native_batch_norm_legit_no_training``), so a ResNet or
MobileNet imported by :func:`plait.frontend.from_exported_program` carried one
normalization kernel per convolution.  Folded here, the two importers give the same
graph.

Only a batch normalization over the convolution's output channel axis (``axis`` 1 in
``NCHW``, 3 in ``NHWC``), of floating-point constants, whose convolution (and bias add)
nothing else reads, is folded; the new weights are computed in float64 and stored in the
weights' dtype.  Everything else is left as it is.
"""

from __future__ import annotations

import numpy as np

from plait.ir.expr import Call, Constant, Expr
from plait.op.registry import make_call
from plait.transform.pattern import Match, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, rewrite_pass

_X = wildcard()
_W = is_const()
_CONV = is_op("conv2d")(_X, _W).single_use()
_BIAS = is_const()
_BIASED = is_op("add")(_CONV, _BIAS).commutative().single_use()
_PARAMS = [is_const() for _ in range(4)]
_BN = is_op("batch_norm")(_CONV | _BIASED, *_PARAMS)


def _fold(m: Match) -> Expr | None:
    bn: Call = m.call(_BN)
    conv: Call = m.call(_CONV)
    w: Constant = m[_W]  # type: ignore[assignment]
    if w.data.dtype.kind != "f" or conv.ty.shape is None:  # type: ignore[union-attr]
        return None
    rank = len(conv.ty.shape)  # type: ignore[union-attr]
    data_layout = conv.attrs.get("data_layout", "NCHW")
    kernel_layout = conv.attrs.get("kernel_layout", "OIHW")
    if int(bn.attrs.get("axis", 1)) % rank != data_layout.index("C"):
        return None
    gamma, beta, mean, var = (np.asarray(m[p].data, np.float64) for p in _PARAMS)  # type: ignore[union-attr]
    o_axis = kernel_layout.index("O")
    channels = w.data.shape[o_axis]
    if any(a.shape != (channels,) for a in (gamma, beta, mean, var)):
        return None
    scale = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    shift = beta - mean * scale
    wshape = [1] * w.data.ndim
    wshape[o_axis] = channels
    new_w = (w.data.astype(np.float64) * scale.reshape(wshape)).astype(w.data.dtype)
    cshape = [1] * rank
    cshape[data_layout.index("C")] = channels
    dtype = np.dtype(bn.ty.dtype)  # type: ignore[union-attr]
    if _BIAS in m:
        b = np.asarray(m[_BIAS].data, np.float64)  # type: ignore[union-attr]
        try:   # a bias per output channel (or one value) only
            if np.broadcast_shapes(b.shape, tuple(cshape)) != tuple(cshape):
                return None
        except ValueError:
            return None
        bias = b * scale.reshape(cshape) + shift.reshape(cshape)
    else:
        bias = shift.reshape(cshape)
    folded = make_call("conv2d", m[_X], Constant(new_w), span=conv.span, **dict(conv.attrs))
    return make_call("add", folded, Constant(bias.astype(dtype)), span=bn.span)


FOLD_BATCH_NORM_RULE = Rule("fold_batch_norm", _BN, _fold)

FoldBatchNorm = rewrite_pass(
    "FoldBatchNorm", [FOLD_BATCH_NORM_RULE],
    doc="Fold an inference batch_norm of constant parameters (over the output channels "
        "of a conv2d with constant weights, read only by it, bias add allowed) into the "
        "convolution's weights and a bias add.")

__all__ = ["FOLD_BATCH_NORM_RULE", "FoldBatchNorm"]
