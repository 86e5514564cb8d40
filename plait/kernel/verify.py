"""The kernel verifier: well-formedness of a :class:`~plait.kernel.ir.Kernel`.

:func:`verify_kernel` returns every problem as a message naming the kernel, the
statement and the buffer or variable; :func:`check_kernel` raises
:class:`KernelVerifyError` with all of them.  Checked:

* parameters are buffers, outputs are written, inputs are never written;
* every variable and buffer is defined before use, and defined once;
* every access has the buffer's rank and integer indices;
* dtypes agree (operands of arithmetic and comparisons, stored values, let values,
  conditions are bool, intrinsic signatures, loop variables and extents are integers);
* accesses stay within the declared shape where that can be decided statically: an index
  that is affine in the loop variables (such as ``i + 1`` or ``4 * i + j``) is checked
  over the loops' whole ranges against static dimensions and against size variables
  (``i + 1`` with ``i`` in ``range(n)`` indexing a dimension of size ``n`` is out of
  bounds).  Accesses under a condition (``if``, ``select``, ``and``/``or``) are not
  bounds-checked, because the condition may guard them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from plait.errors import PlaitError

from .dispatch import TypeTable
from .intrin import INTRINSICS
from .ir import (
    Add,
    Allocate,
    And,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    CmpOp,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Sub,
    Var,
    is_int_dtype,
)
from .text import node_text, stmt_summary


class KernelVerifyError(PlaitError, ValueError):
    """Raised by :func:`check_kernel`; ``errors`` lists every problem found."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        head = f"{len(errors)} problem(s) in kernel:" if len(errors) > 1 else ""
        super().__init__((head + "\n  " if head else "") + "\n  ".join(errors))


# An affine form: {key: coefficient} where the key None holds the constant term and
# other keys are ids of variables.
Affine = dict


def _aff_add(a: Affine, b: Affine, scale: int = 1) -> Affine:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + scale * v
        if out[k] == 0 and k is not None:
            del out[k]
    return out


def _aff_scale(a: Affine, c: int) -> Affine:
    return {k: v * c for k, v in a.items() if v * c != 0 or k is None}


@dataclass
class _Ctx:
    name: str
    errors: list[str] = field(default_factory=list)
    defined: set[int] = field(default_factory=set)   # ever defined (for "defined twice")
    scope: dict[int, Var | Buffer] = field(default_factory=dict)  # visible now
    size_vars: dict[int, Var] = field(default_factory=dict)
    loops: dict[int, For] = field(default_factory=dict)
    lets: dict[int, Affine | None] = field(default_factory=dict)
    params: dict[int, int] = field(default_factory=dict)  # buffer id -> param index
    num_inputs: int = 0
    stored: set[int] = field(default_factory=set)


def verify_kernel(k: Kernel, name: str = "kernel") -> list[str]:
    """Every problem of kernel ``k`` (named ``name`` in the messages); empty if none."""
    ctx = _Ctx(name)
    if not isinstance(k, Kernel):
        return [f"{name!r} is a {type(k).__name__}, not a Kernel"]
    if not 0 <= k.num_outputs <= len(k.params):
        ctx.errors.append(
            f"kernel {name!r}: num_outputs is {k.num_outputs} but it has {len(k.params)} "
            "parameter(s)"
        )
    ctx.num_inputs = len(k.params) - k.num_outputs
    for v in k.size_vars:
        ctx.size_vars[id(v)] = v
        ctx.scope[id(v)] = v
        ctx.defined.add(id(v))
    for i, p in enumerate(k.params):
        if not isinstance(p, Buffer):
            ctx.errors.append(f"kernel {name!r}: parameter {i} is a {type(p).__name__}, "
                              "not a Buffer")
            continue
        if id(p) in ctx.params:
            ctx.errors.append(f"kernel {name!r}: buffer {p.name_hint!r} is a parameter twice")
        ctx.params[id(p)] = i
        ctx.scope[id(p)] = p
        ctx.defined.add(id(p))
    if not isinstance(k.body, Stmt):
        ctx.errors.append(f"kernel {name!r}: the body is a {type(k.body).__name__}, "
                          "not a statement")
        return ctx.errors
    _stmt(k.body, ctx)
    for i, p in enumerate(k.params):
        if isinstance(p, Buffer) and i >= ctx.num_inputs and id(p) not in ctx.stored:
            ctx.errors.append(
                f"kernel {name!r}: output buffer {p.name_hint!r} is never written"
            )
    return ctx.errors


def check_kernel(k: Kernel, name: str = "kernel") -> None:
    """Raise :class:`KernelVerifyError` listing every problem of ``k``."""
    errors = verify_kernel(k, name)
    if errors:
        raise KernelVerifyError(errors)


