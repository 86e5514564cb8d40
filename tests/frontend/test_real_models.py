"""Real models exported from PyTorch (examples/export_models.py): imported, built for
numpy, run, and compared with onnxruntime on the same inputs (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import plait  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.ir import Function, TensorType  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL, ATOL = 1e-4, 1e-5

INPUT_SHAPES = {
    "mlp": (784,),
    "cnn": (3, 32, 32),
    "transformer": (128, 256),
}


def _load_exporter() -> Any:
    spec = importlib.util.spec_from_file_location(
        "export_models", os.path.join(ROOT, "examples", "export_models.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    exporter = _load_exporter()
    out = tmp_path_factory.mktemp("models")
    return {name: exporter.export(name, str(out)) for name in INPUT_SHAPES}


def _ort(path: str, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def _plait(mod: Any, x: np.ndarray, target: str = "numpy") -> np.ndarray:
    vm = VirtualMachine(plait.build(mod, target=target))
    return np.asarray(vm["main"](x))


@pytest.mark.parametrize("name", list(INPUT_SHAPES))
def test_matches_onnxruntime(models: dict[str, str], name: str) -> None:
    batch = 2
    shape = (batch, *INPUT_SHAPES[name])
    mod = from_onnx(models[name], shapes={"input": shape})
    assert mod.phase == "ingestion"
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got, want = _plait(mod, x), _ort(models[name], x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_dynamic_batch_runs_at_several_sizes(models: dict[str, str], name: str) -> None:
    """Imported with the batch size symbolic, one executable runs every batch size."""
    mod = from_onnx(models[name])
    main = mod["main"]
    assert isinstance(main, Function)
    ty = main.params[0].ty
    assert isinstance(ty, TensorType) and ty.shape is not None and ty.shape[0] == "batch"
    vm = VirtualMachine(plait.build(mod, target="numpy"))
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, *INPUT_SHAPES[name]))
        x = x.astype(np.float32)
        np.testing.assert_allclose(
            np.asarray(vm["main"](x)), _ort(models[name], x), rtol=RTOL, atol=ATOL
        )


def test_transformer_dynamic_batch_keeps_shapes_symbolic(models: dict[str, str]) -> None:
    """The attention's Shape -> Gather -> Concat -> Reshape chains fold into reshapes typed
    with the symbolic batch size; no Shape computation is left, and the heads' reshape to
    ``batch * 4`` is typed with that product (no match_cast to a fresh size)."""
    mod = from_onnx(models["transformer"])
    text = mod.script()
    assert "shape_of" not in text and "match_cast" not in text
    types = {b.var.name_hint: str(b.var.ty) for blk in mod["main"].body.blocks
             for b in blk.bindings}
    assert types["_layer_self_attn_Reshape_3_output_0"] == \
        'Tensor((128, batch * 4, 64), "float32")'
    assert types["_layer_self_attn_Reshape_6_output_0"] == \
        'Tensor((batch, 4, 128, 64), "float32")'
    main = mod["main"]
    assert isinstance(main, Function) and isinstance(main.body.ty, TensorType)
    assert main.body.ty.shape == ("batch", 128, 256)


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_transformer_dynamic_batch_runs(models: dict[str, str], target: str) -> None:
    """Symbolic sizes in attributes (reshape to (batch, 4, 128, 64)) and sizes that a
    match_cast introduces are bound at run time; one executable serves every batch."""
    mod = from_onnx(models["transformer"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 128, 256)).astype(np.float32)
        np.testing.assert_allclose(
            _plait(mod, x, target), _ort(models["transformer"], x), rtol=RTOL, atol=ATOL
        )


def test_bindings_remember_their_onnx_nodes(models: dict[str, str]) -> None:
    mod = from_onnx(models["cnn"], shapes={"input": (1, 3, 32, 32)})
    main = mod["main"]
    assert isinstance(main, Function)
    notes = [b.value.span.note for blk in main.body.blocks for b in blk.bindings if b.value.span]
    assert any(n.endswith("(Conv)") and "/stem/" in n for n in notes)
    assert any(n.endswith("(Gemm)") for n in notes)


def test_shapes_fold_batch_norm_free_of_shape_ops(models: dict[str, str]) -> None:
    """A static import leaves no shape computations and no symbolic sizes."""
    mod = from_onnx(models["transformer"], shapes={"input": (2, 128, 256)})
    text = mod.script()
    assert "shape_of" not in text and '"batch"' not in text
