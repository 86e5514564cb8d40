"""Normalize: A-normal form and types, through the block builder.

Every nested expression is bound to a variable of its own (call arguments, tuple
fields, conditions and results become atoms), every ``If`` branch becomes a
``SeqExpr``, and every type the operator registry can infer is filled in.  Works on
ingestion modules (untyped variables, nested expressions, nested functions -- which
are normalized too) and is idempotent, so it may run again in the optimization phase
after a pass that built nested expressions.

Normalize makes no transition: the module enters the optimization phase with
:class:`~plait.transform.lambda_lift.LambdaLift`, which requires Normalize before it.
"""

from __future__ import annotations

from ..ir.builder import normalize_module
from ..ir.module import IRModule
from .context import PassContext
from .pass_base import module_pass


@module_pass(phases=("ingestion", "optimization"))
class Normalize:
    """Bind nested expressions to variables (A-normal form) and infer every type."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return normalize_module(mod)


__all__ = ["Normalize"]
