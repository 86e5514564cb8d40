"""Shape subgraphs with dynamic axes are evaluated symbolically (size expressions such as
``batch * 4``), so the model imports with its sizes open and runs at several sizes from
one build.  Each graph is run by onnxruntime on the same file as the reference (exact:
integer and copy results, or float32 with rtol 1e-6 where only data is moved)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import I64, init, model, op_names, vi  # noqa: E402

import plait  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx import OnnxImportError  # noqa: E402
from plait.ir import TensorType, symbolic  # noqa: E402
from plait.runtime import VirtualMachine, VMInputError  # noqa: E402


def _check_against_ort(m, inputs_at_sizes: list[dict[str, np.ndarray]], target: str = "numpy"):
    """Build once; run at every size; compare with onnxruntime (exact)."""
    mod = from_onnx(m)
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in inputs_at_sizes:
        ref = sess.run(None, feeds)[0]
        got = np.asarray(vm["main"](*feeds.values()))
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    return mod


def _heads_model() -> object:
    """x: (batch, seq, 8) -> (batch * 2, seq, 4) through Shape/Gather/Mul/Concat/Reshape,
    as exporters write attention heads."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
        helper.make_node("Mul", ["b", "two"], ["bh"]),
        helper.make_node("Unsqueeze", ["bh", "ax0"], ["bh1"]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["bh1", "n1", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
        init("two", np.array(2, np.int64)), init("ax0", np.array([0], np.int64)),
        init("four", np.array([4], np.int64)),
    ]  # fmt: skip
    return model(nodes, [vi("x", ["batch", "seq", 8])], [vi("y", None)], inits)


def test_a_product_of_sizes_is_a_size_expression_in_the_reshape() -> None:
    m = _heads_model()
    rng = np.random.default_rng(0)
    sizes = [(1, 3), (2, 5), (4, 1)]
    mod = _check_against_ort(
        m, [{"x": rng.standard_normal((b, s, 8)).astype(np.float32)} for b, s in sizes]
    )
    assert "shape_of" not in op_names(mod)
    out = mod["main"].body.ty
    assert isinstance(out, TensorType) and str(out) == 'Tensor((batch * 2, seq, 4), "float32")'


def _mask_expand_model() -> object:
    """ones_like(ids) expanded as exporters write ``x.expand(b, 1, n, n)``: the target
    goes through Equal(shape, -1) / Where, then ConstantOfShape and Range."""
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["b1", "one1", "n1", "n1"], ["t"], axis=0),
        helper.make_node("Equal", ["t", "minus1"], ["is_neg"]),
        helper.make_node("Where", ["is_neg", "one1", "t"], ["target"]),
        helper.make_node("ConstantOfShape", ["n1"], ["row"],
                         value=helper.make_tensor("v", TensorProto.INT64, [1], [1])),
        helper.make_node("Range", ["i0", "n", "i1"], ["pos"]),
        helper.make_node("Add", ["row", "pos"], ["row_pos"]),
        helper.make_node("Expand", ["row_pos", "target"], ["y"]),
    ]  # fmt: skip
    inits = [
        init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
        init("ax0", np.array([0], np.int64)), init("one1", np.array([1], np.int64)),
        init("minus1", np.array([-1], np.int64)),
    ]  # fmt: skip
    return model(nodes, [vi("ids", ["batch", "seq"], I64)], [vi("y", None, I64)], inits)


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_equal_where_constant_of_shape_range_and_expand_stay_symbolic(target: str) -> None:
    m = _mask_expand_model()
    sizes = [(1, 4), (3, 2), (2, 7)]
    mod = _check_against_ort(m, [{"ids": np.zeros((b, s), np.int64)} for b, s in sizes], target)
    assert str(mod["main"].body.ty) == 'Tensor((batch, 1, seq, seq), "int64")'


def test_a_slice_end_and_a_range_over_size_expressions() -> None:
    """x[:, past:past + seq] and Range(past, past + seq): bounds that are sums of sizes."""
    nodes = [
        helper.make_node("Shape", ["cache"], ["sc"]),
        helper.make_node("Gather", ["sc", "i1"], ["past"], axis=0),
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "i1"], ["seq"], axis=0),
        helper.make_node("Add", ["past", "seq"], ["total"]),
        helper.make_node("Unsqueeze", ["past", "ax0"], ["p1"]),
        helper.make_node("Unsqueeze", ["total", "ax0"], ["t1"]),
        helper.make_node("Slice", ["table", "p1", "t1", "ax1"], ["rows"]),
        helper.make_node("Range", ["past", "total", "i1"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["rows", "posf"], ["y"]),
    ]
    table = np.arange(2 * 32, dtype=np.float32).reshape(2, 32)
    inits = [
        init("i1", np.array(1, np.int64)), init("ax0", np.array([0], np.int64)),
        init("ax1", np.array([1], np.int64)), init("table", table),
    ]  # fmt: skip
    m = model(
        nodes, [vi("cache", [2, "past"]), vi("x", [2, "seq"])], [vi("y", None)], inits
    )
    feeds = [
        {"cache": np.zeros((2, p), np.float32), "x": np.zeros((2, s), np.float32)}
        for p, s in [(0, 3), (5, 2), (9, 9)]
    ]
    mod = _check_against_ort(m, feeds)
    # the slice clamps to the table's 32 columns: a size in past and seq, no fresh name
    out = mod["main"].body.ty
    assert isinstance(out, TensorType) and out.shape[0] == 2
    assert symbolic.free_symbols(out.shape[1]) == {"past", "seq"}


def test_a_value_from_tensor_data_still_needs_a_constant() -> None:
    """A reshape target read from a tensor's data is no shape computation: the error
    names the node and the fix."""
    nodes = [
        helper.make_node("ReduceMax", ["k"], ["kmax"], keepdims=1),
        helper.make_node("Concat", ["kmax", "minus1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"]),
    ]
    inits = [init("minus1", np.array([-1], np.int64))]
    m = model(nodes, [vi("x", ["n", 4]), vi("k", [1], I64)], [vi("y", None)], inits)
    with pytest.raises(OnnxImportError) as info:
        from_onnx(m)
    msg = str(info.value)
    assert "Reshape" in msg and "'k'" in msg and "constants=" in msg


def test_dim_ranges_are_recorded_and_checked_when_the_model_runs() -> None:
    m = _heads_model()
    mod = from_onnx(m, dim_ranges={"seq": (1, 16)})
    assert mod.attrs["dim_ranges"] == {"seq": (1, 16)}
    vm = VirtualMachine(plait.build(mod, "numpy"))
    assert vm["main"](np.zeros((2, 16, 8), np.float32)).shape == (4, 16, 4)
    with pytest.raises(VMInputError, match=r"outside the range \[1, 16\] of symbolic size 'seq'"):
        vm["main"](np.zeros((2, 17, 8), np.float32))
    with pytest.raises(OnnxImportError, match="'sq', which is no symbolic size.*'batch', 'seq'"):
        from_onnx(m, dim_ranges={"sq": (1, 16)})


def test_inputs_that_disagree_on_a_size_are_refused_when_the_model_runs() -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    m = model(nodes, [vi("a", ["n", 3]), vi("b", ["n", 3])], [vi("y", None)])
    vm = VirtualMachine(plait.build(from_onnx(m), "numpy"))
    with pytest.raises(VMInputError, match="'n'"):
        vm["main"](np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32))

