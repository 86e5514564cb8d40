"""Fusion end to end on the ``c`` target: models in the text format go through the
default pipeline (FuseOps and FuseKernels included), are compiled and run on the VM,
and match an independent numpy computation (float32, rtol 1e-5).  The built module and
the executable show that an MLP's bias add + ReLU and a transformer's elementwise tail
are each a single kernel with a single loop nest."""

from __future__ import annotations

import math

import numpy as np
import pytest

import plait
from plait.codegen.c import find_compiler
from plait.codegen.vm_codegen import vm_codegen
from plait.ir import IRModule
from plait.kernel import For, Kernel
from plait.kernel.ir import Allocate
from plait.runtime import Executable, VirtualMachine
from plait.target import Target
from plait.transform import PassContext, WellFormedCheck

RTOL, ATOL = 1e-5, 1e-5
RNG = np.random.default_rng(7)

try:
    find_compiler()
    HAVE_CC = True
except Exception:  # no C compiler: the c target cannot build
    HAVE_CC = False
pytestmark = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def build(text: str, target: Target) -> tuple[IRModule, Executable]:
    """The module after the default pipeline (build phase) and its executable."""
    mod = plait.parse(text).with_attrs(target=target)
    with PassContext(instruments=[WellFormedCheck()]):
        lowered = plait.default_pipeline(target)(mod)
    return lowered, vm_codegen(lowered)


def kernels(mod: IRModule) -> dict[str, Kernel]:
    return {n: f for n, f in mod.items() if isinstance(f, Kernel)}


def loop_nests(k: Kernel) -> int:
    """Outermost loops of the kernel: one per loop nest."""
    count, stack = 0, [k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, For):
            count += 1
        elif isinstance(s, Allocate):
            stack.append(s.body)
        else:
            stack.extend(getattr(s, "stmts", None) or ())
    return count


def scratch(k: Kernel) -> int:
    """Local buffers outside the loop nests (intermediate tensors)."""
    count, stack = 0, [k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, Allocate):
            count += 1
            stack.append(s.body)
        elif not isinstance(s, For):
            stack.extend(getattr(s, "stmts", None) or ())
    return count


def calls(exe: Executable) -> dict[str, int]:
    return exe.stats()["functions"]["main"]["calls"]


# ------------------------------------------------------------------ an MLP

MLP = """
@module
class MLP:
    @function
    def main(x: Tensor((n, 64), "float32"), w1: Tensor((64, 32), "float32"),
             b1: Tensor((32,), "float32"), w2: Tensor((32, 10), "float32"),
             b2: Tensor((10,), "float32")) -> Tensor((n, 10), "float32"):
        with dataflow():
            h = relu(add(matmul(x, w1), b1))
            out = relu(add(matmul(h, w2), b2))
            output(out)
        return out
"""


def mlp_reference(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    h = np.maximum(x @ w1 + b1, 0)
    return np.maximum(h @ w2 + b2, 0)


def _products(main_calls: dict[str, int]) -> int:
    """How many calls of plait's matrix product (``plait_gemm_<digest>``, taking the
    symbolic ``n`` at run time) ``main_calls`` holds; they are removed from it."""
    names = [k for k in main_calls if k.startswith("plait_gemm_")]
    return sum(main_calls.pop(k) for k in names)


def test_mlp_bias_add_and_relu_are_one_loop_nest_after_the_product_call() -> None:
    mod, exe = build(MLP, Target("c"))
    ks = kernels(mod)
    assert sorted(ks) == ["fused_add_relu", "fused_add_relu_1"]
    for k in ks.values():
        assert k.attrs["fused_ops"] == ("add", "relu")
        assert loop_nests(k) == 1 and scratch(k) == 0
    main_calls = calls(exe)   # (the biases are parameters: not the product's epilogue)
    assert _products(main_calls) == 2
    assert main_calls == {"fused_add_relu": 1, "fused_add_relu_1": 1}
    args = [randn(64, 32, scale=0.2), randn(32), randn(32, 10, scale=0.2), randn(10)]
    vm = VirtualMachine(exe)
    for n in (1, 7):
        x = randn(n, 64)
        np.testing.assert_allclose(vm["main"](x, *args), mlp_reference(x, *args),
                                   rtol=RTOL, atol=ATOL)


def test_without_blas_matmul_bias_and_relu_are_one_kernel() -> None:
    mod, exe = build(MLP, Target("c", blas=False, gemm=False))
    ks = kernels(mod)
    assert sorted(ks) == ["fused_matmul_add_relu", "fused_matmul_add_relu_1"]
    for k in ks.values():
        # the matmul reduction and the add + relu tail over its result
        assert loop_nests(k) == 2 and scratch(k) == 1
    assert calls(exe) == {"fused_matmul_add_relu": 1, "fused_matmul_add_relu_1": 1}
    args = [randn(64, 32, scale=0.2), randn(32), randn(32, 10, scale=0.2), randn(10)]
    x = randn(3, 64)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, *args), mlp_reference(x, *args),
                               rtol=RTOL, atol=ATOL)


