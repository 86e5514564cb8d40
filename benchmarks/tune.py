"""What tuning buys (issue 33): per model of a benchmark suite, plait-c untuned, plait
tune for a budget, plait-c with the database, and the peers (onnxruntime, OpenVINO when
installed), timed in this process, the plait builds interleaved.

    python benchmarks/tune.py --suite default --models cnn,mlp --budget 2m [--runs 30]
                              [--db tune-bench.db] [--ray local]
    python benchmarks/tune.py --models cnn --budget 1m --ray-speedup


Prints each model's medians and the ratios the issue states its goals in — tuned /
untuned plait-c, tuned plait-c / best peer (the faster of onnxruntime and OpenVINO) —
their geometric means, and the tuning time per model.  ``--ray-speedup`` instead tunes
each model for the budget twice, in this process and as Ray tasks on a local Ray of 2
workers (one CPU a trial), and prints the trials each finished: the speed-up of the
2-worker Ray run over the single-process run of the same budget.  Measure on a quiet machine
(``uptime``'s load is printed beside the figures): trials time calls inside the model,
and a busy machine makes both the tuner's choices and the ratios noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def run_module() -> Any:
    """benchmarks/run.py (the suites' models and inputs, the geometric mean)."""
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = mod
    spec.loader.exec_module(mod)
    return mod


def _median_seconds(fn: Any, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _plait_runner(onnx_path: str, x: np.ndarray, db: str | None) -> Any:
    import plait
    from plait.runtime import VirtualMachine
    from plait.tools.common import load_model

    mod = load_model(onnx_path, static=True).module
    attrs = {"tuning_db": db} if db else {}
    vm = VirtualMachine(plait.build(mod, plait.Target("c", **attrs)))
    return lambda: vm["main"](x)


def _findings(report: Any, top: int = 6) -> list[str]:
    """The calls whose chosen point (what the database gives them) is not the default,
    largest gain first: what moved which layer (its op and call key's sizes, the
    choices changed, the gain against the default measured with it)."""
    import json

    moved = []
    for (_, key), c in report.calls.items():
        if c.best is None or c.best == c.default or not c.best_seconds or not c.default_seconds:
            continue
        desc = json.loads(key).get("desc", {})
        shape = ",".join(f"{k}{desc[k]}" for k in ("C", "O", "OH", "KH", "G", "M", "N", "K")
                         if k in desc)
        label = ", ".join(f"{k}={v}" for k, v in c.best.items() if v != c.default.get(k))
        moved.append((c.default_seconds / c.best_seconds, c.op, shape, label, c.measured,
                      c.candidates))
    moved.sort(reverse=True)
    out = [line for line in report.lines() if "the whole model" in line]
    out.append(f"  {len(moved)} of {len(report.calls)} calls moved from the default")
    out += [f"  {g:.2f}x {op} [{shape}] -> {label} ({n}/{cands} points measured)"
            for g, op, shape, label, n, cands in moved[:top]]
    return out


def _peer_runner(name: str, onnx_path: str, x: np.ndarray) -> Any:
    if name == "onnxruntime":
        import onnxruntime as ort

        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x}
        return lambda: sess.run(None, feed)
    import openvino as ov

    compiled = ov.Core().compile_model(onnx_path, "CPU")
    return lambda: compiled([x])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="default")
    ap.add_argument("--models", help="comma-separated (default: the suite's)")
    ap.add_argument("--budget", default="2m", help="tuning time per model (90s, 10m)")
    ap.add_argument("--runs", type=int, default=30, help="timed calls per measurement")
    ap.add_argument("--db", help="the tuning database (default: a new temporary file)")
    ap.add_argument("--ray", help="tune with Ray: local, auto or an address")
    ap.add_argument("--ray-speedup", action="store_true",
                    help="trials in the budget: one process against 2 Ray workers")
    args = ap.parse_args(argv)

    from plait.tools.tune import LocalExecutor, ModelRef, parse_budget, tune

    run = run_module()
    models = args.models.split(",") if args.models else run.suite_models(args.suite)
    work = Path(tempfile.mkdtemp(prefix="plait-tune-bench-"))
    files = run.model_files(args.suite, models, work)
    db = args.db or str(work / "tuning.db")
    budget = parse_budget(args.budget)
    if args.ray:
        sys.path.insert(0, str(ROOT))
        from plait.tools.tune.ray_runner import RayExecutor

        executor: Any = RayExecutor(args.ray)
    else:
        executor = LocalExecutor()
    if args.ray_speedup:
        from plait.tools.tune.ray_runner import RayExecutor

        ray_executor = RayExecutor("local", cpus_per_trial=1)
        print("| model | trials, one process | trials, 2 Ray workers | speed-up |")
        print("|---|---|---|---|")
        for m in models:
            ref = ModelRef.from_path(files[m][0])
            one = tune(ref, str(work / f"{m}-local.db"), budget, LocalExecutor())
            two = tune(ref, str(work / f"{m}-ray.db"), budget, ray_executor)
            print(f"| {m} | {one.trials} | {two.trials} | {two.trials / one.trials:.2f} |")
        print(f"load (1 min) at the end: {os.getloadavg()[0]:.1f}")
        return 0
    peers = ["onnxruntime"] + (["openvino"] if importlib.util.find_spec("openvino") else [])
    rows, ratio_untuned, ratio_peer, found = [], [], [], []
    for m in models:
        onnx_path, inp = files[m]
        x = np.load(inp)
        t0 = time.perf_counter()
        report = tune(ModelRef.from_path(onnx_path), db, budget, executor)
        tuning = time.perf_counter() - t0
        found += [f"{m}: {report.trials} trials ({report.failed} failed)", *_findings(report)]
        untuned, tuned = _plait_runner(onnx_path, x, None), _plait_runner(onnx_path, x, db)
        u, t = [], []
        for _ in range(3):   # interleaved
            u.append(_median_seconds(untuned, args.runs))
            t.append(_median_seconds(tuned, args.runs))
        u_s, t_s = min(u), min(t)
        peer = {p: _median_seconds(_peer_runner(p, onnx_path, x), args.runs) for p in peers}
        best_peer = min(peer.values())
        ratio_untuned.append(t_s / u_s)
        ratio_peer.append(t_s / best_peer)
        rows.append(f"| {m} | {u_s * 1e3:.3f} | {t_s * 1e3:.3f} | "
                    + " | ".join(f"{peer[p] * 1e3:.3f}" for p in peers)
                    + f" | {t_s / u_s:.3f} | {t_s / best_peer:.3f} | {tuning:.0f} s "
                      f"({report.trials} trials) |")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; load before/after: see uptime; "
          f"{os.getloadavg()[0]:.1f} (1 min) at the end")
    print(f"| model | untuned ms | tuned ms | {' ms | '.join(peers)} ms | tuned/untuned | "
          "tuned/best peer | tuning |")
    print("|---" * (6 + len(peers)) + "|")
    print("\n".join(rows))
    print(f"geomean tuned/untuned {run.geomean(ratio_untuned):.3f}, tuned/best peer "
          f"{run.geomean(ratio_peer):.3f} over {len(models)} models")
    print("what the tuner moved (gains as it measured them inside the model):")
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
