"""Whole models through ``from_torch``, checked against PyTorch eager on the same inputs.

Architectures from ``transformers`` built from configs with seeded random weights
(nothing is downloaded): BERT (2 layers), a Llama-style decoder (2 layers: RMSNorm,
rotary embeddings, grouped-query causal attention, SiLU-gated MLP), ResNet-50 (its
real depths and widths, on 64x64 images) and Whisper-tiny's encoder (its 4 layers of
384, on 200 frames: the config's ``max_source_positions`` sets the length the encoder
takes); and the project's own MLP, CNN and transformer layer (examples/export_models.py).
Hidden sizes are small where a config allows, to keep the set fast.

Each model is exported once with a dynamic batch (``torch.export.Dim``), imported once,
built once per target (``numpy`` and ``c``) and run at two batch sizes that differ from
the example's.  Tolerance: float32 outputs within rtol 1e-4 and atol 1e-5 * max(1,
max |eager|) of eager PyTorch (the absolute part scales with the output: LayerNorm'd
hidden states and logits are of order 1 to 10); integer outputs exactly.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import plait
from plait.runtime import VirtualMachine

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from plait.frontend.torch import from_torch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TARGETS = ("numpy", "c")


@dataclass
class Case:
    """A model to test: ``make()`` builds the module (eval mode, seeded weights);
    ``inputs(batch, seed)`` makes its example inputs (a tuple of tensors); the batch
    is dimension 0 of every input; ``batches`` are the sizes the compiled model runs
    at (the export's example has batch 2)."""

    make: Callable[[], Any]
    inputs: Callable[[int, int], tuple]
    batches: tuple[int, int] = (1, 3)


def _hf(model_class: str, config_class: str, config: dict, output: str,
        encoder_only: bool = False, **init: Any) -> Any:
    """A ``transformers`` model from a config, seeded, returning one output tensor."""
    torch.manual_seed(0)
    cfg = getattr(transformers, config_class)(**config)
    model = getattr(transformers, model_class)(cfg, **init).eval()
    inner = model.encoder if encoder_only else model

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return getattr(self.inner(x), output)

    return Wrapped().eval()


def _tokens(vocab: int, seq: int) -> Callable[[int, int], tuple]:
    def make(batch: int, seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, vocab, (batch, seq), generator=g),)
    return make


def _floats(*shape: int) -> Callable[[int, int], tuple]:
    def make(batch: int, seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, *shape, generator=g),)
    return make


def _project(name: str) -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        from export_models import MODELS, _randomize_batch_norm  # noqa: PLC0415
    finally:
        sys.path.remove(str(EXAMPLES))
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    _randomize_batch_norm(model, 0)
    return model


def _resnet50() -> Any:
    model = _hf("ResNetForImageClassification", "ResNetConfig", {"num_labels": 10}, "logits")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():   # batch norms with statistics of their own (fresh ones are 0, 1)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


CASES: dict[str, Case] = {
    "bert": Case(
        lambda: _hf("BertModel", "BertConfig",
                    {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "intermediate_size": 128, "vocab_size": 500,
                     "max_position_embeddings": 64}, "last_hidden_state",
                    add_pooling_layer=False),
        _tokens(500, 16)),
    "llama": Case(
        lambda: _hf("LlamaModel", "LlamaConfig",
                    {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 500,
                     "max_position_embeddings": 64, "use_cache": False},
                    "last_hidden_state"),
        _tokens(500, 16)),
    "resnet50": Case(_resnet50, _floats(3, 64, 64), batches=(1, 3)),
    "whisper-encoder": Case(
        lambda: _hf("WhisperModel", "WhisperConfig",
                    {"max_source_positions": 100}, "last_hidden_state", encoder_only=True),
        _floats(80, 200)),
    "mlp": Case(lambda: _project("mlp"), _floats(784)),
    "cnn": Case(lambda: _project("cnn"), _floats(3, 32, 32)),
    "transformer": Case(lambda: _project("transformer"), _floats(32, 256)),
}


@pytest.fixture(scope="module", params=list(CASES))
def imported(request: pytest.FixtureRequest
             ) -> tuple[Case, Any, list[tuple[int, tuple, np.ndarray]]]:
    """(case, imported IRModule, [(batch, inputs, eager output)] at the case's batch
    sizes): exported with a dynamic batch; eager PyTorch runs once, for both targets."""
    case = CASES[request.param]
    model = case.make()
    example = case.inputs(2, 0)
    batch = torch.export.Dim("batch", min=1, max=16)
    dynamic = tuple({0: batch} for _ in example)
    with torch.no_grad():
        mod = from_torch(model, example, dynamic_shapes=dynamic)
    runs = []
    for b in case.batches:
        inputs = case.inputs(b, 1 + b)
        with torch.no_grad():
            runs.append((b, inputs, model(*inputs).numpy()))
    return case, mod, runs


def _scale_atol(want: np.ndarray) -> float:
    return ATOL * max(1.0, float(np.max(np.abs(want)))) if want.size else ATOL


@pytest.mark.parametrize("target", TARGETS)
def test_matches_eager_at_two_batch_sizes(
        imported: tuple[Case, Any, list[tuple[int, tuple, np.ndarray]]], target: str) -> None:
    case, mod, runs = imported
    vm = VirtualMachine(plait.build(mod, target=target))
    main = vm.executable.functions["main"]
    assert main.params[0].shape[0] == "batch"       # the dynamic batch is kept
    assert [b for b, _, _ in runs] == list(case.batches)
    for batch, inputs, want in runs:
        got = vm["main"](*inputs)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=_scale_atol(want),
                                   err_msg=f"batch {batch} on {target}")
