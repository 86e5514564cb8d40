"""The BLAS-backed library functions of the ``c`` target (plait/runtime/blas_ops.py)
compute straight into their outputs and agree with the numpy references — including
grouped, strided, dilated, padded and channels-last convolutions."""

from __future__ import annotations

import numpy as np
import pytest

from plait.runtime import get_func, numpy_ops

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("xs, ys", [((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                    ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_writes_into_the_output(xs: tuple, ys: tuple) -> None:
    x, y = f32(*xs), f32(*ys)
    want = np.matmul(x, y)
    out = np.full(want.shape, np.nan, np.float32)
    assert get_func("blas.matmul")(x, y, out) is None
    np.testing.assert_allclose(out, want, rtol=1e-6)
    with pytest.raises(ValueError, match=r"blas.matmul: output has shape"):
        get_func("blas.matmul")(x, y, np.empty((1,) + want.shape, np.float32))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_with_and_without_bias(bias: bool) -> None:
    x, w, b = f32(2, 3, 4), f32(6, 4), f32(6)
    args = (x, w, b) if bias else (x, w)
    want = numpy_ops.linear(*args)
    out = np.empty(want.shape, np.float32)
    get_func("blas.linear")(*args, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(get_func("blas.linear@alloc")(*args), want, rtol=1e-6)


CONVS = [
    ((2, 3, 7, 6), (4, 3, 3, 2), {"strides": 2, "padding": 1}),
    ((1, 4, 9, 9), (6, 2, 3, 3), {"groups": 2, "dilation": 2, "padding": (1, 0, 2, 1)}),
    ((2, 8, 5, 5), (8, 1, 3, 3), {"groups": 8, "padding": 1}),
    ((2, 5, 4, 4), (3, 5, 1, 1), {}),
    ((1, 6, 6, 3), (3, 3, 3, 4), {"data_layout": "NHWC", "kernel_layout": "HWIO",
                                  "padding": 1}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONVS)
def test_conv2d_by_im2col_matches_the_reference(xs: tuple, ws: tuple, attrs: dict) -> None:
    x, w = f32(*xs), f32(*ws)
    want = numpy_ops.conv2d(x, w, **attrs)
    out = np.full(want.shape, np.nan, np.float32)
    get_func("blas.conv2d")(x, w, out, **attrs)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"blas.conv2d: output has shape"):
        get_func("blas.conv2d")(x, w, np.empty((9,), np.float32), **attrs)
