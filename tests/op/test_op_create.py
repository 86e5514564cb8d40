"""full / full_like / zeros_like / ones_like, arange and one_hot: inference, errors and
numerics (against torch)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.ir.types import TensorType as T
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def test_full_inference_and_values():
    assert infer("full", shape=("n", 3), fill_value=0.5) == T(("n", 3), "float32")
    assert infer("full", shape=(2,), fill_value=3) == T((2,), "int64")
    assert infer("full", shape=(), fill_value=True) == T((), "bool")
    assert infer("full", shape=(2,), fill_value=3, dtype="float16") == T((2,), "float16")
    got = run("full", shape=(2, 3), fill_value=-7, dtype="int8")
    np.testing.assert_array_equal(got, np.full((2, 3), -7, np.int8))
    assert got.dtype == np.int8
    big = run("full", shape=(1,), fill_value=2**62 + 1)  # exact, no float round trip
    assert int(big[0]) == 2**62 + 1


def test_full_errors():
    with pytest.raises(
        OpTypeError, match=r"full: fill_value 0.5 is not an integer but dtype is int32"
    ):
        infer("full", shape=(2,), fill_value=0.5, dtype="int32")
    with pytest.raises(
        OpTypeError, match=r"full: fill_value must be a bool, int or float, got 'a'"
    ):
        infer("full", shape=(2,), fill_value="a")
    with pytest.raises(OpTypeError, match=r"full: negative size in shape \(2, -1\)"):
        infer("full", shape=(2, -1), fill_value=1.0)
    with pytest.raises(
        OpAttrError, match=r"op 'full' has no attribute 'value'; did you mean fill_value\?"
    ):
        infer("full", shape=(2,), value=1.0)
    with pytest.raises(OpTypeError, match=r"op 'full' takes 0 arguments"):
        infer("full", T((2,), "float32"), shape=(2,), fill_value=1.0)
    with pytest.raises(ValueError, match=r"full: the shape \(n, 2\) has the symbolic size 'n'"):
        run("full", shape=("n", 2), fill_value=1.0)


def test_like_ops():
    x = T(("n", 3), "float16")
    assert infer("full_like", x, fill_value=2.0) == x
    assert infer("zeros_like", x, dtype="int32") == T(("n", 3), "int32")
    assert infer("ones_like", x) == x
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run("full_like", a, fill_value=2.5), np.full((2, 3), 2.5))
    assert run("zeros_like", a, dtype="int64").dtype == np.int64
    np.testing.assert_array_equal(run("ones_like", a), np.ones((2, 3), np.float32))


@needs_torch
@pytest.mark.parametrize(
    "start, end, step, dtype",
    [(0, 10, 1, "int64"), (2, 11, 3, "int32"), (10, 0, -3, "int64"), (5, 5, 1, "int64"),
     (0.5, 2.0, 0.25, "float32"), (-1.0, 1.0, 0.3, "float64")],
)  # fmt: skip
def test_arange_matches_torch(start, end, step, dtype):
    tdtype = getattr(torch, dtype)
    want = torch.arange(start, end, step, dtype=tdtype).numpy()
    got = run("arange", start=start, end=end, step=step, dtype=dtype)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert infer("arange", start=start, end=end, step=step, dtype=dtype) == T(want.shape, dtype)


def test_arange_empty_when_end_is_behind_start():
    # ONNX Range: max(ceil((end - start) / step), 0) elements (torch raises instead)
    assert infer("arange", start=3, end=0) == T((0,), "int64")
    assert run("arange", start=3, end=0).shape == (0,)


def test_arange_errors():
    with pytest.raises(OpTypeError, match=r"arange: step cannot be 0"):
        infer("arange", end=3, step=0)
    with pytest.raises(
        OpTypeError, match=r"arange: start 0.5 and step 1.0 must be integers for dtype int64"
    ):
        infer("arange", start=0.5, end=3)
    with pytest.raises(OpAttrError, match=r"op 'arange' requires attribute 'end'"):
        infer("arange", start=1)


def test_one_hot_inference():
    assert infer("one_hot", T(("n", 5), "int64"), depth=10) == T(("n", 5, 10), "float32")
    assert infer("one_hot", T(("n",), "int32"), depth=3, axis=0, dtype="int8") == T(
        (3, "n"), "int8"
    )
    with pytest.raises(
        OpTypeError, match=r"one_hot: argument 0 \(indices\) must have an integer dtype"
    ):
        infer("one_hot", T((3,), "float32"), depth=3)
    with pytest.raises(
        OpTypeError, match=r"one_hot: axis 3 is out of range for a tensor of rank 3"
    ):
        infer("one_hot", T((2, 3), "int64"), depth=3, axis=3)


@needs_torch
def test_one_hot_matches_torch():
    idx = np.random.default_rng(7).integers(0, 5, (3, 4))
    want = F.one_hot(torch.from_numpy(idx), 5).numpy()
    np.testing.assert_array_equal(run("one_hot", idx, depth=5, dtype="int64"), want)
    got = run("one_hot", idx, depth=5, axis=1, on_value=3.0, off_value=-1.0)
    np.testing.assert_array_equal(got, np.moveaxis(want * 4.0 - 1.0, -1, 1))
    # ONNX semantics: negative indices count from depth, out-of-range rows are all off
    np.testing.assert_array_equal(
        run("one_hot", np.array([-1, 7]), depth=3), [[0, 0, 1], [0, 0, 0]]
    )
