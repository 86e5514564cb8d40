"""qnn.DispatchWeightQuant: ``qnn.matmul_nbits`` to the ``c`` target's weight-only kernels.

Every float32 ``qnn.matmul_nbits`` call becomes a call of ``plait_wq_matmul``
(:mod:`plait.target.c.kernels.wquant`: the packed weights dequantized in registers, a
matrix-vector product for up to 4 rows, a tiled product above; with ``accuracy_level``
4 the activations quantized to int8 and integer dot products), with the rows of ``a``
taken at run time, so prefill and decode of a language model share the call.  A call
whose sizes the wrapper cannot take stays for ``qnn.Legalize`` (dequantize, then a
float product).  The dialect's dispatch hook adds the pass for targets of kind ``c``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import Call, Expr, ExternFunc, Op, Tuple
from plait.ir.module import IRModule
from plait.ir.types import TensorType
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, is_op
from plait.transform.pattern_rewrite import Rule, rewrite_module

from .nbits import ACT_INT8_LEVEL

MATMUL_NBITS = is_op("qnn.matmul_nbits").has_dtype("float32")
"""The calls :class:`DispatchWeightQuant` takes."""


def _call(call: Call) -> Any:
    """The :class:`WQCall` of a ``qnn.matmul_nbits`` call, or None."""
    from plait.target.c.kernels.wquant import WQCall

    at = call.ty
    a = call.args[0]
    if not isinstance(at, TensorType) or not isinstance(a.ty, TensorType):
        return None
    if a.ty.shape is None or len(a.ty.shape) == 0 or a.ty.dtype != "float32":
        return None
    k, n, bits, bs = (int(call.attrs[x]) for x in ("K", "N", "bits", "block_size"))
    return WQCall(a, *call.args[1:4], call.args[4] if len(call.args) > 4 else None,
                  tuple(a.ty.shape), k, n, bits, bs,
                  zero=uniform_zero_point(call.args[3], n, k, bits, bs),
                  act=8 if int(call.attrs.get("accuracy_level", 0)) == ACT_INT8_LEVEL else 0)


def uniform_zero_point(zero_points: Expr, n: int, k: int, bits: int, block_size: int
                       ) -> int:
    """The one zero point every block of the weight has (a symmetric quantization's
    ``2^(bits-1)``), or -1 when they differ or are not a constant: the kernel then
    skips unpacking a zero point per block (``plait_wq_desc.zero``)."""
    from plait.ir.expr import Constant

    from .nbits import k_blocks, unpack

    if not isinstance(zero_points, Constant):
        return -1
    blocks = k_blocks(k, block_size)
    z = unpack(np.asarray(zero_points.data, np.uint8).reshape(n, -1), bits)[:, :blocks]
    return int(z.flat[0]) if z.size and (z == z.flat[0]).all() else -1


def weight_quant_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchWeightQuant`: a call of the wrapper (recorded in
    ``wrappers``) in place of each ``qnn.matmul_nbits`` it can take."""

    def rewrite(m: Match) -> Expr | None:
        call = m.call(MATMUL_NBITS)
        wq = _call(call)
        if wq is None:
            return None
        try:
            name, code, cfn = wq.wrapper()
        except UnboundSize:
            return None   # a size only an intermediate value has
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(tuple(wq.args())),
                         out=call.ty, span=call.span)

    return Rule("qnn.weight_quant_matmul", MATMUL_NBITS, rewrite)


def _sibling_key(call: Call) -> Any:
    """The group of a ``qnn.matmul_nbits`` call that may share a kernel call with others
    of the same input (:func:`fuse_nbits_siblings`): its K, format, zero point and
    activations, when its weights (and bias) are constants; None otherwise."""
    from plait.ir.expr import Constant

    if not (isinstance(call.op, Op) and call.op.name == "qnn.matmul_nbits"):
        return None
    if not all(isinstance(e, Constant) for e in call.args[1:]):
        return None
    wq = _call(call)
    if wq is None or not isinstance(call.ty, TensorType) or call.ty.dtype != "float32":
        return None
    return (wq.K, wq.bits, wq.block_size, wq.zero, wq.act, wq.a_shape)


