"""Einsum's import: a batched matrix product (attention's ``bhlk,bhtk->bhlt``, CvT's)
becomes ``matmul`` between permutations instead of a broadcast product and a sum (which
materialized a (b, h, l, t, k) tensor: CvT ran 2.3x the best peer's time, 60% of it
there); every other equation keeps the general path.  Both against numpy.einsum (rtol
1e-5)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from onnx_helpers import model, op_names, run, vi  # noqa: E402

from plait.frontend import from_onnx  # noqa: E402

CASES = [
    # equation, shapes, imported as one matmul
    ("bhlk,bhtk->bhlt", [(2, 3, 5, 4), (2, 3, 6, 4)], True),
    ("bhlt,bhtv->bhlv", [(2, 3, 5, 6), (2, 3, 6, 4)], True),
    ("ij,jk->ik", [(3, 4), (4, 5)], True),
    ("ij,kj->ki", [(3, 4), (5, 4)], True),      # the output's letters in another order
    ("bij,jk->bik", [(2, 3, 4), (4, 5)], False),  # rows b and i: the general path
    ("ij,ij->i", [(3, 4), (3, 4)], False),        # no column letter
    ("ii,ij->j", [(3, 3), (3, 4)], False),        # a diagonal
    ("ijk,jl->il", [(2, 3, 4), (3, 5)], False),   # k summed in one operand alone
]


@pytest.mark.parametrize(("equation", "shapes", "as_matmul"), CASES)
def test_einsum_matches_numpy(equation: str, shapes: list[tuple[int, ...]],
                              as_matmul: bool) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.einsum(equation, *xs)
    names = [f"x{i}" for i in range(len(xs))]
    m = model([helper.make_node("Einsum", names, ["y"], equation=equation)],
              [vi(n, x.shape) for n, x in zip(names, xs, strict=True)],
              [vi("y", want.shape)], opset=17)
    mod = from_onnx(m)
    ops = op_names(mod)
    assert ("matmul" in ops and "sum" not in ops) == as_matmul, ops
    got = np.asarray(run(mod, *xs))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
