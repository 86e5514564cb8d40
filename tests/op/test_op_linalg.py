"""matmul, linear and convolutions: type inference (static and symbolic), error
messages, and the numpy implementations against torch.nn.functional."""

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

RNG = np.random.default_rng(2)
F32 = "float32"


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# ------------------------------------------------------------------ matmul, linear


def test_matmul_inference():
    assert infer("matmul", T(("n", 3, 4), F32), T((4, 5), F32)) == T(("n", 3, 5), F32)
    assert infer("matmul", T((4,), F32), T(("b", 4, 5), F32)) == T(("b", 5), F32)
    assert infer("matmul", T((2, 1, 3, 4), F32), T((7, 4, 5), F32)) == T((2, 7, 3, 5), F32)
    with pytest.raises(OpTypeError, match=r"matmul: the contracted dimensions differ: x has 4"):
        infer("matmul", T((3, 4), F32), T((5, 6), F32))


def test_linear_inference():
    w, b = T((8, 16), F32), T((8,), F32)
    assert infer("linear", T(("n", "s", 16), F32), w, b) == T(("n", "s", 8), F32)
    assert infer("linear", T(("n", 16), F32), w) == T(("n", 8), F32)
    assert infer("linear", T((16,), F32), w) == T((8,), F32)
    with pytest.raises(OpTypeError, match=r"linear: x has 15 features .* weight expects 16"):
        infer("linear", T((2, 15), F32), w)
    with pytest.raises(
        OpTypeError, match=r"linear: bias has 9 elements, weight has 8 out_features"
    ):
        infer("linear", T((2, 16), F32), w, T((9,), F32))
    with pytest.raises(OpTypeError, match=r"linear: weight must be 2-D"):
        infer("linear", T((2, 16), F32), T((16,), F32))
    with pytest.raises(OpTypeError, match=r"op 'linear' takes 2 to 3 arguments"):
        infer("linear", T((2, 16), F32))


@needs_torch
def test_matmul_and_linear_match_torch():
    a, b = rand(3, 1, 5, 7), rand(4, 7, 2)
    np.testing.assert_allclose(
        run("matmul", a, b), torch.matmul(th(a), th(b)).numpy(), rtol=1e-5, atol=1e-6
    )
    x, w, bias = rand(2, 3, 7), rand(5, 7), rand(5)
    np.testing.assert_allclose(
        run("linear", x, w, bias), F.linear(th(x), th(w), th(bias)).numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        run("linear", x, w), F.linear(th(x), th(w)).numpy(), rtol=1e-5, atol=1e-6
    )


# ----------------------------------------------------------------- conv inference


def test_conv2d_inference_keeps_symbolic_batch():
    x, w = T(("n", 3, 224, 224), F32), T((64, 3, 7, 7), F32)
    assert infer("conv2d", x, w, strides=2, padding=3) == T(("n", 64, 112, 112), F32)
    grouped = infer("conv2d", x, T((9, 1, 3, 3), F32), groups=3, padding=(1, 1))
    assert grouped == T(("n", 9, 224, 224), F32)
    # depthwise, dilated, asymmetric padding (top, left, bottom, right)
    t = infer("conv2d", T((1, 8, 10, 12), F32), T((8, 1, 3, 3), F32), groups=8, dilation=2,
              padding=(1, 0, 2, 3))  # fmt: skip
    assert t == T((1, 8, 10 + 3 - 5 + 1, 12 + 3 - 5 + 1), F32)
    nhwc = infer("conv2d", T(("n", 32, 32, 3), F32), T((3, 3, 3, 16), F32),
                 data_layout="NHWC", kernel_layout="HWIO", strides=(1, 2))  # fmt: skip
    assert nhwc == T(("n", 30, 15, 16), F32)


def test_conv_symbolic_spatial_dims():
    w = T((4, 3, 3, 3), F32)
    # "same" convolution keeps a symbolic size, anything else is a size expression
    assert infer("conv2d", T(("n", 3, "h", "w"), F32), w, padding=1) == T(("n", 4, "h", "w"), F32)
    valid = infer("conv2d", T(("n", 3, "h", 8), F32), w)
    assert str(valid) == 'Tensor((n, 4, h - 2, 6), "float32")'
    strided = infer("conv2d", T(("n", 3, "h", 8), F32), w, strides=2)
    assert str(strided.shape[2]) == "(h + 1) // 2 - 1"
    assert infer("conv1d", T((2, 3, "l"), F32), T((5, 3, 1), F32)) == T((2, 5, "l"), F32)
    assert infer("conv2d", T(None, F32), w) == T(None, F32)


