"""Decode speed of a Llama-style model over the key/value cache (plait.llm, docs/llm.md):
prefill time of a prompt and decode tokens per second at batch 1, for plait on numpy
and on c, and for ``transformers``' own ``generate()`` (eager PyTorch, same threads) on
the same random weights; the generated tokens are checked equal.

    python benchmarks/llm_decode.py [--hidden 512 --layers 8 --heads 8 --kv-heads 2
                                     --vocab 32000 --prompt 64 --new 64 --targets numpy,c]

Weights are random (seeded); nothing is downloaded.  Name the CPU and its load next to
any figure."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plait  # noqa: E402
from plait.llm import build_causal_lm  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--targets", default="numpy,c")
    args = p.parse_args()

    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.prompt + args.new + 8,
        initializer_range=0.2)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    params = sum(t.numel() for t in model.parameters())
    print(f"Llama-style: {params / 1e6:.1f} M parameters ({params * 4 / 2**20:.0f} MiB f32), "
          f"hidden {args.hidden}, {args.layers} layers, {args.heads} heads / {args.kv_heads} "
          f"kv heads; prompt {args.prompt}, {args.new} new tokens, batch 1; "
          f"{platform.processor() or platform.machine()}, torch threads "
          f"{torch.get_num_threads()}")
    ids = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))

    with torch.no_grad():
        model.generate(torch.from_numpy(ids), max_new_tokens=2, do_sample=False)  # warm
        t0 = time.perf_counter()
        model(torch.from_numpy(ids))
        t_prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        want = model.generate(torch.from_numpy(ids), max_new_tokens=args.new,
                              do_sample=False).numpy()
        t_all = time.perf_counter() - t0
    report("transformers (eager)", t_prefill, t_all, args.new)

    for target in args.targets.split(","):
        t0 = time.perf_counter()
        lm = build_causal_lm(model, target, max_cache=args.prompt + args.new)
        t_build = time.perf_counter() - t0
        plait.generate(lm, ids, 2)  # warm
        cache = lm.new_cache(1)
        t0 = time.perf_counter()
        lm.step(ids, cache)
        t_prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = plait.generate(lm, ids, args.new)
        t_all = time.perf_counter() - t0
        same = "tokens equal" if np.array_equal(got, want) else "TOKENS DIFFER"
        report(f"plait {target} (export+build {t_build:.1f} s; {same})", t_prefill, t_all,
               args.new)


def report(name: str, t_prefill: float, t_all: float, new: int) -> None:
    """One line: prefill time, and decode tokens per second (the tokens after the
    first, over the generation time less one prefill)."""
    decode = max(t_all - t_prefill, 1e-9)
    print(f"{name}: prefill {t_prefill * 1e3:.1f} ms, decode {(new - 1) / decode:.1f} "
          f"tokens/s ({t_all:.2f} s for {new} tokens)")


if __name__ == "__main__":
    main()