# ---------------------------------------------------------------- statements


def _err(ctx: _Ctx, stmt: Stmt, message: str) -> None:
    ctx.errors.append(f"kernel {ctx.name!r}: {stmt_summary(stmt)}: {message}")


def _define(ctx: _Ctx, stmt: Stmt, node: Var | Buffer, what: str) -> None:
    if id(node) in ctx.defined:
        _err(ctx, stmt, f"{what} {node.name_hint!r} is defined twice")
    ctx.defined.add(id(node))
    ctx.scope[id(node)] = node


def _stmt(s: Stmt, ctx: _Ctx, guarded: bool = False) -> None:
    _CHECK_STMT[type(s)](s, ctx, guarded)


def _seq(s: Seq, ctx: _Ctx, guarded: bool) -> None:
    for child in s.stmts:
        _stmt(child, ctx, guarded)


def _for(s: For, ctx: _Ctx, guarded: bool) -> None:
    _expr(s.extent, ctx, s, guarded)
    if not is_int_dtype(s.extent.dtype):
        _err(ctx, s, f"loop extent must be an integer, got {s.extent.dtype}")
    if not isinstance(s.var, Var):
        _err(ctx, s, "the loop variable is not a Var")
        return
    if s.var.dtype != "int64":
        _err(ctx, s, f"loop variable {s.var.name_hint!r} must be int64, got {s.var.dtype}")
    _define(ctx, s, s.var, "loop variable")
    ctx.loops[id(s.var)] = s
    _stmt(s.body, ctx, guarded)
    ctx.loops.pop(id(s.var), None)
    ctx.scope.pop(id(s.var), None)


def _store(s: BufferStore, ctx: _Ctx, guarded: bool) -> None:
    _access(s.buffer, s.indices, ctx, s, guarded, "store to")
    _expr(s.value, ctx, s, guarded)
    if isinstance(s.buffer, Buffer):
        if s.value.dtype != s.buffer.dtype:
            _err(ctx, s, f"stores a {s.value.dtype} value into {s.buffer.dtype} buffer "
                         f"{s.buffer.name_hint!r}")
        idx = ctx.params.get(id(s.buffer))
        if idx is not None and idx < ctx.num_inputs:
            _err(ctx, s, f"stores into input buffer {s.buffer.name_hint!r}; inputs are "
                         "read-only (declare it an output)")
        ctx.stored.add(id(s.buffer))


def _let(s: Let, ctx: _Ctx, guarded: bool) -> None:
    _expr(s.value, ctx, s, guarded)
    if s.var.dtype != s.value.dtype:
        _err(ctx, s, f"variable {s.var.name_hint!r} is {s.var.dtype} but its value is "
                     f"{s.value.dtype}")
    _define(ctx, s, s.var, "variable")
    ctx.lets[id(s.var)] = _affine(s.value, ctx)
    _stmt(s.body, ctx, guarded)
    ctx.scope.pop(id(s.var), None)


def _if(s: IfThenElse, ctx: _Ctx, guarded: bool) -> None:
    _expr(s.cond, ctx, s, guarded)
    if s.cond.dtype != "bool":
        _err(ctx, s, f"the condition must be bool, got {s.cond.dtype}")
    _stmt(s.then_body, ctx, True)
    if s.else_body is not None:
        _stmt(s.else_body, ctx, True)


def _allocate(s: Allocate, ctx: _Ctx, guarded: bool) -> None:
    b = s.buffer
    for d in b.shape:
        if isinstance(d, Var) and id(d) not in ctx.scope:
            _err(ctx, s, f"the shape of {b.name_hint!r} uses {d.name_hint!r}, which is not "
                         "defined here")
    _define(ctx, s, b, "buffer")
    _stmt(s.body, ctx, guarded)
    ctx.scope.pop(id(b), None)


def _evaluate(s: Evaluate, ctx: _Ctx, guarded: bool) -> None:
    _expr(s.value, ctx, s, guarded)


def _not_a_stmt(s: Any, ctx: _Ctx, guarded: bool) -> None:
    ctx.errors.append(f"kernel {ctx.name!r}: {type(s).__name__} is not a kernel statement")


_CHECK_STMT: TypeTable[Callable[..., None]] = TypeTable("kernel verifier", Stmt, {
    Seq: _seq, For: _for, BufferStore: _store, Let: _let, IfThenElse: _if,
    Allocate: _allocate, Evaluate: _evaluate,
}, fallback=_not_a_stmt)
"""The checks of each statement (then of its expressions and the statements inside)."""


# ---------------------------------------------------------------- expressions


