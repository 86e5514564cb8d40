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

from plait.errors import PlaitError

from ..ir import symbolic as sym
from ..ir.attrs import Attrs, freeze_value
from ..ir.expr import Call, DataflowVar, Expr, ExternFunc, GlobalVar, Op, Tuple, Var
from ..ir.types import DTYPES, Type
from ..runtime.lazy_compiler import load_compiler

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
    "dim",
    "int_or_ints",
    "int_or_dims",
    "type",
    "any",
)
"""Attribute value kinds: ``ints`` is a tuple of ints, ``dims`` a tuple of ints and
symbolic sizes, ``dim`` one of those, ``int_or_dims`` an int or a ``dims`` tuple,
``type`` a graph IR type, ``any`` no check."""

PATTERNS = ("elemwise", "broadcast", "injective", "reduce", "out_elemwise_fusable", "opaque")
"""Fusion pattern kinds, from most to least fusable."""


class OpError(PlaitError):
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
    _attrs_cache: dict[tuple, Attrs] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Checked attributes by the (type-tagged) attributes given: see :func:`normalize_attrs`."""
    _infer_cache: dict[tuple, tuple] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Inferred types of calls whose inference sees only types: see :meth:`infer_call`."""
    _id_cache: dict[tuple, tuple] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The same, keyed by the identity of the argument types (looked up first)."""
    _arity: tuple | None = field(default=None, init=False, repr=False, compare=False)

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
        and the attributes with defaults filled in.

        The result is cached when the inference function can see nothing but the
        argument types and the attributes: the attributes were already checked
        against this op (so they are returned as they are) and every argument is a
        variable, an extern function, a global function or a tuple of variables (the
        key holds each argument's class, type and name, never a constant's value).
        Failures are not cached, so errors are raised afresh with their message."""
        attrs = call.attrs
        key = ikey = None
        if attrs.checked_by is self and type(types) is tuple:
            sig = _arg_signature(call.args, types)
            if sig is not None:
                # first by the identity of the types (no hashing of types), then by
                # their value; an entry keeps its types alive, so their ids stay theirs
                ikey = (id(attrs), sig, *map(id, types))
                hit = self._id_cache.get(ikey)
                if hit is not None and hit[0] is attrs and hit[1] is self.infer_type:
                    return hit[2], attrs
                key = (id(attrs), types, sig)
                try:
                    hit = self._infer_cache.get(key)
                except TypeError:  # a type that cannot be hashed: no caching
                    hit = key = ikey = None
                if hit is not None and hit[0] is attrs and hit[1] is self.infer_type:
                    self._remember(ikey, (hit[0], hit[1], hit[2], types))
                    return hit[2], attrs
        check_arity(self, len(call.args))
        attrs = normalize_attrs(self, attrs)
        fn = self.infer_type
        ty = fn(InferContext(self, call.args, types, attrs))
        if key is not None:
            cache = self._infer_cache
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            # The attributes are kept alive by the entry, so their id is not reused.
            cache[key] = (attrs, fn, ty)
            self._remember(ikey, (attrs, fn, ty, types))
        return ty, attrs

    def _remember(self, ikey: tuple | None, entry: tuple) -> None:
        if ikey is not None:
            cache = self._id_cache
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            cache[ikey] = entry

    def normalize_attrs(self, attrs: Mapping[str, Any] | None) -> Attrs:
        """:func:`normalize_attrs` for this op (for the IR layer's parser, which reaches
        op definitions through ``Op.definitions`` and imports nothing of this layer)."""
        return normalize_attrs(self, attrs)

    def input_name(self, i: int) -> str:
        if i < len(self.inputs):
            return self.inputs[i].rstrip("?").lstrip("*")
        return self.inputs[-1].lstrip("*") if self.inputs else f"arg{i}"


_CACHE_MAX = 4096
"""Entries per op in each of its caches (a full cache is emptied)."""


def _arg_signature(args: tuple[Expr, ...], types: tuple) -> tuple | None:
    """What an inference function can learn about ``args`` besides their ``types``:
    each argument's class (and the name of an extern or global function; for a
    tuple, the classes of its fields and its annotation when that is not the type
    given), or None when an argument carries a value (a constant, a shape, a nested
    expression) that inference might read."""
    sig = []
    for i, a in enumerate(args):
        t = type(a)
        if t is Var or t is DataflowVar:
            sig.append(t)
        elif t is ExternFunc:
            sig.append((t, a.symbol))
        elif t is GlobalVar:
            sig.append((t, a.name_hint))
        elif t is Tuple:
            fields = []
            for f in a.fields:
                ft = type(f)
                if ft is not Var and ft is not DataflowVar:
                    return None
                fields.append(ft)
            ty = a.ty
            sig.append((t, _SAME if i < len(types) and ty is types[i] else ty, tuple(fields)))
        else:
            return None
    return tuple(sig)


_SAME = "<the type given>"


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
    load_compiler()  # the dialects' ops too
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
        return isinstance(v, tuple) and all(_is_int(x) or sym.is_dim(x) for x in v)
    if kind == "dim":
        return _is_int(v) or sym.is_dim(v)
    if kind == "int_or_ints":
        return _is_int(v) or (isinstance(v, tuple) and all(_is_int(x) for x in v))
    if kind == "int_or_dims":
        return _is_int(v) or (isinstance(v, tuple) and all(_is_int(x) or sym.is_dim(x)
                                                           for x in v))
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
    "dim": "an int or a symbolic size",
    "int_or_ints": "an int or a tuple of ints",
    "int_or_dims": "an int or a tuple of ints and symbolic sizes",
    "type": "a type",
    "any": "any value",
}


