"""The ``c`` target's native families take run-time sizes (issue 29, item 4): a product,
convolution, depthwise convolution or pooling whose batch (or sequence) is symbolic is
dispatched to plait's own kernels -- not to numpy's BLAS -- and the one executable runs
at several sizes, each checked against numpy (float64 references; rtol 1e-4, atol
1e-4: float32 sums of up to 144 products)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import build_graph, conv2d_reference, max_pool_reference  # tests/target
from graph_helpers import const as _c
from graph_helpers import emit as _call

import plait
from plait.runtime import VirtualMachine

RNG = np.random.default_rng(29)
RTOL = ATOL = 1e-4


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _build(mod: plait.IRModule) -> tuple[VirtualMachine, str]:
    exe = plait.build(mod, "c")
    return VirtualMachine(exe), exe.as_text()


def _calls(text: str) -> set[str]:
    import re

    return set(re.findall(r"call ([\w.]+)\(", text))


def test_conv_with_bias_and_relu_takes_the_batch_at_run_time() -> None:
    w, b = _rand(8, 3, 3, 3), _rand(8)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), strides=(1, 1), padding=(1, 1, 1, 1),
                  dilation=(1, 1), groups=1)
        y = _call(bb, "add", y, _c(b.reshape(8, 1, 1)))
        return _call(bb, "relu", y)

    vm, text = _build(build_graph({"x": ("n", 3, 9, 9)}, body))
    calls = _calls(text)
    assert any(c.startswith("plait_conv2d_") for c in calls), calls
    assert not any(c.startswith(("blas.", "numpy.")) for c in calls), calls
    for n in (1, 2, 5):
        x = _rand(n, 3, 9, 9)
        ref = np.maximum(conv2d_reference(x, w, padding=(1, 1, 1, 1)) + b.reshape(8, 1, 1), 0)
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)
    assert vm["main"](np.zeros((0, 3, 9, 9), np.float32)).shape == (0, 8, 9, 9)


@pytest.mark.parametrize("sizes", [[(1, 1), (2, 5), (3, 17)]])
def test_linear_over_batch_and_sequence_is_one_native_call(sizes: list) -> None:
    w, b = _rand(24, 16), _rand(24)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "linear", p[0], _c(w))
        y = _call(bb, "add", y, _c(b))
        return _call(bb, "relu", y)

    vm, text = _build(build_graph({"x": ("batch", "seq", 16)}, body))
    assert any(c.startswith("plait_gemm_") for c in _calls(text))
    assert not any(c.startswith(("blas.", "numpy.")) for c in _calls(text))
    for bsz, seq in sizes:
        x = _rand(bsz, seq, 16)
        ref = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)


def test_batched_product_of_two_activations_with_symbolic_sizes() -> None:
    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "matmul", p[0], p[1])

    mod = build_graph({"q": ("b", 4, "s", 8), "k": ("b", 4, 8, "s")}, body)
    vm, text = _build(mod)
    assert any(c.startswith("plait_gemm_") for c in _calls(text))
    for bsz, seq in ((1, 1), (2, 9), (3, 20)):
        q, k = _rand(bsz, 4, seq, 8), _rand(bsz, 4, 8, seq)
        ref = np.matmul(q.astype(np.float64), k.astype(np.float64))
        np.testing.assert_allclose(vm["main"](q, k), ref, rtol=RTOL, atol=ATOL)


def test_a_product_reading_a_flattened_view_binds_the_expression_size() -> None:
    """``reshape((b, s, 16) -> (b * s, 16))`` then ``linear``: the product reads the
    unflattened input in place, its rows are ``b * s`` written from the names, and the
    result's first dimension (the expression) is a size the call binds."""
    w = _rand(12, 16)
    from plait.ir.symbolic import mul

    def body(bb, p):  # type: ignore[no-untyped-def]
        flat = _call(bb, "reshape", p[0], shape=(mul("b", "s"), 16))
        return _call(bb, "linear", flat, _c(w))

    vm, text = _build(build_graph({"x": ("b", "s", 16)}, body))
    assert any(c.startswith("plait_gemm_") for c in _calls(text))
    for bsz, seq in ((1, 3), (4, 5)):
        x = _rand(bsz, seq, 16)
        ref = x.reshape(-1, 16).astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)


