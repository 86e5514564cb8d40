"""Decode and prefill speed of a Llama-style model over the key/value cache (plait.llm,
docs/llm.md) in f32, int8 and int4, against its peers and against the machine's memory
bandwidth.

    python benchmarks/llm_decode.py --config 0.5b            # Qwen2-0.5B's shape
    python benchmarks/llm_decode.py --config 1b --write-docs # TinyLlama-1.1B's shape
    python benchmarks/llm_decode.py --config custom --layers 2 --hidden 256 --vocab 1000 \\
        --prompt 64 --new 8 --rounds 1                       # a quick look

For a seeded random-weight ``transformers`` Llama (nothing is downloaded) the parent
writes each engine's files once per precision (benchmarks/llm_engines.py: plait-c,
onnxruntime-genai's model builder on the ``save_pretrained`` directory, onnxruntime on
optimum's layout, llama.cpp's GGUF), then runs ``--rounds`` rounds; in each round every
engine and precision runs once, interleaved, each in a fresh process of its own (no
torch imported: the RESULT line says so): a prefill of the ``--prompt`` tokens (batch
1) timed, then ``--new`` greedy decode steps.  A figure is the best over the rounds:
prefill tokens/s of the fastest prefill, decode tokens/s of the lowest median step.

The precisions are one format for every engine: ``--int8`` and ``--int4`` (plait's
``weight_quant`` specs, default symmetric blocks of 32, which is llama.cpp's Q8_0/Q4_0
and onnxruntime-genai's default block; genai keeps its CPU default accuracy_level 4,
which quantizes the activations to int8 inside its products).  The first ``--check``
tokens are compared with ``transformers``' greedy ``generate()`` in f32 and with
plait's tokens in int8/int4 (random weights make near ties, so a quantized engine may
take another token after a while).

The **bandwidth limit**: decoding one token at batch 1 reads every weight once (an
untied embedding table only its row), so tokens/s cannot exceed the memory bandwidth
over the weights' bytes (:func:`format_bytes`: each engine's own format; plait keeps a
float32 scale and a zero point per block also when symmetric, some 3-14% more bytes than
llama.cpp's Q8_0/Q4_0 with their float16 scales).
The bandwidth is a STREAM-style triad (benchmarks/stream_triad.c, built with ``cc -O2
-march=native -fopenmp``, on ``--threads`` threads, 3 x ``--triad-mib`` MiB, STREAM's
byte count) measured at the start of every round, best of the rounds.  C and OpenMP
rather than numpy, whose ``b + s * c`` runs on one thread and writes and reads a
temporary (two more passes over memory); rather than plait's own generated kernel,
because the limit must not depend on the compiler it judges.  Decode's ratio is
``weights per token x tokens/s / triad``.

``--write-docs`` writes the table between the markers ``llm-0.5b`` / ``llm-1b`` of
docs/performance.md (benchmarks/docs_figures.py).  Name the CPU, its threads and the
machine's load next to any figure: the header line prints them."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_figures  # noqa: E402
import llm_engines  # noqa: E402
from llm_wquant import cpu_name, weight_bytes  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "0.5b": {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate": 4864,
             "vocab": 151936, "tied": True},          # Qwen2-0.5B's shape: 494 M
    "1b": {"hidden": 2048, "layers": 22, "heads": 32, "kv_heads": 4, "intermediate": 5632,
           "vocab": 32000, "tied": False},            # TinyLlama-1.1B's shape: 1100 M
}
"""The benchmark's models: Llama-style configs of two open models' shapes."""
PRECISIONS = ("f32", "int8", "int4")


def make_model(a: argparse.Namespace) -> Any:
    """The seeded random-weight ``LlamaForCausalLM`` of ``a``'s config."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, tie_word_embeddings=a.tied,
        max_position_embeddings=a.prompt + a.new + 8, initializer_range=0.02)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def format_bytes(model: Any, engine: str, spec: str | None) -> int:
    """The bytes of weights one decode step of ``engine`` reads in its own format:
    plait's (``llm_wquant.weight_bytes``: float32 scales and zero points per block, also
    when symmetric), onnxruntime's ``MatMulNBits`` (float32 scales, zero points only
    when asymmetric) or llama.cpp's Q8_0/Q4_0 (blocks of 32 with a float16 scale); the
    norms in float32, an untied embedding table one row."""
    if spec is None or engine.startswith("plait-c"):
        return weight_bytes(model, spec)
    from plait.dialects.qnn.quantize_weights import parse_spec

    q = parse_spec(spec)
    bits = q["bits"]
    if engine == "llama.cpp":
        group, extra = 32, 2
    else:
        group, extra = q["group"], 4 + (0 if q["symmetric"] else bits / 8)
    return weight_bytes(model, spec, lambda n, k: n * -(-k // group) * (group * bits / 8
                                                                         + extra))


