"""Math intrinsics of the kernel IR and helper constructors for scalar expressions.

An intrinsic is called with :class:`plait.kernel.ir.Call`; :data:`INTRINSICS` lists the
names, their arity and their typing rule:

* ``float``: float arguments of one dtype, result of that dtype (``exp``, ``pow``...);
* ``numeric``: any numeric dtype, result of that dtype (``abs``);
* ``predicate``: float arguments, bool result (``isnan``...).

The helpers (``exp(x)``, ``maximum(a, b)``, ``select(c, a, b)``, ``cast(x, dtype)``...)
infer dtypes and turn Python numbers into constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .ir import (
    And,
    Call,
    Cast,
    Max,
    Min,
    Not,
    Or,
    PrimExpr,
    Select,
    as_expr,
    binary_op,
    is_float_dtype,
    is_int_dtype,
)


@dataclass(frozen=True)
class IntrinsicDef:
    """An intrinsic's name, number of arguments and typing rule."""

    name: str
    arity: int
    kind: str  # "float" | "numeric" | "predicate" | "index"

    def result_dtype(self, arg_dtypes: list[str]) -> str:
        """The result dtype for the given argument dtypes; raises TypeError when they
        do not fit the intrinsic."""
        if len(arg_dtypes) != self.arity:
            raise TypeError(
                f"intrinsic {self.name} takes {self.arity} argument(s), got {len(arg_dtypes)}"
            )
        if len(set(arg_dtypes)) > 1:
            raise TypeError(
                f"arguments of {self.name} must have one dtype, got {', '.join(arg_dtypes)}"
            )
        dtype = arg_dtypes[0]
        if self.kind == "index" and dtype != "int64":
            raise TypeError(f"intrinsic {self.name} needs int64 arguments, got {dtype}")
        if self.kind in ("float", "predicate") and not is_float_dtype(dtype):
            raise TypeError(
                f"intrinsic {self.name} needs float arguments, got {dtype}; cast it first"
            )
        if self.kind == "numeric" and not (is_float_dtype(dtype) or is_int_dtype(dtype)):
            raise TypeError(f"intrinsic {self.name} needs a numeric argument, got {dtype}")
        return "bool" if self.kind == "predicate" else dtype


_FLOAT_UNARY = (
    "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh "
    "tanh asinh acosh atanh erf floor ceil round trunc sigmoid"
).split()
_FLOAT_BINARY = ("pow", "atan2", "fmod")

INTRINSICS: dict[str, IntrinsicDef] = {
    **{n: IntrinsicDef(n, 1, "float") for n in _FLOAT_UNARY},
    **{n: IntrinsicDef(n, 2, "float") for n in _FLOAT_BINARY},
    "abs": IntrinsicDef("abs", 1, "numeric"),
    **{n: IntrinsicDef(n, 1, "predicate") for n in ("isnan", "isinf", "isfinite")},
    "checked_index": IntrinsicDef("checked_index", 2, "index"),
}
"""Every intrinsic by name.  ``round`` rounds half to even (like ``np.round``),
``sigmoid`` is ``1 / (1 + exp(-x))``, ``rsqrt`` is ``1 / sqrt(x)``, ``fmod`` has C
semantics (sign of the dividend).

``checked_index(i, n)`` (int64) is index ``i`` into an axis of size ``n``, negative
counting from the end: ``i + n`` for ``-n <= i < 0``, ``i`` for ``0 <= i < n``.  Any
other ``i`` is an error of the kernel: the generated C sets the kernel's status to
:data:`INDEX_OUT_OF_RANGE` (the call raises ``NativeCallError``, the VM a ``VMError``
naming the call) and reads element 0 instead, never outside the buffer; the kernel
interpreter raises ``KernelRunError``.  (The ``c`` target's
``out_of_range_indices="clamp"`` compiles it as a clamp into ``[0, n - 1]`` instead.)"""

INDEX_OUT_OF_RANGE = 2
"""The status a kernel returns when a :func:`checked_index` was out of range (1 is a
failed scratch allocation; :data:`plait.runtime.native.STATUS_MESSAGES`)."""


