"""Latency percentiles of plait-c and onnxruntime, in alternating processes.

    python benchmarks/spread.py                    # all three models, 3 rounds
    python benchmarks/spread.py --models cnn --rounds 5 --runs 200

On shared 2-vCPU machines a median hides how much a backend's latency moves; this prints
the 0th/10th/50th/90th/99th percentiles of ``--runs`` inferences per process (2 threads,
after warm-up), onnxruntime and plait-c taking turns, so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from run import MODELS, THREADS, _export, _time_runs  # noqa: E402

PERCENTILES = (0, 10, 50, 90, 99)


def worker(model: str, backend: str, onnx_path: str, runs: int) -> dict[str, Any]:
    import numpy as np

    x = np.random.default_rng(0).standard_normal(MODELS[model][1]).astype(np.float32)
    if backend == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name

        def fn() -> Any:
            return sess.run(None, {name: x})
    else:
        import plait
        from plait.frontend import from_onnx
        from plait.runtime import VirtualMachine

        main = VirtualMachine(plait.build(from_onnx(onnx_path, shapes={"input": x.shape}),
                                          "c"))["main"]

        def fn() -> Any:
            return main(x)
    ts = np.sort(np.array(_time_runs(fn, runs, warmup=10))) * 1e3
    return {str(q): float(ts[int(q / 100 * (len(ts) - 1))]) for q in PERCENTILES}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--worker", nargs=4, metavar=("MODEL", "BACKEND", "ONNX", "RUNS"))
    args = p.parse_args(argv)
    if args.worker:
        model, backend, onnx_path, runs = args.worker
        print(json.dumps(worker(model, backend, onnx_path, int(runs))))
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS))
    header = " / ".join(f"p{q}" for q in PERCENTILES)
    print(f"{'model':12s} {'backend':12s} {header} (ms)")
    medians: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            onnx_path = _export(model, Path(tmp))
            for _ in range(args.rounds):
                for backend in ("onnxruntime", "plait-c"):
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", model, backend, onnx_path,
                         str(args.runs)], capture_output=True, text=True, env=env, cwd=ROOT)
                    if out.returncode != 0:
                        print(f"{model:12s} {backend:12s} error: {out.stderr.strip()[-200:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    cells = " / ".join(f"{r[str(q)]:.2f}" for q in PERCENTILES)
                    print(f"{model:12s} {backend:12s} {cells}", flush=True)
                    medians.setdefault((model, backend), []).append(r["50"])
    print(summary(medians))
    return 0


def summary(medians: dict[tuple[str, str], list[float]]) -> str:
    """Per model: the median over rounds of each backend's p50, their ratio, and in how
    many rounds plait-c's p50 was at or below onnxruntime's (same round)."""
    lines = ["", "| model | rounds | onnxruntime p50 ms | plait-c p50 ms | ratio | rounds at or "
             "below |", "|---|---|---|---|---|---|"]
    for model in dict.fromkeys(m for m, _ in medians):
        ort = medians.get((model, "onnxruntime"), [])
        ours = medians.get((model, "plait-c"), [])
        n = min(len(ort), len(ours))
        if n == 0:
            continue
        mo, mp = statistics.median(ort[:n]), statistics.median(ours[:n])
        wins = sum(p <= o for o, p in zip(ort[:n], ours[:n]))
        lines.append(f"| {model} | {n} | {mo:.3f} | {mp:.3f} | {mp / mo:.2f} | {wins} of {n} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
