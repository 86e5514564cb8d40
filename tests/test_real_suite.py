"""The real-model benchmark suite (``benchmarks/run.py --suite real``): its summary
(ratios, geometric mean, refused models) on made-up figures worked out by hand, the
output check, the export cache key, and one tiny transformers architecture exported by
the suite's own code, imported and run on numpy and c against onnxruntime."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import real_models  # noqa: E402
import run  # noqa: E402


def _r(model: str, backend: str, ms: float | None = None, error: str | None = None) -> dict:
    return {"model": model, "backend": backend,
            **({"error": error} if error else {"median_ms": ms})}


def test_suite_report_geomean_and_refusals() -> None:
    results = [
        _r("bert", "onnxruntime", 10.0), _r("bert", "plait-c", 20.0),
        _r("llama", "onnxruntime", 4.0), _r("llama", "plait-c", 2.0),
        _r("vit", "onnxruntime", 5.0), _r("vit", "plait-c", 5.0),
        _r("gpt2", "onnxruntime", 3.0),
        _r("gpt2", "plait-c", error="outputs disagree with onnxruntime: max abs error 1e-1"),
        _r("convnext", "onnxruntime", 3.0),
        _r("convnext", "plait-c", error="OnnxImportError: no converter for Foo"),
    ]
    table, problems = run.suite_report(results)
    assert "| bert | 10.000 | 20.000 | 2.00 |" in table
    assert "| llama | 4.000 | 2.000 | 0.50 |" in table
    # ratios 2, 0.5, 1: geometric mean 1; the refused and failed models are left out
    assert ("geomean plait-c / onnxruntime over 3 models: 1.00 (left out: gpt2, convnext)"
            in table)
    assert "| gpt2 | 3.000 | **REFUSED**: outputs disagree" in table
    assert "| convnext | 3.000 | **FAILED**: OnnxImportError" in table
    assert len(problems) == 2 and problems[0].startswith("gpt2 on plait-c: refused")


def test_suite_report_sets_plait_against_the_best_peer() -> None:
    """With OpenVINO beside onnxruntime, each model's best peer is the faster of the two;
    plait's geometric mean against it and its largest ratio are printed; a peer that
    cannot run a model is shown but is no problem of plait's."""
    results = [_r("bert", "onnxruntime", 10.0), _r("bert", "openvino", 8.0),
               _r("bert", "plait-c", 8.0),
               _r("gpt2", "onnxruntime", 4.0), _r("gpt2", "openvino", 5.0),
               _r("gpt2", "plait-c", 5.0),
               _r("qop", "onnxruntime", 2.0),
               _r("qop", "openvino", error="RuntimeError: QLinearConv is not supported"),
               _r("qop", "plait-c", 1.0)]
    table, problems = run.suite_report(results)
    assert table.splitlines()[0].startswith("| model | onnxruntime ms | best peer | ")
    assert "| bert | 10.000 | openvino 8.000 | 8.000 | 0.80 |" in table
    assert "| gpt2 | 4.000 | onnxruntime 4.000 | 5.000 | 1.25 |" in table
    assert "| qop | 2.000 | onnxruntime 2.000 | **FAILED**: RuntimeError" in table
    # plait-c / best: 8/8 = 1, 5/4 = 1.25, 1/2 = 0.5: geomean (0.625)^(1/3) = 0.855
    assert ("geomean plait-c / best peer (the faster of onnxruntime and openvino per "
            "model) over 3 models: 0.85 (largest 1.25)") in table
    assert problems == []


