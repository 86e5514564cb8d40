"""Iterative traversal of the graph IR: visitors, mutators and post-order walks.

None of these recurse on the depth of the graph: a chain of 100,000 bindings or an
expression nested 100,000 calls deep is walked with an explicit stack.  (Nesting of
*functions* inside functions is the only recursion, and it is bounded by how deeply
the source nests lambdas.)

* :func:`post_order` yields every node after its children, each node once.
* :class:`ExprVisitor` calls a hook ``visit_<kind>(node)`` (``visit_call``,
  ``visit_var`` for uses, ``visit_var_def`` for definitions, ``visit_binding``,
  ``visit_function``...) for every node in pre-order; a hook returning :data:`SKIP`
  stops the walk from entering that node's children.
* :class:`ExprMutator` rebuilds expressions bottom-up: a hook ``rewrite_<kind>(node)``
  receives the node with its children already rewritten and returns its replacement.
  Nodes whose children did not change are returned as the very same objects, so an
  unchanged function comes back identical (``is``).  Hooks may emit extra bindings
  through ``self.builder`` (they land before the binding being rewritten), and
  :meth:`ExprMutator.visit_binding` can be overridden to drop or replace bindings.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from types import FunctionType
from typing import Any

from .builder import BlockBuilder, is_atom
from .expr import (
    BaseFunc,
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
    Node,
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
from .module import IRModule
from .node_fields import def_fields, node_fields

SKIP = object()
"""Returned by an :class:`ExprVisitor` hook to skip the node's children."""


_CAMEL_BREAK = re.compile(r"(?<!^)(?=[A-Z])")


@cache
def _snake(cls: type) -> str:
    return _CAMEL_BREAK.sub("_", cls.__name__).lower()


def _children(node: Node) -> Iterator[tuple[Any, bool]]:
    """(child, is_definition) pairs of a node, in field order."""
    cls = type(node)
    if cls is Constant:  # a leaf (its data is not read: a deferred one stays unread)
        return
    defs = def_fields(cls)
    for name in node_fields(cls):
        if name == "ty" or name == "attrs":
            continue
        v = getattr(node, name)
        if isinstance(v, Node):
            yield v, name in defs
        elif isinstance(v, tuple):
            for item in v:
                if isinstance(item, Node):
                    yield item, name in defs


def post_order(root: Node) -> Iterator[Node]:
    """Every node under ``root`` (itself included), children before parents, each
    distinct node once."""
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        kids = [c for c, _ in _children(node)]
        for c in reversed(kids):
            if id(c) not in seen:
                stack.append((c, False))



NON_VAR_LEAVES = frozenset(
    {Constant, Op, GlobalVar, ExternFunc, ShapeExpr, PrimValue, StringImm}
)


def used_vars(e: Expr) -> list[Var]:
    """The variables ``e`` uses.  A call of a leaf on leaves and tuples of leaves (the
    A-normal-form binding) is read directly, in argument order (a variable used twice
    is listed twice); anything else is the :func:`post_order` walk (each variable
    once)."""
    t = type(e)
    if t is Var or t is DataflowVar:
        return [e]  # type: ignore[list-item]
    if t in NON_VAR_LEAVES:
        return []
    if t is Call:
        out: list[Var] = []
        for a in (e.op, *e.args):  # type: ignore[attr-defined]
            ta = type(a)
            if ta is Var or ta is DataflowVar:
                out.append(a)
            elif ta is Tuple:
                for f in a.fields:
                    tf = type(f)
                    if tf is Var or tf is DataflowVar:
                        out.append(f)
                    elif tf not in NON_VAR_LEAVES:
                        return [n for n in post_order(e) if isinstance(n, Var)]
            elif ta not in NON_VAR_LEAVES:
                return [n for n in post_order(e) if isinstance(n, Var)]
        return out
    return [n for n in post_order(e) if isinstance(n, Var)]

