"""The error of the language-model tools (:mod:`plait.llm`)."""

from __future__ import annotations

from ..errors import PlaitError


class LLMError(PlaitError, ValueError):
    """A model that cannot be loaded for generation, or generation arguments that do not
    fit the model (prompt longer than the cache, ids that are not integers, an unknown
    model type); the message names the value and what to do."""


__all__ = ["LLMError"]
