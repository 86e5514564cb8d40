"""Weight-only int8 and int4 decode speed of a Llama-style model: plait on ``c``
(``Target("c", weight_quant=...)``: qnn.QuantizeWeights and the dequantize-in-register
kernels of plait_wquant.c) against onnxruntime's ``MatMulNBits`` model of the same
weights (its ``matmul_nbits_quantizer`` on the model exported to ONNX in optimum's
layout; plait's quantizer is onnxruntime's bit for bit, so both run the same integers),
batch 1, greedy; the generated tokens are compared.

    python benchmarks/llm_wquant.py [--hidden 896 --layers 24 --heads 14 --kv-heads 2
        --inter 4864 --vocab 151936 --prompt 32 --new 64 --specs int8-g128,int4-g32
        --threads 2 --f32]
    OMP_NUM_THREADS=1 python benchmarks/llm_wquant.py --kernels

The default config is Qwen2-0.5B's shape as a Llama (494 M parameters, tied
embeddings), random seeded weights; nothing is downloaded.  Decode tokens/s are the
tokens after the first over the generation time less one prefill; "GB/s" is the bytes of
weights one token reads (the quantized products' packed weights, scales and zero points,
the f32 rest; the tied embedding table is the lm_head's weight) times tokens/s.  Name
the CPU and its load next to any figure (docs/performance.md)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def make_model(args: argparse.Namespace) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.inter,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.prompt + args.new + 8,
        tie_word_embeddings=True, initializer_range=0.02)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def decode_plait(lm: Any, ids: np.ndarray, new: int) -> tuple[float, float, np.ndarray]:
    """(prefill seconds, decode tokens/s, tokens) of greedy generation."""
    import plait

    plait.generate(lm, ids, 2)   # warm
    cache = lm.new_cache(1)
    t0 = time.perf_counter()
    lm.step(ids, cache)
    t_prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = plait.generate(lm, ids, new)
    t_all = time.perf_counter() - t0
    return t_prefill, (new - 1) / max(t_all - t_prefill, 1e-9), out[0, ids.shape[1]:]


def decode_ort(path: str, ids: np.ndarray, new: int, layers: int, kv_heads: int,
               head_dim: int, threads: int) -> tuple[float, float, np.ndarray]:
    """The same greedy loop on an onnxruntime session of the optimum-layout decoder."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def run(n: int) -> tuple[float, np.ndarray, float]:
        past = {f"past_key_values.{i}.{k}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
                for i in range(layers) for k in ("key", "value")}
        cur, total, toks, t_first = ids, 0, [], 0.0
        t0 = time.perf_counter()
        for step in range(n):
            seq = cur.shape[1]
            feeds = {"input_ids": cur, "attention_mask": np.ones((1, total + seq), np.int64),
                     "position_ids": np.arange(total, total + seq, dtype=np.int64)[None],
                     **past}
            outs = sess.run(None, feeds)
            if step == 0:
                t_first = time.perf_counter() - t0
            total += seq
            tok = int(np.argmax(outs[0][0, -1]))
            toks.append(tok)
            cur = np.array([[tok]], np.int64)
            past = {f"past_key_values.{i}.{k}": outs[1 + 2 * i + j]
                    for i in range(layers) for j, k in enumerate(("key", "value"))}
        return time.perf_counter() - t0, np.array(toks), t_first

    run(2)   # warm
    t_all, toks, t_prefill = run(new)
    return t_prefill, (new - 1) / max(t_all - t_prefill, 1e-9), toks


