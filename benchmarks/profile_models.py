"""Where the time goes: per-kernel profiles of plait on ``c`` and per-operator profiles of
onnxruntime, for the benchmark models.

    python benchmarks/profile_models.py --suite real                  # every real model
    python benchmarks/profile_models.py --suite real --models bert --top 15
    python benchmarks/profile_models.py --models cnn --runs 20
    python benchmarks/profile_models.py --suite real --models mobilenetv2 --runs 200 --steps 20

For each model, in a process that does not import torch (the real suite's models come
from benchmarks/real_models.py's cache, exported by a child process when missing):

* **plait-c**: each native call inside the model's single entry point, timed in C
  (built with ``Target("c", step_timing=True)``: ``VirtualMachine.profile_steps``), the
  median over ``--runs`` inferences of each call, summed per callee (a native kernel or
  a library wrapper such as ``plait_gemm_<hash>``) and per family (``gemm``, ``conv``,
  ``attention``, ``pool``, fused elementwise chains...).  ``--vm-path`` times the VM
  path's call instructions instead (``VirtualMachine.profile``: each call from Python,
  which also counts Python between the kernels, and a model without a single entry
  point);
* ``--steps N``: the N calls that take longest (median and minimum over the runs, in
  microseconds), and onnxruntime's N longest nodes (with their output shapes); the whole
  model's minimum and median beside them;
* **onnxruntime** (same threads, all graph optimizations): its node timings from
  ``SessionOptions.enable_profiling``, the median per node over the same number of
  runs, summed per operator type of the optimized graph (``FusedConv``, ``Gelu``,
  ``Attention``... show what onnxruntime fused).

Shares are of the summed instruction (node) times; the machine's load shows in the
milliseconds, so read the shares.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402

FAMILIES = (
    # (family, pattern over the callee's name); the first match wins
    ("attention", r"attention"),
    ("winograd conv", r"winograd"),
    ("conv", r"conv"),
    ("gemm", r"gemm|matmul|linear|dense"),
    ("pool", r"pool"),
    ("norm", r"norm"),
    ("softmax", r"softmax"),
    ("fused elementwise", r"^fused_"),
)


def family(callee: str) -> str:
    """The kernel family of a callee name (``other`` when no pattern matches)."""
    for fam, pat in FAMILIES:
        if re.search(pat, callee):
            return fam
    return "other"


def summarize(per_run: list[dict[str, float]]) -> list[tuple[str, float]]:
    """Each key's median over the runs (a run without the key counts 0), largest first."""
    keys = {k for r in per_run for k in r}
    med = {k: statistics.median(r.get(k, 0.0) for r in per_run) for k in keys}
    return sorted(med.items(), key=lambda kv: -kv[1])


def table(rows: list[tuple[str, float]], what: str, top: int) -> str:
    """Milliseconds and shares of the ``top`` largest rows (the rest summed)."""
    total = sum(v for _, v in rows) or 1.0
    lines = [f"| {what} | ms | share |", "|---|---|---|"]
    for k, v in rows[:top]:
        lines.append(f"| {k} | {v * 1e3:.3f} | {100 * v / total:.1f}% |")
    rest = sum(v for _, v in rows[top:])
    if rest:
        lines.append(f"| ({len(rows) - top} more) | {rest * 1e3:.3f} | {100 * rest / total:.1f}% |")
    lines.append(f"| **total** | {total * 1e3:.3f} | |")
    return "\n".join(lines)


@dataclasses.dataclass
class Profile:
    """One backend's profile of a model: per run, the seconds per callee (operator
    type); the calls (nodes) in order, and per run the seconds of each; per run the
    whole inference's seconds."""

    per_run: list[dict[str, float]]
    calls: list[str]
    call_seconds: list[list[float]]
    totals: list[float]


def profile_plait(onnx_path: str, x: Any, runs: int, vm_path: bool = False) -> Profile:
    """plait's ``c`` executable: the calls inside its single entry point, timed in C
    (with ``vm_path``, the VM path's call instructions, timed from Python)."""
    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine
    from plait.target import Target

    target = "c" if vm_path else Target("c", step_timing=True)
    vm = VirtualMachine(plait.build(from_onnx(onnx_path, shapes={"input": x.shape}), target))
    if not vm_path and vm.entry_point("main") is None:
        raise SystemExit(f"{onnx_path}: {vm.execution_path('main')}: use --vm-path")
    for _ in range(3):
        vm["main"](x)
    prof = Profile([], [], [], [])
    for _ in range(runs):
        t = time.perf_counter()
        _, entries = vm.profile("main", x) if vm_path else vm.profile_steps("main", x)
        prof.totals.append(time.perf_counter() - t)
        per: dict[str, float] = collections.Counter()
        for e in entries:
            per[e.callee] += e.seconds
        prof.per_run.append(dict(per))
        prof.call_seconds.append([e.seconds for e in entries])
    prof.calls = [f"{e.pc}: {e.callee}" for e in entries]   # (the same in every run)
    return prof


