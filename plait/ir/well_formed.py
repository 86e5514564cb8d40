"""Well-formedness: the invariants of each phase of a module.

``well_formed(mod)`` returns every :class:`Violation` of the invariants of the module's
phase *and of every phase before it*; ``check_well_formed(mod)`` raises a
:class:`WellFormedError` listing them all.  The invariants (docs/index.md, "Phases"):

``ingestion``
    well-typed where types are known: the type of every binding's value is inferred
    again from its operands and must fit the variable's declared type; every call of a
    registered op must type-check when its argument types are known; a function's
    body must fit its declared return type.
``optimization``
    A-normal form (call arguments, tuple fields and conditions are atoms; a binding's
    value is a call, tuple, tuple item, ``If`` or atom); every parameter and binding
    is typed; no nested functions; every op is registered; every ``GlobalVar`` names
    a function of the module; dataflow blocks hold only pure calls and no ``If``;
    ``DataflowVar`` s are bound only in dataflow blocks and not used outside the block
    that binds them; every variable is defined before use and defined once.
``lowering``
    no op other than those in :data:`plait.op.lowlevel.LOWERED_OPS` is called (in the
    build phase the explicit-memory builtins of :data:`plait.op.lowlevel.BUILD_OPS`
    are allowed too; the op layer registers both with :func:`register_phase_ops`).
    Functions of external codegens (``compiler="x"``) keep their graph form: only the
    checks of the optimization phase apply to them.
``build``
    no dataflow blocks; no function of an external codegen is left (RunCodegen has
    compiled them all).

More checks plug in with :func:`register_phase_check` (the build phase's explicit-memory
invariants are registered by the passes that establish them).  Kernels (non-graph
functions) are left to the checks their own layer registers.

Everything is iterative: a function of 100,000 bindings is checked without recursion.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from plait.errors import PlaitError
from plait.runtime.lazy_compiler import load_compiler

from .builder import is_atom, join_types, types_compatible
from .expr import (
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from .module import PHASES, IRModule
from .types import FuncType, ObjectType, PrimType, TensorType, TupleType, Type
from .walk import (
    LEAF_TYPES,
    calls_any,
    collect_bindings,
    functions_in,
    is_flat,
    iter_bindings,
    nested_bodies,
    scan_flat,
)
from .walk import calls_any_nested as _calls_any_nested  # noqa: F401  (its old name here)


@dataclass(frozen=True)
class Violation:
    """One broken invariant: the phase whose rule it breaks, where (function and
    binding, when known) and what is wrong (with the fix, when there is one)."""

    phase: str
    function: str | None
    binding: str | None
    message: str

    def __str__(self) -> str:
        where = []
        if self.function is not None:
            where.append(f"function {self.function!r}")
        if self.binding is not None:
            where.append(f"binding {self.binding!r}")
        place = ", ".join(where) if where else "module"
        return f"[{self.phase}] {place}: {self.message}"


class WellFormedError(PlaitError, ValueError):
    """A module violates the invariants of its phase; ``violations`` lists them all."""

    MAX_LISTED = 50

    def __init__(self, violations: Iterable[Violation], phase: str | None = None) -> None:
        self.violations = list(violations)
        self.phase = phase
        head = "the module is not well formed"
        if phase is not None:
            head += f" for phase {phase}"
        super().__init__(f"{head} ({len(self.violations)} violations):\n"
                         + self.format_violations(self.violations))

    @staticmethod
    def format_violations(violations: list[Violation]) -> str:
        lines = [f"  {v}" for v in violations[: WellFormedError.MAX_LISTED]]
        if len(violations) > WellFormedError.MAX_LISTED:
            lines.append(f"  ... and {len(violations) - WellFormedError.MAX_LISTED} more")
        return "\n".join(lines)


PhaseCheck = Callable[[IRModule], Iterable["Violation | tuple[str | None, str | None, str]"]]
"""An extra check for a phase: yields violations, or ``(function, binding, message)``."""

_EXTRA_CHECKS: dict[str, list[tuple[str, PhaseCheck]]] = {p: [] for p in PHASES}


def register_phase_check(phase: str, check: PhaseCheck, name: str | None = None) -> None:
    """Add ``check`` to the invariants of ``phase`` (and so of every later phase).

    ``check(mod)`` yields :class:`Violation` s or ``(function, binding, message)``
    tuples.  Registering a check under a name already used replaces it.
    """
    if phase not in PHASES:
        close = difflib.get_close_matches(str(phase), PHASES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown phase {phase!r}{hint} (phases: {', '.join(PHASES)})")
    key = name or getattr(check, "__qualname__", repr(check))
    checks = _EXTRA_CHECKS[phase]
    checks[:] = [(k, c) for k, c in checks if k != key]
    checks.append((key, check))


def phase_checks(phase: str) -> list[str]:
    """Names of the extra checks registered for ``phase`` (for documentation)."""
    return [k for k, _ in _EXTRA_CHECKS[phase]]


def well_formed(mod: IRModule, phase: str | None = None) -> list[Violation]:
    """Every violation of the invariants of ``phase`` (default: the module's phase)
    and of every phase before it.  An empty list means the module is well formed."""
    phase = mod.phase if phase is None else phase
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    level = PHASES.index(phase)
    out: list[Violation] = []
    gtypes = {n: f.ty for n, f in mod.items() if f.ty is not None}
    allowed = _allowed_ops(level)
    for name, func in mod.graph_functions():
        if level >= 1 and _FAST_ACCEPT and func.attrs.get("compiler") is None and \
                _accepts_common(func, mod, gtypes, level, allowed):
            continue  # breaks none of the invariants below: nothing to report
        bindings, nested = collect_bindings(func)
        _check_types(name, func, gtypes, out, bindings, nested)
        if level >= 1:
            _StructureCheck(name, func, mod, out).run()
        codegen = func.attrs.get("compiler")
        if codegen is not None:
            # an external codegen's function keeps its graph form until RunCodegen
            # compiles it (plait does not lower it); none may be left in the build phase
            if level >= 3:
                out.append(Violation(
                    "build", name, None,
                    f"the function belongs to external codegen {codegen!r} and was not "
                    "compiled; RunCodegen (first in the build stage) must run before "
                    "ExplicitMemory"))
            continue
        if level >= 2:
            _check_lowered(name, func, out, build=level >= 3, bindings=bindings)
        if level >= 3:
            _check_no_dataflow(name, func, out, nested)
    for p in PHASES[: level + 1]:
        for key, check in _EXTRA_CHECKS[p]:
            for v in check(mod):
                if isinstance(v, Violation):
                    out.append(v)
                else:
                    fn, binding, msg = v
                    out.append(Violation(p, fn, binding, f"{msg} (check {key})"))
    return out


def check_well_formed(mod: IRModule, phase: str | None = None) -> IRModule:
    """Raise :class:`WellFormedError` listing every violation; return ``mod`` if none."""
    violations = well_formed(mod, phase)
    if violations:
        raise WellFormedError(violations, mod.phase if phase is None else phase)
    return mod


# ------------------------------------------------------------------ the common function


_FAST_ACCEPT = True
"""Whether :func:`well_formed` first tries :func:`_accepts_common` on each function
(tests turn it off to compare with the general checks alone)."""


_PHASE_OPS: dict[str, Collection[str]] = {}
"""The ops a graph function may call in the lowering phase (``"lowering"``) and, besides
those, in the build phase (``"build"``): the op layer's sets, registered by
:mod:`plait.op.lowlevel` with :func:`register_phase_ops`."""


def register_phase_ops(lowered: Collection[str], build: Collection[str]) -> None:
    """Declare the ops a graph function may call from the lowering phase on (``lowered``)
    and, besides those, in the build phase (``build``).  The collections are kept, not
    copied: ops added to them later count."""
    _PHASE_OPS["lowering"] = lowered
    _PHASE_OPS["build"] = build


def _allowed_ops(level: int) -> frozenset[str] | None:
    """The ops a function may call at phase index ``level`` (None: any registered op)."""
    if level < 2:
        return None
    if not _PHASE_OPS:
        load_compiler()  # the op layer registers them as it is imported
    if not _PHASE_OPS:
        raise RuntimeError("the ops of the lowering and build phases are not registered: "
                           "import plait.op (or plait) before checking a lowered module")
    lowered = frozenset(_PHASE_OPS["lowering"])
    return lowered | frozenset(_PHASE_OPS["build"]) if level >= 3 else lowered


def _accepts_common(
    func: Function, mod: IRModule, gtypes: dict[str, Type], level: int,
    allowed: frozenset[str] | None,
) -> bool:
    """True when ``func`` is made only of the common binding of A-normal form and
    breaks none of the invariants that :func:`_check_types`, :class:`_StructureCheck`,
    :func:`_check_lowered` and :func:`_check_no_dataflow` check at phase index
    ``level`` (>= 1): one walk over the bindings instead of four.  False means "not
    shown here" (a violation, or anything less common): the general checks then run
    and report.  It accepts:

    * parameters that are typed ``Var`` s, each once;
    * a body that is a sequence of binding blocks (no dataflow block from the build
      phase on) whose result is a live variable or a plain atom;
    * bindings ``var = op(args)``: a fresh, typed variable (a ``DataflowVar`` only in
      a dataflow block) bound to a call of a registered op (pure in a dataflow block;
      one of the lowered ops from the lowering phase on) on live variables, plain
      atoms, functions of the module and tuples of these, whose type
      (:func:`_infer_flat_call`, with no message) fits the variable's;
    * a result whose type fits the declared return type.

    A dataflow block's variables die at its end."""
    params = func.params
    body = func.body
    if type(body) is not SeqExpr:
        return False
    ever: set[Expr] = set()
    for p in params:
        if type(p) is not Var or p.ty is None or p in ever:
            return False
        ever.add(p)
    # (no dataflow block from the build phase on: nothing leaves ``live`` then)
    live = ever if level >= 3 else set(ever)
    functions = mod.functions
    pure_ops: dict[Op, bool] = {}
    memo: dict = {}
    types: dict[tuple, Type] = {}
    found: list[str] = []
    for block in body.blocks:
        tb = type(block)
        if tb is DataflowBlock:
            if level >= 3:
                return False
            df = True
            local: list[Var] = []
        elif tb is BindingBlock:
            df = False
        else:
            return False
        for b in block.bindings:
            var, value = b.var, b.value
            tv = type(var)
            if type(b) is not VarBinding or var.ty is None or var in ever or \
                    (tv is not Var and (tv is not DataflowVar or not df)):
                return False
            if type(value) is not Call:
                if not _accepts_simple_value(value, var, live, gtypes):
                    return False
                ever.add(var)
                if live is not ever:
                    live.add(var)
                if df and tv is DataflowVar:
                    local.append(var)
                continue
            op = value.op
            if type(op) is not Op:
                return False
            pure = pure_ops.get(op)
            if pure is None:
                opdef = Op.definitions.get(op.name)
                if opdef is None or (allowed is not None and op.name not in allowed):
                    return False
                pure = pure_ops[op] = opdef.pure
            if df and not pure:
                return False
            # The arguments are live (or plain atoms, or functions of the module), and
            # ``key`` the call's type is kept under in ``types`` (None: not kept): the
            # op, its attributes' identity, each variable's class and type's identity,
            # each tuple's type's identity when it is its variables' very types (and which
            # of them are DataflowVars, if any), an extern's symbol and type, another
            # atom's identity; the nodes stay alive during the check.
            key: list | None = [op, id(value.attrs)]
            for a in value.args:
                ta = type(a)
                if ta is Var or ta is DataflowVar:
                    if a not in live:
                        return False
                    if key is not None:
                        key.append(ta)
                        key.append(id(a.ty))
                elif ta is Tuple:
                    fields = a.fields  # type: ignore[attr-defined]
                    aty = a.ty
                    if key is None or type(aty) is not TupleType or \
                            len(aty.fields) != len(fields):  # type: ignore[attr-defined]
                        if not _live_atoms(fields, live):
                            return False
                        key = None
                        continue
                    dataflow = 0  # bit i: field i is a DataflowVar
                    bit = 1
                    for f, fty in zip(fields, aty.fields):  # type: ignore[attr-defined]
                        tf = type(f)
                        if tf is Var or tf is DataflowVar:
                            if f not in live:
                                return False
                            if f.ty is not fty:
                                key = None
                            elif tf is DataflowVar:
                                dataflow |= bit
                        elif tf in _PLAIN_ATOMS:
                            key = None
                        else:
                            return False
                        bit <<= 1
                    if key is not None:
                        key.append(Tuple)
                        key.append(id(aty))
                        if dataflow:
                            key.append(dataflow)
                elif ta is GlobalVar:
                    if a.name_hint not in functions:  # type: ignore[attr-defined]
                        return False
                    key = None
                elif ta in _PLAIN_ATOMS:
                    if key is not None:
                        key.append(ta)
                        if ta is ExternFunc:
                            key.append(a.symbol)  # type: ignore[attr-defined]
                            ety = a.ty
                            # (every ObjectType is equal to every other: its class
                            # keys it without a hash computed in Python per call)
                            key.append(ObjectType if type(ety) is ObjectType else ety)
                        else:
                            key.append(id(a))
                else:
                    return False
            if key is None:
                ty = _infer_flat_call(value, gtypes, found, memo)
                if found or ty is _SLOW:
                    return False
            else:
                k = tuple(key)
                ty = types.get(k)
                if ty is None:
                    ty = _infer_kept_call(value)
                    if ty is _SLOW:
                        return False
                    if ty is not None:
                        types[k] = ty
                # (as _infer_flat_call takes the call's annotation)
                ety = value.ty
                if ety is not None and ty is not None and ety is not ty:
                    if ety == ty:
                        ty = types[k] = ety  # (the next such call compares by identity)
                    elif not types_compatible(ety, ty):
                        return False
                if ty is None:
                    ty = ety
            if ty is not None and ty is not var.ty and not types_compatible(var.ty, ty):
                return False
            ever.add(var)
            if live is not ever:
                live.add(var)
            if df and tv is DataflowVar:
                local.append(var)
        if df:
            live.difference_update(local)
    result = body.body
    tr = type(result)
    if tr is Var or tr is DataflowVar:
        if result not in live:
            return False
    elif tr not in _PLAIN_ATOMS:
        return False
    return func.ret_ty is None or types_compatible(func.ret_ty, _seq_type(body))


def _live_atoms(fields: tuple[Expr, ...], live: set) -> bool:
    """True when every field is a live variable or a plain atom."""
    for f in fields:
        tf = type(f)
        if tf is Var or tf is DataflowVar:
            if f not in live:
                return False
        elif tf not in _PLAIN_ATOMS:
            return False
    return True


def _infer_kept_call(e: Call) -> Any:
    """For :func:`_accepts_common`: the type the registered op of ``e`` infers from its
    arguments' types (a tuple's annotation: its fields' very types), None if one is
    unknown, ``_SLOW`` if the call is ill-typed (the general checks report it)."""
    arg_types = []
    for a in e.args:
        ty = a.ty
        if ty is None:
            return None
        arg_types.append(ty)
    try:
        ty, _ = Op.definitions[e.op.name].infer_call(e, tuple(arg_types))  # type: ignore[attr-defined]
    except _INFER_ERRORS:
        return _SLOW
    return ty


def _accepts_simple_value(value: Expr, var: Var, live: set, gtypes: dict[str, Type]) -> bool:
    """For :func:`_accepts_common`: True when ``value`` is a live variable, a tuple of
    live variables and plain atoms, or an item of a live variable, well typed (no
    message from :func:`_infer`) with a type that fits ``var``'s."""
    t = type(value)
    if t is Var or t is DataflowVar:
        if value not in live:
            return False
    elif t is Tuple:
        if not _live_atoms(value.fields, live):  # type: ignore[attr-defined]
            return False
    elif t is TupleGetItem:
        tv = value.tuple_value  # type: ignore[attr-defined]
        if (type(tv) is not Var and type(tv) is not DataflowVar) or tv not in live:
            return False
    else:
        return False
    found: list[str] = []
    ty = _infer(value, gtypes, found)
    return not found and (ty is None or ty is var.ty or types_compatible(var.ty, ty))



# ------------------------------------------------------------------ ingestion: types


_INFER_ERRORS = (TypeError, ValueError, KeyError, IndexError)


def _check_types(
    fname: str,
    func: Function,
    gtypes: dict[str, Type],
    out: list[Violation],
    bindings: list[Binding] | None = None,
    nested: bool = True,
) -> None:
    if bindings is None:
        bindings = [b for b, _ in iter_bindings(func)]
    found: list[str] = []
    memo: dict = {}
    for b in bindings:
        ty = _infer_flat_call(b.value, gtypes, found, memo)  # (the common value)
        if ty is _SLOW:
            ty = _infer(b.value, gtypes, found, memo)
        if found:
            name = b.var.name_hint
            for msg in found:
                out.append(Violation("ingestion", fname, name, msg))
            found = []
        if ty is None or ty is b.var.ty or isinstance(b, MatchCast):
            continue
        if not types_compatible(b.var.ty, ty):
            name = b.var.name_hint
            out.append(Violation(
                "ingestion", fname, name,
                f"the variable is declared {b.var.ty} but its value has type {ty}",
            ))
    for f in functions_in(func, bindings) if nested else (func,):
        body_ty = _seq_type(f.body)
        if f.ret_ty is not None and not types_compatible(f.ret_ty, body_ty):
            out.append(Violation(
                "ingestion", fname, None,
                f"the function body has type {body_ty}, but the declared return type "
                f"is {f.ret_ty}",
            ))


def _seq_type(e: Expr) -> Type | None:
    if e.ty is not None:
        return e.ty
    if isinstance(e, SeqExpr) and e.body is not None:
        return e.body.ty
    return None


def _expr_children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Call):
        return (e.op, *e.args)
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, If):
        return (e.cond,)
    return ()


