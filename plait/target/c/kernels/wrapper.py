"""The one writer of the ``c`` target's native call wrappers.

A dispatch rule describes the call of a family's entry point it wants as data — a
:class:`NativeCall`: the wrapper's buffers (pointers with their shapes and dtypes), the
family's descriptor struct and its fields, the entry point's arguments — and
:func:`emit_call` writes the C wrapper from it, the same way for every family::

    int plait_<kind>_<digest>(const float* x, ..., float* out, int64_t n0, ...) {
        if (<an output has no elements>) return 0;          (symbolic sizes only)
        [static ]const <desc type> d = {.F = <value>, ...};
        return <entry>(<args>);
    }

Field and argument values are ints (and bools), floats (written as exact hexadecimal
float32 literals), dimensions (ints, symbolic sizes, :class:`~plait.target.c.dims.Prod`
products: written over the wrapper's size arguments, :class:`~plait.target.c.dims.SizeArgs`),
:class:`Ref` (a buffer's name, ``NULL``, an enum constant, ``&d``) or :class:`Struct`
(a nested initializer).  The descriptor is ``static`` when every field is a
compile-time constant.  The wrapper's symbol is a digest of its text, so equal calls
share one wrapper.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from plait.codegen.c import CFunction
from plait.ir.symbolic import Dim

from ..c_float import c_float
from ..dims import Prod, SizeArgs

C_TYPES = {"float32": "float", "uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t",
           "int64": "int64_t"}
"""The C element type of each buffer dtype."""


class Ref(str):
    """A C name as a value: a buffer's parameter name, ``NULL``, an enum constant, or
    ``&d`` (the descriptor)."""


NULL = Ref("NULL")
DESC = Ref("&d")


@dataclass(frozen=True)
class Struct:
    """A nested initializer ``{.name = value, ...}`` (a struct inside the descriptor)."""

    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Local:
    """A further descriptor of a wrapper, ``[static ]const <ctype> <name> = {...};``
    (passed to the entry point as ``Ref("&<name>")``)."""

    name: str
    ctype: str
    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Buffer:
    """A pointer parameter of a wrapper: its C ``name``, its ``shape`` (dimensions: ints,
    symbolic sizes) and ``dtype``; ``out`` for an output (written; outputs come last)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"
    out: bool = False


Value = int | float | Dim | Prod | Ref | Struct
"""A field or argument value of a :class:`NativeCall`."""


@dataclass(frozen=True)
class NativeCall:
    """A call of a native family's entry point, as data: ``entry`` called with ``args``
    from a wrapper whose parameters are ``buffers`` (inputs, then outputs) and, when
    ``desc_type`` is given, a descriptor ``d`` of that type with the fields ``desc``
    (``(name, value)`` pairs; fields not named are zero), after the descriptors
    ``locals`` (a struct passed by address besides ``d``).  ``kind`` names the wrapper
    (``plait_<kind>_<digest>``).  ``guard``: with symbolic sizes, return at once when
    the first output has no elements."""

    kind: str
    entry: str
    buffers: tuple[Buffer, ...]
    args: tuple[Any, ...]
    desc_type: str | None = None
    desc: tuple[tuple[str, Any], ...] = ()
    guard: bool | str = True
    locals: tuple[Local, ...] = ()

    def __post_init__(self) -> None:
        outs = [b.out for b in self.buffers]
        if not any(outs) or outs != sorted(outs):
            raise ValueError(f"NativeCall {self.kind}: the buffers must end with the outputs "
                             f"(got {[b.name for b in self.buffers]})")
        unknown = [b.dtype for b in self.buffers if b.dtype not in C_TYPES]
        if unknown:
            raise ValueError(f"NativeCall {self.kind}: no C type for dtype {unknown[0]!r}")


def _value(v: Any, sizes: SizeArgs) -> str:
    """The C text of a field or argument value."""
    if isinstance(v, Ref):
        return str(v)
    if isinstance(v, Struct):
        return "{" + ", ".join(f".{k} = {_value(x, sizes)}" for k, x in v.fields) + "}"
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return c_float(v)
    return sizes.c(v)


def _constant(v: Any, pointers: set[str]) -> bool:
    """Whether ``v`` is a compile-time constant (no buffer pointer, no size argument)."""
    if isinstance(v, Ref):
        return str(v) not in pointers
    if isinstance(v, Struct):
        return all(_constant(x, pointers) for _, x in v.fields)
    return isinstance(v, (int, float)) or (isinstance(v, Prod) and all(
        type(d) is int for d in v))


def emit_call(call: NativeCall) -> tuple[str, str, CFunction]:
    """The wrapper of ``call``: its symbol, its C text and its :class:`CFunction` (the
    typed ABI: buffer shapes with their symbolic sizes as size arguments).
    :class:`~plait.codegen.c.sizes.UnboundSize` when a value names a size no buffer
    binds (the rule then leaves the call alone)."""
    sizes = SizeArgs([(b.shape, b.dtype) for b in call.buffers])
    sig = [f"{'' if b.out else 'const '}{C_TYPES[b.dtype]}* {b.name}" for b in call.buffers]
    sig.extend(sizes.c_params())
    body = ""
    if call.guard:
        guarded = next(b for b in call.buffers
                       if (b.name == call.guard if isinstance(call.guard, str) else b.out))
        body += sizes.empty_guard(guarded.shape)
    pointers = {b.name for b in call.buffers}
    structs = list(call.locals)
    if call.desc_type is not None:
        structs.append(Local("d", call.desc_type, call.desc))
    for st in structs:
        fields = ", ".join(f".{k} = {_value(v, sizes)}" for k, v in st.fields)
        static = "static " if all(_constant(v, pointers) for _, v in st.fields) else ""
        body += f"    {static}const {st.ctype} {st.name} = {{{fields}}};\n"
    body += f"    return {call.entry}({', '.join(_value(a, sizes) for a in call.args)});\n"
    signature = ", ".join(sig)
    digest = hashlib.sha256(repr((signature, body, sizes.params)).encode()).hexdigest()[:16]
    name = f"plait_{call.kind}_{digest}"
    code = f"int {name}({signature}) {{\n{body}}}\n"
    n_out = sum(b.out for b in call.buffers)
    return name, code, CFunction(name, sizes.params, n_out, name, "int")


__all__ = ["C_TYPES", "DESC", "NULL", "Buffer", "Local", "NativeCall", "Ref", "Struct", "Value",
           "emit_call"]
