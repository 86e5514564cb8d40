"""Decode and prefill speed of a Llama-style model over the key/value cache (plait.llm,
docs/llm.md), against its peers and against the machine's memory bandwidth.

    python benchmarks/llm_decode.py                       # ~0.46B parameters, f32
    python benchmarks/llm_decode.py --layers 2 --new 16   # a quick look
    python benchmarks/llm_decode.py --engines plait-c,onnxruntime,llama.cpp

For a seeded random-weight ``transformers`` Llama (grouped-query attention; nothing is
downloaded), the parent process builds the engines' files once:

* **plait-c**: ``plait.llm.build_causal_lm(model, "c")`` saved as a ``.plx``;
* **onnxruntime**: the same weights as an ONNX decoder in optimum's layout
  (``past_key_values`` in, ``present`` out: tests/llm/llm_models.py's exporter),
  run by onnxruntime with all graph optimizations;
* **llama.cpp** (``llama-cpp-python``, when importable): the same weights as a GGUF F32
  file (written with the ``gguf`` package), run with the same threads.

Each engine then runs in a fresh process of its own (no torch imported): a prefill of
the ``--prompt`` tokens (batch 1) timed, then ``--new`` greedy decode steps; the
figures are the prefill's tokens per second, the decode's tokens per second (median
step time), and the process's peak resident memory (``VmHWM``) with its resident
memory after loading.  The first ``--check`` generated tokens of each engine are
compared with ``transformers``' greedy ``generate()``.

The **bandwidth limit**: decoding one token at batch 1 reads every weight once (the
embedding table only a row), so tokens/s cannot exceed the memory bandwidth over the
weights' bytes.  The bandwidth is a STREAM-style triad (``a = b + s * c`` over three
arrays of ``--triad-mib`` MiB each, 3 x 4 bytes per element, plait's generated kernel on
the library's thread pool: all threads) measured in the same run, best of 5.

Name the CPU, its threads and the machine's load next to any figure (the header line
prints them; another job on the machine moves times, not tokens)."""

from __future__ import annotations

import argparse
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

from llm_wquant import cpu_name  # noqa: E402

# ---------------------------------------------------------------- engine children


