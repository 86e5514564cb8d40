"""``plait.generate``: prefill the prompt, then decode one token per step over the
key/value cache (docs/llm.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import LLMError
from .model import as_causal_lm
from .sampling import next_tokens


def _ids(input_ids: Any) -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.dtype.kind not in "iu":
        raise LLMError(f"input_ids must be integer token ids, got dtype {ids.dtype}: "
                       "convert them with numpy.asarray(ids, dtype=numpy.int64)")
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
        raise LLMError(f"input_ids must be (batch, tokens) with at least one token, got "
                       f"shape {ids.shape}")
    return ids.astype(np.int64)


def _stops(eos_token_id: int | Sequence[int] | None) -> np.ndarray:
    if eos_token_id is None:
        return np.zeros(0, np.int64)
    return np.atleast_1d(np.asarray(eos_token_id, dtype=np.int64))


def generate(model: Any, input_ids: Any, max_new_tokens: int = 32, *,
             do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None,
             eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None,
             stream: Callable[[np.ndarray], Any] | None = None) -> np.ndarray:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` ((batch, tokens) or
    (tokens,) integers; the rows of a batch have the same length).

    ``model``: a :class:`plait.llm.CausalLM` (:func:`plait.llm.build_causal_lm`,
    :func:`plait.llm.load_causal_lm`), or a :class:`~plait.Session` / executable of one.
    Greedy by default; ``do_sample=True`` draws with ``temperature``, ``top_k``,
    ``top_p`` from a generator seeded with ``seed``.  A row stops at any of
    ``eos_token_id`` (later positions get ``pad_token_id``, by default the first stop
    token); generation ends when every row has stopped.  ``stream`` is called with each
    step's tokens (batch,) as they come.  Returns the prompt and the new tokens,
    (batch, tokens + new), as ``transformers``' ``generate`` does."""
    lm = as_causal_lm(model)
    ids = _ids(input_ids)
    if max_new_tokens < 0:
        raise LLMError(f"max_new_tokens is {max_new_tokens}: give 0 or more")
    if do_sample and temperature <= 0:
        raise LLMError(f"temperature is {temperature}: sampling needs a temperature above "
                       "0 (or do_sample=False for greedy)")
    if top_p is not None and not 0 < top_p <= 1:
        raise LLMError(f"top_p is {top_p}: give a value in (0, 1]")
    batch, prompt = ids.shape
    cache = lm.new_cache(batch)
    need = prompt + max(max_new_tokens - 1, 0)
    if cache.capacity is not None and need > cache.capacity:
        raise LLMError(
            f"the prompt has {prompt} tokens and {max_new_tokens} more are asked for: "
            f"{need} cache rows, but the model's cache holds {cache.capacity}: shorten the "
            "prompt or max_new_tokens, or export with a larger max_cache")
    stops = _stops(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (int(stops[0]) if stops.size else 0)
    rng = np.random.default_rng(seed)
    out = [ids]
    done = np.zeros(batch, dtype=bool)
    step_ids = ids
    for n in range(max_new_tokens):
        logits = lm.step(step_ids, cache)
        tok = next_tokens(logits[:, -1, :], do_sample=do_sample, temperature=temperature,
                          top_k=top_k, top_p=top_p, rng=rng)
        tok = np.where(done, pad, tok)
        out.append(tok[:, None])
        if stream is not None:
            stream(tok)
        done |= np.isin(tok, stops)
        if done.all() or n == max_new_tokens - 1:
            break
        step_ids = tok[:, None]
    return np.concatenate(out, axis=1)


__all__ = ["generate"]
