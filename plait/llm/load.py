"""A causal language model from a path: a ``transformers`` model directory (what
``save_pretrained`` writes), an ONNX file with ``past_key_values``, or a saved
executable; and its tokenizer when one is next to it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from .errors import LLMError
from .model import CausalLM, build_causal_lm

SUPPORTED = ("llama", "gpt2", "qwen2", "mistral", "phi3")
"""The ``model_type``s of ``config.json`` the export is tested with (docs/llm.md)."""


def _model_type(directory: str) -> str:
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise LLMError(f"{directory}: no config.json: expected a transformers model "
                       "directory (save_pretrained), an .onnx file or a .plx executable")
    try:
        with open(path, encoding="utf-8") as f:
            kind = json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise LLMError(f"{path}: not a readable model config ({e})") from None
    if kind not in SUPPORTED:
        raise LLMError(f"{path}: unknown model type {kind!r}: plait generates with "
                       f"{', '.join(SUPPORTED)} (export another causal LM with "
                       "plait.llm.build_causal_lm at your own risk)")
    return kind


def load_causal_lm(path: str | os.PathLike[str], target: Any = None, *,
                   max_cache: int = 512, allow_native: bool = False,
                   trusted_keys: Sequence[Any] = ()) -> CausalLM:
    """Load ``path`` for :func:`plait.generate`: a model directory (its weights loaded
    in float32, exported with the cache, built for ``target``), an ``.onnx`` file with
    ``past_key_values`` inputs (imported and built), or a ``.plx`` executable of either
    (loaded; ``allow_native``/``trusted_keys`` as for :func:`plait.load`)."""
    from ..session import load

    path = os.fspath(path)
    if os.path.isdir(path):
        _model_type(path)
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        return build_causal_lm(model, target, max_cache=max_cache)
    if not os.path.exists(path):
        raise LLMError(f"no such file or directory: {path}")
    if not path.lower().endswith((".onnx", ".plx")):
        raise LLMError(f"{path}: expected a transformers model directory, an .onnx file "
                       "with past_key_values or a .plx executable")
    return CausalLM(load(path, target, allow_native=allow_native, trusted_keys=trusted_keys))


def find_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The tokenizer of the model at ``path`` (a directory, or the directory of a file)
    when it has a ``tokenizer.json`` (``tokenizers``) or a tokenizer ``transformers``
    loads; else None."""
    path = os.fspath(path)
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not any(os.path.exists(os.path.join(directory, f))
               for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory)
    except Exception:  # noqa: BLE001 - fall back to the tokenizers library
        pass
    tok = os.path.join(directory, "tokenizer.json")
    if os.path.exists(tok):
        from tokenizers import Tokenizer

        return Tokenizer.from_file(tok)
    return None


__all__ = ["SUPPORTED", "find_tokenizer", "load_causal_lm"]
