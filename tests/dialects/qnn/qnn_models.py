"""Small float ONNX models (an MLP, a ResNet-style CNN, a transformer encoder layer) and
their quantized versions made by onnxruntime's quantization tools, as a user would
make them: ``quantize_static`` in the QOperator and QDQ formats with a calibration
reader, and ``quantize_dynamic``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

FORMATS = ("qop", "qdq", "dyn")


def _builders() -> dict[str, tuple[Callable[[], Any], tuple[int, ...]]]:
    return {"mlp": (mlp, (4, 64)), "cnn": (cnn, (1, 3, 32, 32)), "encoder": (encoder, (1, 32, 64))}


def _init(name: str, arr: Any) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def _model(nodes: list, inputs: list, outputs: list, inits: list, name: str) -> Any:
    from onnx import helper

    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def mlp(seed: int = 0) -> Any:
    """Three MatMul + Add layers with Relu between them."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    dims = [64, 128, 96, 10]
    for i in range(3):
        w = rng.normal(size=(dims[i], dims[i + 1])) / np.sqrt(dims[i])
        inits += [_init(f"w{i}", w), _init(f"b{i}", rng.normal(size=dims[i + 1]) * 0.1)]
        nodes += [h.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  h.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"])]
        x = f"a{i}"
        if i < 2:
            nodes.append(h.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [4, 64])],
                  [h.make_tensor_value_info(x, TP.FLOAT, [4, 10])], inits, "mlp")


