"""Where the time goes: per-kernel profiles of plait on ``c`` and per-operator profiles of
onnxruntime, for the benchmark models.

    python benchmarks/profile_models.py --suite real                  # every real model
    python benchmarks/profile_models.py --suite real --models bert --top 15
    python benchmarks/profile_models.py --models cnn --runs 20

For each model, in a process that does not import torch (the real suite's models come
from benchmarks/real_models.py's cache, exported by a child process when missing):

* **plait-c**: the executable's call instructions timed by ``VirtualMachine.profile``,
  the median over ``--runs`` inferences of each instruction, summed per callee (a native
  kernel, a library wrapper such as ``plait_gemm_<hash>``, or a packed function) and per
  family (``gemm``, ``conv``, ``attention``, ``pool``, fused elementwise chains...);
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


def profile_plait(onnx_path: str, x: Any, runs: int) -> list[dict[str, float]]:
    """Per run, the seconds per callee of plait's ``c`` executable."""
    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine

    vm = VirtualMachine(plait.build(from_onnx(onnx_path, shapes={"input": x.shape}), "c"))
    for _ in range(3):
        vm["main"](x)
    out = []
    for _ in range(runs):
        _, entries = vm.profile("main", x)
        per: dict[str, float] = collections.Counter()
        for e in entries:
            per[e.callee] += e.seconds
        out.append(dict(per))
    return out


def profile_ort(onnx_path: str, x: Any, runs: int) -> list[dict[str, float]]:
    """Per run, the seconds per operator type (of the optimized graph) of onnxruntime."""
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
        marks = []
        for _ in range(runs):
            t = time.perf_counter()
            sess.run(None, {name: x})
            marks.append(t)
        events = json.loads(Path(sess.end_profiling()).read_text())
    # node events carry their start (us since the session began); split them into runs
    # by order: every run has the same nodes
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    per_run = len(nodes) // (runs + 3)
    out = []
    for k in range(3, runs + 3):
        per: dict[str, float] = collections.Counter()
        for e in nodes[k * per_run:(k + 1) * per_run]:
            per[e["args"].get("op_name", "?")] += e["dur"] * 1e-6
        out.append(dict(per))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=run.SUITES, default="default")
    p.add_argument("--models", default=None, help="comma-separated (default: the suite's)")
    p.add_argument("--runs", type=int, default=10, help="profiled inferences per model")
    p.add_argument("--top", type=int, default=10, help="callees shown per model")
    p.add_argument("--no-ort", action="store_true", help="skip onnxruntime's profile")
    args = p.parse_args(argv)
    real = args.suite == "real"
    models = args.models or (",".join(run.real_models().MODELS) if real
                             else run.DEFAULT_MODELS)
    problem = run.unknown_models(models, args.suite)
    if problem:
        p.error(problem)
    run._set_threads()
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        files = run.model_files(args.suite, models.split(","), Path(tmp))
        for model, (onnx_path, inp) in files.items():
            x = np.load(inp)
            plait_runs = profile_plait(onnx_path, x, args.runs)
            callees = summarize(plait_runs)
            fams: dict[str, float] = collections.Counter()
            for k, v in callees:
                fams[family(k)] += v
            print(f"\n## {model}: plait-c\n")
            print(table(sorted(fams.items(), key=lambda kv: -kv[1]), "family", args.top))
            print()
            print(table(callees, "callee", args.top))
            if not args.no_ort:
                print(f"\n## {model}: onnxruntime\n")
                print(table(summarize(profile_ort(onnx_path, x, args.runs)), "operator",
                            args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
