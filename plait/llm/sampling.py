"""The next token from the last logits: greedy, or sampled with temperature, top-k and
top-p, in that order, as ``transformers``' ``generate`` applies them."""

from __future__ import annotations

import numpy as np


def filter_logits(logits: np.ndarray, *, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """``logits / temperature`` with the tokens outside the ``top_k`` largest, and then
    outside the smallest set whose probability reaches ``top_p``, set to -inf."""
    scores = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None and 0 < top_k < scores.shape[-1]:
        kth = np.partition(scores, -top_k, axis=-1)[:, -top_k][:, None]
        scores = np.where(scores < kth, -np.inf, scores)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-scores, axis=-1, kind="stable")
        ranked = np.take_along_axis(scores, order, axis=-1)
        probs = np.exp(ranked - ranked[:, :1])
        probs /= probs.sum(axis=-1, keepdims=True)
        before = np.cumsum(probs, axis=-1) - probs   # mass of the better tokens
        drop_ranked = before >= top_p               # the first token is always kept
        drop = np.zeros_like(drop_ranked)
        np.put_along_axis(drop, order, drop_ranked, axis=-1)
        scores = np.where(drop, -np.inf, scores)
    return scores


def next_tokens(logits: np.ndarray, *, do_sample: bool, temperature: float = 1.0,
                top_k: int | None = None, top_p: float | None = None,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """One token per row of ``logits`` (batch, vocab): the first largest logit when
    ``do_sample`` is false; else a draw from the softmax of :func:`filter_logits`."""
    if not do_sample:
        return np.asarray(logits).argmax(axis=-1).astype(np.int64)
    rng = rng if rng is not None else np.random.default_rng()
    scores = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.array([rng.choice(probs.shape[-1], p=row) for row in probs], dtype=np.int64)


__all__ = ["filter_logits", "next_tokens"]