@pytest.mark.skipif(not run._has("openvino"), reason="openvino is not installed")
def test_the_openvino_backend_matches_onnxruntime(tmp_path) -> None:
    """OpenVINO, configured like for like (f32, 2 threads, latency), computes what
    onnxruntime computes on a small model (rtol 1e-4) and reports f32 inference."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for backend in ("onnxruntime", "openvino"):
        result, fn = run.prepare("m", backend, path, str(tmp_path / "x.npy"))
        outs[backend] = np.asarray(fn())
    assert "float32" in result["precision"]  # no bf16 or f16 inference
    np.testing.assert_allclose(outs["openvino"], outs["onnxruntime"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs["onnxruntime"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def test_suite_report_has_a_column_per_backend() -> None:
    """A backend added to the run (plait-c-before, plait-c+torch, a future importer) gets
    its own columns and its own geometric mean."""
    results = [_r("bert", "onnxruntime", 10.0), _r("bert", "plait-c", 8.0),
               _r("bert", "plait-c-before", 16.0),
               _r("gpt2", "onnxruntime", 2.0), _r("gpt2", "plait-c", 4.0),
               _r("gpt2", "plait-c-before", 4.0)]
    table, problems = run.suite_report(results)
    assert table.splitlines()[0] == ("| model | onnxruntime ms | plait-c ms | plait-c / "
                                     "onnxruntime | plait-c-before ms | plait-c-before / "
                                     "onnxruntime |")
    assert "| bert | 10.000 | 8.000 | 0.80 | 16.000 | 1.60 |" in table
    # sqrt(0.8 * 2) = 1.26; sqrt(1.6 * 2) = 1.79
    assert "geomean plait-c / onnxruntime over 2 models: 1.26" in table
    assert "geomean plait-c-before / onnxruntime over 2 models: 1.79" in table
    assert problems == []
    assert math.isclose(run.geomean([2.0, 8.0]), 4.0)


def test_outputs_disagree_scales_the_absolute_tolerance() -> None:
    ref = np.array([100.0, 0.0, -3.0], np.float32)
    # atol 1e-4 * 100 = 1e-2 on every element, plus 1e-3 * |ref|
    assert run.outputs_disagree(ref + np.float32(0.009), ref) is None
    msg = run.outputs_disagree(np.array([100.0, 0.02, -3.0], np.float32), ref)
    assert msg is not None and "max abs error 2.00e-02" in msg and "tolerance 1.0e-02" in msg
    assert "shape (2,)" in (run.outputs_disagree(ref[:2], ref) or "")
    assert run.outputs_disagree(np.array([np.nan, 0, -3], np.float32), ref) is not None


def test_run_rejects_models_of_the_other_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--suite", "real", "--models", "mlp"]) == 2
    assert "--models: unknown mlp; choose from resnet50" in capsys.readouterr().out
    assert run.main(["--models", "bert"]) == 2
    assert "choose from mlp" in capsys.readouterr().out


def test_cache_key_follows_the_spec_and_the_versions() -> None:
    spec = real_models.MODELS["bert"]
    v = {"torch": "2.13.0", "transformers": "5.0"}
    key = real_models.cache_key(spec, v)
    assert key == real_models.cache_key(spec, dict(v))
    assert key != real_models.cache_key(spec, {**v, "transformers": "5.1"})
    other = real_models.RealModel(**{**spec.__dict__, "config": {"num_hidden_layers": 2}})
    assert key != real_models.cache_key(other, v)


TINY_BERT = real_models.RealModel(
    "BertModel", "BertConfig",
    {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
     "intermediate_size": 48, "vocab_size": 101, "max_position_embeddings": 16},
    (1, 9), "int64", "input_ids", "last_hidden_state", vocab=101,
    init={"add_pooling_layer": False})


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("real") / "tiny-bert.onnx"
    real_models.export(TINY_BERT, path)
    return str(path), real_models.make_input(TINY_BERT)


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_a_tiny_bert_exported_by_the_suite_matches_onnxruntime(
        tiny_bert: tuple[str, np.ndarray], target: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine

    path, ids = tiny_bert
    assert ids.dtype == np.int64 and ids.shape == (1, 9) and ids.max() < 101
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": ids})[0]
    exe = plait.build(from_onnx(path, shapes={"input": ids.shape}), target)
    got = np.asarray(VirtualMachine(exe)["main"](ids))
    assert got.shape == (1, 9, 32)
    assert run.outputs_disagree(got, want) is None
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_from_torch_backend_runs_the_torch_export_import(
        tiny_bert: tuple[str, np.ndarray], tmp_path: Path) -> None:
    """The from_torch worker: the suite's torch.export program of the same model,
    converted to an executable in a child process (benchmarks/torch_import.py convert),
    loaded and run by a process that has not imported torch for it; its output matches
    onnxruntime's on the ONNX export of the same weights (rtol 1e-4, atol 1e-5)."""
    ort = pytest.importorskip("onnxruntime")
    path, ids = tiny_bert
    pt2 = tmp_path / "tiny-bert.pt2"
    real_models.export_pt2(TINY_BERT, pt2)
    inp = tmp_path / "ids.npy"
    np.save(inp, ids)
    result, fn = run.prepare("tiny-bert", "from_torch", str(pt2), str(inp))
    assert set(result["compile_s"]) == {"load", "import", "pipeline", "c_compile", "total"}
    assert "single native entry point" in result["execution"]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": ids})[0]
    got = np.asarray(fn())
    assert run.outputs_disagree(got, want) is None
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_from_torch_is_a_backend_of_the_real_suite_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--models", "mlp", "--backends", "onnxruntime,from_torch"]) == 2
    assert "from_torch runs in --suite real only" in capsys.readouterr().out
    assert run.main(["--suite", "quantized", "--backends", "onnxruntime,from_torch"]) == 2
    assert "from_torch runs in --suite real only" in capsys.readouterr().out
    assert "from_torch" in run.REAL_BACKENDS.split(",")


