"""The kernel interpreter (plait.kernel.interp): the kernels the c target generates give
what their compiled C gives (float32: bit for bit but for exp-family intrinsics, 1e-6),
and hand-written kernels with dependences, collisions, masks and bad accesses behave as
the IR says (checked against numpy)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import plait
from plait.codegen.c import compile_kernels
from plait.kernel.interp import KernelRunError, kernel_source, run_kernel
from plait.kernel.ir import Kernel
from plait.transform import Sequential

RNG = np.random.default_rng(3)

OPS = """
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((2, 4, 6, 6), "float32"), w: Tensor((5, 4, 3, 3), "float32"),
             m: Tensor((6, 10), "float32"), i: Tensor((2, 7), "int32"))
            -> Tuple(Tensor((2, 5, 2, 2), "float32"), Tensor((2, 4, 6, 10), "float32"),
                     Tensor((2, 7), "int32"), Tensor((2, 4), "float32")):
        with dataflow():
            c = conv2d(x, w, strides=(2, 2))
            p = max_pool2d(c, pool_size=(2, 2), padding=(1, 1, 1, 1), strides=(2, 2))
            s = softmax(x, axis=-1)
            n = layer_norm(s, const([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "float32"),
                           const([0.0, 0.5, 0.0, 0.5, 0.0, 0.5], "float32"), axes=(-1,))
            g = gelu(n)
            mm = matmul(g, m)
            q = floor_divide(i, const(3, "int32"))
            r = sum(tanh(x), axis=(2, 3))
            output(p, mm, q, r)
        return (p, mm, q, r)
"""


def _lowered_kernels() -> dict[str, Kernel]:
    target = plait.Target("c", gemm=False, blas=False)
    mod = plait.parse(textwrap.dedent(OPS).replace("\n            -> ", " -> ")).with_attrs(
        target=target)
    pipe = plait.default_pipeline(target, from_phase="optimization")
    names = pipe.names()
    head = Sequential([s.pass_ for s in pipe.flatten(None)[: names.index("LegalizeOps") + 1]])
    low = head(mod)
    return {n: k for n, k in low.items() if isinstance(k, Kernel)}


def _random(buf_shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("float"):
        return RNG.standard_normal(buf_shape).astype(dtype)
    return RNG.integers(-20, 20, buf_shape).astype(dtype)


def test_generated_kernels_match_their_compiled_c() -> None:
    kernels = _lowered_kernels()
    assert len(kernels) >= 6, sorted(kernels)
    lib = compile_kernels(kernels)
    for name, k in kernels.items():
        ins = [_random(tuple(b.shape), b.dtype) for b in k.inputs]
        mine = [np.empty(tuple(b.shape), b.dtype) for b in k.outputs]
        theirs = [np.empty(tuple(b.shape), b.dtype) for b in k.outputs]
        run_kernel(k, ins + mine, name)
        lib.get(name)(*ins, *theirs)
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def _kernel(text: str) -> Kernel:
    mod = plait.parse("@module\nclass M:\n" + textwrap.indent(textwrap.dedent(text), "    "))
    (k,) = [f for _, f in mod.items()]
    assert isinstance(k, Kernel)
    return k


def test_a_loop_carried_dependence_runs_serially() -> None:
    k = _kernel("""
        @kernel
        def prefix(x: Buffer((n,), "float64"), y: Buffer((n,), "float64", output=True)):
            y[0] = x[0]
            for i in range(n - 1):
                y[i + 1] = y[i] + x[i + 1]
    """)
    x = RNG.standard_normal(100)
    y = np.empty(100)
    run_kernel(k, [x, y], "prefix")
    np.testing.assert_allclose(y, np.cumsum(x), rtol=1e-12)


def test_lanes_that_would_write_one_element_fall_back_to_serial_order() -> None:
    # out[i // 2] = x[i]: the loop looks independent (the index holds i) but two
    # iterations write each element; C's serial order keeps the later one
    k = _kernel("""
        @kernel
        def halve(x: Buffer((8,), "float32"), y: Buffer((4,), "float32", output=True)):
            for i in parallel(8):
                y[i // 2] = x[i]
    """)
    x = np.arange(8, dtype=np.float32)
    y = np.empty(4, np.float32)
    run_kernel(k, [x, y], "halve")
    np.testing.assert_array_equal(y, x[1::2])


def test_masked_branches_guard_their_loads_and_bounds_vary_per_lane() -> None:
    k = _kernel("""
        @kernel
        def tri(x: Buffer((6, 6), "float32"), y: Buffer((6,), "float32", output=True)):
            for i in parallel(6):
                acc = alloc((1,), "float32")
                acc[0] = 0.0
                for j in range(i + 1):
                    acc[0] = acc[0] + x[i, j]
                if i > 2:
                    y[i] = acc[0] + x[i - 3, 0]
                else:
                    y[i] = select(i < 6, acc[0], x[i + 10, 0])
    """)
    assert "np.where" in kernel_source(k, "tri")  # the if and the select run masked
    x = RNG.standard_normal((6, 6)).astype(np.float32)
    y = np.empty(6, np.float32)
    run_kernel(k, [x, y], "tri")
    want = np.array([np.tril(x)[i].sum() for i in range(6)], np.float32)
    want[3:] += x[:3, 0]
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_integer_division_truncates_like_c() -> None:
    k = _kernel("""
        @kernel
        def div(a: Buffer((6,), "int32"), b: Buffer((6,), "int32"),
                q: Buffer((6,), "int32", output=True), f: Buffer((6,), "int32", output=True)):
            for i in vectorized(6):
                q[i] = a[i] / b[i]
                f[i] = a[i] // b[i]
    """)
    a = np.array([7, -7, 7, -7, 0, 9], np.int32)
    b = np.array([2, 2, -2, -2, 3, -4], np.int32)
    q, f = np.empty(6, np.int32), np.empty(6, np.int32)
    run_kernel(k, [a, b, q, f], "div")
    np.testing.assert_array_equal(q, np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(f, a // b)


def test_an_out_of_bounds_read_is_an_error_naming_kernel_and_buffer() -> None:
    k = _kernel("""
        @kernel
        def shift(x: Buffer((4,), "float32"), y: Buffer((4,), "float32", output=True)):
            for i in parallel(4):
                y[i] = x[i + 1]
    """)
    with pytest.raises(KernelRunError, match=r"kernel 'shift' accesses buffer 'x' out of "
                                             r"bounds: flat index 4 of 4"):
        run_kernel(k, [np.zeros(4, np.float32), np.empty(4, np.float32)], "shift")


def test_arrays_that_do_not_fit_the_buffers_are_refused() -> None:
    k = _kernel("""
        @kernel
        def copy(x: Buffer((n, 2), "float32"), y: Buffer((n, 2), "float32", output=True)):
            for i in parallel(n):
                for j in vectorized(2):
                    y[i, j] = x[i, j]
    """)
    with pytest.raises(KernelRunError, match=r"buffer 'y' axis 0 is n=3, the array has 4"):
        run_kernel(k, [np.zeros((3, 2), np.float32), np.empty((4, 2), np.float32)], "copy")
    with pytest.raises(KernelRunError, match=r"buffer 'x' is float32, the array is float64"):
        run_kernel(k, [np.zeros((3, 2)), np.empty((3, 2), np.float32)], "copy")
