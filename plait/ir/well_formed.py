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
from itertools import repeat
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
        codegen = func.attrs.get("compiler")
        if level == 0:
            bindings, nested = collect_bindings(func)
            _check_types(name, func, gtypes, out, bindings, nested)
            continue
        # one walk checks the structure and, while the function is flat, the types and
        # the ops of each binding it passes (reported in this order: types, structure,
        # ops); a function with something nested gets walks of their own
        typed: list[Violation] = []
        structure: list[Violation] = []
        lowered: list[Violation] | None = []
        types = _TypeCheck(name, gtypes, typed) if _FAST_ACCEPT else None
        check = _StructureCheck(name, func, mod, structure, types,
                                allowed if codegen is None else None, level >= 3, lowered)
        check.run()
        if types is not None and check.fused:
            bindings, nested = None, False
            types.returns(func, None, False)
        else:
            bindings, nested = collect_bindings(func)
            typed, lowered = [], None
            _check_types(name, func, gtypes, typed, bindings, nested)
        out += typed
        out += structure
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
            if lowered is not None:
                out += lowered
            else:
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
"""Whether :func:`well_formed` checks the types and ops of a flat function in its
structure walk (one walk for every invariant) rather than in walks of their own (tests
turn it off to compare the two)."""


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


# ------------------------------------------------------------------ ingestion: types


_INFER_ERRORS = (TypeError, ValueError, KeyError, IndexError)


def _accepts_common(
    func: Function, mod: IRModule, gtypes: dict[str, Type], level: int,
    allowed: frozenset[str] | None,
) -> bool:
    """True when one walk (:class:`_StructureCheck` with the type and op checks) checks
    every invariant of ``func`` at phase index ``level`` (>= 1), ``func`` being flat,
    and finds none broken (what tests compare with the separate walks)."""
    found: list[Violation] = []
    types = _TypeCheck("", gtypes, found)
    check = _StructureCheck("", func, mod, found, types, allowed, level >= 3, found)
    check.run()
    if not check.fused:
        return False
    types.returns(func, None, False)
    if level >= 3 and any(isinstance(b, DataflowBlock) for b in func.body.blocks):  # type: ignore[attr-defined]
        return False
    return not found


class _TypeCheck:
    """The ingestion-phase invariants of one function, binding by binding
    (:meth:`binding`), then its declared return types (:meth:`returns`)."""

    def __init__(self, fname: str, gtypes: dict[str, Type], out: list[Violation]) -> None:
        self.fname = fname
        self.gtypes = gtypes
        self.out = out
        self.memo: dict = {}  # (see _infer_flat_call)
        self.found: list[str] = []

    def binding(self, b: Binding) -> Type | None:
        """The value's type, inferred again from its operands, fits the variable's;
        returns that type (None: unknown)."""
        found = self.found
        ty = _infer_flat_call(b.value, self.gtypes, found, self.memo)  # (the common value)
        if ty is _SLOW:
            ty = _infer(b.value, self.gtypes, found, self.memo)
        if found:
            name = b.var.name_hint
            for msg in found:
                self.out.append(Violation("ingestion", self.fname, name, msg))
            self.found = []
        if ty is None or ty is b.var.ty or isinstance(b, MatchCast):
            return ty  # type: ignore[no-any-return]
        if not types_compatible(b.var.ty, ty):
            self.out.append(Violation(
                "ingestion", self.fname, b.var.name_hint,
                f"the variable is declared {b.var.ty} but its value has type {ty}",
            ))
        return ty  # type: ignore[no-any-return]

    def returns(self, func: Function, bindings: list[Binding] | None, nested: bool) -> None:
        """Each function's body (``func``'s, and the nested ones' when ``nested``) fits
        its declared return type."""
        for f in functions_in(func, bindings) if nested else (func,):
            body_ty = _seq_type(f.body)
            if f.ret_ty is not None and not types_compatible(f.ret_ty, body_ty):
                self.out.append(Violation(
                    "ingestion", self.fname, None,
                    f"the function body has type {body_ty}, but the declared return type "
                    f"is {f.ret_ty}",
                ))


