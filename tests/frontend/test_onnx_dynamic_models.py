"""Real architectures exported to ONNX with dynamic axes (``torch.onnx.export``, the
TorchScript exporter, as every ``transformers`` recipe does) import with their sizes
symbolic, build once, and run at three (batch, sequence) pairs — or image sizes — from
the one executable, matching onnxruntime on the same file.

The shape subgraphs these exporters write (``Shape``/``Gather``/``Concat`` into
``Slice`` ends, ``Where(Equal(shape, -1), 1, shape)`` before ``Expand``, a causal
``Trilu`` of ``seq`` by ``seq``) are evaluated with size expressions
(plait/ir/symbolic.py) at import time.  Tiny configurations with random weights; nothing
is downloaded.  Tolerance: rtol 1e-4, atol 1e-4 (float32 through two layers; the
largest difference seen is 3e-6)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import plait
from plait.frontend.onnx import from_onnx
from plait.runtime import VirtualMachine
from plait.runtime.vm import VMInputError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

TEXT_SIZES = [(1, 7), (2, 16), (3, 33)]


class _Hidden(torch.nn.Module):
    """The model's last hidden state from one named input."""

    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.model(**{self.key: x}).last_hidden_state


def _text_model(name: str) -> torch.nn.Module:
    t = transformers
    if name == "bert":
        return t.BertModel(t.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=128,
                                        max_position_embeddings=128))
    if name == "gpt2":
        return t.GPT2Model(t.GPT2Config(vocab_size=500, n_embd=64, n_layer=2, n_head=4,
                                        n_positions=128))
    if name == "llama":  # grouped-query attention (2 key/value heads for 4)
        return t.LlamaModel(t.LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, max_position_embeddings=128,
                                          attn_implementation="eager"))
    assert name == "t5_encoder"
    return t.T5EncoderModel(t.T5Config(vocab_size=500, d_model=64, d_kv=16, d_ff=128,
                                       num_layers=2, num_heads=4))


def _export(model: torch.nn.Module, key: str, example: torch.Tensor, axes: dict[int, str],
            path: Path) -> str:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Hidden(model.eval(), key), (example,), str(path), input_names=[key],
                          output_names=["hidden"], dynamic_axes={key: axes, "hidden": {0: "b"}},
                          opset_version=17, dynamo=False)
    return str(path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("dynamic")
    torch.manual_seed(0)
    paths = {}
    for name in ("bert", "gpt2", "llama", "t5_encoder"):
        paths[name] = _export(_text_model(name), "input_ids", torch.randint(0, 500, (2, 16)),
                              {0: "batch", 1: "seq"}, d / f"{name}.onnx")
    vit = transformers.ViTModel(transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        image_size=32, patch_size=8))
    paths["vit"] = _export(vit, "pixel_values", torch.randn(2, 3, 32, 32), {0: "batch"},
                           d / "vit.onnx")
    resnet = transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"))
    paths["resnet"] = _export(resnet, "pixel_values", torch.randn(2, 3, 64, 64),
                              {0: "batch", 2: "height", 3: "width"}, d / "resnet.onnx")
    return paths


def _inputs(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    if name == "vit":
        return [rng.standard_normal((b, 3, 32, 32)).astype(np.float32) for b in (1, 2, 3)]
    if name == "resnet":  # batch, height and width all open
        return [rng.standard_normal(s).astype(np.float32)
                for s in ((1, 3, 64, 64), (2, 3, 48, 80), (3, 3, 33, 47))]
    return [rng.integers(0, 500, s).astype(np.int64) for s in TEXT_SIZES]


@pytest.fixture(scope="module")
def imported() -> dict[str, tuple[Any, list]]:
    """name -> (imported module, [(input, onnxruntime's output)]), filled as the tests
    ask: each model is imported and run on onnxruntime once, for both targets (a build
    leaves the module it is given as it was)."""
    return {}


def _imported(cache: dict[str, tuple[Any, list]], path: str, name: str
              ) -> tuple[Any, list[tuple[np.ndarray, np.ndarray]]]:
    if name not in cache:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        key = sess.get_inputs()[0].name
        runs = [(x, sess.run(None, {key: x})[0]) for x in _inputs(name)]
        cache[name] = (from_onnx(path), runs)
    return cache[name]


def _check(cache: dict[str, tuple[Any, list]], path: str, name: str, target: str) -> None:
    mod, runs = _imported(cache, path, name)
    (param,) = mod["main"].params
    assert not all(isinstance(d, int) for d in param.ty.shape)  # the sizes stay open
    vm = VirtualMachine(plait.build(mod, target))  # built once
    shapes = set()
    for x, want in runs:
        got = vm["main"](x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        shapes.add(got.shape)
    assert len(shapes) == 3


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5_encoder", "vit", "resnet"])
def test_dynamic_axes_import_and_run_on_numpy(exported: dict[str, str],
                                              imported: dict[str, tuple[Any, list]],
                                              name: str) -> None:
    _check(imported, exported[name], name, "numpy")


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5_encoder", "vit", "resnet"])
def test_dynamic_axes_run_natively(exported: dict[str, str],
                                   imported: dict[str, tuple[Any, list]], name: str) -> None:
    _check(imported, exported[name], name, "c")


def test_the_sizes_the_model_names_are_symbols_of_the_types(exported: dict[str, str]) -> None:
    mod = from_onnx(exported["bert"])
    assert str(mod["main"].params[0].ty) == 'Tensor((batch, seq), "int64")'
    out = mod["main"].body.ty
    assert tuple(out.shape) == ("batch", "seq", 64)


def test_inputs_that_disagree_on_a_size_are_refused(tmp_path) -> None:
    """Two inputs sharing ``seq``: run with different lengths, the VM names both."""
    model = _Two()
    path = tmp_path / "two.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 5), torch.randn(2, 5)), str(path),
                          input_names=["a", "b"], output_names=["y"],
                          dynamic_axes={"a": {0: "batch", 1: "seq"}, "b": {0: "batch", 1: "seq"}},
                          opset_version=17, dynamo=False)
    vm = VirtualMachine(plait.build(from_onnx(str(path)), "numpy"))
    a = np.ones((2, 5), np.float32)
    np.testing.assert_allclose(vm["main"](a, a), 2 * a)
    with pytest.raises(VMInputError, match="parameter 'b': dimension 1 is 6 but symbolic "
                                           "size 'seq' was bound to 5 by parameter 'a'"):
        vm["main"](a, np.ones((2, 6), np.float32))


class _Two(torch.nn.Module):
    def forward(self, a, b):  # type: ignore[no-untyped-def]
        return a + b
