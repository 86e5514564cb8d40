"""Walks over the bindings of graph functions, shared by the well-formedness checks
and the passes: every binding in order (:func:`iter_bindings`, into ``If`` branches and
nested functions), whether a function calls some ops (:func:`calls_any`,
:func:`scan_flat`), and the tests of what is nested in an expression.

Everything is iterative: a function of 100,000 bindings is walked without recursion.
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from .expr import (
    Binding,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
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


def iter_bindings(func: Function, into_functions: bool = True) -> Iterator[tuple[Binding, bool]]:
    """Every binding of ``func`` in order, with whether its block is a dataflow block,
    including bindings of ``If`` branches and (if ``into_functions``) of nested
    functions.  Iterative."""
    stack: list[Expr] = [func.body]
    while stack:
        e = stack.pop()
        if isinstance(e, SeqExpr):
            pending: list[Expr] = []
            for block in e.blocks:
                df = isinstance(block, DataflowBlock)
                for b in block.bindings:
                    yield b, df
                    v = b.value
                    if not is_flat(v):
                        pending.extend(nested_bodies(v, into_functions))
            pending.extend(nested_bodies(e.body, into_functions))
            stack.extend(reversed(pending))
        else:
            stack.extend(reversed(nested_bodies(e, into_functions)))


def calls_any(func: Function, ops: Container[str]) -> bool:
    """True if a binding of ``func`` (one of :func:`iter_bindings`: in any block,
    branch or nested function) calls an op named in ``ops``: a pass that rewrites only
    calls of some ops returns a function that has none as it is, with no walk.  A
    function with nothing nested (the usual one) is scanned in one loop."""
    found = scan_flat(func, ops)
    return calls_any_nested(func, ops) if found is None else found


def scan_flat(func: Function, ops: Container[str] = ()) -> bool | None:
    """One loop over the bindings of ``func``: True at the first binding that calls
    an op named in ``ops``; else None if anything is nested in the function (a
    sequence, function or If in a binding value or the result: ask
    :func:`iter_bindings`), False if nothing is (with no ``ops``: False means flat)."""
    body = func.body
    if type(body) is not SeqExpr or not is_flat(body.body):
        return None
    for block in body.blocks:
        for b in block.bindings:
            v = b.value
            if type(v) is Call and type(v.op) is Op:
                if v.op.name in ops and type(b) is VarBinding:  # type: ignore[attr-defined]
                    return True
                for a in v.args:  # (what is_flat reads)
                    ta = type(a)
                    if ta in NO_BODY_TYPES:
                        continue
                    if ta is not Tuple:
                        return None
                    for f in a.fields:  # type: ignore[attr-defined]
                        if type(f) not in NO_BODY_TYPES:
                            return None
            elif not is_flat(v):
                return None
    return False


def calls_any_nested(func: Function, ops: Container[str]) -> bool:
    """:func:`calls_any` by the general walk (:func:`iter_bindings`)."""
    for b, _ in iter_bindings(func):
        if type(b) is VarBinding:
            value = b.value
            if isinstance(value, Call):
                op = value.op
                if isinstance(op, Op) and op.name in ops:
                    return True
    return False


def collect_bindings(func: Function) -> tuple[list[Binding], bool]:
    """Every binding of ``func`` in order (those of ``iter_bindings(func)``), and whether
    anything is nested in the function (a binding value or a result that is not flat:
    a sequence, function or If inside).  When nothing is, ``func`` is the only function
    and its body the only sequence."""
    body = func.body
    if type(body) is not SeqExpr or not is_flat(body.body):
        return [b for b, _ in iter_bindings(func)], True
    out: list[Binding] = []
    for block in body.blocks:
        bindings = block.bindings
        for b in bindings:
            if not is_flat(b.value):
                return [b for b, _ in iter_bindings(func)], True
        out.extend(bindings)
    return out, False


LEAF_TYPES = frozenset({Var, DataflowVar, Constant, ShapeExpr, PrimValue, StringImm, ExternFunc})
"""Expression classes whose type is their annotation and that hold no expressions."""

NO_BODY_TYPES = LEAF_TYPES | {GlobalVar, Op}
"""Expression classes with no nested sequence or function inside."""


def is_flat(e: Expr) -> bool:
    """True if ``e`` is a leaf, or a call of a leaf on leaves and tuples of leaves
    (nothing nested inside: no sequence, function or If)."""
    t = type(e)
    if t is Call:
        if type(e.op) not in NO_BODY_TYPES:
            return False
        for a in e.args:
            ta = type(a)
            if ta in NO_BODY_TYPES:
                continue
            if ta is not Tuple:
                return False
            for f in a.fields:
                if type(f) not in NO_BODY_TYPES:
                    return False
        return True
    return t in NO_BODY_TYPES


def nested_bodies(e: Expr, into_functions: bool) -> list[Expr]:
    """SeqExprs and function bodies nested inside expression ``e`` (not crossing them)."""
    out: list[Expr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Call:  # fast path: push only what may hold a body (same order)
            if type(x.op) not in NO_BODY_TYPES:
                stack.append(x.op)
            stack.extend([a for a in x.args if type(a) not in NO_BODY_TYPES])
            continue
        if t is Tuple:
            stack.extend([f for f in x.fields if type(f) not in NO_BODY_TYPES])
            continue
        if t in NO_BODY_TYPES:
            continue
        if isinstance(x, SeqExpr):
            out.append(x)
        elif isinstance(x, Function):
            if into_functions:
                out.append(x.body)
        elif isinstance(x, If):
            stack.extend((x.cond, x.then_branch, x.else_branch))
        elif isinstance(x, Call):
            stack.append(x.op)
            stack.extend(x.args)
        elif isinstance(x, Tuple):
            stack.extend(x.fields)
        elif isinstance(x, TupleGetItem):
            stack.append(x.tuple_value)
    return out


def functions_in(
    func: Function, bindings: list[Binding] | None = None
) -> Iterator[Function]:
    """``func`` and every function nested inside it (at any depth); ``bindings`` are
    those of ``iter_bindings(func)`` if the caller has them."""
    yield func
    for b in (b for b, _ in iter_bindings(func)) if bindings is None else bindings:
        if is_flat(b.value):
            continue
        stack: list[Expr] = [b.value]
        while stack:
            x = stack.pop()
            if type(x) in NO_BODY_TYPES:
                continue
            if isinstance(x, Function):
                yield x
            elif isinstance(x, Call):
                stack.extend(x.args)
            elif isinstance(x, Tuple):
                stack.extend(x.fields)


__all__ = [
    "LEAF_TYPES",
    "NO_BODY_TYPES",
    "calls_any",
    "calls_any_nested",
    "collect_bindings",
    "functions_in",
    "is_flat",
    "iter_bindings",
    "nested_bodies",
    "scan_flat",
]
