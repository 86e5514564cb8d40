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

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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
    d = DeferredArray(source, make, shape, dtype, inverse)
    refs = _RECORDING.get()
    if refs is not None:
        refs.append(weakref.ref(d))
    return Constant(d)  # type: ignore[arg-type]


Part = tuple[tuple[int, ...], Any, Callable[[np.ndarray], np.ndarray] | None]
"""The declaration of one of :func:`deferred_constants`' results: (shape, dtype, inverse
or None)."""


def deferred_constants(source: np.ndarray,
                       make: Callable[[np.ndarray], Sequence[np.ndarray]],
                       parts: Sequence[Part]) -> tuple[Any, ...]:
    """Constants computed together, when the first of them is read: ``make(source)``
    returns one array per entry of ``parts`` (shape, dtype, inverse or None), in order
    (a weight quantized into values, scales and zero points by one pass over it).  The
    first read computes them all; each is handed to its constant and dropped here, and
    ``source`` goes once every constant has been read."""
    together = _Together(make, len(parts))
    return tuple(deferred_constant(source, together.part(i), shape, dtype, inverse=inverse)
                 for i, (shape, dtype, inverse) in enumerate(parts))


class _Together:
    """The results of one ``make(source)`` shared by several deferred constants, each
    handed out once."""

    def __init__(self, make: Callable[[np.ndarray], Sequence[np.ndarray]], n: int) -> None:
        self._make: Callable[[np.ndarray], Sequence[np.ndarray]] | None = make
        self._results: list[np.ndarray | None] | None = None
        self._n = n

    def part(self, i: int) -> Callable[[np.ndarray], np.ndarray]:
        """The function computing result ``i`` (called under the deferred lock)."""

        def make(src: np.ndarray) -> np.ndarray:
            if self._results is None:
                assert self._make is not None
                results = list(self._make(src))
                if len(results) != self._n:
                    raise ValueError(
                        f"a function of deferred constants returned {len(results)} arrays "
                        f"for {self._n} constants ({getattr(self._make, '__qualname__', '')}"
                        "): fix its declaration")
                self._results, self._make = results, None
            out = self._results[i]
            self._results[i] = None
            assert out is not None, "a deferred constant computed twice"
            return out

        return make


_RECORDING: ContextVar[list[weakref.ref[DeferredArray]] | None] = ContextVar(
    "plait.ir.deferred.recording", default=None)
"""Weak references to the deferred arrays made in this context since
:func:`recording_deferred` began (None: not recording)."""


class DeferredRecord:
    """The deferred arrays made while :func:`recording_deferred` was active, held weakly:
    an array no node holds any more (a pass made it, a later one dropped it) is gone."""

    def __init__(self) -> None:
        self._refs: list[weakref.ref[DeferredArray]] = []

    def pending(self) -> list[DeferredArray]:
        """The recorded arrays still alive and not computed yet, in the order they were
        made."""
        out = []
        for ref in self._refs:
            d = ref()
            if d is not None and d.source is not None:
                out.append(d)
        return out


@contextmanager
def recording_deferred() -> Iterator[DeferredRecord]:
    """Record the deferred constants made in this context (this thread or task) while
    the block runs: ``plait.build`` reads the packed weights of the module it built
    from the record instead of walking the module for them."""
    record = DeferredRecord()
    token = _RECORDING.set(record._refs)
    try:
        yield record
    finally:
        _RECORDING.reset(token)


def deferred_of(const: Any) -> DeferredArray | None:
    """The :class:`DeferredArray` a constant still holds, or None (computed already, or
    never deferred).  Reading it does not compute the data."""
    raw = constant_raw_data(const)
    return raw if type(raw) is DeferredArray else None


__all__ = ["DeferredArray", "DeferredRecord", "Part", "deferred_constant", "deferred_constants",
           "deferred_of", "recording_deferred"]
