"""``qnn.matmul_nbits`` with ``accuracy_level=4``: the activations quantized to int8 per
block of the weight's ``block_size`` (``sa = amax / 127``, ``qa = rint(a * 127 / amax)``)
and each block's sum ``sum qa (q - z)`` an exact integer (plait/dialects/qnn/nbits.py).

Checked: the numpy reference against onnxruntime's ``MatMulNBits`` at accuracy_level 4;
every copy of the ``c`` kernels (AVX512-VNNI's ``vpdpbusd`` paths for a symmetric weight;
AVX2's ``vpmaddubsw`` path for a symmetric weight at one row, blocks of 16 bytes or more;
the float loops, exact on integers, of the other copies and of per-block zero points;
the integer C loop of blocks too long for them) and the ``numpy``
target's lowering against the reference, decode rows (1 to 4) and prefill rows; halves
rounded to even; the import of accuracy_level and ``QuantizeWeights(activations=)``.

Tolerance (:func:`assert_close_int8`): the block sums are exact, so two results differ
only by the float32 rounding of the per-block products and of their sum (and of an
integer sum above 2^24): ``4 (k_blocks + 16) u S`` with ``S = sum_b |sa_b scale_b| sum_k
|qa (q - z)|`` and ``u = 2^-24``.  One step of one quantized activation (a rounding
different from the reference's) is ``|sa scale (q - z)|``, far above it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from wq_helpers import U, nbits_cases, nbits_module

import plait
from plait.dialects import qnn
from plait.dialects.qnn import nbits
from plait.dialects.qnn import reference as R
from plait.dialects.qnn.quantize_weights import WeightQuantError, parse_spec
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Call, Constant
from plait.op import make_call
from plait.runtime.vm import VirtualMachine
from plait.target.c import cpu_features, library_isas, use_isa

# (K, N, bits, block_size, symmetric, bias)
CONFIGS = [(96, 33, 4, 32, True, True),      # the VNNI path, 2 x 3 blocks in one vector
           (80, 50, 4, 32, True, False),     # ... a short last block, a masked tail
           (80, 21, 4, 32, False, True),     # per-block zero points: the plain path
           (200, 17, 8, 16, True, True),     # 8 bits, 13 blocks of 16, a tail vector
           (300, 20, 8, 128, True, False),   # a block of two vectors
           (256, 12, 4, 128, False, False),
           (90, 20, 4, 90, True, True),      # per channel, blob 45: the plain path
           (70, 9, 8, 70, False, True),
           (600, 7, 8, 600, False, False),   # blocks too long for exact float sums
           # the VNNI decode loop's copies with the block as a constant: int4-g32 (3
           # whole vectors and a masked one), int8-g32 (5 whole), int4-g128
           (448, 19, 4, 32, True, True), (320, 21, 8, 32, True, False),
           (512, 12, 4, 128, True, True),
           # on the pool's threads at one row (each job of 32 weight rows taken alone)
           (512, 600, 4, 32, True, False), (512, 600, 8, 32, True, True),
           (45, 10, 8, 15, False, True)]    # an odd block: not AVX2's int16 prefill
ROWS = (1, 2, 3, 4, 5, 6, 7, 37)


def assert_close_int8(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray,
                      s: np.ndarray, z: np.ndarray, k: int, bits: int, bs: int,
                      extra: np.ndarray | float = 0.0, what: str = "") -> None:
    """``got`` equals ``want`` within the module's bound (plus ``extra``)."""
    qa, sa = nbits.quantize_activations(a, k, bs)
    q, zz = nbits.unpack_weights(b, z, k, bits, bs)
    n, blocks = zz.shape
    qp = np.zeros((n, blocks * bs), np.int64)
    qp[:, :k] = q
    wq = np.abs(qp.reshape(n, blocks, bs) - zz[:, :, None]).astype(np.float64)
    qab = np.abs(qa.reshape(-1, blocks, bs)).astype(np.float64)
    sums = np.einsum("mbk,nbk->mnb", qab, wq)
    scale = np.abs(sa.astype(np.float64)[:, None, :] * s.astype(np.float64)[None, :, :])
    bound = 4 * (blocks + 16) * U * (sums * scale).sum(-1) + extra
    g = np.asarray(got, np.float64).reshape(bound.shape)
    w = np.asarray(want, np.float64).reshape(bound.shape)
    err = np.abs(g - w)
    assert np.all(err <= bound + 1e-30), f"{what}: max error {err.max()}, bound {bound.max()}"


def _weights(rng: np.random.Generator, k: int, n: int, bits: int, bs: int, sym: bool
             ) -> tuple[np.ndarray, ...]:
    w = rng.standard_normal((n, k)).astype(np.float32)
    return nbits.quantize_blockwise(w, bits, bs, symmetric=sym)


