"""ConvertLayout: desired layouts, layout-agnostic ops following, transforms at the
borders, adjacent transposes cancelled; numbers checked against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from transform_testlib import P

from plait.interp import run
from plait.ir import assert_structural_equal
from plait.ir.well_formed import well_formed
from plait.transform import ConvertLayout, Sequential

W = 'const([[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]], "float32")'
W_HWIO = 'const([[[[1.0, 3.0], [2.0, 4.0]]]], "float32")'
B = 'const([[[1.0]], [[2.0]]], "float32")'
B_NHWC = 'const([[[[1.0, 2.0]]]], "float32")'

RESNETISH = f"""
    @module(attrs={{"phase": "optimization"}})
    class Module:
        @function
        def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 8), "float32"):
            with dataflow():
                a = conv2d(x, {W})
                b = add(a, {B})
                c = relu(b)
                d = conv2d(c, {W})
                e = add(d, c)
                f = max_pool2d(e, pool_size=2, strides=2)
                g = reshape(f, shape=(1, 8))
                output(g)
            return g
"""


def _close(before, after) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(after, x), run(before, x), rtol=1e-6, atol=1e-6)


def test_convs_go_nhwc_their_neighbours_follow_and_transforms_sit_at_the_borders() -> None:
    after = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 8), "float32"):
                with dataflow():
                    x1 = permute_dims(x, axes=(0, 2, 3, 1))
                    a = conv2d(x1, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    b = add(a, permute_dims(reshape({B}, shape=(1, 2, 1, 1)),
                                            axes=(0, 2, 3, 1)))
                    c = relu(b)
                    d = conv2d(c, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    e = add(d, c)
                    f = max_pool2d(e, pool_size=2, strides=2, layout="NHWC")
                    f1 = permute_dims(f, axes=(0, 3, 1, 2))
                    g = reshape(f1, shape=(1, 8))
                    output(g)
                return g
    """
    mod = P(RESNETISH)
    out = ConvertLayout(desired={"conv2d": "NHWC"})(mod)
    assert_structural_equal(out, P(after))
    _close(mod, out)
    folded = Sequential.parse("ConvertLayout(desired={'conv2d': 'NHWC'}),FoldConstant,"
                              "DeadCodeElimination")(mod)
    text = folded.script()
    assert W_HWIO in text and B_NHWC in text and "permute_dims(const" not in text
    assert text.count("permute_dims") == 2   # the input and the pooled output only
    _close(mod, folded)


def test_transposes_already_in_the_model_cancel() -> None:
    before = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 4, 4, 2), "float32")) -> Tensor((1, 4, 4, 2), "float32"):
                with dataflow():
                    t = permute_dims(x, axes=(0, 3, 1, 2))
                    a = conv2d(t, {W})
                    s = sigmoid(a)
                    y = permute_dims(s, axes=(0, 2, 3, 1))
                    output(y)
                return y
    """
    after = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 4, 4, 2), "float32")) -> Tensor((1, 4, 4, 2), "float32"):
                with dataflow():
                    a = conv2d(x, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    y = sigmoid(a)
                    output(y)
                return y
    """
    assert_structural_equal(ConvertLayout(desired={"conv2d": "NHWC"})(P(before)), P(after))


def test_batch_norm_follows_and_an_op_with_an_axis_is_a_border() -> None:
    before = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
                with dataflow():
                    a = conv2d(x, {W})
                    n = batch_norm(a, const([1.0, 2.0], "float32"), const([0.5, 0.0], "float32"),
                                   const([0.0, 1.0], "float32"), const([1.0, 4.0], "float32"))
                    s = softmax(n, axis=1)
                    output(s)
                return s
    """
    after = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
                with dataflow():
                    x1 = permute_dims(x, axes=(0, 2, 3, 1))
                    a = conv2d(x1, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    n = batch_norm(a, const([1.0, 2.0], "float32"), const([0.5, 0.0], "float32"),
                                   const([0.0, 1.0], "float32"), const([1.0, 4.0], "float32"),
                                   axis=3)
                    n1 = permute_dims(n, axes=(0, 3, 1, 2))
                    s = softmax(n1, axis=1)
                    output(s)
                return s
    """
    mod = P(before)
    out = ConvertLayout(desired={"conv2d": "NHWC"})(mod)
    assert_structural_equal(out, P(after))
    _close(mod, out)