def _check_types(
    fname: str,
    func: Function,
    gtypes: dict[str, Type],
    out: list[Violation],
    bindings: list[Binding] | None = None,
    nested: bool = True,
) -> None:
    """The ingestion-phase invariants of ``func``, in a walk of their own."""
    if bindings is None:
        bindings = [b for b, _ in iter_bindings(func)]
    check = _TypeCheck(fname, gtypes, out)
    for b in bindings:
        check.binding(b)
    check.returns(func, bindings, nested)


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
    an op with the same attributes on arguments of the same types (a flat key whose
    parts start with a class, or are a tuple or an identity): variables by their class
    and the identity of their type, a tuple of variables by its type's identity
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
                key.append(t)
                key.append(id(ty))
        elif t is Tuple:
            aty = a.ty
            if type(aty) is TupleType and len(aty.fields) == len(a.fields):  # type: ignore[attr-defined]
                # fast path: a tuple of variables annotated with their very types
                dataflow = 0  # bit i: field i is a DataflowVar
                bit = 1
                for f, fty in zip(a.fields, aty.fields):  # type: ignore[attr-defined]
                    tf = type(f)
                    if (tf is not Var and tf is not DataflowVar) or f.ty is not fty:
                        break
                    if tf is DataflowVar:
                        dataflow |= bit
                    bit <<= 1
                else:
                    if key is not None:
                        key.append(Tuple)
                        key.append(id(aty))
                        key.append(dataflow)
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
                if t is ExternFunc:
                    key.append(t)
                    key.append(a.symbol)  # type: ignore[attr-defined]
                    # (every ObjectType equals every other: its class keys it without a
                    # hash computed in Python per call)
                    key.append(ObjectType if type(ty) is ObjectType else ty)
                else:
                    key.append(id(a))
        elif t is GlobalVar:
            ty = a.ty if a.ty is not None else gtypes.get(a.name_hint)
            key = None
        else:
            return _SLOW
        if ty is None:
            known = False
        arg_types.append(ty)
    # _infer_one of a call of an op (a type in ``memo`` was inferred by a registered op)
    ty = None
    k = tuple(key) if key is not None and known else None
    hit = memo.get(k) if k is not None else None  # type: ignore[union-attr]
    opdef = Op.definitions.get(op.name) if hit is None else None
    if hit is not None:
        ty = hit
    elif opdef is not None and known:
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


_PLAIN_ATOMS = frozenset({Constant, ShapeExpr, PrimValue, StringImm, ExternFunc})
"""Atoms that use no variable and name no function or op (nothing to check)."""


def _var_key(var: Var) -> int:
    """What a variable adds to the key of a call's type check (see
    :meth:`_StructureCheck.flat_bindings`): its type's identity, negated for a
    DataflowVar (the class is part of what the op's inference sees)."""
    return -id(var.ty) if type(var) is DataflowVar else id(var.ty)


