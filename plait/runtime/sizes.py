"""Size expressions in executables: ``"batch * 12"``, ``"(h + 1) // 2 - 1"``.

A shape entry of an executable is an int, the name of a symbolic size, or the text of
an integer expression over names (``+ - * // %``, unary ``-``, ``min``, ``max``, ints),
as the compiler prints it (:mod:`plait.ir.symbolic`).  The runtime depends on numpy
only, so it reads these texts itself: :func:`compile_size` parses one with ``ast``
(never executed) into a small postfix program, cached per text, and :func:`eval_size`
runs it with the values of the names.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache

from plait.errors import PlaitError

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


class SizeExprError(PlaitError, ValueError):
    """A shape entry that is not a valid size expression."""


def is_name(entry: object) -> bool:
    """True for a shape entry that names a symbolic size."""
    return type(entry) is str and entry.isidentifier()


@lru_cache(maxsize=4096)
def compile_size(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, object], ...]]:
    """``(names, program)`` of the size expression ``text``: the names it uses (in first
    use order) and a postfix program of ``("int", v)``, ``("name", n)``, ``("op", o)``
    steps.  Raises :class:`SizeExprError` naming what is not allowed."""
    try:
        root = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise SizeExprError(f"size expression {text!r} does not parse: {e.msg}") from None
    program: list[tuple[str, object]] = []
    names: list[str] = []
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        t = type(node)
        if done:
            if t is ast.BinOp:
                program.append(("op", _BINOPS[type(node.op)]))  # type: ignore[attr-defined]
            elif t is ast.UnaryOp:
                program.append(("op", "neg"))
            else:   # min/max over n arguments: n - 1 binary steps
                fn = node.func.id  # type: ignore[attr-defined]
                program.extend([("op", fn)] * (len(node.args) - 1))  # type: ignore[attr-defined]
            continue
        if t is ast.Constant and type(node.value) is int:  # type: ignore[attr-defined]
            program.append(("int", node.value))  # type: ignore[attr-defined]
        elif t is ast.Name:
            name = node.id  # type: ignore[attr-defined]
            program.append(("name", name))
            if name not in names:
                names.append(name)
        elif t is ast.BinOp and type(node.op) in _BINOPS:  # type: ignore[attr-defined]
            stack += [(node, True), (node.right, False), (node.left, False)]  # type: ignore[attr-defined]
        elif t is ast.UnaryOp and type(node.op) is ast.USub:  # type: ignore[attr-defined]
            stack += [(node, True), (node.operand, False)]  # type: ignore[attr-defined]
        elif (t is ast.Call and type(node.func) is ast.Name  # type: ignore[attr-defined]
              and node.func.id in ("min", "max") and len(node.args) >= 2  # type: ignore[attr-defined]
              and not node.keywords):  # type: ignore[attr-defined]
            stack.append((node, True))
            stack += [(a, False) for a in reversed(node.args)]  # type: ignore[attr-defined]
        else:
            raise SizeExprError(
                f"size expression {text!r}: {ast.unparse(node)!r} is not allowed (ints, "
                "names, + - * // %, min and max)")
    return tuple(names), tuple(program)


def eval_size(text: str, values: Mapping[str, int]) -> int:
    """The value of size expression ``text`` with the names bound by ``values``."""
    _, program = compile_size(text)
    st: list[int] = []
    for kind, v in program:
        if kind == "int":
            st.append(v)  # type: ignore[arg-type]
        elif kind == "name":
            try:
                st.append(int(values[v]))  # type: ignore[index]
            except KeyError:
                raise SizeExprError(
                    f"size {text!r} needs symbolic size {v!r}, which is not bound here") from None
        elif v == "neg":
            st.append(-st.pop())
        else:
            b, a = st.pop(), st.pop()
            if v == "+":
                st.append(a + b)
            elif v == "-":
                st.append(a - b)
            elif v == "*":
                st.append(a * b)
            elif v == "min":
                st.append(min(a, b))
            elif v == "max":
                st.append(max(a, b))
            elif b == 0:
                raise SizeExprError(f"size {text!r} divides by zero at {dict(values)}")
            else:
                st.append(a // b if v == "//" else a % b)
    return st[0]


def size_value(entry: int | str, values: Mapping[str, int]) -> int:
    """A shape entry's value: an int itself, a name's value, an expression evaluated."""
    if type(entry) is int:
        return entry
    if entry in values:   # a name (the common case)
        return values[entry]  # type: ignore[index]
    return eval_size(entry, values)  # type: ignore[arg-type]


__all__ = ["SizeExprError", "compile_size", "eval_size", "is_name", "size_value"]
