"""benchmarks/memory.py on a tiny ONNX model: the owners it reports are the model's
bytes (worked out here from the initializers with numpy), the serving process imports
no module of the compiler, and the tables print.  The figures of record come from the
real-model suite (docs/performance.md); this checks the measuring, cheaply."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import memory  # noqa: E402

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((64, 256)).astype(np.float32)
W2 = RNG.standard_normal((256, 32)).astype(np.float32)


def _mlp(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


def test_owners_of_the_build_and_of_serving(tmp_path: Path):
    from plait.session import default_target

    target = default_target()
    src, plx = tmp_path / "mlp.onnx", tmp_path / "mlp.plx"
    _mlp(src)
    weights = (W1.nbytes + W2.nbytes) / 2**20
    assert memory.weight_mib(src) == pytest.approx(weights)
    build = memory._run_child("build", str(src), target, str(plx))
    # the imported module's constants are the initializers, byte for byte
    assert build["original_constants_mib"] == pytest.approx(weights)
    # built from a module nobody else holds, an original outlives the build only where
    # the executable uses it as it is (numpy) or the kept graph cannot unpack it
    assert 0 <= build["originals_kept_mib"] <= weights + 1e-9
    if target == "c":   # both products' weights packed into panels, which unpack exactly
        assert build["originals_kept_mib"] == 0
    # the executable holds each weight once, in whatever layout the target packs it
    # (panels may pad): at least the weights, and not twice them
    assert weights <= build["packed_constants_mib"] < 2 * weights
    assert 0 <= build["packed_new_mib"] <= build["packed_constants_mib"]
    assert build["peak_pass"] and build["build_peak_mib"] >= build["pipeline_peak_mib"] > 0
    serve = memory._run_child("serve_plait", str(plx), "4x64:float32", "1")
    assert serve["compiler_modules"] == []
    assert serve["constants_mib"] == pytest.approx(build["packed_constants_mib"])
    assert serve["arenas_planned_mib"] >= 0
    assert 0 < serve["imports_s"] < serve["start_to_first_s"]
    text = memory.table([{"model": "mlp", "weights_mib": weights, "build": build,
                          "plait": {**serve, "plait_run_s": memory.plait_run_s(plx),
                                    **memory._run_child("load_heap", str(plx))},
                          "onnxruntime": {**serve}}], target)
    assert text.count("| mlp |") == 3 and "compiler modules imported" in text


def test_fixed_part_of_a_build_peak(tmp_path: Path):
    """A build's peak above the baseline is the model's: on a model of 96 KiB of
    weights the rest (IR, transients, the library) stays under 5 MiB.  The baseline
    holds the compiler's code and nothing else (the strict reading): the build does not
    make onnx's table of operator schemas (about 7 MiB resident, made whole at the
    first schema look-up; counted in the peak, it made the small models' builds above
    2x their weights, 9.3 MiB here): that table's first look-up after the build still
    costs it."""
    src, plx = tmp_path / "mlp.onnx", tmp_path / "mlp.plx"
    _mlp(src)
    memory._run_child("build", str(src), "c", str(plx))   # compiles the library if new
    build = memory._run_child("build", str(src), "c", str(plx))
    assert build["onnx_schemas_mib"] > 1 and not build["onnx_schemas_in_build"], build
    assert build["build_peak_mib"] < 5, build
