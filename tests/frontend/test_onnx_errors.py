"""Unsupported and malformed models: one clear OnnxImportError, never a traceback from
deep inside, found before anything is built."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import I64, init, model, vi  # noqa: E402

import plait  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx import OnnxImportError  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402


def _valid() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    w = np.ones((2, 1, 3, 3), np.float32)
    return model(nodes, [vi("x", [1, 1, 4, 4])], [vi("y", [1, 2, 4, 4])], [init("w", w)])


def _error(m: object, **kwargs: object) -> OnnxImportError:
    with pytest.raises(OnnxImportError) as info:
        from_onnx(m, **kwargs)
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, OnnxImportError)
    return info.value


# ---------------------------------------------------------------- unsupported ops


def test_every_unsupported_op_is_listed_once_before_building() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NonMaxSuppression", ["a", "a"], ["b"], name="nms_1"),
        helper.make_node("RoiAlign", ["a", "a", "idx"], ["c"], name="roi"),
        helper.make_node("NonMaxSuppression", ["c", "c"], ["d"], name="nms_2"),
        helper.make_node("Det", ["d"], ["y"], name="det"),
    ]
    m = model(nodes, [vi("x", [1, 4, 4]), vi("idx", [1], I64)], [vi("y", None)], opset=17)
    err = _error(m)
    assert err.unsupported == {
        "NonMaxSuppression": ["nms_1", "nms_2"], "RoiAlign": ["roi"], "Det": ["det"],
    }  # fmt: skip
    assert err.opset == 17
    text = str(err)
    assert "3 unsupported operators (model opset 17)" in text
    assert "unsupported operator NonMaxSuppression (opset 17): nodes 'nms_1', 'nms_2'" in text
    assert "unsupported operator RoiAlign (opset 17): nodes 'roi'" in text
    assert "unsupported operator Det (opset 17): nodes 'det'" in text


def test_other_domains_are_named() -> None:
    node = helper.make_node("MyOp", ["x"], ["y"], name="custom", domain="com.example")
    m = model([node], [vi("x", [2])], [vi("y", [2])], extra_opsets={"com.example": 1})
    err = _error(m)
    assert err.unsupported == {"com.example::MyOp": ["custom"]}
    assert "com.example::MyOp (opset 1)" in str(err)


# ------------------------------------------------------------------ bad attributes


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            helper.make_node("Conv", ["x", "w"], ["y"], name="c1", auto_pad="SAME_MIDDLE"),
            "node 'c1' (Conv, opset 17): attribute 'auto_pad' = 'SAME_MIDDLE' is not allowed; "
            "ONNX allows 'NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'",
        ),
        (
            helper.make_node("Resize", ["x", "", "scales"], ["y"], name="r1", mode="bicubic"),
            "node 'r1' (Resize, opset 17): attribute 'mode' = 'bicubic' is not allowed; ONNX "
            "allows 'nearest', 'linear', 'cubic'",
        ),
        (
            helper.make_node("Softmax", ["x"], ["y"], name="s1", axis=1.5),
            "node 's1' (Softmax, opset 17): attribute 'axis' has type FLOAT, expected INT",
        ),
        (
            helper.make_node("Relu", ["x"], ["y"], name="r2", alpha=0.3),
            "node 'r2' (Relu, opset 17): unknown attribute 'alpha'",
        ),
        (
            helper.make_node("Gather", ["x", "w"], ["y"], name="g1", axis=7),
            "node 'g1' (Gather, opset 17), attribute 'axis': axis 7 is out of range",
        ),
    ],
)
def test_bad_attributes_name_node_and_attribute(node: onnx.NodeProto, message: str) -> None:
    inits = [init("w", np.ones((2, 1, 3, 3), np.float32)), init("scales", np.ones(4, np.float32))]
    if node.op_type == "Gather":
        inits = [init("w", np.zeros(1, np.int64))]
    m = model([node], [vi("x", [1, 1, 4, 4])], [vi("y", None)], inits)
    assert message in str(_error(m))


def test_problems_are_collected() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="c1", auto_pad="BAD"),
        helper.make_node("Relu", ["c"], ["d"], name="r", alpha=1.0),
        helper.make_node("Foo", ["d"], ["y"], name="f"),
    ]
    m = model(
        nodes,
        [vi("x", [1, 1, 4, 4])],
        [vi("y", None)],
        [init("w", np.ones((1, 1, 1, 1), np.float32))],
    )
    err = _error(m)
    assert len(err.problems) == 3
    assert err.problems[0].startswith("unsupported operator Foo")


# ----------------------------------------------------------------- malformed files


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.8, 0.97])
def test_truncated_files(tmp_path, fraction: float) -> None:
    data = _valid().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    err = _error(str(path))
    assert err.source == str(path)
    text = str(err)
    assert any(
        s in text for s in ("truncated", "not defined", "no graph", "no outputs", "not a valid")
    ), text


def test_garbage_bytes() -> None:
    err = _error(b"\x00\xffthis is not a protobuf\x13\x37" * 20)
    assert "not a valid ONNX model" in str(err) or "no graph" in str(err)


def test_empty_file(tmp_path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert "the file is empty" in str(_error(str(path)))


def test_missing_file(tmp_path) -> None:
    assert "cannot read the file" in str(_error(str(tmp_path / "nope.onnx")))


def test_wrong_argument_type() -> None:
    assert "got int" in str(_error(42))


def test_reference_to_undefined_value() -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    err = _error(model(nodes, [vi("x", [2])], [vi("y", [2])]))
    assert "node 'add' (Add, opset 17): input 1 'ghost' is not defined" in str(err)


def test_undefined_graph_output() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    err = _error(model(nodes, [vi("x", [2])], [vi("z", [2])]))
    assert "graph output 'z' is not defined" in str(err)


def test_missing_required_input() -> None:
    nodes = [helper.make_node("Conv", ["x"], ["y"], name="conv")]
    err = _error(model(nodes, [vi("x", [1, 1, 4, 4])], [vi("y", None)]))
    assert "node 'conv' (Conv, opset 17): the required input 1 (W) is missing" in str(err)


def test_missing_required_attribute() -> None:
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat")]
    err = _error(model(nodes, [vi("x", [2])], [vi("y", [4])]))
    assert "node 'cat' (Concat, opset 17): the required attribute 'axis' is missing" in str(err)


def test_cycle() -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Neg", ["a"], ["y"], name="out"),
    ]
    err = _error(model(nodes, [vi("x", [2])], [vi("y", [2])]))
    assert "has a cycle: 2 nodes wait on each other" in str(err)
    assert "'first'" in str(err) and "'second'" in str(err)


def test_value_defined_twice() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="a"),
        helper.make_node("Neg", ["x"], ["y"], name="b"),
    ]
    err = _error(model(nodes, [vi("x", [2])], [vi("y", [2])]))
    assert "value 'y' is defined twice" in str(err)


def test_unsupported_input_type() -> None:
    nodes = [helper.make_node("Identity", ["s"], ["y"])]
    m = model(nodes, [vi("s", [2], TensorProto.STRING)], [vi("y", [2], TensorProto.STRING)])
    assert "graph input 's' has element type STRING, which plait does not support" in str(_error(m))


def test_sequence_input() -> None:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("SequenceLength", ["s"], ["y"])]
    m = model(nodes, [seq], [vi("y", [], I64)])
    assert "graph input 's' is a sequence; give the shapes of its tensors" in str(_error(m))


def test_domain_not_imported() -> None:
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml")
    err = _error(model([node], [vi("x", [2])], [vi("y", [2])]))
    assert "uses domain 'ai.onnx.ml', which the model does not import" in str(err)


def _save_external(m: onnx.ModelProto, tmp_path) -> None:
    onnx.save_model(
        m, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
        location="weights.bin", size_threshold=0,
    )  # fmt: skip


def test_missing_external_data(tmp_path) -> None:
    m = _valid()
    _save_external(m, tmp_path)
    (tmp_path / "weights.bin").unlink()
    assert "external data" in str(_error(str(tmp_path / "m.onnx")))


def test_external_data_loads_from_the_model_directory(tmp_path) -> None:
    m = _valid()
    _save_external(m, tmp_path)
    assert from_onnx(str(tmp_path / "m.onnx")).phase == "ingestion"


SECRET = np.array([1234.5, -8765.25, 0.001953125, 42.0], np.float32)


def _constant_from_file(location: str, in_branch: bool) -> onnx.ModelProto:
    """``y = x + w``, ``w`` a ``Constant`` node's value (inside an ``If`` branch whose
    condition needs ``x``, or in the main graph) whose four floats are in ``location``."""
    w = helper.make_tensor("w", TensorProto.FLOAT, (4,), np.zeros(4, np.float32))
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    const = helper.make_node("Constant", [], ["w"], value=w)
    nodes = [const, helper.make_node("Add", ["x", "w"], ["y"])]
    if in_branch:
        branch = helper.make_graph([helper.make_node("Constant", [], ["c"], value=w)], "b",
                                   [], [vi("c", [4])])
        nodes[:1] = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                     helper.make_node("Less", ["s", "s"], ["never"]),
                     helper.make_node("Not", ["never"], ["always"]),
                     helper.make_node("If", ["always"], ["w"], then_branch=branch,
                                      else_branch=branch)]
    return model(nodes, [vi("x", [4])], [vi("y", [4])])


@pytest.mark.parametrize("in_branch", [False, True])
def test_external_data_is_never_read_from_the_working_directory(tmp_path, monkeypatch,
                                                                in_branch: bool) -> None:
    """A node attribute's tensor (a Constant, also inside a subgraph) naming a file: from
    bytes it is refused (onnx would read the working directory's file: issue 27); from a
    path it is read from the model's folder only, as the initializers are."""
    here, there = tmp_path / "cwd", tmp_path / "models"
    here.mkdir()
    there.mkdir()
    (here / "secret.bin").write_bytes(SECRET.tobytes())
    monkeypatch.chdir(here)
    m = _constant_from_file("secret.bin", in_branch)
    err = _error(m.SerializeToString())
    assert "tensor(s) 'w' keep their data in an external file; pass the model's path" \
        in str(err)
    assert "never from the working directory" in str(err)
    _error(m)  # a ModelProto: the same
    onnx.save_model(m, str(there / "m.onnx"))
    err = _error(str(there / "m.onnx"))  # not next to the model: not found, not the cwd's
    assert f"cannot load the external data of the tensors from {str(there)!r}" in str(err)
    # next to the model it is the model's own data: read, and added to x (numpy: 0 + w)
    (there / "secret.bin").write_bytes(SECRET[::-1].tobytes())
    exe = plait.build(from_onnx(str(there / "m.onnx")), "numpy")
    got = VirtualMachine(exe)["main"](np.zeros(4, np.float32))
    np.testing.assert_array_equal(got, SECRET[::-1])


def test_a_type_error_names_the_node() -> None:
    """Inputs of mismatched dtypes are reported with the node, not deep inside."""
    nodes = [helper.make_node("Add", ["x", "i"], ["y"], name="mixed")]
    m = model(nodes, [vi("x", [2]), vi("i", [2], I64)], [vi("y", [2])])
    assert (
        "node 'mixed' (Add, opset 17): add: argument 1 (y) has dtype int64, expected float32"
        in str(_error(m))
    )


def test_names_that_are_not_utf8_are_decoded_like_onnxruntime_accepts_them() -> None:
    """protobuf hands strings that are not UTF-8 over as bytes; onnxruntime (C++) takes
    them as they are, and so does plait, with backslash escapes."""
    import onnxruntime as ort

    m = model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", ["NN", 3])],
        [vi("y", ["NN", 3])],
    )
    data = m.SerializeToString().replace(b"NN", b"N\xff")
    mod = from_onnx(data)
    assert "N_xff" in mod.script()
    parsed = onnx.ModelProto()
    parsed.ParseFromString(data)
    assert isinstance(parsed.graph.input[0].type.tensor_type.shape.dim[0].dim_param, bytes)
    from_onnx(parsed)
    assert isinstance(parsed.graph.input[0].type.tensor_type.shape.dim[0].dim_param, bytes)
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    got = VirtualMachine(plait.build(mod, "numpy"))["main"](x)
    want = ort.InferenceSession(data).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)  # relu: exact
