"""Each architecture plait.llm supports, from both importers: ``torch.export`` with the
cache (plait's convention, cache written in place) and an ONNX decoder in optimum's
layout.  Greedy generation of 32 tokens equals ``transformers``' ``generate()`` token
for token in float32, and prefill + 32 single-token decodes give the logits of
PyTorch's full recomputation (rtol 1e-4, atol 1e-5); on the numpy target.  Llama
(grouped-query attention) is also covered at length by test_llm_generate.py.  Mistral's
sliding window (6) is shorter than the 41 tokens, and the test checks that it matters.
The model, its ``torch.export``, ``transformers``' tokens and logits are made once per
worker (conftest.py) and shared by both importers' cases and the other files."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
from llm_models import VOCAB, export_optimum_onnx  # noqa: E402

from plait.llm import build_exported_lm, generate, load_causal_lm  # noqa: E402

ARCHS = ["llama", "gpt2", "qwen2", "mistral", "phi3"]


def _lm(arch: str, importer: str, model: Any, exported: Any, tmp_path: Any) -> Any:
    if importer == "torch":
        lm = build_exported_lm(exported(arch, max_cache=64, logits="all"), "numpy")
        assert lm.convention == "plait"
        return lm
    path = str(tmp_path / f"{arch}.onnx")
    export_optimum_onnx(model, path)
    lm = load_causal_lm(path, "numpy")
    assert lm.convention == "optimum"
    return lm


@pytest.mark.parametrize("importer", ["torch", "onnx"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_and_logits_equal_transformers(arch: str, importer: str, tiny: Any,
                                              exported: Any, hf_ref: Any, hf_logits: Any,
                                              tmp_path: Any) -> None:
    if arch == "llama" and importer == "torch":
        pytest.skip("test_llm_generate.py covers Llama through torch.export")
    model = tiny(arch)
    lm = _lm(arch, importer, model, exported, tmp_path)
    ids = np.random.default_rng(0).integers(0, VOCAB, (1, 9))
    want = hf_ref(arch, ids, 32)
    assert len(set(want[0, 9:].tolist())) > 8   # not a constant run of one token
    np.testing.assert_array_equal(generate(lm, ids, max_new_tokens=32), want)

    full = hf_logits(arch, want)
    cache = lm.new_cache(1)
    steps = [lm.step(want[:, :9], cache)]
    steps += [lm.step(want[:, i: i + 1], cache) for i in range(9, want.shape[1])]
    got = np.concatenate(steps, axis=1)
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-5)
    if arch == "mistral":   # the window is exercised: without it the logits differ
        window = model.config.sliding_window
        assert window == 6
        model.config.sliding_window = None
        try:
            with torch.no_grad():
                unwindowed = model(torch.from_numpy(want)).logits.numpy()
        finally:
            model.config.sliding_window = window   # the model is shared (conftest.py)
        assert np.abs(unwindowed - got).max() > 1e-2