class _StructureCheck:
    """The optimization-phase invariants of one function, in one scope-aware walk.

    Given ``types`` (and ``allowed``, the ops of a lowered phase), the walk also checks
    each binding's type and ops as it passes it, while the function is flat (nothing
    nested in a binding value or the result: :attr:`fused` stays true): then its
    bindings are walked once for every invariant.  A function with something nested
    is left to the walks of :func:`_check_types` and :func:`_check_lowered`, whose
    order of bindings (nested bodies last) is not this walk's."""

    def __init__(self, fname: str, func: Function, mod: IRModule, out: list[Violation],
                 types: _TypeCheck | None = None, allowed: frozenset[str] | None = None,
                 build: bool = False, lowered: list[Violation] | None = None) -> None:
        self.types = types
        self.allowed = allowed
        self.build = build
        self.lowered = lowered
        self.fused = types is not None
        self.checked: set[tuple] = set()  # (see flat_bindings)
        self.fast_ops: dict[Op, bool] = {}  # registered ops ``allowed`` names: purity
        self.fast_pure: dict[Op, bool] = {}  # those of them that are pure
        self.fname = fname
        self.func = func
        self.mod = mod
        self.out = out
        self.binding: str | None = None
        # every variable defined so far (variables compare by identity): its key in the
        # type check's memo (:func:`_var_key`) while it is in scope, None after
        self.seen: dict[Var, int | None] = {}
        self.dataflow_dead: set[Var] = set()
        self.pure_ops: dict[Op, bool] = {}  # registered op -> whether it is pure
        # scopes: ("lexical" | "dataflow", list of the variables defined in it)
        self.scopes: list[tuple[str, list[Var]]] = []

    def report(self, message: str) -> None:
        self.out.append(Violation("optimization", self.fname, self.binding, message))

    # -------------------------------------------------------------- scopes
    def define(self, var: Var, in_dataflow: bool) -> None:
        if var in self.seen:
            self.report(f"variable {var.name_hint!r} is defined more than once; "
                        "every binding must define a fresh variable")
        self.seen[var] = _var_key(var)
        if isinstance(var, DataflowVar) and in_dataflow:
            self.scopes[-1][1].append(var)
        else:
            for kind, ids in reversed(self.scopes):
                if kind == "lexical":
                    ids.append(var)
                    break

    def close_scope(self) -> None:
        kind, defined = self.scopes.pop()
        self.seen.update(zip(defined, repeat(None)))  # out of scope
        if kind == "dataflow":
            self.dataflow_dead.update(defined)

    def use(self, var: Var) -> None:
        if self.seen.get(var) is not None:
            return
        if var in self.dataflow_dead:
            self.report(f"dataflow variable {var.name_hint!r} is used outside the dataflow "
                        "block that defines it; bind it with emit_output (a Var) instead")
        elif var in self.seen:
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
            if self.seen.get(e) is None:
                self.use(e)
            return
        if t in _PLAIN_ATOMS:
            return
        if t is Tuple:  # fast path: a tuple of variables and plain atoms
            live = self.seen
            for f in e.fields:  # type: ignore[attr-defined]
                tf = type(f)
                if tf is Var or tf is DataflowVar:
                    continue
                if tf not in _PLAIN_ATOMS:
                    break
            else:
                # (in the order of the general walk below: last field first)
                for f in reversed(e.fields):  # type: ignore[attr-defined]
                    if live.get(f) is None and (type(f) is Var or type(f) is DataflowVar):
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
        if self.fused and (type(func.body) is not SeqExpr or not is_flat(func.body.body)):
            self.fused = False
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
        dataflow block; one the phase allows, when the walk checks the ops) on live
        variables, plain atoms and tuples of these, whose type (when the walk checks
        types) is checked as it passes.  Returns the index of the first binding that
        is not (for :meth:`check_binding`, which checks it and reports what is
        wrong)."""
        seen, pure_ops = self.seen, self.pure_ops
        types = self.types if self.fused else None
        checked, fast_ops, fast_pure = self.checked, self.fast_ops, self.fast_pure
        fast = fast_pure if df else fast_ops  # the ops this block may call, seen before
        allowed = self.allowed if types is not None else None
        own = self.scopes[-1][1]  # where a dataflow variable of a dataflow block goes
        lexical: list[Var] | None = next(
            ids for kind, ids in reversed(self.scopes) if kind == "lexical")
        if len(self.scopes) > 1 and lexical is self.scopes[1][1]:
            # the scope of the function body's own bindings closes when the walk ends,
            # with nothing checked after it: its variables need no list to leave by
            lexical = None
        live = seen.get  # a variable's key while it is in scope, else None
        n = len(bindings)
        for i in range(start, n):
            b = bindings[i]
            var = b.var
            value = b.value
            tv = type(var)
            vty = var.ty
            if type(b) is not VarBinding or type(value) is not Call or vty is None or \
                    var in seen or (tv is not Var and (tv is not DataflowVar or not df)):
                return i
            op = value.op
            if fast.get(op) is None:  # (it holds only objects of class Op)
                # first seen here: a registered op (its purity known, from
                # check_call) that the phase allows (and a pure one, in a dataflow
                # block), else the binding is checked by check_binding (which reports
                # what is wrong)
                if type(op) is not Op:
                    return i
                pure = pure_ops.get(op)
                if pure is None or (allowed is not None and op.name not in allowed):
                    return i
                fast_ops[op] = pure
                if pure:
                    fast_pure[op] = True
                elif df:
                    return i
            # ``key``: what the call's type check depends on -- the op, its attributes,
            # the variable's and the call's types, each variable argument's class and
            # type (its ``live`` entry, :func:`_var_key`), each tuple's type and
            # length and its fields', an extern's symbol and type, another atom itself
            # -- all by identity: the key of ``checked``, unless ``memo`` is false (a
            # call whose check is not kept there)
            vkey = -id(vty) if tv is DataflowVar else id(vty)
            key = [op, id(value.attrs), vkey, id(value.ty)]
            memo = True
            for a in value.args:
                k = live(a)  # (only variables are in ``seen``)
                if k is not None:
                    key.append(k)
                    continue
                ta = type(a)
                if ta is Tuple:
                    fields = a.fields  # type: ignore[attr-defined]
                    key += (Tuple, id(a.ty), len(fields))
                    for f in fields:
                        k = live(f)
                        if k is not None:
                            key.append(k)
                        elif type(f) in _PLAIN_ATOMS:
                            memo = False
                        else:
                            return i  # a variable not live, or no atom
                elif ta is ExternFunc:
                    ety = a.ty
                    # (every ObjectType equals every other: the one part of a key that
                    # is a string stands for an extern of that type, keyed without a
                    # hash computed in Python per call)
                    if type(ety) is ObjectType:
                        key.append(a.symbol)  # type: ignore[attr-defined]
                    else:
                        key += (ExternFunc, a.symbol, ety)  # type: ignore[attr-defined]
                elif ta in _PLAIN_ATOMS:
                    key.append(ta)
                    key.append(id(a))
                else:
                    return i  # a variable not live, or no atom
            seen[var] = vkey
            if tv is DataflowVar:
                own.append(var)
            elif lexical is not None:
                lexical.append(var)
            if types is not None:  # (a call of an op on atoms: flat)
                # the type check, unless it passed a binding of this call's key (it
                # would find nothing again).  The types' identities are part of the
                # key, not compared with what was inferred: equal types of distinct
                # objects (one op's result and another's, allocated alike) would
                # evict each other.
                if not memo:
                    types.binding(b)
                    continue
                k = tuple(key)
                if k not in checked:
                    found = len(types.out)
                    types.binding(b)
                    if len(types.out) == found:
                        checked.add(k)
        return n

    def check_binding(self, b: Binding, in_dataflow: bool, tasks: list[tuple]) -> None:
        var, value = b.var, b.value
        if self.fused:
            if is_flat(value):
                self.types.binding(b)  # type: ignore[union-attr]
                if self.allowed is not None:
                    _check_lowered_binding(self.fname, b, self.allowed, self.build,
                                           self.lowered)  # type: ignore[arg-type]
            else:
                self.fused = False
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
        live = self.seen
        for i, a in enumerate(call.args):
            t = type(a)
            if t is Var or t is DataflowVar:
                if live.get(a) is None:
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
    """The lowering-phase invariant of ``func``, in a walk of its own."""
    allowed = _allowed_ops(3 if build else 2)
    assert allowed is not None
    for b in (b for b, _ in iter_bindings(func)) if bindings is None else bindings:
        _check_lowered_binding(fname, b, allowed, build, out)


def _check_lowered_binding(fname: str, b: Binding, allowed: frozenset[str], build: bool,
                           out: list[Violation]) -> None:
    """No op but the ``allowed`` ones is called in the value of ``b``."""
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
                return
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
