"""A planted wrong rewrite for the debugging tools' tests: ``test.FlipAdd`` commutes
every ``add`` (harmless) but turns the third one it rewrites into a ``subtract``.  Its
sites go through the debug counter, so bisection can find the third.  Loaded as a
``--plugin`` it also adds itself to the default pipeline's optimization stage."""

from __future__ import annotations

import os

from plait.ir.expr import Call, Expr, Function, Op
from plait.ir.module import IRModule
from plait.ir.visitor import ExprMutator
from plait.op.registry import make_call
from plait.transform import allow_rewrite, function_pass


class _Flip(ExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.sites = 0

    def rewrite_call(self, call: Call) -> Expr:
        if not (isinstance(call.op, Op) and call.op.name == "add"):
            return call
        if not allow_rewrite(lambda: f"add at binding {self.builder.current_binding!r}"):
            return call
        self.sites += 1
        a, b = call.args
        return make_call("subtract", a, b) if self.sites == 3 else make_call("add", b, a)


@function_pass(name="test.FlipAdd")
def flip_add(func: Function, mod: IRModule) -> Function:
    """Commute every add, but make the third a subtract (a planted bug)."""
    return _Flip(mod).visit_function(func)


if os.environ.get("PLAIT_TEST_FLIP_IN_PIPELINE"):
    from plait.pipeline import register_user_pass

    register_user_pass(flip_add)
