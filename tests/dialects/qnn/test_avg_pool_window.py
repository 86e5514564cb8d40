"""A quantized average pooling whose window is far larger than its input (EfficientNet's
pooler: ``AvgPool2d(1280, ceil_mode=True)`` over a 7 x 7 map, quantized as
DequantizeLinear -> AveragePool -> QuantizeLinear): qnn.Legalize lowers only the taps
that read the input, so the work of a build does not grow with the kernel (the full-size
QDQ EfficientNet-B0 was unrolled into 1.6 million taps and did not compile in 8
minutes), and plait-c still equals onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from qnn_ort import node_model, run_ort

import plait
from plait.dialects.qnn import reference as R
from plait.dialects.qnn.legalize import live_taps
from plait.frontend import from_onnx
from plait.runtime import VirtualMachine
from plait.transform import Sequential, make_pass

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SCALE_X, ZP_X, SCALE_Y, ZP_Y = 0.05, 128, 0.002, 3


def _qdq_pool(shape: tuple[int, ...], kernel: int, *, pads: tuple[int, ...] = (0, 0, 0, 0),
              stride: int | None = None, include: int = 1) -> object:
    """uint8 input -> DequantizeLinear -> AveragePool(ceil_mode) -> QuantizeLinear."""
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
             (("sx", SCALE_X, np.float32), ("zx", ZP_X, np.uint8),
              ("sy", SCALE_Y, np.float32), ("zy", ZP_Y, np.uint8))]
    s = kernel if stride is None else stride
    nodes = [
        helper.make_node("DequantizeLinear", ["input", "sx", "zx"], ["xf"]),
        helper.make_node("AveragePool", ["xf"], ["yf"], kernel_shape=[kernel, kernel],
                         strides=[s, s], pads=list(pads), ceil_mode=1,
                         count_include_pad=include),
        helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def _legalized_bindings(model: object) -> int:
    """The number of bindings after qnn.Legalize: the work every later pass (FuseOps,
    FuseKernels, the C compiler) does grows with it."""
    mod = from_onnx(model.SerializeToString())  # type: ignore[attr-defined]
    passes = Sequential([make_pass("qnn.Canonicalize"), make_pass("Normalize"),
                         make_pass("LambdaLift"), make_pass("qnn.Legalize")])
    main = passes(mod)["main"]
    return sum(len(b.bindings) for b in main.body.blocks)  # type: ignore[union-attr]


def test_the_lowering_does_not_grow_with_a_window_wider_than_the_input() -> None:
    """The same 3 x 5 map pooled by a ceil_mode window of 8 and of 512 (one window
    either way): the same number of bindings (the 15 taps that read the input, not
    262,144), and both equal onnxruntime."""
    shape = (1, 4, 3, 5)
    x = np.random.default_rng(0).integers(0, 256, shape).astype(np.uint8)
    counts = []
    for kernel in (8, 512):
        model = _qdq_pool(shape, kernel)
        counts.append(_legalized_bindings(model))
        (want,) = run_ort(model, {"input": x})
        got = VirtualMachine(plait.build(from_onnx(model.SerializeToString()), "c"))["main"](x)
        np.testing.assert_array_equal(np.asarray(got), want)
    assert counts[0] == counts[1]
    assert counts[1] < 3 * 15 + 20   # a slice and an add per live tap, a fixed tail


def test_live_taps_skip_the_taps_that_only_read_padding() -> None:
    """Worked by hand.  A 2-row input, window 5, stride 3, one row of padding before:
    ceil_mode gives one window, from row -1, which reads rows 0-1 with taps 1-2.  With
    stride 1 and three windows (from rows -1, 0, 1) taps 0-2 read the input (tap 0 in
    the windows from rows 0 and 1)."""
    assert live_taps(2, 5, 3, 1, 1) == [1, 2]
    assert live_taps(2, 5, 1, 1, 3) == [0, 1, 2]
    assert live_taps(7, 1280, 1280, 0, 1) == list(range(7))
    # stride wider than the input: the live taps need not be contiguous
    assert live_taps(1, 7, 3, 0, 3) == [0]
    assert live_taps(1, 4, 2, 1, 2) == [1]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_average_pool_with_padding_and_strides_equals_onnxruntime(dtype: str) -> None:
    """QLinearAveragePool with windows that overhang the input (ceil_mode, padding,
    either count) on plait-c: equal to onnxruntime and to the reference."""
    rng = np.random.default_rng(5)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (2, 3, 7, 6)).astype(dtype)
    zp = np.asarray(7 if dtype == "uint8" else -3, dtype)
    args = [x, np.float32(0.03), zp, np.float32(0.011), zp]
    for k, s, p, cip in ((6, 3, (1, 2, 1, 0), 0), (6, 3, (1, 2, 1, 0), 1),
                         (8, 2, (2, 1, 1, 2), 0), (3, 4, (0, 0, 0, 0), 1)):
        attrs = {"kernel_shape": (k, k), "strides": (s, s), "pads": p,
                 "count_include_pad": cip, "ceil_mode": 1}
        model, feeds = node_model("QLinearAveragePool", args, domain="com.microsoft",
                                  attrs=attrs)
        (want,) = run_ort(model, feeds)
        ref = R.avg_pool2d(*args, pool_size=(k, k), strides=(s, s), padding=p,
                           count_include_pad=bool(cip), ceil_mode=True)
        np.testing.assert_array_equal(ref, want)
        exe = plait.build(from_onnx(model.SerializeToString()), "c")
        got = VirtualMachine(exe)["main"](*[feeds[n] for n in sorted(feeds)])
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=str(attrs))