def test_conv_inference_errors():
    x = T((1, 3, 8, 8), F32)
    with pytest.raises(
        OpTypeError,
        match=r"conv2d: data has 3 channels .* expects 4 input channels per group x 1 groups = 4",
    ):
        infer("conv2d", x, T((2, 4, 3, 3), F32))
    with pytest.raises(
        OpTypeError, match=r"conv2d: data has 3 channels, not divisible by groups=2"
    ):
        infer("conv2d", x, T((2, 1, 3, 3), F32), groups=2)
    with pytest.raises(
        OpTypeError, match=r"conv2d: weight has 5 output channels .* not divisible by groups=3"
    ):
        infer("conv2d", x, T((5, 1, 3, 3), F32), groups=3)
    with pytest.raises(
        OpTypeError, match=r"conv2d: data must have rank 4 \(layout NCHW\), got shape \(3, 8, 8\)"
    ):
        infer("conv2d", T((3, 8, 8), F32), T((2, 3, 3, 3), F32))
    with pytest.raises(
        OpTypeError, match=r"conv2d: the dilated kernel is larger than the padded input"
    ):
        infer("conv2d", x, T((2, 3, 5, 5), F32), dilation=2)
    with pytest.raises(OpTypeError, match=r"conv2d: attribute 'strides' must be >= 1"):
        infer("conv2d", x, T((2, 3, 3, 3), F32), strides=0)
    with pytest.raises(
        OpTypeError, match=r"conv2d: attribute 'padding' must have 1, 2 or 4 values"
    ):
        infer("conv2d", x, T((2, 3, 3, 3), F32), padding=(1, 1, 1))
    with pytest.raises(OpTypeError, match=r"conv2d: argument 1 \(weight\) has dtype float16"):
        infer("conv2d", x, T((2, 3, 3, 3), "float16"))
    with pytest.raises(
        OpAttrError, match=r"op 'conv2d' has no attribute 'stride'; did you mean strides\?"
    ):
        infer("conv2d", x, T((2, 3, 3, 3), F32), stride=2)
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'data_layout' of op 'conv2d' must be one of 'NCHW', 'NHWC', got 'NCWH'",
    ):
        infer("conv2d", x, T((2, 3, 3, 3), F32), data_layout="NCWH")
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'padding' of op 'conv2d' must be an int or a tuple of ints, got 'same'",
    ):
        infer("conv2d", x, T((2, 3, 3, 3), F32), padding="same")


def test_conv_transpose_inference():
    x, w = T(("n", 8, 16, 16), F32), T((8, 4, 4, 4), F32)
    assert infer("conv_transpose2d", x, w, strides=2, padding=1) == T(("n", 4, 32, 32), F32)
    assert infer("conv_transpose2d", x, T((8, 2, 3, 3), F32), groups=2, strides=2, padding=1,
                 output_padding=1) == T(("n", 4, 32, 32), F32)  # fmt: skip
    assert infer(
        "conv_transpose2d", T((1, 8, "h", "w"), F32), T((8, 3, 3, 3), F32), padding=1
    ) == T((1, 3, "h", "w"), F32)
    assert infer(
        "conv_transpose1d", T((1, 8, 5), F32), T((8, 3, 3), F32), strides=3, dilation=2
    ) == T((1, 3, 17), F32)
    with pytest.raises(
        OpTypeError,
        match=r"conv_transpose2d: output_padding \(2, 2\) must be smaller than the stride",
    ):
        infer("conv_transpose2d", x, w, strides=2, output_padding=2)
    with pytest.raises(
        OpTypeError, match=r"conv_transpose2d: data has 8 channels .* weight has 4 input channels"
    ):
        infer("conv_transpose2d", x, T((4, 4, 3, 3), F32))


# ----------------------------------------------------------------- conv numerics

CONV2D_CASES = [
    # x shape, w shape, attributes
    ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    ((1, 4, 10, 11), (6, 2, 3, 2), {"groups": 2, "strides": (2, 1), "padding": (1, 2)}),
    ((2, 6, 9, 9), (6, 1, 3, 3), {"groups": 6, "dilation": 2, "padding": 2}),
    ((1, 3, 12, 10), (5, 3, 5, 3), {"strides": 3, "dilation": (2, 1), "padding": 4}),
    ((1, 2, 5, 5), (3, 2, 1, 1), {"strides": 2}),
]


