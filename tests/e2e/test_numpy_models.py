"""End-to-end: models written in the text format, built for the numpy target through
the default pipeline, run on the VM and matched against an independent numpy
computation written out in this file (float32, rtol 1e-5 unless stated)."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.runtime import Executable, VirtualMachine
from plait.transform import PassContext, WellFormedCheck

RNG = np.random.default_rng(42)
RTOL, ATOL = 1e-5, 1e-5


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run(text: str, *args: np.ndarray, target: str = "numpy", checked: bool = True):
    mod = plait.parse(text)
    if checked:
        with PassContext(instruments=[WellFormedCheck()]):
            exe = plait.build(mod, target)
    else:
        exe = plait.build(mod, target)
    return VirtualMachine(exe)["main"](*args), exe


MLP = """
@module
class MLP:
    @function
    def main(x: Tensor((n, 64), "float32"), w1: Tensor((64, 32), "float32"),
             b1: Tensor((32,), "float32"), w2: Tensor((10, 32), "float32"),
             b2: Tensor((10,), "float32")) -> Tensor((n, 10), "float32"):
        with dataflow():
            h = relu(add(matmul(x, w1), b1))
            logits = linear(h, w2, b2)
            out = softmax(logits, axis=-1)
            output(out)
        return out
"""


def test_mlp_matches_numpy_for_several_batch_sizes() -> None:
    w1, b1, w2, b2 = randn(64, 32, scale=0.2), randn(32), randn(10, 32, scale=0.2), randn(10)
    mod = plait.parse(MLP)
    with PassContext(instruments=[WellFormedCheck()]):
        exe = plait.build(mod, "numpy")
    vm = VirtualMachine(exe)
    for n in (1, 5):
        x = randn(n, 64)
        got = vm["main"](x, w1, b1, w2, b2)
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2.T + b2
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
        assert got.shape == (n, 10)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


CONV_BLOCK = """
@module
class ConvBlock:
    @function
    def main(x: Tensor((2, 3, 10, 10), "float32"), w: Tensor((8, 3, 3, 3), "float32"),
             gamma: Tensor((8,), "float32"), beta: Tensor((8,), "float32"),
             mean: Tensor((8,), "float32"), var: Tensor((8,), "float32")
             ) -> Tensor((2, 8, 5, 5), "float32"):
        with dataflow():
            c = conv2d(x, w, padding=(1, 1, 1, 1))
            bn = batch_norm(c, gamma, beta, mean, var, epsilon=1e-5)
            r = relu(bn)
            p = max_pool2d(r, pool_size=(2, 2), strides=(2, 2))
            output(p)
        return p
"""


def naive_conv2d_same(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3 convolution with padding 1, stride 1, by explicit shifted sums."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    xp = np.zeros((n, c, h + 2, wd + 2), np.float64)
    xp[:, :, 1:-1, 1:-1] = x
    out = np.zeros((n, o, h, wd), np.float64)
    for dy in range(3):
        for dx in range(3):
            patch = xp[:, :, dy : dy + h, dx : dx + wd]  # n c h w
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx].astype(np.float64))
    return out


def test_conv_batchnorm_relu_pool_matches_numpy() -> None:
    x, w = randn(2, 3, 10, 10), randn(8, 3, 3, 3, scale=0.3)
    gamma, beta, mean = randn(8), randn(8), randn(8)
    var = np.abs(randn(8)) + 0.5
    got, exe = run(CONV_BLOCK, x, w, gamma, beta, mean, var)
    c = naive_conv2d_same(x, w)
    bn = (c - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * gamma[
        :, None, None
    ] + beta[:, None, None]
    r = np.maximum(bn, 0)
    want = r.reshape(2, 8, 5, 2, 5, 2).max(axis=(3, 5))
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-4, atol=1e-5)
    # the memory plan shares storage between intermediates that do not overlap
    assert 0 < exe.attrs["planned_peak_bytes"] < exe.attrs["naive_peak_bytes"]


ATTENTION = """
@module
class Attention:
    @function
    def main(x: Tensor((1, 16, 32), "float32"), wq: Tensor((32, 32), "float32"),
             wk: Tensor((32, 32), "float32"), wv: Tensor((32, 32), "float32"),
             wo: Tensor((32, 32), "float32"), g: Tensor((32,), "float32"),
             b: Tensor((32,), "float32")) -> Tensor((1, 16, 32), "float32"):
        with dataflow():
            q = permute_dims(reshape(matmul(x, wq), shape=(1, 16, 4, 8)), axes=(0, 2, 1, 3))
            k = permute_dims(reshape(matmul(x, wk), shape=(1, 16, 4, 8)), axes=(0, 2, 3, 1))
            v = permute_dims(reshape(matmul(x, wv), shape=(1, 16, 4, 8)), axes=(0, 2, 1, 3))
            scores = multiply(matmul(q, k), const(0.35355339, "float32"))
            attn = softmax(scores, axis=-1)
            ctx = reshape(permute_dims(matmul(attn, v), axes=(0, 2, 1, 3)), shape=(1, 16, 32))
            y = add(x, matmul(ctx, wo))
            out = layer_norm(y, g, b, axes=(-1,), epsilon=1e-5)
            output(out)
        return out