def triad_binary(tmp: str) -> str:
    """benchmarks/stream_triad.c built into ``tmp``."""
    exe = os.path.join(tmp, "stream_triad")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-march=native", "-fopenmp",
                    str(ROOT / "benchmarks" / "stream_triad.c"), "-o", exe], check=True)
    return exe


def triad_bandwidth(exe: str, mib: int, threads: int, repeats: int = 10) -> float:
    """Bytes per second of the triad on ``threads`` OpenMP threads, best of ``repeats``."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread")
    out = subprocess.run([exe, str(mib), str(repeats)], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    return float(out[0])


def spawn(engine: str, path: str, prompt_file: str, new: int, threads: int) -> dict[str, Any]:
    """Run ``engine`` on ``path`` in a fresh process; its RESULT line as a dict (or the
    error)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PLAIT_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT))
    cmd = [sys.executable, __file__, "--child", engine, "--model", path, "--prompt-file",
           prompt_file, "--new", str(new), "--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:])
            or f"exit status {proc.returncode}, no output"}


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The best of one engine's rounds: the fastest prefill, the lowest median decode
    step, the largest peak memory; an error when no round ran."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    steps = [r["step_s"] for r in ok if r["step_s"]]
    return {"prefill_s": min(r["prefill_s"] for r in ok),
            "step_s": min(steps) if steps else None, "rounds": len(ok),
            "peak_mib": max(r["end"]["VmHWM"] for r in ok), "tokens": ok[0]["tokens"],
            "torch_imported": any(r.get("torch_imported") for r in ok)}