def cnn(seed: int = 0) -> Any:
    """Conv/Relu, MaxPool, two residual blocks (one with a strided 1x1 shortcut and a
    depthwise convolution), GlobalAveragePool, Flatten, Gemm."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    rng = np.random.default_rng(seed)
    inits: list = []
    nodes: list = []

    def conv(x: str, cin: int, cout: int, k: int, s: int, name: str, group: int = 1) -> str:
        w = rng.normal(size=(cout, cin // group, k, k)) * np.sqrt(2 / (cin // group * k * k))
        inits.extend([_init(name + "_w", w), _init(name + "_b", rng.normal(size=cout) * 0.1)])
        nodes.append(h.make_node("Conv", [x, name + "_w", name + "_b"], [name], pads=[k // 2] * 4,
                                 strides=[s, s], group=group))
        return name

    def relu(x: str, name: str) -> str:
        nodes.append(h.make_node("Relu", [x], [name]))
        return name

    x = relu(conv("x", 3, 16, 3, 1, "c1"), "r1")
    nodes.append(h.make_node("MaxPool", [x], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    y = conv(relu(conv("p1", 16, 16, 3, 1, "c2"), "r2"), 16, 16, 3, 1, "c3")
    nodes.append(h.make_node("Add", ["p1", y], ["res1"]))
    x = relu("res1", "r3")
    y = relu(conv(x, 16, 32, 3, 2, "c4"), "r4")
    y = conv(relu(conv(y, 32, 32, 3, 1, "c5", group=32), "r5"), 32, 32, 1, 1, "c6")
    s = conv(x, 16, 32, 1, 2, "c7")
    nodes.append(h.make_node("Add", [s, y], ["res2"]))
    x = relu("res2", "r6")
    nodes += [h.make_node("GlobalAveragePool", [x], ["gap"]),
              h.make_node("Flatten", ["gap"], ["flat"])]
    inits += [_init("fc_w", rng.normal(size=(10, 32)) * 0.2),
              _init("fc_b", rng.normal(size=10) * 0.1)]
    nodes.append(h.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["out"], transB=1))
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 32, 32])],
                  [h.make_tensor_value_info("out", TP.FLOAT, [1, 10])], inits, "cnn")


def encoder(seed: int = 0, s: int = 32, d: int = 64, heads: int = 4, f: int = 128) -> Any:
    """A post-norm transformer encoder layer: multi-head self-attention (Q/K/V
    projections, scaled scores, Softmax), residual, LayerNormalization, a Relu
    feed-forward block, residual, LayerNormalization."""
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    inits: list = []
    nodes: list = []
    dh = d // heads

    def lin(x: str, din: int, dout: int, name: str) -> str:
        inits.extend([_init(name + "_w", rng.normal(size=(din, dout)) / np.sqrt(din)),
                      _init(name + "_b", rng.normal(size=dout) * 0.05)])
        nodes.append(h.make_node("MatMul", [x, name + "_w"], [name + "_m"]))
        nodes.append(h.make_node("Add", [name + "_m", name + "_b"], [name]))
        return name

    def shape(name: str, vals: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(vals, np.int64), name))
        return name

    heads_out = []
    for n in ("q", "k", "v"):
        y = lin("x", d, d, n)
        nodes.append(h.make_node("Reshape", [y, shape(n + "_shape", [1, s, heads, dh])],
                                 [n + "_r"]))
        nodes.append(h.make_node("Transpose", [n + "_r"], [n + "_t"],
                                 perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3]))
        heads_out.append(n + "_t")
    inits.append(_init("scale", np.array(1 / np.sqrt(dh))))
    nodes += [h.make_node("MatMul", heads_out[:2], ["qk"]),
              h.make_node("Mul", ["qk", "scale"], ["qks"]),
              h.make_node("Softmax", ["qks"], ["att"], axis=-1),
              h.make_node("MatMul", ["att", heads_out[2]], ["ctx"]),
              h.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ctx_t", shape("ctx_shape", [1, s, d])], ["ctx_r"])]
    o = lin("ctx_r", d, d, "o")
    nodes.append(h.make_node("Add", ["x", o], ["res1"]))
    for i, (src, dst) in enumerate((("res1", "ln1"), ("res2", "out"))):
        inits += [_init(f"ln{i}_g", 1 + rng.normal(size=d) * 0.1),
                  _init(f"ln{i}_b", rng.normal(size=d) * 0.1)]
        if i == 0:
            nodes.append(h.make_node("LayerNormalization", [src, "ln0_g", "ln0_b"], [dst], axis=-1))
            f1 = lin("ln1", d, f, "f1")
            nodes.append(h.make_node("Relu", [f1], ["f1r"]))
            f2 = lin("f1r", f, d, "f2")
            nodes.append(h.make_node("Add", ["ln1", f2], ["res2"]))
        else:
            nodes.append(h.make_node("LayerNormalization", [src, "ln1_g", "ln1_b"], [dst], axis=-1))
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [1, s, d])],
                  [h.make_tensor_value_info("out", TP.FLOAT, [1, s, d])], inits, "encoder")


def input_shape(name: str) -> tuple[int, ...]:
    return _builders()[name][1]


def sample(name: str, seed: int) -> np.ndarray:
    """A random input of model ``name``."""
    return np.random.default_rng(seed).normal(size=input_shape(name)).astype(np.float32)


def quantize(name: str, fmt: str, directory: str) -> str:
    """Model ``name`` quantized in format ``fmt`` (``qop``, ``qdq`` or ``dyn``) by
    onnxruntime's tools into ``directory``; returns the path."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    src = os.path.join(directory, f"{name}.onnx")
    if not os.path.exists(src):
        onnx.save(_builders()[name][0](), src)
    out = os.path.join(directory, f"{name}_{fmt}.onnx")
    if os.path.exists(out):
        return out

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter([{"x": sample(name, 100 + i)} for i in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.data, None)

    import logging

    logging.getLogger().setLevel(logging.ERROR)  # the tools warn to pre-process models
    if fmt == "dyn":
        quantize_dynamic(src, out, weight_type=QuantType.QInt8)
    else:
        quantize_static(src, out, Reader(),
                        quant_format=QuantFormat.QOperator if fmt == "qop" else QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def with_integer_output(path: str) -> tuple[str, str | None]:
    """A copy of the model whose graph also outputs the quantized tensor the last
    ``DequantizeLinear`` reads (``None`` when the model has none: dynamic quantization
    ends in float arithmetic); returns the path and that output's name."""
    import onnx
    from onnx import helper

    m = onnx.load(path)
    dqs = [n for n in m.graph.node if n.op_type == "DequantizeLinear"
           and not any(n.input[0] == i.name for i in m.graph.initializer)]
    if not dqs:
        return path, None
    name = dqs[-1].input[0]
    m.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.UINT8, None))
    out = path.replace(".onnx", "_int.onnx")
    onnx.save(m, out)
    return out, name
