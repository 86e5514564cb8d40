"""Slicing, gathering, scattering and topk: inference, errors, and numerics against torch
(or ONNX's reference evaluator for ONNX Slice semantics, which torch lacks)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.ir import symbolic as sym
from plait.ir.types import TensorType as T
from plait.ir.types import TupleType
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

RNG = np.random.default_rng(5)
F32 = "float32"
I64 = "int64"
BIG = 2**63 - 1


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# ---------------------------------------------------------------- strided_slice


def test_strided_slice_inference():
    x = T(("n", 10, 8), F32)
    assert infer("strided_slice", x, axes=(1,), begin=(2,), end=(7,)) == T(("n", 5, 8), F32)
    assert infer(
        "strided_slice", x, axes=(-1, 1), begin=(-3, 0), end=(BIG, 10), strides=(1, 3)
    ) == T(("n", 4, 3), F32)
    assert infer("strided_slice", x, axes=(2,), begin=(-1,), end=(-BIG,), strides=(-2,)) == T(
        ("n", 10, 4), F32
    )
    # whole-axis slices keep a symbolic size, others give a size expression (exact for
    # every n: tests/op/test_symbolic_inference.py checks them against Python slicing)
    assert infer("strided_slice", x, axes=(0,), begin=(0,), end=(BIG,)) == x
    assert infer("strided_slice", x, axes=(0,), begin=(-1,), end=(-BIG,), strides=(-1,)) == x
    one_on = infer("strided_slice", x, axes=(0,), begin=(1,), end=(BIG,)).shape[0]
    assert str(one_on) == "max(0, n - 1)"
    assert str(infer("strided_slice", x, axes=(0,), begin=(0,), end=(3,)).shape[0]) == "min(3, n)"
    # a backward slice: Python clamps its bounds to [-1, n - 1]
    back = infer("strided_slice", x, axes=(0,), begin=(2,), end=(0,), strides=(-1,)).shape[0]
    assert [sym.evaluate(back, {"n": n}) for n in range(5)] == [0, 0, 1, 2, 2]
    with pytest.raises(OpTypeError, match=r"strided_slice: a stride cannot be 0"):
        infer("strided_slice", x, axes=(1,), begin=(0,), end=(3,), strides=(0,))
    with pytest.raises(
        OpTypeError, match=r"strided_slice: axes, begin, end and strides must have the same length"
    ):
        infer("strided_slice", x, axes=(1, 2), begin=(0,), end=(3,))
    with pytest.raises(
        OpTypeError, match=r"strided_slice: axis 3 is out of range for a tensor of rank 3"
    ):
        infer("strided_slice", x, axes=(3,), begin=(0,), end=(3,))
    with pytest.raises(OpTypeError, match=r"strided_slice: axis -2 appears twice"):
        infer("strided_slice", x, axes=(1, -2), begin=(0, 0), end=(3, 3))
    with pytest.raises(
        OpAttrError, match=r"op 'strided_slice' has no attribute 'starts'; did you mean"
    ):
        infer("strided_slice", x, axes=(1,), starts=(0,), end=(3,))


def _onnx_slice(x, starts, ends, axes, steps):
    onnx_ref = pytest.importorskip("onnx.reference")
    from onnx import TensorProto, helper

    names = ["starts", "ends", "axes", "steps"]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x"] + names, ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
        + [helper.make_tensor_value_info(n, TensorProto.INT64, [len(axes)]) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    feeds = {"x": x} | {
        n: np.array(v, np.int64) for n, v in zip(names, (starts, ends, axes, steps))
    }
    return onnx_ref.ReferenceEvaluator(helper.make_model(graph)).run(None, feeds)[0]


SLICES = [
    ((1,), (2,), (7,), (1,)),
    ((1, 2), (-4, 0), (BIG, 8), (1, 3)),
    ((2,), (-1,), (-BIG,), (-2,)),
    ((0,), (5,), (-9,), (-1,)),
    ((1,), (100,), (-100,), (-3,)),
    ((2, 0), (-100, 1), (100, 2), (2, 1)),
    ((1,), (3,), (2,), (1,)),
]


@pytest.mark.parametrize("axes, begin, end, strides", SLICES)
def test_strided_slice_matches_onnx_slice(axes, begin, end, strides):
    x = rand(4, 10, 8)
    got = run("strided_slice", x, axes=axes, begin=begin, end=end, strides=strides)
    np.testing.assert_array_equal(got, _onnx_slice(x, begin, end, axes, strides))
    assert infer("strided_slice", T(x.shape, F32), axes=axes, begin=begin, end=end,
                 strides=strides).shape == got.shape  # fmt: skip


# ------------------------------------------------------------------------- take


def test_take_inference():
    assert infer("take", T(("n", 5, 3), F32), T((2, 4), I64), axis=1) == T(("n", 2, 4, 3), F32)
    assert infer("take", T((7,), F32), T(("k",), "int32"), axis=0) == T(("k",), F32)
    assert infer("take", T((7, 2), F32), T((3,), I64)) == T((3,), F32)
    with pytest.raises(
        OpTypeError, match=r"take: argument 1 \(indices\) must have an integer dtype, got float32"
    ):
        infer("take", T((7,), F32), T((3,), F32))


@needs_torch
def test_take_matches_torch():
    x = rand(5, 6, 3)
    idx = RNG.integers(0, 6, (2, 4))
    want = torch.index_select(th(x), 1, th(idx.reshape(-1))).numpy().reshape(5, 2, 4, 3)
    np.testing.assert_array_equal(run("take", x, idx, axis=1), want)
    flat = RNG.integers(0, x.size, (7,))
    np.testing.assert_array_equal(run("take", x, flat), torch.take(th(x), th(flat)).numpy())
    # negative indices count from the end (ONNX Gather)
    np.testing.assert_array_equal(run("take", x, np.array([-1, 0]), axis=0), x[[4, 0]])


# ------------------------------------------------------- gather/scatter_elements


def test_gather_scatter_inference():
    x = T(("n", 5), F32)
    assert infer("gather_elements", x, T(("n", 2), I64), axis=1) == T(("n", 2), F32)
    assert infer("scatter_elements", x, T(("n", 2), I64), T(("n", 2), F32), axis=1) == x
    with pytest.raises(
        OpTypeError,
        match=r"gather_elements: indices must have the rank of x \(shape \(n, 5\)\), got shape "
        r"\(2,\)",
    ):
        infer("gather_elements", x, T((2,), I64))
    with pytest.raises(
        OpTypeError,
        match=r"gather_elements: indices \(shape \(3, 6\)\) is larger than x \(shape \(3, 5\)\) "
        r"along axis 1",
    ):
        infer("gather_elements", T((3, 5), F32), T((3, 6), I64), axis=0)
    with pytest.raises(
        OpTypeError,
        match=r"scatter_elements: updates \(shape \(2, 3\)\) must have the shape of indices "
        r"\(\(2, 2\)\)",
    ):
        infer("scatter_elements", T((3, 5), F32), T((2, 2), I64), T((2, 3), F32))
    with pytest.raises(
        OpTypeError, match=r"scatter_elements: updates has dtype float16, x has float32"
    ):
        infer("scatter_elements", T((3, 5), F32), T((2, 2), I64), T((2, 2), "float16"))
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'reduction' of op 'scatter_elements' must be one of 'update', 'add', "
        r"'mul', 'min', 'max', got 'sum'",
    ):
        infer("scatter_elements", T((3, 5), F32), T((2, 2), I64), T((2, 2), F32), reduction="sum")


@needs_torch
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_torch_gather(axis):
    x = rand(4, 5)
    idx = RNG.integers(0, x.shape[axis], (3, 4))
    want = torch.gather(th(x), axis, th(idx)).numpy()
    np.testing.assert_array_equal(run("gather_elements", x, idx, axis=axis), want)
    neg = idx - x.shape[axis]  # negative indices count from the end
    np.testing.assert_array_equal(run("gather_elements", x, neg, axis=axis), want)


def test_gather_elements_out_of_range_index_is_an_error():
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 1 with size 5"):
        run("gather_elements", rand(2, 5), np.array([[5], [0]]), axis=1)


@needs_torch
@pytest.mark.parametrize(
    "reduction, torch_reduce", [("add", "sum"), ("mul", "prod"), ("min", "amin"), ("max", "amax")]
)
def test_scatter_elements_reductions_match_torch(reduction, torch_reduce):
    x = rand(4, 6)
    idx = RNG.integers(0, 6, (4, 5))  # with repeated targets
    upd = rand(4, 5)
    want = torch.scatter_reduce(th(x), 1, th(idx), th(upd), torch_reduce, include_self=True).numpy()
    got = run("scatter_elements", x, idx, upd, axis=1, reduction=reduction)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@needs_torch
def test_scatter_elements_update_matches_torch_scatter():
    x = rand(5, 3)
    idx = np.array([[4, 0, 1], [2, 3, 0]])  # distinct targets per column
    upd = rand(2, 3)
    want = torch.scatter(th(x), 0, th(idx), th(upd)).numpy()
    np.testing.assert_array_equal(run("scatter_elements", x, idx, upd, axis=0), want)
    np.testing.assert_array_equal(run("scatter_elements", x, idx - 5, upd, axis=0), want)


# ------------------------------------------------------------------------- topk


def test_topk_inference():
    t = infer("topk", T(("n", 10), F32), k=3)
    assert t == TupleType((T(("n", 3), F32), T(("n", 3), I64)))
    assert infer("topk", T((4, "m"), "int32"), k=2, axis=0).fields[1] == T((2, "m"), I64)
    with pytest.raises(
        OpTypeError, match=r"topk: k=11 is larger than axis 1 of x \(shape \(n, 10\)\)"
    ):
        infer("topk", T(("n", 10), F32), k=11)
    with pytest.raises(OpTypeError, match=r"topk: x must have at least one axis"):
        infer("topk", T((), F32))


@needs_torch
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_matches_torch(largest, axis):
    x = RNG.permutation(60).astype(np.float32).reshape(3, 4, 5)  # distinct values
    k = 2
    vals, idx = run("topk", x, k=k, axis=axis, largest=largest)
    tv, ti = torch.topk(th(x), k, dim=axis, largest=largest, sorted=True)
    np.testing.assert_array_equal(vals, tv.numpy())
    np.testing.assert_array_equal(idx, ti.numpy())
    assert idx.dtype == np.int64


def test_topk_ties_take_the_lower_index_and_nan_is_largest():
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, 1.0]], np.float32)
    vals, idx = run("topk", x, k=4)
    np.testing.assert_array_equal(idx, [[3, 1, 2, 4]])
    np.testing.assert_array_equal(vals, [[np.nan, 3, 3, 2]])
    vals, idx = run("topk", x, k=3, largest=False)
    np.testing.assert_array_equal(idx, [[0, 5, 4]])