def profile_ort(onnx_path: str, x: Any, runs: int) -> Profile:
    """onnxruntime (same threads, all graph optimizations): its nodes' kernel times,
    per operator type of the optimized graph and per node."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = run.THREADS
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        for _ in range(3):
            sess.run(None, {name: x})
        totals = []
        for _ in range(runs):
            t = time.perf_counter()
            sess.run(None, {name: x})
            totals.append(time.perf_counter() - t)
        events = json.loads(Path(sess.end_profiling()).read_text())
    # every run has the same nodes, in the same order: split the node events into runs
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    per_run = len(nodes) // (runs + 3)
    prof = Profile([], [], [], totals)
    for k in range(3, runs + 3):
        per: dict[str, float] = collections.Counter()
        run_nodes = nodes[k * per_run:(k + 1) * per_run]
        for e in run_nodes:
            per[e["args"].get("op_name", "?")] += e["dur"] * 1e-6
        prof.per_run.append(dict(per))
        prof.call_seconds.append([e["dur"] * 1e-6 for e in run_nodes])
    prof.calls = [f"{i}: {e['args'].get('op_name', '?')} -> {_shape(e)}"
                  for i, e in enumerate(nodes[3 * per_run:4 * per_run])]
    return prof


def _shape(event: dict[str, Any]) -> str:
    """The first output's shape of an onnxruntime node event (``?`` when absent)."""
    outs = event["args"].get("output_type_shape") or [{}]
    dims = next(iter(outs[0].values()), None) if outs and isinstance(outs[0], dict) else None
    return "x".join(map(str, dims)) if dims else "?"


def steps_table(prof: Profile, top: int) -> str:
    """The ``top`` longest calls: median and minimum over the runs, microseconds."""
    n = len(prof.calls)
    med = [statistics.median(r[i] for r in prof.call_seconds) for i in range(n)]
    low = [min(r[i] for r in prof.call_seconds) for i in range(n)]
    order = sorted(range(n), key=lambda i: -med[i])
    lines = ["| call | median us | min us |", "|---|---|---|"]
    for i in order[:top]:
        lines.append(f"| {prof.calls[i]} | {med[i] * 1e6:.0f} | {low[i] * 1e6:.0f} |")
    lines.append(f"| **sum of {n} calls** | {sum(med) * 1e6:.0f} | {sum(low) * 1e6:.0f} |")
    lines.append(f"| **whole inference** | {statistics.median(prof.totals) * 1e6:.0f} | "
                 f"{min(prof.totals) * 1e6:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=run.SUITES, default="default")
    p.add_argument("--models", default=None, help="comma-separated (default: the suite's)")
    p.add_argument("--runs", type=int, default=10, help="profiled inferences per model")
    p.add_argument("--top", type=int, default=10, help="callees shown per model")
    p.add_argument("--no-ort", action="store_true", help="skip onnxruntime's profile")
    p.add_argument("--steps", type=int, default=0, metavar="N",
                   help="also show the N longest calls (nodes) with median and minimum")
    p.add_argument("--vm-path", action="store_true",
                   help="time the VM path's call instructions from Python instead of the "
                        "calls inside the single entry point")
    args = p.parse_args(argv)
    models = args.models or ",".join(run.suite_models(args.suite))
    problem = run.unknown_models(models, args.suite)
    if problem:
        p.error(problem)
    run._set_threads()
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        files = run.model_files(args.suite, models.split(","), Path(tmp))
        for model, (onnx_path, inp) in files.items():
            x = np.load(inp)
            plait_prof = profile_plait(onnx_path, x, args.runs, args.vm_path)
            callees = summarize(plait_prof.per_run)
            fams: dict[str, float] = collections.Counter()
            for k, v in callees:
                fams[family(k)] += v
            print(f"\n## {model}: plait-c\n")
            print(table(sorted(fams.items(), key=lambda kv: -kv[1]), "family", args.top))
            print()
            print(table(callees, "callee", args.top))
            if args.steps:
                print()
                print(steps_table(plait_prof, args.steps))
            if not args.no_ort:
                ort_prof = profile_ort(onnx_path, x, args.runs)
                print(f"\n## {model}: onnxruntime\n")
                print(table(summarize(ort_prof.per_run), "operator", args.top))
                if args.steps:
                    print()
                    print(steps_table(ort_prof, args.steps))
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
