"""The key/value cache between calls of a causal language model (docs/llm.md).

Two conventions, told apart by the model's input names:

* **plait** (``past.{i}.key`` in, ``new.{i}.key`` out; what
  :func:`plait.llm.export_causal_lm` makes): :class:`KVCache` preallocates one buffer per
  layer and kind of ``(capacity, batch, kv_heads, head_dim)``, sequence-major.  The rows
  written so far are the prefix ``buffer[:length]``, contiguous, handed to the VM as a
  view (no copy); the model returns only the new tokens' rows, which are written after
  the prefix in place.  Per token the host writes ``batch * kv_heads * head_dim``
  values per layer and kind, never the whole cache.
* **optimum** (``past_key_values.{i}.key`` in, ``present.{i}.key`` out, as
  ``optimum`` exports to ONNX): :class:`PresentCache` hands the model its last
  ``present`` arrays as the next ``past``; the model itself concatenates (a copy of
  the cache per token, inside the model: the format's cost, not the host's).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import LLMError


class KVCache:
    """Preallocated sequence-major buffers of the plait convention, written in place."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int,
                 capacity: int, dtype: np.dtype | str = "float32") -> None:
        self.capacity = capacity
        self.length = 0
        shape = (capacity, batch, kv_heads, head_dim)
        self.buffers = [np.zeros(shape, dtype) for _ in range(2 * layers)]

    def check_room(self, tokens: int) -> None:
        """Refuse ``tokens`` more rows when they would not fit."""
        if self.length + tokens > self.capacity:
            raise LLMError(
                f"the key/value cache holds {self.capacity} tokens; {self.length} are used "
                f"and {tokens} more do not fit: shorten the prompt or max_new_tokens, or "
                "export the model with a larger max_cache")

    def past(self) -> list[np.ndarray]:
        """The rows written so far: contiguous views of the buffers (no copy)."""
        return [b[: self.length] for b in self.buffers]

    def append(self, rows: Sequence[np.ndarray]) -> None:
        """Write the new tokens' rows (``(tokens, batch, kv_heads, head_dim)`` each)
        after the rows written so far."""
        n = rows[0].shape[0]
        self.check_room(n)
        for buf, r in zip(self.buffers, rows, strict=True):
            buf[self.length: self.length + n] = r
        self.length += n


class PresentCache:
    """The optimum convention: the model's ``present`` arrays become the next past."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int,
                 capacity: int | None, dtype: np.dtype | str = "float32") -> None:
        self.capacity = capacity
        self.length = 0
        self.arrays = [np.zeros((batch, kv_heads, 0, head_dim), dtype)
                       for _ in range(2 * layers)]

    def check_room(self, tokens: int) -> None:
        if self.capacity is not None and self.length + tokens > self.capacity:
            raise LLMError(
                f"the model takes at most {self.capacity} positions; {self.length} are used "
                f"and {tokens} more do not fit: shorten the prompt or max_new_tokens")

    def past(self) -> list[np.ndarray]:
        return list(self.arrays)

    def append(self, present: Sequence[np.ndarray]) -> None:
        """Take the model's ``present`` arrays (past and new rows) as the cache."""
        self.arrays = [np.asarray(p) for p in present]
        self.length = self.arrays[0].shape[2]


__all__ = ["KVCache", "PresentCache"]
