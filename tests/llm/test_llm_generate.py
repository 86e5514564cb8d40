"""Generation over the key/value cache (plait.llm, docs/llm.md) for a tiny random-weight
Llama with grouped-query attention (4 query heads, 2 key/value heads), exported through
``torch.export`` with the cache: greedy generation equals ``transformers``'
``generate()`` token for token (float32, 32 tokens, batch 1 and 2, numpy and c);
prefill + decode logits equal a full recomputation by PyTorch (rtol 1e-4, atol 1e-5);
the cache rows equal ``transformers``' own cache; the cache is written in place;
sampling follows ``transformers``' warpers; bad input is refused clearly.

The model and its exports are made once per worker and shared with the other files
(conftest.py); nothing is downloaded."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from llm_models import VOCAB  # noqa: E402

import plait  # noqa: E402
from plait.llm import LLMError, build_exported_lm, generate, load_causal_lm  # noqa: E402
from plait.llm.sampling import filter_logits  # noqa: E402


@pytest.fixture(scope="module")
def llama(tiny: Any) -> Any:
    return tiny("llama")


@pytest.fixture(scope="module")
def lm(exported: Any) -> Any:
    return build_exported_lm(exported("llama", max_cache=64, logits="all"), "numpy")


def test_greedy_32_tokens_equal_transformers(hf_ref: Any, lm: Any) -> None:
    ids = np.random.default_rng(0).integers(0, VOCAB, (1, 7))
    want = hf_ref("llama", ids, 32)
    got = plait.generate(lm, ids, max_new_tokens=32)
    assert got.shape == (1, 39)
    assert len(set(want[0, 7:].tolist())) > 8   # not a constant run of one token
    np.testing.assert_array_equal(got, want)


def test_greedy_batch_of_two_equals_transformers(hf_ref: Any, lm: Any) -> None:
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, 5))
    # the rows are independent: transformers runs each alone (its batched generate()
    # costs seconds more here)
    want = np.concatenate([hf_ref("llama", ids[i: i + 1], 32) for i in range(2)])
    np.testing.assert_array_equal(generate(lm, ids, max_new_tokens=32), want)


def test_greedy_on_c_equals_transformers(exported: Any, hf_ref: Any) -> None:
    lm_c = build_exported_lm(exported("llama", max_cache=48, logits="last"), "c")
    ids = np.random.default_rng(2).integers(0, VOCAB, (1, 9))
    np.testing.assert_array_equal(generate(lm_c, ids, max_new_tokens=32),
                                  hf_ref("llama", ids, 32))


def test_prefill_and_decode_logits_equal_full_recomputation(hf_logits: Any, lm: Any
                                                            ) -> None:
    ids = np.random.default_rng(3).integers(0, VOCAB, (2, 11))
    full = hf_logits("llama", ids)
    cache = lm.new_cache(2)
    got = [lm.step(ids[:, :6], cache)]          # prefill of 6
    got += [lm.step(ids[:, i: i + 1], cache) for i in range(6, 9)]   # 3 decodes
    got.append(lm.step(ids[:, 9:], cache))      # 2 more at once
    np.testing.assert_allclose(np.concatenate(got, axis=1), full, rtol=1e-4, atol=1e-5)
    assert cache.length == 11


def test_the_cache_rows_are_transformers_keys_and_values(llama: Any, lm: Any) -> None:
    ids = np.random.default_rng(4).integers(0, VOCAB, (1, 8))
    with torch.no_grad():
        hf = llama(torch.from_numpy(ids), use_cache=True).past_key_values
    cache = lm.new_cache(1)
    lm.step(ids[:, :5], cache)
    lm.step(ids[:, 5:], cache)
    for layer in range(2):
        k = hf.layers[layer].keys.numpy()           # (batch, kv_heads, seq, dim)
        v = hf.layers[layer].values.numpy()
        np.testing.assert_allclose(cache.past()[2 * layer].transpose(1, 2, 0, 3), k,
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.past()[2 * layer + 1].transpose(1, 2, 0, 3), v,
                                   rtol=1e-4, atol=1e-5)


def test_the_cache_is_written_in_place(lm: Any) -> None:
    cache = lm.new_cache(1)
    buffers = [id(b) for b in cache.buffers]
    lm.step(np.array([[1, 2, 3]]), cache)
    lm.step(np.array([[4]]), cache)
    assert [id(b) for b in cache.buffers] == buffers
    view = cache.past()[0]
    assert view.base is cache.buffers[0] and view.flags.c_contiguous   # the VM takes it as is
    assert view.shape == (4, 1, 2, 16)


def test_filters_follow_transformers_warpers() -> None:
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = np.random.default_rng(5).standard_normal((3, 50)).astype(np.float32) * 3
    for temperature, k, p in [(0.7, 10, 0.9), (1.3, None, 0.5), (1.0, 3, None),
                              (0.5, 1, 0.2)]:
        t = torch.from_numpy(logits.copy())
        t = TemperatureLogitsWarper(temperature)(None, t)
        if k is not None:
            t = TopKLogitsWarper(k)(None, t)
        if p is not None:
            t = TopPLogitsWarper(p)(None, t)
        got = filter_logits(logits, temperature=temperature, top_k=k, top_p=p)
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(t.numpy()))
        np.testing.assert_allclose(got[np.isfinite(got)], t.numpy()[np.isfinite(got)],
                                   rtol=1e-5)


def test_sampling_is_seeded_and_top_k_1_is_greedy(lm: Any) -> None:
    ids = np.array([[5, 6, 7]])
    a = generate(lm, ids, 8, do_sample=True, temperature=0.8, top_p=0.9, seed=3)
    b = generate(lm, ids, 8, do_sample=True, temperature=0.8, top_p=0.9, seed=3)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(generate(lm, ids, 8, do_sample=True, top_k=1, seed=1),
                                  generate(lm, ids, 8))


def test_stop_tokens_and_streaming(lm: Any) -> None:
    ids = np.array([[9, 8, 7, 6]])
    full = generate(lm, ids, 12)[0, 4:]
    stop = int(full[4])
    first = int(np.flatnonzero(full == stop)[0])
    seen: list[int] = []
    got = generate(lm, ids, 12, eos_token_id=[stop], stream=lambda t: seen.append(int(t[0])))
    assert got[0, 4:].tolist() == full[: first + 1].tolist() == seen


def test_a_prompt_longer_than_the_cache_is_refused(lm: Any) -> None:
    with pytest.raises(LLMError, match=r"the prompt has 60 tokens and 10 more are asked "
                                       r"for: 69 cache rows, but the model's cache holds 64"):
        generate(lm, np.zeros((1, 60), np.int64), 10)


def test_ids_that_are_not_integers_are_refused(lm: Any) -> None:
    with pytest.raises(LLMError, match="input_ids must be integer token ids, got dtype "
                                       "float32"):
        generate(lm, np.zeros((1, 3), np.float32), 4)


def test_build_exported_lm_refuses_what_is_not_an_export() -> None:
    with pytest.raises(LLMError, match=r"build_exported_lm takes the \(module, spec\) pair "
                                       r"plait.llm.export_causal_lm returns, got str"):
        build_exported_lm("llama.onnx", "numpy")


def test_an_unknown_model_type_is_refused(tmp_path: Any) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bogus-lm"}))
    with pytest.raises(LLMError, match=r"unknown model type 'bogus-lm': plait generates "
                                       r"with llama, gpt2, qwen2, mistral, phi3"):
        load_causal_lm(tmp_path)


def test_a_model_without_a_cache_is_refused() -> None:
    text = plait.parse('''
@module
class M:
    @function
    def main(input_ids: Tensor((1, 4), "int64")) -> Tensor((1, 4), "int64"):
        return input_ids
''')
    with pytest.raises(LLMError, match="not a causal language model with a key/value "
                                       "cache"):
        generate(plait.load(text, "numpy"), np.zeros((1, 4), np.int64), 2)


def test_cli_generates_from_a_saved_executable(lm: Any, hf_ref: Any, tmp_path: Any,
                                               capsys: Any) -> None:
    from plait.cli import main

    path = tmp_path / "llama.plx"
    lm.session.save(path)
    code = main(["generate", str(path), "--prompt-ids", "3,1,4,1,5", "--max-new-tokens",
                 "12", "--print-ids"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    want = hf_ref("llama", np.array([[3, 1, 4, 1, 5]]), 12)[0, 5:]
    assert out[-1] == " ".join(map(str, want))


def test_cli_generates_from_a_model_directory_with_its_tokenizer(
        llama: Any, hf_ref: Any, tmp_path: Any, capsys: Any) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from plait.cli import main

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    llama.save_pretrained(tmp_path)
    tok.save(str(tmp_path / "tokenizer.json"))
    code = main(["generate", str(tmp_path), "--prompt", "w3 w1 w4 w1 w5",
                 "--max-new-tokens", "6", "--print-ids", "--target", "numpy"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    want = hf_ref("llama", np.array([[3, 1, 4, 1, 5]]), 6)[0]
    assert out[-1] == " ".join(map(str, want[5:]))
    assert out[0] == " ".join(f"w{i}" for i in want)   # the prompt, then the streamed text
