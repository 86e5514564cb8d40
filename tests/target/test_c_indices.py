"""Out-of-range indices raise on every target: ``take``/``gather_elements`` kernels of
the ``c`` target check each index at run time (``checked_index``, status 2 back through
the kernel, its parallel loops and the single entry point), where they clamped before
(a BERT token id past the vocabulary returned the last row); numpy and onnxruntime
raise for the same inputs.  ``Target("c", out_of_range_indices="clamp")`` opts into
clamping."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.interp import KernelRunError, run_kernel
from plait.runtime import VirtualMachine
from plait.runtime.vm import VMError

TAKE = '''
@module
class M:
    @function
    def main(x: Tensor(({rows}, {cols}), "float32"),
             i: Tensor(({n},), "{itype}")) -> Tensor(({n}, {cols}), "float32"):
        y = take(x, i, axis=0)
        z = relu(y)
        return z
'''

GATHER_ELEMENTS = '''
@module
class M:
    @function
    def main(x: Tensor((4, 5), "float32"), i: Tensor((3, 5), "int64")) -> Tensor((3, 5), "float32"):
        y = gather_elements(x, i, axis=0)
        return y
'''

RNG = np.random.default_rng(7)


def take_vm(target: object, rows: int = 10, cols: int = 4, n: int = 3, itype: str = "int64",
            single_entry: bool = True) -> VirtualMachine:
    text = TAKE.format(rows=rows, cols=cols, n=n, itype=itype)
    return VirtualMachine(plait.build(plait.parse(text), target=target),
                          single_entry=single_entry)


@pytest.mark.parametrize("single_entry", [True, False])
@pytest.mark.parametrize("itype", ["int64", "int32"])
def test_take_in_range_matches_numpy_and_out_of_range_raises(single_entry: bool, itype: str):
    x = RNG.standard_normal((10, 4)).astype(np.float32)
    vm = take_vm("c", itype=itype, single_entry=single_entry)
    ok = np.array([0, -1, 9], itype)
    np.testing.assert_array_equal(vm["main"](x, ok), np.maximum(np.take(x, ok, axis=0), 0))
    for bad in ([0, 10, 3], [-11, 0, 0], [0, 0, 2**31 - 1]):
        bad_i = np.array(bad, itype)
        with pytest.raises(IndexError):
            np.take(x, bad_i, axis=0)   # the reference refuses it too
        with pytest.raises(VMError, match="status 2: an index is out of range"):
            vm["main"](x, bad_i)


def test_numpy_target_raises_for_the_same_indices():
    vm = take_vm("numpy")
    with pytest.raises(VMError, match="out of bounds"):
        vm["main"](np.zeros((10, 4), np.float32), np.array([0, 10, 3]))


def test_a_parallel_kernel_reports_the_status_of_its_threads():
    """A lookup big enough for the thread pool: the bad index is in one thread's rows."""
    rows, cols, n = 1000, 256, 4096
    vm = take_vm("c", rows=rows, cols=cols, n=n)
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    i = RNG.integers(0, rows, n)
    np.testing.assert_array_equal(vm["main"](x, i), np.maximum(x[i], 0))
    for at in (0, n // 2, n - 1):
        bad = i.copy()
        bad[at] = rows
        with pytest.raises(VMError, match="status 2"):
            vm["main"](x, bad)


def test_gather_elements():
    vm = VirtualMachine(plait.build(plait.parse(GATHER_ELEMENTS), target="c"))
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    i = RNG.integers(-4, 4, (3, 5))
    np.testing.assert_array_equal(vm["main"](x, i),
                                  np.take_along_axis(x, np.where(i < 0, i + 4, i), axis=0))
    i[2, 3] = 4
    with pytest.raises(IndexError):
        np.take_along_axis(x, i, axis=0)
    with pytest.raises(VMError, match="status 2"):
        vm["main"](x, i)


def test_clamping_is_an_opt_in():
    vm = take_vm(plait.Target("c", out_of_range_indices="clamp"), n=5)
    x = RNG.standard_normal((10, 4)).astype(np.float32)
    i = np.array([0, 10, -1, -12, 2**40])
    want = np.take(x, np.where(i < 0, i + 10, i), axis=0, mode="clip")
    np.testing.assert_array_equal(vm["main"](x, i), np.maximum(want, 0))
    with pytest.raises(ValueError, match="out_of_range_indices='wrap'.*'raise'.*'clamp'"):
        take_vm(plait.Target("c", out_of_range_indices="wrap"))


def test_the_kernel_interpreter_raises():
    x, idx = dsl.placeholder((5,), "float32", "x"), dsl.placeholder((2,), "int64", "i")
    out = dsl.compute((2,), lambda j: x[I.checked_index(idx[j], 5)], "out")
    k = dsl.create_kernel([x, idx, out], name="lookup")
    xs = np.arange(5, dtype=np.float32)
    y = np.zeros(2, np.float32)
    run_kernel(k, [xs, np.array([4, -5]), y])
    np.testing.assert_array_equal(y, [4, 0])
    with pytest.raises(KernelRunError, match="index 5 is out of range for an axis of size 5"):
        run_kernel(k, [xs, np.array([1, 5]), y])


def test_a_token_id_past_the_vocabulary_raises_like_onnxruntime():
    """An embedding lookup as BERT's (ONNX Gather of token ids from the word table)."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from plait.frontend import from_onnx

    vocab, width = 1000, 32
    table = RNG.standard_normal((vocab, width)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0)], "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 16])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, 16, width])],
        [numpy_helper.from_array(table, "table")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    vm = VirtualMachine(plait.build(from_onnx(m), target="c"))
    ids = RNG.integers(0, vocab, (1, 16))
    np.testing.assert_array_equal(vm["main"](ids), sess.run(None, {"ids": ids})[0])
    ids[0, 5] = vocab   # one past the vocabulary
    with pytest.raises(Exception, match="out of data bounds"):
        sess.run(None, {"ids": ids})
    with pytest.raises(VMError, match="status 2: an index is out of range"):
        vm["main"](ids)
    assert onnx is not None
