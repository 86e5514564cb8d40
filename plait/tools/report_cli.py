"""``plait report model.onnx --target c -o report.html``: compile a model and write the
pipeline report (:mod:`plait.tools.report`), one self-contained HTML page.

    plait report model.onnx --target c -o report.html [--passes TEXT] [--shape ...]
                 [--numeric] [--tuning-db FILE] [--plugin FILE.py]

``--numeric`` also runs :class:`~plait.transform.NumericCheck` (without stopping) and
adds each pass's largest error against the module's results before the pipeline.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from ..models import CliError
from .common import describe_error, load_model, load_plugins, parse_passes


def add_report_command(sub: Any, plugin_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``plait report`` to the argument parser."""
    p = sub.add_parser("report", help="compile a model and write an HTML report of the pipeline")
    p.add_argument("model", help="an ONNX model or a module in the text format")
    p.add_argument("-o", "--output", required=True, help="the HTML file to write")
    p.add_argument("--target", default="c", help="the target (default c)")
    p.add_argument("--passes", metavar="PIPELINE",
                   help="the pipeline (default: the target's default pipeline)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the shape of an input (others: symbolic sizes 1)")
    p.add_argument("--numeric", action="store_true",
                   help="check each pass's results with the numpy reference path")
    p.add_argument("--tuning-db", metavar="FILE",
                   help="build with this tuning database (plait tune; default: "
                        "PLAIT_TUNING_DB); the report lists each tuned call's point")
    plugin_arg(p)
    p.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from ..pipeline import default_pipeline
    from ..target import Target
    from ..transform import NumericCheck, TransformError
    from .progress import ProgressBar
    from .report import pipeline_report, tuned_calls

    load_plugins(args.plugin)
    mod = load_model(args.model, args.shape, static=True).module
    try:
        target = Target.from_any(args.target)
        if args.tuning_db:
            target = Target(target.kind, **{**dict(target.attrs), "tuning_db": args.tuning_db})
    except Exception as e:
        raise CliError(f"--target {args.target}: {describe_error(e)}") from None
    mod = mod.with_attrs(target=target)
    pipe = parse_passes(args.passes) if args.passes else default_pipeline(
        target, from_phase=mod.phase)
    extra: list[Any] = [ProgressBar(len(pipe.names()), desc="report")]
    check = NumericCheck(stop=False) if args.numeric else None
    if check is not None:
        extra.append(check)
    title = f"plait report: {os.path.basename(args.model)} for target {target}"
    try:
        page, result = pipeline_report(mod, pipe, title, extra, numeric=check)
    except TransformError as e:
        raise CliError(str(e)) from None
    except Exception as e:
        raise CliError(f"cannot build for target {args.target!r}: {describe_error(e)}") from None
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise CliError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"wrote {args.output} ({len(page) / 1024:.0f} KiB): {len(pipe.names())} passes, "
          f"final phase {result.phase}", file=sys.stderr)
    from ..target.c.tuning.space import point_label

    for c in tuned_calls(result):
        if c.get("origin") == "database":
            space = c.get("space")
            print(f"  tuned {c.get('op')} {c['symbol']}: {point_label(c.get('point'), space)}"
                  f" (default {point_label((space or {}).get('default'), space)}), measured "
                  f"{c.get('seconds')} s, the default's {c.get('default_seconds')} s",
                  file=sys.stderr)
    return 0


__all__ = ["add_report_command", "cmd_report"]