def test_depthwise_and_pooling_take_the_batch_at_run_time() -> None:
    w = _rand(6, 1, 3, 3)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), strides=(1, 1), padding=(1, 1, 1, 1),
                  dilation=(1, 1), groups=6)
        y = _call(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0),
                  dilation=(1, 1))
        return _call(bb, "global_avg_pool2d", y)

    vm, text = _build(build_graph({"x": ("n", 6, 12, 12)}, body))
    calls = _calls(text)
    for family in ("plait_dwconv2d_", "plait_max_pool2d_", "plait_global_avg_pool2d_"):
        assert any(c.startswith(family) for c in calls), (family, calls)
    for n in (1, 3):
        x = _rand(n, 6, 12, 12)
        conv = np.concatenate([conv2d_reference(x[:, i:i + 1], w[i:i + 1], padding=(1, 1, 1, 1))
                               for i in range(6)], axis=1).astype(np.float32)
        pooled = max_pool_reference(conv, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0))
        ref = pooled.astype(np.float64).mean(axis=(2, 3), keepdims=True)
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)


def test_a_slice_with_a_symbolic_end_is_a_generated_kernel() -> None:
    """``x[1:, 2:seq:2]``-like slices: the result's type holds each axis's length, so a
    symbolic end needs no library call; nor does a start from the end of a symbolic axis
    (``x[-2:]``, the last position's logits of a language model: ``max(n - 2, 0)``)."""
    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "strided_slice", p[0], axes=(0, 1), begin=(1, 2), end=("n", 15),
                  strides=(1, 2))
        z = _call(bb, "strided_slice", p[0], axes=(0,), begin=(-2,), end=("n",))
        return bb.emit(make_tuple(y, z))

    from plait.ir import Tuple

    def make_tuple(*fields):  # type: ignore[no-untyped-def]
        return Tuple(fields)

    vm, text = _build(build_graph({"x": ("n", 16)}, body))
    calls = _calls(text)
    assert not any(c.startswith("numpy.") for c in calls), calls
    for n in (0, 1, 2, 6):
        x = _rand(n, 16)
        y, z = vm["main"](x)
        np.testing.assert_array_equal(y, x[1:n, 2:15:2])
        np.testing.assert_array_equal(z, x[-2:n])


def test_attention_over_a_symbolic_batch_and_sequence_is_one_fused_call() -> None:
    """BERT's attention as exported with dynamic axes: the heads are views of one
    (b, s, 3 * 16) projection, the padding mask (b, 1, 1, s) broadcasts; the fused call
    reads them in place with strides that are size expressions."""
    w = _rand(16, 48)

    def body(bb, p):  # type: ignore[no-untyped-def]
        qkv = _call(bb, "matmul", p[0], _c(w))                       # (b, s, 48)
        heads = _call(bb, "reshape", qkv, shape=("b", "s", 3, 2, 8))
        t = _call(bb, "permute_dims", heads, axes=(2, 0, 3, 1, 4))    # (3, b, 2, s, 8)
        q, k, v = (_call(bb, "squeeze", _call(bb, "strided_slice", t, axes=(0,), begin=(i,),
                                               end=(i + 1,)), axis=(0,)) for i in range(3))
        kt = _call(bb, "permute_dims", k, axes=(0, 1, 3, 2))
        s = _call(bb, "multiply", _call(bb, "matmul", q, kt), _c(np.float32(0.125)))
        s = _call(bb, "add", s, p[1])
        o = _call(bb, "matmul", _call(bb, "softmax", s, axis=-1), v)
        return _call(bb, "permute_dims", o, axes=(0, 2, 1, 3))        # (b, s, 2, 8)

    vm, text = _build(build_graph({"x": ("b", "s", 16), "mask": ("b", 1, 1, "s")}, body))
    assert any(c.startswith("plait_attention_") for c in _calls(text)), _calls(text)
    assert "softmax" not in _calls(text)
    for bsz, seq in ((1, 1), (2, 9), (3, 20)):
        x = _rand(bsz, seq, 16)
        mask = np.where(RNG.random((bsz, 1, 1, seq)) < 0.2, -1e4, 0).astype(np.float32)
        qkv = (x.astype(np.float64) @ w).reshape(bsz, seq, 3, 2, 8).transpose(2, 0, 3, 1, 4)
        scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) * 0.125 + mask
        e = np.exp(scores - scores.max(-1, keepdims=True))
        ref = ((e / e.sum(-1, keepdims=True)) @ qkv[2]).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(vm["main"](x, mask), ref, rtol=RTOL, atol=ATOL)


