"""Type inference with symbolic sizes: the size expressions ops compute, evaluated at
random sizes, against the sizes numpy gives (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.ir import symbolic as sym
from plait.ir.types import TensorType
from plait.op.index import TO_END, _slice_len
from plait.op.infer import broadcast_dim, infer_op_type, window_out_dim
from plait.op.registry import OpTypeError

F32 = "float32"
SETTINGS = settings(max_examples=300, deadline=None)
bound = st.one_of(st.integers(-12, 12), st.sampled_from([TO_END, -TO_END, 2**63 - 1]))
step = st.integers(-4, 4).filter(bool)   # backward slices too (x[::-1], x[k::-2])


@SETTINGS
@given(st.integers(0, 15), bound, bound, step)
def test_slice_lengths_agree_with_python_slicing(n: int, b: int, e: int, s: int) -> None:
    d = _slice_len("n", b, e, s)
    assert d is not None
    assert sym.evaluate(d, {"n": n}) == len(range(n)[b:e:s]), (b, e, s, str(d))


sym_bound = st.one_of(
    st.tuples(st.just("k"), st.integers(0, 15)),          # a size: never counts from the end
    st.tuples(st.just("-k - 1"), st.integers(0, 15)),     # always negative
    st.tuples(st.just("k + 2"), st.integers(0, 15)),
)


@SETTINGS
@given(st.integers(0, 15), sym_bound, bound, step, st.booleans())
def test_slices_with_symbolic_bounds_agree_with_python_slicing(
    n: int, kb: tuple[str, int], e: int, s: int, swap: bool
) -> None:
    text, k = kb
    b_dim, e_dim = sym.parse_dim(text), e
    if swap:
        b_dim, e_dim = e_dim, b_dim
    d = _slice_len("n", b_dim, e_dim, s)
    assert d is not None
    env = {"n": n, "k": k}
    b_val, e_val = sym.evaluate(b_dim, env), sym.evaluate(e_dim, env)
    assert sym.evaluate(d, env) == len(range(n)[b_val:e_val:s]), (str(b_dim), str(e_dim), s, str(d))
    # a bound that may count from either end is not guessed
    assert _slice_len("n", sym.parse_dim("k - 1"), TO_END, 1) is None


@SETTINGS
@given(st.integers(0, 40), st.integers(1, 5), st.integers(1, 3), st.integers(0, 3),
       st.integers(0, 3), st.integers(1, 2), st.booleans())
def test_window_sizes_agree_with_the_static_formula(
    h: int, k: int, stride: int, pb: int, pa: int, dil: int, ceil: bool
) -> None:
    want = window_out_dim(h, k, stride, pb, pa, dil, ceil)
    got = window_out_dim("h", k, stride, pb, pa, dil, ceil)
    assert sym.evaluate(got, {"h": h}) == want, str(got)


def test_convolution_and_pooling_give_floordiv_sizes() -> None:
    x = TensorType(("n", 3, "h", "w"), F32)
    w = TensorType((8, 3, 3, 3), F32)
    t = infer_op_type("conv2d", x, w, strides=2, padding=1)
    assert [str(d) for d in t.shape] == ["n", "8", "(h + 1) // 2", "(w + 1) // 2"]
    same = infer_op_type("conv2d", x, w, padding=1)
    assert same.shape == ("n", 8, "h", "w")
    pooled = infer_op_type("max_pool2d", t, pool_size=3, strides=2)
    # ((h + 1) // 2 - 3) // 2 + 1, with the floor divisions merged
    assert str(pooled.shape[2]) == "(h + 3) // 4 - 1"
    x_np = np.zeros((1, 3, 17, 17), np.float32)   # torch-free check of the formula
    out = (x_np.shape[2] + 2 - 3) // 2 + 1
    assert sym.evaluate(t.shape[2], {"h": 17}) == out == 9


def test_reshape_to_products_and_back() -> None:
    x = TensorType(("batch", "seq", 768), F32)
    heads = infer_op_type("reshape", x, shape=("batch", "seq", 12, 64))
    t = infer_op_type("permute_dims", heads, axes=(0, 2, 1, 3))
    merged = infer_op_type("reshape", t, shape=(sym.mul("batch", 12), "seq", 64))
    assert str(merged.shape[0]) == "batch * 12"
    back = infer_op_type("reshape", merged, shape=("batch", 12, -1, 64))
    assert back.shape == ("batch", 12, "seq", 64)
    flat = infer_op_type("reshape", x, shape=(-1, 768))
    assert str(flat.shape[0]) == "batch * seq"
    # written as text in an attribute: "batch * heads" parses to the expression
    y = TensorType(("batch", "heads", "seq", 64), F32)
    z = infer_op_type("reshape", y, shape=("batch * heads", "seq", 64))
    assert z.shape[0] == sym.mul("heads", "batch")
    with pytest.raises(OpTypeError, match="cannot reshape"):
        infer_op_type("reshape", TensorType((6, 4), F32), shape=(5, -1))


def test_concat_adds_sizes_and_matmul_broadcasts_equal_expressions() -> None:
    a = TensorType(("n", 4), F32)
    b = TensorType(("m", 4), F32)
    c = infer_op_type("concat", _tuple(a, b, a), axis=0)
    assert str(c.shape[0]) == "m + n * 2"
    x = TensorType((sym.mul("b", 12), "s", 64), F32)
    y = TensorType((sym.mul(12, "b"), 64, "s"), F32)
    assert infer_op_type("matmul", x, y).shape == (sym.mul("b", 12), "s", "s")
    # two sizes that are never 1 and never equal do not broadcast
    p = TensorType((sym.add("n", 2),), F32)
    q = TensorType((sym.add("n", 3),), F32)
    with pytest.raises(OpTypeError, match="cannot broadcast"):
        infer_op_type("add", p, q)


def _tuple(*ts: TensorType):
    from plait.ir.types import TupleType

    return TupleType(ts)


def test_ranges_decide_broadcasting() -> None:
    n1, m1 = sym.parse_dim("n + 1"), sym.parse_dim("m + 1")
    # without ranges n + 1 may be 1 (n = 0): it may broadcast, the first size is kept
    assert broadcast_dim(n1, m1) == n1
    # with n, m >= 1 neither is ever 1, but they may be equal: still allowed
    assert broadcast_dim(n1, m1, {"n": (1, None), "m": (1, None)}) == n1
    # n in [1, 4] and m in [10, 20]: never equal and never 1, so never broadcastable
    assert broadcast_dim(n1, m1, {"n": (1, 4), "m": (10, 20)}) is None
    assert broadcast_dim(n1, 1) == n1 and broadcast_dim(sym.mul(2, "n"), sym.mul("n", 2)) == \
        sym.mul("n", 2)


def test_transposed_convolution_sizes_agree_with_torch() -> None:
    torch = pytest.importorskip("torch")
    x = TensorType(("n", 4, "h", "w"), F32)
    w = TensorType((4, 2, 3, 3), F32)
    t = infer_op_type("conv_transpose2d", x, w, strides=2, padding=1)
    assert [str(d) for d in t.shape] == ["n", "2", "h * 2 - 1", "w * 2 - 1"]
    for h, wd in [(1, 1), (5, 7)]:
        got = torch.nn.functional.conv_transpose2d(
            torch.zeros(1, 4, h, wd), torch.zeros(4, 2, 3, 3), stride=2, padding=1).shape
        assert (sym.evaluate(t.shape[2], {"h": h}), sym.evaluate(t.shape[3], {"w": wd})) == \
            tuple(got[2:])
