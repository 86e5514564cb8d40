"""The ``numpy`` target: every op becomes a call of its numpy library function.

Its legalization is the "library call" path of the design guide used for a whole
target: each op call turns into ``call_extern(extern("numpy.<op>"), (args...),
out=<type>, attrs={...})``, and the runtime's packed-function registry provides
``numpy.<op>`` (destination-passing) and ``numpy.<op>@alloc`` (value-returning, for
results whose shape is only known at run time) from :mod:`plait.runtime.numpy_ops`.
Runs anywhere numpy does.
"""

from __future__ import annotations

from typing import Any

from ..ir.builder import BlockBuilder
from ..ir.expr import Call, Expr, ExternFunc, Tuple
from ..op.registry import make_call
from ..runtime.packed import has_func
from ..transform.legalize import LegalizeError, register_legalize
from .target import register_target_kind


def legalize_to_numpy_call(bb: BlockBuilder, call: Call, target: Any) -> Expr:
    """``call`` as a ``call_extern`` of the numpy library function of its op."""
    name = call.op.name  # type: ignore[attr-defined]
    if not has_func(f"numpy.{name}"):
        raise LegalizeError(
            f"op {name!r} has no numpy library function 'numpy.{name}' "
            "(plait/runtime/numpy_ops.py registers them); it cannot run on the numpy target"
        )
    return make_call(
        "call_extern",
        ExternFunc(f"numpy.{name}"),
        Tuple(call.args),
        out=call.ty,
        attrs=dict(call.attrs) or None,
        span=call.span,
    )


register_target_kind("numpy", doc="runs every op through numpy library calls; runs anywhere")
register_legalize("*", "numpy", legalize_to_numpy_call)