class ExprVisitor:
    """Pre-order visitor with per-kind hooks; see the module docstring."""

    def visit(self, node: Node | IRModule) -> None:
        """Walk ``node`` (an expression, binding, block, function or module).  For a
        module, the graph functions are walked (kernels have their own IR; visit one
        explicitly to walk it)."""
        if isinstance(node, IRModule):
            for _, f in node.graph_functions():
                self.visit(f)
            return
        hooks = self._hooks()
        # The graph IR's own classes are expanded inline (a definition's hook runs
        # as soon as its binding or function is entered, which is where the
        # generic walk would visit it too); other classes (kernel IR) take the
        # generic field walk, with definitions wrapped in _Def.
        stack: list[Any] = [node]
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            n = pop()
            cls = n.__class__
            entry = hooks.get(cls)
            if entry is None:
                if cls is _Def:
                    self._visit_def(n.node, stack)
                    continue
                entry = hooks[cls] = self._entry(cls)
            hook, kind, _ = entry
            if hook is not None and hook(self, n) is SKIP:
                continue
            if kind == _K_LEAF:
                continue
            if kind == _K_CALL:
                args = n.args
                if args:
                    extend(args[::-1])
                push(n.op)
            elif kind == _K_BINDING:
                var = n.var
                ventry = hooks.get(var.__class__)
                if ventry is None or ventry[1] != _K_LEAF:
                    push(n.value)
                    self._visit_def(var, stack)
                    continue
                push(n.value)
                dhook = ventry[2]
                if dhook is not None:
                    dhook(self, var)
            elif kind == _K_BLOCK:
                extend(n.bindings[::-1])
            elif kind == _K_SEQ:
                push(n.body)
                extend(n.blocks[::-1])
            elif kind == _K_TUPLE:
                extend(n.fields[::-1])
            elif kind == _K_ITEM:
                push(n.tuple_value)
            elif kind == _K_IF:
                push(n.else_branch)
                push(n.then_branch)
                push(n.cond)
            elif kind == _K_FUNCTION:
                push(n.body)
                for p in reversed(n.params):
                    push(_Def(p))
            else:
                for c, is_def in reversed(list(_children(n))):
                    push(_Def(c) if is_def else c)

    def _entry(self, cls: type) -> tuple:
        kind = _KINDS.get(cls, _K_GENERIC)
        return (self._find_hook(cls, False), kind, self._find_hook(cls, True))

    def _visit_def(self, n: Node, stack: list[Any]) -> None:
        """Visit a definition: its ``_def`` hook, then its children."""
        hooks = self._hooks()
        entry = hooks.get(n.__class__)
        if entry is None:
            entry = hooks[n.__class__] = self._entry(n.__class__)
        hook = entry[2]
        if hook is not None and hook(self, n) is SKIP:
            return
        for c, is_def in reversed(list(_children(n))):
            stack.append(_Def(c) if is_def else c)

    def _hooks(self) -> dict:
        """The visitor's hooks by node class: ``(hook, kind, definition hook)``, each
        hook the class's function (called ``hook(self, node)``), never a bound method,
        which would make the visitor a reference cycle through its own cache."""
        try:
            return self.__dict__["_hook_cache"]
        except KeyError:
            cache_: dict = {}
            self.__dict__["_hook_cache"] = cache_
            return cache_

    def _find_hook(self, cls: type, is_def: bool) -> Any:
        for klass in cls.__mro__:
            if klass is object:
                break
            hook = _method(type(self), "visit_" + _snake(klass) + ("_def" if is_def else ""))
            if hook is not None:
                return hook
        return _method(type(self), "visit_node")


_MISSING = object()


