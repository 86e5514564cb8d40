"""Window attributes of convolutions and pools as plain ints.

An op's ``strides``, ``dilation``, ``pool_size`` and ``padding`` attributes may be one int,
one int per spatial axis, or (for padding) one per side.  Every layer that reads them (the
numpy reference, the op layer, the targets' dispatch rules, dialects) turns them into a
fixed-length tuple with these two functions.  They live in the runtime because the runtime
depends on numpy only and its reference implementations need them; the compiler's layers
sit above it and import them from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["expand_ints", "expand_padding"]


def expand_ints(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    """An int-or-ints attribute as exactly ``n`` ints."""
    if isinstance(v, int | np.integer):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"expected 1 or {n} values, got {v}")
    return v


def expand_padding(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    """A padding attribute as ``2n`` ints: the ``n`` befores, then the ``n`` afters.  An
    int or a 1-tuple pads every side, ``n`` values pad both sides of each axis."""
    if isinstance(v, int | np.integer):
        return (int(v),) * (2 * n)
    v = tuple(int(x) for x in v)
    if len(v) == 2 * n:
        return v
    if len(v) == 1:
        return v * (2 * n)
    if len(v) == n:
        return v + v
    raise ValueError(f"expected 1, {n} or {2 * n} padding values, got {v}")
