"""plait/target/c/views.py: the strides and offsets of a chain of view ops, computed on
size expressions, equal numpy's on random static shapes (permutations, slices and
reshapes: the same views, the same strides; a reshape numpy would copy is refused), and
hold for every value of symbolic sizes (evaluated at several values against numpy)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from plait.ir import symbolic as sym
from plait.target.c.views import View, broadcast_strides


def _numpy_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


@pytest.mark.parametrize("seed", range(4))
def test_permute_and_reshape_match_numpy(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        shape = tuple(rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4)))
        a, v = np.zeros(shape, np.float32), View.contiguous(shape)
        axes = list(range(len(shape)))
        rng.shuffle(axes)
        a, v = a.transpose(axes), v.permute(axes)
        n, facs = a.size, []
        for d in (2, 3, 2, 4, 1, 6):
            if n % d == 0 and rng.random() < 0.5:
                facs.append(d)
                n //= d
        new = tuple(rng.sample(facs + [n], len(facs) + 1))
        b = a.view()
        try:
            b.shape = new
        except AttributeError:
            b = None
        got = v.reshape(new)
        assert (got is None) == (b is None), (shape, axes, new)
        if b is not None and got is not None:
            keep = [i for i, d in enumerate(new) if d != 1]
            assert [got.strides[i] for i in keep] == [_numpy_strides(b)[i] for i in keep]


def test_symbolic_views_hold_at_every_size() -> None:
    """(b, s, 3, 2, 8) -> permute -> slice the middle third -> (b, 2, s, 8), and a
    flatten of (b, s, 16) to (b * s, 16): the expressions evaluate to numpy's strides."""
    v = View.contiguous(("b", "s", 3, 2, 8)).permute((2, 0, 3, 1, 4))
    k = v.slice((0,), (1,), (1,), (1, "b", 2, "s", 8)).reshape(("b", 2, "s", 8))
    flat = View.contiguous(("b", "s", 16)).reshape((sym.mul("b", "s"), 16))
    assert k is not None and flat is not None
    for b, s in ((1, 1), (2, 5), (3, 7)):
        env = {"b": b, "s": s}
        a = np.zeros((b, s, 3, 2, 8), np.float32).transpose(2, 0, 3, 1, 4)[1]
        assert [sym.evaluate(x, env) for x in k.strides] == list(_numpy_strides(a))
        assert sym.evaluate(k.offset, env) * 4 == (
            a.__array_interface__["data"][0]
            - a.base.__array_interface__["data"][0])   # type: ignore[union-attr]
        assert [sym.evaluate(x, env) for x in flat.strides] == [16, 1]


def test_broadcasting_and_a_copy_are_told_apart() -> None:
    mask = View.contiguous(("b", 1, 1, "s"))
    assert broadcast_strides(mask, ("b", 4, "q", "s")) == ["s", 0, 0, 1]
    assert broadcast_strides(mask, ("c", 4, "q", "s")) is None   # b against c: unknown
    # the transpose of (b, s) flattened needs a copy
    assert View.contiguous(("b", "s")).permute((1, 0)).reshape((sym.mul("b", "s"),)) is None
