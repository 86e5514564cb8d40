"""Building for ``c`` holds each weight once: the originals the target packs go once
packed (plait.ir.deferred), the graph the executable keeps refers to the packed
constants, and the build's peak stays within twice the weights.

The weights are made here with numpy and written to an ONNX file; the references are
those arrays (and numpy's products of them), never plait's output."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import plait  # noqa: E402
from plait.frontend.onnx import from_onnx  # noqa: E402
from plait.ir import Constant  # noqa: E402
from plait.ir.deferred import deferred_of  # noqa: E402
from plait.ir.visitor import post_order  # noqa: E402
from plait.runtime import Executable, VirtualMachine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _weights(sizes: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((sizes[i + 1], sizes[i])).astype(np.float32)
            for i in range(len(sizes) - 1)]


def _mlp(path: Path, weights: list[np.ndarray], rows: int = 4) -> None:
    """``x @ W0^T -> relu -> ... @ Wn^T``, each layer a ``Gemm`` with ``transB=1`` (as
    torch exports ``nn.Linear``)."""
    nodes, inits, cur = [], [], "x"
    for i, w in enumerate(weights):
        out = "y" if i == len(weights) - 1 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [cur, f"w{i}"], [f"g{i}"], transB=1))
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        if out == "y":
            nodes[-1].output[0] = "y"
        else:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        cur = out
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, weights[0].shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, weights[-1].shape[0]])],
        inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))


def _reference(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    h = x.astype(np.float64)
    for i, w in enumerate(weights):
        h = h @ w.astype(np.float64).T
        if i < len(weights) - 1:
            h = np.maximum(h, 0)
    return h


def _roots(arrays) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    out = {}
    for a in arrays:
        while isinstance(a.base, np.ndarray):
            a = a.base
        out[id(a)] = a
    return list(out.values())


def _originals(mod: plait.IRModule) -> list[weakref.ref]:
    """Weak references to the buffers of ``mod``'s constants of 4 KiB or more."""
    return [weakref.ref(a) for a in _roots(
        n.data for f in mod.functions.values() for n in post_order(f)
        if isinstance(n, Constant) and n.data.nbytes >= 4096)]


def _build_alone(mods: list, originals: list[weakref.ref], *args: Any,
                 **kwargs: Any) -> Executable:
    """``plait.build(mods.pop(), ...)``, nothing else holding the module, with the cycle
    collector paused (as the build pauses it): the originals must be gone when it
    returns, freed by reference counting alone (no pass leaves a reference cycle holding
    a module), the executable's constants the only copy."""
    was = gc.isenabled()
    gc.disable()
    try:
        exe = plait.build(mods.pop(), *args, **kwargs)
        assert [r() for r in originals] == [None] * len(originals)
    finally:
        if was:
            gc.enable()
    return exe


def test_the_weights_exist_once_after_building(tmp_path: Path):
    weights = _weights([64, 96, 80, 40])
    _mlp(tmp_path / "m.onnx", weights)
    mods = [from_onnx(tmp_path / "m.onnx")]
    originals = _originals(mods[0])
    assert len(originals) == len(weights)
    exe = _build_alone(mods, originals, "c")
    packed = _roots(exe.constants)
    assert sum(a.nbytes for a in packed) >= sum(w.nbytes for w in weights)
    # the kept graph refers to the packed constants: each of its constants is computed
    # from one of them when read (a fresh array, equal to the weight bit for bit)
    table = exe.graph_constants
    assert len(table) == len(weights)
    kept = sorted((table[k] for k in table), key=lambda a: a.shape)
    for got, want in zip(kept, sorted(weights, key=lambda a: a.shape)):
        assert got.tobytes() == want.tobytes()
        assert not any(np.shares_memory(got, p) for p in packed)
    assert table[next(iter(table))] is not table[next(iter(table))]
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    want = _reference(x, weights)
    got = VirtualMachine(exe)["main"](x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)   # float32 products
    # saved and loaded, its graph rebuilds on numpy with the same weights
    exe.save(tmp_path / "m.plx")
    again = plait.rebuild(Executable.load(tmp_path / "m.plx"), "numpy")
    np.testing.assert_allclose(VirtualMachine(again)["main"](x), want, rtol=1e-4,
                               atol=1e-4)


