"""The table rule of ``qnn.DispatchInt8``: a chain of elementwise steps from one 8-bit
tensor to another as one 256-entry table on the ``c`` target (``plait_qlookup``).

A chain starts at an 8-bit tensor ``x`` and goes through steps each reading the
previous result (and nothing else reads it): ``qnn.dequantize``, ``qnn.quantize``,
``qnn.add``/``qnn.mul`` whose other operand is a scalar constant, and float32
elementwise ops whose other operands are scalar constants (``divide``, ``erf``,
``add``, ``multiply``, ``tanh``...).  Every step computes each element from that
element alone, so the chain's output is a function of ``x``'s 256 codes: the table is
that function, evaluated at compile time by the steps' references on the 256 codes.
A QOperator encoder's GELU (``DequantizeLinear -> Div -> Erf -> QuantizeLinear ->
QLinearAdd(1)``, five passes over the largest activations) becomes one lookup.

The table holds what the reference computes: the qnn steps exactly as the kernels
compute them; the float steps as plait's numpy references do (``erf`` in float64,
rounded), which may differ from a float kernel's result in the last bit, so an output
may differ by one step from the unfused chain (or from onnxruntime's) where a value
lies on a rounding boundary.  Chains of one qnn step stay on their own kernels.
"""

from __future__ import annotations

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.expr import Call, Constant, Expr, ExternFunc, Op, Tuple
from plait.op.registry import make_call
from plait.transform.pattern import Match, Pattern, is_op, wildcard
from plait.transform.pattern_rewrite import Rule

from . import reference as R
from .exprs import dtype_of, static_shape

EIGHT = ("uint8", "int8")
QNN_STEPS = ("qnn.dequantize", "qnn.quantize", "qnn.add", "qnn.mul")
"""The qnn ops a chain may hold (per-tensor, scalar constant parameters)."""
UNARY = ("erf", "tanh", "sigmoid", "exp", "relu", "neg", "abs", "sqrt", "gelu", "silu",
         "hard_sigmoid", "leaky_relu", "clip", "softplus", "square", "reciprocal")
"""Float ops of one operand a chain may hold."""
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")
"""Float ops of two operands a chain may hold (the other a scalar constant)."""


def _scalar_const(e: Expr) -> bool:
    return isinstance(e, Constant) and e.data.size == 1


def _float_step(call: Call) -> bool:
    """A pure float32 elementwise op with a reference, every operand but the running
    one a scalar constant (checked by the caller)."""
    op = call.op
    if not isinstance(op, Op) or not op.is_registered or op.name.startswith("qnn."):
        return False
    d = op.definition
    return (d.pure and d.reference is not None and d.pattern in ("elemwise", "broadcast")
            and dtype_of(call) == "float32")


def _step(y: Pattern) -> Pattern:
    y = y.single_use()
    w = wildcard
    return (is_op("qnn.dequantize", "qnn.quantize")(y, w(), w())
            | is_op("qnn.add", "qnn.mul")(y, w(), w(), w(), w(), w(), w(), w())
            | is_op("qnn.add", "qnn.mul")(w(), w(), w(), y, w(), w(), w(), w())
            | is_op(*UNARY)(y)
            | is_op(*BINARY)(y, w()) | is_op(*BINARY)(w(), y))


CHAIN = is_op("qnn.dequantize", "qnn.add", "qnn.mul").repeat(_step)
"""The shape the table rule takes; which chains one table can be is the rewrite's
business (:func:`table_of`)."""


def _running_operand(call: Call) -> Expr | None:
    """The one operand of ``call`` that is not a scalar constant, else None."""
    others = [a for a in call.args if not _scalar_const(a)]
    return others[0] if len(others) == 1 else None


def _evaluate(call: Call, value: np.ndarray) -> np.ndarray | None:
    """``call``'s reference with ``value`` for its running operand (its one operand that
    is not a scalar constant), or None when the step does not qualify."""
    src = _running_operand(call)
    if src is None:
        return None
    op = call.op
    assert isinstance(op, Op)
    if op.name in QNN_STEPS:
        if op.name in ("qnn.dequantize", "qnn.quantize") and int(call.attrs["block_size"]):
            return None
    elif not _float_step(call):
        return None
    args = [value if a is src else a.data.reshape(()) for a in call.args]  # type: ignore[union-attr]
    with np.errstate(all="ignore"):
        out = np.asarray(op.definition.reference(*args, **dict(call.attrs)))
    if out.shape != value.shape or out.dtype.name != dtype_of(call):
        return None
    return out


