"""Builtin packed functions of the VM (``vm.builtin.*``).

These are the few operations lowered code needs besides kernels: building and taking
apart tuples, reading shapes, copying, reshaping without a copy, runtime type checks
(``match_cast``) and allocating a tensor whose shape is only known at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.runtime.packed import register_func
from plait.runtime.sizes import eval_size


def _shape_arg(shape: Any, who: str) -> tuple[int, ...]:
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if not isinstance(shape, tuple | list) or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) for d in shape
    ):
        raise TypeError(f"{who}: shape must be a tuple of ints, got {shape!r}")
    return tuple(int(d) for d in shape)


@register_func("vm.builtin.tuple")
def make_tuple(*items: Any) -> tuple[Any, ...]:
    """A tuple of the arguments."""
    return items


@register_func("vm.builtin.tuple_getitem")
def tuple_getitem(t: tuple[Any, ...], index: int) -> Any:
    """Field ``index`` of tuple ``t``."""
    if not isinstance(t, tuple | list):
        raise TypeError(f"tuple_getitem: expected a tuple, got {type(t).__name__}")
    if not -len(t) <= int(index) < len(t):
        raise IndexError(f"tuple_getitem: index {index} out of range for a tuple of {len(t)}")
    return t[int(index)]


@register_func("vm.builtin.identity")
def identity(x: Any) -> Any:
    """``x`` itself (moves a constant or immediate into a register)."""
    return x


@register_func("vm.builtin.dim")
def dim(x: np.ndarray, axis: int) -> int:
    """Size ``axis`` of ``x`` as a Python int (a symbolic size's value)."""
    return int(np.shape(x)[int(axis)])


@register_func("vm.builtin.shape_of")
def shape_of(x: np.ndarray) -> tuple[int, ...]:
    """The shape of ``x`` as a tuple of Python ints."""
    return tuple(int(d) for d in np.shape(x))


@register_func("vm.builtin.copy")
def copy(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Copy ``x`` into ``out`` (same shape; casting as numpy's ``same_kind``); returns
    ``out``."""
    if np.shape(x) != out.shape:
        raise ValueError(
            f"copy: source shape {np.shape(x)} differs from destination shape {out.shape}"
        )
    np.copyto(out, x, casting="same_kind")
    return out


@register_func("vm.builtin.reshape_view")
def reshape_view(x: np.ndarray, shape: Any) -> np.ndarray:
    """``x`` reshaped to ``shape`` (one entry may be -1); a view whenever numpy can make
    one, which it always can for a C-contiguous ``x``."""
    return np.reshape(x, _shape_arg(shape, "reshape_view"))


@register_func("vm.builtin.check_tensor")
def check_tensor(x: Any, shape: Any, dtype: str | None, name: str) -> np.ndarray:
    """Check that ``x`` is a tensor matching ``shape`` and ``dtype``; return it.

    ``shape`` is None (any rank) or a sequence whose entries are ints (exact size), names
    (a symbolic size: equal names within this check must have equal sizes) or None (any
    size).  ``dtype`` None accepts any dtype.  ``name`` is used in the error message.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"match_cast of {name!r}: expected a tensor, got {type(x).__name__}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(f"match_cast of {name!r}: expected dtype {dtype}, got {x.dtype}")
    if shape is None:
        return x
    if x.ndim != len(shape):
        raise ValueError(
            f"match_cast of {name!r}: expected rank {len(shape)} "
            f"(shape {tuple(shape)}), got rank {x.ndim} (shape {x.shape})"
        )
    bound: dict[str, tuple[int, int]] = {}
    for axis, (want, got) in enumerate(zip(shape, x.shape)):
        if want is None:
            continue
        if isinstance(want, str):
            if not want.isidentifier():
                raise ValueError(
                    f"match_cast of {name!r}: dimension {axis} is the size expression {want}; "
                    "a match_cast binds plain names (match to a fresh name instead)")
            if want in bound and bound[want][0] != got:
                size, first = bound[want]
                raise ValueError(
                    f"match_cast of {name!r}: dimension {axis} is {got} but symbolic size "
                    f"{want!r} is {size} (dimension {first})"
                )
            bound.setdefault(want, (got, axis))
        elif int(want) != got:
            raise ValueError(
                f"match_cast of {name!r}: dimension {axis} is {got}, "
                f"expected {want} (shape {x.shape})"
            )
    return x


@register_func("vm.builtin.eval_size")
def eval_size_of(text: str, names: tuple[str, ...], *values: int) -> int:
    """The value of size expression ``text`` (``"batch * 12"``) with ``names`` bound to
    ``values`` in order (registers holding sizes)."""
    return eval_size(text, dict(zip(names, (int(v) for v in values))))


@register_func("vm.builtin.empty")
def empty(shape: Any, dtype: str) -> np.ndarray:
    """A fresh uninitialized C-contiguous tensor."""
    return np.empty(_shape_arg(shape, "empty"), dtype=np.dtype(dtype))


BUILTINS = (
    "vm.builtin.tuple",
    "vm.builtin.tuple_getitem",
    "vm.builtin.identity",
    "vm.builtin.dim",
    "vm.builtin.shape_of",
    "vm.builtin.copy",
    "vm.builtin.reshape_view",
    "vm.builtin.check_tensor",
    "vm.builtin.empty",
    "vm.builtin.eval_size",
)
"""The names of the builtin packed functions."""
