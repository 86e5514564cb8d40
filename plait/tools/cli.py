"""The debugging subcommands of ``plait``, in the spirit of ``mlir-opt``.

    plait passes [NAME] [--json] [--config]     # registered passes: phases, options
    plait pipeline --target c [--from-phase P] [--describe]
    plait opt in.plait.py --passes "Normalize,FoldConstant" [-o out.plait.py]
              [--print-after-change] [--print-after-all] [--verify-each] [--timing]
    plait report model.onnx --target c -o report.html
    plait bisect model.onnx --target c [--reference onnxruntime|numpy]

Every command takes ``--plugin FILE.py`` (repeatable): a Python file imported first,
which registers passes (and may add them to the default pipeline with
:func:`plait.pipeline.register_user_pass`).  The pipeline text of ``--passes`` is the
one ``plait pipeline`` prints (:class:`plait.transform.Sequential`'s textual form).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..models import CliError
from .common import describe_error, load_model, load_plugins, parse_passes, pass_options


def _plugin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="import this Python file first (it registers passes)")


def add_commands(sub: Any) -> None:
    """Add the debugging subcommands (and ``plait generate``) to the ``plait``
    argument parser."""
    from .generate_cli import add_generate

    add_generate(sub)
    p = sub.add_parser("passes", help="list the registered passes, their phases and options")
    p.add_argument("name", nargs="?", help="show one pass in full")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--config", action="store_true",
                   help="list the PassContext configuration keys instead")
    _plugin_arg(p)
    p.set_defaults(handler=cmd_passes)

    p = sub.add_parser("pipeline", help="print the default pipeline of a target as text")
    p.add_argument("--target", default="numpy", help="the target (numpy, c, ...)")
    p.add_argument("--from-phase", default="ingestion",
                   help="the phase of the module the pipeline starts from")
    p.add_argument("--describe", action="store_true",
                   help="one line per pass with its phases instead of the text")
    _plugin_arg(p)
    p.set_defaults(handler=cmd_pipeline)

    p = sub.add_parser("opt", help="run passes on a module (text format in and out)")
    p.add_argument("module", help="a module in the text format (.plait.py) or an ONNX model")
    p.add_argument("--passes", required=True, metavar="PIPELINE",
                   help='the passes, e.g. "Normalize,LambdaLift,FoldConstant" (see plait '
                        "pipeline)")
    p.add_argument("-o", "--output", help="write the result here (default: stdout); the "
                                           "file has every constant, so it reads back")
    p.add_argument("--print-constants", action="store_true",
                   help="print large constants in full on stdout too (by default those of "
                        "4 KiB or more print as const(ref=\"sha256:...\", shape, dtype))")
    p.add_argument("--target", help="set the module's target first")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the shape of an ONNX input")
    p.add_argument("--print-after-change", action="store_true",
                   help="print the module to stderr after every pass that changes it")
    p.add_argument("--print-after-all", action="store_true",
                   help="print the module to stderr after every pass")
    p.add_argument("--verify-each", action="store_true",
                   help="check well-formedness after every pass")
    p.add_argument("--timing", action="store_true", help="print the time of each pass")
    p.add_argument("--reproducer-dir", metavar="DIR",
                   help="a failing pass writes a reproducer here")
    _plugin_arg(p)
    p.set_defaults(handler=cmd_opt)

    from .bisect_cli import add_bisect_command
    from .report_cli import add_report_command
    from .tune_cli import add_tune_command

    add_report_command(sub, _plugin_arg)
    add_bisect_command(sub, _plugin_arg)
    add_tune_command(sub)


# ------------------------------------------------------------------ passes


def _pass_record(name: str, cls: Any) -> dict[str, Any]:
    info = cls.info
    return {
        "name": name,
        "phases": list(info.phases),
        "transition": info.transition,
        "requires": list(info.requires),
        "opt_level": info.opt_level,
        "options": pass_options(cls),
        "doc": info.doc,
        "defined_in": cls.__module__,
    }


def cmd_passes(args: argparse.Namespace) -> int:
    from ..transform.context import config_options
    from ..transform.registry import get_pass_class, registered_classes

    load_plugins(args.plugin)
    if args.config:
        opts = config_options()
        if args.json:
            print(json.dumps([{"key": o.key, "type": o.type_name, "default": repr(o.default),
                               "doc": o.doc} for o in opts], indent=1))
            return 0
        for o in opts:
            print(f"{o.key}: {o.type_name} = {o.default!r}\n    {o.doc}")
        return 0
    if args.name:
        try:
            cls = get_pass_class(args.name)
        except Exception as e:
            raise CliError(str(e)) from None
        rec = _pass_record(args.name, cls)
        if args.json:
            print(json.dumps(rec, indent=1))
            return 0
        print(f"{args.name}: {cls.info.describe()}")
        print(f"  defined in {rec['defined_in']}")
        for opt in rec["options"]:
            print(f"  option {opt}")
        doc = (cls.__doc__ or "").strip()
        if doc:
            print()
            print("\n".join("  " + line for line in doc.splitlines()))
        return 0
    records = [_pass_record(n, c) for n, c in registered_classes().items()]
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    width = max((len(r["name"]) for r in records), default=0)
    for r in records:
        phases = f"[{', '.join(r['phases'])}]"
        if r["transition"]:
            phases += f" -> {r['transition']}"
        if r["requires"]:
            phases += f", requires {', '.join(r['requires'])}"
        print(f"{r['name']:<{width}}  {phases}")
        if r["options"]:
            print(f"{'':<{width}}  options: {'; '.join(r['options'])}")
        if r["doc"]:
            print(f"{'':<{width}}  {r['doc']}")
    print(f"# {len(records)} passes; `plait passes NAME` shows one in full", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ pipeline


def cmd_pipeline(args: argparse.Namespace) -> int:
    from ..pipeline import default_pipeline

    load_plugins(args.plugin)
    try:
        pipe = default_pipeline(args.target, from_phase=args.from_phase)
    except Exception as e:
        raise CliError(f"cannot assemble the pipeline for target {args.target!r}: "
                       f"{describe_error(e)}") from None
    print(pipe.describe() if args.describe else pipe.to_text())
    return 0


# ------------------------------------------------------------------ opt


def cmd_opt(args: argparse.Namespace) -> int:
    from ..target import Target
    from ..transform import (
        PassContext,
        PassTiming,
        PrintIfChanged,
        PrintIR,
        TransformError,
        WellFormedCheck,
    )

    load_plugins(args.plugin)
    pipe = parse_passes(args.passes)
    mod = load_model(args.module, args.shape, static=False).module
    if args.target:
        try:
            mod = mod.with_attrs(target=Target.from_any(args.target))
        except Exception as e:
            raise CliError(f"--target {args.target}: {describe_error(e)}") from None
    instruments: list[Any] = []
    if args.verify_each:
        instruments.append(WellFormedCheck())
    if args.print_after_all:
        instruments.append(PrintIR(after="*", file=sys.stderr))
    elif args.print_after_change:
        instruments.append(PrintIfChanged(file=sys.stderr))
    timing = PassTiming() if args.timing else None
    if timing is not None:
        instruments.append(timing)
    config = {"transform.reproducer_dir": args.reproducer_dir} if args.reproducer_dir else {}
    from .progress import ProgressBar

    instruments.append(ProgressBar(len(pipe.names()), desc="opt"))
    try:
        with PassContext(instruments=instruments, config=config):
            result = pipe(mod)
    except TransformError as e:
        raise CliError(str(e)) from None
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(result.script() + "\n")
        except OSError as e:
            raise CliError(f"cannot write {args.output}: {e.strerror or e}") from None
    elif args.print_constants:
        print(result.script())
    else:  # the weights as references: a model's text, not pages of base64
        elided: dict[str, Any] = {}
        print(result.script(constants=elided))
        if elided:
            print(f"# {len(elided)} large constant(s) printed as const(ref=...); "
                  "--print-constants prints them, -o FILE writes them", file=sys.stderr)
    if timing is not None:
        print(timing.report(), file=sys.stderr)
    return 0


__all__ = ["add_commands", "cmd_opt", "cmd_passes", "cmd_pipeline"]