def _torch_conv2d(x, w, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return F.conv2d(
        th(x), th(w), stride=strides, padding=padding, dilation=dilation, groups=groups
    ).numpy()


@needs_torch
@pytest.mark.parametrize("xs, ws, attrs", CONV2D_CASES)
def test_conv2d_matches_torch(xs, ws, attrs):
    x, w = rand(*xs), rand(*ws)
    got = run("conv2d", x, w, **attrs)
    want = _torch_conv2d(x, w, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # float32 sums of <= 75 terms


@needs_torch
def test_conv2d_asymmetric_padding_matches_torch_pad_then_conv():
    x, w = rand(1, 2, 7, 6), rand(3, 2, 3, 3)
    got = run("conv2d", x, w, padding=(0, 1, 2, 3))  # top, left, bottom, right
    want = F.conv2d(F.pad(th(x), (1, 3, 0, 2)), th(w)).numpy()  # torch: (left, right, top, bottom)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_torch
def test_conv2d_nhwc_hwio_matches_torch():
    x, w = rand(2, 3, 8, 7), rand(4, 3, 3, 3)
    got = run("conv2d", x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), strides=2, padding=1,
              data_layout="NHWC", kernel_layout="HWIO")  # fmt: skip
    want = _torch_conv2d(x, w, strides=2, padding=1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_torch
def test_conv1d_matches_torch():
    x, w = rand(2, 4, 20), rand(6, 2, 4)
    got = run("conv1d", x, w, strides=2, padding=(3, 3), dilation=2, groups=2)
    want = F.conv1d(th(x), th(w), stride=2, padding=3, dilation=2, groups=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    got = run(
        "conv1d",
        x.transpose(0, 2, 1),
        w.transpose(2, 1, 0),
        data_layout="NWC",
        kernel_layout="WIO",
        groups=2,
    )
    want = F.conv1d(th(x), th(w), groups=2).numpy().transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_conv2d_integer_and_float64():
    x = RNG.integers(-3, 3, (1, 2, 5, 5)).astype(np.int32)
    w = RNG.integers(-3, 3, (2, 2, 3, 3)).astype(np.int32)
    got = run("conv2d", x, w)
    # direct definition of cross-correlation, summed with Python loops over the kernel
    want = np.zeros((1, 2, 3, 3), np.int64)
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", x[:, :, i : i + 3, j : j + 3], w[:, :, i, j])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    np.testing.assert_array_equal(run("conv2d", xd, wd), want.astype(np.float64))


CONV_T_CASES = [
    ((1, 4, 5, 5), (4, 3, 3, 3), {}),
    ((2, 4, 4, 5), (4, 2, 4, 4), {"strides": 2, "padding": 1}),
    (
        (1, 4, 3, 4),
        (4, 3, 3, 3),
        {"strides": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "groups": 2},
    ),
    (
        (1, 2, 4, 4),
        (2, 2, 3, 2),
        {"strides": 2, "dilation": (2, 3), "padding": 2, "output_padding": 1},
    ),
]


@needs_torch
@pytest.mark.parametrize("xs, ws, attrs", CONV_T_CASES)
def test_conv_transpose2d_matches_torch(xs, ws, attrs):
    x, w = rand(*xs), rand(*ws)
    got = run("conv_transpose2d", x, w, **attrs)
    want = F.conv_transpose2d(
        th(x), th(w), stride=attrs.get("strides", 1), padding=attrs.get("padding", 0),
        output_padding=attrs.get("output_padding", 0), groups=attrs.get("groups", 1),
        dilation=attrs.get("dilation", 1),
    ).numpy()  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_torch
def test_conv_transpose_asymmetric_padding_and_1d():
    x, w = rand(1, 2, 4, 4), rand(2, 3, 3, 3)
    full = F.conv_transpose2d(th(x), th(w), stride=2).numpy()
    got = run("conv_transpose2d", x, w, strides=2, padding=(1, 0, 0, 2))  # top, left, bottom, right
    np.testing.assert_allclose(got, full[:, :, 1:, : full.shape[3] - 2], rtol=1e-4, atol=1e-5)
    x1, w1 = rand(2, 4, 7), rand(4, 3, 3)
    got = run("conv_transpose1d", x1, w1, strides=2, padding=1, output_padding=1, groups=2)
    want = F.conv_transpose1d(
        th(x1), th(w1), stride=2, padding=1, output_padding=1, groups=2
    ).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_conv_transpose_is_the_adjoint_of_conv():
    # <conv(x), y> == <x, conv_transpose(y)> for the same weight: an identity independent
    # of any library
    x, w = RNG.standard_normal((1, 3, 9, 8)), RNG.standard_normal((4, 3, 3, 2))
    attrs = {"strides": 2, "padding": (1, 0, 1, 1), "dilation": (1, 2)}
    y = run("conv2d", x, w, **attrs)
    g = RNG.standard_normal(y.shape)
    back = run("conv_transpose2d", g, w, **attrs)
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(y * g), np.sum(x * back), rtol=1e-10)


def test_float16_conv_computes_in_float32():
    x, w = rand(1, 8, 6, 6, dtype=np.float16), rand(4, 8, 3, 3, dtype=np.float16)
    got = run("conv2d", x, w)
    want = run("conv2d", x.astype(np.float64), w.astype(np.float64))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)
