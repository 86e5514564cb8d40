"""A built causal language model with its cache convention: :class:`CausalLM` runs one
step (prefill or decode) and keeps the cache (docs/llm.md)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..runtime.executable import Executable
from ..session import Session, record_io
from .cache import KVCache, PresentCache
from .errors import LLMError

LLM_ATTR = "llm"
"""The executable attribute describing the plait-convention cache: ``max_cache``,
``layers``, ``kv_heads``, ``head_dim``."""

_OPTIMUM = re.compile(r"past_key_values\.(\d+)\.(key|value)$")


class CausalLM:
    """A :class:`~plait.Session` of a causal language model with a key/value cache, in
    the plait convention (``past.{i}.key`` in, ``new.{i}.key`` out) or the optimum one
    (``past_key_values.{i}.key`` in, ``present.{i}.key`` out; ``attention_mask`` and
    ``position_ids`` inputs are fed when the model has them).  :attr:`logits` is
    ``"last"`` when a step returns only the last position's logits, ``"all"`` when it
    returns every position's."""

    def __init__(self, session: Session) -> None:
        self.session = session
        names = session.input_names
        if "input_ids" not in names:
            raise LLMError(f"not a causal language model: it has no input 'input_ids' (its "
                           f"inputs are {', '.join(map(repr, names))})")
        if "past.0.key" in names:
            self.convention = "plait"
            spec = session.executable.attrs.get(LLM_ATTR)
            if not isinstance(spec, dict):
                raise LLMError(f"the executable has past.N inputs but no {LLM_ATTR!r} "
                               "attribute: build it with plait.llm.build_causal_lm")
            self.layers, self.kv_heads = int(spec["layers"]), int(spec["kv_heads"])
            self.head_dim, self.max_cache = int(spec["head_dim"]), int(spec["max_cache"])
            self.cache_dtype = str(spec.get("dtype", "float32"))
            self.logits = str(spec.get("logits", "all"))
            self._past = [f"past.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value")]
        else:
            past = {n: _OPTIMUM.match(n) for n in names}
            past = {n: m for n, m in past.items() if m}
            if not past:
                raise LLMError(
                    "not a causal language model with a key/value cache: it has neither "
                    "past.N.key (plait.llm.export_causal_lm) nor past_key_values.N.key "
                    f"(optimum) inputs; its inputs are {', '.join(map(repr, names))}")
            self.convention = "optimum"
            self.layers = 1 + max(int(m.group(1)) for m in past.values())
            self._past = [f"past_key_values.{i}.{kv}" for i in range(self.layers)
                          for kv in ("key", "value")]
            info = {i.name: i for i in session.inputs}[self._past[0]]
            if info.shape is None or len(info.shape) != 4 or not all(
                    isinstance(d, int) for d in (info.shape[1], info.shape[3])):
                raise LLMError(f"input {self._past[0]!r} has shape {info.shape}: expected "
                               "(batch, kv_heads, past, head_dim) with kv_heads and "
                               "head_dim fixed")
            self.kv_heads, self.head_dim = int(info.shape[1]), int(info.shape[3])
            self.cache_dtype = info.dtype or "float32"
            self.max_cache = None
            self.logits = "all"
        missing = [n for n in self._past if n not in names]
        if missing:
            raise LLMError(f"the model's cache inputs are incomplete: {', '.join(missing)} "
                           "missing")
        info = {i.name: i for i in session.inputs}["input_ids"]
        self.ids_dtype = np.dtype(info.dtype or "int64")
        self._names = names
        # the inputs are the ids, then the cache in its order (what export_causal_lm
        # makes): a step passes them as they come, without a table of feeds
        self._in_order = names == ["input_ids", *self._past]

    def new_cache(self, batch: int) -> KVCache | PresentCache:
        """An empty cache for ``batch`` sequences."""
        kind = KVCache if self.convention == "plait" else PresentCache
        return kind(self.layers, batch, self.kv_heads, self.head_dim, self.max_cache,
                    self.cache_dtype)

    def step(self, ids: np.ndarray, cache: KVCache | PresentCache) -> np.ndarray:
        """Run the tokens ``ids`` (batch, seq) after the ones in ``cache``; the cache is
        updated and the logits returned: (batch, seq, vocab), or (batch, 1, vocab), the
        last position's, when the model keeps only those (:attr:`logits`)."""
        batch, seq = ids.shape
        cache.check_room(seq)
        ids = ids.astype(self.ids_dtype, copy=False)
        if self._in_order:
            result = self.session(ids, *cache.past())
        else:
            feeds: dict[str, Any] = dict(zip(self._past, cache.past(), strict=True))
            feeds["input_ids"] = ids
            if "attention_mask" in self._names:
                feeds["attention_mask"] = np.ones((batch, cache.length + seq), self.ids_dtype)
            if "position_ids" in self._names:
                pos = np.arange(cache.length, cache.length + seq, dtype=self.ids_dtype)
                feeds["position_ids"] = np.broadcast_to(pos, (batch, seq)).copy()
            result = self.session(*(feeds[n] for n in self._names))
        values = list(result) if isinstance(result, tuple) else [result]
        logits, rows = values[0], values[1:]
        if len(rows) != 2 * self.layers:
            raise LLMError(f"the model returned {len(values)} outputs; expected the logits "
                           f"and {2 * self.layers} cache arrays")
        cache.append(rows)
        return np.asarray(logits)