def weight_bytes(model: Any, spec: str | None,
                 matrix_bytes: Callable[[int, int], float] | None = None) -> int:
    """The bytes of weights one decode step reads: every parameter (the tied embedding
    table is the lm_head's weight, read whole; an untied one only its token's row), the
    products' 2-D weights at their quantized size: plait's format (packed values,
    float32 scales, packed zero points) or ``matrix_bytes(n, k)`` of an ``n x k`` one."""
    from plait.dialects.qnn import nbits
    from plait.dialects.qnn.quantize_weights import parse_spec

    q = parse_spec(spec) if spec else None

    def plait_format(n: int, k: int) -> float:
        assert q is not None
        group = q["group"] or k
        blocks = nbits.k_blocks(k, group)
        return n * (blocks * nbits.blob_size(group, q["bits"]) + blocks * 4
                    + nbits.zp_cols(blocks, q["bits"]))

    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    embedding = model.get_input_embeddings().weight
    total = 0.0
    for p in model.parameters():
        if p is embedding and not tied:
            total += p.shape[1] * 4
        elif p.dim() == 2 and q is not None:
            total += (matrix_bytes or plait_format)(*p.shape)
        else:
            total += p.numel() * 4
    return int(total)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--heads", type=int, default=14)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--inter", type=int, default=4864)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--specs", default="int8-g128,int4-g32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--f32", action="store_true", help="also plait and onnxruntime in f32")
    p.add_argument("--no-ort", action="store_true", help="plait only")
    p.add_argument("--kernels", action="store_true",
                   help="only the products at batch 1 against onnxruntime's MatMulNBits node")
    args = p.parse_args()
    if args.kernels:
        kernels()
        return
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    torch.set_num_threads(args.threads)
    import plait
    from plait.llm import build_causal_lm
    from plait.llm.torch_export import cache_shape

    model = make_model(args)
    params = sum(t.numel() for t in model.parameters())
    layers, kv_heads, head_dim = cache_shape(model.config)
    print(f"Llama-style: {params / 1e6:.0f} M parameters, hidden {args.hidden}, "
          f"{args.layers} layers, {args.heads} heads / {args.kv_heads} kv heads, "
          f"intermediate {args.inter}, vocab {args.vocab} (tied); prompt {args.prompt}, "
          f"{args.new} new tokens, batch 1, greedy; {cpu_name()}, {args.threads} threads "
          f"(OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})")
    ids = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))
    specs: list[str | None] = ([None] if args.f32 else []) + args.specs.split(",")

    onnx_dir = tempfile.mkdtemp(prefix="plait-llm-wquant-")
    f32_path = os.path.join(onnx_dir, "decoder.onnx")
    if not args.no_ort:
        sys.path.insert(0, str(ROOT / "tests" / "llm"))
        from llm_models import export_optimum_onnx

        t0 = time.perf_counter()
        export_optimum_onnx(model, f32_path)
        print(f"  (ONNX export {time.perf_counter() - t0:.0f} s)")

    rows = []
    for spec in specs:
        name = spec or "f32"
        target = plait.Target("c", weight_quant=spec) if spec else plait.Target("c")
        t0 = time.perf_counter()
        lm = build_causal_lm(model, target, max_cache=args.prompt + args.new + 8)
        t_build = time.perf_counter() - t0
        pre, tps, toks = decode_plait(lm, ids, args.new)
        gbs = weight_bytes(model, spec) * tps / 1e9
        rows.append((f"plait c {name}", pre, tps, gbs, f"build {t_build:.0f} s"))
        print(f"  plait c {name}: prefill {pre * 1e3:.0f} ms, decode {tps:.1f} tokens/s "
              f"({gbs:.1f} GB/s of weights; build {t_build:.0f} s)", flush=True)
        del lm
        if args.no_ort:
            continue
        path = f32_path
        if spec:
            path = quantize_onnx(f32_path, spec, onnx_dir)
        opre, otps, otoks = decode_ort(path, ids, args.new, layers, kv_heads, head_dim,
                                       args.threads)
        same = int(np.sum(np.cumprod(toks == otoks)))
        ogbs = weight_bytes(model, spec) * otps / 1e9
        print(f"  onnxruntime {name}: prefill {opre * 1e3:.0f} ms, decode {otps:.1f} "
              f"tokens/s ({ogbs:.1f} GB/s); the first {same} of {args.new} tokens equal "
              f"plait's", flush=True)
        rows.append((f"onnxruntime {name}", opre, otps, ogbs, f"{same}/{args.new} tokens equal"))

    print("\n| run | prefill (ms) | decode (tokens/s) | weights read (GB/s) | note |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1] * 1e3:.0f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]} |")