def test_a_cnn_of_symbolic_image_size_runs_native_at_several_sizes() -> None:
    """A strided convolution, max pooling, a depthwise convolution and the global
    average over images whose height and width are symbolic (the output sizes are
    floor-division expressions the calls compute at run time)."""
    w, dw = _rand(8, 3, 3, 3), _rand(8, 1, 3, 3)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), strides=(2, 2), padding=(1, 1, 1, 1),
                  dilation=(1, 1), groups=1)
        y = _call(bb, "relu", y)
        y = _call(bb, "max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1),
                  dilation=(1, 1))
        y = _call(bb, "conv2d", y, _c(dw), strides=(1, 1), padding=(1, 1, 1, 1),
                  dilation=(1, 1), groups=8)
        return _call(bb, "global_avg_pool2d", y)

    vm, text = _build(build_graph({"x": ("n", 3, "h", "w")}, body))
    calls = _calls(text)
    for family in ("plait_conv2d_", "plait_max_pool2d_", "plait_dwconv2d_",
                   "plait_global_avg_pool2d_"):
        assert any(c.startswith(family) for c in calls), (family, calls)
    assert not any(c.startswith(("blas.", "numpy.")) for c in calls), calls
    for n, h, wd in ((1, 9, 11), (2, 16, 16), (1, 5, 4)):
        x = _rand(n, 3, h, wd)
        y = np.maximum(conv2d_reference(x, w, strides=(2, 2), padding=(1, 1, 1, 1)), 0)
        y = max_pool_reference(y.astype(np.float32), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1))
        y = np.concatenate([conv2d_reference(y[:, i:i + 1], dw[i:i + 1], padding=(1, 1, 1, 1))
                            for i in range(8)], axis=1)
        ref = y.mean(axis=(2, 3), keepdims=True)
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)


def test_a_residual_before_a_view_keeps_its_own_shape() -> None:
    """``reshape(linear(x) + r)``: the product writes the view, and reads the residual
    with the residual's shape (b, s, 16), not the view's (b, s, 4, 4)."""
    w = _rand(16, 16)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "add", _call(bb, "linear", p[0], _c(w)), p[1])
        return _call(bb, "reshape", y, shape=("b", "s", 4, 4))

    vm, text = _build(build_graph({"x": ("b", "s", 16), "r": ("b", "s", 16)}, body))
    assert any(c.startswith("plait_gemm_") for c in _calls(text))
    for bsz, seq in ((1, 1), (2, 7)):
        x, r = _rand(bsz, seq, 16), _rand(bsz, seq, 16)
        ref = (x.astype(np.float64) @ w.T.astype(np.float64) + r).reshape(bsz, seq, 4, 4)
        np.testing.assert_allclose(vm["main"](x, r), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_cumsum_over_a_symbolic_axis_is_a_generated_kernel(exclusive: bool,
                                                           reverse: bool) -> None:
    """The position ids of a model of dynamic sequence length (``mask.cumsum(-1)``)."""
    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "cumsum", p[0], axis=1, exclusive=exclusive, reverse=reverse)

    vm, text = _build(build_graph({"x": (2, "s")}, body))
    assert not any(c.startswith("numpy.") for c in _calls(text)), _calls(text)
    for seq in (1, 5, 33):
        x = _rand(2, seq)
        xs = x[:, ::-1] if reverse else x
        ref = np.cumsum(xs.astype(np.float64), axis=1)
        if exclusive:
            ref = np.concatenate([np.zeros((2, 1)), ref[:, :-1]], axis=1)
        ref = ref[:, ::-1] if reverse else ref
        np.testing.assert_allclose(vm["main"](x), ref, rtol=RTOL, atol=ATOL)
