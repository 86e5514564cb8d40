"""The ``c`` target's squeeze-and-excite: ``c.DispatchSqueezeExcite`` makes EfficientNet's
(and MobileNetV3-style) channel gate one call of ``plait_se_scale`` (``plait_dwconv.c``,
a kernel family: :mod:`plait.target.c.kernels`)::

    s = global_avg_pool2d(x)                  # N x C x 1 x 1 (or mean over H, W, kept)
    h = silu|relu(conv2d(s, w1) [+ b1])       # 1x1 convolution to CR channels
    g = sigmoid(conv2d(h, w2) [+ b2])         # 1x1 convolution back to C
    y = multiply(x, g)                        # (either order)

becomes ``y = plait_se_scale(x, w1, b1, w2, b2)``: the channel means in one pass over
``x``, the two small products and their activations in the call (no native call of its
own for a 1x1 convolution of a 1x1 image: their call overhead was most of their time),
the gate applied in a second pass.  ``x * sigmoid(x)`` must have been made ``silu``
(``RecognizeActivations``, which the ``c`` target runs first).  The pass runs before
``c.DispatchGemm`` (which would take the two 1x1 convolutions); each intermediate value
must have no use outside the block, the weights must be constants and ``x`` float32
NCHW with static channels (a symbolic batch or image is passed at run time: a dynamic
EfficientNet kept the gates as generated kernels, 1.2x the static build's time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.expr import Constant, Expr, ExternFunc, Function, Tuple
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, functions_to_rewrite, rewrite_function

from ..kernels.dwconv import SE_RELU, SE_SILU, se_scale_call
from ..kernels.registry import record_calls
from ..kernels.wrapper import emit_call
from ..shapes import float_shape
from .common import fused_span

_X = wildcard()
_W1, _W2 = is_const(), is_const()
_B1, _B2 = is_const(), is_const()


def spatial_axes(axis: Any) -> bool:
    """``mean``'s axes are the two spatial axes of a rank-4 NCHW value (x's rank is 4:
    the rewrite checks it)."""
    axes = (axis,) if isinstance(axis, int) else axis
    return axes is not None and len(axes) == 2 and {a % 4 for a in axes} == {2, 3}


# the squeeze: ONNX's GlobalAveragePool, or torch.export's mean over H, W (keepdim)
_POOL = (is_op("global_avg_pool2d", layout="NCHW")(_X)
         | is_op("mean", keepdims=True, axis=spatial_axes)(_X))
_CONV1 = is_op("conv2d", groups=1)(_POOL, _W1)
_PRE1 = is_op("add")(_CONV1, _B1) | _CONV1
_ACT = is_op("silu", "relu")(_PRE1)
_CONV2 = is_op("conv2d", groups=1)(_ACT, _W2)
_PRE2 = is_op("add")(_CONV2, _B2) | _CONV2
_GATE = is_op("sigmoid")(_PRE2)
SQUEEZE_EXCITE = is_op("multiply")(_X, _GATE).commutative().has_dtype("float32").has_rank(4)
"""The shape :class:`DispatchSqueezeExcite` takes (the rewrite checks the rest)."""


def _plain_1x1(call: Any) -> bool:
    from plait.runtime.window import expand_ints, expand_padding

    a = call.attrs
    return (a["data_layout"] == "NCHW" and a["kernel_layout"] == "OIHW"
            and tuple(expand_ints(a["strides"], 2)) == (1, 1)
            and tuple(expand_ints(a["dilation"], 2)) == (1, 1)
            and not any(expand_padding(a["padding"], 2)))


def _vector(m: Match, p: Any, n: int) -> np.ndarray | None:
    """The constant matched by ``p`` as a vector of ``n`` (a per-channel bias: size n
    or 1 along axis 1 of a rank-4 value, 1 elsewhere), or None."""
    c = m.get(p)
    if not isinstance(c, Constant) or c.data.dtype != np.float32:
        return None
    d = c.data
    full = (1,) * (4 - d.ndim) + tuple(d.shape)
    if d.ndim > 4 or any(s != 1 for i, s in enumerate(full) if i != 1) or full[1] not in (1, n):
        return None
    return np.ascontiguousarray(np.broadcast_to(d.reshape(-1), (n,)), np.float32)


def se_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchSqueezeExcite`: :data:`SQUEEZE_EXCITE` rewritten into a
    call of its wrapper (recorded in ``wrappers``), or left when it does not fit."""

    def rewrite(m: Match) -> Expr | None:
        xs = m.all(_X)
        if len(xs) != 2 or xs[0] is not xs[1] or not m.is_contained():
            return None
        x = xs[0]
        shape = float_shape(x)
        conv1, conv2 = m.call(_CONV1), m.call(_CONV2)
        w1, w2 = m[_W1], m[_W2]
        if shape is None or len(shape) != 4 or type(shape[1]) is not int:
            return None   # the batch and the image may be symbolic, the channels not
        if not _plain_1x1(conv1) or not _plain_1x1(conv2):
            return None
        if not isinstance(w1, Constant) or not isinstance(w2, Constant):
            return None
        n, c, h, w = shape
        cr = w1.data.shape[0]
        if w1.data.shape != (cr, c, 1, 1) or w2.data.shape != (c, cr, 1, 1) or 0 in shape:
            return None
        if w1.data.dtype != np.float32 or w2.data.dtype != np.float32:
            return None
        biases = []
        for p, size in ((_B1, cr), (_B2, c)):
            if p not in m:
                biases.append(None)
                continue
            b = _vector(m, p, size)
            if b is None:
                return None
            biases.append(b)
        act = SE_RELU if m.call(_ACT).op.name == "relu" else SE_SILU  # type: ignore[union-attr]
        args: list[Expr] = [x, Constant(np.ascontiguousarray(w1.data.reshape(cr, c))),
                            Constant(np.ascontiguousarray(w2.data.reshape(c, cr)))]
        args.extend(Constant(b) for b in biases if b is not None)
        sym, code, cfn = emit_call(se_scale_call(shape, cr, act, biases[0] is not None,
                                                 biases[1] is not None))
        wrappers.setdefault(sym, (code, cfn))
        root = m.graph.bindings[m.root_binding]  # type: ignore[index]
        return make_call("call_extern", ExternFunc(sym), Tuple(args), out=root.var.ty,
                         span=fused_span(m.graph, sorted(m.bindings), root))

    return Rule("c.squeeze_excite", SQUEEZE_EXCITE, rewrite)


def dispatch_squeeze_excite(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with every squeeze-and-excite gate (:data:`SQUEEZE_EXCITE`) it can take
    rewritten into a call of ``plait_se_scale``; functions for which ``skip`` is true
    (default: those of external codegens) are left alone."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    rule = se_rule(wrappers)
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = rewrite_function(f, [rule], mod, name=name)
        if nf is not f:
            funcs[name] = nf
    out = mod.with_functions(funcs) if funcs else mod
    return record_calls(out, wrappers, "plait_se_calls")


@module_pass(name="c.DispatchSqueezeExcite", phases=("optimization",))
class DispatchSqueezeExcite:
    """Make each squeeze-and-excite gate one call of plait_se_scale.

    A gate is a global average pool or mean over H and W, a 1x1 conv, SiLU or relu, a
    1x1 conv, a sigmoid and the multiply."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_squeeze_excite(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]


__all__ = ["SQUEEZE_EXCITE", "DispatchSqueezeExcite", "dispatch_squeeze_excite", "se_rule"]
