"""Softmax, normalizations, pooling and resize: type inference, errors, and the numpy
implementations against torch.nn.functional (or ONNX's reference evaluator for the ONNX
Resize modes torch lacks)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.ir.types import TensorType as T
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

RNG = np.random.default_rng(3)
F32 = "float32"


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(got, want, rtol=1e-5, atol=1e-6):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------- softmax


def test_softmax_inference():
    assert infer("softmax", T(("n", 10), F32)) == T(("n", 10), F32)
    assert infer("log_softmax", T(("n", 4, 5), "float16"), axis=1) == T(("n", 4, 5), "float16")
    with pytest.raises(
        OpTypeError, match=r"softmax: axis 2 is out of range for a tensor of rank 2"
    ):
        infer("softmax", T(("n", 10), F32), axis=2)
    with pytest.raises(
        OpTypeError, match=r"softmax: argument 0 \(x\) must have a floating-point dtype"
    ):
        infer("softmax", T((3,), "int32"))


@needs_torch
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_matches_torch(axis):
    x = rand(4, 7, 3) * 10
    x[0, 0, 0] = 80.0  # large values must not overflow
    close(run("softmax", x, axis=axis), F.softmax(th(x), dim=axis).numpy())
    close(run("log_softmax", x, axis=axis), F.log_softmax(th(x), dim=axis).numpy(), atol=1e-5)


# -------------------------------------------------------------- normalizations


def test_norm_inference():
    x = T(("n", 16, 8), F32)
    assert infer("layer_norm", x, T((8,), F32), T((8,), F32)) == x
    assert infer("layer_norm", x, T((16, 8), F32), T((16, 8), F32), axes=(1, 2)) == x
    c = T((16,), F32)
    assert infer("batch_norm", x, c, c, c, c) == x
    assert infer("group_norm", x, c, c, num_groups=4) == x
    assert infer("instance_norm", x, c, c) == x
    with pytest.raises(
        OpTypeError, match=r"layer_norm: gamma must have shape \(8,\) .* got \(16,\)"
    ):
        infer("layer_norm", x, c, T((8,), F32))
    with pytest.raises(
        OpTypeError, match=r"batch_norm: moving_var must have shape \(16,\) \(one per channel"
    ):
        infer("batch_norm", x, c, c, c, T((8,), F32))
    with pytest.raises(
        OpTypeError,
        match=r"group_norm: 16 channels \(shape \(n, 16, 8\)\) do not split into 5 groups",
    ):
        infer("group_norm", x, c, c, num_groups=5)
    with pytest.raises(
        OpTypeError, match=r"instance_norm: x needs a batch, a channel and a spatial axis"
    ):
        infer("instance_norm", T((2, 16), F32), c, c)
    with pytest.raises(OpTypeError, match=r"layer_norm: argument 2 \(beta\) has dtype float16"):
        infer("layer_norm", x, T((8,), F32), T((8,), "float16"))
    with pytest.raises(
        OpAttrError, match=r"op 'layer_norm' has no attribute 'eps'; did you mean epsilon\?"
    ):
        infer("layer_norm", x, T((8,), F32), T((8,), F32), eps=1e-6)
    with pytest.raises(OpAttrError, match=r"op 'group_norm' requires attribute 'num_groups'"):
        infer("group_norm", x, c, c)


@needs_torch
def test_layer_norm_matches_torch():
    x, g, b = rand(3, 5, 6) * 3 + 2, rand(5, 6), rand(5, 6)
    close(run("layer_norm", x, g, b, axes=(-2, -1), epsilon=1e-3),
          F.layer_norm(th(x), (5, 6), th(g), th(b), eps=1e-3).numpy())  # fmt: skip
    close(run("layer_norm", x, g[0], b[0]), F.layer_norm(th(x), (6,), th(g[0]), th(b[0])).numpy())


def test_layer_norm_over_leading_axes_by_formula():
    x, g, b = (
        rand(4, 3, 5).astype(np.float64),
        rand(4, 5).astype(np.float64),
        rand(4, 5).astype(np.float64),
    )
    m = x.mean(axis=(0, 2), keepdims=True)
    v = ((x - m) ** 2).mean(axis=(0, 2), keepdims=True)
    want = (x - m) / np.sqrt(v + 1e-5) * g[:, None, :] + b[:, None, :]
    close(run("layer_norm", x, g, b, axes=(0, 2)), want, rtol=1e-12, atol=1e-12)


@needs_torch
def test_batch_norm_matches_torch():
    x, g, b, m, v = rand(2, 4, 3, 3), rand(4), rand(4), rand(4), np.abs(rand(4)) + 0.1
    want = F.batch_norm(th(x), th(m), th(v), th(g), th(b), training=False, eps=1e-3).numpy()
    close(run("batch_norm", x, g, b, m, v, epsilon=1e-3), want)
    nhwc = run("batch_norm", x.transpose(0, 2, 3, 1), g, b, m, v, axis=-1, epsilon=1e-3)
    close(nhwc, want.transpose(0, 2, 3, 1))


@needs_torch
def test_group_and_instance_norm_match_torch():
    x, g, b = rand(2, 6, 4, 5) * 2 + 1, rand(6), rand(6)
    close(run("group_norm", x, g, b, num_groups=3), F.group_norm(th(x), 3, th(g), th(b)).numpy())
    close(run("group_norm", x.transpose(0, 2, 3, 1), g, b, num_groups=2, channel_axis=3),
          F.group_norm(th(x), 2, th(g), th(b)).numpy().transpose(0, 2, 3, 1))  # fmt: skip
    close(run("instance_norm", x, g, b, epsilon=1e-4),
          F.instance_norm(th(x), weight=th(g), bias=th(b), eps=1e-4).numpy())  # fmt: skip


# --------------------------------------------------------------------- pooling


def test_pool_inference():
    x = T(("n", 64, 112, 112), F32)
    assert infer("max_pool2d", x, pool_size=3, strides=2, padding=1) == T(("n", 64, 56, 56), F32)
    assert infer("avg_pool2d", T((1, 3, 7, 7), F32), pool_size=2, strides=2, ceil_mode=True) == T(
        (1, 3, 4, 4), F32
    )
    assert infer("max_pool2d", T((1, 9, 9, 3), F32), pool_size=3, layout="NHWC") == T(
        (1, 7, 7, 3), F32
    )
    assert infer("max_pool1d", T(("n", 3, 10), "int8"), pool_size=2, strides=2) == T(
        ("n", 3, 5), "int8"
    )
    assert infer("max_pool2d", T((1, 3, "h", "w"), F32), pool_size=3, padding=1) == T(
        (1, 3, "h", "w"), F32
    )
    halved = infer("max_pool2d", T((1, 3, "h", 8), F32), pool_size=2, strides=2)
    assert str(halved) == 'Tensor((1, 3, h // 2, 4), "float32")'
    assert infer("adaptive_avg_pool2d", x, output_size=7) == T(("n", 64, 7, 7), F32)
    assert infer("adaptive_avg_pool2d", x) == x
    assert infer("global_avg_pool2d", x) == T(("n", 64, 1, 1), F32)
    assert infer("global_avg_pool2d", T(("n", 5, 5, 8), F32), layout="NHWC") == T(
        ("n", 1, 1, 8), F32
    )


def test_pool_inference_errors():
    x = T((1, 3, 4, 4), F32)
    with pytest.raises(
        OpTypeError, match=r"max_pool2d: the window \(5, 5\) is larger than the padded input"
    ):
        infer("max_pool2d", x, pool_size=5)
    with pytest.raises(
        OpTypeError,
        match=r"avg_pool2d: padding \(2, 2, 2, 2\) must be smaller than the \(dilated\) window",
    ):
        infer("avg_pool2d", x, pool_size=2, padding=2)
    with pytest.raises(
        OpTypeError, match=r"max_pool2d: x must have rank 4 \(layout NCHW\), got shape \(3, 4, 4\)"
    ):
        infer("max_pool2d", T((3, 4, 4), F32), pool_size=2)
    with pytest.raises(
        OpTypeError, match=r"avg_pool2d: argument 0 \(x\) must have a floating-point dtype"
    ):
        infer("avg_pool2d", T((1, 3, 4, 4), "int32"), pool_size=2)
    with pytest.raises(OpAttrError, match=r"op 'max_pool2d' has no attribute 'count_include_pad'"):
        infer("max_pool2d", x, count_include_pad=True)
    with pytest.raises(
        OpAttrError, match=r"op 'max_pool2d' has no attribute 'kernel_size'; did you mean"
    ):
        infer("max_pool2d", x, kernel_size=2)


MAXPOOL_CASES = [
    ((2, 3, 9, 9), {"pool_size": 3, "strides": 2, "padding": 1}),
    ((1, 2, 8, 7), {"pool_size": (2, 3), "strides": (2, 2), "ceil_mode": True}),
    ((1, 2, 10, 10), {"pool_size": 3, "strides": 3, "padding": 1, "ceil_mode": True}),
    ((1, 2, 11, 9), {"pool_size": 3, "strides": 2, "dilation": (2, 1), "padding": 1}),
]


def _torch_pool_args(a):
    return dict(
        kernel_size=a["pool_size"], stride=a.get("strides", 1), padding=a.get("padding", 0),
        ceil_mode=a.get("ceil_mode", False),
    )  # fmt: skip


@needs_torch
@pytest.mark.parametrize("shape, attrs", MAXPOOL_CASES)
def test_max_pool2d_matches_torch(shape, attrs):
    x = rand(*shape)
    want = F.max_pool2d(th(x), **_torch_pool_args(attrs), dilation=attrs.get("dilation", 1)).numpy()
    close(run("max_pool2d", x, **attrs), want, rtol=0, atol=0)
    nhwc = run("max_pool2d", x.transpose(0, 2, 3, 1), **attrs, layout="NHWC")
    close(nhwc, want.transpose(0, 2, 3, 1), rtol=0, atol=0)


@needs_torch
def test_max_pool_integers_and_1d():
    x = RNG.integers(-100, 100, (1, 2, 7, 7)).astype(np.int32)
    want = F.max_pool2d(th(x.astype(np.float32)), 3, 2, 1).numpy().astype(np.int32)
    close(run("max_pool2d", x, pool_size=3, strides=2, padding=1), want, rtol=0, atol=0)
    x1 = rand(2, 3, 17)
    close(run("max_pool1d", x1, pool_size=4, strides=3, padding=2, ceil_mode=True),
          F.max_pool1d(th(x1), 4, 3, 2, ceil_mode=True).numpy(), rtol=0, atol=0)  # fmt: skip


AVGPOOL_CASES = [
    ((2, 3, 9, 9), {"pool_size": 3, "strides": 2, "padding": 1}),
    ((1, 2, 8, 7), {"pool_size": (2, 3), "strides": 2, "ceil_mode": True}),
    ((1, 2, 10, 10), {"pool_size": 3, "strides": 3, "padding": 1, "ceil_mode": True}),
    ((1, 1, 6, 5), {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0)}),
    # EfficientNet's pooler (transformers): a ceil-mode window far larger than the input
    ((1, 3, 7, 6), {"pool_size": 1280, "strides": 1280, "ceil_mode": True}),
]


@needs_torch
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("shape, attrs", AVGPOOL_CASES)
def test_avg_pool2d_matches_torch(shape, attrs, count_include_pad):
    x = rand(*shape)
    want = F.avg_pool2d(
        th(x), **_torch_pool_args(attrs), count_include_pad=count_include_pad
    ).numpy()
    close(run("avg_pool2d", x, **attrs, count_include_pad=count_include_pad), want)


@needs_torch
def test_avg_pool1d_and_dilated_avg_pool():
    x1 = rand(2, 3, 15)
    attrs = {"pool_size": 4, "strides": 2, "padding": 2, "count_include_pad": True}
    close(
        run("avg_pool1d", x1, **attrs, ceil_mode=True),
        F.avg_pool1d(th(x1), 4, 2, 2, ceil_mode=True, count_include_pad=True).numpy(),
    )
    # torch has no dilated average pooling: a depthwise convolution with a ones kernel,
    # divided by the window size, is the same thing (without padding)
    x = rand(1, 3, 9, 10)
    ones = torch.ones(3, 1, 2, 3)
    want = F.conv2d(th(x), ones, stride=(1, 2), dilation=(3, 2), groups=3).numpy() / 6
    close(run("avg_pool2d", x, pool_size=(2, 3), strides=(1, 2), dilation=(3, 2)), want)


@needs_torch
@pytest.mark.parametrize(
    "in_hw, out_hw", [((7, 5), (3, 2)), ((8, 8), (8, 8)), ((5, 9), (1, 4)), ((4, 4), (6, 5))]
)
def test_adaptive_avg_pool2d_matches_torch(in_hw, out_hw):
    x = rand(2, 3, *in_hw)
    want = F.adaptive_avg_pool2d(th(x), out_hw).numpy()
    close(run("adaptive_avg_pool2d", x, output_size=out_hw), want)
    close(run("adaptive_avg_pool2d", x.transpose(0, 2, 3, 1), output_size=out_hw, layout="NHWC"),
          want.transpose(0, 2, 3, 1))  # fmt: skip


def test_global_avg_pool2d_is_the_spatial_mean():
    x = rand(2, 3, 4, 5)
    close(run("global_avg_pool2d", x), x.mean(axis=(2, 3), keepdims=True))
    close(run("global_avg_pool2d", x.transpose(0, 2, 3, 1), layout="NHWC"),
          x.mean(axis=(2, 3), keepdims=True).transpose(0, 2, 3, 1))  # fmt: skip


# ---------------------------------------------------------------------- resize


def test_resize_inference():
    assert infer("resize2d", T(("n", 3, 32, 32), F32), size=(64, 48)) == T(("n", 3, 64, 48), F32)
    # symbolic sizes: an upsampled dynamic image (written as text, parsed to h * 2)
    assert str(infer("resize2d", T(("n", 3, "h", 8), F32), size=("h * 2", "w"))) == \
        'Tensor((n, 3, h * 2, w), "float32")'
    assert infer("resize2d", T(("n", 32, 32, 3), "uint8"), size=7, layout="NHWC") == T(
        ("n", 7, 7, 3), "uint8"
    )
    with pytest.raises(OpTypeError, match=r"resize2d: attribute 'size' must be >= 1"):
        infer("resize2d", T((1, 3, 4, 4), F32), size=(0, 4))
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'method' of op 'resize2d' must be one of 'nearest', 'linear', 'cubic', "
        r"got 'bilinear'",
    ):
        infer("resize2d", T((1, 3, 4, 4), F32), size=(8, 8), method="bilinear")
    with pytest.raises(OpAttrError, match=r"op 'resize2d' requires attribute 'size'"):
        infer("resize2d", T((1, 3, 4, 4), F32))


# plait attributes -> torch interpolate arguments that mean the same
CTM = "coordinate_transformation_mode"
RESIZE_VS_TORCH = [
    (
        {"method": "nearest", CTM: "asymmetric", "rounding_method": "floor"},
        {"mode": "nearest"},
    ),
    (
        {"method": "nearest", CTM: "half_pixel", "rounding_method": "round_prefer_ceil"},
        {"mode": "nearest-exact"},
    ),
    ({"method": "linear", CTM: "half_pixel"}, {"mode": "bilinear", "align_corners": False}),
    ({"method": "linear", CTM: "align_corners"}, {"mode": "bilinear", "align_corners": True}),
    ({"method": "cubic", CTM: "half_pixel"}, {"mode": "bicubic", "align_corners": False}),
    ({"method": "cubic", CTM: "align_corners"}, {"mode": "bicubic", "align_corners": True}),
]


@needs_torch
@pytest.mark.parametrize("size", [(9, 13), (3, 2), (6, 8)])
@pytest.mark.parametrize("ours, theirs", RESIZE_VS_TORCH)
def test_resize2d_matches_torch_interpolate(ours, theirs, size):
    x = rand(2, 3, 6, 4)
    want = F.interpolate(th(x), size=size, **theirs).numpy()
    close(run("resize2d", x, size=size, **ours), want, rtol=1e-5, atol=2e-6)


def _onnx_resize(x, size, **attrs):
    onnx_ref = pytest.importorskip("onnx.reference")
    from onnx import TensorProto, helper

    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    sizes = np.array(x.shape[:2] + tuple(size), np.int64)
    return onnx_ref.ReferenceEvaluator(model).run(None, {"x": x, "sizes": sizes})[0]


ONNX_RESIZE = [
    (
        {"method": "nearest", CTM: "asymmetric", "rounding_method": "round_prefer_floor"},
        {"mode": "nearest", CTM: "asymmetric", "nearest_mode": "round_prefer_floor"},
    ),
    ({"method": "linear", CTM: "asymmetric"}, {"mode": "linear", CTM: "asymmetric"}),
    (
        {"method": "linear", CTM: "pytorch_half_pixel"},
        {"mode": "linear", CTM: "pytorch_half_pixel"},
    ),
    (
        {"method": "cubic", CTM: "half_pixel", "cubic_alpha": -0.5, "cubic_exclude": True},
        {"mode": "cubic", CTM: "half_pixel", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    ),
]


@pytest.mark.parametrize("size", [(9, 3), (1, 5)])
@pytest.mark.parametrize("ours, theirs", ONNX_RESIZE)
def test_resize2d_matches_onnx_reference(ours, theirs, size):
    x = rand(1, 2, 5, 4)
    close(
        run("resize2d", x, size=size, **ours), _onnx_resize(x, size, **theirs), rtol=1e-5, atol=1e-6
    )


def test_resize2d_integer_input_rounds_and_layout():
    x = RNG.integers(0, 256, (1, 5, 4, 3)).astype(np.uint8)
    got = run("resize2d", x, size=(7, 9), layout="NHWC")
    as_float = run("resize2d", x.astype(np.float64), size=(7, 9), layout="NHWC")
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, np.clip(np.rint(as_float), 0, 255))


def test_resize2d_tf_half_pixel_for_nn_by_formula():
    # ONNX's reference evaluator dropped this mode: x_in = (x_out + 0.5) / scale, here
    # rows 5 -> 3 (scale 0.6): 0.83, 2.5, 4.17, rounded up and clamped: rows 1, 3, 4;
    # columns 2 -> 2 (scale 1): 0.5, 1.5 rounded up and clamped: columns 1, 1
    x = np.arange(5 * 2, dtype=np.float32).reshape(1, 1, 5, 2)
    attrs = {"method": "nearest", CTM: "tf_half_pixel_for_nn", "rounding_method": "ceil"}
    got = run("resize2d", x, size=(3, 2), **attrs)
    np.testing.assert_array_equal(got[0, 0], x[0, 0][[1, 3, 4]][:, [1, 1]])
