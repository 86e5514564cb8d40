"""Shape-manipulating operators: type inference with symbolic sizes, errors, and the
numpy implementations against torch (or numpy's own primitives where torch has no
equivalent)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.ir.types import TensorType as T
from plait.ir.types import TupleType
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

RNG = np.random.default_rng(4)
F32 = "float32"


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# -------------------------------------------------------- reshape, permute, concat


def test_reshape_permute_concat_inference():
    assert infer("reshape", T(("n", 3, 4), F32), shape=("n", -1)) == T(("n", 12), F32)
    assert infer("reshape", T((2, 6), F32), shape=(3, -1)) == T((3, 4), F32)
    assert str(infer("reshape", T(("n", 6), F32), shape=(-1, 3))) == 'Tensor((n * 2, 3), "float32")'
    assert infer("reshape", T(("n", 5), F32), shape=(-1, 3)).shape is None   # 5 * n / 3
    assert infer("permute_dims", T(("n", 3, 4), F32), axes=(2, 0, 1)) == T((4, "n", 3), F32)
    assert infer("permute_dims", T(("n", 3), F32)) == T((3, "n"), F32)
    tup = TupleType((T(("n", 2), F32), T(("n", 3), F32)))
    assert infer("concat", tup, axis=1) == T(("n", 5), F32)
    with pytest.raises(
        OpTypeError, match=r"reshape: cannot reshape \(2, 6\) \(12 elements\) into \(5, 2\)"
    ):
        infer("reshape", T((2, 6), F32), shape=(5, 2))
    with pytest.raises(OpTypeError, match=r"permute_dims: axes \(0, 0\) are not a permutation"):
        infer("permute_dims", T((2, 6), F32), axes=(0, 0))
    with pytest.raises(
        OpTypeError, match=r"concat: tensor 1 has shape \(3, 3\), which differs from \(2, 2\)"
    ):
        infer("concat", TupleType((T((2, 2), F32), T((3, 3), F32))), axis=0)


@needs_torch
def test_reshape_permute_concat_match_torch():
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(run("reshape", x, shape=(4, -1)), th(x).reshape(4, -1).numpy())
    np.testing.assert_array_equal(
        run("permute_dims", x, axes=(1, 2, 0)), th(x).permute(1, 2, 0).numpy()
    )
    np.testing.assert_array_equal(run("permute_dims", x), th(x).permute(2, 1, 0).numpy())
    y = rand(2, 1, 4)
    np.testing.assert_array_equal(
        run("concat", (x, y), axis=1), torch.cat([th(x), th(y)], 1).numpy()
    )


# ------------------------------------------------- flatten, squeeze, expand_dims


def test_flatten_inference():
    assert infer("flatten", T(("n", 3, 4, 5), F32), start_dim=1) == T(("n", 60), F32)
    assert infer("flatten", T((2, 3, 4), F32)) == T((24,), F32)
    assert infer("flatten", T(("n", 1, 4), F32), end_dim=1) == T(("n", 4), F32)
    assert str(infer("flatten", T(("n", 3), F32))) == 'Tensor((n * 3,), "float32")'
    assert infer("flatten", T((), F32)) == T((1,), F32)
    assert infer("flatten", T(("n", 3, 4), F32), start_dim=-2, end_dim=-1) == T(("n", 12), F32)
    with pytest.raises(OpTypeError, match=r"flatten: start_dim 2 comes after end_dim 1"):
        infer("flatten", T((2, 3, 4), F32), start_dim=2, end_dim=1)
    with pytest.raises(
        OpTypeError, match=r"flatten: start_dim 3 is out of range for a tensor of rank 3"
    ):
        infer("flatten", T((2, 3, 4), F32), start_dim=3)


@needs_torch
@pytest.mark.parametrize("start, end", [(0, -1), (1, -1), (1, 2), (-2, -1), (0, 0), (3, 3)])
def test_flatten_matches_torch(start, end):
    x = rand(2, 3, 4, 5)
    want = torch.flatten(th(x), start, end).numpy()
    got = run("flatten", x, start_dim=start, end_dim=end)
    np.testing.assert_array_equal(got, want)
    assert infer("flatten", T(x.shape, F32), start_dim=start, end_dim=end).shape == want.shape


def test_squeeze_expand_dims_inference():
    assert infer("squeeze", T(("n", 1, 3, 1), F32), axis=(1, -1)) == T(("n", 3), F32)
    assert infer("squeeze", T((1, 3, 1), F32)) == T((3,), F32)
    assert infer("squeeze", T(("n", 1), F32)) == T(None, F32)  # n might be 1
    assert infer("squeeze", T(("n", 1), F32), axis=0) == T((1,), F32)  # n taken to be 1
    assert infer("expand_dims", T(("n", 3), F32), axis=0) == T((1, "n", 3), F32)
    assert infer("expand_dims", T(("n", 3), F32), axis=(1, -1)) == T(("n", 1, 3, 1), F32)
    with pytest.raises(
        OpTypeError, match=r"squeeze: axis 1 of x \(shape \(n, 3\)\) has size 3; only size-1"
    ):
        infer("squeeze", T(("n", 3), F32), axis=1)
    with pytest.raises(OpTypeError, match=r"expand_dims: repeated axis"):
        infer("expand_dims", T((3,), F32), axis=(0, -3))


@needs_torch
def test_squeeze_expand_dims_match_torch():
    x = rand(1, 3, 1, 2)
    np.testing.assert_array_equal(run("squeeze", x), torch.squeeze(th(x)).numpy())
    np.testing.assert_array_equal(run("squeeze", x, axis=2), torch.squeeze(th(x), 2).numpy())
    np.testing.assert_array_equal(run("expand_dims", x, axis=1), torch.unsqueeze(th(x), 1).numpy())
    got = run("expand_dims", rand(3, 4), axis=(0, 3))
    assert got.shape == (1, 3, 4, 1)


# ---------------------------------------------- broadcast_to, tile, repeat, split


def test_broadcast_tile_repeat_inference():
    assert infer("broadcast_to", T((3, 1), F32), shape=("n", 3, 4)) == T(("n", 3, 4), F32)
    with pytest.raises(
        OpTypeError, match=r"broadcast_to: cannot broadcast x of shape \(3, 2\) to \(3, 4\)"
    ):
        infer("broadcast_to", T((3, 2), F32), shape=(3, 4))
    with pytest.raises(OpTypeError, match=r"broadcast_to: x has rank 3"):
        infer("broadcast_to", T((1, 3, 2), F32), shape=(3, 2))
    assert infer("tile", T(("n", 3), F32), repeats=(1, 2)) == T(("n", 6), F32)
    assert infer("tile", T((3,), F32), repeats=(2, 2)) == T((2, 6), F32)
    assert str(infer("tile", T(("n", 3), F32), repeats=(2, 1))) == 'Tensor((n * 2, 3), "float32")'
    assert infer("repeat", T(("n", 3), F32), repeats=2, axis=1) == T(("n", 6), F32)
    assert infer("repeat", T((2, 3), F32), repeats=2) == T((12,), F32)
    with pytest.raises(OpTypeError, match=r"tile: repeats must not be negative"):
        infer("tile", T((3,), F32), repeats=(-1,))


@needs_torch
def test_broadcast_tile_repeat_match_torch():
    x = rand(3, 1)
    np.testing.assert_array_equal(
        run("broadcast_to", x, shape=(2, 3, 4)), th(x).expand(2, 3, 4).numpy()
    )
    y = rand(2, 3)
    np.testing.assert_array_equal(
        run("tile", y, repeats=(2, 1, 3)), torch.tile(th(y), (2, 1, 3)).numpy()
    )
    np.testing.assert_array_equal(run("tile", y, repeats=(2,)), torch.tile(th(y), (2,)).numpy())
    np.testing.assert_array_equal(
        run("repeat", y, repeats=3, axis=0), torch.repeat_interleave(th(y), 3, 0).numpy()
    )
    np.testing.assert_array_equal(
        run("repeat", y, repeats=2), torch.repeat_interleave(th(y), 2).numpy()
    )


def test_split_inference():
    x = T(("n", 10), F32)
    assert infer("split", x, indices_or_sections=(2, 5), axis=1) == TupleType(
        (T(("n", 2), F32), T(("n", 3), F32), T(("n", 5), F32))
    )
    # 10 in 4 chunks of ceil(10 / 4) = 3: the last chunk is smaller
    assert [f.shape for f in infer("split", x, indices_or_sections=4, axis=1).fields] == [
        ("n", 3), ("n", 3), ("n", 3), ("n", 1)
    ]  # fmt: skip
    # exact for every n: the first part has min(3, n) rows
    parts = infer("split", x, indices_or_sections=(3,)).fields
    assert [str(f) for f in parts] == [
        'Tensor((min(3, n), 10), "float32")', 'Tensor((n - min(3, n), 10), "float32")'
    ]
    assert infer("split", T(None, F32), indices_or_sections=2) == TupleType((T(None, F32),) * 2)
    with pytest.raises(
        OpTypeError, match=r"split: indices must be non-negative and non-decreasing"
    ):
        infer("split", x, indices_or_sections=(5, 2), axis=1)
    with pytest.raises(OpAttrError, match=r"op 'split' requires attribute 'indices_or_sections'"):
        infer("split", x)


@needs_torch
def test_split_matches_torch():
    x = rand(10, 3)
    got = run("split", x, indices_or_sections=(2, 5, 5))
    want = torch.tensor_split(th(x), (2, 5, 5))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
    # n chunks of ceil(size / n): torch.split with that chunk size
    got = run("split", x, indices_or_sections=4)
    want = torch.split(th(x), 3)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())


# ------------------------------------------------------------------------ pad


def test_pad_inference():
    assert infer("pad", T(("n", 3, 4), F32), pad_width=(0, 0, 1, 1, 2, 0)) == T(("n", 5, 6), F32)
    padded = infer("pad", T(("n", 3), F32), pad_width=(1, 0, 0, 0))
    assert str(padded) == 'Tensor((n + 1, 3), "float32")'
    assert infer("pad", T((5,), F32), pad_width=(-1, 2)) == T((6,), F32)
    with pytest.raises(
        OpTypeError,
        match=r"pad: pad_width must have 2 values \(before, after\) per axis, 4 for x of shape "
        r"\(3, 4\)",
    ):
        infer("pad", T((3, 4), F32), pad_width=(1, 1))
    with pytest.raises(
        OpTypeError, match=r"pad: the negative widths of axis 0 crop more than its 3 elements"
    ):
        infer("pad", T((3,), F32), pad_width=(-2, -2))
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'pad_mode' of op 'pad' must be one of 'constant', 'reflect', 'edge', "
        r"'wrap', got 'replicate'",
    ):
        infer("pad", T((3,), F32), pad_width=(1, 1), pad_mode="replicate")


@needs_torch
@pytest.mark.parametrize(
    "mode, torch_mode",
    [("constant", "constant"), ("reflect", "reflect"), ("edge", "replicate"), ("wrap", "circular")],
)
def test_pad_matches_torch(mode, torch_mode):
    x = rand(2, 3, 5, 6)
    ours = (0, 0, 0, 0, 2, 1, 0, 3)  # (before, after) per axis
    theirs = (0, 3, 2, 1)  # torch: last axis first
    kw = {"value": 1.5} if mode == "constant" else {}
    want = F.pad(th(x), theirs, mode=torch_mode, **kw).numpy()
    got = run("pad", x, pad_width=ours, pad_mode=mode, **({"pad_value": 1.5} if kw else {}))
    np.testing.assert_array_equal(got, want)


@needs_torch
def test_pad_negative_widths_crop_like_torch():
    x = rand(4, 6)
    want = F.pad(th(x), (-1, 2, 1, -2)).numpy()
    np.testing.assert_array_equal(run("pad", x, pad_width=(1, -2, -1, 2)), want)


def test_pad_integer_constant():
    x = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(run("pad", x, pad_width=(1, 2), pad_value=7), [7, 0, 1, 2, 7, 7])


# -------------------------------------------------------------------- shape_of


def test_shape_of():
    assert infer("shape_of", T(("n", 3), F32)) == T((2,), "int64")
    assert infer("shape_of", T(None, F32)) == T(None, "int64")
    got = run("shape_of", rand(2, 3, 4))
    np.testing.assert_array_equal(got, [2, 3, 4])
    assert got.dtype == np.int64
