"""A ``transformers`` causal language model through ``torch.export`` with a key/value
cache: one graph that takes the tokens and the cache's rows and returns the logits and
the new tokens' keys and values (docs/llm.md).

The graph's interface (the *plait cache convention*)::

    inputs:  input_ids (batch, seq) int64,
             past.{i}.key, past.{i}.value (past, batch, kv_heads, head_dim) per layer i
    outputs: logits (batch, seq, vocab),
             new.{i}.key, new.{i}.value (seq, batch, kv_heads, head_dim)

``batch``, ``seq`` and ``past`` are symbolic: prefill of any length (``past`` = 0) and
decode of one token (``seq`` = 1) run from one executable.  The cache is sequence-major
so that the rows already written are a contiguous prefix of the preallocated buffer:
:class:`plait.llm.cache.KVCache` passes that prefix as a view (no copy) and writes the
new rows after it in place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..ir.module import IRModule
from .errors import LLMError
from .split_attention import register

INPUT_IDS = "input_ids"
LOGITS = "logits"


def past_names(layers: int) -> list[str]:
    """The cache input names of a model with ``layers`` layers, in order."""
    return [f"past.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def new_names(layers: int) -> list[str]:
    """The new-rows output names, in order."""
    return [f"new.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


class _NewRows:
    """The cache object handed to the ``transformers`` model: it records each layer's
    new keys and values and returns them unchanged (the past reaches the attention
    function through ``plait_past``; nothing is concatenated)."""

    is_compileable = False

    def __init__(self, layers: int, past_length: Any) -> None:
        self.new: list[Any] = [None] * layers
        self.past_length = past_length

    def update(self, key: Any, value: Any, layer_idx: int, *args: Any, **kwargs: Any
               ) -> tuple[Any, Any]:
        self.new[layer_idx] = (key, value)
        return key, value

    def get_seq_length(self, layer_idx: int = 0) -> Any:
        return self.past_length


def _layers(config: Any) -> int:
    n = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    if not isinstance(n, int):
        raise LLMError(f"the model's config ({type(config).__name__}) names no number of "
                       "layers (num_hidden_layers)")
    return n


def max_positions(config: Any) -> int | None:
    """The longest sequence the model's position encoding allows (None: no limit)."""
    for name in ("max_position_embeddings", "n_positions"):
        v = getattr(config, name, None)
        if isinstance(v, int):
            return v
    return None


LOGITS_KEPT = ("last", "all")
"""What the exported graph's ``logits`` output holds: ``"last"``, the last position's
row only (``(batch, 1, vocab)``: what generation needs; the vocabulary product of a
prefill runs on one row instead of every prompt row), or ``"all"`` (``(batch, seq,
vocab)``: every position's, for scoring a sequence or comparing with a full
recomputation)."""


