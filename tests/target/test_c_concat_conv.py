"""c.SplitConcatConv: a 1x1 convolution of a channel concatenation with upsampled parts
(SegFormer's decode head) becomes the sum of the parts' convolutions, each computed
before its upsampling; checked on the IR (what is left of the concatenation, the
resizes and the convolutions) and against onnxruntime (rtol/atol 1e-5: sums of at most
14 products, reassociated) on small ONNX models, and the shapes it must leave alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import plait
from plait.frontend.onnx import from_onnx
from plait.ir.expr import Call, Op
from plait.runtime import VirtualMachine

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(3)


def _model(parts: list[tuple[int, tuple[int, int], str | None]], out_hw: tuple[int, int],
           kernel: int = 1, extra_output: bool = False) -> Any:
    """x_i (1, c_i, h_i, w_i) -> Resize(mode) to out_hw (or as it is: mode None) ->
    Concat(axis 1) -> Conv (kernel x kernel, 7 outputs, bias) -> Relu; with
    ``extra_output`` the concatenation is an output too."""
    nodes, inputs, inits, names = [], [], [], []
    for i, (c, hw, mode) in enumerate(parts):
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, *hw]))
        if mode is None:
            names.append(f"x{i}")
            continue
        inits.append(numpy_helper.from_array(np.array([1, c, *out_hw], np.int64), f"s{i}"))
        nodes.append(helper.make_node("Resize", [f"x{i}", "", "", f"s{i}"], [f"r{i}"],
                                      mode=mode, coordinate_transformation_mode="half_pixel"))
        names.append(f"r{i}")
    cin = sum(c for c, _, _ in parts)
    inits += [numpy_helper.from_array(RNG.uniform(-1, 1, (7, cin, kernel, kernel))
                                      .astype(np.float32), "w"),
              numpy_helper.from_array(RNG.uniform(-1, 1, 7).astype(np.float32), "b")]
    nodes += [helper.make_node("Concat", names, ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "w", "b"], ["conv"],
                               pads=[kernel // 2] * 4),
              helper.make_node("Relu", ["conv"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("cat", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(mod: plait.IRModule) -> list[str]:
    """The op names of main's bindings, in order."""
    return [b.value.op.name for blk in mod["main"].body.blocks for b in blk.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, Op)]


def _dispatched(m: Any) -> list[str]:
    """The ops main calls after the optimization stage and c.SplitConcatConv."""
    from plait.target.c import SplitConcatConv

    mod = from_onnx(m)
    for step in plait.default_pipeline("c").flatten(None):
        if step.position.startswith("3"):   # the dispatch stage
            break
        mod = step.pass_(mod)
    return _ops(SplitConcatConv()(mod))


def _against_onnxruntime(m: Any, parts: list[tuple[int, tuple[int, int], str | None]]
                         ) -> None:
    feeds = {f"x{i}": RNG.uniform(-1, 1, (1, c, *hw)).astype(np.float32)
             for i, (c, hw, _) in enumerate(parts)}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(["y"], feeds)[0]
    got = VirtualMachine(plait.build(from_onnx(m), "c"))["main"](*feeds.values())
    got = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


SEGFORMER_LIKE = [(4, (8, 10), "linear"), (3, (4, 5), "linear"), (2, (2, 3), "nearest"),
                  (5, (8, 10), None)]
"""A part at the output's size resized to it (the identity), two upsampled (bilinear,
nearest) and one not resized at all."""


def test_the_concatenation_becomes_a_sum_of_products() -> None:
    """The concatenation goes; each part has its own 1x1 convolution, the upsampled ones
    before their resize (two resizes left: the identity one is dropped), and the sum
    matches onnxruntime."""
    m = _model(SEGFORMER_LIKE, (8, 10))
    ops = _dispatched(m)
    assert "concat" not in ops and ops.count("conv2d") == 4 and ops.count("resize2d") == 2
    for i, op in enumerate(ops):   # each resize reads a convolution's output
        if op == "resize2d":
            assert "conv2d" in ops[:i]
    _against_onnxruntime(m, SEGFORMER_LIKE)


@pytest.mark.parametrize("parts, kernel, extra", [
    ([(4, (8, 10), None), (3, (16, 20), "linear")], 1, False),   # a downsampling
    ([(4, (8, 10), None), (3, (4, 5), "linear")], 3, False),     # a 3x3 convolution
    ([(4, (8, 10), None), (3, (4, 5), "linear")], 1, True),      # the concat is read
    ([(4, (8, 10), None), (3, (8, 10), None)], 1, False),        # nothing upsampled
], ids=["downsampled", "3x3", "concat read elsewhere", "no resize"])
def test_what_it_leaves_alone(parts: list[Any], kernel: int, extra: bool) -> None:
    """No gain (no upsampled part), another convolution, or a concatenation something
    else reads: left as it is (and still right)."""
    m = _model(parts, (8, 10), kernel=kernel, extra_output=extra)
    ops = _dispatched(m)
    assert ops.count("concat") == 1 and ops.count("conv2d") == 1
    _against_onnxruntime(m, parts)