"""


def test_self_attention_block_matches_numpy() -> None:
    x = randn(1, 16, 32)
    wq, wk, wv, wo = (randn(32, 32, scale=0.2) for _ in range(4))
    g, b = randn(32), randn(32)
    got, _ = run(ATTENTION, x, wq, wk, wv, wo, g, b)
    q = (x @ wq).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    k = (x @ wk).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    v = (x @ wv).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    s = q @ k.transpose(0, 1, 3, 2) * np.float32(0.35355339)
    e = np.exp(s - s.max(-1, keepdims=True))
    a = e / e.sum(-1, keepdims=True)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(1, 16, 32)
    y = x + ctx @ wo
    mu = y.mean(-1, keepdims=True)
    sd = np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = (y - mu) / sd * g + b
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)


def test_executable_save_load_runs_the_same(tmp_path) -> None:
    w1, b1, w2, b2 = randn(64, 32), randn(32), randn(10, 32), randn(10)
    exe = plait.build(plait.parse(MLP), "numpy")
    path = tmp_path / "mlp.plx"
    exe.save(path)
    x = randn(3, 64)
    a = VirtualMachine(exe)["main"](x, w1, b1, w2, b2)
    b = VirtualMachine(Executable.load(path))["main"](x, w1, b1, w2, b2)
    np.testing.assert_array_equal(a, b)


def test_default_pipeline_prints_edits_and_builds() -> None:
    pipe = plait.default_pipeline("numpy")
    text = str(pipe)
    for name in ("Normalize", "LambdaLift", "FoldConstant", "LegalizeOps", "ExplicitMemory"):
        assert name in text
    edited = pipe.remove("FoldConstant")
    assert "FoldConstant" not in str(edited)
    mod = plait.parse(MLP)
    exe = plait.build(mod, "numpy", pipeline=edited)
    x = randn(2, 64)
    w1, b1, w2, b2 = randn(64, 32), randn(32), randn(10, 32), randn(10)
    np.testing.assert_allclose(
        VirtualMachine(exe)["main"](x, w1, b1, w2, b2),
        VirtualMachine(plait.build(mod, "numpy"))["main"](x, w1, b1, w2, b2),
        rtol=1e-6,
    )


def test_constant_subgraphs_fold_and_duplicates_are_shared() -> None:
    text = """
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            c = add(const([1.0, 2.0, 3.0, 4.0], "float32"), const([1.0, 1.0, 1.0, 1.0], "float32"))
            a = multiply(x, c)
            b = multiply(x, c)
            out = add(a, b)
            output(out)
        return out
"""
    exe = plait.build(plait.parse(text), "numpy")
    calls = [
        i for i in exe.functions["main"].instructions if getattr(i, "func", "").startswith("numpy.")
    ]
    # the constant add folded away; the two identical multiplies became one
    assert [c.func for c in calls] == ["numpy.multiply", "numpy.add"]
    x = randn(4)
    c = np.array([2, 3, 4, 5], np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), 2 * x * c, rtol=RTOL)


def test_input_checking_names_the_parameter() -> None:
    exe = plait.build(plait.parse(MLP), "numpy")
    vm = VirtualMachine(exe)
    w1, b1, w2, b2 = randn(64, 32), randn(32), randn(10, 32), randn(10)
    with pytest.raises(ValueError, match="w1"):
        vm["main"](randn(2, 64), randn(63, 32), b1, w2, b2)
    with pytest.raises(ValueError, match="x"):
        vm["main"](randn(2, 64).astype(np.float64), w1, b1, w2, b2)


def test_op_without_legalization_is_an_error_naming_op_and_target() -> None:
    from plait.target import register_target_kind

    register_target_kind("bare_test_target", override=True)
    with pytest.raises(Exception, match=r"relu.*bare_test_target.*register_legalize"):
        plait.build(
            plait.parse(
                """
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            y = relu(x)
            output(y)
        return y
"""
            ),
            "bare_test_target",
        )


def test_ops_without_inputs_run_when_not_folded() -> None:
    text = """
@module
class M:
    @function
    def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
        with dataflow():
            f = full(shape=(2, 3), fill_value=2.0, dtype="float32")
            y = add(x, f)
            output(y)
        return y
"""
    pipe = plait.default_pipeline("numpy").remove("FoldConstant")
    exe = plait.build(plait.parse(text), "numpy", pipeline=pipe)
    assert any(getattr(i, "func", "") == "numpy.full" for i in exe.functions["main"].instructions)
    x = randn(2, 3)
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), x + np.float32(2.0))


def test_symbolic_sizes_in_attributes_and_from_match_cast_are_bound_at_run_time() -> None:
    text = """
@module
class M:
    @function
    def main(x: Tensor((n, 8), "float32")) -> Tensor((n, 2, 4), "float32"):
        with dataflow():
            r = reshape(x, shape=("n", 2, 4))
            f = flatten(r, start_dim=0, end_dim=1)
            m = match_cast(f, Tensor((m2, 4), "float32"))
            e = exp(m)
            back = reshape(e, shape=("n", 2, 4))
            output(back)
        return back
"""
    for target in ("numpy", "c"):
        vm = VirtualMachine(plait.build(plait.parse(text), target))
        for n in (1, 3):
            x = randn(n, 8)
            np.testing.assert_allclose(
                vm["main"](x), np.exp(x).reshape(n, 2, 4), rtol=1e-6, err_msg=target
            )
