"""The engines benchmarks/llm_decode.py times: each one's files, written once by the
parent from the same ``transformers`` model, and the loop a fresh child process runs
over them (no torch imported there).

* **plait-c**: ``plait.llm.build_causal_lm`` on ``Target("c", weight_quant=spec)``,
  saved as a ``.plx``; **plait-c-a8** the same with int8 activations (the spec with
  ``-a8``, ``accuracy_level`` 4: what llama.cpp's Q8_0/Q4_0 and onnxruntime-genai's
  CPU default do), int8 and int4 only;
* **onnxruntime-genai**: its model builder (``python -m
  onnxruntime_genai.models.builder -i HF_DIR -p fp32|int8|int4 -e cpu``) on the model
  directory ``save_pretrained`` wrote, run by ``onnxruntime_genai.Generator``;
* **onnxruntime**: the model exported in optimum's layout (tests/llm/llm_models.py),
  quantized by onnxruntime's ``matmul_nbits_quantizer`` for int8/int4, run by an
  ``InferenceSession`` with a host-side cache;
* **llama.cpp**: the weights as GGUF F32/Q8_0/Q4_0 (benchmarks/llm_gguf.py), timed by
  llama.cpp's own ``llama-bench`` when there is one (``$LLAMA_BENCH``, the PATH), else
  through ``llama-cpp-python`` when importable.

A child times a prefill of the whole prompt (batch 1) and ``new`` greedy decode steps,
each a call on one token that returns the last position's logits, and prints one
``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("plait-c", "plait-c-a8", "onnxruntime-genai", "onnxruntime", "llama.cpp")
GGUF_TYPES = {"f32": "F32", "int8": "Q8_0", "int4": "Q4_0"}
"""llama.cpp's format of each precision: Q8_0 and Q4_0 are symmetric blocks of 32."""


class Unavailable(Exception):
    """An engine this machine cannot run (a package missing): the row says why."""


# ---------------------------------------------------------------- the children


def status_mib() -> dict[str, float]:
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


def decode_loop(step: Any, prompt: np.ndarray, new: int) -> dict[str, Any]:
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


