"""Attacks on the ONNX importer: a Split into 2**31 - 1 outputs is refused at once
(max_outputs, plait.runtime.limits), and attribute values outside what ONNX allows (a pooling
ceil_mode of 2, ...) are refused at import, naming node, attribute, value and what is
allowed (plait/frontend/onnx/attr_values.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx  # noqa: E402
from onnx import helper  # noqa: E402
from onnx_helpers import model, run, vi  # noqa: E402

from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx import OnnxImportError  # noqa: E402
from plait.frontend.onnx.attr_values import AT_LEAST, CHOICES, FLAGS  # noqa: E402


def split_model(num_outputs: int) -> onnx.ModelProto:
    node = helper.make_node("Split", ["x"], ["y"], name="s", axis=0, num_outputs=num_outputs)
    return model([node], [vi("x", [4, 6])], [vi("y", None)], opset=18)


def test_a_split_into_two_billion_outputs_is_refused_at_once(deadline):
    start = time.perf_counter()
    with deadline(10):
        with pytest.raises(OnnxImportError) as info:
            from_onnx(split_model(2**31 - 1))
    assert time.perf_counter() - start < 2
    msg = str(info.value)
    assert "node 's' (Split, opset 18), attribute 'num_outputs'" in msg
    assert "2,147,483,647 exceeds the limit max_outputs = 65,536" in msg
    assert "plait.use_limits(max_outputs=...)" in msg and "PLAIT_MAX_OUTPUTS" in msg


def test_a_split_whose_num_outputs_is_not_its_outputs_is_refused():
    """Two outputs and ``num_outputs=65535`` (a fuzz finding): refused, as onnxruntime
    refuses it, rather than 65,535 parts made for two names."""
    node = helper.make_node("Split", ["x"], ["a", "b"], name="s", axis=1, num_outputs=65535)
    m = model([node], [vi("x", [4, 6])], [vi("a", None), vi("b", None)], opset=18)
    with pytest.raises(OnnxImportError, match=r"node 's' \(Split, opset 18\), attribute "
                                              r"'num_outputs': num_outputs is 65535, but the "
                                              r"node has 2 outputs"):
        from_onnx(m)


def test_a_split_within_the_limit_still_imports():
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
    m = model([node], [vi("x", [4, 6])], [vi("a", None), vi("b", None)], opset=18)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, b = run(from_onnx(m), x)
    np.testing.assert_array_equal(a, x[:, :3])
    np.testing.assert_array_equal(b, x[:, 3:])


def pool(op: str, **attrs: object) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="p", kernel_shape=[2, 2], strides=[2, 2],
                            **attrs)
    return model([node], [vi("x", [1, 1, 5, 5])], [vi("y", None)])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_ceil_mode_other_than_0_or_1_is_refused(op: str):
    with pytest.raises(OnnxImportError) as info:
        from_onnx(pool(op, ceil_mode=2))
    assert (f"node 'p' ({op}, opset 17): attribute 'ceil_mode' = 2 is not allowed; "
            "ONNX allows 0, 1") in str(info.value)


@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_ceil_mode_0_and_1_match_onnxruntime(ceil_mode: int):
    ort = pytest.importorskip("onnxruntime")
    m = pool("MaxPool", ceil_mode=ceil_mode)
    x = np.random.default_rng(0).standard_normal((1, 1, 5, 5)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run(from_onnx(m), x)
    assert got.shape == want.shape == (1, 1, 2 + ceil_mode, 2 + ceil_mode)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)   # max: exact


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (helper.make_node("ReduceSum", ["x"], ["y"], name="n", keepdims=-1),
         "attribute 'keepdims' = -1 is not allowed; ONNX allows 0, 1"),
        (helper.make_node("Gemm", ["x", "x"], ["y"], name="n", transA=5),
         "attribute 'transA' = 5 is not allowed; ONNX allows 0, 1"),
        (helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=0),
         "attribute 'blocksize' = 0 is not allowed; ONNX allows 1 or more"),
        (helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=2, mode="XYZ"),
         "attribute 'mode' = 'XYZ' is not allowed; ONNX allows 'DCR', 'CRD'"),
        (helper.make_node("Pad", ["x", "pads"], ["y"], name="n", mode="mirror"),
         "attribute 'mode' = 'mirror' is not allowed; ONNX allows 'constant', 'reflect', "
         "'edge', 'wrap'"),
        (helper.make_node("Resize", ["x", "", "scales"], ["y"], name="n",
                          coordinate_transformation_mode="middle"),
         "attribute 'coordinate_transformation_mode' = 'middle' is not allowed"),
        (helper.make_node("ArgMax", ["x"], ["y"], name="n", select_last_index=3),
         "attribute 'select_last_index' = 3 is not allowed; ONNX allows 0, 1"),
    ],
)
def test_values_outside_the_allowed_set_are_refused(node: onnx.NodeProto, message: str):
    inits = [helper.make_tensor("pads", onnx.TensorProto.INT64, [8], [0] * 8),
             helper.make_tensor("scales", onnx.TensorProto.FLOAT, [4], [1.0] * 4)]
    inits = [i for i in inits if i.name in node.input]
    m = model([node], [vi("x", [1, 4, 4, 4])], [vi("y", None)], inits)
    with pytest.raises(OnnxImportError) as info:
        from_onnx(m)
    assert f"node 'n' ({node.op_type}, opset 17): {message}" in str(info.value)


def test_the_table_names_real_attributes_of_the_right_type():
    """Every attribute of attr_values exists in ONNX's schemas with the type the table
    assumes (a typo would silently check nothing)."""
    from onnx.defs import OpSchema

    types: dict[tuple[str, str], set[int]] = {}
    for sc in onnx.defs.get_all_schemas_with_history():
        if sc.domain in ("", "ai.onnx"):
            for name, a in sc.attributes.items():
                types.setdefault((sc.name, name), set()).add(int(a.type))
                types.setdefault(("*", name), set()).add(int(a.type))
    int_t, str_t = int(OpSchema.AttrType.INT), int(OpSchema.AttrType.STRING)
    for name in [*FLAGS, *AT_LEAST]:
        assert int_t in types.get(("*", name), set()), name
    for (op, name), values in CHOICES.items():
        want = int_t if isinstance(values[0], int) else str_t
        assert want in types.get((op, name), set()), (op, name)
