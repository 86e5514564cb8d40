"""Generic rebuilding of kernel IR: bottom-up rewriting of expressions and statements,
and substitution of variables and buffers.

Nodes whose children did not change are returned as the very same objects.  Kernel
bodies are small, so these walks recurse over the nesting depth of statements and
expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
    if isinstance(e, Var | IntImm | FloatImm):
        return post(e)
    if isinstance(e, BinaryOp):
        a, b = rewrite_expr(e.a, post, buffers), rewrite_expr(e.b, post, buffers)
        node = e if a is e.a and b is e.b else type(e)(a, b)
    elif isinstance(e, BufferLoad):
        idx = tuple(rewrite_expr(i, post, buffers) for i in e.indices)
        buf = buffers.get(id(e.buffer), e.buffer) if buffers else e.buffer
        node = e if buf is e.buffer and _same(idx, e.indices) else BufferLoad(buf, idx)
    elif isinstance(e, Not):
        a = rewrite_expr(e.a, post, buffers)
        node = e if a is e.a else Not(a)
    elif isinstance(e, Select):
        c = rewrite_expr(e.cond, post, buffers)
        t = rewrite_expr(e.true_value, post, buffers)
        f = rewrite_expr(e.false_value, post, buffers)
        same = c is e.cond and t is e.true_value and f is e.false_value
        node = e if same else Select(c, t, f)
    elif isinstance(e, Cast):
        v = rewrite_expr(e.value, post, buffers)
        node = e if v is e.value else Cast(e.dtype, v)
    elif isinstance(e, Call):
        args = tuple(rewrite_expr(a, post, buffers) for a in e.args)
        node = e if _same(args, e.args) else Call(e.name, args, e.dtype)
    else:
        node = e
    return post(node)


def rewrite_stmt(
    s: Stmt,
    expr_fn: ExprFn | None = None,
    post: StmtFn | None = None,
    buffers: Mapping[int, Buffer] | None = None,
) -> Stmt:
    """Rebuild ``s`` bottom-up: every expression is rewritten with
    ``rewrite_expr(e, expr_fn, buffers)``, then every statement (children first) is
    passed to ``post``.  Buffers of stores and allocations are replaced per ``buffers``."""

    def ex(e: PrimExpr) -> PrimExpr:
        if expr_fn is None and not buffers:
            return e
        return rewrite_expr(e, expr_fn or (lambda x: x), buffers)

    def buf(b: Buffer) -> Buffer:
        return buffers.get(id(b), b) if buffers else b

    def go(st: Stmt) -> Stmt:
        if isinstance(st, Seq):
            parts = tuple(go(c) for c in st.stmts)
            node: Stmt = st if _same(parts, st.stmts) else Seq(parts, span=st.span)
        elif isinstance(st, For):
            ext, body = ex(st.extent), go(st.body)
            node = st if ext is st.extent and body is st.body else For(
                st.var, ext, body, st.kind, span=st.span)
        elif isinstance(st, BufferStore):
            b, idx, v = buf(st.buffer), tuple(ex(i) for i in st.indices), ex(st.value)
            same = b is st.buffer and _same(idx, st.indices) and v is st.value
            node = st if same else BufferStore(b, idx, v, span=st.span)
        elif isinstance(st, Let):
            v, body = ex(st.value), go(st.body)
            node = st if v is st.value and body is st.body else Let(
                st.var, v, body, span=st.span)
        elif isinstance(st, IfThenElse):
            c, t = ex(st.cond), go(st.then_body)
            f = None if st.else_body is None else go(st.else_body)
            same = c is st.cond and t is st.then_body and f is st.else_body
            node = st if same else IfThenElse(c, t, f, span=st.span)
        elif isinstance(st, Allocate):
            b, body = buf(st.buffer), go(st.body)
            node = st if b is st.buffer and body is st.body else Allocate(b, body, span=st.span)
        elif isinstance(st, Evaluate):
            v = ex(st.value)
            node = st if v is st.value else Evaluate(v, span=st.span)
        else:
            node = st
        return post(node) if post is not None else node

    return go(s)


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
