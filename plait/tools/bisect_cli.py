"""``plait bisect model.onnx --target c``: the first pass, and the first rewrite site in
it, whose addition makes the executable's output differ from the reference (or crash).

    plait bisect model.onnx --target c [--reference onnxruntime|numpy] [--passes TEXT]
                 [--input NAME=FILE.npy] [--shape NAME=D0,D1] [--seed N]
                 [--rtol R] [--atol A] [--timeout SECONDS] [--plugin FILE.py]

Each candidate pipeline is built and run in a child process (see
:mod:`plait.tools.bisect`).  Exit code 0 when the search ends (a culprit found, or
nothing to find), 1 when even the pipeline with every optional pass off is bad.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..models import CliError
from .common import describe_error, load_model, load_plugins, parse_inputs, parse_passes


def add_bisect_command(sub: Any, plugin_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``plait bisect`` to the argument parser."""
    p = sub.add_parser("bisect", help="find the first pass (and rewrite) that breaks a model")
    p.add_argument("model", help="an ONNX model or a module in the text format")
    p.add_argument("--target", default="c", help="the target (default c)")
    p.add_argument("--passes", metavar="PIPELINE",
                   help="the pipeline to bisect (default: the target's default pipeline)")
    p.add_argument("--reference", choices=["onnxruntime", "numpy"],
                   help="what the outputs must match (default: onnxruntime for an ONNX "
                        "model when it is installed, else the numpy target)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="the value of an input (others are random)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the shape of an input (others: symbolic sizes 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one candidate may take (a hang counts as a crash)")
    p.add_argument("--no-fork", action="store_true",
                   help="run candidates in this process (a crash then ends the search)")
    plugin_arg(p)
    p.set_defaults(handler=cmd_bisect)


def _inputs(mod: Any, given: dict[str, np.ndarray], seed: int) -> list[np.ndarray]:
    from ..interp import random_inputs

    func = mod.functions.get("main")
    if func is None:
        raise CliError("the model has no function 'main' to run")
    names = [p.name_hint for p in func.params]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise CliError(f"--input {unknown[0]}: the model has no such input; its inputs are "
                       f"{', '.join(names)}")
    try:
        arrays = random_inputs(func, seed)
    except ValueError as e:
        raise CliError(f"cannot make inputs: {e}") from None
    return [given.get(n, a) for n, a in zip(names, arrays)]


def cmd_bisect(args: argparse.Namespace) -> int:
    from ..pipeline import default_pipeline
    from ..target import Target
    from .bisect import bisect_pipeline, make_runner, reference_outputs

    load_plugins(args.plugin)
    model = load_model(args.model, args.shape, static=True)
    mod = model.module
    try:
        target = Target.from_any(args.target)
    except Exception as e:
        raise CliError(f"--target {args.target}: {describe_error(e)}") from None
    if args.passes:
        pipe = parse_passes(args.passes)
    else:
        pipe = default_pipeline(target, from_phase=mod.phase)
    kind = args.reference
    if kind is None:
        try:
            import onnxruntime  # noqa: F401

            kind = "onnxruntime" if model.onnx_path else "numpy"
        except ImportError:
            kind = "numpy"
    if kind == "onnxruntime" and not model.onnx_path:
        raise CliError("--reference onnxruntime needs an ONNX model; use --reference numpy")
    given = parse_inputs(args.input)
    inputs = _inputs(mod, given, args.seed)
    feeds = {p.name_hint: a for p, a in zip(mod["main"].params, inputs)}
    feeds.update(model.frozen or {})
    try:
        ref = reference_outputs(kind, mod, inputs, model.onnx_path, feeds)
    except Exception as e:
        raise CliError(f"the reference ({kind}) failed: {describe_error(e)}") from None
    n = len(pipe.names())
    print(f"bisect {args.model}: target {target}, {n} passes, reference {kind}, rtol "
          f"{args.rtol:g}, atol {args.atol:g}")
    sys.stdout.flush()
    runner = make_runner(mod, target, inputs, ref, args.rtol, args.atol,
                         timeout=args.timeout, isolate=not args.no_fork)

    def log(line: str) -> None:
        print(line, flush=True)

    result = bisect_pipeline(pipe, mod.phase, runner, log=log)
    print(result.report())
    return 1 if result.verdict == "baseline" else 0


__all__ = ["add_bisect_command", "cmd_bisect"]
