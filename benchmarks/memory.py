"""Where the memory goes: building and serving a model, by owner, against onnxruntime.

    python benchmarks/memory.py                          # bert, gpt2, vit, resnet18
    python benchmarks/memory.py --models bert --target c --json out.json

Every measurement runs in a fresh process of its own without torch (the models are the
real-model suite's ``transformers`` exports, benchmarks/real_models.py, made once in a
child process and cached).  For each model:

* **build** (plait): the process imports the ONNX file, runs ``plait.build`` and saves a
  ``.plx``; its peak resident memory above the baseline after imports (``VmHWM`` minus
  ``VmRSS`` at the start, from ``/proc/self/status``), as a multiple of the weights;
* **serve** (plait): a process loads the ``.plx`` and runs it six times; the resident
  memory after each step (load, ``VirtualMachine``, first run) above the baseline, the
  peak, and the owners of what ``Executable.load`` kept, measured directly: the
  constants' array bytes, the kept graph's text, the native libraries' bytes, and the
  Python heap that ``tracemalloc`` saw (numpy registers its array buffers with it, so
  the arrays are part of it); what the process holds beyond Python's heap after the
  first run (the mapped library, its packed weights and arenas: native ``malloc``) is the
  resident growth that ``tracemalloc`` did not see;
* **serve** (onnxruntime): a process creates an ``InferenceSession`` from the ONNX file
  (CPU, same threads) and runs it six times: the same peak above the baseline.

Sizes are MiB (2**20 bytes).  ``tracemalloc`` (the standard library) is used rather than a
profiler such as memray because the owners here are few and known: its total for the
load step, set against the sizes of the executable's members, names them; ``/proc`` gives
what the process holds in all.  Peaks are ``VmHWM``, which the kernel keeps per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_MODELS = ("bert", "gpt2", "vit", "resnet18")
RUNS = 6


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _rss() -> float:
    return _status_mib("VmRSS:")


def _hwm() -> float:
    return _status_mib("VmHWM:")


def _inputs(spec_name: str):  # type: ignore[no-untyped-def]
    import numpy as np
    from real_models import MODELS

    spec = MODELS[spec_name]
    rng = np.random.default_rng(0)
    if spec.dtype.startswith("int"):
        return rng.integers(0, spec.vocab or 2, size=spec.shape).astype(spec.dtype)
    return rng.standard_normal(spec.shape).astype(spec.dtype)


def child_build(onnx_path: str, target: str, out: str) -> dict:
    import plait
    from plait.frontend.onnx import from_onnx

    base = _rss()
    t0 = time.perf_counter()
    mod = from_onnx(onnx_path)  # from the path, as `plait compile` does: weights read once
    after_import = _rss() - base
    exe = plait.build(mod, target)
    del mod
    exe.save(out)
    return {"build_s": time.perf_counter() - t0, "import_mib": after_import,
            "build_peak_mib": _hwm() - base, "plx_mib": os.path.getsize(out) / 2**20}


def child_serve_plait(plx: str, model: str, threads: int) -> dict:
    import tracemalloc

    import numpy as np

    from plait.runtime import Executable, VirtualMachine

    x = _inputs(model)
    base = _rss()
    tracemalloc.start()
    t0 = time.perf_counter()
    exe = Executable.load(plx)
    load_heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after_load = _rss() - base
    owners = {
        "constants_mib": sum(c.nbytes for c in exe.constants) / 2**20,
        "graph_text_mib": len(exe.graph or "") / 2**20,
        "libraries_mib": sum(len(b) for b in exe.libs.values()) / 2**20,
        "load_python_heap_mib": load_heap / 2**20,
    }
    vm = VirtualMachine(exe)
    after_vm = _rss() - base
    first = vm["main"](x)
    first_s = time.perf_counter() - t0
    after_first = _rss() - base
    for _ in range(RUNS - 1):
        vm["main"](x)
    assert np.all(np.isfinite(first if isinstance(first, np.ndarray) else first[0]))
    return {**owners, "load_mib": after_load, "vm_mib": after_vm, "first_run_mib": after_first,
            "serve_peak_mib": _hwm() - base, "load_first_run_s": first_s,
            "native_beyond_heap_mib": max(after_first - after_load, 0.0)}


def child_serve_ort(onnx_path: str, model: str, threads: int) -> dict:
    import onnxruntime as ort

    x = _inputs(model)
    base = _rss()
    t0 = time.perf_counter()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    first_s = time.perf_counter() - t0
    for _ in range(RUNS - 1):
        sess.run(None, feed)
    return {"serve_peak_mib": _hwm() - base, "load_first_run_s": first_s}


def _run_child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def weight_mib(onnx_path: Path) -> float:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        total += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total / 2**20


def measure(model: str, onnx_path: Path, target: str, threads: int, work: Path) -> dict:
    plx = work / f"{model}-{target}.plx"
    row: dict = {"model": model, "weights_mib": weight_mib(onnx_path)}
    row["build"] = _run_child("build", str(onnx_path), target, str(plx))
    row["plait"] = _run_child("serve_plait", str(plx), model, str(threads))
    row["onnxruntime"] = _run_child("serve_ort", str(onnx_path), model, str(threads))
    return row


def table(rows: list[dict], target: str) -> str:
    head = ("| model | weights | build peak (x weights) | serve peak plait-" + target +
            " | onnxruntime | ratio | after load | constants | graph text | libraries "
            "| native beyond heap | load + first run plait / onnxruntime |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        p, o, b, w = r["plait"], r["onnxruntime"], r["build"], r["weights_mib"]
        lines.append(
            f"| {r['model']} | {w:.0f} | {b['build_peak_mib']:.0f} "
            f"({b['build_peak_mib'] / w:.1f}x) | {p['serve_peak_mib']:.0f} | "
            f"{o['serve_peak_mib']:.0f} | {p['serve_peak_mib'] / o['serve_peak_mib']:.2f} | "
            f"{p['load_mib']:.0f} | {p['constants_mib']:.0f} | {p['graph_text_mib']:.0f} | "
            f"{p['libraries_mib']:.1f} | {p['native_beyond_heap_mib']:.0f} | "
            f"{p['load_first_run_s']:.2f} / {o['load_first_run_s']:.2f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--target", default="c")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "build":
            out = child_build(*rest)
        elif kind == "serve_plait":
            out = child_serve_plait(rest[0], rest[1], int(rest[2]))
        else:
            out = child_serve_ort(rest[0], rest[1], int(rest[2]))
        print(json.dumps(out))
        return 0
    from real_models import export_cached

    names = [n for n in args.models.split(",") if n]
    paths = export_cached(names)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows.append(measure(name, paths[name], args.target, args.threads, Path(tmp)))
            print(f"{name}: done", file=sys.stderr, flush=True)
    print(table(rows, args.target))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