def _inputs(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    """Random rows; the first has halves after scaling (amax 127: a * 127 / amax = a)."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    halves = np.array([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5], np.float32)
    x[0, :min(k, 8)] = halves[:min(k, 8)]
    return x


@pytest.fixture(scope="module")
def built() -> tuple[list[tuple], Any, Any]:
    """One module, every config on an input of symbolic rows, built for c and numpy."""
    cases = nbits_cases(np.random.default_rng(11), CONFIGS)
    mod = nbits_module(cases, accuracy_level=4)
    return cases, plait.build(mod, "c"), plait.build(mod, "numpy")


@pytest.mark.parametrize("isa", ["avx512vnni", "avx512", "avx2", "baseline"])
def test_every_kernel_copy_equals_the_reference(built: tuple[list[tuple], Any, Any], isa: str
                                                ) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    cases, exe, _ = built
    rng = np.random.default_rng(5)
    with use_isa(isa):
        vm = VirtualMachine(exe)
        assert library_isas(exe)["wquant"]["chosen"] == isa
        for m in ROWS:
            xs = [_inputs(rng, m, c[0]) for c in cases]
            got = vm["main"](*xs)
            for x, g, (k, n, bits, bs, b, s, z, bias) in zip(xs, got, cases):
                want = R.matmul_nbits(x, b, s, z, bias, K=k, N=n, bits=bits, block_size=bs,
                                      accuracy_level=4)
                assert_close_int8(np.asarray(g), want, x, b, s, z, k, bits, bs,
                                  what=f"{isa}, {m} rows, K={k} N={n} bits={bits} bs={bs}")


def test_the_numpy_lowering_equals_the_reference(built: tuple[list[tuple], Any, Any]) -> None:
    """The lowering multiplies ``qa * sa`` (rounded once each) by the dequantized weight
    in float32: the reference within the float32 summation bound of that product too."""
    cases, _, exe = built
    rng = np.random.default_rng(6)
    vm = VirtualMachine(exe)
    for m in (1, 5):
        xs = [_inputs(rng, m, c[0]) for c in cases]
        got = vm["main"](*xs)
        for x, g, (k, n, bits, bs, b, s, z, bias) in zip(xs, got, cases):
            want = R.matmul_nbits(x, b, s, z, bias, K=k, N=n, bits=bits, block_size=bs,
                                  accuracy_level=4)
            qa, sa = nbits.quantize_activations(x, k, bs)
            af = (qa.reshape(m, -1, bs) * sa[:, :, None].astype(np.float64)).reshape(m, -1)
            w = nbits.dequantize_weights(b, s, z, k, bits, bs).astype(np.float64)
            extra = 8 * k * U * (np.abs(af[:, :k]) @ np.abs(w).T)
            assert_close_int8(np.asarray(g), want, x, b, s, z, k, bits, bs, extra,
                              what=f"numpy, {m} rows, K={k} bits={bits} bs={bs}")


def test_halves_round_to_even_and_zero_blocks() -> None:
    qa, sa = nbits.quantize_activations(
        np.array([[127, 0.5, 1.5, 2.5, -0.5, -2.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]], np.float32), 32, 16)
    assert qa[0, :6].tolist() == [127, 0, 2, 2, 0, -2]
    assert sa[0].tolist() == [1.0, 0.0] and not qa[0, 16:].any()


ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("bits,bs,sym", [(4, 32, True), (4, 32, False), (8, 32, True),
                                         (4, 128, True), (8, 16, False)])
def test_the_reference_and_the_import_equal_onnxruntime_at_level_4(bits: int, bs: int,
                                                                  sym: bool) -> None:
    """onnxruntime's MatMulNBits at accuracy_level 4 (K = 200: a short last block; 3
    rows) equals the reference; the node imports with the level kept and runs on ``c``
    as onnxruntime runs it."""
    from qnn_ort import node_model, run_ort

    from plait.frontend.onnx import from_onnx

    rng = np.random.default_rng(bits * bs + sym)
    k, n = 200, 24
    b, s, z = _weights(rng, k, n, bits, bs, sym)
    a = rng.standard_normal((3, k)).astype(np.float32)
    attrs = {"K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": 4}
    model, feeds = node_model("MatMulNBits", [a, b, s, None if sym else z], attrs=attrs,
                              domain="com.microsoft")
    want = run_ort(model, feeds)[0]
    ref = R.matmul_nbits(a, b, s, z, K=k, N=n, bits=bits, block_size=bs, accuracy_level=4)
    assert_close_int8(ref, want, a, b, s, z, k, bits, bs, what="reference vs onnxruntime")
    # the float product differs by far more than the bound: the level is not ignored
    fl = R.matmul_nbits(a, b, s, z, K=k, N=n, bits=bits, block_size=bs)
    assert np.abs(fl - want).max() > 100 * np.abs(ref - want).max()
    mod = from_onnx(model)
    levels = [c.attrs["accuracy_level"] for c in _calls(mod, "qnn.matmul_nbits")]
    assert levels == [4]
    got = VirtualMachine(plait.build(mod, "c"))["main"](*feeds.values())
    assert_close_int8(np.asarray(got), want, a, b, s, z, k, bits, bs, what="c vs onnxruntime")


def _calls(mod: Any, name: str) -> list[Call]:
    from plait.ir.visitor import post_order

    return [e for _, f in mod.graph_functions() for e in post_order(f.body)
            if isinstance(e, Call) and getattr(e.op, "name", None) == name]


def test_quantize_weights_selects_int8_activations() -> None:
    x = Var("x", TensorType((2, 64), "float32"))
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(make_call("matmul", x, Constant(w)))
        bb.emit_func_output(y)
    mod = bb.get()
    for act, level in (("int8", 4), ("float32", 0)):
        out = qnn.QuantizeWeights(bits=4, group=32, symmetric=True, activations=act)(mod)
        assert [c.attrs["accuracy_level"] for c in _calls(out, "qnn.matmul_nbits")] == [level]
    assert parse_spec("int4-g32-sym-a8") == {"bits": 4, "group": 32, "symmetric": True,
                                             "activations": "int8"}
    assert parse_spec("int8")["activations"] == "float32"
    with pytest.raises(WeightQuantError, match="activations='int4'.*'float32'.*'int8'"):
        qnn.QuantizeWeights(bits=4, group=32, activations="int4")
    with pytest.raises(WeightQuantError, match="'-a8'"):
        parse_spec("int4-a8-g32")