def test_a_shared_input_is_transposed_once_and_a_value_leaves_its_block_converted() -> None:
    before = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
                with dataflow():
                    a = conv2d(x, {W})
                    b = conv2d(x, {W})
                    e = add(a, b)
                    output(e)
                y = relu(e)
                z = conv2d(y, {W})
                return z
    """
    after = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
                with dataflow():
                    x1 = permute_dims(x, axes=(0, 2, 3, 1))
                    a = conv2d(x1, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    b = conv2d(x1, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                               kernel_layout="HWIO")
                    e = add(a, b)
                    output(e)
                y = relu(e)
                z = conv2d(y, permute_dims({W}, axes=(2, 3, 1, 0)), data_layout="NHWC",
                           kernel_layout="HWIO")
                z1 = permute_dims(z, axes=(0, 3, 1, 2))
                return z1
    """
    mod = P(before)
    out = ConvertLayout(desired={"conv2d": "NHWC"})(mod)
    assert_structural_equal(out, P(after))
    assert well_formed(out) == []
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)      # the 1x1 kernel, (O, I)
    conv = lambda t: np.einsum("oi,nihw->nohw", w, t)      # noqa: E731
    np.testing.assert_allclose(run(out, x), conv(np.maximum(2 * conv(x), 0)), rtol=1e-6)


def test_a_long_chain_converts_without_recursion() -> None:
    import sys

    from plait.ir import BlockBuilder, Constant, TensorType, Var
    from plait.op import make_call

    bb = BlockBuilder()
    x = Var("x", ty=TensorType((1, 2, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = bb.emit(make_call("conv2d", x, Constant(np.ones((2, 2, 1, 1), np.float32))))
            for _ in range(5000):
                v = bb.emit(make_call("relu", v))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    mod = bb.get().with_attrs(phase="optimization")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)   # a recursive walk of the 5,000 bindings would fail
    try:
        after = ConvertLayout(desired={"conv2d": "NHWC"})(mod)
    finally:
        sys.setrecursionlimit(limit)
    text = after.script()
    assert text.count("relu(") == 5000 and text.count("permute_dims") == 3  # x, w, result


def test_nothing_to_convert_is_the_same_function_and_bad_layouts_are_refused() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    y = relu(x)
                    output(y)
                return y
    """
    mod = P(text)
    assert ConvertLayout(desired={"conv2d": "NHWC"})(mod)["main"] is mod["main"]
    with pytest.raises(ValueError, match=r"op 'conv' has no layout to convert \(did you mean "
                                         r"'conv2d'\?\)"):
        ConvertLayout(desired={"conv": "NHWC"})
    with pytest.raises(ValueError, match=r"layout 'NWHC' for 'conv2d' is not one of NCHW, NHWC"):
        ConvertLayout(desired={"conv2d": "NWHC"})
    with pytest.raises(ValueError, match=r"'max_pool2d' has no kernel layout"):
        ConvertLayout(desired={"max_pool2d": ("NHWC", "HWIO")})
    assert ConvertLayout(desired={"conv2d": "NHWC"}).to_text() == \
        "ConvertLayout(desired={'conv2d': 'NHWC'})"


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_a_whole_exported_cnn_in_nhwc_matches_onnxruntime(cnn_onnx: str, target: str) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import plait
    from plait.frontend.onnx.importer import from_onnx
    from plait.runtime import VirtualMachine

    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    ref = ort.InferenceSession(cnn_onnx).run(None, {"input": x})[0]
    pipe = plait.default_pipeline(target).insert_after(
        "optimization/DeadCodeElimination",
        "ConvertLayout(desired={'conv2d': 'NHWC'}),FoldConstant,DeadCodeElimination")
    exe = plait.build(from_onnx(onnx.load(cnn_onnx)), target, pipeline=pipe)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), ref, rtol=1e-4, atol=1e-5)