def child_plait(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    import plait
    from plait.llm import load_causal_lm
    from plait.runtime.mapped_members import is_mapped

    lm = load_causal_lm(path)
    loaded = status_mib()
    plait.generate(lm, prompt[:, :8], 2)                      # warm: load the library
    cache = lm.new_cache(1)

    def step(ids: np.ndarray) -> np.ndarray:
        return lm.step(ids, cache)[0, -1]

    out = decode_loop(step, prompt, new)
    out["end"] = status_mib()           # while the model is still held
    consts = lm.session.executable.constants
    out["constants_mib"] = sum(int(c.nbytes) for c in consts) / 2**20
    out["constants_mapped_mib"] = sum(int(c.nbytes) for c in consts
                                      if is_mapped(c)) / 2**20
    out["loaded"] = loaded
    return out


def child_genai(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    """onnxruntime-genai's Generator: ``append_tokens`` runs the model on the tokens
    given (the prompt, then each chosen token) and ``get_logits`` returns the last
    position's logits; the greedy choice is made here as for every engine (its own
    search would stop at the model's end token, which a random model may pick)."""
    import onnxruntime_genai as og

    cfg = og.Config(path)
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    model = og.Model(cfg)
    loaded = status_mib()

    def generator() -> Any:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt.shape[1] + new + 8, do_sample=False)
        return og.Generator(model, params)

    warm = generator()
    warm.append_tokens(prompt[0, :8].tolist())
    warm.append_tokens([int(np.argmax(warm.get_logits()[0, -1]))])
    del warm
    gen = generator()

    def step(ids: np.ndarray) -> np.ndarray:
        gen.append_tokens(ids[0].tolist())
        return np.asarray(gen.get_logits())[0, -1]

    out = decode_loop(step, prompt, new)
    out["end"] = status_mib()
    out["loaded"] = loaded
    return out


def child_onnxruntime(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    loaded = status_mib()
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
    out = decode_loop(step, prompt, new)
    out["end"] = status_mib()
    out["loaded"] = loaded
    return out


def llama_bench() -> str | None:
    """llama.cpp's own benchmark program: ``$LLAMA_BENCH`` or ``llama-bench`` on the
    PATH (None: neither)."""
    import shutil

    path = os.environ.get("LLAMA_BENCH") or shutil.which("llama-bench")
    return path if path and os.access(path, os.X_OK) else None


def child_llama_bench(exe: str, path: str, prompt: np.ndarray, new: int,
                      threads: int) -> dict[str, Any]:
    """llama.cpp timed by its own ``llama-bench`` (no Python binding in the loop): a
    prefill of the prompt's length from an empty cache (``-p N -n 0``), then ``new``
    tokens generated after a cache of that length (``-p 0 -n NEW -d N``), one
    repetition each after its warm-up run.  Its decode figure is the tokens over the
    generation's whole time (a mean step, not the median the other engines report);
    llama-bench feeds random tokens, so there are no tokens to compare."""
    import resource

    def run(*extra: str) -> dict[str, Any]:
        out = subprocess.run([exe, "-m", path, "-t", str(threads), "-r", "1", "-o", "json",
                              *extra], capture_output=True, text=True, check=True).stdout
        return json.loads(out[out.index("["):])[0]

    pp = run("-p", str(prompt.shape[1]), "-n", "0")
    tg = run("-p", "0", "-n", str(new), "-d", str(prompt.shape[1]))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"prefill_s": prompt.shape[1] / pp["avg_ts"], "step_s": 1.0 / tg["avg_ts"],
            "tokens": [], "end": {"VmHWM": peak, "Rss": peak, "Anonymous": float("nan")},
            "loaded": {"Rss": float("nan")}, "via": "llama-bench"}


def child_llama_cpp(path: str, prompt: np.ndarray, new: int, threads: int) -> dict[str, Any]:
    """llama.cpp through ``llama-bench`` when there is one (:func:`llama_bench`), else
    through ``llama-cpp-python``."""
    exe = llama_bench()
    if exe:
        return child_llama_bench(exe, path, prompt, new, threads)
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=prompt.shape[1] + new + 8, n_threads=threads,
                n_threads_batch=threads, n_batch=prompt.shape[1], logits_all=False,
                verbose=False)
    loaded = status_mib()
    llm.eval(list(prompt[0, :8]))                              # warm
    llm.reset()

    def step(ids: np.ndarray) -> np.ndarray:
        llm.eval([int(t) for t in ids[0]])
        return np.asarray(llm.scores[llm.n_tokens - 1])

    out = decode_loop(step, prompt, new)
    out["end"] = status_mib()
    out["loaded"] = loaded
    return out


CHILDREN = {"plait-c": child_plait, "plait-c-a8": child_plait,
            "onnxruntime-genai": child_genai,
            "onnxruntime": child_onnxruntime, "llama.cpp": child_llama_cpp}


def run_child(engine: str, path: str, prompt_file: str, new: int, threads: int) -> None:
    """The child process's work: time ``engine`` on ``path``, print its RESULT line."""
    out = CHILDREN[engine](path, np.load(prompt_file), new, threads)
    out["torch_imported"] = "torch" in sys.modules
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------- the parent's files


def available(engine: str) -> str | None:
    """Why ``engine`` cannot run here (None when it can)."""
    import importlib.util

    need = {"onnxruntime-genai": ("onnxruntime_genai", "pip install onnxruntime-genai"),
            "onnxruntime": ("onnxruntime", "pip install onnxruntime"),
            "llama.cpp": ("llama_cpp", "pip install llama-cpp-python")}
    if engine not in CHILDREN:
        return f"unknown engine (choose from {', '.join(ENGINES)})"
    if engine == "llama.cpp" and importlib.util.find_spec("gguf") is None:
        return "the gguf package (to write its files) is not installed: pip install gguf"
    if engine == "llama.cpp" and llama_bench():
        return None
    if engine in need and importlib.util.find_spec(need[engine][0]) is None:
        if engine == "llama.cpp":
            return ("neither llama-bench (build llama.cpp's CPU backend with cmake, target "
                    "llama-bench; --llama-bench PATH) nor llama_cpp (pip install "
                    "llama-cpp-python, no wheel here: it builds llama.cpp from source)")
        return f"{need[engine][0]} is not installed: {need[engine][1]}"
    return None


