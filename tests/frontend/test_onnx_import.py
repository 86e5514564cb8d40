"""from_onnx: parameters and symbolic sizes, constants, names, opsets, shape folding,
compile-time inputs, control flow, and a 100,000-node graph."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import F32, I64, bindings, init, model, op_names, run, vi  # noqa: E402

from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx import NeedsConstantError, OnnxImportError, max_opset  # noqa: E402
from plait.ir import Constant, DataflowBlock, Function, If, TensorType, TupleType  # noqa: E402


def _mlp(opset: int = 17) -> object:
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    b = np.array([0.5, -0.5, 1.0], np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc/matmul"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="fc/add"),
        helper.make_node("Relu", ["hb"], ["y"], name="act"),
    ]
    return model(
        nodes, [vi("x", ["batch size", 4])], [vi("y", ["batch size", 3])],
        [init("w", w), init("b", b)], opset=opset,
    )  # fmt: skip


def test_params_constants_and_names() -> None:
    mod = from_onnx(_mlp())
    assert mod.phase == "ingestion"
    main = mod["main"]
    assert isinstance(main, Function)
    (x,) = main.params
    assert x.name_hint == "x"
    assert x.ty == TensorType(("batch_size", 4), "float32")  # dim_param sanitized
    bs = bindings(mod)
    assert [b.var.name_hint for b in bs] == ["h", "hb", "y"]
    assert [b.value.span.note for b in bs] == ["fc/matmul (MatMul)", "fc/add (Add)", "act (Relu)"]
    assert bs[0].value.span.source == "test_graph"
    assert isinstance(bs[0].value.args[1], Constant)  # the initializer
    assert isinstance(main.body.blocks[0], DataflowBlock)
    xv = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    want = np.maximum(
        xv @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10) + [0.5, -0.5, 1.0], 0
    )
    np.testing.assert_allclose(run(mod, xv), want, rtol=1e-6)


def test_span_source_is_the_model_path(tmp_path) -> None:
    import onnx

    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(path))
    mod = from_onnx(str(path))
    assert all(b.value.span.source == str(path) for b in bindings(mod))


def test_shapes_fix_symbolic_sizes() -> None:
    mod = from_onnx(_mlp(), shapes={"x": (2, 4)})
    main = mod["main"]
    assert isinstance(main, Function)
    assert main.params[0].ty == TensorType((2, 4), "float32")
    assert main.ret_ty == TensorType((2, 3), "float32")


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"nope": (1, 4)}, "there is no graph input 'nope'; the inputs are 'x'"),
        ({"x": (1, 4, 1)}, "has rank 3, but the model declares rank 2"),
        ({"x": (1, 5)}, "gives size 5 to axis 1, but the model declares it as 4"),
    ],
)
def test_bad_shapes_are_rejected(shapes: dict, message: str) -> None:
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(_mlp(), shapes=shapes)


def test_unknown_dims_get_names() -> None:
    m = model(
        [helper.make_node("Relu", ["in:0"], ["out"])], [vi("in:0", [None, 3])], [vi("out", None)]
    )
    main = from_onnx(m)["main"]
    assert isinstance(main, Function)
    assert main.params[0].name_hint == "in_0"
    assert main.params[0].ty == TensorType(("in_0_0", 3), "float32")


def test_several_outputs_make_a_tuple() -> None:
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"])]
    mod = from_onnx(model(nodes, [vi("x", [3])], [vi("a", [3]), vi("b", [3])]))
    main = mod["main"]
    assert isinstance(main, Function) and isinstance(main.ret_ty, TupleType)
    a, b = run(mod, np.array([-1.0, 2.0, -3.0], np.float32))
    np.testing.assert_array_equal(a, [1, -2, 3])
    np.testing.assert_array_equal(b, [1, 2, 3])


@pytest.mark.parametrize("opset", [7, 9, 11, 13, 17, max_opset()])
def test_every_opset_from_7(opset: int) -> None:
    mod = from_onnx(_mlp(opset))
    assert op_names(mod) == ["matmul", "add", "relu"]


def test_older_opsets_are_upgraded() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=6)
    np.testing.assert_array_equal(run(from_onnx(m), np.array([-1, 1], np.float32)), [0, 1])


def test_opset_newer_than_onnx_knows() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    m.opset_import[0].version = max_opset() + 1
    with pytest.raises(OnnxImportError, match=f"opset {max_opset() + 1} .* newer than the newest"):
        from_onnx(m)


def test_accepts_bytes_and_paths(tmp_path) -> None:
    import onnx

    m = _mlp()
    assert op_names(from_onnx(m.SerializeToString())) == ["matmul", "add", "relu"]
    onnx.save(m, str(tmp_path / "m.onnx"))
    assert op_names(from_onnx(tmp_path / "m.onnx")) == ["matmul", "add", "relu"]


# ------------------------------------------------------------------ shape folding


def _reshape_by_shape_chain(shape: list) -> object:
    """y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): flatten all but the batch axis."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        init("zero", np.array(0, np.int64)),
        init("axes", np.array([0], np.int64)),
        init("minus1", np.array([-1], np.int64)),
    ]
    return model(nodes, [vi("x", shape)], [vi("y", None)], inits)