def _expr(e: PrimExpr, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _CHECK_EXPR[type(e)](e, ctx, stmt, guarded)


def _var(e: Var, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    if id(e) not in ctx.scope:
        _err(ctx, stmt, f"variable {e.name_hint!r} is used but not defined here")


def _imm(e: PrimExpr, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    pass


def _load(e: BufferLoad, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _access(e.buffer, e.indices, ctx, stmt, guarded, "load from")


def _logic(e: And | Or, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _expr(e.a, ctx, stmt, guarded)
    _expr(e.b, ctx, stmt, True)
    if e.a.dtype != "bool" or e.b.dtype != "bool":
        _err(ctx, stmt, f"`{node_text(e)}` needs bool operands, got {e.a.dtype} and "
                        f"{e.b.dtype}")


def _binary(e: BinaryOp, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _expr(e.a, ctx, stmt, guarded)
    _expr(e.b, ctx, stmt, guarded)
    if e.a.dtype != e.b.dtype:
        _err(ctx, stmt, f"dtype mismatch in `{node_text(e)}`: {e.a.dtype} vs {e.b.dtype}")
    elif not isinstance(e, CmpOp) and e.a.dtype == "bool":
        _err(ctx, stmt, f"arithmetic on bool in `{node_text(e)}`; cast to an integer first")


def _not(e: Not, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _expr(e.a, ctx, stmt, guarded)
    if e.a.dtype != "bool":
        _err(ctx, stmt, f"`{node_text(e)}` needs a bool operand, got {e.a.dtype}")


def _select(e: Select, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _expr(e.cond, ctx, stmt, guarded)
    _expr(e.true_value, ctx, stmt, True)
    _expr(e.false_value, ctx, stmt, True)
    if e.cond.dtype != "bool":
        _err(ctx, stmt, f"select condition must be bool, got {e.cond.dtype}")
    if e.true_value.dtype != e.false_value.dtype:
        _err(ctx, stmt, f"select branches differ: {e.true_value.dtype} vs "
                        f"{e.false_value.dtype} in `{node_text(e)}`")


def _cast(e: Cast, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _expr(e.value, ctx, stmt, guarded)


def _call(e: Call, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    for a in e.args:
        _expr(a, ctx, stmt, guarded)
    d = INTRINSICS.get(e.name)
    if d is None:
        _err(ctx, stmt, f"unknown intrinsic {e.name!r}")
        return
    try:
        want = d.result_dtype([a.dtype for a in e.args])
    except TypeError as exc:
        _err(ctx, stmt, f"`{node_text(e)}`: {exc}")
        return
    if want != e.dtype:
        _err(ctx, stmt, f"`{node_text(e)}` is declared {e.dtype} but {e.name} gives {want}")


def _not_an_expr(e: Any, ctx: _Ctx, stmt: Stmt, guarded: bool) -> None:
    _err(ctx, stmt, f"{type(e).__name__} is not a kernel expression"
                    + (" (a compute-DSL reduction must be the whole compute body)"
                       if type(e).__name__ == "Reduce" else ""))


_CHECK_EXPR: TypeTable[Callable[..., None]] = TypeTable("kernel verifier", PrimExpr, {
    Var: _var, (IntImm, FloatImm): _imm, BufferLoad: _load, (And, Or): _logic,
    BinaryOp: _binary, Not: _not, Select: _select, Cast: _cast, Call: _call,
}, fallback=_not_an_expr)
"""The checks of each expression (then of its operands: the right of ``and``/``or`` and
the branches of a select count as guarded)."""


def _access(buf: Buffer, indices: tuple[PrimExpr, ...], ctx: _Ctx, stmt: Stmt,
            guarded: bool, verb: str) -> None:
    if not isinstance(buf, Buffer):
        _err(ctx, stmt, f"{verb} a {type(buf).__name__}, not a Buffer")
        return
    if id(buf) not in ctx.scope:
        _err(ctx, stmt, f"buffer {buf.name_hint!r} is used but not defined here "
                        "(not a parameter or an enclosing alloc)")
    if len(indices) != buf.ndim:
        _err(ctx, stmt, f"{verb} buffer {buf.name_hint!r} with {len(indices)} index(es); it "
                        f"has rank {buf.ndim}")
        return
    for axis, ix in enumerate(indices):
        _expr(ix, ctx, stmt, guarded)
        if not is_int_dtype(ix.dtype):
            _err(ctx, stmt, f"index {axis} of buffer {buf.name_hint!r} is {ix.dtype}; indices "
                            "must be integers")
            continue
        if not guarded:
            _check_bounds(buf, axis, ix, ctx, stmt, verb)


# ---------------------------------------------------------------- bounds


def _affine(e: PrimExpr, ctx: _Ctx) -> Affine | None:
    """``e`` as an affine form over loop and size variables, or None."""
    if isinstance(e, IntImm) and e.dtype != "bool":
        return {None: e.value}
    if isinstance(e, Var):
        if id(e) in ctx.lets:
            return ctx.lets[id(e)]
        if id(e) in ctx.loops or id(e) in ctx.size_vars:
            return {None: 0, id(e): 1}
        return None
    if isinstance(e, Add | Sub):
        a, b = _affine(e.a, ctx), _affine(e.b, ctx)
        if a is None or b is None:
            return None
        return _aff_add(a, b, 1 if isinstance(e, Add) else -1)
    if isinstance(e, Mul):
        a, b = _affine(e.a, ctx), _affine(e.b, ctx)
        if a is None or b is None:
            return None
        if len(a) == 1:
            return _aff_scale(b, a.get(None, 0))
        if len(b) == 1:
            return _aff_scale(a, b.get(None, 0))
        return None
    if isinstance(e, Cast) and is_int_dtype(e.dtype) and is_int_dtype(e.value.dtype):
        return _affine(e.value, ctx)
    return None


def _range(a: Affine, ctx: _Ctx) -> tuple[Affine, Affine] | None:
    """(min, max) of ``a`` over the enclosing loops, as affine forms in size variables;
    None when that cannot be decided exactly."""
    lo: Affine = {None: a.get(None, 0)}
    hi: Affine = {None: a.get(None, 0)}
    for key, coef in a.items():
        if key is None:
            continue
        if key in ctx.size_vars:
            lo = _aff_add(lo, {key: coef})
            hi = _aff_add(hi, {key: coef})
            continue
        loop = ctx.loops.get(key)
        if loop is None:
            return None
        ext = _affine(loop.extent, ctx)
        if ext is None or any(k is not None and k not in ctx.size_vars for k in ext):
            return None
        if len(ext) == 1 and ext.get(None, 0) <= 0:
            return None  # the loop never runs
        last = _aff_add(ext, {None: -1})  # extent - 1
        if coef > 0:
            hi = _aff_add(hi, last, coef)
        else:
            lo = _aff_add(lo, last, coef)
    return lo, hi


def _surely_nonneg(a: Affine) -> bool:
    """True when ``a`` >= 0 for every value of the (non-negative) size variables."""
    return all(v >= 0 for v in a.values())


def _aff_text(a: Affine, ctx: _Ctx) -> str:
    parts = []
    for k, v in a.items():
        if k is None or v == 0:
            continue
        name = ctx.size_vars[k].name_hint if k in ctx.size_vars else "?"
        parts.append(name if v == 1 else f"{v}*{name}")
    c = a.get(None, 0)
    if c or not parts:
        parts.append(str(c))
    return " + ".join(parts).replace("+ -", "- ")


def _check_bounds(buf: Buffer, axis: int, ix: PrimExpr, ctx: _Ctx, stmt: Stmt,
                  verb: str) -> None:
    a = _affine(ix, ctx)
    if a is None:
        return
    r = _range(a, ctx)
    if r is None:
        return
    lo, hi = r
    where = f"index {axis} (`{node_text(ix)}`) of buffer {buf.name_hint!r}"
    if _surely_nonneg(_aff_scale(_aff_add(lo, {None: 1}), -1)):  # lo <= -1
        ctx.errors.append(
            f"kernel {ctx.name!r}: {stmt_summary(stmt)}: {verb} {where} goes down to "
            f"{_aff_text(lo, ctx)}, below 0: out of bounds"
        )
    dim = buf.shape[axis]
    dim_aff: Affine = {None: dim} if isinstance(dim, int) else {None: 0, id(dim): 1}
    if isinstance(dim, Var) and id(dim) not in ctx.size_vars:
        return
    if _surely_nonneg(_aff_add(hi, dim_aff, -1)):  # hi >= dim
        dim_text = str(dim) if isinstance(dim, int) else dim.name_hint
        ctx.errors.append(
            f"kernel {ctx.name!r}: {stmt_summary(stmt)}: {verb} {where} reaches "
            f"{_aff_text(hi, ctx)}, out of bounds for dimension {axis} of size {dim_text}"
        )


def _module_check(mod: Any) -> Iterator[tuple[str, None, str]]:
    for name, func in mod.items():
        if isinstance(func, Kernel):
            for msg in verify_kernel(func, name):
                yield name, None, msg


def register_phase_check_hook() -> None:
    """Make :func:`plait.ir.well_formed.well_formed` verify every kernel of a module (in
    every phase).  Done when :mod:`plait.kernel` is imported."""
    from plait.ir.well_formed import register_phase_check

    register_phase_check("ingestion", _module_check, "kernel_ir")
