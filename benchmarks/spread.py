"""Latency percentiles of plait-c and onnxruntime, their processes taking turns.

    python benchmarks/spread.py                    # all three models, 10 rounds
    python benchmarks/spread.py --models cnn --rounds 20 --block 10
    python benchmarks/spread.py --models mlp-layer1 --threads 1
    git worktree add /tmp/before HEAD~3 && python benchmarks/spread.py --before /tmp/before

On shared 2-vCPU machines a median hides how much a backend's latency moves.  Each
backend runs in a process of its own (2 threads); the processes take turns as in
benchmarks/run.py (``--gap`` seconds of idle, ``--warm`` seconds of untimed calls, then
``--block`` timed calls; ``--rounds`` rounds in a shuffled order), so all of them sample
the same phases of the machine.  It prints the 0th/10th/50th/90th/99th percentiles of
each backend's timed calls, then a summary per model: the median over rounds of each
backend's block median, the ratio, and in how many rounds plait-c was at or below
onnxruntime.

``--before DIR`` adds a third backend, ``plait-c-before``: plait-c imported from DIR (a
checkout of another revision, e.g. a git worktree), taking its turn in every round; the
summary then also compares the two trees.  This is how a change's before/after is
measured on a noisy machine.

``--isas avx2,baseline`` adds ``plait-c@<isa>`` for each: plait-c with its native kernel
families capped at that instruction set (``PLAIT_ISA``; plait-c runs the CPU's best), so
the summary sets the copies of the same tree against each other (docs/kernels.md).

``--kernel-loop`` adds ``plait-c-kernel``: the model's most expensive native call alone,
called in a C loop (benchmarks/kernel_loop.py).  The summary then sets it against
plait-c (what calling from Python adds) and onnxruntime (on a one-layer model such as
``mlp-layer1``, the bare kernel against onnxruntime's whole call).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import run  # noqa: E402
from run import DEFAULT_MODELS, MODELS, Player, _export, take_turns  # noqa: E402

PERCENTILES = (0, 10, 50, 90, 99)


def _percentiles(times: list[float]) -> str:
    ts = sorted(times)
    return " / ".join(f"{ts[int(q / 100 * (len(ts) - 1))] * 1e3:.2f}" for q in PERCENTILES)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS,
                   help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--block", type=int, default=10, help="timed calls per turn")
    p.add_argument("--gap", type=float, default=0.2, help="seconds of idle before a turn")
    p.add_argument("--warm", type=float, default=0.05,
                   help="seconds of untimed calls at the start of a turn")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of every backend (default 2)")
    p.add_argument("--before", default=None, metavar="DIR",
                   help="also run plait-c from this checkout (another revision)")
    p.add_argument("--kernel-loop", action="store_true",
                   help="also time the most expensive native call in a C loop")
    p.add_argument("--isas", default="", metavar="ISA,...",
                   help="also run plait-c capped at each of these instruction sets "
                        "(PLAIT_ISA), e.g. avx2,baseline")
    args = p.parse_args(argv)
    problem = run.unknown_models(args.models)
    if problem:
        p.error(problem)
    if args.threads:
        run.THREADS = args.threads   # the workers' settings come from it
        os.environ["PLAIT_BENCH_THREADS"] = str(args.threads)   # and their own copy
    backends: list[tuple[str, str, dict[str, str]]] = [
        ("onnxruntime", "onnxruntime", {}), ("plait-c", "plait-c", {})]
    if args.before:
        try:
            backends.append(("plait-c-before", "plait-c", run.before_env(args.before)))
        except ValueError as err:
            p.error(str(err))
    if args.kernel_loop:
        backends.append(("plait-c-kernel", "plait-c-kernel", {}))
    for isa in filter(None, args.isas.split(",")):
        backends.append((f"plait-c@{isa}", "plait-c", {"PLAIT_ISA": isa}))
    import numpy as np

    header = " / ".join(f"p{q}" for q in PERCENTILES)
    print(f"{'model':12s} {'backend':15s} {header} (ms)")
    medians: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in args.models.split(","):
            onnx_path = _export(model, work)
            inp = str(work / f"{model}.input.npy")
            x = np.random.default_rng(0).standard_normal(MODELS[model][1])
            np.save(inp, x.astype("float32"))
            players = [Player(model, backend, 0, onnx_path, inp, work, label=label, env=env,
                              fresh_cache=False) for label, backend, env in backends]
            take_turns([pl for pl in players if not pl.error], args.rounds, args.block,
                       args.gap, args.warm)
            for pl in players:
                pl.finish()
                if pl.error:
                    print(f"{model:12s} {pl.backend:15s} error: {pl.error}")
                    continue
                print(f"{model:12s} {pl.backend:15s} {_percentiles(pl.times)}", flush=True)
                medians[(model, pl.backend)] = [b * 1e3 for b in pl.blocks]
    print(summary(medians))
    return 0


def summary(medians: dict[tuple[str, str], list[float]]) -> str:
    """Per model: the median over rounds of each backend's block median, their ratio,
    and in how many rounds plait-c's was at or below onnxruntime's (same round); with
    ``plait-c-before`` rounds, a second table compares plait-c with it; with
    ``plait-c-kernel`` rounds, two more set the kernel loop against plait-c and
    onnxruntime."""
    out = ["", *_pairs(medians, "onnxruntime", "plait-c", "ratio", "rounds at or below")]
    backends = {b for _, b in medians}
    if "plait-c-before" in backends:
        out += ["", *_pairs(medians, "plait-c-before", "plait-c", "after / before",
                            "rounds after at or below")]
    for isa_backend in sorted(b for b in backends if b.startswith("plait-c@")):
        out += ["", *_pairs(medians, isa_backend, "plait-c", "best / capped",
                            "rounds best at or below")]
    if "plait-c-kernel" in backends:
        out += ["", *_pairs(medians, "plait-c", "plait-c-kernel", "kernel / call",
                            "rounds kernel at or below")]
        out += ["", *_pairs(medians, "onnxruntime", "plait-c-kernel", "ratio",
                            "rounds kernel at or below")]
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