@contextlib.contextmanager
def _rows_flattened(head: Any, on: bool) -> Iterator[None]:
    """The vocabulary product ``head`` run on its rows flattened to 2-d: the last
    position's hidden states are a strided slice, and ``torch.export`` lowers a linear of
    a strided 3-d input of symbolic sizes to a batched product by the weight expanded
    per batch (no product by a constant weight left for the decode kernels)."""
    if not on or head is None:
        yield
        return

    shapes: list[Any] = []

    def flat(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        shapes.append(args[0].shape)
        return (args[0].reshape(-1, args[0].shape[-1]), *args[1:])

    def unflat(module: Any, args: tuple[Any, ...], out: Any) -> Any:
        return out.reshape(*shapes.pop()[:-1], out.shape[-1])

    hooks = (head.register_forward_pre_hook(flat), head.register_forward_hook(unflat))
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def _wrapper(model: Any, logits: str) -> Any:
    import torch

    layers = _layers(model.config)
    # transformers' causal LMs slice the hidden states before the vocabulary product
    # (``hidden[:, -logits_to_keep:]``); 0 keeps every position
    keep = {"logits_to_keep": 1} if logits == "last" else {}

    class CausalLMWithCache(torch.nn.Module):
        """``(input_ids, past) -> (logits, *new rows)`` in the plait cache convention."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, past: tuple[Any, ...]) -> tuple[Any, ...]:
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(layers)]
            p = pairs[0][0].shape[0]
            b, s = input_ids.shape
            positions = (torch.arange(s) + p).unsqueeze(0).expand(b, s)
            cache = _NewRows(layers, p)
            # a prepared 4-d mask is passed through untouched by transformers' mask
            # builders; split_attention makes its own from the positions
            mask = torch.zeros(1, 1, 1, 1)
            with _rows_flattened(self.model.get_output_embeddings(), bool(keep)):
                out = self.model(input_ids=input_ids, position_ids=positions, cache=cache,
                                 attention_mask=mask, use_cache=True, plait_past=pairs,
                                 **keep)
            rows = [t.permute(2, 0, 1, 3) for kv in cache.new for t in kv]
            return (out.logits, *rows)

    return CausalLMWithCache()


@contextlib.contextmanager
def _split_attention(model: Any) -> Iterator[None]:
    """The model's attention switched to :func:`split_attention` for the export."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = register()
    try:
        yield
    finally:
        config._attn_implementation = before


def cache_shape(config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of the cache of a model with ``config``."""
    layers = _layers(config)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None)
    if not head_dim and heads:
        head_dim = config.hidden_size // heads
    if not (isinstance(kv_heads, int) and isinstance(head_dim, int)):
        raise LLMError(f"the model's config ({type(config).__name__}) names no number of "
                       "heads (num_attention_heads, num_key_value_heads, head_dim)")
    return layers, kv_heads, head_dim


def export_causal_lm(model: Any, *, max_cache: int = 512, max_batch: int = 8,
                     logits: str = "last") -> tuple[IRModule, dict[str, Any]]:
    """Export ``model`` (a ``transformers`` ``...ForCausalLM``) with ``torch.export`` in
    the plait cache convention and import it.  ``max_cache`` bounds ``past + seq``
    (clipped to the model's position limit), ``max_batch`` the batch; ``logits``
    (:data:`LOGITS_KEPT`) ``"last"`` returns only the last position's logits
    ``(batch, 1, vocab)``, ``"all"`` every position's.  Returns the module and the
    cache's description (``max_cache``, ``layers``, ``kv_heads``, ``head_dim``,
    ``logits``, ``dtype``), which :func:`plait.llm.build_exported_lm` keeps in the
    executable."""
    import inspect

    import torch

    from ..frontend.torch import from_torch

    if logits not in LOGITS_KEPT:
        raise LLMError(f"logits={logits!r}: give 'last' (the last position's, for "
                       "generation) or 'all' (every position's)")
    if logits == "last" and "logits_to_keep" not in inspect.signature(
            model.forward).parameters:
        raise LLMError(f"{type(model).__name__}.forward takes no logits_to_keep, so only "
                       "the last position's logits cannot be asked for: export with "
                       "logits='all'")

    limit = max_positions(model.config)
    if limit is not None:
        max_cache = min(max_cache, limit)
    if max_cache < 2:
        raise LLMError(f"max_cache is {max_cache}: the cache must hold at least 2 tokens")
    layers, kv_heads, head_dim = cache_shape(model.config)
    Dim = torch.export.Dim
    batch = Dim("batch", min=1, max=max_batch)
    seq = Dim("seq", min=1, max=max_cache)
    past = Dim("past", min=0, max=max_cache - 1)
    ids = torch.zeros(2, 3, dtype=torch.int64)
    dtype = next(model.parameters()).dtype
    example = tuple(torch.zeros(5, 2, kv_heads, head_dim, dtype=dtype)
                    for _ in range(2 * layers))
    shapes = ({0: batch, 1: seq}, tuple({0: past, 1: batch} for _ in example))
    with _split_attention(model), torch.no_grad():
        mod = from_torch(_wrapper(model.eval(), logits), (ids, example), dynamic_shapes=shapes)
    spec = {"max_cache": max_cache, "layers": layers, "kv_heads": kv_heads,
            "head_dim": head_dim, "logits": logits,
            "dtype": str(dtype).removeprefix("torch.")}
    return mod, spec


__all__ = ["INPUT_IDS", "LOGITS", "LOGITS_KEPT", "cache_shape", "export_causal_lm", "max_positions",
           "new_names", "past_names"]