def table_of(calls: list[Call]) -> tuple[Expr, np.ndarray] | None:
    """The chain ``calls`` (each reading the previous one's result) as ``(x, table)``:
    its 8-bit input and its 256 output codes indexed by the input code's bit pattern;
    None when the chain is no such function."""
    x = _running_operand(calls[0])
    if x is None or dtype_of(x) not in EIGHT or dtype_of(calls[-1]) not in EIGHT:
        return None
    if len(calls) < 2:
        return None
    value: np.ndarray | None = R.table_inputs(np.dtype(dtype_of(x))).astype(dtype_of(x))
    for c in calls:
        value = _evaluate(c, value)  # type: ignore[arg-type]
        if value is None:
            return None
    assert value is not None
    return x, np.ascontiguousarray(value)


def table_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`~.dispatch.DispatchInt8` for 8-bit elementwise chains
    (records the call wrappers in ``wrappers``)."""
    from plait.target.c.kernels.int8.lookup import QLookupCall

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = [g.bindings[i] for i in sorted(m.bindings)]
        calls = [b.value for b in members]
        if not all(isinstance(c, Call) for c in calls):
            return None
        found = table_of(calls)  # type: ignore[arg-type]
        if found is None:
            return None
        x, table = found
        root = members[-1]
        shape = root.var.ty.shape  # type: ignore[union-attr]
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        name, code, cfn, args = QLookupCall(x, table, tuple(int(d) for d in shape)).wrapper()
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=root.var.ty,
                         span=root.value.span)

    return Rule("qnn.int8_table", CHAIN, rewrite)


def _lookup_call(x: Expr, table: np.ndarray, shape: tuple[int, ...],
                 wrappers: dict[str, tuple[str, CFunction]], span: object = None) -> Expr:
    """``table[x]`` on ``plait_qlookup`` (the wrapper recorded in ``wrappers``)."""
    from plait.ir.types import TensorType
    from plait.target.c.kernels.int8.lookup import QLookupCall

    name, code, cfn, args = QLookupCall(x, table, shape).wrapper()
    wrappers.setdefault(name, (code, cfn))
    return make_call("call_extern", ExternFunc(name), Tuple(args),
                     out=TensorType(shape, table.dtype.name), span=span)


def concat_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`~.dispatch.DispatchInt8` for ``qnn.concat`` (QLinearConcat):
    each input whose scale or zero point differs from the output's through its table
    (:func:`~.reference.cast_table`, what onnxruntime applies) on ``plait_qlookup``,
    then a plain concatenation (``qnn.Legalize`` would gather from the table in a
    generated kernel)."""

    def rewrite(m: Match) -> Expr | None:
        b = m.graph.bindings[min(m.bindings)]
        call = b.value
        assert isinstance(call, Call)
        xs, ss, zs, ys, yz = call.args
        if not all(isinstance(t, Tuple) for t in (xs, ss, zs)):
            return None
        if not (isinstance(ys, Constant) and isinstance(yz, Constant)):
            return None
        ysv, yzv = ys.data.reshape(()), yz.data.reshape(())
        parts: list[Expr] = []
        for x, sc, zp in zip(xs.fields, ss.fields, zs.fields):  # type: ignore[union-attr]
            shape = static_shape(x)
            if (not isinstance(sc, Constant) or not isinstance(zp, Constant)
                    or dtype_of(x) not in EIGHT or shape is None):
                return None
            if (np.float32(sc.data.reshape(())) == np.float32(ysv)
                    and int(zp.data.reshape(())) == int(yzv)):
                parts.append(x)
                continue
            table = R.cast_table(np.dtype(dtype_of(x)), sc.data, zp.data, ysv, yzv)
            parts.append(_lookup_call(x, np.ascontiguousarray(table), shape, wrappers,
                                      call.span))
        return make_call("concat", Tuple(tuple(parts)), axis=call.attrs["axis"],
                         span=call.span)

    w = wildcard
    return Rule("qnn.int8_concat", is_op("qnn.concat")(w(), w(), w(), w(), w()), rewrite)


__all__ = ["CHAIN", "concat_rule", "table_of", "table_rule"]
