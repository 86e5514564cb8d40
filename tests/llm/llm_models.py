"""Tiny random-weight causal LMs of each architecture plait.llm is tested with, and an
ONNX decoder in optimum's layout (``past_key_values`` in, ``present`` out) exported
from one by ``torch.onnx.export``: the helpers of tests/llm."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import transformers as tf

VOCAB = 256


def no_eos(model: Any) -> Any:
    """``model`` whose ``generate()`` never stops early nor suppresses a stop token
    (the configs' default eos ids are ordinary tokens here)."""
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def make(arch: str, **extra: Any) -> Any:
    """A tiny ``...ForCausalLM`` of ``arch`` with seeded random weights (4 query heads,
    2 key/value heads where the architecture has grouped-query attention; Mistral with
    a sliding window of 6)."""
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, initializer_range=0.2, **extra)
    if arch == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    elif arch == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128,
            initializer_range=0.2, **extra))
    elif arch == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    elif arch == "mistral":
        model = tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=6))
    elif arch == "phi3":
        model = tf.Phi3ForCausalLM(tf.Phi3Config(**common, pad_token_id=0))
    else:
        raise ValueError(arch)
    return no_eos(model.eval())


def hf_greedy(model: Any, ids: np.ndarray, n: int) -> np.ndarray:
    """``transformers``' greedy ``generate()`` of ``n`` tokens after ``ids``."""
    with torch.no_grad():
        out = model.generate(torch.from_numpy(ids), max_new_tokens=n, do_sample=False)
    return out.numpy()


def export_optimum_onnx(model: Any, path: str, external_data: bool = False) -> None:
    """Write ``model`` as an ONNX decoder in optimum's layout: inputs ``input_ids``,
    ``attention_mask``, ``position_ids``, ``past_key_values.{i}.key/value`` (batch,
    kv_heads, past, head_dim); outputs ``logits``, ``present.{i}.key/value`` (batch,
    kv_heads, past + seq, head_dim); batch, seq and past dynamic (the dynamo exporter,
    eager attention, transformers' DynamicCache concatenating); ``external_data``: the
    weights in a file beside it (a model over 2 GB needs that)."""
    from transformers.cache_utils import DynamicCache

    from plait.llm.torch_export import cache_shape

    layers, kv_heads, head_dim = cache_shape(model.config)

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any,
                    past: tuple[Any, ...]) -> tuple[Any, ...]:
            cache = DynamicCache()   # full layers: present = past + new, as optimum
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, cache=cache, use_cache=True)
            rows = [t for i in range(layers)
                    for t in (cache.layers[i].keys, cache.layers[i].values)]
            return (out.logits, *rows)

    kv = [f"{i}.{k}" for i in range(layers) for k in ("key", "value")]
    ins = ["input_ids", "attention_mask", "position_ids", *(f"past_key_values.{n}" for n in kv)]
    outs = ["logits", *(f"present.{n}" for n in kv)]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"}, "logits": {0: "batch", 1: "seq"}}
    axes.update({n: {0: "batch", 2: "past"} for n in ins[3:]})
    axes.update({n: {0: "batch", 2: "total"} for n in outs[1:]})
    p, s = 4, 3
    example = (torch.zeros(2, s, dtype=torch.int64), torch.ones(2, p + s, dtype=torch.int64),
               torch.arange(p, p + s)[None].expand(2, s),
               tuple(torch.zeros(2, kv_heads, p, head_dim) for _ in kv))
    auto = torch.export.Dim.AUTO
    shapes = ({0: auto, 1: auto}, {0: auto, 1: auto}, {0: auto, 1: auto},
              tuple({0: auto, 2: auto} for _ in kv))
    before = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            torch.onnx.export(Decoder().eval(), example, path, input_names=ins, output_names=outs,
                              dynamic_shapes=shapes, dynamo=True, opset_version=18,
                              external_data=external_data)
    finally:
        model.config._attn_implementation = before