_SLOW = object()


def _leaf_type(a: Expr, gtypes: dict[str, Type]) -> Any:
    """The type :func:`_infer` gives the leaf ``a`` (``_SLOW`` when ``a`` is no leaf)."""
    t = type(a)
    if t in LEAF_TYPES:
        return a.ty
    if t is GlobalVar:
        return a.ty if a.ty is not None else gtypes.get(a.name_hint)
    return _SLOW


def _infer_flat_call(
    e: Expr, gtypes: dict[str, Type], found: list[str], memo: dict | None = None
) -> Any:
    """:func:`_infer` of the common binding value of A-normal form — an op called on
    leaves and tuples of leaves — without the general walk (the same result and the
    same messages), or ``_SLOW`` for anything else.  ``memo`` (for one check of a
    module, whose nodes all stay alive meanwhile) keeps the types inferred for calls of
    an op with the same attributes on arguments of the same types: variables by their
    class and the identity of their type, a tuple of variables by its type's identity
    and its fields' classes, an extern by its symbol, other leaves by identity."""
    if type(e) is not Call:
        return _SLOW
    op = e.op
    if type(op) is not Op:
        return _SLOW
    arg_types: list[Type | None] = []
    known = True
    seen: dict[int, tuple[Type | None, Any]] | None = None
    key: list[Any] | None = [op, id(e.attrs)] if memo is not None else None
    for a in e.args:
        t = type(a)
        if t is Var or t is DataflowVar:
            ty = a.ty
            if key is not None:
                key.append((t, id(ty)))
        elif t is Tuple:
            aty = a.ty
            if type(aty) is TupleType and len(aty.fields) == len(a.fields):  # type: ignore[attr-defined]
                # fast path: a tuple of variables annotated with their very types
                afields = aty.fields
                classes = []
                for f, fty in zip(a.fields, afields):  # type: ignore[attr-defined]
                    tf = type(f)
                    if (tf is not Var and tf is not DataflowVar) or f.ty is not fty:
                        break
                    classes.append(tf)
                else:
                    if key is not None:
                        key.append((Tuple, id(aty), tuple(classes)))
                    arg_types.append(aty)
                    continue
            if seen is not None and id(a) in seen:
                ty, part = seen[id(a)]
            else:
                fields: list[Type | None] = []
                classes: list[type] | None = []
                for f in a.fields:
                    tf = type(f)
                    if tf is Var or tf is DataflowVar:
                        fields.append(f.ty)
                        if classes is not None:
                            classes.append(tf)
                        continue
                    ft = _leaf_type(f, gtypes)
                    if ft is _SLOW:
                        return _SLOW
                    fields.append(ft)
                    classes = None  # a constant's value may be read: key by identity
                aty = a.ty
                if type(aty) is TupleType and _same_objects(aty.fields, fields):
                    tt = aty  # annotated with its fields' very types
                else:
                    tt = None if any(x is None for x in fields) else TupleType(tuple(fields))
                if aty is not None and tt is not None and not types_compatible(aty, tt):
                    found.append(f"{_describe(a)} is annotated {aty} but its type is {tt}")
                ty = tt if tt is not None else aty
                if tt is None:  # the tuple's type is its annotation: not memoized
                    part = None
                elif classes is not None:
                    part = (Tuple, id(tt), tuple(classes))
                else:
                    part = (Tuple, id(tt), tuple(map(id, a.fields)))
                if seen is None:
                    seen = {}
                seen[id(a)] = (ty, part)
            if key is not None:
                if part is None:
                    key = None
                else:
                    key.append(part)
        elif t in LEAF_TYPES:
            ty = a.ty
            if key is not None:
                key.append((t, a.symbol, ty) if t is ExternFunc else id(a))  # type: ignore[attr-defined]
        elif t is GlobalVar:
            ty = a.ty if a.ty is not None else gtypes.get(a.name_hint)
            key = None
        else:
            return _SLOW
        if ty is None:
            known = False
        arg_types.append(ty)
    # _infer_one of a call of an op
    ty = None
    opdef = Op.definitions.get(op.name)
    if opdef is not None and known:
        k = tuple(key) if key is not None else None
        hit = memo.get(k) if k is not None else None  # type: ignore[union-attr]
        if hit is not None:
            ty = hit
        else:
            try:
                ty, _ = opdef.infer_call(e, tuple(arg_types))
            except _INFER_ERRORS as err:
                found.append(f"the call of op {op.name!r} is ill-typed: {err}")
                ty = None
            if k is not None and ty is not None:
                memo[k] = ty  # type: ignore[index]
    ety = e.ty
    if ety is not None and ty is not None and ety is not ty:
        if ety == ty:
            ty = ety  # the annotation's object (the binding's variable has it, usually)
            if k is not None and memo.get(k) is not None:  # type: ignore[union-attr]
                memo[k] = ety  # (an equal type: the next such call compares by identity)
        elif not types_compatible(ety, ty):
            found.append(f"{_describe(e)} is annotated {ety} but its type is {ty}")
    return ty if ty is not None else ety


