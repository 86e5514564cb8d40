"""Whisper's encoder with a dynamic number of frames (and batch), through the dynamo
ONNX exporter and through ``torch.export``: imported with the sizes open, built once for
``c`` (the ONNX import without ranges: for numpy) and run at two lengths (an even
and an odd one), matching onnxruntime on the same file, and eager PyTorch (float32,
rtol 1e-4, atol 1e-5; the largest difference seen is 8e-7).

transformers' ``WhisperEncoder.forward`` refuses any length but
``2 * max_source_positions`` frames (it checks ``input_features.shape[-1]``), so the
exported module runs the encoder's own layers and slices the position table to the
length, as variable-length Whisper encoders do (whisper.cpp's ``audio_ctx``).  A tiny
random config built from a ``WhisperConfig`` (2 layers, d_model 64); nothing is
downloaded.

The convolution's output length is ``(frames + 1) // 2`` in plait's type inference; the
exporter computes it as ``Div(frames - 1, 2) + 1`` (ONNX's truncating ``Div``), which
differs at ``frames == 0``: imported as ``max(0, frames - 1) // 2 + 1``, exact for every
length.  With the range of ``frames`` (4 to 128, the ``Dim``'s: the import reads it from
the file, where the dynamo exporter records it) both are ``(frames + 1) // 2`` and no
``match_cast`` is left; without ranges the reshapes of the attention heads bind fresh
sizes, checked when the model runs."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import plait  # noqa: E402
from plait.frontend import from_exported_program, from_onnx  # noqa: E402
from plait.frontend.onnx.export_ranges import RANGES_KEY  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402

MELS = 8
LENGTHS = [(1, MELS, 20), (2, MELS, 37)] + (
    [(3, MELS, 64)] if os.environ.get("PLAIT_FULL_MODEL_MATRIX") == "1" else [])
"""Two lengths (even and odd); ``PLAIT_FULL_MODEL_MATRIX=1`` adds a third (batch,
length) pair, issue 29's three (the suite keeps two for its time)."""
TOL = {"rtol": 1e-4, "atol": 1e-5}


class _Encoder(torch.nn.Module):
    """``WhisperEncoder.forward`` without its fixed-length check: the position table is
    sliced to the length the convolutions give."""

    def __init__(self) -> None:
        super().__init__()
        cfg = transformers.WhisperConfig(
            vocab_size=100, num_mel_bins=MELS, d_model=64, encoder_layers=2,
            encoder_attention_heads=4, encoder_ffn_dim=128, decoder_layers=1,
            decoder_attention_heads=4, decoder_ffn_dim=128, max_source_positions=64,
            max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=1,
        )  # fmt: skip
        self.e = transformers.WhisperModel(cfg).encoder

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        e = self.e
        x = torch.nn.functional.gelu(e.conv1(feats))
        x = torch.nn.functional.gelu(e.conv2(x)).permute(0, 2, 1)
        x = x + e.embed_positions.weight[: x.shape[1]]
        for layer in e.layers:
            x = layer(x, None)
        return e.layer_norm(x)


def _dims() -> dict[int, object]:
    Dim = torch.export.Dim
    return {0: Dim("batch", min=1, max=8), 2: Dim("frames", min=4, max=128)}


@pytest.fixture(scope="module")
def encoder() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Encoder().eval()


@pytest.fixture(scope="module")
def onnx_path(encoder: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whisper") / "encoder.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(encoder, (torch.randn(2, MELS, 40),), str(path), dynamo=True,
                          input_names=["feats"], output_names=["out"],
                          dynamic_shapes=(_dims(),), opset_version=18)  # fmt: skip
    return path


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in LENGTHS]


def _without_ranges(path: Path) -> onnx.ModelProto:
    """The export without the range constraints the dynamo exporter records."""
    m = onnx.load(str(path))
    kept = [p for p in m.graph.metadata_props if p.key != RANGES_KEY]
    assert len(kept) == len(m.graph.metadata_props) - 1
    del m.graph.metadata_props[:]
    m.graph.metadata_props.extend(kept)
    return m


@pytest.fixture(scope="module")
def onnxruntime_runs(onnx_path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(input, onnxruntime's output)] at the lengths of ``_inputs()`` and then at the
    maxima of the ranges (batch 8, 128 frames): one session, for both imports."""
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    largest = np.random.default_rng(1).standard_normal((8, MELS, 128)).astype(np.float32)
    runs = []
    for x in _inputs() + [largest]:
        (ref,) = sess.run(None, {"feats": x})
        runs.append((x, ref))
    return runs


@pytest.mark.parametrize("ranges", [False, True], ids=["open", "recorded"])
def test_dynamo_onnx_export_runs_at_two_lengths_from_one_build(
    onnx_path: Path, onnxruntime_runs: list[tuple[np.ndarray, np.ndarray]], ranges: bool
) -> None:
    """The ranges of the ``Dim``s are read from the file (``recorded``): no ``dim_ranges``
    is passed; without them in the file (``open``) the sizes have none."""
    mod = from_onnx(str(onnx_path) if ranges else _without_ranges(onnx_path))
    assert mod.attrs.get("dim_ranges") == ({"batch": (1, 8), "frames": (4, 128)} if ranges
                                           else None)
    assert str(mod["main"].params[0].ty) == f'Tensor((batch, {MELS}, frames), "float32")'
    assert str(mod["main"].body.ty) == 'Tensor((batch, (frames + 1) // 2, 64), "float32")'
    assert ("match_cast" in mod.script()) == (not ranges)
    # with ranges: on c, memory planned once at their maxima (docs/ir.md), run at the
    # maxima too; without: on numpy (the match_cast path; one c build of this model is
    # enough for the suite's time)
    target = plait.Target("c", memory_at_range_max=True) if ranges else plait.Target("numpy")
    vm = VirtualMachine(plait.build(mod, target))
    runs = onnxruntime_runs if ranges else onnxruntime_runs[:-1]   # the maxima: in range
    assert len(runs) == len(LENGTHS) + ranges
    for x, ref in runs:
        got = np.asarray(vm["main"](x))
        assert got.shape == ref.shape == (x.shape[0], (x.shape[2] + 1) // 2, 64)
        np.testing.assert_allclose(got, ref, **TOL)


def test_torch_export_runs_at_two_lengths_from_one_c_build(encoder: torch.nn.Module) -> None:
    ep = torch.export.export(encoder, (torch.randn(2, MELS, 40),), dynamic_shapes=(_dims(),))
    mod = from_exported_program(ep)
    vm = VirtualMachine(plait.build(mod, "c"))
    for x in _inputs():
        with torch.no_grad():
            ref = encoder(torch.from_numpy(x)).numpy()
        got = np.asarray(vm["main"](x))
        assert got.shape == ref.shape == (x.shape[0], (x.shape[2] + 1) // 2, 64)
        np.testing.assert_allclose(got, ref, **TOL)