def constant_transposes(model: Any) -> Any:
    """``model`` with every MatMul weight that is a ``Transpose`` of an initializer (the
    tied lm_head: the embedding table transposed) made an initializer of its own, so
    onnxruntime's quantizer (which takes initializer weights only) quantizes it as plait
    does."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    for node in g.node:
        if node.op_type != "MatMul":
            continue
        src = producers.get(node.input[1])
        if src is None or src.op_type != "Transpose" or src.input[0] not in inits:
            continue
        w = numpy_helper.to_array(inits[src.input[0]])
        perm = [a.ints for a in src.attribute if a.name == "perm"]
        if w.ndim != 2 or (perm and list(perm[0]) != [1, 0]):
            continue
        name = src.input[0] + "_transposed"
        if name not in inits:
            inits[name] = numpy_helper.from_array(np.ascontiguousarray(w.T), name)
            g.initializer.append(inits[name])
        node.input[1] = name
    return model


def kernels() -> None:
    """One ``qnn.matmul_nbits`` call at batch 1 (the model's shapes) against
    onnxruntime's ``MatMulNBits`` node on the same packed weights, one thread each, CPU
    time per call."""
    import onnxruntime as ort

    import plait
    from plait.dialects.qnn import nbits
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.ir.expr import Constant
    from plait.op import make_call
    from plait.runtime.vm import VirtualMachine

    sys.path.insert(0, str(ROOT / "tests" / "dialects" / "qnn"))
    from qnn_ort import node_model

    def per_call(f: Any, arg: Any, n: int) -> float:
        f(arg)
        t0 = time.process_time()
        for _ in range(n):
            f(arg)
        return (time.process_time() - t0) / n

    print(f"one product at batch 1, one thread, CPU time per call; {cpu_name()}")
    for k, n, bits, bs in ((896, 4864, 4, 32), (4864, 896, 4, 32), (896, 4864, 8, 128),
                           (896, 151936, 4, 32)):
        rng = np.random.default_rng(0)
        b, s, z = nbits.quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32),
                                           bits, bs)
        x = Var("x", TensorType(("m", k), "float32"))
        bb = BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit(make_call("qnn.matmul_nbits", x, Constant(b), Constant(s),
                                      Constant(z), K=k, N=n, bits=bits, block_size=bs))
                out = bb.emit_output(y)
            bb.emit_func_output(out)
        f = VirtualMachine(plait.build(bb.get(), "c"))["main"]
        a = rng.standard_normal((1, k)).astype(np.float32)
        model, feeds = node_model("MatMulNBits", [a, b, s, z], domain="com.microsoft",
                                  attrs={"K": k, "N": n, "bits": bits, "block_size": bs})
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        reps = 20 if n < 100000 else 5
        tp = per_call(f, a, reps)
        to = per_call(lambda fd, s=sess: s.run(None, fd), feeds, reps)
        print(f"  {k} x {n}, int{bits} g{bs}: plait {tp * 1e3:.2f} ms, onnxruntime "
              f"{to * 1e3:.2f} ms")


def quantize_onnx(f32_path: str, spec: str, out_dir: str) -> str:
    """The f32 decoder through onnxruntime's matmul_nbits_quantizer with the parameters
    of ``spec`` (``int4-g32``, ``int8-g128``...)."""
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    from plait.dialects.qnn.quantize_weights import parse_spec

    q = parse_spec(spec)
    if q["group"] is None:
        raise SystemExit(f"{spec}: onnxruntime's MatMulNBits needs a group (a power of two "
                         ">= 16); use e.g. int8-g128")
    cfg = mq.DefaultWeightOnlyQuantConfig(block_size=q["group"], is_symmetric=q["symmetric"],
                                          bits=q["bits"])
    quant = mq.MatMulNBitsQuantizer(constant_transposes(onnx.load(f32_path)), algo_config=cfg)
    quant.process()
    path = os.path.join(out_dir, f"decoder-{spec}.onnx")
    quant.model.save_model_to_file(path, use_external_data_format=True)
    nodes = sum(n.op_type == "MatMulNBits" for n in onnx.load(path, load_external_data=False)
                .graph.node)
    print(f"  (onnxruntime {spec}: {nodes} MatMulNBits nodes)")
    return path


if __name__ == "__main__":
    main()
