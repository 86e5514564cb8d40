"""A planted wrong rewrite for the debugging tools' tests: ``test.FlipAdd`` commutes
every ``add`` (harmless) but turns the third one it rewrites into a ``subtract``.  Its
sites go through the debug counter, so bisection can find the third.

``test.SegvRelu`` sends the second ``relu`` it rewrites to ``test.segv``, a packed
function that reads a kernel address: a native crash at run time."""

from __future__ import annotations

import ctypes

from plait.ir.expr import Call, Expr, ExternFunc, Function, Op, Tuple
from plait.ir.module import IRModule
from plait.ir.visitor import ExprMutator
from plait.op.registry import make_call
from plait.runtime.packed import has_func, register_func
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



def _segv(*args: object) -> None:
    ctypes.string_at(0xFFFF_FFFF_FFFF_0000, 1)  # a kernel address: the process dies (SIGSEGV)


if not has_func("test.segv"):
    register_func("test.segv", _segv)


class _Segv(ExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.sites = 0

    def rewrite_call(self, call: Call) -> Expr:
        if not (isinstance(call.op, Op) and call.op.name == "relu"):
            return call
        if not allow_rewrite(lambda: f"relu at binding {self.builder.current_binding!r}"):
            return call
        self.sites += 1
        if self.sites != 2:
            return make_call("abs", make_call("relu", *call.args))
        return make_call("call_extern", ExternFunc("test.segv"), Tuple(call.args),
                         out=call.ty)


@function_pass(name="test.SegvRelu")
def segv_relu(func: Function, mod: IRModule) -> Function:
    """Wrap every relu in an abs (harmless), but send the second to a crashing call."""
    return _Segv(mod).visit_function(func)
