"""Low-level operators: the calls that remain after legalization.

* ``call_kernel(kernel, (args...), out=Type, attrs={...})`` calls a kernel of the
  module (a :class:`~plait.ir.GlobalVar`) in destination-passing style: the kernel
  writes its result(s) into output buffers; at graph level the call returns a fresh
  value of type ``out``.
* ``call_extern(extern("name"), (args...), out=Type, attrs={...})`` calls a packed
  function of the runtime the same way; ``attrs`` are passed to it as keywords.

Both are the only ops (with the builtins listed in :data:`LOWERED_OPS`) allowed once a
module is in the ``lowering`` phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ir.expr import Call, ExternFunc, GlobalVar, Op, Tuple
from ..ir.types import ObjectType, TensorType, TupleType, Type
from ..ir.well_formed import register_phase_ops
from ..runtime.call_schema import keyword_problem
from .registry import AttrSpec, InferContext, OpError, get_op, normalize_attrs, register_op


def _infer_call_out(ctx: InferContext, callee_cls: type, what: str) -> Type:
    callee = ctx.args[0]
    if not isinstance(callee, callee_cls):
        ctx.fail(
            f"{ctx.op.name}: the first argument must be {what}, got {type(callee).__name__}",
            arg=0,
        )
    if not isinstance(ctx.args[1], Tuple) and not isinstance(ctx.types[1], TupleType):
        ctx.fail(f"{ctx.op.name}: the arguments must be passed as a tuple", arg=1)
    out = ctx.attrs["out"]
    return out if out is not None else ObjectType()


def _infer_call_extern(ctx: InferContext) -> Type:
    out = _infer_call_out(ctx, ExternFunc, "an extern function")
    symbol = ctx.args[0].symbol
    attrs = ctx.attrs["attrs"]
    if isinstance(attrs, Mapping) and attrs:   # the keywords, by the function's schema
        problem = keyword_problem(symbol, attrs)
        if problem:
            ctx.fail(f"call_extern of {symbol!r}: {problem}")
    _check_as_op(ctx, symbol, attrs if isinstance(attrs, Mapping) else {})
    return out


def _check_as_op(ctx: InferContext, symbol: str, attrs: Mapping[str, Any]) -> None:
    """A call of an op's runtime function (``numpy.<op>``) must be a call the op
    accepts: its arguments' types and the attributes are checked by the op's type
    inference (a rank-1 tensor given to ``numpy.max_pool2d`` is refused here, not by an
    IndexError inside the function at run time)."""
    name = symbol.removeprefix("numpy.").removesuffix("@alloc")
    args, types = ctx.args[1], ctx.types[1]
    if (name == symbol or name not in Op.definitions or not isinstance(args, Tuple)
            or not isinstance(types, TupleType) or len(types.fields) != len(args.fields)
            or any(t is None for t in types.fields)):
        return
    opdef = get_op(name)
    try:
        checked = normalize_attrs(opdef, dict(attrs))
        opdef.infer_call(Call(opdef.op, args.fields, checked), tuple(types.fields))
    except OpError as e:
        ctx.fail(f"call_extern of {symbol!r}: {e}")


register_op(
    "call_kernel",
    inputs=("kernel", "args"),
    attrs={
        "out": AttrSpec("type", default=None, doc="type of the result"),
        "attrs": AttrSpec("any", default=None, doc="extra attributes for the kernel"),
    },
    infer_type=lambda ctx: _infer_call_out(ctx, GlobalVar, "a kernel of the module"),
    pattern="opaque",
    doc="call a kernel of the module in destination-passing style",
)

register_op(
    "call_extern",
    inputs=("func", "args"),
    attrs={
        "out": AttrSpec("type", default=None, doc="type of the result"),
        "attrs": AttrSpec("any", default=None, doc="keyword attributes passed to the function"),
    },
    infer_type=lambda ctx: _infer_call_extern(ctx),
    pattern="opaque",
    doc="call a packed function of the runtime in destination-passing style",
)

LOWERED_OPS = {"call_kernel", "call_extern"}
"""Ops allowed in the lowering phase.  Build-phase passes add their builtins here
(through :func:`register_lowered_op`)."""


def register_lowered_op(name: str) -> None:
    """Declare that op ``name`` may remain after legalization (a builtin)."""
    LOWERED_OPS.add(name)


# ---------------------------------------------------------------- build-phase builtins


def _infer_alloc_tensor(ctx: InferContext) -> Type:
    return TensorType(ctx.attrs["shape"], ctx.attrs["dtype"])


register_op(
    "builtin.alloc_tensor",
    inputs=(),
    attrs={"shape": AttrSpec("dims"), "dtype": AttrSpec("dtype")},
    infer_type=_infer_alloc_tensor,
    pattern="opaque",
    doc="allocate a fresh tensor (contents undefined)",
)

register_op(
    "builtin.alloc_storage",
    inputs=(),
    attrs={"nbytes": AttrSpec("dim", doc="bytes: an int, or a size expression over the "
                                         "function's symbolic sizes")},
    infer_type=lambda ctx: ObjectType(),
    pattern="opaque",
    doc="allocate a byte buffer that planned tensors live in",
)

register_op(
    "builtin.tensor_from_storage",
    inputs=("storage",),
    attrs={"offset": AttrSpec("dim", doc="byte offset: an int, or a size expression"),
           "shape": AttrSpec("dims"), "dtype": AttrSpec("dtype")},
    infer_type=_infer_alloc_tensor,
    pattern="opaque",
    doc="a tensor placed at a byte offset of a storage buffer",
)


def _infer_call_dps(ctx: InferContext) -> Type:
    if not isinstance(ctx.args[0], ExternFunc | GlobalVar):
        ctx.fail(f"{ctx.op.name}: the callee must be an extern function or a kernel", arg=0)
    for i in range(1, len(ctx.args)):
        if not isinstance(ctx.types[i], TupleType):
            ctx.fail(f"{ctx.op.name}: argument {i} must be a tuple", arg=i)
    return ObjectType() if ctx.op.name == "builtin.call_dps" else (ctx.attrs["out"] or ObjectType())


register_op(
    "builtin.call_dps",
    inputs=("func", "inputs", "outputs"),
    attrs={"attrs": AttrSpec("any", default=None)},
    infer_type=_infer_call_dps,
    pure=False,
    pattern="opaque",
    doc="call a kernel or extern function that writes into the given output tensors",
)

register_op(
    "builtin.call_alloc",
    inputs=("func", "inputs"),
    attrs={"out": AttrSpec("type", default=None), "attrs": AttrSpec("any", default=None)},
    infer_type=_infer_call_dps,
    pattern="opaque",
    doc="call an extern function that allocates and returns its result "
    "(used where the result shape is only known at run time)",
)

BUILD_OPS = {
    "builtin.alloc_tensor",
    "builtin.alloc_storage",
    "builtin.tensor_from_storage",
    "builtin.call_dps",
    "builtin.call_alloc",
}
"""Ops of the build phase (explicit memory)."""

register_phase_ops(LOWERED_OPS, BUILD_OPS)  # what the lowering and build phases allow
