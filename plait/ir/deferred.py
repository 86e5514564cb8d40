"""Constants computed when first read: a weight packed for a kernel without holding the
packed copy beside the original while the pipeline runs.

A target that packs a constant weight (panels for a matrix product, a Winograd
transform) makes ``deferred_constant(source, make, shape, dtype)``: a
:class:`~plait.ir.expr.Constant` of the packed type whose data is ``make(source)``,
computed the first time anything reads ``Constant.data`` (code generation, a printer,
the interpreter: every reader sees the same array, computed once).  Until then the
node holds only ``source``; once computed it drops ``source``, so the original's memory
is returned as soon as nothing else (the caller's module, an earlier module of the
pipeline) holds it.  Building a model therefore never needs the originals and all their
packed copies at the same time: the build's peak is about the larger of the two, not
their sum.

``inverse`` (optional) computes the original back from the packed array, bit for bit
(packing into panels only moves and pads elements); ``plait.build`` uses it so that the
graph an executable keeps refers to the packed constant instead of holding the original
(:func:`plait.build.build`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .expr import Constant, DeferredArray, constant_raw_data


def deferred_constant(source: np.ndarray, make: Callable[[np.ndarray], np.ndarray],
                      shape: tuple[int, ...], dtype: Any = np.float32, *,
                      inverse: Callable[[np.ndarray], np.ndarray] | None = None) -> Any:
    """A :class:`~plait.ir.expr.Constant` of type ``shape`` x ``dtype`` whose data is
    ``make(source)``, computed when first read (see the module's docstring).  ``make``
    must be a pure function of ``source`` returning exactly that shape and dtype;
    ``inverse``, if given, must return ``source``'s elements bit for bit from the
    result."""
    return Constant(DeferredArray(source, make, shape, dtype, inverse))  # type: ignore[arg-type]


def deferred_of(const: Any) -> DeferredArray | None:
    """The :class:`DeferredArray` a constant still holds, or None (computed already, or
    never deferred).  Reading it does not compute the data."""
    raw = constant_raw_data(const)
    return raw if type(raw) is DeferredArray else None


__all__ = ["DeferredArray", "deferred_constant", "deferred_of"]
