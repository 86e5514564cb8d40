"""Generation on ``c`` through the decode kernels (plait/target/c/kernels/decode, issue
31 item 3): a tiny random-weight Llama with grouped-query attention (4 query heads, 2
key/value heads) built with ``decode_min_weights=0``, so every product by a weight is
``plait_gemv`` (``plait_gemm`` for prefill rows) and every layer's attention one
``plait_kv_attention`` over the cache.  Greedy generation equals ``transformers``'
``generate()`` token for token (float32, 32 tokens, batch 1 and 2), and prefill +
decode logits (a prompt, single decodes, then two tokens at once: a prompt after
cached rows) equal PyTorch's full recomputation (rtol 1e-4, atol 1e-4)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from llm_models import VOCAB  # noqa: E402

import plait  # noqa: E402
from plait.llm import build_exported_lm, generate  # noqa: E402


@pytest.fixture(scope="module")
def lm_c(exported: Any) -> Any:
    # build_causal_lm's default logits ("last"); the export is shared (conftest.py)
    return build_exported_lm(exported("llama", max_cache=48, logits="last"),
                             plait.Target("c", decode_min_weights=0))


def test_every_layer_runs_the_decode_kernels(lm_c: Any) -> None:
    calls = re.findall(r"call ([\w.]+)\(", lm_c.session.executable.as_text())
    assert sum(c.startswith("plait_kv_attention_") for c in calls) == 2    # one per layer
    # q, k, v, o, gate, up, down per layer and the head: 15 products, none packed
    assert sum(c.startswith("plait_dlinear_") for c in calls) == 15
    assert not any(c.startswith(("plait_gemm_", "softmax", "numpy.")) for c in calls), calls


def test_greedy_through_the_kernels_equals_transformers(hf_ref: Any, lm_c: Any) -> None:
    ids = np.random.default_rng(2).integers(0, VOCAB, (1, 9))
    np.testing.assert_array_equal(generate(lm_c, ids, max_new_tokens=32),
                                  hf_ref("llama", ids, 32))
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, 5))
    want = np.concatenate([hf_ref("llama", ids[i: i + 1], 32) for i in range(2)])
    np.testing.assert_array_equal(generate(lm_c, ids, max_new_tokens=32), want)


def test_prefill_and_decode_logits_equal_full_recomputation(hf_logits: Any, lm_c: Any
                                                            ) -> None:
    ids = np.random.default_rng(3).integers(0, VOCAB, (2, 11))
    full = hf_logits("llama", ids)
    assert lm_c.logits == "last"    # build_causal_lm's default: the last position's only
    cache = lm_c.new_cache(2)
    got = [lm_c.step(ids[:, :6], cache)]
    got += [lm_c.step(ids[:, i: i + 1], cache) for i in range(6, 9)]
    got.append(lm_c.step(ids[:, 9:], cache))
    assert [g.shape for g in got] == [(2, 1, VOCAB)] * 5
    np.testing.assert_allclose(np.concatenate(got, axis=1), full[:, [5, 6, 7, 8, 10]],
                               rtol=1e-4, atol=1e-4)


def test_sliding_window_attention_runs_the_cache_kernel(exported: Any, hf_ref: Any,
                                                       hf_logits: Any) -> None:
    """Mistral's sliding window (6 positions here) is taken by ``plait_kv_attention``
    with its window (one call per layer, no general softmax left), and 32 greedy tokens
    after a 9-token prompt (so the window cuts into the prompt and the cache) equal
    ``transformers``' ``generate()``; prefill + decode logits equal PyTorch's full
    recomputation (rtol 1e-4, atol 1e-4).  The export (cache of 64, every position's
    logits) is test_llm_architectures.py's, shared (conftest.py)."""
    lm = build_exported_lm(exported("mistral", max_cache=64, logits="all"),
                           plait.Target("c", decode_min_weights=0))
    calls = re.findall(r"call ([\w.]+)\(", lm.session.executable.as_text())
    assert sum(c.startswith("plait_kv_attention_") for c in calls) == 2, calls
    assert not any(c.startswith(("softmax", "where")) for c in calls), calls
    ids = np.random.default_rng(4).integers(0, VOCAB, (1, 9))
    np.testing.assert_array_equal(generate(lm, ids, max_new_tokens=32),
                                  hf_ref("mistral", ids, 32))
    ids = np.random.default_rng(5).integers(0, VOCAB, (2, 14))
    full = hf_logits("mistral", ids)
    cache = lm.new_cache(2)
    got = [lm.step(ids[:, :8], cache)]
    got += [lm.step(ids[:, i: i + 1], cache) for i in range(8, 11)]
    got.append(lm.step(ids[:, 11:], cache))
    np.testing.assert_allclose(np.concatenate(got, axis=1), full, rtol=1e-4, atol=1e-4)
