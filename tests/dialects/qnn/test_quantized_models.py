"""The mission's first scenario: models quantized by onnxruntime's own tools import and
build with ``plait.build(mod, target)`` alone (no dialect pass named), on ``numpy`` and
``c``, and compute what onnxruntime computes.

Integer results (the quantized tensor the model's last DequantizeLinear reads) equal
onnxruntime's exactly: the qnn ops reproduce its kernels bit for bit, and the QDQ models
are canonicalized into the fused ops onnxruntime runs for them.  Float outputs of the
statically quantized models are within 1e-5 of onnxruntime's largest magnitude: they
come from an exact integer tensor through a dequantization, or from a float layer
normalization (the encoder's last op) whose summation order differs in the last bits.
Dynamically quantized models are within 1% (the issue's bound): their activations are
quantized with scales taken from float values at run time, so a last-bit difference in
a float op before them (a layer normalization, a softmax) can move a scale and shift a
whole tensor by up to one quantization step.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from qnn_models import FORMATS, quantize, sample, with_integer_output  # noqa: E402

import plait  # noqa: E402
from plait.frontend.onnx import from_onnx  # noqa: E402
from plait.runtime.vm import VirtualMachine  # noqa: E402

MODELS = ("mlp", "cnn", "encoder")


@pytest.fixture(scope="session")
def quantized_models(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = str(tmp_path_factory.mktemp("qnn_models"))
    return {(m, f): with_integer_output(quantize(m, f, d)) for m in MODELS for f in FORMATS}


def _onnxruntime(path: str, x: np.ndarray) -> list[np.ndarray]:
    """onnxruntime's outputs, of its exact arithmetic where this CPU's onnxruntime
    saturates uint8 x int8 products (qnn_ort.run_ort)."""
    import onnx
    from qnn_ort import run_ort

    return run_ort(onnx.load(path), {"x": x})


@pytest.mark.parametrize("target", ["numpy", "c"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model", MODELS)
def test_quantized_model_matches_onnxruntime(quantized_models: dict, model: str, fmt: str,
                                             target: str) -> None:
    path, int_name = quantized_models[(model, fmt)]
    exe = plait.build(from_onnx(path), target)
    vm = VirtualMachine(exe)
    for seed in (1, 2):
        x = sample(model, seed)
        want = _onnxruntime(path, x)
        got = vm["main"](x)
        got = list(got) if isinstance(got, tuple | list) else [got]
        got = [np.asarray(g) for g in got]
        y, ref = got[0], want[0]
        assert y.shape == ref.shape and y.dtype == ref.dtype
        err = float(np.abs(y - ref).max())
        bound = 1e-2 if fmt == "dyn" else 1e-5
        assert err <= bound * float(np.abs(ref).max()), f"{model}/{fmt} on {target}: {err}"
        if int_name is not None:
            np.testing.assert_array_equal(got[1], want[1])
