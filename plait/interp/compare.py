"""Inputs for a reference run, and comparing the outputs of two runs with a tolerance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.expr import Function
from ..ir.types import TensorType


def random_inputs(func: Function, seed: int = 0,
                  sizes: dict[str, int] | None = None) -> list[np.ndarray]:
    """Seeded random arrays for the tensor parameters of ``func``: standard normal for
    floats, integers in [0, 10) for integers, coin flips for bools; symbolic sizes from
    ``sizes`` or 1."""
    rng = np.random.default_rng(seed)
    sizes = dict(sizes or {})
    out = []
    for p in func.params:
        ty = p.ty
        if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
            raise ValueError(f"parameter {p.name_hint!r} has type {ty}; random inputs need "
                             "tensors of known rank and dtype (give the inputs)")
        shape = tuple(d if isinstance(d, int) else sizes.setdefault(d, 1) for d in ty.shape)
        dt = np.dtype(ty.dtype)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.random(shape) < 0.5)
        else:
            out.append(rng.integers(0, 10, size=shape).astype(dt))
    return out


def flatten_outputs(value: Any) -> list[np.ndarray]:
    """The arrays of a result (nested tuples flattened, scalars as 0-d arrays)."""
    out: list[np.ndarray] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple | list):
            stack.extend(reversed(v))
        else:
            out.append(np.asarray(v))
    return out


@dataclass(frozen=True)
class Difference:
    """How output ``index`` of a run differs from the reference: the largest absolute
    error, where it is, the values there, and whether it is within tolerance."""

    index: int
    max_abs: float
    where: tuple[int, ...]
    got: float
    want: float
    ok: bool
    note: str = ""

    def __str__(self) -> str:
        if self.note:
            return f"output {self.index}: {self.note}"
        return (f"output {self.index}: max abs error {self.max_abs:.3g} at index "
                f"{self.where} (got {self.got:.6g}, expected {self.want:.6g})")


def compare_outputs(got: Any, want: Any, rtol: float, atol: float) -> list[Difference]:
    """One :class:`Difference` per output of ``want`` (a structural mismatch is an output
    that is not ok, with a note).  NaN equals NaN."""
    g, w = flatten_outputs(got), flatten_outputs(want)
    if len(g) != len(w):
        return [Difference(0, float("inf"), (), float("nan"), float("nan"), False,
                           f"{len(g)} outputs instead of {len(w)}")]
    out = []
    for i, (a, b) in enumerate(zip(g, w)):
        if a.shape != b.shape:
            out.append(Difference(i, float("inf"), (), float("nan"), float("nan"), False,
                                  f"shape {a.shape} instead of {b.shape}"))
            continue
        if a.size == 0:
            out.append(Difference(i, 0.0, (), 0.0, 0.0, True))
            continue
        af, bf = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(af - bf)
        both_nan = np.isnan(af) & np.isnan(bf)
        diff = np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
        pos = np.unravel_index(int(np.argmax(diff)), diff.shape)
        ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(np.isnan(bf), 0.0, bf))))
        out.append(Difference(i, float(diff[pos]), tuple(int(x) for x in pos),
                              float(af[pos]), float(bf[pos]), ok))
    return out


__all__ = ["Difference", "compare_outputs", "flatten_outputs", "random_inputs"]