def _status_mib() -> dict[str, float]:
    """This process's peak (VmHWM, /proc/self/status) and its resident memory now, all
    and anonymous (Rss, Anonymous: /proc/self/smaps_rollup, exact, where the status
    file's per-thread counters lag), in MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["VmHWM"] = int(line.split()[1]) / 1024
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("Rss", "Anonymous"):
            out[key] = int(line.split()[1]) / 1024
    return out


def _decode_loop(step: Any, prompt: np.ndarray, new: int) -> dict[str, Any]:
    """Time ``step(ids) -> logits of the last position`` over a prefill and ``new``
    greedy decode steps."""
    t0 = time.perf_counter()
    logits = step(prompt)
    prefill = time.perf_counter() - t0
    tokens = [int(np.argmax(logits))]
    times = []
    for _ in range(new - 1):
        t0 = time.perf_counter()
        logits = step(np.array([[tokens[-1]]], np.int64))
        times.append(time.perf_counter() - t0)
        tokens.append(int(np.argmax(logits)))
    return {"prefill_s": prefill, "step_s": float(np.median(times)) if times else None,
            "tokens": tokens}


def child_plait(path: str, prompt: np.ndarray, new: int) -> dict[str, Any]:
    import plait
    from plait.llm import load_causal_lm
    from plait.runtime.mapped_members import is_mapped

    lm = load_causal_lm(path)
    loaded = _status_mib()
    plait.generate(lm, prompt[:, :8], 2)                      # warm: load the library
    cache = lm.new_cache(1)

    def step(ids: np.ndarray) -> np.ndarray:
        return lm.step(ids, cache)[0, -1]

    out = _decode_loop(step, prompt, new)
    out["end"] = _status_mib()          # while the model is still held
    consts = lm.session.executable.constants
    out["constants_mib"] = sum(int(c.nbytes) for c in consts) / 2**20
    out["constants_mapped_mib"] = sum(int(c.nbytes) for c in consts
                                      if is_mapped(c)) / 2**20
    out["loaded"] = loaded
    return out


def child_onnxruntime(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    loaded = _status_mib()
    names = [i.name for i in sess.get_inputs()]
    past_names = [n for n in names if n.startswith("past_key_values.")]
    kv_shape = next(i.shape for i in sess.get_inputs() if i.name == past_names[0])
    state: dict[str, Any] = {n: np.zeros((1, kv_shape[1], 0, kv_shape[3]), np.float32)
                             for n in past_names}

    def step(ids: np.ndarray) -> np.ndarray:
        past = state[past_names[0]].shape[2]
        feeds = dict(state)
        feeds["input_ids"] = ids
        feeds["attention_mask"] = np.ones((1, past + ids.shape[1]), np.int64)
        feeds["position_ids"] = np.arange(past, past + ids.shape[1], dtype=np.int64)[None]
        outs = sess.run(None, feeds)
        for n, o in zip(past_names, outs[1:], strict=True):
            state[n] = o
        return outs[0][0, -1]

    step(prompt[:, :8])                                       # warm
    for n in past_names:
        state[n] = state[n][:, :, :0]
    out = _decode_loop(step, prompt, new)
    out["end"] = _status_mib()          # while the model is still held
    out["loaded"] = loaded
    return out


def child_llama_cpp(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=prompt.shape[1] + new + 8, n_threads=threads,
                n_threads_batch=threads, n_batch=prompt.shape[1], logits_all=False,
                verbose=False)
    loaded = _status_mib()
    llm.eval(list(prompt[0, :8]))                              # warm
    llm.reset()

    def step(ids: np.ndarray) -> np.ndarray:
        llm.eval([int(t) for t in ids[0]])
        return np.asarray(llm.scores[llm.n_tokens - 1])

    out = _decode_loop(step, prompt, new)
    out["end"] = _status_mib()          # while the model is still held
    out["loaded"] = loaded
    return out


def run_child(args: argparse.Namespace) -> None:
    prompt = np.load(args.prompt_file)
    if args.child == "plait-c":
        out = child_plait(args.model, prompt, args.new)
    elif args.child == "onnxruntime":
        out = child_onnxruntime(args.model, prompt, args.new, args.threads)
    else:
        out = child_llama_cpp(args.model, prompt, args.new, args.threads)
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------- the parent


def triad_bandwidth(mib: int, repeats: int = 5) -> float:
    """Bytes per second of ``a = b + 3 c`` over three float32 arrays of ``mib`` MiB, on
    plait's thread pool (a generated kernel: parallel, vectorized), best of ``repeats``."""
    from plait.codegen.c import compile_kernels
    from plait.kernel import dsl

    b = dsl.placeholder(("n",), "float32", "b")
    c = dsl.placeholder(("n",), "float32", "c")
    a = dsl.compute(("n",), lambda i: b[i] + c[i] * 3.0, "a")
    f = compile_kernels({"triad": dsl.create_kernel([b, c, a], name="triad")}).get("triad")
    n = mib * 2**20 // 4
    xb, xc, xa = np.ones(n, np.float32), np.full(n, 2.0, np.float32), np.zeros(n, np.float32)
    f(xb, xc, xa)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(xb, xc, xa)
        best = min(best, time.perf_counter() - t0)
    assert xa[0] == 7.0
    return 3 * 4 * n / best


