"""Generic rebuilding of kernel IR: bottom-up rewriting of expressions and statements,
and substitution of variables and buffers.

Nodes whose children did not change are returned as the very same objects.  Kernel
bodies are small, so these walks recurse over the nesting depth of statements and
expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .dispatch import TypeTable
from .ir import (
    Allocate,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Not,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Var,
)

ExprFn = Callable[[PrimExpr], PrimExpr]
StmtFn = Callable[[Stmt], Stmt]


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def rewrite_expr(
    e: PrimExpr, post: ExprFn, buffers: Mapping[int, Buffer] | None = None
) -> PrimExpr:
    """Rebuild ``e`` bottom-up: every node, with its children already rewritten, is
    passed to ``post``, whose result replaces it.  ``buffers`` maps ids of buffers to
    replacements for the loads."""
    return post(_REBUILD_EXPR[type(e)](e, post, buffers))


_Buffers = Mapping[int, Buffer] | None


def _leaf(e: PrimExpr, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    return e


def _binary(e: BinaryOp, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    a, b = rewrite_expr(e.a, post, buffers), rewrite_expr(e.b, post, buffers)
    return e if a is e.a and b is e.b else type(e)(a, b)


def _load(e: BufferLoad, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    idx = tuple(rewrite_expr(i, post, buffers) for i in e.indices)
    buf = buffers.get(id(e.buffer), e.buffer) if buffers else e.buffer
    return e if buf is e.buffer and _same(idx, e.indices) else BufferLoad(buf, idx)


def _not(e: Not, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    a = rewrite_expr(e.a, post, buffers)
    return e if a is e.a else Not(a)


def _select(e: Select, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    c = rewrite_expr(e.cond, post, buffers)
    t = rewrite_expr(e.true_value, post, buffers)
    f = rewrite_expr(e.false_value, post, buffers)
    return e if c is e.cond and t is e.true_value and f is e.false_value else Select(c, t, f)


def _cast(e: Cast, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    v = rewrite_expr(e.value, post, buffers)
    return e if v is e.value else Cast(e.dtype, v)


def _call(e: Call, post: ExprFn, buffers: _Buffers) -> PrimExpr:
    args = tuple(rewrite_expr(a, post, buffers) for a in e.args)
    return e if _same(args, e.args) else Call(e.name, args, e.dtype)


_REBUILD_EXPR: TypeTable[Callable[..., PrimExpr]] = TypeTable(
    "kernel expression rewriter", PrimExpr, {
        (Var, IntImm, FloatImm): _leaf, BinaryOp: _binary, BufferLoad: _load, Not: _not,
        Select: _select, Cast: _cast, Call: _call,
    }, fallback=_leaf)
"""How each expression is rebuilt from its rewritten children (the very node when none
changed)."""


class _StmtRewriter:
    """One :func:`rewrite_stmt` walk: ``expr_fn`` on every expression, ``post`` on every
    statement, buffers replaced per ``buffers``."""

    def __init__(self, expr_fn: ExprFn | None, post: StmtFn | None,
                 buffers: Mapping[int, Buffer] | None) -> None:
        self.expr_fn = expr_fn or (lambda x: x)
        self.rewrites_exprs = expr_fn is not None or bool(buffers)
        self.post = post
        self.buffers = buffers

    def ex(self, e: PrimExpr) -> PrimExpr:
        if not self.rewrites_exprs:
            return e
        return rewrite_expr(e, self.expr_fn, self.buffers)

    def buf(self, b: Buffer) -> Buffer:
        return self.buffers.get(id(b), b) if self.buffers else b

    def go(self, st: Stmt) -> Stmt:
        node = _REBUILD_STMT[type(st)](self, st)
        return self.post(node) if self.post is not None else node

    def _seq(self, st: Seq) -> Stmt:
        parts = tuple(self.go(c) for c in st.stmts)
        return st if _same(parts, st.stmts) else Seq(parts, span=st.span)

    def _for(self, st: For) -> Stmt:
        ext, body = self.ex(st.extent), self.go(st.body)
        return st if ext is st.extent and body is st.body else For(
            st.var, ext, body, st.kind, span=st.span)

    def _store(self, st: BufferStore) -> Stmt:
        b, idx, v = self.buf(st.buffer), tuple(self.ex(i) for i in st.indices), self.ex(st.value)
        same = b is st.buffer and _same(idx, st.indices) and v is st.value
        return st if same else BufferStore(b, idx, v, span=st.span)

    def _let(self, st: Let) -> Stmt:
        v, body = self.ex(st.value), self.go(st.body)
        return st if v is st.value and body is st.body else Let(st.var, v, body, span=st.span)

    def _if(self, st: IfThenElse) -> Stmt:
        c, t = self.ex(st.cond), self.go(st.then_body)
        f = None if st.else_body is None else self.go(st.else_body)
        same = c is st.cond and t is st.then_body and f is st.else_body
        return st if same else IfThenElse(c, t, f, span=st.span)

    def _allocate(self, st: Allocate) -> Stmt:
        b, body = self.buf(st.buffer), self.go(st.body)
        return st if b is st.buffer and body is st.body else Allocate(b, body, span=st.span)

    def _evaluate(self, st: Evaluate) -> Stmt:
        v = self.ex(st.value)
        return st if v is st.value else Evaluate(v, span=st.span)

    def _other(self, st: Stmt) -> Stmt:
        return st


_REBUILD_STMT: TypeTable[Callable[..., Stmt]] = TypeTable(
    "kernel statement rewriter", Stmt, {
        Seq: _StmtRewriter._seq, For: _StmtRewriter._for, BufferStore: _StmtRewriter._store,
        Let: _StmtRewriter._let, IfThenElse: _StmtRewriter._if,
        Allocate: _StmtRewriter._allocate, Evaluate: _StmtRewriter._evaluate,
    }, fallback=_StmtRewriter._other)
"""How each statement is rebuilt from its rewritten parts."""


def rewrite_stmt(
    s: Stmt,
    expr_fn: ExprFn | None = None,
    post: StmtFn | None = None,
    buffers: Mapping[int, Buffer] | None = None,
) -> Stmt:
    """Rebuild ``s`` bottom-up: every expression is rewritten with
    ``rewrite_expr(e, expr_fn, buffers)``, then every statement (children first) is
    passed to ``post``.  Buffers of stores and allocations are replaced per ``buffers``."""
    return _StmtRewriter(expr_fn, post, buffers).go(s)


def substitute(
    node: Stmt | PrimExpr,
    vars: Mapping[Var, PrimExpr] | None = None,
    buffers: Mapping[Buffer, Buffer] | None = None,
) -> Stmt | PrimExpr:
    """``node`` with variables replaced per ``vars`` and buffers per ``buffers``."""
    vmap = {id(k): v for k, v in (vars or {}).items()}
    bmap = {id(k): v for k, v in (buffers or {}).items()}

    def post(e: PrimExpr) -> PrimExpr:
        return vmap.get(id(e), e) if isinstance(e, Var) else e

    if isinstance(node, PrimExpr):
        return rewrite_expr(node, post, bmap)
    return rewrite_stmt(node, post, None, bmap)


def replace_body(k: Kernel, body: Stmt) -> Kernel:
    """``k`` with a new body (same parameters, outputs and attributes)."""
    if body is k.body:
        return k
    return Kernel(k.params, body, k.num_outputs, attrs=k.attrs, span=k.span)
