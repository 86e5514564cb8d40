"""A ``transformers`` Llama's weights as a GGUF file for llama.cpp (benchmarks/
llm_decode.py), written with the ``gguf`` package (llama.cpp's own gguf-py): the
tensor names and the q/k row permutation of llama.cpp's converter, every 2-D weight
(the embedding table and the output head too) in one type: F32, Q8_0 or Q4_0
(symmetric blocks of 32 values with one float16 scale; llama-quantize's ``--pure``
form, no mixture of types), the norms in F32.  A tied head is written as ``output``
too, so every engine reads the same weights.  The F32 and Q8_0 files equal, tensor for
tensor, what llama.cpp's ``convert_hf_to_gguf.py --outtype f32|q8_0`` writes from the
model's ``save_pretrained`` directory (checked by hand with its vocabulary step
replaced, docs/llm.md)."""

from __future__ import annotations

from typing import Any

import numpy as np


def write_gguf(model: Any, path: str, kind: str = "F32") -> None:
    """``model`` (a ``LlamaForCausalLM``) as a GGUF file of type ``kind`` (F32, Q8_0,
    Q4_0) at ``path``."""
    import gguf

    qtype = gguf.GGMLQuantizationType[kind]
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[kind]
    cfg = model.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("plait-bench")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") \
        or getattr(cfg, "rope_theta", 10000.0)
    w.add_rope_freq_base(float(theta))
    w.add_file_type(ftype)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(cfg.vocab_size)])
    w.add_token_scores([0.0] * cfg.vocab_size)
    w.add_token_types([1] * cfg.vocab_size)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def permute(t: np.ndarray, heads: int) -> np.ndarray:   # llama.cpp's rope layout
        return (t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:])
                .swapaxes(1, 2).reshape(t.shape))

    def add(name: str, t: np.ndarray) -> None:
        t = np.ascontiguousarray(t, np.float32)
        if t.ndim == 2 and kind != "F32":
            w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, t)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    add("token_embd.weight", sd["model.embed_tokens.weight"])
    add("output_norm.weight", sd["model.norm.weight"])
    add("output.weight", sd.get("lm_head.weight", sd["model.embed_tokens.weight"]))
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        add(f"blk.{i}.attn_q.weight",
            permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        add(f"blk.{i}.attn_k.weight",
            permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        for name, key in (("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                          ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                          ("ffn_down", "mlp.down_proj"), ("attn_norm", "input_layernorm"),
                          ("ffn_norm", "post_attention_layernorm")):
            add(f"blk.{i}.{name}.weight", sd[p + key + ".weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