def same_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def summary(results: dict[tuple[str, str], dict[str, Any]],
            weights: dict[tuple[str, str], int],
            triad: float, prompt: int, check: int, want: list[int]) -> str:
    """The table of one run: per precision and engine, prefill and decode tokens/s, the
    weights one token reads, decode's bandwidth (weights x tokens/s) and its ratio to the
    triad, the peak resident memory, and the first ``check`` tokens against the
    reference (``want`` in f32, plait-c's tokens in int8/int4); then the triad."""
    lines = [f"| precision | engine | prefill {prompt} (tokens/s) | decode (tokens/s) | "
             "weights per token (MiB) | decode reads (GB/s) | of the triad | "
             "peak resident (MiB) | first tokens |", "|---|---|---|---|---|---|---|---|---|"]
    for (precision, engine), r in results.items():
        if "error" in r:
            lines.append(f"| {precision} | {engine} | not run: {r['error']} "
                         "| | | | | | |")
            continue
        dec = 1.0 / r["step_s"] if r["step_s"] else float("nan")
        gbs = weights[precision, engine] * dec / 1e9
        ref = want if precision == "f32" else \
            results.get((precision, "plait-c"), {}).get("tokens")
        if not r["tokens"]:
            tokens = "not compared (llama-bench feeds random tokens)"
        elif ref is None or (precision != "f32" and engine == "plait-c"):
            tokens = "reference" if ref is not None else "no reference"
        else:
            n = same_prefix(r["tokens"][:check], ref[:check])
            whose = "transformers'" if precision == "f32" else "plait-c's"
            tokens = f"{n} of {min(check, len(r['tokens']))} equal {whose}"
        lines.append(f"| {precision} | {engine} | {prompt / r['prefill_s']:.1f} | "
                     f"{dec:.2f} | {weights[precision, engine] / 2**20:.0f} | {gbs:.2f} | "
                     f"{100 * gbs * 1e9 / triad:.0f}% | {r['peak_mib']:.0f} | {tokens} |")
    lines += ["", "| bandwidth | GB/s |", "|---|---|",
              f"| STREAM triad (stream_triad.c, cc -fopenmp) | {triad / 1e9:.2f} |"]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=[*CONFIGS, "custom"], default="0.5b",
                   help="0.5b: Qwen2-0.5B's shape as a Llama (494 M parameters, tied); "
                        "1b: TinyLlama-1.1B's (1100 M); custom: the sizes below")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--tied", action="store_true", help="custom: tie the embeddings")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--check", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--triad-mib", type=int, default=256)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--int8", default="int8-g32-sym", help="plait's spec of int8")
    p.add_argument("--int4", default="int4-g32-sym", help="plait's spec of int4")
    p.add_argument("--engines", default="plait-c,plait-c-a8,onnxruntime-genai,llama.cpp",
                   help=f"of {', '.join(llm_engines.ENGINES)}")
    p.add_argument("--llama-bench", help="llama.cpp's llama-bench program (default: "
                   "$LLAMA_BENCH or the PATH's; without it, llama-cpp-python)")
    p.add_argument("--write-docs", action="store_true",
                   help="write the table into docs/performance.md (--config 0.5b or 1b)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--prompt-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.config != "custom":
        for key, value in CONFIGS[args.config].items():
            setattr(args, key, value)
    bad = set(args.precisions.split(",")) - set(PRECISIONS)
    if bad:
        p.error(f"--precisions: unknown {', '.join(sorted(bad))}; choose from "
                f"{', '.join(PRECISIONS)}")
    if args.llama_bench:
        os.environ["LLAMA_BENCH"] = os.path.abspath(args.llama_bench)
    if args.write_docs and args.config == "custom":
        p.error("--write-docs writes the figures of --config 0.5b or 1b, not custom")
    if args.write_docs and not args.child:
        try:
            docs_figures.require_block(docs_figures.DOCS, f"llm-{args.config}")
        except ValueError as e:
            p.error(f"--write-docs: {e}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        llm_engines.run_child(args.child, args.model, args.prompt_file, args.new,
                              args.threads)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    model = make_model(args)
    params = sum(t.numel() for t in model.parameters())
    precisions = args.precisions.split(",")
    specs = {"f32": None, "int8": args.int8, "int4": args.int4}
    engines = args.engines.split(",")
    weights = {(p, e): format_bytes(model, e, specs[p]) for p in precisions for e in engines}
    print(f"Llama-style ({args.config}): {params / 1e6:.0f} M parameters, hidden "
          f"{args.hidden}, {args.layers} layers, {args.heads} heads / {args.kv_heads} kv "
          f"heads, intermediate {args.intermediate}, vocab {args.vocab}"
          f"{' (tied)' if args.tied else ''}; prompt {args.prompt}, {args.new} new tokens, "
          f"batch 1; int8 = {args.int8}, int4 = {args.int4}; {cpu_name()}, "
          f"{args.threads} threads; load average {os.getloadavg()[0]:.1f}", flush=True)
    ids = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt)).astype(np.int64)
    with torch.no_grad():
        want = model.generate(torch.from_numpy(ids), max_new_tokens=args.check,
                              do_sample=False).numpy()[0, args.prompt:].tolist()

    with tempfile.TemporaryDirectory(prefix="plait-llm-") as tmp:
        prompt_file = os.path.join(tmp, "prompt.npy")
        np.save(prompt_file, ids)
        hf_dir = os.path.join(tmp, "hf")
        if "onnxruntime-genai" in engines:
            llm_engines.save_hf_dir(model, hf_dir)
        files: dict[tuple[str, str], str | dict[str, str]] = {}
        for precision in precisions:
            for engine in engines:
                if engine == "plait-c-a8" and specs[precision] is None:
                    continue   # int8 activations go with quantized weights only
                why = llm_engines.available(engine)
                if why:
                    files[precision, engine] = {"error": why}
                    continue
                t0 = time.perf_counter()
                try:
                    files[precision, engine] = llm_engines.prepare(
                        engine, precision, specs[precision], model, hf_dir, tmp,
                        args.prompt + args.new + 8)
                except Exception as e:   # an engine that cannot be prepared is reported
                    files[precision, engine] = {"error": f"{type(e).__name__}: {e}"}
                    continue
                print(f"  prepared {engine} {precision} in {time.perf_counter() - t0:.0f} s",
                      flush=True)
                gc.collect()
        del model
        gc.collect()
        exe = triad_binary(tmp)
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {k: [] for k in files}
        triads, loads = [], []
        for rnd in range(args.rounds):
            triads.append(triad_bandwidth(exe, args.triad_mib, args.threads))
            loads.append(os.getloadavg()[0])
            print(f"round {rnd + 1}: triad {triads[-1] / 1e9:.2f} GB/s; load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            for key, path in files.items():
                if isinstance(path, dict):
                    runs[key].append(path)
                    continue
                r = spawn(key[1], path, prompt_file, args.new, args.threads)
                runs[key].append(r)
                print(f"  {key[0]} {key[1]}: " + (r["error"] if "error" in r else
                      f"prefill {args.prompt / r['prefill_s']:.1f} tokens/s, decode "
                      f"{1 / r['step_s'] if r['step_s'] else float('nan'):.2f} tokens/s, "
                      f"peak {r['end']['VmHWM']:.0f} MiB"), flush=True)
    results = {k: best(v) for k, v in runs.items()}
    if any(r.get("torch_imported") for r in results.values()):
        print("warning: torch was imported in a timed process")
    table = summary(results, weights, max(triads), args.prompt, args.check, want)
    print()
    print(table)
    if args.write_docs:
        print(docs_figures.write_figures(
            docs_figures.DOCS, f"llm-{args.config}",
            "| model | parameters | prompt | new tokens | rounds | load average (rounds) |\n"
            "|---|---|---|---|---|---|\n"
            f"| Llama-style {args.config} | {params / 1e6:.0f} M | {args.prompt} | "
            f"{args.new} | {args.rounds} | {', '.join(f'{x:.1f}' for x in loads)} |"
            f"\n\n{table}",
            docs_figures.command("llm_decode.py", argv), args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
