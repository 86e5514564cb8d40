"""The operator registry.

An operator has a name (``"relu"``, or ``"qnn.quantize"`` for a dialect's op), the
names of its inputs, an attribute schema, a type-inference function, a purity flag,
a fusion pattern kind and, optionally, a numpy reference implementation.

    register_op(
        "relu",
        inputs=("x",),
        infer_type=infer_unary,
        pattern="elemwise",
        reference=lambda x: np.maximum(x, 0),
        doc="max(x, 0) elementwise",
    )

Attributes of a call are checked against the schema when the call is made through
:func:`make_call` (and by the parser and the well-formedness check): an unknown or
ill-typed attribute is rejected with the op and the attribute named.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..ir.attrs import Attrs, freeze_value
from ..ir.expr import Call, Expr, Op
from ..ir.types import DTYPES, Type

REQUIRED = object()
"""Default of an attribute that every call must give."""

ATTR_KINDS = (
    "int",
    "float",
    "bool",
    "str",
    "dtype",
    "ints",
    "floats",
    "dims",
    "int_or_ints",
    "type",
    "any",
)
"""Attribute value kinds: ``ints`` is a tuple of ints, ``dims`` a tuple of ints and
symbolic sizes, ``type`` a graph IR type, ``any`` no check."""

PATTERNS = ("elemwise", "broadcast", "injective", "reduce", "out_elemwise_fusable", "opaque")
"""Fusion pattern kinds, from most to least fusable."""


class OpError(Exception):
    """Base of errors about an operator call."""


class OpAttrError(OpError, TypeError):
    """A call gave an unknown, missing or ill-typed attribute."""


class OpTypeError(OpError, TypeError):
    """Type inference rejected the arguments of a call."""

    def __init__(self, message: str, arg: int | None = None) -> None:
        super().__init__(message)
        self.arg = arg


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of an op: its kind, default (or ``REQUIRED``), allowed values."""

    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}; expected one of {ATTR_KINDS}")


@dataclass
class InferContext:
    """What a type-inference function sees: the op, the argument expressions and
    their types, and the (already validated) attributes."""

    op: OpDef
    args: tuple[Expr, ...]
    types: tuple[Type | None, ...]
    attrs: Attrs

    def fail(self, message: str, arg: int | None = None) -> NoReturn:
        """Raise an :class:`OpTypeError` about argument ``arg`` (or the whole call)."""
        raise OpTypeError(message, arg)


InferFn = Callable[[InferContext], Type]


@dataclass
class OpDef:
    """The registered definition of an operator."""

    name: str
    inputs: tuple[str, ...]
    attrs: dict[str, AttrSpec]
    infer_type: InferFn
    pure: bool = True
    pattern: str = "opaque"
    reference: Callable[..., Any] | None = None
    doc: str = ""
    namespace: str = "core"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def op(self) -> Op:
        return Op.get(self.name)

    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.endswith("?"))

    @property
    def max_inputs(self) -> int | None:
        if self.inputs and self.inputs[-1].startswith("*"):
            return None
        return len(self.inputs)

    def infer_call(self, call: Call, types: tuple[Type | None, ...]) -> tuple[Type, Attrs]:
        """Check a call's arity and attributes and infer its type.  Returns the type
        and the attributes with defaults filled in."""
        check_arity(self, len(call.args))
        attrs = normalize_attrs(self, call.attrs)
        return self.infer_type(InferContext(self, call.args, types, attrs)), attrs

    def input_name(self, i: int) -> str:
        if i < len(self.inputs):
            return self.inputs[i].rstrip("?").lstrip("*")
        return self.inputs[-1].lstrip("*") if self.inputs else f"arg{i}"


def register_op(
    name: str,
    *,
    inputs: tuple[str, ...] = ("x",),
    attrs: Mapping[str, AttrSpec] | None = None,
    infer_type: InferFn,
    pure: bool = True,
    pattern: str = "opaque",
    reference: Callable[..., Any] | None = None,
    doc: str = "",
    override: bool = False,
) -> OpDef:
    """Register an operator.  A dotted name (``qnn.quantize``) puts it in a dialect
    namespace.  Inputs ending in ``?`` are optional; an input starting with ``*``
    takes any number of arguments."""
    if name in Op.definitions and not override:
        raise ValueError(f"operator {name!r} is already registered (pass override=True)")
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r} for op {name!r}; expected one of {PATTERNS}")
    namespace = name.rsplit(".", 1)[0] if "." in name else "core"
    d = OpDef(
        name=name,
        inputs=tuple(inputs),
        attrs=dict(attrs or {}),
        infer_type=infer_type,
        pure=pure,
        pattern=pattern,
        reference=reference,
        doc=doc,
        namespace=namespace,
    )
    Op.definitions[name] = d
    Op.get(name)
    return d