def test_the_largest_weights_are_packed_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The packed weights are computed largest original first, not in program order:
    computing one holds it twice, and the packed forms made before it are held already,
    so the largest goes through when the fewest packed forms exist (ResNet-18's last,
    largest weights raised its build's peak by 9 MiB when packed last).  The weights
    grow along the network here, as in a CNN; the result still equals numpy's."""
    from plait.ir.expr import DeferredArray

    weights = _weights([16, 32, 64, 128])
    _mlp(tmp_path / "m.onnx", weights)
    order: list[int] = []
    materialize = DeferredArray.materialize

    def recorded(self: DeferredArray) -> np.ndarray:
        if self.source is not None:
            order.append(self.source.nbytes)
        return materialize(self)

    monkeypatch.setattr(DeferredArray, "materialize", recorded)
    exe = plait.build(from_onnx(tmp_path / "m.onnx"), "c")
    assert order == sorted((w.nbytes for w in weights), reverse=True)
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), _reference(x, weights),
                               rtol=1e-4, atol=1e-4)


def test_a_module_the_caller_keeps_is_left_as_it_was(tmp_path: Path):
    weights = _weights([48, 64, 32], seed=3)
    _mlp(tmp_path / "m.onnx", weights)
    mod = from_onnx(tmp_path / "m.onnx")
    before = mod.script()
    exe = plait.build(mod, "c")
    assert mod.script() == before   # its constants are the originals, still there
    kept = [n.data for f in mod.functions.values() for n in post_order(f)
            if isinstance(n, Constant) and n.data.nbytes >= 4096]
    assert sorted(a.tobytes() for a in kept) == sorted(w.tobytes() for w in weights)
    x = np.ones((4, 48), np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), _reference(x, weights),
                               rtol=1e-4, atol=1e-4)


