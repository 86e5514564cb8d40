"""Strided views with symbolic sizes: how a chain of view ops re-indexes a tensor.

A fused native call (``plait_attention``) reads its operands where they lie: each is a
strided view -- an element offset and a stride per axis -- of the tensor a chain of
``permute_dims``, ``strided_slice`` and reshapes starts from.  :class:`View` computes
those offsets and strides as size expressions (:mod:`plait.ir.symbolic`), so a model of
symbolic batch and sequence is read in place like a static one.  A reshape is a view
exactly when numpy's would be one without a copy; the grouping of axes follows numpy's
``_attempt_nocopy_reshape``, with products of sizes compared as canonical expressions
(a reshape whose grouping depends on the values of the sizes is declined).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plait.ir import symbolic as sym
from plait.ir.symbolic import Dim

__all__ = ["View", "broadcast_strides"]


def _divides(a: Dim, b: Dim) -> bool:
    """Whether ``b`` is ``a`` times an expression (for every value of the sizes)."""
    return sym.exact_div(b, a) is not None


@dataclass(frozen=True)
class View:
    """Element ``(i0, i1, ...)`` is at ``offset + sum(i_k * strides[k])`` of the base."""

    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0

    @staticmethod
    def contiguous(shape: Sequence[Dim]) -> View:
        """The C-contiguous view of a tensor of ``shape``."""
        strides: list[Dim] = []
        acc: Dim = 1
        for d in reversed(tuple(shape)):
            strides.append(acc)
            acc = sym.mul(acc, d)
        return View(tuple(shape), tuple(reversed(strides)))

    def permute(self, axes: Sequence[int] | None) -> View:
        """``permute_dims(axes)`` (None: reversed)."""
        order = list(range(len(self.shape)))[::-1] if axes is None else [
            int(a) % len(self.shape) for a in axes]
        return View(tuple(self.shape[a] for a in order), tuple(self.strides[a] for a in order),
                    self.offset)

    def slice(self, axes: Sequence[int], begins: Sequence[Dim], steps: Sequence[Dim],
              out_shape: Sequence[Dim]) -> View | None:
        """``strided_slice`` keeping ``out_shape`` (the result's type gives each axis's
        length); None when a start depends on a symbolic axis's size (a negative begin
        or step on it) or is itself symbolic."""
        strides = list(self.strides)
        offset = self.offset
        for a, b, s in zip(axes, begins, steps):
            ax = int(a) % len(self.shape)
            if type(b) is not int or type(s) is not int:
                return None
            size = self.shape[ax]
            if type(size) is int:
                start, _, _ = slice(b, None, s).indices(size)
            elif b >= 0 and s > 0:
                start = b
            else:
                return None
            offset = sym.add(offset, sym.mul(start, strides[ax]))
            strides[ax] = sym.mul(strides[ax], s)
        if len(out_shape) != len(self.shape):
            return None
        return View(tuple(out_shape), tuple(strides), offset)

    def reshape(self, new: Sequence[Dim]) -> View | None:
        """The same elements in the same order as ``new``, as a view, or None when
        that needs a copy (or the grouping of axes cannot be decided symbolically)."""
        new = tuple(new)
        if sym.product(new) != sym.product(self.shape):
            return None
        old = [(d, s) for d, s in zip(self.shape, self.strides) if d != 1]
        out: list[Dim] = [1] * len(new)
        oi = oj = 0
        while oi < len(old) and oj < len(new):
            op, np_ = old[oi][0], new[oj]
            oi2, oj2 = oi + 1, oj + 1
            while op != np_:
                if type(op) is int and type(np_) is int:
                    more_new, more_old = np_ < op, op < np_
                else:   # symbolic: the smaller product divides the larger one
                    more_new, more_old = _divides(np_, op), _divides(op, np_)
                if more_new and oj2 < len(new):     # more new axes in the group
                    np_ = sym.mul(np_, new[oj2])
                    oj2 += 1
                elif more_old and oi2 < len(old):   # more old axes in the group
                    op = sym.mul(op, old[oi2][0])
                    oi2 += 1
                else:
                    return None
            for k in range(oi, oi2 - 1):   # the old group must be contiguous in itself
                if old[k][1] != sym.mul(old[k + 1][1], old[k + 1][0]):
                    return None
            out[oj2 - 1] = old[oi2 - 1][1]
            for k in range(oj2 - 1, oj, -1):
                out[k - 1] = sym.mul(out[k], new[k])
            oi, oj = oi2, oj2
        if oi < len(old) or any(d != 1 for d in new[oj:]):
            return None
        return View(new, tuple(out), self.offset)


def broadcast_strides(view: View, shape: Sequence[Dim]) -> list[Dim] | None:
    """The view's strides broadcast to ``shape`` (axes aligned at the end; a size-1 axis
    broadcasts with stride 0), or None when it does not broadcast."""
    if len(view.shape) > len(shape):
        return None
    pad = len(shape) - len(view.shape)
    out: list[Dim] = [0] * pad
    for d, s, t in zip(view.shape, view.strides, tuple(shape)[pad:]):
        if d == t:
            out.append(s if d != 1 else 0)
        elif d == 1:
            out.append(0)
        else:
            return None
    return out
