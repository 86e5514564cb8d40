"""plait-c and onnxruntime in one process, their calls alternating (2 threads each).

    python benchmarks/interleave.py                 # all three models
    python benchmarks/interleave.py --models mlp --runs 300

An application that runs plait next to another threaded runtime sees each runtime's
idle workers still spinning when the other one calls.  This prints the p10/p25/p50/p90
latency (ms) of each backend's calls in such a process, and, for scale, of plait-c
alone in a process of its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from run import DEFAULT_MODELS, MODELS, THREADS, _export, prepare  # noqa: E402

PERCENTILES = (10, 25, 50, 90)


def _cells(times: list[float]) -> str:
    ts = sorted(times)
    return " / ".join(f"{ts[int(q / 100 * (len(ts) - 1))] * 1e3:.2f}" for q in PERCENTILES)


def worker(model: str, onnx_path: str, input_path: str, runs: int, alone: bool) -> str:
    backends = ["plait-c"] if alone else ["plait-c", "onnxruntime"]
    calls = [(b, prepare(model, b, onnx_path, input_path)[1]) for b in backends]
    times: dict[str, list[float]] = {n: [] for n, _ in calls}
    for i in range(runs + 10):
        for n, fn in calls:
            t = time.perf_counter()
            fn()
            if i >= 10:   # warm-up
                times[n].append(time.perf_counter() - t)
    where = "alone" if alone else "interleaved"
    return "\n".join(f"{model:12s} {n:12s} {where:12s} {_cells(ts)}" for n, ts in times.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS,
                   help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--worker", nargs=5, metavar=("MODEL", "ONNX", "INPUT", "RUNS", "ALONE"))
    args = p.parse_args(argv)
    if args.worker:
        model, onnx_path, input_path, runs, alone = args.worker
        print(worker(model, onnx_path, input_path, int(runs), alone == "1"))
        return 0
    import numpy as np

    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS))
    header = " / ".join(f"p{q}" for q in PERCENTILES)
    print(f"{'model':12s} {'backend':12s} {'process':12s} {header} (ms)")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            onnx_path = _export(model, Path(tmp))
            input_path = str(Path(tmp) / f"{model}.input.npy")
            x = np.random.default_rng(0).standard_normal(MODELS[model][1])
            np.save(input_path, x.astype("float32"))
            for alone in ("0", "1"):
                out = subprocess.run([sys.executable, __file__, "--worker", model, onnx_path,
                                      input_path, str(args.runs), alone],
                                     capture_output=True, text=True, env=env, cwd=ROOT)
                if out.returncode != 0:
                    print(f"{model:12s} error: {out.stderr.strip()[-300:]}")
                    continue
                print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