def get_op(name: str) -> OpDef:
    """The definition of op ``name``; the error lists close matches."""
    return Op.get(name).definition


def list_ops(namespace: str | None = None) -> list[OpDef]:
    """Every registered op (optionally of one namespace), sorted by name."""
    return sorted(
        (d for d in Op.definitions.values() if namespace is None or d.namespace == namespace),
        key=lambda d: d.name,
    )


# ---------------------------------------------------------------- attributes


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_kind(kind: str, v: Any) -> bool:
    if kind == "any":
        return True
    if kind == "int":
        return _is_int(v)
    if kind == "float":
        return isinstance(v, int | float) and not isinstance(v, bool)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "dtype":
        return isinstance(v, str) and v in DTYPES
    if kind == "ints":
        return isinstance(v, tuple) and all(_is_int(x) for x in v)
    if kind == "floats":
        return isinstance(v, tuple) and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in v
        )
    if kind == "dims":
        return isinstance(v, tuple) and all(_is_int(x) or isinstance(x, str) for x in v)
    if kind == "int_or_ints":
        return _is_int(v) or (isinstance(v, tuple) and all(_is_int(x) for x in v))
    if kind == "type":
        return isinstance(v, Type)
    raise AssertionError(kind)


_KIND_TEXT = {
    "int": "an int",
    "float": "a number",
    "bool": "True or False",
    "str": "a string",
    "dtype": "a dtype name",
    "ints": "a tuple of ints",
    "floats": "a tuple of numbers",
    "dims": "a tuple of ints and symbolic sizes",
    "int_or_ints": "an int or a tuple of ints",
    "type": "a type",
    "any": "any value",
}


def normalize_attrs(opdef: OpDef, attrs: Mapping[str, Any] | None) -> Attrs:
    """Check ``attrs`` against the op's schema and fill in defaults."""
    if isinstance(attrs, Attrs) and attrs.checked_by is opdef:
        return attrs
    given = {k: freeze_value(v) for k, v in (attrs or {}).items()}
    out: dict[str, Any] = {}
    for key in given:
        if key not in opdef.attrs:
            close = difflib.get_close_matches(key, list(opdef.attrs), n=3)
            known = ", ".join(opdef.attrs) or "none"
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise OpAttrError(
                f"op {opdef.name!r} has no attribute {key!r}; {hint}its attributes are: {known}"
            )
    for key, spec in opdef.attrs.items():
        if key in given:
            v = given[key]
            if spec.kind == "float" and _is_int(v):
                v = float(v)
            if spec.kind == "floats" and isinstance(v, tuple):
                v = tuple(float(x) if _is_int(x) else x for x in v)
            if not (v is None and spec.default is None) and not _check_kind(spec.kind, v):
                raise OpAttrError(
                    f"attribute {key!r} of op {opdef.name!r} must be {_KIND_TEXT[spec.kind]}, "
                    f"got {v!r}"
                )
            if spec.choices is not None and v not in spec.choices:
                raise OpAttrError(
                    f"attribute {key!r} of op {opdef.name!r} must be one of "
                    f"{', '.join(map(repr, spec.choices))}, got {v!r}"
                )
            out[key] = v
        elif spec.default is REQUIRED:
            raise OpAttrError(
                f"op {opdef.name!r} requires attribute {key!r} ({spec.doc or spec.kind})"
            )
        else:
            out[key] = spec.default
    checked = Attrs.frozen(out)
    checked.checked_by = opdef
    return checked


def check_arity(opdef: OpDef, nargs: int) -> None:
    """Raise an :class:`OpTypeError` if ``nargs`` does not fit the op's inputs."""
    lo, hi = opdef.min_inputs, opdef.max_inputs
    if nargs < lo or (hi is not None and nargs > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        names = ", ".join(opdef.inputs)
        raise OpTypeError(f"op {opdef.name!r} takes {want} arguments ({names}), got {nargs}")


def make_call(name: str, *args: Expr, span: Any = None, **attrs: Any) -> Call:
    """A call of the registered op ``name`` with validated attributes (type not yet
    inferred: the block builder does that)."""
    opdef = get_op(name)
    check_arity(opdef, len(args))
    return Call(opdef.op, tuple(args), normalize_attrs(opdef, attrs), span=span)
