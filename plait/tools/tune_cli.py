"""``plait tune``: tune a model's calls (or every model in a directory) into a tuning
database (docs/tuning.md).

    plait tune model.onnx --target c --budget 10m --db tuning.db [--ray auto|local|ADDRESS]
               [--runs 5] [--confirm-rounds N] [--threads N] [--cpus-per-trial N]
               [--shape NAME=D0,D1,...] [--choices algorithm,layout,...]
    plait tune models/ --budget 1h --db tuning.db      # every .onnx and .plait.py in it
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..models import CliError
from .common import describe_error

MODEL_SUFFIXES = (".onnx", ".plait.py")


def add_tune_command(sub: Any) -> None:
    """Add ``plait tune`` to the argument parser."""
    p = sub.add_parser("tune", help="measure each call's choices inside a model and keep "
                                    "the best in a tuning database")
    p.add_argument("model", help="an ONNX model, a module in the text format, or a "
                                 "directory of them")
    p.add_argument("--target", default="c", help="the target (only c has search spaces)")
    p.add_argument("--budget", default="10m",
                   help="time for the whole command: 90s, 10m, 1h (default 10m; split "
                        "evenly between the models of a directory)")
    p.add_argument("--db", required=True, help="the tuning database to add records to")
    p.add_argument("--ray", metavar="auto|local|ADDRESS",
                   help="run each trial as a Ray task: auto (the running cluster), local "
                        "(start Ray here) or a cluster's address")
    p.add_argument("--runs", type=int, default=5, help="timed runs per trial (default 5)")
    p.add_argument("--confirm-rounds", type=int, metavar="N",
                   help="once every candidate is measured, at most N rounds measuring the "
                        "defaults and the best points again (default: until the budget)")
    p.add_argument("--threads", type=int,
                   help="threads the kernels run with (default: PLAIT_NUM_THREADS, else "
                        "the CPUs; with --ray each node's CPUs)")
    p.add_argument("--cpus-per-trial", type=int, default=1,
                   help="with --ray: the CPUs a trial reserves (default 1; the node's CPU "
                        "count for quiet measurements, one trial per node at a time)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the shape of an input (others: symbolic sizes 1)")
    p.add_argument("--choices", metavar="NAME,...",
                   help="vary only these choices (algorithm, layout, threads, split, kc, "
                        "mc, nc; the others keep their defaults; default: all)")
    p.set_defaults(handler=cmd_tune)


def model_files(path: str) -> list[str]:
    """``path`` itself, or the models (.onnx, .plait.py) of directory ``path``, sorted."""
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise CliError(f"no such file or directory: {path}")
        return [path]
    found = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(MODEL_SUFFIXES))
    if not found:
        raise CliError(f"{path}: no model in it (.onnx, .plait.py)")
    return found


def cmd_tune(args: argparse.Namespace) -> int:
    from ..target.c.tuning import TuningDBError
    from .tune import LocalExecutor, ModelRef, parse_budget, tune

    if args.target != "c":
        raise CliError(f"--target {args.target}: only the c target has search spaces")
    try:
        budget = parse_budget(args.budget)
    except ValueError as e:
        raise CliError(f"--budget: {e}") from None
    from ..target.c.tuning.space import CHOICE_NAMES

    choices = None
    if args.choices:
        choices = [c.strip() for c in args.choices.split(",") if c.strip()]
        unknown = [c for c in choices if c not in CHOICE_NAMES]
        if unknown or not choices:
            raise CliError(f"--choices {args.choices}: {', '.join(unknown) or 'none'} "
                           f"is not a choice; name some of {', '.join(CHOICE_NAMES)}")
    files = model_files(args.model)
    if args.ray:
        from .tune.ray_runner import RayExecutor

        try:
            executor: Any = RayExecutor(args.ray, runs=args.runs,
                                        cpus_per_trial=args.cpus_per_trial,
                                        threads=args.threads)
        except Exception as e:
            raise CliError(f"--ray {args.ray}: {describe_error(e)}") from None
    else:
        executor = LocalExecutor(runs=args.runs, threads=args.threads)

    def log(line: str) -> None:
        print(line, file=sys.stderr)

    for path in files:
        try:
            report = tune(ModelRef.from_path(path, tuple(args.shape)), args.db,
                          budget / len(files), executor, log=log,
                          confirm_rounds=args.confirm_rounds, choices=choices)
        except TuningDBError as e:
            raise CliError(str(e)) from None
        print("\n".join(report.lines()))
    return 0


__all__ = ["add_tune_command", "cmd_tune", "model_files"]
