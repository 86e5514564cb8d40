"""Models whose intermediate sizes are size expressions (``batch * 4``, ``n + m``,
``(h + 1) // 2``), built once and run at several sizes from the one executable, against
numpy (float32, rtol 1e-5 / atol 1e-5: the same arithmetic in another order)."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.runtime import VirtualMachine, VMInputError

ATTENTION = '''
@module
class Attention:
    @function
    def main(x: Tensor((batch, seq, 128), "float32"), w: Tensor((128, 128), "float32"),
             extra: Tensor((batch, more, 128), "float32")
             ) -> Tensor((batch, seq + max(0, more - 1), 128), "float32"):
        with dataflow():
            q = matmul(x, w)
            h = reshape(q, shape=("batch", "seq", 4, 32))
            t = permute_dims(h, axes=(0, 2, 1, 3))
            m = reshape(t, shape=("batch * 4", "seq", 32))
            mt = permute_dims(m, axes=(0, 2, 1))
            s = matmul(m, mt)
            p = softmax(s, axis=-1)
            o = matmul(p, m)
            b = reshape(o, shape=("batch", 4, -1, 32))
            bt = permute_dims(b, axes=(0, 2, 1, 3))
            back = reshape(bt, shape=("batch", "seq", 128))
            tail = strided_slice(extra, axes=(1,), begin=(1,), end=(9223372036854775807,))
            out = concat((back, tail), axis=1)
            output(out)
        return out
'''


def _attention_reference(x: np.ndarray, w: np.ndarray, extra: np.ndarray) -> np.ndarray:
    batch, seq, _ = x.shape
    q = (x @ w).reshape(batch, seq, 4, 32).transpose(0, 2, 1, 3).reshape(batch * 4, seq, 32)
    s = q @ q.transpose(0, 2, 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ q).reshape(batch, 4, seq, 32).transpose(0, 2, 1, 3).reshape(batch, seq, 128)
    return np.concatenate([o, extra[:, 1:]], axis=1)


def test_the_text_types_the_intermediate_sizes_as_expressions() -> None:
    mod = plait.transform.Normalize()(plait.parse(ATTENTION))
    types = {b.var.name_hint: str(b.var.ty) for b in mod["main"].body.blocks[0].bindings}
    assert types["m"] == 'Tensor((batch * 4, seq, 32), "float32")'
    assert types["b"] == 'Tensor((batch, 4, seq, 32), "float32")'   # the -1 is seq again
    assert types["tail"] == 'Tensor((batch, max(0, more - 1), 128), "float32")'
    assert types["out"] == 'Tensor((batch, seq + max(0, more - 1), 128), "float32")'


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_attention_with_expression_sizes_runs_at_several_sizes(target: str) -> None:
    vm = VirtualMachine(plait.build(plait.parse(ATTENTION), target))
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((128, 128)) / 12).astype(np.float32)
    for batch, seq, more in [(1, 3, 2), (2, 7, 5), (3, 16, 1)]:
        x = rng.standard_normal((batch, seq, 128)).astype(np.float32)
        extra = rng.standard_normal((batch, more, 128)).astype(np.float32)
        got = vm["main"](x, w, extra)
        assert got.shape == (batch, seq + more - 1, 128)
        np.testing.assert_allclose(got, _attention_reference(x, w, extra), rtol=1e-5, atol=1e-5)


def test_a_parameter_sized_by_an_expression_is_checked_against_it() -> None:
    text = '''
@module
class Pair:
    @function
    def main(x: Tensor((n, 4), "float32"),
             y: Tensor((n * 2, 4), "float32")) -> Tensor((n * 3, 4), "float32"):
        with dataflow():
            out = concat((x, y), axis=0)
            output(out)
        return out
'''
    vm = VirtualMachine(plait.build(plait.parse(text), "numpy"))
    x = np.ones((3, 4), np.float32)
    y = np.full((6, 4), 2, np.float32)
    np.testing.assert_array_equal(vm["main"](x, y), np.concatenate([x, y]))
    with pytest.raises(VMInputError, match=r"parameter 'y': dimension 0 is 5 but its size "
                                           r"n \* 2 is 6 \(n = 3"):
        vm["main"](x, np.ones((5, 4), np.float32))


WINDOW = '''
@module
class Window:
    @function
    def main(x: Tensor((n, 16), "float32"),
             y: Tensor((k, 2), "float32")) -> Tensor(None, "float32"):
        with dataflow():
            w = strided_slice(x, axes=(1,), begin=("k",), end=("k + 4",))
            out = multiply(w, w)
            output(out)
        return out
'''


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_a_slice_with_symbolic_bounds_runs_at_several_sizes(target: str) -> None:
    mod = plait.parse(WINDOW)
    ty = plait.transform.Normalize()(mod)["main"].body.blocks[0].bindings[0].var.ty
    assert str(ty) == 'Tensor((n, max(0, min(16, k + 4) - min(16, k))), "float32")'
    vm = VirtualMachine(plait.build(mod, target))
    rng = np.random.default_rng(2)
    for n, k in [(1, 0), (3, 5), (2, 14), (2, 20)]:
        x = rng.standard_normal((n, 16)).astype(np.float32)
        got = vm["main"](x, np.zeros((k, 2), np.float32))
        np.testing.assert_allclose(got, x[:, k:k + 4] ** 2, rtol=1e-6)


def test_a_size_expression_over_names_no_parameter_binds_is_refused_at_build() -> None:
    text = '''
@module
class Odd:
    @function
    def main(x: Tensor((n * 4 + 1, 4), "float32")) -> Tensor((n * 4 + 1, 4), "float32"):
        with dataflow():
            out = relu(x)
            output(out)
        return out
'''
    with pytest.raises(plait.codegen.vm_codegen.VMCodegenError,
                       match=r"parameter 'x': dimension 0 is the size n \* 4 \+ 1, but no "
                             r"parameter has n as a plain size"):
        plait.build(plait.parse(text), "numpy")


CNN = '''
@module
class Cnn:
    @function
    def main(x: Tensor((n, 3, h, w), "float32"),
             k: Tensor((8, 3, 3, 3), "float32")) -> Tensor(None, "float32"):
        with dataflow():
            c = conv2d(x, k, strides=2, padding=1)
            r = relu(c)
            p = max_pool2d(r, pool_size=3, strides=2)
            output(p)
        return p
'''


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_strided_convolution_and_pooling_run_at_several_image_sizes(target: str) -> None:
    torch = pytest.importorskip("torch")
    mod = plait.parse(CNN)
    out_ty = plait.transform.Normalize()(mod)["main"].body.blocks[0].bindings[-1].var.ty
    assert str(out_ty) == 'Tensor((n, 8, (h + 3) // 4 - 1, (w + 3) // 4 - 1), "float32")'
    vm = VirtualMachine(plait.build(mod, target))
    rng = np.random.default_rng(1)
    k = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    for n, h, w in [(1, 9, 9), (2, 16, 13), (1, 31, 8)]:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        want = torch.nn.functional.max_pool2d(
            torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(k),
                                                  stride=2, padding=1)), 3, 2).numpy()
        got = vm["main"](x, k)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_reference_interpreter_runs_expression_sizes() -> None:
    from plait.interp import run

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 128)).astype(np.float32)
    w = (rng.standard_normal((128, 128)) / 12).astype(np.float32)
    extra = rng.standard_normal((2, 3, 128)).astype(np.float32)
    got = run(plait.transform.Normalize()(plait.parse(ATTENTION)), x, w, extra)
    np.testing.assert_allclose(got, _attention_reference(x, w, extra), rtol=1e-5, atol=1e-5)


def test_a_region_with_expression_sizes_offloads_to_onnxruntime() -> None:
    pytest.importorskip("onnxruntime")
    target = plait.Target("numpy", offload=("onnxruntime",))
    vm = VirtualMachine(plait.build(plait.parse(ATTENTION), target))
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((128, 128)) / 12).astype(np.float32)
    for batch, seq, more in [(1, 4, 2), (2, 6, 3)]:
        x = rng.standard_normal((batch, seq, 128)).astype(np.float32)
        extra = rng.standard_normal((batch, more, 128)).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x, w, extra), _attention_reference(x, w, extra),
                                   rtol=1e-4, atol=1e-5)


def test_an_executable_with_expression_sizes_saves_and_loads(tmp_path) -> None:
    from plait.runtime import Executable

    path = tmp_path / "attention.plx"
    plait.build(plait.parse(ATTENTION), "numpy").save(path)
    vm = VirtualMachine(Executable.load(path))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    w = (rng.standard_normal((128, 128)) / 12).astype(np.float32)
    extra = rng.standard_normal((2, 4, 128)).astype(np.float32)
    np.testing.assert_allclose(vm["main"](x, w, extra), _attention_reference(x, w, extra),
                               rtol=1e-5, atol=1e-5)