_PEAK_CHILD = textwrap.dedent("""
    import json, sys

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(key)

    import plait, plait.build, plait.pipeline, plait.target.c, plait.frontend.onnx
    import plait.codegen.vm_codegen
    from plait.frontend.onnx import from_onnx
    base = status("VmRSS:")
    exe = plait.build(from_onnx(sys.argv[1]), "c")
    exe.save(sys.argv[2])
    print(json.dumps({"peak": status("VmHWM:") - base}))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_the_build_peaks_within_twice_the_weights(tmp_path: Path):
    """A model of 32 MiB of weights, imported, built and saved in a process of its own:
    its resident peak above the baseline (the compiler's code imported) stays under
    twice the weights (before the originals went once packed it was the originals, the
    packed copies and the packing's transients: above 2x)."""
    weights = _weights([1024, 2048, 2048, 1024])
    total = sum(w.nbytes for w in weights)
    assert total == 32 * 2**20
    _mlp(tmp_path / "big.onnx", weights, rows=2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(tmp_path / "big.onnx"),
                           str(tmp_path / "big.plx")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak = json.loads(proc.stdout.strip().splitlines()[-1])["peak"]
    assert peak <= 2 * total, f"build peak {peak / 2**20:.1f} MiB for {total / 2**20:.1f} MiB"


def test_a_weight_packed_from_its_transposed_view_is_held_once():
    """``matmul(x, permute_dims(W))`` (torch.export's linear) with ``W`` left unfolded
    (FoldConstant's cap set to 16 elements): the product packs from the transposed
    view, and the kept graph unpacks ``W`` itself from those panels."""
    from graph_helpers import build_graph, const, emit  # tests/target

    w = np.random.default_rng(11).standard_normal((48, 40)).astype(np.float32)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return emit(bb, "matmul", p[0], emit(bb, "permute_dims", const(w), axes=(1, 0)))

    with plait.transform.PassContext(config={"transform.fold_constant.max_size": 16}):
        exe = plait.build(build_graph({"x": ("b", 40)}, body), "c")
    table = exe.graph_constants
    (key,) = list(table)
    assert table.is_derived(key)   # not a copy of w: computed from the packed panels
    got = table[key]
    assert got.shape == w.shape and got.flags.c_contiguous and got.tobytes() == w.tobytes()
    x = np.random.default_rng(12).standard_normal((3, 40)).astype(np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x),
                               x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def _int8_model(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x -> QuantizeLinear -> QLinearConv (int8 weights, per-channel scales) ->
    depthwise QLinearConv (uint8 weights, zero point 120) -> Reshape -> QLinearMatMul
    (uint8 weights, zero point 7): the three int8 packers of the c target, each weight
    above the kept graph's reference size.  Returns the weights by name."""
    c_in, c, hw, n = 16, 512, 6, 16
    w = {"w1": rng.integers(-127, 128, (c, c_in, 3, 3), dtype=np.int8),
         "w2": rng.integers(0, 256, (c, 1, 3, 3), dtype=np.uint8),
         "w3": rng.integers(0, 256, (c * hw * hw, n), dtype=np.uint8)}
    f32, u8 = np.float32, np.uint8
    inits = [numpy_helper.from_array(a, k) for k, a in w.items()] + [
        numpy_helper.from_array(np.asarray(v, t), k) for k, v, t in [
            ("sx", 0.05, f32), ("zx", 128, u8), ("sy", 0.5, f32), ("zy", 128, u8),
            ("zw1", np.zeros(c), np.int8), ("sw2", 0.02, f32), ("zw2", 120, u8),
            ("sw3", 0.01, f32), ("zw3", 7, u8), ("so", 2.0, f32), ("zo", 100, u8),
            ("shape", [1, c * hw * hw], np.int64)]] + [
        numpy_helper.from_array((rng.random(c) * 0.01 + 0.005).astype(f32), "sw1")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "sx", "zx", "w1", "sw1", "zw1", "sy", "zy"],
                         ["y1"], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearConv", ["y1", "sy", "zy", "w2", "sw2", "zw2", "sy", "zy"],
                         ["y2"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Reshape", ["y2", "shape"], ["y3"]),
        helper.make_node("QLinearMatMul", ["y3", "sy", "zy", "w3", "sw3", "zw3", "so", "zo"],
                         ["y"])]
    graph = helper.make_graph(
        nodes, "int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return w


def test_int8_weights_are_held_once_after_building(tmp_path: Path):
    """The int8 packers (QLinearMatMul's panels, QLinearConv's rows, the depthwise
    kernel's centered int32 weights) are deferred like the float ones: the originals go
    once packed, without the cycle collector, and the kept graph unpacks each of them
    bit for bit.  The result is onnxruntime's, exactly (uint8 out)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(21)
    weights = _int8_model(tmp_path / "q.onnx", rng)
    mods = [from_onnx(tmp_path / "q.onnx")]
    originals = _originals(mods[0])
    assert len(originals) == len(weights)
    exe = _build_alone(mods, originals, "c")
    table = exe.graph_constants
    assert len(table) == len(weights) and all(table.is_derived(k) for k in table)
    got = sorted((table[k] for k in table), key=lambda a: a.nbytes)
    for g, want in zip(got, sorted(weights.values(), key=lambda a: a.nbytes)):
        assert g.dtype == want.dtype and g.shape == want.shape
        assert g.tobytes() == want.tobytes()
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    # (where this CPU's onnxruntime saturates uint8 x int8 products, no VNNI: its exact
    # run of the same weights recoded as uint8, benchmarks/broad_check.py)
    import onnx

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import broad_check

    model = onnx.load(str(tmp_path / "q.onnx"))
    if broad_check.onnxruntime_saturates():
        model = broad_check.exact_products(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), want)


def test_int8_packing_round_trips_bit_for_bit():
    """Odd sizes (K not a multiple of 4, N not of 16, rows not of 12), uint8 and int8,
    convolutions with and without tap groups: each packer's inverse returns the weights
    bit for bit, and the packed bytes are the weights shifted to int8 (numpy's own
    subtraction) where the layout puts them."""
    from plait.target.c.kernels import int8 as q

    rng = np.random.default_rng(4)
    for dtype in (np.uint8, np.int8):
        info = np.iinfo(dtype)
        b = rng.integers(info.min, info.max + 1, (7, 19), dtype=dtype)
        p = q.pack_b_panels(b)
        assert p.size == q.b_panels_size(7, 19)
        assert q.unpack_b_panels(p, 7, 19, dtype).tobytes() == b.tobytes()
        want = b.astype(np.int16) - (128 if dtype == np.uint8 else 0)
        # panel 1, K rows 4..7 (group 1), column 16 + 2: element [1][1][2][k - 4]
        assert list(p[:256].reshape(2, 2, 16, 4)[1, 1, 2, :3]) == list(want[4:7, 18])
        # trained-like weights with pairs past vpmaddubsw's range: clamped (mode 1), the
        # corrections in the tail, and still unpacked bit for bit
        z = 128 if dtype == np.uint8 else 0
        tw = np.clip(np.rint(rng.normal(0, 15, (64, 37))) + z, info.min, info.max)
        tw[10:12, 5] = (z + 127, z + 120)
        tw[20:22, 30] = (z - 128, z - 100)
        tw = tw.astype(dtype)
        tp = q.pack_b_panels(tw)
        assert tp.size == q.b_panels_size(64, 37, q.b_corrections(tw))
        assert list(tp[q.b_panels_size(64, 37) - 8:][:8].view(np.int32)) == [1, 2]
        assert q.unpack_b_panels(tp, 64, 37, dtype).tobytes() == tw.tobytes()
        cw = np.clip(np.rint(rng.normal(0, 15, (13, 8, 3, 3))) + z, info.min, info.max)
        cw[2, 4:6, 1, 1] = (z + 127, z + 127)
        cw = cw.astype(dtype)
        rows = q.pack_conv_rows(cw)
        assert rows.size == q.conv_rows_size(cw.shape, 1, q.conv_corrections(cw))
        assert q.conv_corrections(cw) == 1
        assert q.unpack_conv_rows(rows, cw.shape, dtype).tobytes() == cw.tobytes()
        for kw, c, conv_groups in ((3, 3, 1), (5, 6, 1), (2, 5, 13)):
            w = rng.integers(info.min, info.max + 1, (13, c, 2, kw), dtype=dtype)
            rows = q.pack_conv_rows(w, conv_groups)
            assert q.unpack_conv_rows(rows, w.shape, dtype, conv_groups).tobytes() == \
                w.tobytes()
        dw = rng.integers(info.min, info.max + 1, (6, 1, 3, 3), dtype=dtype)
        const = q.centered_depthwise_constant(dw, np.arange(6).astype(dtype))
        d = deferred_of(const)
        assert d is not None and d.inverse is not None
        assert d.inverse(const.data).tobytes() == dw.tobytes()
        np.testing.assert_array_equal(
            const.data, dw[:, 0].astype(np.int32) - np.arange(6).reshape(6, 1, 1))


def test_weight_quantization_is_computed_when_read(tmp_path: Path):
    """``Target("c", weight_quant="int8")``: qnn.QuantizeWeights makes deferred
    constants (values, scales and zero points computed together when code generation
    reads one of them), so the pipeline never holds every weight in float and quantized
    at once; with no graph kept (the kept graph holds the float model) the float
    weights are gone after the build.  The result is the float product's within int8's
    error (per-channel scales: 1% of the largest output)."""
    from plait.dialects.qnn import QuantizeWeights
    from plait.ir import Call
    from plait.target import Target

    weights = _weights([256, 128, 64], seed=9)
    _mlp(tmp_path / "m.onnx", weights)
    quantized = QuantizeWeights(bits=8)(from_onnx(tmp_path / "m.onnx"))
    args = [a for f in quantized.functions.values() for n in post_order(f)
            if isinstance(n, Call) and getattr(n.op, "name", "") == "qnn.matmul_nbits"
            for a in n.args[1:4]]
    assert len(args) == 3 * len(weights) and all(deferred_of(a) is not None for a in args)
    mods = [from_onnx(tmp_path / "m.onnx")]
    originals = _originals(mods[0])
    assert len(originals) == len(weights)
    exe = _build_alone(mods, originals, Target("c", weight_quant="int8"), keep_graph=False)
    assert sum(c.nbytes for c in exe.constants) < 0.5 * sum(w.nbytes for w in weights)
    x = np.random.default_rng(10).standard_normal((4, 256)).astype(np.float32)
    want = _reference(x, weights)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), want, rtol=0,
                               atol=0.01 * np.abs(want).max())


def test_saving_unpacks_each_kept_weight_once(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    """Saving writes each weight of the kept graph that is unpacked from the
    executable's panels by unpacking it once (it was unpacked twice: once to find its
    member, once to write it), and the file's graph still holds the weights bit for
    bit."""
    from plait.runtime.derived_constants import DerivedConstants

    weights = _weights([64, 96, 80, 40], seed=5)
    _mlp(tmp_path / "m.onnx", weights)
    exe = plait.build(from_onnx(tmp_path / "m.onnx"), "c")
    table = exe.graph_constants
    assert all(table.is_derived(k) for k in table) and len(table) == len(weights)
    assert sorted(table.nbytes(k) for k in table) == sorted(w.nbytes for w in weights)
    reads: list[str] = []
    getitem = DerivedConstants.__getitem__

    def counted(self: DerivedConstants, key: str) -> np.ndarray:
        reads.append(key)
        return getitem(self, key)

    monkeypatch.setattr(DerivedConstants, "__getitem__", counted)
    exe.save(tmp_path / "m.plx")
    assert sorted(reads) == sorted(table)   # each once
    saved = Executable.load(tmp_path / "m.plx").graph_constants
    assert sorted(saved[k].tobytes() for k in saved) == sorted(w.tobytes() for w in weights)
