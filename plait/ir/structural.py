"""Structural equality and hashing of IR nodes and modules.

Bound variables (function parameters, binding variables, kernel loop variables...) are
compared up to renaming: two functions that differ only in variable names are equal.
Free variables must be the same object.  Spans are ignored.  Traversal is iterative,
so arbitrarily long binding chains and deeply nested expressions are fine.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np

from plait.errors import PlaitError

from .attrs import Attrs
from .expr import (
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
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
from .node_fields import def_fields, is_var_class, node_fields
from .types import Type


class StructuralMismatch(PlaitError, AssertionError):
    """Raised by :func:`assert_structural_equal`; ``path`` names the first difference."""

    def __init__(self, path: str, lhs: Any, rhs: Any, reason: str) -> None:
        self.path, self.lhs, self.rhs, self.reason = path, lhs, rhs, reason
        super().__init__(
            f"structural mismatch at {path}: {reason}\n  lhs: {_short(lhs)}\n  rhs: {_short(rhs)}"
        )


def _short(x: Any) -> str:
    if isinstance(x, Node):
        s = _node_text(x)
    elif isinstance(x, Type):
        s = str(x)  # the text-format spelling, as in the printed module
    else:
        s = repr(x)
    return s if len(s) < 300 else s[:297] + "..."


def _node_text(x: Node) -> str:
    try:
        from .printer import node_repr

        return node_repr(x)
    except Exception:  # pragma: no cover - printing must never hide the mismatch
        return f"<{type(x).__name__}>"


def _render(path: tuple | None) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    text = "".join(reversed(parts))
    return text.strip(".") or "<root>"


def array_bytes(a: np.ndarray) -> memoryview:
    """The bytes of ``a`` in C order, without a copy when ``a`` is C-contiguous (hashing
    a large constant must not hold a second copy of it)."""
    return memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B")


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def _compare(
    lhs: Any, rhs: Any, root: str, map_free_vars: bool
) -> tuple[str, Any, Any, str] | None:
    """Return None if equal, else (path, lhs, rhs, reason) of the first difference."""
    fwd: dict[int, Any] = {}
    bwd: dict[int, Any] = {}
    # Stack entries: (lhs, rhs, path, is_definition)
    stack: list[tuple[Any, Any, Any, bool]] = [(lhs, rhs, (None, root), False)]
    while stack:
        a, b, path, is_def = stack.pop()
        if a is b and not is_def:
            if isinstance(a, Node) and is_var_class(type(a)):
                mapped = fwd.get(id(a))
                if mapped is not None and mapped is not b:
                    return _render(path), a, b, "variable bound differently"
            continue
        ta, tb = type(a), type(b)
        if ta is not tb:
            return _render(path), a, b, f"different kinds: {ta.__name__} vs {tb.__name__}"
        if isinstance(a, Node):
            if is_var_class(ta):
                if is_def:
                    if id(a) in fwd or id(b) in bwd:
                        if fwd.get(id(a)) is not b:
                            return _render(path), a, b, "variable defined twice"
                    fwd[id(a)] = b
                    bwd[id(b)] = a
                else:
                    m = fwd.get(id(a))
                    if m is None:
                        if id(b) in bwd:
                            return _render(path), a, b, "free variable vs bound variable"
                        if not map_free_vars:
                            return _render(path), a, b, "different free variables"
                        fwd[id(a)] = b
                        bwd[id(b)] = a
                    elif m is not b:
                        return _render(path), a, b, "variables bound at different places"
                # compare the variable's type (and any other non-name fields)
                for name in node_fields(ta):
                    if name == "name_hint":
                        continue
                    va, vb = getattr(a, name), getattr(b, name)
                    if not _leaf_equal(va, vb):
                        stack.append((va, vb, (path, name), False))
                continue
            defs = def_fields(ta)
            names = node_fields(ta)
            for name in reversed(names):
                stack.append((getattr(a, name), getattr(b, name), (path, name), name in defs))
            continue
        if isinstance(a, tuple):
            if len(a) != len(b):
                return _render(path), a, b, f"length {len(a)} vs {len(b)}"
            for i in range(len(a) - 1, -1, -1):
                stack.append((a[i], b[i], (path, i), is_def))
            continue
        if isinstance(a, Attrs):
            if a.keys() != b.keys():
                return _render(path), a, b, f"attribute keys {sorted(a)} vs {sorted(b)}"
            for k in sorted(a, reverse=True):
                stack.append((a[k], b[k], (path, k), False))
            continue
        if isinstance(a, IRModule):
            stack.append((a.attrs, b.attrs, (path, "attrs"), False))
            if list(a.functions) != list(b.functions) and set(a.functions) != set(b.functions):
                return (
                    _render(path),
                    sorted(a.functions),
                    sorted(b.functions),
                    "different function names",
                )
            for name in sorted(a.functions, reverse=True):
                stack.append((a.functions[name], b.functions[name], (path, name), False))
            continue
        if not _leaf_equal(a, b):
            return _render(path), a, b, "different values"
    return None


def _leaf_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return _arrays_equal(a, b)
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, Node | tuple | Attrs | IRModule):
        return False  # needs the structural walk
    return a == b


# ---------------------------------------------------------------- fast paths
#
# The generic walks above handle every node class through its dataclass fields and
# keep a path for the error message.  The fast paths below know the graph IR's own
# classes, keep no path and allocate nothing per node; they give the same answer.
# Meeting any other node class (kernel IR) they raise _Unsupported, and the generic
# walk runs instead.  assert_structural_equal reruns the generic walk on a mismatch
# to name the path.


class _Unsupported(Exception):
    pass


(
    _E_VAR,
    _E_CALL,
    _E_BINDING,
    _E_MATCH_CAST,
    _E_BLOCK,
    _E_SEQ,
    _E_FUNCTION,
    _E_TUPLE,
    _E_ITEM,
    _E_IF,
    _E_CONST,
    _E_OP,
    _E_GLOBAL,
    _E_EXTERN,
    _E_SHAPE,
    _E_PRIM,
    _E_STRING,
) = range(17)
_KINDS: dict[type, int] = {
    Var: _E_VAR,
    DataflowVar: _E_VAR,
    Call: _E_CALL,
    VarBinding: _E_BINDING,
    MatchCast: _E_MATCH_CAST,
    BindingBlock: _E_BLOCK,
    DataflowBlock: _E_BLOCK,
    SeqExpr: _E_SEQ,
    Function: _E_FUNCTION,
    Tuple: _E_TUPLE,
    TupleGetItem: _E_ITEM,
    If: _E_IF,
    Constant: _E_CONST,
    Op: _E_OP,
    GlobalVar: _E_GLOBAL,
    ExternFunc: _E_EXTERN,
    ShapeExpr: _E_SHAPE,
    PrimValue: _E_PRIM,
    StringImm: _E_STRING,
}
_VAR_CLASSES = (Var, DataflowVar)


def _fast_equal(lhs: Any, rhs: Any, map_free_vars: bool) -> bool:
    fwd: dict[Any, Any] = {}
    bwd: dict[Any, Any] = {}
    stack: list[Any] = [lhs, rhs]
    pop, push = stack.pop, stack.append
    kinds = _KINDS

    def define(a: Any, b: Any) -> bool:
        if a.__class__ is not b.__class__:
            return False
        if (a in fwd or b in bwd) and fwd.get(a) is not b:
            return False
        fwd[a] = b
        bwd[b] = a
        ta, tb = a.ty, b.ty
        return ta is tb or (ta.__class__ is tb.__class__ and ta == tb)

    while stack:
        b = pop()
        a = pop()
        if a is b:
            if a.__class__ in _VAR_CLASSES:
                m = fwd.get(a)
                if m is not None and m is not b:
                    return False
            continue
        cls = a.__class__
        if cls is not b.__class__:
            return False
        k = kinds.get(cls)
        if k is None:
            if cls is tuple:
                if len(a) != len(b):
                    return False
                for i in range(len(a) - 1, -1, -1):
                    push(a[i])
                    push(b[i])
            elif cls is Attrs:
                ad, bd = a._d, b._d
                if ad.keys() != bd.keys():
                    return False
                for key, value in ad.items():
                    push(value)
                    push(bd[key])
            elif cls is IRModule:
                if set(a.functions) != set(b.functions):
                    return False
                push(a.attrs)
                push(b.attrs)
                for name in a.functions:
                    push(a.functions[name])
                    push(b.functions[name])
            elif isinstance(a, Node):
                raise _Unsupported
            elif not _leaf_equal(a, b):
                return False
            continue
        if k != _E_BINDING and k != _E_MATCH_CAST and k != _E_BLOCK:
            ta, tb = a.ty, b.ty
            if ta is not tb and (ta.__class__ is not tb.__class__ or ta != tb):
                return False
        if k == _E_VAR:
            m = fwd.get(a)
            if m is None:
                if b in bwd or not map_free_vars:
                    return False
                fwd[a] = b
                bwd[b] = a
            elif m is not b:
                return False
        elif k == _E_CALL:
            aa, ba = a.args, b.args
            if len(aa) != len(ba):
                return False
            if a.attrs is not b.attrs and (a.attrs._d or b.attrs._d):
                push(a.attrs)
                push(b.attrs)
            for i in range(len(aa) - 1, -1, -1):
                push(aa[i])
                push(ba[i])
            push(a.op)
            push(b.op)
        elif k == _E_BINDING or k == _E_MATCH_CAST:
            if k == _E_MATCH_CAST and not _leaf_equal(a.cast_ty, b.cast_ty):
                return False
            if not define(a.var, b.var):
                return False
            push(a.value)
            push(b.value)
        elif k == _E_BLOCK:
            ab, bb = a.bindings, b.bindings
            if len(ab) != len(bb):
                return False
            for i in range(len(ab) - 1, -1, -1):
                push(ab[i])
                push(bb[i])
        elif k == _E_SEQ:
            ab, bb = a.blocks, b.blocks
            if len(ab) != len(bb):
                return False
            push(a.body)
            push(b.body)
            for i in range(len(ab) - 1, -1, -1):
                push(ab[i])
                push(bb[i])
        elif k == _E_FUNCTION:
            if len(a.params) != len(b.params) or a.pure != b.pure:
                return False
            if not _leaf_equal(a.ret_ty, b.ret_ty) and a.ret_ty is not b.ret_ty:
                return False
            for pa, pb in zip(a.params, b.params):
                if not define(pa, pb):
                    return False
            push(a.body)
            push(b.body)
            push(a.attrs)
            push(b.attrs)
        elif k == _E_TUPLE:
            af, bf = a.fields, b.fields
            if len(af) != len(bf):
                return False
            for i in range(len(af) - 1, -1, -1):
                push(af[i])
                push(bf[i])
        elif k == _E_ITEM:
            if a.index != b.index:
                return False
            push(a.tuple_value)
            push(b.tuple_value)
        elif k == _E_IF:
            push(a.else_branch)
            push(b.else_branch)
            push(a.then_branch)
            push(b.then_branch)
            push(a.cond)
            push(b.cond)
        elif k == _E_CONST:
            if not _arrays_equal(a.data, b.data):
                return False
        elif k == _E_OP:
            if a.name != b.name:
                return False
        elif k == _E_GLOBAL:
            if a.name_hint != b.name_hint:
                return False
        elif k == _E_EXTERN:
            if a.symbol != b.symbol:
                return False
        elif k == _E_SHAPE:
            push(a.values)
            push(b.values)
        elif k == _E_PRIM:
            if a.dtype != b.dtype or not _leaf_equal(a.value, b.value):
                return False
        elif k == _E_STRING:
            if a.value != b.value:
                return False
    return True


def _fast_hash(node: Any, map_free_vars: bool) -> int:
    toks: list[str] = []
    app = toks.append
    var_ids: dict[Any, int] = {}
    type_text: dict[int, str] = {}
    stack: list[Any] = [node]
    pop, push = stack.pop, stack.append
    kinds = _KINDS

    def ty_tok(t: Any) -> str:
        # keyed by id: every type object stays alive (held by its node) meanwhile
        text = type_text.get(id(t))
        if text is None:
            text = type_text[id(t)] = "~" if t is None else str(t)
        return text

    def define(v: Any) -> None:
        var_ids[v] = len(var_ids)
        app("D" + v.__class__.__name__)
        app(ty_tok(v.ty))

    while stack:
        x = pop()
        cls = x.__class__
        k = kinds.get(cls)
        if k is None:
            if cls is tuple:
                app(f"({len(x)}")
                for i in range(len(x) - 1, -1, -1):
                    push(x[i])
            elif cls is Attrs:
                keys = sorted(x)
                app("{" + repr(keys))
                for key in reversed(keys):
                    push(x[key])
            elif cls is IRModule:
                names = sorted(x.functions)
                app("M" + repr(names))
                push(x.attrs)
                for name in reversed(names):
                    push(x.functions[name])
            elif isinstance(x, Node):
                raise _Unsupported
            elif cls is np.ndarray:
                data = hashlib.blake2b(array_bytes(x), digest_size=16)
                app(f"A{x.dtype.name}{x.shape}{data.hexdigest()}")
            elif isinstance(x, Type):
                app(ty_tok(x))
            elif cls is float and x != x:
                app("nan")
            else:
                app(cls.__name__ + repr(x))
            continue
        if k == _E_VAR:
            idx = var_ids.get(x)
            if idx is None:
                if map_free_vars:
                    idx = var_ids[x] = len(var_ids)
                    app(f"v{idx}")
                else:
                    app(f"free{id(x)}")
            else:
                app(f"v{idx}")
            app(ty_tok(x.ty))
        elif k == _E_CALL:
            args = x.args
            app(f"C{len(args)}")
            app(ty_tok(x.ty))
            push(x.attrs)
            for i in range(len(args) - 1, -1, -1):
                push(args[i])
            push(x.op)
        elif k == _E_BINDING or k == _E_MATCH_CAST:
            app("B" if k == _E_BINDING else "MC" + ty_tok(x.cast_ty))
            define(x.var)
            push(x.value)
        elif k == _E_BLOCK:
            app(f"K{cls.__name__}{len(x.bindings)}")
            bindings = x.bindings
            for i in range(len(bindings) - 1, -1, -1):
                push(bindings[i])
        elif k == _E_SEQ:
            blocks = x.blocks
            app(f"S{len(blocks)}")
            app(ty_tok(x.ty))
            push(x.body)
            for i in range(len(blocks) - 1, -1, -1):
                push(blocks[i])
        elif k == _E_FUNCTION:
            app(f"F{len(x.params)}{x.pure}")
            app(ty_tok(x.ty))
            app(ty_tok(x.ret_ty))
            for p in x.params:
                define(p)
            push(x.body)
            push(x.attrs)
        elif k == _E_TUPLE:
            fields = x.fields
            app(f"T{len(fields)}")
            app(ty_tok(x.ty))
            for i in range(len(fields) - 1, -1, -1):
                push(fields[i])
        elif k == _E_ITEM:
            app(f"I{x.index}")
            app(ty_tok(x.ty))
            push(x.tuple_value)
        elif k == _E_IF:
            app("?")
            app(ty_tok(x.ty))
            push(x.else_branch)
            push(x.then_branch)
            push(x.cond)
        elif k == _E_CONST:
            app("c" + ty_tok(x.ty))
            push(x.data)
        elif k == _E_OP:
            app("o" + x.name)
        elif k == _E_GLOBAL:
            app("g" + x.name_hint)
            app(ty_tok(x.ty))
        elif k == _E_EXTERN:
            app("e" + x.symbol)
        elif k == _E_SHAPE:
            app("s" + repr(x.values))
        elif k == _E_PRIM:
            app("p" + x.dtype)
            push(x.value)
        elif k == _E_STRING:
            app("t" + repr(x.value))
    digest = hashlib.blake2b("\x1f".join(toks).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """True if ``lhs`` and ``rhs`` (nodes, modules, types, tuples...) are equal up to
    renaming of bound variables.  With ``map_free_vars`` free variables are matched
    by position too."""
    try:
        return _fast_equal(lhs, rhs, map_free_vars)
    except _Unsupported:
        return _compare(lhs, rhs, "", map_free_vars) is None


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """Raise :class:`StructuralMismatch` naming the path of the first difference."""
    try:
        if _fast_equal(lhs, rhs, map_free_vars):
            return
    except _Unsupported:
        pass
    diff = _compare(lhs, rhs, "", map_free_vars)
    if diff is not None:
        raise StructuralMismatch(*diff)


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    """A hash consistent with :func:`structural_equal`: bound variables hash by the
    order in which they are defined, not by name."""
    try:
        return _fast_hash(node, map_free_vars)
    except _Unsupported:
        return _generic_hash(node, map_free_vars)


def _generic_hash(node: Any, map_free_vars: bool) -> int:
    h = hashlib.blake2b(digest_size=8)
    update = h.update
    var_ids: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        x, is_def = stack.pop()
        t = type(x)
        if isinstance(x, Node):
            update(t.__name__.encode())
            if is_var_class(t):
                idx = var_ids.get(id(x))
                if idx is None:
                    if is_def or map_free_vars:
                        idx = var_ids[id(x)] = len(var_ids)
                        update(b"d")
                    else:
                        update(b"free" + str(id(x)).encode())
                        idx = -1
                update(struct.pack("<q", idx))
                for name in node_fields(t):
                    if name != "name_hint":
                        stack.append((getattr(x, name), False))
                continue
            defs = def_fields(t)
            for name in reversed(node_fields(t)):
                stack.append((getattr(x, name), name in defs))
        elif isinstance(x, tuple):
            update(b"(" + struct.pack("<q", len(x)))
            for item in reversed(x):
                stack.append((item, is_def))
        elif isinstance(x, Attrs):
            update(b"{")
            for k in sorted(x, reverse=True):
                stack.append((x[k], False))
                stack.append((k, False))
        elif isinstance(x, IRModule):
            update(b"module")
            stack.append((x.attrs, False))
            for name in sorted(x.functions, reverse=True):
                stack.append((x.functions[name], False))
                stack.append((name, False))
        elif isinstance(x, np.ndarray):
            update(b"array" + x.dtype.name.encode() + repr(x.shape).encode())
            update(array_bytes(x))
        elif isinstance(x, Type):
            update(str(x).encode())
        elif isinstance(x, float) and x != x:
            update(b"nan")
        else:
            update(t.__name__.encode() + repr(x).encode())
    return int.from_bytes(h.digest(), "little", signed=True)