def build_causal_lm(model: Any, target: Any = None, *, max_cache: int = 512,
                    max_batch: int = 8, logits: str = "last") -> CausalLM:
    """Export a ``transformers`` causal LM with its cache
    (:func:`plait.llm.export_causal_lm`), build it for ``target`` (default: ``c`` when a
    C compiler is present; on ``c``, with the decode kernels, :func:`decode_target`) and
    return it ready for :func:`plait.generate`; save it with
    ``lm.session.save("model.plx")``.  ``logits="last"`` (the default: what generation
    needs) makes each step return the last position's logits only, ``(batch, 1,
    vocab)``; ``"all"`` every position's, ``(batch, seq, vocab)``.  To build one model
    for several targets, export it once and give the export to
    :func:`build_exported_lm` for each."""
    from .torch_export import export_causal_lm

    return build_exported_lm(export_causal_lm(model, max_cache=max_cache,
                                              max_batch=max_batch, logits=logits), target)


def build_exported_lm(exported: tuple[Any, dict[str, Any]], target: Any = None) -> CausalLM:
    """Build ``exported``, the ``(module, spec)`` pair :func:`plait.llm.export_causal_lm`
    returns, for ``target`` as :func:`build_causal_lm` does: one export built for
    several targets (numpy and ``c``, several ``weight_quant`` specs) runs
    ``torch.export`` once (minutes for a model of billions of weights).  The module is
    not changed."""
    from ..build import build
    from ..ir.module import IRModule
    from ..session import default_target, describe
    from .torch_export import INPUT_IDS, LOGITS, new_names, past_names

    mod, spec = exported if isinstance(exported, tuple) and len(exported) == 2 else (None, None)
    if not isinstance(mod, IRModule) or not isinstance(spec, dict) or "layers" not in spec:
        raise LLMError(f"build_exported_lm takes the (module, spec) pair "
                       f"plait.llm.export_causal_lm returns, got {type(exported).__name__}")
    exe = build(mod, decode_target(default_target() if target is None else target))
    layers = spec["layers"]
    record_io(exe, "main", describe(mod, "main", [INPUT_IDS, *past_names(layers)],
                                    [LOGITS, *new_names(layers)]))
    exe.attrs[LLM_ATTR] = dict(spec)
    return CausalLM(Session(exe))


def decode_target(target: Any) -> Any:
    """``target`` with the decode kernels of products of symbolic rows asked for when
    it is the ``c`` target (or derives from it) and leaves them at ``"auto"``: a
    language model's rows are its new tokens, one per decode step (docs/llm.md)."""
    from ..target import Target

    t = Target(target) if isinstance(target, str) else target
    if isinstance(t, Target) and t.is_a("c") and t.attrs.get("decode") == "auto":
        return Target(t.kind, **{**dict(t.attrs), "decode": True})
    return target


def as_causal_lm(model: Any) -> CausalLM:
    """``model`` as a :class:`CausalLM`: one already, a :class:`~plait.Session` or an
    :class:`~plait.runtime.Executable`."""
    if isinstance(model, CausalLM):
        return model
    if isinstance(model, Executable):
        return CausalLM(Session(model))
    if isinstance(model, Session):
        return CausalLM(model)
    raise LLMError(f"generate takes a CausalLM, a Session or an Executable (or, with "
                   f"plait.llm.load_causal_lm, a model directory, an .onnx or a .plx), got "
                   f"{type(model).__name__}")


__all__ = ["LLM_ATTR", "CausalLM", "as_causal_lm", "build_causal_lm", "build_exported_lm"]