def write_gguf(model: Any, path: str) -> None:
    """The model's weights as a GGUF F32 file (llama architecture), with the ``gguf``
    package: the tensor names and the q/k row permutation of llama.cpp's converter."""
    import gguf

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
    w.add_rope_freq_base(getattr(cfg, "rope_theta", 10000.0))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg.vocab_size)
    tokens = [f"<t{i}>".encode() for i in range(cfg.vocab_size)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * cfg.vocab_size)
    w.add_token_types([1] * cfg.vocab_size)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def permute(t: np.ndarray, heads: int) -> np.ndarray:   # llama.cpp's rope layout
        return (t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:])
                .swapaxes(1, 2).reshape(t.shape))

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        q = permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads)
        k = permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads)
        for name, t in (("attn_q", q), ("attn_k", k),
                        ("attn_v", sd[p + "self_attn.v_proj.weight"]),
                        ("attn_output", sd[p + "self_attn.o_proj.weight"]),
                        ("ffn_gate", sd[p + "mlp.gate_proj.weight"]),
                        ("ffn_up", sd[p + "mlp.up_proj.weight"]),
                        ("ffn_down", sd[p + "mlp.down_proj.weight"]),
                        ("attn_norm", sd[p + "input_layernorm.weight"]),
                        ("ffn_norm", sd[p + "post_attention_layernorm.weight"])):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def spawn(engine: str, model: str, prompt_file: str, args: argparse.Namespace,
          python: str = sys.executable) -> dict[str, Any]:
    """Run ``engine`` in a fresh process; its RESULT line as a dict (or the error)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               PLAIT_NUM_THREADS=str(args.threads), PYTHONPATH=str(ROOT))
    cmd = [python, __file__, "--child", engine, "--model", model, "--prompt-file",
           prompt_file, "--new", str(args.new), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--check", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--triad-mib", type=int, default=256)
    p.add_argument("--engines", default="plait-c,onnxruntime,llama.cpp")
    p.add_argument("--llama-python", default=sys.executable,
                   help="the Python that has llama-cpp-python (default: this one)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--prompt-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args)
        return

    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.prompt + args.new + 8, initializer_range=0.02)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    params = sum(t.numel() for t in model.parameters())
    weight_bytes = 4 * (params - args.vocab * args.hidden)   # the embedding: one row read
    load = os.getloadavg()[0]
    print(f"Llama-style: {params / 1e6:.0f} M parameters ({params * 4 / 2**30:.2f} GiB f32), "
          f"hidden {args.hidden}, {args.layers} layers, {args.heads} heads / {args.kv_heads} "
          f"kv heads, intermediate {args.intermediate}, vocab {args.vocab}; prompt "
          f"{args.prompt}, {args.new} new tokens, batch 1; {cpu_name()}, {args.threads} "
          f"threads; load average {load:.1f}")
    ids = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt)).astype(np.int64)
    with torch.no_grad():
        want = model.generate(torch.from_numpy(ids), max_new_tokens=args.check,
                              do_sample=False).numpy()[0, args.prompt:].tolist()

    bw = triad_bandwidth(args.triad_mib)
    limit = bw / weight_bytes
    print(f"STREAM-style triad: {bw / 1e9:.1f} GB/s; weights read per token "
          f"{weight_bytes / 2**20:.0f} MiB: bandwidth limit {limit:.1f} tokens/s")

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.npy")
        np.save(prompt_file, ids)
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            python = sys.executable
            try:
                path = prepare(engine, model, tmp, args)
            except Exception as e:   # an engine that cannot be prepared is reported
                rows.append((engine, {"error": [f"{type(e).__name__}: {e}"]}, 0.0))
                continue
            if engine == "llama.cpp":
                python = args.llama_python
            prep = time.perf_counter() - t0
            rows.append((engine, spawn(engine, path, prompt_file, args, python), prep))
    for engine, r, prep in rows:
        if "error" in r:
            print(f"{engine}: not run: {' '.join(r['error'])}")
            continue
        same = r["tokens"][:args.check] == want
        dec = 1.0 / r["step_s"] if r["step_s"] else float("nan")
        extra = ""
        if "constants_mib" in r:
            extra = (f"; constants {r['constants_mib']:.0f} MiB, "
                     f"{r['constants_mapped_mib']:.0f} MiB of them mapped from the file")
        print(f"{engine}: prefill {args.prompt / r['prefill_s']:.1f} tokens/s "
              f"({r['prefill_s']:.2f} s), decode {dec:.2f} tokens/s "
              f"({100 * dec / limit:.0f}% of the bandwidth limit); peak resident "
              f"{r['end']['VmHWM']:.0f} MiB (at the end {r['end']['Rss']:.0f} MiB, of which "
              f"{r['end']['Anonymous']:.0f} MiB anonymous; after loading "
              f"{r['loaded']['Rss']:.0f} MiB){extra}; "
              f"first {args.check} tokens "
              f"{'equal transformers' if same else 'DIFFER from transformers'} "
              f"(prepared in {prep:.0f} s)")


def prepare(engine: str, model: Any, tmp: str, args: argparse.Namespace) -> str:
    """Write ``engine``'s file of ``model`` into ``tmp``; its path."""
    if engine == "plait-c":
        from plait.llm import build_causal_lm

        lm = build_causal_lm(model, "c", max_cache=args.prompt + args.new + 8)
        path = os.path.join(tmp, "model.plx")
        lm.session.save(path)
        del lm
        return path
    if engine == "onnxruntime":
        sys.path.insert(0, str(ROOT / "tests" / "llm"))
        from llm_models import export_optimum_onnx

        path = os.path.join(tmp, "model.onnx")
        export_optimum_onnx(model, path, external_data=True)
        return path
    if engine == "llama.cpp":
        path = os.path.join(tmp, "model-f32.gguf")
        write_gguf(model, path)
        return path
    raise SystemExit(f"unknown engine {engine!r}: plait-c, onnxruntime, llama.cpp")


if __name__ == "__main__":
    main()