def call_intrin(name: str, *args: Any) -> Call:
    """``Call(name, args)`` with the dtype inferred; Python numbers take the dtype of
    the other arguments (float32 if all are numbers)."""
    d = INTRINSICS.get(name)
    if d is None:
        raise KeyError(f"unknown intrinsic {name!r}; known: {', '.join(sorted(INTRINSICS))}")
    like = next((a.dtype for a in args if isinstance(a, PrimExpr)), None)
    exprs = [as_expr(a, like) for a in args]
    return Call(name, tuple(exprs), d.result_dtype([e.dtype for e in exprs]))


def _make(name: str) -> Any:
    arity = INTRINSICS[name].arity

    def fn(*args: Any) -> Call:
        if len(args) != arity:
            raise TypeError(f"{name}() takes {arity} argument(s), got {len(args)}")
        return call_intrin(name, *args)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"The ``{name}`` intrinsic (see :data:`INTRINSICS`)."
    return fn


exp = _make("exp")
exp2 = _make("exp2")
expm1 = _make("expm1")
log = _make("log")
log2 = _make("log2")
log10 = _make("log10")
log1p = _make("log1p")
sqrt = _make("sqrt")
rsqrt = _make("rsqrt")
sin = _make("sin")
cos = _make("cos")
tan = _make("tan")
asin = _make("asin")
acos = _make("acos")
atan = _make("atan")
sinh = _make("sinh")
cosh = _make("cosh")
tanh = _make("tanh")
asinh = _make("asinh")
acosh = _make("acosh")
atanh = _make("atanh")
erf = _make("erf")
floor = _make("floor")
ceil = _make("ceil")
round = _make("round")  # noqa: A001
trunc = _make("trunc")
sigmoid = _make("sigmoid")
pow = _make("pow")  # noqa: A001
atan2 = _make("atan2")
fmod = _make("fmod")
abs = _make("abs")  # noqa: A001
isnan = _make("isnan")
isinf = _make("isinf")
isfinite = _make("isfinite")
checked_index = _make("checked_index")


def maximum(a: Any, b: Any) -> PrimExpr:
    """``max(a, b)`` as a :class:`Max` node."""
    return binary_op(Max, a, b)


def minimum(a: Any, b: Any) -> PrimExpr:
    """``min(a, b)`` as a :class:`Min` node."""
    return binary_op(Min, a, b)


def select(cond: Any, true_value: Any, false_value: Any) -> PrimExpr:
    """``true_value if cond else false_value`` (a :class:`Select`)."""
    cond = as_expr(cond, "bool")
    if cond.dtype != "bool":
        raise TypeError(f"select condition must be bool, got {cond.dtype}")
    like = next(
        (v.dtype for v in (true_value, false_value) if isinstance(v, PrimExpr)), None
    )
    t, f = as_expr(true_value, like), as_expr(false_value, like)
    if t.dtype != f.dtype:
        raise TypeError(f"select branches have different dtypes: {t.dtype} vs {f.dtype}")
    return Select(cond, t, f)


def cast(value: Any, dtype: str) -> PrimExpr:
    """``value`` converted to ``dtype`` (no node when it already has that dtype)."""
    e = as_expr(value, dtype if not isinstance(value, PrimExpr) else None)
    return e if e.dtype == dtype else Cast(dtype, e)


def logical_and(a: Any, b: Any) -> PrimExpr:
    """``a and b`` of bools."""
    return And(as_expr(a, "bool"), as_expr(b, "bool"))


def logical_or(a: Any, b: Any) -> PrimExpr:
    """``a or b`` of bools."""
    return Or(as_expr(a, "bool"), as_expr(b, "bool"))


def logical_not(a: Any) -> PrimExpr:
    """``not a`` of a bool."""
    return Not(as_expr(a, "bool"))


def eq(a: Any, b: Any) -> PrimExpr:
    """``a == b`` (Python ``==`` on expressions is identity, so use this)."""
    from .ir import EQ

    return binary_op(EQ, a, b)


def ne(a: Any, b: Any) -> PrimExpr:
    """``a != b``."""
    from .ir import NE

    return binary_op(NE, a, b)