def _method(cls: type, name: str) -> Any:
    """The function ``cls`` has for hook ``name`` (called ``f(instance, node)``), or None.

    The visitors cache their hooks as functions of the class, not bound methods: a
    bound method in an instance's own cache is a reference cycle (instance -> cache ->
    method -> instance), so every pass's rewriter, with the modules it holds, lived
    until the cyclic collector ran.  A static or class method, another descriptor
    (``functools.partialmethod``) or a callable object set on the class is wrapped to
    be called so too.  Looked up once per class and name."""
    key = (cls, name)
    hook = _METHODS.get(key, _MISSING)
    if hook is _MISSING:
        attr = inspect.getattr_static(cls, name, None)
        if attr is None or isinstance(attr, FunctionType):
            hook = attr
        elif isinstance(attr, staticmethod):
            fn = attr.__func__
            hook = lambda _self, node: fn(node)  # noqa: E731
        elif isinstance(attr, classmethod):
            fn = attr.__func__
            hook = lambda _self, node: fn(cls, node)  # noqa: E731
        elif hasattr(type(attr), "__get__"):   # another descriptor: bound at each call
            hook = lambda self, node: attr.__get__(self, type(self))(node)  # noqa: E731
        else:   # a callable object set on the class is called as it is
            hook = (lambda _self, node: attr(node)) if callable(attr) else None  # noqa: E731
        _METHODS[key] = hook
    return hook


_METHODS: dict[tuple[type, str], Any] = {}
"""(visitor class, hook name) -> the class's function, or None (see :func:`_method`)."""