def test_profile_summary_is_the_median_per_callee_and_families() -> None:
    """benchmarks/profile_models.py: medians over runs (a run without a callee counts
    0), largest first, and the families of the callee names plait generates."""
    import profile_models as pm

    rows = pm.summarize([{"plait_gemm_ab": 3.0, "fused_erf": 1.0},
                         {"plait_gemm_ab": 5.0}, {"plait_gemm_ab": 4.0, "fused_erf": 2.0}])
    assert rows == [("plait_gemm_ab", 4.0), ("fused_erf", 1.0)]
    assert [pm.family(n) for n in ("plait_gemm_1de9", "plait_conv2d_f91d", "blas.conv2d",
                                   "plait_attention_56a3", "fused_divide_erf_add_multiply",
                                   "layer_norm", "plait_conv2d_winograd4_x", "split")] == [
        "gemm", "conv", "conv", "attention", "fused elementwise", "norm", "winograd conv",
        "other"]
    text = pm.table(rows, "callee", 1)
    assert "| plait_gemm_ab | 4000.000 | 80.0% |" in text
    assert "| (1 more) | 1000.000 | 20.0% |" in text


def test_profile_steps_table_is_the_longest_calls_with_median_and_minimum() -> None:
    """benchmarks/profile_models.py --steps: per call the median and the minimum over the
    runs (microseconds), longest median first; the sums and the whole inference."""
    import profile_models as pm

    prof = pm.Profile(per_run=[], calls=["0: conv", "1: gemm", "2: pool"],
                      call_seconds=[[1e-4, 5e-4, 1e-5], [2e-4, 3e-4, 2e-5],
                                    [4e-4, 4e-4, 3e-5]],
                      totals=[9e-4, 7e-4, 8e-4])
    lines = pm.steps_table(prof, 2).splitlines()
    assert lines[2:4] == ["| 1: gemm | 400 | 300 |", "| 0: conv | 200 | 100 |"]
    assert lines[4] == "| **sum of 3 calls** | 620 | 410 |"
    assert lines[5] == "| **whole inference** | 800 | 700 |"


def test_conv_layers_takes_max_pools(tmp_path: Path) -> None:
    """benchmarks/conv_layers.py --op pool: a model's MaxPool nodes, deduplicated, with
    their sizes from a run; each one-node model computes the model's pooling (numpy's
    maximum over each window, exact)."""
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    import conv_layers
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    layers = conv_layers.extract_layers(path, "pool")
    assert [(layer["desc"], layer["count"]) for layer in layers] == [
        ("MaxPool 3x3 s2 p1 1x4x12x12", 1), ("MaxPool 2x2 s2 p0 1x4x6x6", 1)]
    x = np.random.default_rng(1).standard_normal((1, 4, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(conv_layers.layer_model(layers[0]),
                                providers=["CPUExecutionProvider"])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.array([[[[padded[0, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max()
                        for j in range(6)] for i in range(6)] for c in range(4)]])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
