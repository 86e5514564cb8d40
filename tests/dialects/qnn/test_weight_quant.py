"""Weight-only quantization (``qnn.matmul_nbits``, ``qnn.QuantizeWeights``, the import of
onnxruntime's ``MatMulNBits``) against onnxruntime: its quantizer, its MatMulNBits
kernel and its ``matmul_nbits_quantizer`` models.

The quantized weights are compared exactly (plait's quantizer is onnxruntime's, bit for
bit).  Outputs are float32 products of the same dequantized weights summed in different
orders, so they are compared within the summation bound ``|y - y'| <= 4 K u (|a| @
|W|^T)`` (u = 2^-24, K the contracted size) elementwise, which a wrong weight, scale,
zero point or nibble order exceeds by orders of magnitude.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import plait
from plait.dialects import qnn
from plait.dialects.qnn import nbits
from plait.dialects.qnn import reference as R
from plait.runtime.vm import VirtualMachine
from plait.target import Target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnxruntime.capi._pybind_state import (  # noqa: E402
    quantize_matmul_4bits,
    quantize_matmul_8bits,
)
from qnn_ort import node_model, run_ort  # noqa: E402
from wq_helpers import assert_close  # noqa: E402


def ort_quantize(w_kn: np.ndarray, bits: int, bs: int, sym: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """onnxruntime's own quantizer (what matmul_nbits_quantizer calls) on ``K x N``."""
    k, n = w_kn.shape
    kb = -(-k // bs)
    b = np.zeros((n, kb, bs * bits // 8), np.uint8)
    z = np.zeros((n, nbits.zp_cols(kb, bits)), np.uint8)
    s = np.zeros((n, kb), np.float32)
    fn = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    fn(b, np.pad(w_kn, ((0, kb * bs - k), (0, 0))), s, z, bs, n, k, sym)
    if sym:   # the quantizer writes no zero points; MatMulNBits' default is 2^(bits-1)
        z = nbits.default_zero_points(n, kb, bits)
    return b, s, z


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym", [False, True])
def test_the_quantizer_is_onnxruntimes_bit_for_bit(bits: int, sym: bool) -> None:
    """Random and tied values (halves: onnxruntime rounds them away from zero), K not a
    multiple of the block, an all-zero column: equal scales, zero points and values."""
    rng = np.random.default_rng(bits + 2 * sym)
    for k, n, bs in ((100, 5, 32), (64, 3, 16), (37, 4, 128), (256, 2, 64)):
        w = (rng.standard_normal((k, n)) * 3).astype(np.float32)
        w[: k // 2, 0] = np.round(w[: k // 2, 0] * 2) / 2
        w[:, -1] = 0
        b, s, z = nbits.quantize_blockwise(w.T, bits, bs, sym)
        bo, so, zo = ort_quantize(w, bits, bs, sym)
        kb = b.shape[1]
        np.testing.assert_array_equal(s, so)
        # (onnxruntime leaves the padding of an odd K's last byte unspecified)
        q, _ = nbits.unpack_weights(b, z, k, bits, bs)
        qo, _ = nbits.unpack_weights(bo, zo, k, bits, bs)
        np.testing.assert_array_equal(q, qo)
        np.testing.assert_array_equal(nbits.unpack(z, bits)[:, :kb],
                                      nbits.unpack(zo, bits)[:, :kb])


def ort_matmul_nbits(a: np.ndarray, b: np.ndarray, s: np.ndarray, z: np.ndarray | None,
                     bias: np.ndarray | None, k: int, bits: int, bs: int) -> np.ndarray:
    n = b.shape[0]
    args = [a, b, s, z, None, bias]
    while args[-1] is None:
        args.pop()
    attrs = {"K": k, "N": n, "bits": bits, "block_size": bs}
    return run_ort(*node_model("MatMulNBits", args, attrs=attrs, domain="com.microsoft"))[0]


@pytest.mark.parametrize("bits,bs,sym", [(4, 32, False), (4, 128, True), (8, 32, False),
                                         (8, 16, True)])
def test_the_reference_equals_onnxruntimes_matmul_nbits(bits: int, bs: int, sym: bool) -> None:
    """qnn.matmul_nbits' numpy reference and onnxruntime's kernel on the same packed
    weights (K = 200, not a multiple of the block; A of rank 3; a bias)."""
    rng = np.random.default_rng(bits * bs)
    k, n = 200, 24
    w = rng.standard_normal((k, n)).astype(np.float32)
    b, s, z = nbits.quantize_blockwise(w.T, bits, bs, sym)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = R.matmul_nbits(a, b, s, z, bias, K=k, N=n, bits=bits, block_size=bs)
    want = ort_matmul_nbits(a, b, s, None if sym else z, bias, k, bits, bs)
    w_nk = nbits.dequantize_weights(b, s, z, k, bits, bs)
    assert_close(got.reshape(6, n), want.reshape(6, n), a.reshape(6, k), w_nk)
    # the dequantized weight is within one step of the float weight (the symmetric
    # form's short side may saturate by up to one step)
    step = np.repeat(np.abs(s), bs, axis=1)[:, :k]
    assert np.all(np.abs(w_nk - w.T) <= step)


def float_model(k: int, n: int, m: int | str = 3, seed: int = 0) -> tuple[Any, np.ndarray]:
    """``(x @ W1) @ W2`` (two MatMul nodes with float32 initializers) and W1."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((k, n)).astype(np.float32)
    w2 = rng.standard_normal((n, 16)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 16])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model, w1


def ort_quantized(model: Any, bits: int, bs: int, sym: bool) -> Any:
    """``model`` through onnxruntime's ``matmul_nbits_quantizer`` (MatMulNBits nodes)."""
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    cfg = mq.DefaultWeightOnlyQuantConfig(block_size=bs, is_symmetric=sym, bits=bits)
    q = mq.MatMulNBitsQuantizer(onnx.ModelProto.FromString(model.SerializeToString()),
                                algo_config=cfg)
    q.process()
    out = q.model.model
    assert [nd.op_type for nd in out.graph.node] == ["MatMulNBits", "MatMulNBits"]
    return out


def run(exe: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(VirtualMachine(exe)["main"](x))


def nbits_reference(model: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numpy reference of ``model``'s two MatMulNBits nodes (their own initializers):
    the output, the hidden activation and the first dequantized weight."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    h = x
    ws = []
    for nd in model.graph.node:
        at = {a.name: helper.get_attribute_value(a) for a in nd.attribute}
        b, s = inits[nd.input[1]], inits[nd.input[2]]
        kb = b.shape[1]
        z = (inits[nd.input[3]] if len(nd.input) > 3 and nd.input[3]
             else nbits.default_zero_points(at["N"], kb, at["bits"]))
        ws.append(nbits.dequantize_weights(b, s.reshape(at["N"], kb), z, at["K"], at["bits"],
                                           at["block_size"]))
        prev = h
        h = R.matmul_nbits(h, b, s.reshape(at["N"], kb), z.reshape(at["N"], -1), K=at["K"],
                           N=at["N"], bits=at["bits"], block_size=at["block_size"])
    return h, prev, ws[1]


@pytest.mark.parametrize("spec,bits,bs,sym", [("int4-g32", 4, 32, False),
                                              ("int4-g128-sym", 4, 128, True),
                                              ("int8-g32", 8, 32, False)])
def test_the_pass_equals_onnxruntimes_quantized_model(spec: str, bits: int, bs: int,
                                                      sym: bool) -> None:
    """``qnn.QuantizeWeights`` by hand and ``build()`` with ``weight_quant`` on the float
    model give what onnxruntime gives for its own MatMulNBits model of the same float
    weights (K = 80: the last block short), and what the numpy reference gives."""
    from plait.frontend.onnx import from_onnx

    model, _ = float_model(80, 48)
    x = np.random.default_rng(1).standard_normal((3, 80)).astype(np.float32)
    qmodel = ort_quantized(model, bits, bs, sym)
    want = run_ort(qmodel, {"x": x})[0]
    ref, h, w2 = nbits_reference(qmodel, x)

    mod = qnn.QuantizeWeights(bits=bits, group=bs, symmetric=sym)(from_onnx(model))
    assert str(mod).count("qnn.matmul_nbits") == 2
    by_hand = run(plait.build(mod, "numpy"), x)
    by_target = run(plait.build(from_onnx(model), Target("numpy", weight_quant=spec)), x)
    for got in (by_hand, by_target):
        assert_close(got, want, h, w2)
        assert_close(got, ref, h, w2)


def test_per_channel_int8_and_linear_with_bias() -> None:
    """``linear`` (ONNX Gemm with transB) with a bias, per-channel int8 (one block of K):
    equal to the reference on onnxruntime's quantization of the same weight, and to
    onnxruntime's MatMulNBits (K = 64, a block size it takes)."""
    from plait.frontend.onnx import from_onnx

    rng = np.random.default_rng(5)
    k, n = 64, 40
    w_nk = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((4, k)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, n])],
        [numpy_helper.from_array(w_nk, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod = from_onnx(model)
    assert "linear" in str(mod)
    got = run(plait.build(qnn.QuantizeWeights(bits=8)(mod), "numpy"), x)
    b, s, z = ort_quantize(w_nk.T.copy(), 8, k, False)
    want = ort_matmul_nbits(x, b, s, z, bias, k, 8, k)
    ref = R.matmul_nbits(x, b, s, z, bias, K=k, N=n, bits=8, block_size=k)
    w = nbits.dequantize_weights(b, s, z, k, 8, k)
    assert_close(got, want, x, w)
    assert_close(got, ref, x, w)


@pytest.mark.parametrize("bits,bs,sym", [(4, 32, False), (4, 16, True), (8, 128, False)])
def test_onnxruntime_matmul_nbits_models_import(bits: int, bs: int, sym: bool) -> None:
    """A model onnxruntime's quantizer wrote (MatMulNBits nodes, flat or omitted zero
    points) imports to qnn.matmul_nbits and runs on numpy as onnxruntime runs it."""
    from plait.frontend.onnx import from_onnx

    model, _ = float_model(96, 32, m="m", seed=bits)
    qmodel = ort_quantized(model, bits, bs, sym)
    x = np.random.default_rng(2).standard_normal((5, 96)).astype(np.float32)
    mod = from_onnx(qmodel)
    assert str(mod).count("qnn.matmul_nbits") == 2
    got = run(plait.build(mod, "numpy"), x)
    ref, h, w2 = nbits_reference(qmodel, x)
    assert_close(got, run_ort(qmodel, {"x": x})[0], h, w2)
    assert_close(got, ref, h, w2)


def test_on_c_through_the_target() -> None:
    """``Target("c", weight_quant="int4-g32")``: built with the c target's kernels for
    qnn.matmul_nbits (its dequantizing kernels, or the dequantize-then-product
    lowering), equal to onnxruntime's MatMulNBits model of the same weights at batch 1
    and 3."""
    from plait.frontend.onnx import from_onnx

    model, _ = float_model(80, 48, m="m", seed=3)
    qmodel = ort_quantized(model, 4, 32, False)
    exe = plait.build(from_onnx(model), Target("c", weight_quant="int4-g32"))
    for m in (1, 3):
        x = np.random.default_rng(m).standard_normal((m, 80)).astype(np.float32)
        _, h, w2 = nbits_reference(qmodel, x)
        assert_close(run(exe, x), run_ort(qmodel, {"x": x})[0], h, w2)


def test_a_rebuild_computes_the_quantized_model() -> None:
    """The graph a weight-quantized executable keeps is the float model; the build's
    ``weight_quant`` is recorded beside it, so ``plait.rebuild`` (on numpy, from the
    saved file) computes the quantized model the executable computes (equal to
    onnxruntime's MatMulNBits within the summation bound), not the float one; a target
    that sets ``weight_quant`` itself keeps its own."""
    from plait.build import GRAPH_TARGET_ATTRS, BuildError
    from plait.frontend.onnx import from_onnx
    from plait.runtime import Executable

    model, _ = float_model(80, 48, m="m", seed=5)
    qmodel = ort_quantized(model, 4, 32, False)
    exe = plait.build(from_onnx(model), Target("c", weight_quant="int4-g32"))
    assert exe.attrs[GRAPH_TARGET_ATTRS] == {"weight_quant": "int4-g32"}
    loaded = Executable.from_bytes(exe.to_bytes())
    x = np.random.default_rng(7).standard_normal((3, 80)).astype(np.float32)
    _, h, w2 = nbits_reference(qmodel, x)
    want = run_ort(qmodel, {"x": x})[0]
    again = plait.rebuild(loaded, "numpy")
    assert_close(run(again, x), want, h, w2)
    assert_close(run(again, x), run(exe, x), h, w2)
    floats = run(plait.rebuild(loaded, Target("numpy", weight_quant="")), x)
    assert np.abs(floats - want).max() > 100 * np.abs(run(again, x) - want).max()
    loaded.attrs[GRAPH_TARGET_ATTRS] = {"rounding": "odd"}
    with pytest.raises(BuildError, match="records target attributes \\['rounding'\\]"):
        plait.rebuild(loaded, "numpy")


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs,match", [
    ({"bits": 3}, "bits=3.*bits=8 \\(int8\\) or bits=4"),
    ({"bits": 4, "group": 48}, "group=48.*power of two >= 16"),
    ({"bits": 4, "group": 8}, "group=8.*power of two >= 16"),
    ({"bits": 8, "group": 0}, "group=0"),
])
def test_bad_parameters_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(qnn.WeightQuantError, match=match):
        qnn.QuantizeWeights(**kwargs)


@pytest.mark.parametrize("spec", ["int3", "int4-g33", "int4_g32", "fp8", "int4-gx"])
def test_bad_target_specs_are_refused(spec: str) -> None:
    from plait.frontend.onnx import from_onnx

    model, _ = float_model(32, 16)
    with pytest.raises(Exception, match="weight_quant="):
        plait.build(from_onnx(model), Target("numpy", weight_quant=spec))


def test_weights_that_are_not_constants_are_refused() -> None:
    """Weights given as inputs: nothing to quantize, and the error says why and what to
    do (a product with a computed weight elsewhere in a model is left float)."""
    text = """
@module
class M:
    @function
    def main(x: Tensor((2, 8), "float32"),
             w: Tensor((8, 4), "float32")) -> Tensor((2, 4), "float32"):
        with dataflow():
            y = matmul(x, w)
            output(y)
        return y
"""
    mod = plait.parse(text)
    with pytest.raises(Exception, match="weight is computed, not a constant.*weights as "
                                        "constants") as err:
        qnn.QuantizeWeights(bits=4, group=32)(mod)
    assert isinstance(err.value.__cause__ or err.value, qnn.WeightQuantError)


def test_bad_matmul_nbits_calls_are_refused() -> None:
    """Type inference names the argument, the shape it needs and the attributes."""
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.ir.expr import Constant
    from plait.op import make_call

    b, s, z = nbits.quantize_blockwise(np.ones((8, 64), np.float32), 4, 32)
    x = Var("x", TensorType((2, 64), "float32"))
    bb = BlockBuilder()
    with pytest.raises(Exception, match="scales must have shape \\(8, 2\\)"):
        bb.normalize(make_call("qnn.matmul_nbits", x, Constant(b), Constant(s[:, :1].copy()),
                               Constant(z), K=64, N=8, bits=4, block_size=32))
    with pytest.raises(Exception, match="a must end with K=64"):
        bb.normalize(make_call("qnn.matmul_nbits", Var("y", TensorType((2, 63), "float32")),
                               Constant(b), Constant(s), Constant(z), K=64, N=8, bits=4,
                               block_size=32))


def test_transposed_constant_weights_are_quantized_in_place() -> None:
    """``torch.export`` writes ``x @ W.T`` as ``matmul(x, permute_dims(W))`` and
    FoldConstant leaves the transposes of large weights: the pass quantizes ``W`` itself
    (its rows are the output channels already), and the transpose is gone."""
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.ir.expr import Constant
    from plait.op import make_call
    from plait.transform import Sequential, make_pass

    rng = np.random.default_rng(9)
    w_nk = rng.standard_normal((24, 64)).astype(np.float32)
    x = Var("x", TensorType((2, 64), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            wt = bb.emit(make_call("permute_dims", Constant(w_nk), axes=(1, 0)))
            out = bb.emit_output(bb.emit(make_call("matmul", x, wt)))
        bb.emit_func_output(out)
    mod = Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(bb.get())
    mod = qnn.QuantizeWeights(bits=4, group=32)(mod)
    text = str(mod)
    assert "qnn.matmul_nbits" in text and "permute_dims" not in text
    xv = rng.standard_normal((2, 64)).astype(np.float32)
    got = run(plait.build(mod, "numpy"), xv)
    b, s, z = ort_quantize(w_nk.T.copy(), 4, 32, False)
    w = nbits.dequantize_weights(b, s, z, 64, 4, 32)
    assert_close(got, R.matmul_nbits(xv, b, s, z, K=64, N=24, bits=4, block_size=32), xv, w)


def test_the_target_hooks() -> None:
    """``weight_quant`` adds qnn.QuantizeWeights (its parameters from the spec) to the
    optimization stage after FoldConstant, for any target; qnn.DispatchWeightQuant is
    in c's dispatch stage only, before qnn.Legalize; without the attribute no pass
    quantizes."""
    t = Target("numpy", weight_quant="int4-g128-sym")
    names = plait.default_pipeline(t).names()
    assert names.index("FoldConstant") < names.index("qnn.QuantizeWeights")
    (p,) = [s.pass_ for s in plait.default_pipeline(t).flatten(None)
            if s.pass_.name == "qnn.QuantizeWeights"]
    assert p.params == {"bits": 4, "group": 128, "symmetric": True, "activations": "float32"}
    assert "qnn.QuantizeWeights" not in plait.default_pipeline("c").names()
    assert "qnn.DispatchWeightQuant" not in names
    c = plait.default_pipeline(Target("c", weight_quant="int8")).names()
    assert c.index("qnn.DispatchWeightQuant") < c.index("qnn.Legalize")