class _Def:
    """A definition waiting on the visitor's stack."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node


_FLAT_LEAVES = frozenset(
    {Var, DataflowVar, Constant, Op, GlobalVar, ExternFunc, ShapeExpr, PrimValue, StringImm}
)
"""Exact classes :meth:`ExprMutator.visit_expr` treats as leaves on its fast path."""


def _leaves_only(fields: tuple[Expr, ...]) -> bool:
    for f in fields:
        if type(f) not in _FLAT_LEAVES:
            return False
    return True


def with_type(var: Var, ty: Any) -> Var:
    """A copy of variable ``var`` (same class, name and span) with type ``ty``."""
    cls = type(var)
    if cls is Var or cls is DataflowVar:
        return cls(var.name_hint, ty, span=var.span)
    return replace(var, ty=ty)


_K_LEAF, _K_CALL, _K_BINDING, _K_BLOCK, _K_SEQ, _K_TUPLE, _K_ITEM, _K_IF, _K_FUNCTION = range(9)
_K_GENERIC = -1
_KINDS: dict[type, int] = {
    Var: _K_LEAF,
    DataflowVar: _K_LEAF,
    Constant: _K_LEAF,
    Op: _K_LEAF,
    GlobalVar: _K_LEAF,
    ExternFunc: _K_LEAF,
    ShapeExpr: _K_LEAF,
    PrimValue: _K_LEAF,
    StringImm: _K_LEAF,
    Call: _K_CALL,
    VarBinding: _K_BINDING,
    MatchCast: _K_BINDING,
    BindingBlock: _K_BLOCK,
    DataflowBlock: _K_BLOCK,
    SeqExpr: _K_SEQ,
    Tuple: _K_TUPLE,
    TupleGetItem: _K_ITEM,
    If: _K_IF,
    Function: _K_FUNCTION,
}
"""Exact classes the visitor expands inline; the kind says how."""


class ExprMutator:
    """Bottom-up rewriter with per-kind hooks; see the module docstring."""

    def __init__(self, mod: IRModule | None = None) -> None:
        self.mod = mod
        self.builder = BlockBuilder(mod)
        self.var_remap: dict[Var, Expr] = {}
        self._rewrite_cache: dict[type, Any] = {}
        self._plain: bool | None = None  # see _plain_leaves
        self._direct: bool | None = None  # see _direct_calls

    def _plain_leaves(self) -> bool:
        """True when no ``rewrite_*`` hook applies to a leaf or a tuple (the usual
        mutator hooks only calls): a flat call then needs no per-leaf hook calls."""
        plain = self._plain
        if plain is None:
            plain = self._plain = all(self._hook_of(c) is None for c in _FLAT_LEAVES | {Tuple})
        return plain

    def _hook_of(self, cls: type) -> Any:
        """The ``rewrite_*`` hook of node class ``cls`` (the class's function, called
        ``hook(self, node)``: see :func:`_method`), or None."""
        hook = self._rewrite_cache.get(cls, _MISSING)
        if hook is _MISSING:
            hook = None
            for klass in cls.__mro__:
                h = _method(type(self), "rewrite_" + _snake(klass))
                if h is not None:
                    hook = h
                    break
            self._rewrite_cache[cls] = hook
        return hook

    # ------------------------------------------------------------ modules
    def visit_module(self, mod: IRModule) -> IRModule:
        """Rewrite every graph function; returns ``mod`` itself if nothing changed."""
        changed: dict[str, BaseFunc] = {}
        for name, f in mod.graph_functions():
            nf = self.visit_function(f)
            if nf is not f:
                changed[name] = nf
        return mod.with_functions(changed) if changed else mod

    # ------------------------------------------------------------ functions
    def visit_function(self, func: Function) -> Function:
        params = tuple(self.visit_var_def(p) for p in func.params)
        body = self.visit_body(func.body)
        if body is func.body and all(a is b for a, b in zip(params, func.params)):
            return func
        ret_ty = func.ret_ty
        if ret_ty is not None and body.ty is not None and body.ty != ret_ty:
            from .builder import types_compatible

            if not types_compatible(ret_ty, body.ty):
                ret_ty = body.ty
        return Function(params, body, ret_ty, func.pure, attrs=func.attrs, span=func.span)

    def visit_var_def(self, var: Var) -> Var:
        """Hook for a variable definition (parameter); default keeps it."""
        return var

    def visit_body(self, body: Expr) -> Expr:
        if isinstance(body, SeqExpr):
            return self.visit_seq(body)
        return self.visit_expr(body)

    def visit_seq(self, seq: SeqExpr) -> SeqExpr:
        blocks = []
        changed = False
        for block in seq.blocks:
            nb = self.visit_block(block)
            changed |= nb is not block
            if nb.bindings or not block.bindings:
                blocks.append(nb)
            else:
                changed = True
        self.builder.begin_scope(False)
        body = self.visit_expr(seq.body)
        if not is_atom(body):
            body = self.builder.emit(body, "lv")
        extra = self.builder.end_scope()
        if extra:
            blocks.append(BindingBlock(tuple(extra)))
            changed = True
        if not changed and body is seq.body:
            return seq
        return SeqExpr(tuple(blocks), body, ty=body.ty, span=seq.span)

    def visit_block(self, block: BindingBlock) -> BindingBlock:
        self.builder.begin_scope(isinstance(block, DataflowBlock))
        for b in block.bindings:
            self.visit_binding(b)
        bindings = self.builder.end_scope()
        if len(bindings) == len(block.bindings) and same_objects(bindings, block.bindings):
            return block
        return type(block)(tuple(bindings))

    def visit_binding(self, binding: Binding) -> None:
        """Rewrite one binding and emit the result into ``self.builder``.  Override to
        drop a binding (emit nothing) or to emit several."""
        value = binding.value
        if type(value) is Call and type(value.op) is Op and self._direct_calls():
            # Fast path: an op on variables with nothing to substitute is what
            # visit_expr hands to the call hook as it is
            if vars_kept(value.args, self.var_remap):
                # (at_binding(binding, self._rewrite, value), without their two calls)
                hook = self._rewrite_cache.get(Call, _MISSING)
                if hook is _MISSING:
                    hook = self._hook_of(Call)
                if hook is not None:
                    bb = self.builder
                    prev = bb.current_binding
                    bb.current_binding = binding.var.name_hint
                    try:
                        value = hook(self, value)
                    finally:
                        bb.current_binding = prev
                if value is binding.value:
                    self.builder.emit_binding(binding)
                else:
                    self.emit_rewritten(binding, value)
                return
        self.emit_rewritten(binding, self.at_binding(binding, self.visit_expr, value))

    def _direct_calls(self) -> bool:
        """True when :meth:`visit_expr` is this class's own and no hook applies to
        leaves or tuples: a call of an op on variables not remapped is then rewritten
        by the call hook alone."""
        direct = self._direct
        if direct is None:
            cls = type(self)
            direct = self._direct = (
                cls.visit_expr is ExprMutator.visit_expr
                and cls._flat_call is ExprMutator._flat_call
                and cls._rewrite is ExprMutator._rewrite
                and cls.at_binding is ExprMutator.at_binding
                and self._plain_leaves()
            )
        return direct

    def at_binding(self, binding: Binding, fn: Any, arg: Any) -> Any:
        """``fn(arg)`` with the builder naming ``binding`` in its errors."""
        bb = self.builder
        prev = bb.current_binding
        bb.current_binding = binding.var.name_hint
        try:
            return fn(arg)
        finally:
            bb.current_binding = prev

    def emit_rewritten(self, binding: Binding, value: Expr) -> None:
        """Emit ``binding`` with its value replaced by ``value`` (normalized), giving
        the variable a new type (and recording the substitution) if needed."""
        bb = self.builder
        if value is binding.value:
            bb.emit_binding(binding)
            return
        value = self.at_binding(binding, bb.normalize, value)
        var = binding.var
        vty = value.ty
        if (
            vty is not None
            and vty is not var.ty
            and vty != var.ty
            and not isinstance(binding, MatchCast)
        ):
            var = with_type(var, vty)
            self.var_remap[binding.var] = var
        if type(binding) is VarBinding:
            bb.emit_binding(VarBinding(var, value))
        else:
            bb.emit_binding(replace(binding, var=var, value=value))

    # ------------------------------------------------------------ expressions
    def visit_expr(self, expr: Expr) -> Expr:
        """Rewrite ``expr`` bottom-up, iteratively."""
        if type(expr) is Call:
            # Fast path for the binding value of A-normal form, a call on leaves: the
            # same hooks in the same order as the general walk below, without the stack.
            # Arguments may be tuples of leaves (call_extern, call_kernel, call_dps).
            op = expr.op
            if type(op) in _FLAT_LEAVES and self._plain is not False and self._plain_leaves():
                # no hook for leaves or tuples: substitute variables, rebuild if needed
                flat = self._flat_call(expr)
                if flat is not None:
                    return flat
            if type(op) in _FLAT_LEAVES:
                args = expr.args
                for a in args:
                    ta = type(a)
                    if ta not in _FLAT_LEAVES and not (ta is Tuple and _leaves_only(a.fields)):
                        break
                else:
                    done = {id(op): self._rewrite_leaf(op)}
                    for a in args:
                        if id(a) in done:
                            continue
                        if type(a) is Tuple:
                            for f in a.fields:
                                if id(f) not in done:
                                    done[id(f)] = self._rewrite_leaf(f)
                            done[id(a)] = self._rewrite(self._rebuild(a, done))
                        else:
                            done[id(a)] = self._rewrite_leaf(a)
                    return self._rewrite(self._rebuild(expr, done))
        done = {}
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            e, expanded = stack.pop()
            if not expanded:
                if id(e) in done:
                    continue
                kids = _expr_children(e)
                if not kids:
                    done[id(e)] = self._rewrite_leaf(e)
                    continue
                stack.append((e, True))
                for k in reversed(kids):
                    if id(k) not in done:
                        stack.append((k, False))
                continue
            done[id(e)] = self._rewrite(self._rebuild(e, done))
        return done[id(expr)]

    def _flat_call(self, e: Call) -> Expr | None:
        """:meth:`visit_expr` of a call of a leaf on leaves and tuples of leaves when
        no hook applies to leaves or tuples (the same result, without the walk);
        None for any other call."""
        remap = self.var_remap
        op = e.op
        top = type(op)
        if top is Var or top is DataflowVar:
            if remap:
                op = remap.get(op, op)  # type: ignore[call-overload]
        elif top is Function or top is SeqExpr:
            return None
        args = e.args
        new_args: list[Expr] | None = None
        for i, a in enumerate(args):
            ta = type(a)
            if ta is Var or ta is DataflowVar:
                if not remap:
                    continue
                na = remap.get(a, a)  # type: ignore[call-overload]
            elif ta is Tuple:
                fields = a.fields  # type: ignore[attr-defined]
                nf: list[Expr] | None = None
                for j, f in enumerate(fields):
                    tf = type(f)
                    if tf is Var or tf is DataflowVar:
                        if remap:
                            g = remap.get(f, f)  # type: ignore[call-overload]
                            if g is not f:
                                if nf is None:
                                    nf = list(fields)
                                nf[j] = g
                    elif tf not in _FLAT_LEAVES:
                        return None
                if nf is None:
                    continue
                # the same tuple object twice stays one object (as in the walk)
                twin = next((new_args[k] for k in range(i) if args[k] is a), None) \
                    if new_args is not None else None
                na = twin if twin is not None else Tuple(tuple(nf), span=a.span)
            elif ta in _FLAT_LEAVES:
                continue
            else:
                return None
            if na is not a:
                if new_args is None:
                    new_args = list(args)
                new_args[i] = na
        if new_args is None and op is e.op:
            return self._rewrite(e)
        ty = None if isinstance(op, Op) else e.ty
        return self._rewrite(
            Call(op, tuple(new_args) if new_args is not None else args, e.attrs, ty=ty,
                 span=e.span)
        )

    def _rewrite_leaf(self, e: Expr) -> Expr:
        cls = type(e)
        if cls is Var or cls is DataflowVar or isinstance(e, Var):
            new = self.var_remap.get(e)  # type: ignore[arg-type]
            if new is not None:
                return new
        elif cls is Function or isinstance(e, Function):
            return self._rewrite(self.visit_function(e))  # type: ignore[arg-type]
        elif cls is SeqExpr or isinstance(e, SeqExpr):
            return self._rewrite(self.visit_seq(e))  # type: ignore[arg-type]
        return self._rewrite(e)

    def _rebuild(self, e: Expr, done: dict[int, Expr]) -> Expr:
        if isinstance(e, Call):
            op = done.get(id(e.op), e.op)
            old = e.args
            args = tuple([done[id(a)] for a in old])
            changed = op is not e.op
            if not changed:
                for x, y in zip(args, old):
                    if x is not y:
                        changed = True
                        break
            if not changed:
                return e
            ty = None if isinstance(op, Op) else e.ty
            if type(e) is Call:
                return Call(op, args, e.attrs, ty=ty, span=e.span)
            return replace(e, op=op, args=args, ty=ty)
        if isinstance(e, Tuple):
            fields = tuple([done[id(f)] for f in e.fields])
            for x, y in zip(fields, e.fields):
                if x is not y:
                    if type(e) is Tuple:
                        return Tuple(fields, span=e.span)
                    return replace(e, fields=fields, ty=None)
            return e
        if isinstance(e, TupleGetItem):
            tv = done[id(e.tuple_value)]
            return e if tv is e.tuple_value else replace(e, tuple_value=tv, ty=None)
        if isinstance(e, If):
            cond = done[id(e.cond)]
            then_b = self.visit_body(e.then_branch)
            else_b = self.visit_body(e.else_branch)
            if cond is e.cond and then_b is e.then_branch and else_b is e.else_branch:
                return e
            return replace(e, cond=cond, then_branch=then_b, else_branch=else_b, ty=None)
        return e

    def _rewrite(self, e: Expr) -> Expr:
        cls = type(e)
        hook = self._rewrite_cache.get(cls, _MISSING)
        if hook is _MISSING:
            hook = self._hook_of(cls)
        return e if hook is None else hook(self, e)


def vars_kept(args: tuple[Expr, ...], remap: dict) -> bool:
    """True if ``args`` are variables that ``remap`` leaves as they are."""
    for a in args:
        ta = type(a)
        if (ta is not Var and ta is not DataflowVar) or (remap and a in remap):
            return False
    return True


def same_objects(a: list, b: tuple) -> bool:
    """True when ``a`` and ``b`` hold the same objects (``is``), position by position
    (the shorter one's length)."""
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


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


__all__ = ["SKIP", "ExprMutator", "ExprVisitor", "post_order"]