def prepare(engine: str, precision: str, spec: str | None, model: Any, hf_dir: str,
            tmp: str, max_cache: int) -> str:
    """Write ``engine``'s file of ``model`` at ``precision`` (``spec``: plait's
    weight_quant spec of it, None for f32) into ``tmp``; its path."""
    out = os.path.join(tmp, f"{engine}-{precision}")
    if engine == "plait-c-a8":
        if spec is None:
            raise Unavailable("int8 activations go with quantized weights (int8, int4)")
        spec = spec if spec.endswith("-a8") else spec + "-a8"
    if engine in ("plait-c", "plait-c-a8"):
        import plait
        from plait.llm import build_causal_lm

        target = plait.Target("c", weight_quant=spec) if spec else plait.Target("c")
        lm = build_causal_lm(model, target, max_cache=max_cache)
        lm.session.save(out + ".plx")
        return out + ".plx"
    if engine == "onnxruntime-genai":
        return genai_build(hf_dir, out, precision, spec, tmp)
    if engine == "onnxruntime":
        f32 = os.path.join(tmp, "onnxruntime-f32.onnx")
        if not os.path.exists(f32):
            sys.path.insert(0, str(ROOT / "tests" / "llm"))
            from llm_models import export_optimum_onnx

            export_optimum_onnx(model, f32, external_data=True)
        if spec is None:
            return f32
        from llm_wquant import quantize_onnx

        return quantize_onnx(f32, spec, tmp)
    if engine == "llama.cpp":
        from llm_gguf import write_gguf

        write_gguf(model, out + ".gguf", GGUF_TYPES[precision])
        return out + ".gguf"
    raise ValueError(f"unknown engine {engine!r}: {', '.join(ENGINES)}")


def genai_build(hf_dir: str, out: str, precision: str, spec: str | None, tmp: str) -> str:
    """onnxruntime-genai's model builder on ``hf_dir``: fp32, or int8/int4 MatMulNBits
    weights with the group and symmetry of ``spec`` (its default accuracy_level for the
    CPU, 4: activations quantized to int8 in the products)."""
    from plait.dialects.qnn.quantize_weights import parse_spec

    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf_dir,
           "-o", out, "-e", "cpu", "-c", os.path.join(tmp, "genai-cache")]
    if spec is None:
        cmd += ["-p", "fp32"]
    else:
        q = parse_spec(spec)
        if q["group"] is None:
            raise Unavailable(f"{spec}: onnxruntime-genai quantizes per block (16 to 256), "
                              "not per channel: give a group, e.g. int8-g32-sym")
        cmd += ["-p", f"int{q['bits']}", "--extra_options", f"block_size={q['group']}",
                f"is_symmetric={str(q['symmetric']).lower()}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(os.path.join(out, "genai_config.json")):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError("onnxruntime-genai's model builder failed: " + " | ".join(tail))
    return out


def save_hf_dir(model: Any, path: str) -> None:
    """``model`` as ``save_pretrained`` writes it, with a word-level tokenizer of its
    vocabulary (``<t0>``, ``<t1>``, ...): onnxruntime-genai's builder saves the
    tokenizer next to the model and fails without one."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    model.save_pretrained(path)
    vocab = model.config.vocab_size
    tok = Tokenizer(models.WordLevel({f"<t{i}>": i for i in range(vocab)}, unk_token="<t0>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<t0>", bos_token="<t1>",
        eos_token="<t2>").save_pretrained(path)
