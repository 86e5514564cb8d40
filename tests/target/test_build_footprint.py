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

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import plait  # noqa: E402
from plait.frontend.onnx import from_onnx  # noqa: E402
from plait.ir import Constant  # noqa: E402
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


def test_the_weights_exist_once_after_building(tmp_path: Path):
    weights = _weights([64, 96, 80, 40])
    _mlp(tmp_path / "m.onnx", weights)
    mods = [from_onnx(tmp_path / "m.onnx")]
    originals = [weakref.ref(a) for a in _roots(
        n.data for f in mods[0].functions.values() for n in post_order(f)
        if isinstance(n, Constant) and n.data.nbytes >= 4096)]
    assert len(originals) == len(weights)
    was = gc.isenabled()
    gc.disable()   # (as plait.build does while it runs)
    try:
        exe = plait.build(mods.pop(), "c")   # nothing else holds the module
        # the originals went once packed, without the cycle collector (no pass leaves
        # a reference cycle holding a module): the executable's panels are the only copy
        assert [r() for r in originals] == [None] * len(weights)
    finally:
        if was:
            gc.enable()
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