def test_fuse_false_lowers_op_by_op_with_the_same_result() -> None:
    mod, exe = build(MLP, Target("c", fuse=False))
    assert sorted(kernels(mod)) == ["add", "add_1", "relu", "relu_1"]
    assert sum(calls(exe).values()) == 6
    args = [randn(64, 32, scale=0.2), randn(32), randn(32, 10, scale=0.2), randn(10)]
    x = randn(2, 64)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, *args), mlp_reference(x, *args),
                               rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ a transformer block

FFN = """
@module
class Block:
    @function
    def main(x: Tensor((n, 64), "float32"), w1: Tensor((64, 128), "float32"),
             b1: Tensor((128,), "float32"), w2: Tensor((128, 64), "float32"),
             b2: Tensor((64,), "float32"), g: Tensor((64,), "float32"),
             beta: Tensor((64,), "float32")) -> Tensor((n, 64), "float32"):
        with dataflow():
            h = add(matmul(x, w1), b1)
            a = multiply(h, const(0.5, "float32"))
            s = divide(h, const(1.4142135, "float32"))
            e = erf(s)
            f = add(e, const(1.0, "float32"))
            gelu = multiply(a, f)
            y = add(matmul(gelu, w2), b2)
            r = add(y, x)
            mu = mean(r, axis=-1, keepdims=True)
            d = subtract(r, mu)
            var = mean(multiply(d, d), axis=-1, keepdims=True)
            inv = rsqrt(add(var, const(1e-5, "float32")))
            out = add(multiply(multiply(d, inv), g), beta)
            output(out)
        return out
"""


def ffn_reference(x, w1, b1, w2, b2, g, beta):  # type: ignore[no-untyped-def]
    h = (x @ w1 + b1).astype(np.float64)
    erf = np.vectorize(math.erf)
    gelu = (h * 0.5 * (1.0 + erf(h / 1.4142135))).astype(np.float32)
    r = gelu @ w2 + b2 + x
    mu = r.mean(axis=-1, keepdims=True)
    d = r - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + 1e-5) * g + beta


def test_transformer_gelu_tail_is_one_loop_nest_and_layer_norm_fuses() -> None:
    mod, exe = build(FFN, Target("c"))
    ks = kernels(mod)
    tail = [k for k in ks.values() if k.attrs.get("fused_ops", ())[:1] == ("add",)
            and "erf" in k.attrs["fused_ops"]]
    assert len(tail) == 1
    (gelu,) = tail
    assert gelu.attrs["fused_ops"] == ("add", "multiply", "divide", "erf", "add", "multiply")
    assert loop_nests(gelu) == 1 and scratch(gelu) == 0
    # the second bias add with the residual add; the mean alone (the residual sum is
    # also read by the subtraction of the other group); the subtraction, the variance
    # reduction and the normalization tail: a reduction stage and one loop nest after it
    assert sorted(ks) == ["fused_add_add", "fused_add_multiply_divide_erf_2more",
                          "fused_subtract_multiply_mean_add_4more", "mean"]
    assert loop_nests(ks["fused_add_add"]) == 1 and scratch(ks["fused_add_add"]) == 0
    norm = ks["fused_subtract_multiply_mean_add_4more"]
    assert norm.attrs["fused_ops"] == ("subtract", "multiply", "mean", "add", "rsqrt",
                                       "multiply", "multiply", "add")
    assert loop_nests(norm) == 2 and scratch(norm) == 1
    main_calls = calls(exe)
    assert _products(main_calls) == 2
    assert sorted(main_calls) == sorted(ks) and set(main_calls.values()) == {1}
    weights = [randn(64, 128, scale=0.1), randn(128), randn(128, 64, scale=0.1), randn(64),
               randn(64), randn(64)]
    x = randn(5, 64)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, *weights),
                               ffn_reference(x, *weights), rtol=RTOL, atol=ATOL)
