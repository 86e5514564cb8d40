"""LegalizeOps: lower every remaining high-level op call for the module's target.

Legalizations are registered per op and target kind:

    @register_legalize("softmax", "c")
    def softmax_c(bb, call, target):
        ...           # return an expression (call_kernel / call_extern ...); may emit
                      # bindings with bb.emit and add kernels with bb.add_func

``op="*"`` registers a fallback for every op of a target kind (the ``numpy`` target
turns every op into ``call_extern`` of its numpy library function that way).  Lookup
walks the target kind and its ancestors: ``(op, kind)`` then ``("*", kind)`` for each,
then ``(op, None)`` (a legalization that fits every target).  An op with no
legalization is an error naming the op, the target and this registry.

Target dispatch passes run before this pass and rewrite the ops they care about;
dialect legalizations run before it too; LegalizeOps covers the rest.

Every op call is a site of the debug counter (:mod:`plait.transform.debug_counter`):
a site the counter declines is lowered by :func:`reference_legalization` (a call of
the op's numpy library function, which every target can run) instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plait.errors import PlaitError

from ..ir.builder import BlockBuilder, tuple_type
from ..ir.expr import (
    Binding,
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    Var,
    VarBinding,
    new_call,
    new_tuple,
    new_var_binding,
)
from ..ir.module import IRModule
from ..ir.visitor import ExprMutator
from ..op.lowlevel import LOWERED_OPS
from ..op.registry import make_call
from ..runtime.packed import has_func
from .debug_counter import allow_rewrite, counting
from .pass_base import module_pass

LegalizeFn = Callable[[BlockBuilder, Call, Any], Expr]

LEGALIZATIONS: dict[tuple[str, str | None], LegalizeFn] = {}


class LegalizeError(PlaitError, TypeError):
    """An op has no legalization for the target."""


def register_legalize(
    op: str, target_kind: str | None = None, fn: LegalizeFn | None = None, *, override: bool = False
) -> Any:
    """Register ``fn(bb, call, target) -> Expr`` as the legalization of ``op`` (or of
    every op, with ``op="*"``) for ``target_kind`` (None: every target).  Usable as a
    decorator."""

    def deco(f: LegalizeFn) -> LegalizeFn:
        key = (op, target_kind)
        if key in LEGALIZATIONS and not override:
            raise ValueError(
                f"a legalization of {op!r} for target {target_kind!r} is already registered "
                "(pass override=True)"
            )
        LEGALIZATIONS[key] = f
        return f

    return deco(fn) if fn is not None else deco


def reference_legalization(bb: BlockBuilder, call: Call, target: Any) -> Expr:
    """``call`` as a ``call_extern`` of the numpy library function of its op
    (``numpy.<op>``, :mod:`plait.runtime.numpy_ops`): the legalization of the
    ``numpy`` target, and the one every target can run.  The result is typed (its
    argument tuple and the call), so the builder does not build it a second time; calls
    of an op with the same attributes and type share the extern function and the
    checked attributes."""
    name = call.op.name  # type: ignore[attr-defined]
    key = (name, id(call.attrs), id(call.ty))
    hit = _SEEN.get(key)
    if hit is None or hit[0] is not call.attrs or hit[1] is not call.ty:
        if not has_func(f"numpy.{name}"):
            raise LegalizeError(
                f"op {name!r} has no numpy library function 'numpy.{name}' "
                "(plait/runtime/numpy_ops.py registers them); it cannot run on the numpy "
                "target"
            )
        ext = ExternFunc(f"numpy.{name}")
        checked = make_call("call_extern", ext, Tuple(call.args), out=call.ty,
                            attrs=dict(call.attrs) or None).attrs
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        hit = _SEEN[key] = (call.attrs, call.ty, ext, checked)
    args = call.args
    return new_call(_CALL_EXTERN, (hit[2], new_tuple(args, tuple_type(args), None)), hit[3],
                    call.ty, call.span)


_SEEN: dict[tuple[str, int, int], tuple[Any, Any, ExternFunc, Any]] = {}
"""(op, id of a call's attributes, id of its type) -> (those attributes, that type, the
extern function, the checked attributes of the call_extern); an entry keeps the keyed
objects alive, so their ids are not reused."""
_SEEN_MAX = 4096
_CALL_EXTERN = Op.get("call_extern")
_PLAIN_ARGS = frozenset({Var, DataflowVar, Constant, PrimValue, StringImm, ShapeExpr, ExternFunc,
                         GlobalVar})


def find_legalization(op: str, target: Any) -> LegalizeFn | None:
    """The legalization of ``op`` for ``target`` (a Target), or None."""
    kinds = [k.name for k in target.kind_info.chain()] if target is not None else []
    for kind in kinds:
        for key in ((op, kind), ("*", kind)):
            fn = LEGALIZATIONS.get(key)
            if fn is not None:
                return fn
    return LEGALIZATIONS.get((op, None))


class _Legalizer(ExprMutator):
    def __init__(self, mod: IRModule, target: Any, function_name: str) -> None:
        super().__init__(mod)
        self.target = target
        self.function_name = function_name
        self._found: dict[str, LegalizeFn | None] = {}  # op name -> its legalization
        self._typed: Expr | None = None  # the last call reference_legalization made

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op) or op.name in LOWERED_OPS:
            return call
        found = self._found
        if op.name in found:
            fn = found[op.name]
        else:
            fn = found[op.name] = find_legalization(op.name, self.target)
        if fn is None:
            tname = self.target.kind if self.target is not None else "<none>"
            chain = (
                ", ".join(k.name for k in self.target.kind_info.chain())
                if self.target is not None
                else "no target set"
            )
            raise LegalizeError(
                f"op {op.name!r} (in function {self.function_name!r}, binding "
                f"{self.builder.current_binding!r}) has no legalization for target {tname!r} "
                f"(kinds tried: {chain}); register one with "
                "plait.transform.register_legalize(op, target_kind, fn) "
                "(plait/transform/legalize.py), or build for target 'numpy'"
            )
        # A call that kept its type is typed already (the optimization phase types
        # every binding; a call whose arguments were replaced lost its type)
        typed = call if call.ty is not None else self.builder.normalize(call)
        if counting() and not allow_rewrite(
                lambda: f"{op.name} at binding {self.builder.current_binding!r}"):
            fn = reference_legalization
        result = fn(self.builder, typed, self.target)
        if fn is reference_legalization:
            self._typed = result
        return result

    def visit_binding(self, binding: Binding) -> None:
        value = binding.value
        if type(value) is Call and type(value.op) is Op and not self.var_remap:
            # Fast path: an op on variables and plain leaves with nothing to substitute
            # (what the walk would hand to rewrite_call as it is)
            for a in value.args:
                if type(a) not in _PLAIN_ARGS:
                    break
            else:
                # (at_binding(binding, self.rewrite_call, value) without its call)
                bb = self.builder
                prev = bb.current_binding
                bb.current_binding = binding.var.name_hint
                try:
                    new = self.rewrite_call(value)
                finally:
                    bb.current_binding = prev
                self.emit_rewritten(binding, new)
                return
        super().visit_binding(binding)

    def emit_rewritten(self, binding: Binding, value: Expr) -> None:
        # reference_legalization's call is typed as the builder would type it (its
        # type is the op call's, its tuple and attributes typed and checked): bound as
        # it is when its variable has that type
        if value is self._typed and type(binding) is VarBinding and \
                binding.var.ty is value.ty:
            self.builder.emit_binding(
                binding if value is binding.value else new_var_binding(binding.var, value))
            return
        super().emit_rewritten(binding, value)


def legalize_module(mod: IRModule, target: Any, skip: Callable[[Function], bool]) -> IRModule:
    """Legalize every graph function of ``mod`` for which ``skip`` is false; kernels the
    legalizations add go into the module."""
    funcs: dict[str, Any] = {}
    current = mod  # grows by the kernels each function's legalization adds
    for name, f in mod.graph_functions():
        if skip(f):
            continue
        lz = _Legalizer(current, target, name)
        nf = lz.visit_function(f)
        added = {k: v for k, v in lz.builder.get().items() if k not in current}
        if added:
            current = current.with_functions(added)
        if nf is not f:
            funcs[name] = nf
    if not funcs and current is mod:
        return mod
    return current.with_functions(funcs)


@module_pass(phases=("optimization",), transition="lowering")
class LegalizeOps:
    """Lower every remaining op for the module's target (optimization -> lowering)."""

    def transform_module(self, mod, ctx):  # type: ignore[no-untyped-def]
        from .external import skips_external

        target = mod.target
        if isinstance(target, str):
            from ..target import Target

            target = Target(target)
        return legalize_module(mod, target, skips_external(self, ctx))
