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

from .attrs import Attrs
from .expr import Node
from .module import IRModule
from .node_fields import def_fields, is_var_class, node_fields
from .types import Type


class StructuralMismatch(AssertionError):
    """Raised by :func:`assert_structural_equal`; ``path`` names the first difference."""

    def __init__(self, path: str, lhs: Any, rhs: Any, reason: str) -> None:
        self.path, self.lhs, self.rhs, self.reason = path, lhs, rhs, reason
        super().__init__(
            f"structural mismatch at {path}: {reason}\n  lhs: {_short(lhs)}\n  rhs: {_short(rhs)}"
        )


def _short(x: Any) -> str:
    s = repr(x) if not isinstance(x, Node) else _node_text(x)
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


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def _compare(lhs: Any, rhs: Any, root: str, map_free_vars: bool) -> tuple[str, Any, Any, str] | None:
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


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """True if ``lhs`` and ``rhs`` (nodes, modules, types, tuples...) are equal up to
    renaming of bound variables.  With ``map_free_vars`` free variables are matched
    by position too."""
    return _compare(lhs, rhs, "", map_free_vars) is None


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """Raise :class:`StructuralMismatch` naming the path of the first difference."""
    diff = _compare(lhs, rhs, "", map_free_vars)
    if diff is not None:
        raise StructuralMismatch(*diff)


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    """A hash consistent with :func:`structural_equal`: bound variables hash by the
    order in which they are defined, not by name."""
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
            update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, Type):
            update(str(x).encode())
        elif isinstance(x, float) and x != x:
            update(b"nan")
        else:
            update(t.__name__.encode() + repr(x).encode())
    return int.from_bytes(h.digest(), "little", signed=True)
