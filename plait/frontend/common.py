"""What the importers share: the base class of their errors and import-time folding of
calls on constants."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plait.errors import PlaitError

from ..ir.expr import Call, Constant, Expr, Op, Tuple
from ..ir.types import TensorType, TupleType, Type
from ..op.registry import get_op


class FrontendImportError(PlaitError, ValueError):
    """A model that a frontend cannot import (``OnnxImportError``, ``TorchImportError``
    are subclasses): catch this to handle any importer's refusal."""


def unique_name(used: dict[str, int], base: str) -> str:
    """``base``, or ``base_<n>`` with the first ``n`` not taken; records the name in
    ``used`` (name -> the last suffix tried for it)."""
    n = used.get(base)
    if n is None:
        used[base] = 0
        return base
    while True:
        n += 1
        cand = f"{base}_{n}"
        if cand not in used:
            used[base] = n
            used[cand] = 0
            return cand


FOLD_LIMIT = 1 << 20
"""Calls on constants whose result has at most this many elements are evaluated at
import time."""


def fold(expr: Expr) -> Expr | None:
    """``expr`` evaluated if it is a call of an op with a numpy reference on constant
    arguments and a small static result; else None."""
    if not isinstance(expr, Call) or not isinstance(expr.op, Op):
        return None
    arrays: list[Any] = []
    for a in expr.args:
        if isinstance(a, Constant):
            arrays.append(a.data)
        elif isinstance(a, Tuple) and all(isinstance(f, Constant) for f in a.fields):
            arrays.append([f.data for f in a.fields])  # type: ignore[union-attr]
        else:
            return None
    if not _small_static(expr.ty):
        return None
    ref = get_op(expr.op.name).reference
    if ref is None:
        return None
    try:
        with np.errstate(all="ignore"):
            result = ref(*arrays, **dict(expr.attrs))
    except Exception:
        return None  # left for run time, which reports the problem with its location
    if isinstance(result, tuple):
        fields = tuple(Constant(np.asarray(r)) for r in result)
        return Tuple(fields, ty=TupleType(tuple(f.ty for f in fields)))  # type: ignore[misc]
    out = Constant(np.asarray(result))
    if out.ty != expr.ty:
        return None
    return out


def _small_static(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return t.is_static and math.prod(t.shape) <= FOLD_LIMIT  # type: ignore[arg-type]
    if isinstance(t, TupleType):
        return all(_small_static(f) for f in t.fields)
    return False
