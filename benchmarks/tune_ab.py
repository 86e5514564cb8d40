"""What a tuning database changes in a model, call by call (issue 33): the model built
with the database and with every call at its default point, run in turn in this
process (round by round, the order alternating) with the step timer, and per call the
median over the rounds of its time with the database over its time with the defaults
in the same round; the whole step's too.

    python benchmarks/tune_ab.py --suite broad --model mobilenetv2 --db tuning.db
                                 [--rounds 30]

The pairing cancels most of what the machine's load does between two builds' runs, so
it tells which of a tuning run's choices hold up (on a shared machine: a point chosen
under load, say one thread, may lose at another load).  Lists the calls whose point
differs from the default, fastest first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune import run_module  # noqa: E402


def _timed(exe: Any, x: np.ndarray) -> Any:
    """A function running ``exe`` once with the step timer: ({call key: seconds}, the
    whole step's seconds)."""
    from plait.runtime import VirtualMachine

    vm = VirtualMachine(exe)
    calls = exe.attrs.get("tuning") or {}

    def run() -> tuple[dict[str, float], float]:
        _, entries = vm.profile_steps("main", x)
        sums: dict[str, float] = {}
        for e in entries:
            info = calls.get(e.callee)
            if info is not None:
                sums[info["call"]] = sums.get(info["call"], 0.0) + e.seconds
        return sums, sum(e.seconds for e in entries)

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="broad")
    ap.add_argument("--model", required=True)
    ap.add_argument("--db", required=True, help="the tuning database")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)

    import plait
    from plait.target.c.tuning import TuningDB
    from plait.tools.common import load_model

    run = run_module()
    work = Path(tempfile.mkdtemp(prefix="plait-tune-ab-"))
    onnx_path, inp = run.model_files(args.suite, [args.model], work)[args.model]
    mod = load_model(onnx_path, static=True).module
    x = np.load(inp)
    empty = str(work / "empty.db")
    TuningDB(empty)
    exes = {n: plait.build(mod, plait.Target("c", step_timing=True, tuning_db=d))
            for n, d in (("default", empty), ("tuned", args.db))}
    runs = {n: _timed(e, x) for n, e in exes.items()}
    for r in runs.values():   # warm-up
        r()
    ratios: dict[str, list[float]] = {}
    whole = []
    for i in range(args.rounds):
        order = ("default", "tuned") if i % 2 == 0 else ("tuned", "default")
        got = {n: runs[n]() for n in order}
        for k, t in got["tuned"][0].items():
            d = got["default"][0].get(k)
            if d:
                ratios.setdefault(k, []).append(t / d)
        whole.append(got["tuned"][1] / got["default"][1])
    print(f"{args.model}: whole step with the database / defaults: median "
          f"{statistics.median(whole):.3f} over {args.rounds} paired rounds; load (1 min) "
          f"{os.getloadavg()[0]:.1f}")
    points = {v["call"]: v for v in exes["tuned"].attrs["tuning"].values()}
    rows = []
    for k, rs in ratios.items():
        v = points[k]
        changed = {c: p for c, p in v["point"].items() if p != v["space"]["default"].get(c)}
        if v["origin"] == "database" and changed:
            d = json.loads(k)["desc"]
            shape = ",".join(f"{f}{d[f]}" for f in ("C", "O", "OH", "KH", "G", "M", "N", "K")
                             if f in d)
            rows.append((statistics.median(rs), v["op"], shape, changed))
    for m, op, shape, changed in sorted(rows, key=lambda r: r[0]):
        print(f"  {m:.3f} {op} [{shape}] {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