def test_static_shape_chains_fold_to_constants() -> None:
    mod = from_onnx(_reshape_by_shape_chain([2, 3, 4]))
    assert op_names(mod) == ["reshape"]
    assert bindings(mod)[0].var.ty == TensorType((2, 12), "float32")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run(mod, x), x.reshape(2, 12))


def test_symbolic_shape_chains_stay_symbolic() -> None:
    mod = from_onnx(_reshape_by_shape_chain(["n", 3, 4]))
    assert op_names(mod) == ["reshape"]
    (b,) = bindings(mod)
    assert b.var.ty == TensorType(("n", 12), "float32")
    assert "shape_of" not in mod.script()


def test_shape_used_as_data_is_computed_at_run_time() -> None:
    """A symbolic shape that flows into arithmetic is computed with shape_of."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["sf"], ["y"], keepdims=0),
    ]
    mod = from_onnx(model(nodes, [vi("x", ["n", 3])], [vi("y", [])]))
    assert "shape_of" in op_names(mod)
    assert float(run(mod, np.zeros((5, 3), np.float32))) == 8.0


def test_inputs_needed_at_compile_time() -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [vi("x", [2, 3]), vi("shape", [2], I64)], [vi("y", None)])
    with pytest.raises(NeedsConstantError, match="must be known at compile time") as info:
        from_onnx(m)
    assert info.value.needs_constants == ("shape",)
    mod = from_onnx(m, constants={"shape": np.array([3, 2])})
    main = mod["main"]
    assert isinstance(main, Function) and [p.name_hint for p in main.params] == ["x"]
    np.testing.assert_array_equal(
        run(mod, np.arange(6, dtype=np.float32).reshape(2, 3)).shape, (3, 2)
    )


# ------------------------------------------------------------------- control flow


def _if_model() -> object:
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])])


def test_if_with_a_run_time_condition() -> None:
    mod = from_onnx(_if_model())
    assert any(isinstance(b.value, If) for b in bindings(mod))
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(run(mod, np.array(True), x), [1, -2])
    np.testing.assert_array_equal(run(mod, np.array(False), x), [1, 2])


def test_if_with_a_constant_condition_is_inlined() -> None:
    mod = from_onnx(_if_model(), constants={"c": np.array(False)})
    assert op_names(mod) == ["abs"]


def test_loop_is_unrolled() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["scan"]),
        ],
        "body",
        [vi("i", [], I64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [2])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2]), vi("scan", [2])],
    )
    node = helper.make_node("Loop", ["trip", "", "x0"], ["acc", "scans"], body=body)
    m = model(
        [node], [vi("x0", [2]), vi("x", [2])], [vi("acc", [2]), vi("scans", [3, 2])],
        [init("trip", np.array(3, np.int64))],
    )  # fmt: skip
    mod = from_onnx(m)
    assert op_names(mod).count("add") == 3
    acc, scans = run(mod, np.zeros(2, np.float32), np.ones(2, np.float32))
    np.testing.assert_array_equal(acc, [3, 3])
    np.testing.assert_array_equal(scans, [[1, 1], [2, 2], [3, 3]])


def test_functions_without_converter_are_expanded() -> None:
    """Ops ONNX defines as functions of other ops (here MeanVarianceNormalization) are
    imported through their definition."""
    m = model(
        [helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
        [vi("x", [2, 3, 4, 5])], [vi("y", [2, 3, 4, 5])], opset=13,
    )  # fmt: skip
    mod = from_onnx(m)
    assert "mean" in op_names(mod)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(run(mod, x), (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- big graph


def test_a_100k_node_chain_imports() -> None:
    n = 100_000
    nodes = []
    prev = "x"
    for i in range(n):
        nodes.append(helper.make_node("Neg" if i % 2 else "Relu", [prev], [f"v{i}"], name=f"n{i}"))
        prev = f"v{i}"
    m = model(nodes, [vi("x", [4])], [vi(prev, [4])])
    mod = from_onnx(m)  # iterative throughout: no RecursionError at the default limit
    bs = bindings(mod)
    assert len(bs) == n
    assert bs[-1].value.span.note == f"n{n - 1} (Neg)"


def test_node_order_does_not_matter() -> None:
    """Nodes listed out of topological order are sorted (iteratively)."""
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Neg", ["x"], ["a"], name="first"),
    ]
    mod = from_onnx(model(nodes, [vi("x", [2])], [vi("y", [2])]))
    assert op_names(mod) == ["neg", "relu"]
    np.testing.assert_array_equal(run(mod, np.array([1.0, -1.0], np.float32)), [0, 1])


def test_identity_output_of_an_input() -> None:
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    np.testing.assert_array_equal(run(from_onnx(m), np.array([1.0, 2.0], np.float32)), [1, 2])


def test_constant_output() -> None:
    node = helper.make_node("Constant", [], ["y"], value_ints=[1, 2, 3])
    m = model([node, helper.make_node("Identity", ["x"], ["z"])], [vi("x", [1])],
              [vi("y", [3], I64), vi("z", [1])])  # fmt: skip
    y, _ = run(from_onnx(m), np.zeros(1, np.float32))
    np.testing.assert_array_equal(y, [1, 2, 3])


def test_float_inputs_of_other_types() -> None:
    nodes = [helper.make_node("Add", ["x", "x"], ["y"])]
    for elem, dtype in [(TensorProto.DOUBLE, np.float64), (TensorProto.INT32, np.int32),
                        (TensorProto.UINT8, np.uint8), (F32, np.float32)]:  # fmt: skip
        m = model(nodes, [vi("x", [2], elem)], [vi("y", [2], elem)])
        out = run(from_onnx(m), np.array([1, 2], dtype))
        assert out.dtype == dtype and out.tolist() == [2, 4]


def test_sequence_inputs_take_their_shapes_from_shapes() -> None:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    m = model(nodes, [seq], [vi("y", None)])
    mod = from_onnx(m, shapes={"s": [(2, 3), (1, 3)]})
    main = mod["main"]
    assert isinstance(main, Function) and isinstance(main.params[0].ty, TupleType)
    a, b = np.zeros((2, 3), np.float32), np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(run(mod, (a, b)), np.concatenate([a, b]))


def test_gemm_with_transposed_weights_is_linear() -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    m = model(
        nodes,
        [vi("x", [4, 3])],
        [vi("y", [4, 2])],
        [init("w", w), init("b", np.ones(2, np.float32))],
    )
    mod = from_onnx(m)
    assert op_names(mod) == ["linear"]
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), x @ w.T + 1, rtol=1e-6)


def test_range_over_a_symbolic_size() -> None:
    """Range(0, Shape(x)[1], 1) (position ids) with a symbolic length needs no constant."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "posf"], ["y"]),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("one", np.array(1, np.int64))]
    mod = from_onnx(model(nodes, [vi("x", [2, "seq"])], [vi("y", [2, "seq"])], inits))
    assert "shape_of" not in op_names(mod)
    np.testing.assert_array_equal(run(mod, np.zeros((2, 4), np.float32)), [[0, 1, 2, 3]] * 2)
