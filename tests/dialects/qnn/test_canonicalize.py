"""qnn.Canonicalize: QDQ shapes folded into qnn ops (before/after in the text format),
and shapes it must leave alone."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.dialects.qnn import Canonicalize
from plait.ir import assert_structural_equal
from plait.runtime.vm import VirtualMachine

HEAD = """
@module
class M:
    @function
"""


def check(before: str, after: str) -> None:
    got = Canonicalize()(plait.parse(HEAD + before))
    assert_structural_equal(got, plait.parse(HEAD + after))


def test_conv_bias_relu_quantize_becomes_qlinearconv_arithmetic() -> None:
    """The bias's int32 values are added to the accumulator; the input scale of the
    requantization is x_scale * w_scale per channel; the relu goes (the zero point is
    the type's minimum, so the saturation is the relu)."""
    check("""
    def main(x: Tensor((1, 2, 4, 4), "uint8")) -> Tensor((1, 3, 4, 4), "uint8"):
        with dataflow():
            xd = qnn.dequantize(x, const(0.5, "float32"), const(3, "uint8"))
            wd = qnn.dequantize(const([[[[1]], [[2]]], [[[3]], [[4]]], [[[5]], [[-6]]]], "int8"),
                                const([0.25, 0.5, 1.0], "float32"), const([0, 0, 0], "int8"),
                                axis=0)
            bd = qnn.dequantize(const([7, 8, 9], "int32"), const([0.125, 0.25, 0.5], "float32"),
                                const([0, 0, 0], "int32"), axis=0)
            y = conv2d(xd, wd)
            b = reshape(bd, shape=(-1, 1, 1))
            z = add(y, b)
            r = relu(z)
            q = qnn.quantize(r, const(0.75, "float32"), const(0, "uint8"))
            output(q)
        return q
""", """
    def main(x: Tensor((1, 2, 4, 4), "uint8")) -> Tensor((1, 3, 4, 4), "uint8"):
        with dataflow():
            acc = qnn.conv2d(x, const([[[[1]], [[2]]], [[[3]], [[4]]], [[[5]], [[-6]]]], "int8"),
                             const(3, "uint8"), const([0, 0, 0], "int8"))
            acc1 = add(acc, const([[[7]], [[8]], [[9]]], "int32"))
            q = qnn.requantize(acc1, const([0.125, 0.25, 0.5], "float32"), const(0, "int32"),
                               const(0.75, "float32"), const(0, "uint8"), axis=1)
            output(q)
        return q
""")


def test_add_softmax_and_moves_fold_and_pairs_cancel() -> None:
    check("""
    def main(a: Tensor((2, 8), "uint8"), b: Tensor((2, 8), "uint8")) -> Tensor((8, 2), "uint8"):
        with dataflow():
            ad = qnn.dequantize(a, const(0.1, "float32"), const(10, "uint8"))
            bd = qnn.dequantize(b, const(0.2, "float32"), const(20, "uint8"))
            s = add(ad, bd)
            sq = qnn.quantize(s, const(0.3, "float32"), const(30, "uint8"))
            sd = qnn.dequantize(sq, const(0.3, "float32"), const(30, "uint8"))
            t = permute_dims(sd, axes=(1, 0))
            tq = qnn.quantize(t, const(0.3, "float32"), const(30, "uint8"))
            td = qnn.dequantize(tq, const(0.3, "float32"), const(30, "uint8"))
            p = softmax(td, axis=-1)
            pq = qnn.quantize(p, const(0.00390625, "float32"), const(0, "uint8"))
            pd = qnn.dequantize(pq, const(0.00390625, "float32"), const(0, "uint8"))
            same = qnn.quantize(pd, const(0.00390625, "float32"), const(0, "uint8"))
            output(same)
        return same
""", """
    def main(a: Tensor((2, 8), "uint8"), b: Tensor((2, 8), "uint8")) -> Tensor((8, 2), "uint8"):
        with dataflow():
            sq = qnn.add(a, const(0.1, "float32"), const(10, "uint8"), b, const(0.2, "float32"),
                         const(20, "uint8"), const(0.3, "float32"), const(30, "uint8"))
            tq = permute_dims(sq, axes=(1, 0))
            pq = qnn.softmax(tq, const(0.3, "float32"), const(30, "uint8"),
                             const(0.00390625, "float32"), const(0, "uint8"), axis=-1)
            same = pq
            output(same)
        return same
""")


def test_shapes_onnxruntime_does_not_fuse_are_left() -> None:
    """A relu before a quantize whose zero point is not the minimum, a move between
    different scales, a quantize -> dequantize pair (it rounds) and a float bias stay."""
    text = """
    def main(x: Tensor((1, 2, 4, 4), "uint8")) -> Tensor((1, 2, 4, 4), "float32"):
        with dataflow():
            xd = qnn.dequantize(x, const(0.5, "float32"), const(3, "uint8"))
            r = relu(xd)
            rq = qnn.quantize(r, const(0.5, "float32"), const(3, "uint8"))
            rd = qnn.dequantize(rq, const(0.5, "float32"), const(3, "uint8"))
            m = reshape(rd, shape=(1, 2, 4, 4))
            mq = qnn.quantize(m, const(0.25, "float32"), const(3, "uint8"))
            md = qnn.dequantize(mq, const(0.25, "float32"), const(3, "uint8"))
            w = qnn.dequantize(const([[[[1]], [[2]]], [[[3]], [[4]]]], "int8"),
                               const(0.5, "float32"), const(0, "int8"))
            y = conv2d(md, w)
            z = add(y, const([[[1.0]], [[2.0]]], "float32"))
            zq = qnn.quantize(z, const(0.5, "float32"), const(3, "uint8"))
            back = qnn.dequantize(zq, const(0.5, "float32"), const(3, "uint8"))
            output(back)
        return back
"""
    check(text, text)


def test_folded_qdq_model_equals_the_qlinear_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The CNN quantized in QDQ format, canonicalized, computes what the same network
    quantized in QOperator format computes (bit for bit on every integer)."""
    pytest.importorskip("onnxruntime")
    from qnn_models import quantize, sample

    from plait.frontend.onnx import from_onnx

    x = sample("cnn", 3)
    outs = []
    for fmt in ("qop", "qdq"):
        mod = from_onnx(quantize("cnn", fmt, str(tmp_path)))
        outs.append(np.asarray(VirtualMachine(plait.build(mod, "numpy"))["main"](x)))
    np.testing.assert_array_equal(outs[0], outs[1])
