"""Causal language models with a key/value cache: export with the cache
(:func:`export_causal_lm`, :func:`build_causal_lm`; :func:`build_exported_lm` builds one
export for several targets), load a model directory, an ONNX file with
``past_key_values`` or a saved executable (:func:`load_causal_lm`), and generate
(:func:`generate`).  docs/llm.md describes the cache and the loop."""

from .cache import KVCache, PresentCache
from .errors import LLMError
from .generate import generate
from .load import SUPPORTED, find_tokenizer, load_causal_lm
from .model import CausalLM, as_causal_lm, build_causal_lm, build_exported_lm
from .torch_export import export_causal_lm

__all__ = ["CausalLM", "KVCache", "LLMError", "PresentCache", "as_causal_lm",
           "build_causal_lm", "build_exported_lm", "export_causal_lm", "find_tokenizer",
           "generate", "load_causal_lm", "SUPPORTED"]
