"""Attention over the key/value cache without copying it: the cache's rows come in as
the past, the new tokens' keys and values are computed, and attention runs over both
parts with one softmax, so the graph never concatenates (copies) the cache.

Registered with ``transformers``' attention interface as ``"plait_split"``; the past of
each layer reaches it through the model's keyword arguments (``plait_past``), the path
``transformers`` gives every attention function.  PyTorch is imported by the caller
(:mod:`plait.llm.torch_export`)."""

from __future__ import annotations

from typing import Any

ATTENTION_NAME = "plait_split"


def split_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                    scaling: float | None = None, dropout: float = 0.0, **kwargs: Any
                    ) -> tuple[Any, None]:
    """Causal attention of ``query`` (batch, heads, seq, dim) over the layer's past
    (past, batch, kv_heads, dim: sequence-major, as the cache keeps it) and the new
    ``key``/``value`` (batch, kv_heads, seq, dim).  Grouped-query heads share their key
    and value head by broadcasting (no repeated copy).  A sliding window
    (``module.sliding_window``, or ``sliding_window=`` in ``kwargs``) masks keys
    ``window`` or more positions back.  ``attention_mask`` is ignored: the mask is
    causal by positions (batches of equal-length prompts).  Returns (batch, seq, heads,
    dim) as ``transformers``' attention functions do."""
    import torch

    past_k, past_v = kwargs["plait_past"][module.layer_idx]
    b, h, s, d = query.shape
    kv = key.shape[1]
    p = past_k.shape[0]
    if scaling is None:
        scaling = d ** -0.5
    q = query.unflatten(1, (kv, h // kv))                     # (b, kv, g, s, d)
    pk = past_k.permute(1, 2, 3, 0).unsqueeze(2)              # (b, kv, 1, d, p)
    pv = past_v.permute(1, 2, 0, 3).unsqueeze(2)              # (b, kv, 1, p, d)
    s_past = torch.matmul(q, pk) * scaling                    # (b, kv, g, s, p)
    s_new = torch.matmul(q, key.unsqueeze(2).transpose(-1, -2)) * scaling   # (.., s, s)
    i = torch.arange(s).unsqueeze(1)
    j = torch.arange(s).unsqueeze(0)
    blocked = j > i
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if window is not None:
        blocked = blocked | (i - j >= window)
        s_past = s_past.masked_fill((i + p) - torch.arange(p).unsqueeze(0) >= window,
                                    float("-inf"))
    s_new = s_new.masked_fill(blocked, float("-inf"))
    probs = torch.cat([s_past, s_new], dim=-1).softmax(-1).to(value.dtype)
    out = torch.matmul(probs[..., :p], pv) + torch.matmul(probs[..., p:], value.unsqueeze(2))
    return out.flatten(1, 2).transpose(1, 2), None


def register() -> str:
    """Register :func:`split_attention` with ``transformers`` (idempotent); returns
    its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, split_attention)
    return ATTENTION_NAME


__all__ = ["ATTENTION_NAME", "register", "split_attention"]