def _same_objects(a: tuple, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


def _infer(
    expr: Expr, gtypes: dict[str, Type], found: list[str], memo: dict | None = None
) -> Type | None:
    """The type of ``expr`` inferred bottom-up from the known types of its leaves;
    problems are appended to ``found``.  None when it cannot be known."""
    fast = _infer_flat_call(expr, gtypes, found, memo)
    if fast is not _SLOW:
        return fast  # type: ignore[no-any-return]
    types: dict[int, Type | None] = {}
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        e, expanded = stack.pop()
        if id(e) in types:
            continue
        kids = _expr_children(e)
        if kids and not expanded:
            stack.append((e, True))
            stack.extend((k, False) for k in reversed(kids) if id(k) not in types)
            continue
        ty = _infer_one(e, [types.get(id(k)) for k in kids], gtypes, found)
        if e.ty is not None and ty is not None and not types_compatible(e.ty, ty):
            found.append(f"{_describe(e)} is annotated {e.ty} but its type is {ty}")
        types[id(e)] = ty if ty is not None else (e.ty if not isinstance(e, Op) else None)
    return types[id(expr)]


def _describe(e: Expr) -> str:
    if isinstance(e, Call):
        callee = e.op
        if isinstance(callee, Op):
            return f"the call of op {callee.name!r}"
        if isinstance(callee, GlobalVar):
            return f"the call of function {callee.name_hint!r}"
        return "a call"
    return f"a {type(e).__name__}"


def _infer_one(
    e: Expr, kid_types: list[Type | None], gtypes: dict[str, Type], found: list[str]
) -> Type | None:
    if isinstance(e, GlobalVar):
        return e.ty if e.ty is not None else gtypes.get(e.name_hint)
    if isinstance(e, Var | Constant | ShapeExpr | PrimValue | StringImm | ExternFunc | Function):
        return e.ty
    if isinstance(e, Op):
        return None
    if isinstance(e, SeqExpr):
        return _seq_type(e)
    if isinstance(e, Call):
        callee = e.op
        arg_types = tuple(kid_types[1:])
        if isinstance(callee, Op):
            opdef = Op.definitions.get(callee.name)
            if opdef is None or any(t is None for t in arg_types):
                return None
            try:
                ty, _ = opdef.infer_call(e, arg_types)
            except _INFER_ERRORS as err:
                found.append(f"the call of op {callee.name!r} is ill-typed: {err}")
                return None
            return ty
        fty = kid_types[0]
        if isinstance(fty, FuncType):
            cname = getattr(callee, "name_hint", "function")
            if len(fty.params) != len(arg_types):
                found.append(
                    f"the call of {cname!r} passes {len(arg_types)} arguments, "
                    f"it takes {len(fty.params)}"
                )
                return fty.ret
            for i, (p, a) in enumerate(zip(fty.params, arg_types)):
                if not types_compatible(p, a):
                    found.append(f"argument {i} of the call of {cname!r} has type {a}, "
                                 f"expected {p}")
            return fty.ret
        return None
    if isinstance(e, Tuple):
        if any(t is None for t in kid_types):
            return None
        return TupleType(tuple(kid_types))  # type: ignore[arg-type]
    if isinstance(e, TupleGetItem):
        t = kid_types[0]
        if t is None:
            return None
        if not isinstance(t, TupleType):
            found.append(f"tuple item {e.index} taken from a value of type {t}, not a tuple")
            return None
        if not -len(t.fields) <= e.index < len(t.fields):
            found.append(f"tuple index {e.index} is out of range for {t}")
            return None
        return t.fields[e.index]
    if isinstance(e, If):
        ct = kid_types[0]
        if isinstance(ct, TensorType) and ct.shape not in (None, ()):
            found.append(f"the condition of if must be a scalar, got {ct}")
        elif ct is not None and not isinstance(ct, TensorType | PrimType):
            found.append(f"the condition of if must be a boolean scalar, got {ct}")
        return join_types(_seq_type(e.then_branch), _seq_type(e.else_branch))
    return e.ty


# ------------------------------------------------------------------ optimization: structure


_VALUE_KINDS = (Call, Tuple, TupleGetItem, If)

_PLAIN_ATOMS = frozenset({Constant, ShapeExpr, PrimValue, StringImm, ExternFunc})
"""Atoms that use no variable and name no function or op (nothing to check)."""


class _StructureCheck:
    """The optimization-phase invariants of one function, in one scope-aware walk."""

    def __init__(self, fname: str, func: Function, mod: IRModule, out: list[Violation]) -> None:
        self.fname = fname
        self.func = func
        self.mod = mod
        self.out = out
        self.binding: str | None = None
        self.live: set[int] = set()
        self.ever: set[int] = set()
        self.dataflow_dead: set[int] = set()
        self.pure_ops: dict[Op, bool] = {}  # registered op -> whether it is pure
        # scopes: ("lexical" | "dataflow", list of var ids defined in it)
        self.scopes: list[tuple[str, list[int]]] = []

    def report(self, message: str) -> None:
        self.out.append(Violation("optimization", self.fname, self.binding, message))

    # -------------------------------------------------------------- scopes
    def define(self, var: Var, in_dataflow: bool) -> None:
        if id(var) in self.ever:
            self.report(f"variable {var.name_hint!r} is defined more than once; "
                        "every binding must define a fresh variable")
        self.ever.add(id(var))
        self.live.add(id(var))
        if isinstance(var, DataflowVar) and in_dataflow:
            self.scopes[-1][1].append(id(var))
        else:
            for kind, ids in reversed(self.scopes):
                if kind == "lexical":
                    ids.append(id(var))
                    break

    def close_scope(self) -> None:
        kind, ids = self.scopes.pop()
        for i in ids:
            self.live.discard(i)
            if kind == "dataflow":
                self.dataflow_dead.add(i)

    def use(self, var: Var) -> None:
        if id(var) in self.live:
            return
        if id(var) in self.dataflow_dead:
            self.report(f"dataflow variable {var.name_hint!r} is used outside the dataflow "
                        "block that defines it; bind it with emit_output (a Var) instead")
        elif id(var) in self.ever:
            self.report(f"variable {var.name_hint!r} is used outside the scope (an if "
                        "branch) that defines it")
        else:
            self.report(f"variable {var.name_hint!r} is used before it is defined "
                        "(or is not defined in this function)")

    def use_atom(self, e: Expr, what: str, index: int | None = None) -> None:
        """Check that ``e`` is an atom and record the variables it uses (``what`` names
        it in a message: a template of ``index``, when given)."""
        t = type(e)
        if t is Var or t is DataflowVar:  # fast path for the common atom
            if id(e) not in self.live:
                self.use(e)
            return
        if t in _PLAIN_ATOMS:
            return
        if t is Tuple:  # fast path: a tuple of variables and plain atoms
            live = self.live
            for f in e.fields:  # type: ignore[attr-defined]
                tf = type(f)
                if tf is Var or tf is DataflowVar:
                    continue
                if tf not in _PLAIN_ATOMS:
                    break
            else:
                # (in the order of the general walk below: last field first)
                for f in reversed(e.fields):  # type: ignore[attr-defined]
                    if id(f) not in live and (type(f) is Var or type(f) is DataflowVar):
                        self.use(f)
                return
        if not is_atom(e):
            name = what if index is None else what.format(index)
            self.report(f"{name} is a nested {type(e).__name__}, not an atom: the function "
                        "is not in A-normal form; run Normalize")
            return
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Tuple):
                stack.extend(x.fields)
            elif isinstance(x, Var):
                self.use(x)
            elif isinstance(x, GlobalVar):
                self.check_global(x)
            elif isinstance(x, Op):
                self.check_op(x)

    def check_global(self, gv: GlobalVar) -> None:
        if gv.name_hint not in self.mod:
            close = difflib.get_close_matches(gv.name_hint, list(self.mod), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            self.report(f"GlobalVar {gv.name_hint!r} names no function of the module{hint}")

    def check_op(self, op: Op) -> bool:
        if op.is_registered:
            return True
        close = difflib.get_close_matches(op.name, list(Op.definitions), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        self.report(f"op {op.name!r} is not registered{hint}")
        return False

    # -------------------------------------------------------------- walk
    def run(self) -> None:
        func = self.func
        self.scopes.append(("lexical", []))
        for p in func.params:
            self.binding = None
            if isinstance(p, DataflowVar):
                self.report(f"parameter {p.name_hint!r} is a DataflowVar; parameters are Vars")
            if p.ty is None:
                self.report(f"parameter {p.name_hint!r} has no type")
            self.define(p, False)
        if not isinstance(func.body, SeqExpr):
            self.report("the function body is not a SeqExpr of binding blocks; run Normalize")
            self.use_atom(func.body, "the function result")
            return
        # Tasks: ("seq", SeqExpr) | ("binding", Binding, dataflow) | ("define", Var, df)
        #        | ("close",) | ("open", kind) | ("result", Expr) | ("block", BindingBlock)
        tasks: list[tuple] = [("close",), ("seq", func.body)]
        while tasks:
            task = tasks.pop()
            kind = task[0]
            if kind == "binding":
                self.check_binding(task[1], task[2], tasks)
            elif kind == "bindings":
                # ("bindings", block, start, dataflow): check the bindings from
                # ``start`` on; an If stops the run (its branches are checked
                # before the bindings after it, which are pushed as a new task).
                # The common binding is checked by flat_bindings, any other by
                # check_binding.
                bindings, df = task[1].bindings, task[3]
                i, n = task[2], len(bindings)
                while True:
                    i = self.flat_bindings(bindings, i, df)
                    if i >= n:
                        break
                    b = bindings[i]
                    if isinstance(b.value, If):
                        if i + 1 < n:
                            tasks.append(("bindings", task[1], i + 1, df))
                        self.check_binding(b, df, tasks)
                        break
                    self.check_binding(b, df, tasks)
                    i += 1
            elif kind == "seq":
                seq: SeqExpr = task[1]
                tasks.append(("close",))
                tasks.append(("result", seq.body))
                for block in reversed(seq.blocks):
                    df = isinstance(block, DataflowBlock)
                    if df:
                        tasks.append(("close",))
                    if isinstance(block, BindingBlock) and block.bindings:
                        tasks.append(("bindings", block, 0, df))
                    else:
                        for b in reversed(block.bindings):
                            tasks.append(("binding", b, df))
                    if df:
                        tasks.append(("open", "dataflow"))
                    tasks.append(("block", block))
                tasks.append(("open", "lexical"))
            elif kind == "open":
                self.scopes.append((task[1], []))
            elif kind == "close":
                self.close_scope()
            elif kind == "define":
                self.binding = task[1].name_hint
                self.define(task[1], task[2])
            elif kind == "result":
                self.binding = None
                self.use_atom(task[1], "the result of a sequence")
            elif kind == "block":
                block = task[1]
                if not isinstance(block, BindingBlock):
                    self.binding = None
                    self.report(f"a SeqExpr holds a {type(block).__name__}, not a binding block")

    def flat_bindings(self, bindings: tuple[Binding, ...], start: int, df: bool) -> int:
        """Check ``bindings`` from ``start`` on while they are the common binding of
        A-normal form that breaks no rule: a typed, fresh variable (a DataflowVar
        only in a dataflow block) bound to a call of a registered op (a pure one in a
        dataflow block) on live variables, plain atoms and tuples of these.  Returns
        the index of the first binding that is not (for :meth:`check_binding`, which
        checks it and reports what is wrong)."""
        live, ever, pure_ops = self.live, self.ever, self.pure_ops
        own = self.scopes[-1][1]  # where a dataflow variable of a dataflow block goes
        lexical = next(ids for kind, ids in reversed(self.scopes) if kind == "lexical")
        n = len(bindings)
        i = start
        while i < n:
            b = bindings[i]
            var, value = b.var, b.value
            tv = type(var)
            if type(b) is not VarBinding or type(value) is not Call or var.ty is None or \
                    id(var) in ever or (tv is not Var and (tv is not DataflowVar or not df)):
                return i
            op = value.op
            if type(op) is not Op:
                return i
            pure = pure_ops.get(op)
            if pure is None or (df and not pure):
                return i
            for a in value.args:
                ta = type(a)
                if ta is Var or ta is DataflowVar:
                    if id(a) not in live:
                        return i
                elif ta is Tuple:
                    for f in a.fields:  # type: ignore[attr-defined]
                        tf = type(f)
                        if tf is Var or tf is DataflowVar:
                            if id(f) not in live:
                                return i
                        elif tf not in _PLAIN_ATOMS:
                            return i
                elif ta not in _PLAIN_ATOMS:
                    return i
            vid = id(var)
            ever.add(vid)
            live.add(vid)
            (own if tv is DataflowVar else lexical).append(vid)
            i += 1
        return i

    def check_binding(self, b: Binding, in_dataflow: bool, tasks: list[tuple]) -> None:
        var, value = b.var, b.value
        self.binding = var.name_hint
        if var.ty is None:
            self.report("the binding has no type; run Normalize (or give the inputs types)")
        if isinstance(var, DataflowVar) and not in_dataflow:
            self.report("a DataflowVar is bound outside a dataflow block")
        if isinstance(b, MatchCast):
            self.use_atom(value, "the value of match_cast")
            self.define(var, in_dataflow)
            return
        if isinstance(value, Function):
            self.report("a nested function; run LambdaLift to lift it to the module")
            self.define(var, in_dataflow)
            return
        if isinstance(value, Call):
            self.check_call(value, in_dataflow)
        elif isinstance(value, Tuple):
            for i, f in enumerate(value.fields):
                self.use_atom(f, "tuple field {}", i)
        elif isinstance(value, TupleGetItem):
            self.use_atom(value.tuple_value, "the tuple of a tuple item")
        elif isinstance(value, If):
            if in_dataflow:
                self.report("an if inside a dataflow block; dataflow blocks are control-free")
            self.use_atom(value.cond, "the condition of if")
            tasks.append(("define", var, in_dataflow))
            for branch in (value.else_branch, value.then_branch):
                if isinstance(branch, SeqExpr):
                    tasks.append(("seq", branch))
                else:
                    self.report("an if branch is not a SeqExpr; run Normalize")
            return
        elif is_atom(value):
            self.use_atom(value, "the value")
        else:
            self.report(f"the value is a {type(value).__name__}; in A-normal form a binding "
                        "holds a call, tuple, tuple item, if or atom; run Normalize")
        self.define(var, in_dataflow)

    def check_call(self, call: Call, in_dataflow: bool) -> None:
        callee = call.op
        pure: bool | None = None
        if type(callee) is Op:  # the common callee: a registered op's purity, remembered
            pure = self.pure_ops.get(callee)
            if pure is None and self.check_op(callee):
                pure = self.pure_ops[callee] = callee.definition.pure
        elif isinstance(callee, Op):
            if self.check_op(callee):
                pure = callee.definition.pure
        elif isinstance(callee, GlobalVar):
            self.check_global(callee)
            target = self.mod.functions.get(callee.name_hint)
            pure = getattr(target, "pure", True) if target is not None else None
        elif isinstance(callee, Var):
            self.use(callee)
        elif isinstance(callee, ExternFunc):
            pure = False
        else:
            self.report(f"the callee is a nested {type(callee).__name__}, not an atom; "
                        "run Normalize")
        live = self.live
        for i, a in enumerate(call.args):
            t = type(a)
            if t is Var or t is DataflowVar:
                if id(a) not in live:
                    self.use(a)
            else:
                self.use_atom(a, "argument {} of the call", i)
        if in_dataflow and pure is False:
            what = callee.name if isinstance(callee, Op) else getattr(
                callee, "name_hint", getattr(callee, "symbol", "callee"))
            self.report(f"the impure call of {what!r} is inside a dataflow block; move it "
                        "to an ordinary binding block")
        elif in_dataflow and isinstance(callee, Var):
            self.report(f"a call of variable {callee.name_hint!r} inside a dataflow block; "
                        "its purity is unknown, move it to an ordinary binding block")


# ------------------------------------------------------------------ lowering, build


def _check_lowered(
    fname: str,
    func: Function,
    out: list[Violation],
    build: bool,
    bindings: list[Binding] | None = None,
) -> None:
    allowed = _allowed_ops(3 if build else 2)
    assert allowed is not None
    for b in (b for b, _ in iter_bindings(func)) if bindings is None else bindings:
        v = b.value
        if type(v) is Call:  # fast path: an allowed op on leaves
            op = v.op
            if type(op) is Op and op.name in allowed:
                for a in v.args:
                    ta = type(a)
                    if ta is Call:
                        break
                    if ta is Tuple:
                        for f in a.fields:
                            tf = type(f)
                            if tf is Call or tf is Tuple:
                                break
                        else:
                            continue
                        break
                else:
                    continue
        stack: list[Expr] = [v]
        while stack:
            x = stack.pop()
            if isinstance(x, Call):
                if isinstance(x.op, Op) and x.op.name not in allowed:
                    out.append(Violation(
                        "lowering", fname, b.var.name_hint,
                        f"op {x.op.name!r} is left after legalization; only "
                        f"{', '.join(sorted(allowed))} may be called in the "
                        f"{'build' if build else 'lowering'} phase (run LegalizeOps, or "
                        "register a legalization for the op)",
                    ))
                stack.extend(x.args)
            elif isinstance(x, Tuple):
                stack.extend(x.fields)


def _dataflow_left(fname: str, block: DataflowBlock, out: list[Violation]) -> None:
    first = block.bindings[0].var.name_hint if block.bindings else None
    out.append(Violation(
        "build", fname, first,
        "a dataflow block is left in the build phase; the pass that leaves dataflow form "
        "must run before this point",
    ))


def _check_no_dataflow(fname: str, func: Function, out: list[Violation],
                       nested: bool = True) -> None:
    if not nested:  # the function body is the only sequence
        for block in func.body.blocks:  # type: ignore[attr-defined]
            if isinstance(block, DataflowBlock):
                _dataflow_left(fname, block, out)
        return
    stack: list[Expr] = [func.body]
    while stack:
        e = stack.pop()
        if not isinstance(e, SeqExpr):
            stack.extend(nested_bodies(e, True))
            continue
        for block in e.blocks:
            if isinstance(block, DataflowBlock):
                _dataflow_left(fname, block, out)
            for b in block.bindings:
                if not is_flat(b.value):
                    stack.extend(nested_bodies(b.value, True))
        stack.extend(nested_bodies(e.body, True))


__all__ = [
    "Violation",
    "WellFormedError",
    "calls_any",
    "check_well_formed",
    "iter_bindings",
    "phase_checks",
    "register_phase_check",
    "register_phase_ops",
    "scan_flat",
    "well_formed",
]