def normalize_attrs(opdef: OpDef, attrs: Mapping[str, Any] | None) -> Attrs:
    """Check ``attrs`` against the op's schema and fill in defaults.

    The result for attributes made of plain values (None, bools, ints, floats,
    strings, types, and tuples and mappings of them) is cached per op, keyed on the
    values *and their Python types* (so ``1``, ``1.0`` and ``True`` never share an
    entry); the cached :class:`Attrs` is immutable and shared."""
    if isinstance(attrs, Attrs) and attrs.checked_by is opdef:
        return attrs
    key = _attrs_key(attrs) if attrs else ()
    if key is not None:
        try:
            hit = opdef._attrs_cache.get(key)
        except TypeError:  # a type attribute that cannot be hashed: no caching
            hit = key = None
        if hit is not None:
            return hit
    checked = _normalize_attrs(opdef, attrs)
    if key is not None:
        cache = opdef._attrs_cache
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = checked
    return checked


_PLAIN = frozenset({str, int, bool, type(None)})


def _attrs_key(attrs: Mapping[str, Any]) -> tuple | None:
    """A hashable key for ``attrs`` that two mappings share only if their items are
    the same keys, in the same order, with equal values of the same Python types
    (nested in tuples, lists and mappings); None if some value is of another kind."""
    out = []
    for k, v in attrs.items():
        vk = _value_key(v, 0)
        if vk is None:
            return None
        out.append((k, vk))
    return tuple(out)


def _value_key(v: Any, depth: int) -> Any:
    t = type(v)
    if t in _PLAIN:
        return (t, v)
    if t is float:
        return (t, v.hex())  # tells 0.0 from -0.0; nan keys equal
    if depth > 8:
        return None
    if t is tuple or t is list:
        items = []
        for x in v:
            xk = _value_key(x, depth + 1)
            if xk is None:
                return None
            items.append(xk)
        return (t, tuple(items))
    if t is Attrs or t is dict:
        items = []
        for k, x in v.items():
            xk = _value_key(x, depth + 1)
            if xk is None or type(k) is not str:
                return None
            items.append((k, xk))
        return (t, tuple(items))
    if isinstance(v, Type) or t is sym.SymExpr:
        return (t, v)  # types are immutable values; equal types are interchangeable
    return None


def _dim_attr(opdef: OpDef, key: str, x: Any) -> Any:
    """An entry of a ``dims`` attribute: a size expression written as a string
    (``"batch * heads"``, how the text format prints one) parsed to its canonical form."""
    if type(x) is str and not x.isidentifier():
        try:
            return sym.parse_dim(x)
        except sym.SymbolicError as e:
            raise OpAttrError(f"attribute {key!r} of op {opdef.name!r}: {e}") from None
    return x


def _normalize_attrs(opdef: OpDef, attrs: Mapping[str, Any] | None) -> Attrs:
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
            v = _coerce(spec, given[key])
            if spec.kind in ("dims", "int_or_dims") and isinstance(v, tuple):
                v = tuple(_dim_attr(opdef, key, x) for x in v)
            elif spec.kind == "dim":
                v = _dim_attr(opdef, key, v)
            problem = _value_problem(opdef, key, spec, v)
            if problem:
                raise OpAttrError(problem)
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


def _coerce(spec: AttrSpec, v: Any) -> Any:
    """An int given for a float attribute (or among floats) as a float."""
    if spec.kind == "float" and _is_int(v):
        return float(v)
    if spec.kind == "floats" and isinstance(v, tuple):
        return tuple(float(x) if _is_int(x) else x for x in v)
    return v


def _value_problem(opdef: OpDef, key: str, spec: AttrSpec, v: Any) -> str | None:
    """What is wrong with the value ``v`` (coerced) of attribute ``key``, or None."""
    if not (v is None and spec.default is None) and not _check_kind(spec.kind, v):
        return (f"attribute {key!r} of op {opdef.name!r} must be {_KIND_TEXT[spec.kind]}, "
                f"got {v!r}")
    if spec.choices is not None and v not in spec.choices:
        return (f"attribute {key!r} of op {opdef.name!r} must be one of "
                f"{', '.join(map(repr, spec.choices))}, got {v!r}")
    return None


def keyword_check(opdef: OpDef) -> Callable[[Mapping[str, Any]], str | None]:
    """The check of the keywords of a call of the op's runtime function (``numpy.<op>``,
    :mod:`plait.runtime.call_schema`): each keyword the op has as an attribute must be
    of its kind and among its choices (the names themselves are the function's to
    judge).  Keywords given as registers or constants are left to run time."""

    def check(kwargs: Mapping[str, Any]) -> str | None:
        for key, v in kwargs.items():
            spec = opdef.attrs.get(key)
            if spec is None or type(v).__name__ in ("Reg", "Const"):
                continue
            try:
                frozen = freeze_value(v)
            except TypeError:
                return f"attribute {key!r} of op {opdef.name!r}: {v!r} is not a value"
            problem = _value_problem(opdef, key, spec, _coerce(spec, frozen))
            if problem:
                return problem
        return None

    return check


def check_arity(opdef: OpDef, nargs: int) -> None:
    """Raise an :class:`OpTypeError` if ``nargs`` does not fit the op's inputs."""
    arity = opdef._arity
    if arity is None or arity[0] is not opdef.inputs:
        arity = opdef._arity = (opdef.inputs, opdef.min_inputs, opdef.max_inputs)
    lo, hi = arity[1], arity[2]
    if lo <= nargs and (hi is None or nargs <= hi):
        return
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