def _fused_call(calls: list[Call], wrappers: dict[str, tuple[str, CFunction]]) -> Expr | None:
    """One ``plait_wq_matmul`` call of the products ``calls`` (one input, the key of
    :func:`_sibling_key`): their packed weights, scales and zero points concatenated
    along N (each is laid out by rows of N), their biases too (zeros for a member
    without one), the outputs split back (``WQCall.splits``)."""
    from plait.ir.expr import Constant
    from plait.ir.types import TupleType

    wqs = [_call(c) for c in calls]
    first = wqs[0]
    assert first is not None and all(w is not None for w in wqs)

    def joined(index: int, dtype: Any) -> Constant:
        return Constant(np.concatenate([np.asarray(c.args[index].data, dtype).reshape(-1)
                                        for c in calls]))

    bias = None
    if any(w.bias is not None for w in wqs):  # type: ignore[union-attr]
        bias = Constant(np.concatenate([
            np.asarray(w.bias.data, np.float32).reshape(-1) if w.bias is not None  # type: ignore[union-attr]
            else np.zeros(w.N, np.float32) for w in wqs]))  # type: ignore[union-attr]
    splits = tuple(w.N for w in wqs)  # type: ignore[union-attr]
    wq = replace(first, b=joined(1, np.uint8), scales=joined(2, np.float32),
                 zero_points=joined(3, np.uint8), bias=bias, N=sum(splits), splits=splits)
    try:
        name, code, cfn = wq.wrapper()
    except UnboundSize:
        return None
    wrappers.setdefault(name, (code, cfn))
    return make_call("call_extern", ExternFunc(name), Tuple(tuple(wq.args())),
                     out=TupleType(tuple(c.ty for c in calls)), span=calls[0].span)


def fuse_nbits_siblings(mod: IRModule, wrappers: dict[str, tuple[str, CFunction]],
                        skip: Any = None) -> IRModule:
    """``mod`` with the ``qnn.matmul_nbits`` calls of one input and one format (a
    layer's q, k and v; gate and up) made one call of ``plait_wq_matmul`` each group
    (:mod:`plait.target.c.dispatch.siblings`): one quantization of the activations and
    one dispatch to the threads for all of them."""
    from plait.target.c.dispatch.siblings import fuse_siblings
    from plait.target.c.kernels.wquant import MAX_OUTS
    from plait.transform.dead_code import dead_code_elimination
    from plait.transform.pattern_rewrite import functions_to_rewrite

    changed = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = fuse_siblings(f, _sibling_key, lambda calls: _fused_call(calls, wrappers),
                           MAX_OUTS)
        if nf is not f:
            changed[name] = dead_code_elimination(nf)
    return mod.with_functions(changed) if changed else mod


def dispatch_weight_quant(mod: IRModule, skip: Any = None, siblings: bool = True
                          ) -> IRModule:
    """``mod`` with its float32 ``qnn.matmul_nbits`` calls rewritten into calls of the
    ``c`` target's weight-only kernels (functions for which ``skip`` is true left alone);
    with ``siblings``, the products of one input and format one call
    (:func:`fuse_nbits_siblings`)."""
    from plait.target.c.kernels import record_calls

    wrappers: dict[str, tuple[str, CFunction]] = {}
    if siblings:
        mod = fuse_nbits_siblings(mod, wrappers, skip)
    out = rewrite_module(mod, [weight_quant_rule(wrappers)], skip=skip)
    return record_calls(out, wrappers, "plait_wquant_calls")


@module_pass(name="qnn.DispatchWeightQuant", phases=("optimization",))
class DispatchWeightQuant:
    """Send qnn.matmul_nbits to the c target's weight-only kernels (dequantized in
    registers; decode and prefill from one call)."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_weight_quant(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]


def weight_quant_dispatch_hook(target: Any) -> list[Any]:
    """:class:`DispatchWeightQuant` for targets of kind ``c``, nothing elsewhere."""
    is_a = getattr(target, "is_a", None)
    return [DispatchWeightQuant()] if is_a is not None and is_a("c") else []


__all__ = ["MATMUL_NBITS", "DispatchWeightQuant", "dispatch_weight_quant",
           "weight_quant_dispatch_hook", "weight_quant_rule"]
