"""A QDQ model's Pad before a convolution (MobileNetV2 as transformers exports it pads
explicitly; the quantizer dequantizes the fill, so the importer builds
``where(pad(ones_like(x)), pad(x), fill)``): qnn.Canonicalize turns
``quantize(pad(dequantize(x)))`` into an 8-bit pad of the quantized fill and that pad
into the convolution's padding, so no float pass is left; the integer output equals
onnxruntime's (which runs the same QDQ model with its own fusions)."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.frontend import from_onnx
from plait.runtime.vm import VirtualMachine

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F32 = np.float32


def _model(fill_from_dq: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("s", np.asarray(0.04, F32)), ("z", np.asarray(120, np.uint8)),
        ("ws", np.asarray(0.02, F32)), ("wz", np.asarray(0, np.int8)),
        ("wq", rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)),
        ("os", np.asarray(0.3, F32)), ("oz", np.asarray(7, np.uint8)),
        ("pads", np.asarray([0, 0, 1, 2, 0, 0, 1, 0], np.int64)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    if fill_from_dq:
        inits.append(numpy_helper.from_array(np.asarray(120, np.uint8), "fq"))
        nodes.append(helper.make_node("DequantizeLinear", ["fq", "s", "z"], ["fill"]))
    else:
        inits.append(numpy_helper.from_array(np.asarray(0.0, F32), "fill"))
    nodes += [helper.make_node("Pad", ["xd", "pads", "fill"], ["p"], mode="constant"),
              helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
              helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["pd"]),
              helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
              helper.make_node("Conv", ["pd", "w"], ["c"], strides=[2, 1]),
              helper.make_node("QuantizeLinear", ["c", "os", "oz"], ["cq"]),
              helper.make_node("DequantizeLinear", ["cq", "os", "oz"], ["y"])]
    graph = helper.make_graph(
        nodes, "pad_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("fill_from_dq", [True, False])
def test_a_quantized_pad_is_the_convolutions_padding(fill_from_dq: bool) -> None:
    model = _model(fill_from_dq)
    x = (np.random.default_rng(1).normal(size=(1, 3, 9, 8)) * 2).astype(F32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    mod = from_onnx(model)
    shown = str(plait.transform.make_pass("qnn.Canonicalize")(mod))
    assert "where(" not in shown and "pad(" not in shown, "the pad is still there"
    assert "qnn.conv2d(xq," in shown and "padding=(1, 2, 1, 0)" in shown
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_array_equal(np.asarray(got), want)
