"""Weight-only int4/int8 language models (docs/dialects.md, "Weight-only quantization"):
``build_causal_lm(model, Target("c", weight_quant=...))`` generates, token for token, what
``transformers`` generates from the same model whose linear weights are replaced by
their dequantized form (onnxruntime's own quantizer, then ``float32(q - z) * scale``),
greedy, float32: the quantization of every projection (and of the lm_head, untied for
the reference) and the kernels that run them, end to end."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import plait
from plait.dialects.qnn import nbits

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
from llm_models import hf_greedy  # noqa: E402
from onnxruntime.capi._pybind_state import (  # noqa: E402
    quantize_matmul_4bits,
    quantize_matmul_8bits,
)


def dequantized_copy(model: Any, bits: int, group: int) -> Any:
    """``model`` with each ``nn.Linear`` weight quantized by onnxruntime's quantizer and
    dequantized (the lm_head untied from the embedding, which stays float)."""
    ref = copy.deepcopy(model)
    ref.lm_head.weight = torch.nn.Parameter(ref.lm_head.weight.detach().clone())
    fn = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    for mod in ref.modules():
        if isinstance(mod, torch.nn.Linear):
            w = mod.weight.detach().numpy().T.copy()   # K x N
            k, n = w.shape
            kb = nbits.k_blocks(k, group)
            b = np.zeros((n, kb, nbits.blob_size(group, bits)), np.uint8)
            z = np.zeros((n, nbits.zp_cols(kb, bits)), np.uint8)
            s = np.zeros((n, kb), np.float32)
            fn(b, np.pad(w, ((0, kb * group - k), (0, 0))), s, z, group, n, k, False)
            deq = nbits.dequantize_weights(b, s, z, k, bits, group)
            mod.weight = torch.nn.Parameter(torch.from_numpy(deq))
    return ref


def test_int4_generation_equals_the_dequantized_reference(tiny: Any, exported: Any,
                                                         hf_ref: Any) -> None:
    """int4 in groups of 32 on c (int8 and the other groups: tests/dialects/qnn).  The
    export (cache of 48, the last position's logits) is shared with the other files'
    ``c`` builds (conftest.py)."""
    from plait.llm import build_exported_lm

    model = tiny("llama")
    ids = np.random.default_rng(0).integers(0, 256, (1, 5))
    want = hf_greedy(dequantized_copy(model, 4, 32), ids, 24)
    lm = build_exported_lm(exported("llama", max_cache=48, logits="last"),
                           plait.Target("c", weight_quant="int4-g32"))
    got = plait.generate(lm, ids, 24)
    np.testing.assert_array_equal(got, want)
    # and the float model generates something else: the quantization is in effect
    assert not np.array_equal(hf_ref("llama", ids, 24), want)
