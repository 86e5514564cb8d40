"""Reductions and cumsum: inference with symbolic sizes, errors, and numerics against
torch (ONNX's reference evaluator for ArgMax's select_last_index and CumSum's
exclusive/reverse)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.ir.types import TensorType as T
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

RNG = np.random.default_rng(6)
F32 = "float32"


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _onnx_run(op, inputs, **attrs):
    onnx_ref = pytest.importorskip("onnx.reference")
    from onnx import helper

    names = [f"i{k}" for k in range(len(inputs))]
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in zip(names, inputs)
    ]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "g", vis,
        [helper.make_tensor_value_info("y", 0, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx_ref.ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


# ------------------------------------------------------------------ inference


def test_reduce_inference_keeps_symbolic_dims():
    x = T(("n", 3, 4), F32)
    for name in ("sum", "mean", "max", "min", "prod", "variance", "l2_norm"):
        assert infer(name, x, axis=(1, 2)) == T(("n",), F32)
        assert infer(name, x, axis=-1, keepdims=True) == T(("n", 3, 1), F32)
        assert infer(name, x) == T((), F32)
    assert infer("argmax", x, axis=1) == T(("n", 4), "int64")
    assert infer("argmin", x, axis=0, keepdims=True) == T((1, 3, 4), "int64")
    assert infer("argmax", x) == T((), "int64")
    assert infer("sum", T(None, "int32"), axis=0) == T(None, "int32")


def test_reduce_errors():
    x = T(("n", 3), F32)
    with pytest.raises(OpTypeError, match=r"sum: axis 2 is out of range for a tensor of rank 2"):
        infer("sum", x, axis=2)
    with pytest.raises(OpTypeError, match=r"mean: repeated axis in \(1, -1\)"):
        infer("mean", x, axis=(1, -1))
    with pytest.raises(
        OpTypeError, match=r"mean: argument 0 \(x\) must have a floating-point dtype.*got int32"
    ):
        infer("mean", T((3,), "int32"))
    with pytest.raises(OpTypeError, match=r"sum: argument 0 \(x\) must have a numeric dtype"):
        infer("sum", T((3,), "bool"))
    with pytest.raises(OpTypeError, match=r"argmax: axis 0 of x \(shape \(0, 2\)\) is empty"):
        infer("argmax", T((0, 2), F32), axis=0)
    with pytest.raises(
        OpAttrError, match=r"op 'sum' has no attribute 'keepdim'; did you mean keepdims\?"
    ):
        infer("sum", x, keepdim=True)
    with pytest.raises(
        OpAttrError, match=r"attribute 'axis' of op 'argmax' must be an int, got \(0, 1\)"
    ):
        infer("argmax", x, axis=(0, 1))


# ------------------------------------------------------------------- numerics

REDUCE_VS_TORCH = {
    "sum": lambda t, d, k: torch.sum(t, dim=d, keepdim=k),
    "mean": lambda t, d, k: torch.mean(t, dim=d, keepdim=k),
    "max": lambda t, d, k: torch.amax(t, dim=d, keepdim=k),
    "min": lambda t, d, k: torch.amin(t, dim=d, keepdim=k),
    "prod": lambda t, d, k: torch.prod(t, dim=d[0], keepdim=k) if len(d) == 1 else None,
    "variance": lambda t, d, k: torch.var(t, dim=d, keepdim=k, correction=0),
    "l2_norm": lambda t, d, k: torch.linalg.vector_norm(t, 2, dim=d, keepdim=k),
}


@needs_torch
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [(0,), (1, 2), (-1,), (0, 1, 2)])
@pytest.mark.parametrize("name", sorted(REDUCE_VS_TORCH))
def test_reductions_match_torch(name, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    want = REDUCE_VS_TORCH[name](th(x), axis, keepdims)
    if want is None:  # torch.prod takes one dim: reduce one axis at a time
        want = th(x)
        for a in sorted((a % 3 for a in axis), reverse=True):
            want = torch.prod(want, dim=a, keepdim=keepdims)
    got = run(name, x, axis=axis, keepdims=keepdims)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-6)


@needs_torch
def test_integer_reductions_match_torch():
    x = RNG.integers(-9, 9, (4, 5)).astype(np.int32)
    np.testing.assert_array_equal(
        run("sum", x, axis=1), torch.sum(th(x), 1, dtype=torch.int32).numpy()
    )
    np.testing.assert_array_equal(run("max", x, axis=0), torch.amax(th(x), 0).numpy())
    assert run("sum", x).dtype == np.int32
    assert run("sum", x).shape == ()


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 0.1, np.float16)  # float16 accumulation would stall at 256
    assert abs(float(run("sum", x)) - 409.6) < 0.5


@needs_torch
@pytest.mark.parametrize("name, fn", [("argmax", "argmax"), ("argmin", "argmin")])
def test_arg_reductions_match_torch(name, fn):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (0, 1, -1):
        want = getattr(torch, fn)(th(x), dim=axis, keepdim=True).numpy()
        np.testing.assert_array_equal(run(name, x, axis=axis, keepdims=True), want)
    assert int(run(name, x)) == int(getattr(torch, fn)(th(x)))
    # ties: the first index, like torch
    t = np.array([[1.0, 5.0, 5.0, -2.0, -2.0]], np.float32)
    assert int(run(name, t, axis=1)[0]) == int(getattr(torch, fn)(th(t), dim=1)[0])


@pytest.mark.parametrize("name, onnx_op", [("argmax", "ArgMax"), ("argmin", "ArgMin")])
def test_select_last_index_matches_onnx(name, onnx_op):
    x = RNG.integers(0, 3, (4, 6)).astype(np.float32)  # many ties
    for axis in (0, 1):
        want = _onnx_run(onnx_op, [x], axis=axis, keepdims=0, select_last_index=1)
        np.testing.assert_array_equal(run(name, x, axis=axis, select_last_index=True), want)
    flat_last = x.size - 1 - int(getattr(np, name)(x.reshape(-1)[::-1]))
    assert int(run(name, x, select_last_index=True)) == flat_last
    kept = run(name, x, select_last_index=True, keepdims=True)
    assert kept.shape == (1, 1) and int(kept[0, 0]) == flat_last


@needs_torch
def test_cumsum_matches_torch_and_onnx():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    for axis in (0, 1, -1):
        want = torch.cumsum(th(x), dim=axis).numpy()
        np.testing.assert_allclose(run("cumsum", x, axis=axis), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        run("cumsum", x), torch.cumsum(th(x).reshape(-1), 0).numpy(), rtol=1e-6, atol=1e-6
    )
    for exclusive in (0, 1):
        for reverse in (0, 1):
            want = _onnx_run(
                "CumSum", [x, np.array(1, np.int64)], exclusive=exclusive, reverse=reverse
            )
            got = run("cumsum", x, axis=1, exclusive=bool(exclusive), reverse=bool(reverse))
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    xi = np.arange(6, dtype=np.int8).reshape(2, 3)
    assert run("cumsum", xi, axis=1).dtype == np.int8


def test_cumsum_inference():
    assert infer("cumsum", T(("n", 4), F32), axis=1) == T(("n", 4), F32)
    assert infer("cumsum", T((3, 4), "int32")) == T((12,), "int32")
    assert str(infer("cumsum", T(("n", 4), F32))) == 'Tensor((n * 4,), "float32")'
    with pytest.raises(OpTypeError, match=r"cumsum: axis -3 is out of range"):
        infer("cumsum", T((3, 4), F32), axis=-3)


@pytest.mark.parametrize("name, onnx_op", [("max", "ReduceMax"), ("min", "ReduceMin")])
def test_max_and_min_of_no_elements_follow_onnx(name, onnx_op):
    """Over an empty axis: -inf / +inf (ONNX's rule; the onnx reference evaluator)."""
    from onnx import helper

    x = np.zeros((2, 0), np.float32)
    onnx_ref = pytest.importorskip("onnx.reference")
    graph = helper.make_graph(
        [helper.make_node(onnx_op, ["x", "axes"], ["y"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", 1, [2, 0]),
         helper.make_tensor_value_info("axes", 7, [1])],
        [helper.make_tensor_value_info("y", 0, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    want = onnx_ref.ReferenceEvaluator(model).run(None, {"x": x, "axes": np.array([1])})[0]
    np.testing.assert_array_equal(run(name, x, axis=(1,)), want)
    ints = run(name, np.zeros((2, 0), np.int8), axis=(1,))
    assert ints.tolist() == [-128, -128] if name == "max" else [127, 127]


def test_softmax_of_an_empty_tensor_and_argmax_of_no_elements():
    for name in ("softmax", "log_softmax"):
        got = run(name, np.zeros((2, 0), np.float32), axis=1)
        assert got.shape == (2, 0) and got.dtype == np.float32
    with pytest.raises(ValueError, match=r"argmax over axis 1 of a tensor of shape \(2, 0\): "
                                         "there are no elements"):
        run("argmax", np.zeros((2, 0), np.float32), axis=1)
