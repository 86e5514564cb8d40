"""Latency percentiles of plait-c and onnxruntime, in alternating processes.

    python benchmarks/spread.py                    # all three models, 3 rounds
    python benchmarks/spread.py --models cnn --rounds 5 --runs 200
    git worktree add /tmp/before HEAD~3 && python benchmarks/spread.py --before /tmp/before

On shared 2-vCPU machines a median hides how much a backend's latency moves; this prints
the 0th/10th/50th/90th/99th percentiles of ``--runs`` inferences per process (2 threads,
after warm-up), onnxruntime and plait-c taking turns, so both see the same machine.
At the end, a summary per model: the median over rounds of each backend's p50, the ratio,
and in how many rounds plait-c was at or below onnxruntime.

``--before DIR`` adds a third backend, ``plait-c-before``: plait-c imported from DIR (a
checkout of another revision, e.g. a git worktree), taking its turn in every round; the
summary then also compares the two trees.  This is how a change's before/after is
measured on a noisy machine.
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
    p.add_argument("--before", default=None, metavar="DIR",
                   help="also run plait-c from this checkout (another revision)")
    p.add_argument("--worker", nargs=4, metavar=("MODEL", "BACKEND", "ONNX", "RUNS"))
    args = p.parse_args(argv)
    if args.worker:
        model, backend, onnx_path, runs = args.worker
        print(json.dumps(worker(model, backend, onnx_path, int(runs))))
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS))
    backends = [("onnxruntime", env), ("plait-c", env)]
    if args.before:
        before = Path(args.before).resolve()
        if not (before / "plait" / "__init__.py").is_file():
            p.error(f"--before {args.before}: no plait package there (expected a checkout "
                    "of the repository, e.g. made with `git worktree add`)")
        path = os.pathsep.join([str(before), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        backends.append(("plait-c-before", dict(env, PYTHONPATH=path)))
    header = " / ".join(f"p{q}" for q in PERCENTILES)
    print(f"{'model':12s} {'backend':12s} {header} (ms)")
    medians: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            onnx_path = _export(model, Path(tmp))
            for _ in range(args.rounds):
                for backend, benv in backends:
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", model, backend, onnx_path,
                         str(args.runs)], capture_output=True, text=True, env=benv, cwd=ROOT)
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
    many rounds plait-c's p50 was at or below onnxruntime's (same round); with
    ``plait-c-before`` rounds, a second table compares plait-c with it."""
    out = ["", *_pairs(medians, "onnxruntime", "plait-c", "ratio", "rounds at or below")]
    if any(b == "plait-c-before" for _, b in medians):
        out += ["", *_pairs(medians, "plait-c-before", "plait-c", "after / before",
                            "rounds after at or below")]
    return "\n".join(out)


def _pairs(medians: dict[tuple[str, str], list[float]], ref: str, ours: str, ratio: str,
           wins: str) -> list[str]:
    lines = [f"| model | rounds | {ref} p50 ms | {ours} p50 ms | {ratio} | {wins} |",
             "|---|---|---|---|---|---|"]
    for model in dict.fromkeys(m for m, _ in medians):
        a = medians.get((model, ref), [])
        b = medians.get((model, ours), [])
        n = min(len(a), len(b))
        if n == 0:
            continue
        ma, mb = statistics.median(a[:n]), statistics.median(b[:n])
        won = sum(y <= x for x, y in zip(a[:n], b[:n]))
        lines.append(f"| {model} | {n} | {ma:.3f} | {mb:.3f} | {mb / ma:.2f} | {won} of {n} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
