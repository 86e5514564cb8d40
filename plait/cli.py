"""The ``plait`` command.

    plait run model.onnx [--input name=file.npy ...] [--shape name=1,3,224,224 ...]
                         [--target numpy|c] [--compare onnxruntime] [--seed N]
                         [--offload onnxruntime] [--fallback onnxruntime]
    plait run model.pt2 --allow-native [--compare torch] ...   # torch.export.save;
                                   # unpickled, so it can run code: your own files only
    plait run model.plx            # an executable saved by ``plait compile``
                         [--allow-native] [--target numpy]  # a file from elsewhere
    plait run module.plait.py      # a module in the text format (function ``main``)
    plait compile model.onnx|model.pt2 -o model.plx [--shape ...] [--target ...]
                                   [--allow-native]  # (a .pt2)
    plait check module.plait.py    # parse, check well-formedness, print
    plait check model.onnx|model.pt2|model.plx   # import (load) it, check it, print
    plait passes | pipeline | opt | report | bisect   # debugging: plait/tools/cli.py
    plait tune model.onnx|DIR --budget 10m --db tuning.db [--ray auto]   # docs/tuning.md

Inputs not given with ``--input`` are random (seeded); their symbolic sizes come from
``--shape``, else (a .pt2) from the example inputs the program was exported with, else
the smallest size their range allows (at least 1).  Errors are one line on stderr and
exit code 2 (every error class of the library derives from
:class:`plait.errors.PlaitError` and prints as ``plait: error: ...``; only a bug prints
``internal error``); a failed ``--compare`` exits with 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.errors import PlaitError

from .models import (
    BINARY_SUFFIXES,
    CliError,
    as_list,
    compare_outputs,
    default_sizes,
    file_kind,
    first_line,
    import_onnx,
    import_pt2,
    make_inputs,
    parse_input,
    parse_shape,
    parse_text,
    require_file,
    say_fallback,
    summary,
)

# called by these names, so a test can replace the reference
from .models import run_onnxruntime as _run_onnxruntime
from .models import run_torch as _run_torch

# ------------------------------------------------------------------ argument parsing


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="plait", description="plait: a deep-learning compiler.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    from . import __version__

    p.add_argument("--version", action="version", version=f"plait {__version__}")
    sub = p.add_subparsers(dest="command", metavar="command")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--shape", action="append", default=[], metavar="NAME=D0,D1,...",
            help="the shape of an input (fixes its symbolic sizes)",
        )  # fmt: skip
        sp.add_argument(
            "--target", default=None,
            help="target to build for (numpy or c; run: default numpy; compile: default c "
                 "when a C compiler is present, else numpy); for a .plx, rebuild its kept "
                 "graph for this target instead of running its own code",
        )  # fmt: skip
        sp.add_argument(
            "--offload", action="append", default=[], metavar="CODEGEN",
            help="partition for this external codegen (e.g. onnxruntime); repeatable; "
                 "onnxruntime also runs the ONNX nodes plait cannot import",
        )  # fmt: skip
        sp.add_argument(
            "--fallback", choices=("onnxruntime",), default=None,
            help="run the ONNX nodes plait cannot import (unknown ops, onnxruntime's "
                 "contrib ops) with onnxruntime; plait compiles the rest",
        )  # fmt: skip

    run = sub.add_parser("run", help="compile and run a model on (random) inputs")
    run.add_argument("model", help="a .onnx model, a .pt2 exported program "
                                    "(torch.export.save), a .plx executable or a "
                                    ".plait.py module")
    common(run)
    run.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy",
        help="the value of an input (others are random)",
    )  # fmt: skip
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument(
        "--compare", choices=["onnxruntime", "torch"], default=None,
        help="also run the model with onnxruntime (a .onnx) or PyTorch (a .pt2: the "
             "exported program's module, eager) and compare the outputs",
    )  # fmt: skip
    run.add_argument("--model", dest="reference_model", default=None, metavar="MODEL.onnx",
                     help="with a .plx and --compare onnxruntime: the ONNX model it was "
                          "compiled from")
    run.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --compare")
    run.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of --compare")
    run.add_argument("--repeat", type=int, default=1,
                     help="run this many times and print the min, median and p90 time")
    run.add_argument("--verbose", action="store_true",
                     help="say how main runs: as one native call (its single entry point) "
                          "or on the VM path, and why; and the CPU's instruction sets and "
                          "the variant each native kernel family runs (PLAIT_ISA forces one)")
    run.add_argument("--profile", action="store_true",
                     help="time each call of main once more and list the costliest (a model "
                          "built for c times them inside its single entry point; a .plx "
                          "without step timing on the VM path)")
    run.add_argument(
        "--allow-native", action="store_true",
        help="run the native code of a .plx that is not signed by this machine or a "
             "trusted key, or load a .pt2 (unpickled: it can run code) (only for files "
             "whose origin you trust)",
    )  # fmt: skip

    comp = sub.add_parser("compile", help="compile a model into an executable file")
    comp.add_argument("model", help="a .onnx model, a .pt2 exported program or a "
                                     ".plait.py module (with --emit library also a .plx "
                                     "that keeps its graph)")
    comp.add_argument("-o", "--output", required=True,
                      help="the executable to write (.plx); with --emit library, the "
                           "library's folder")
    common(comp)
    comp.add_argument("--allow-native", action="store_true",
                      help="load a .pt2 (unpickled: it can run code), or build the graph "
                           "of a .plx not signed by this machine (--emit library; only for "
                           "files whose origin you trust)")
    comp.add_argument("--emit", choices=("executable", "library"), default="executable",
                      help="library: write a C library into the folder -o names "
                           "(lib<name>.so, lib<name>.a, <name>.h; docs/c_api.md)")
    comp.add_argument("--name", default=None,
                      help="--emit library: the library's name (default: the model's)")
    comp.add_argument("--weights", choices=("embed", "file"), default="embed",
                      help="--emit library: weights inside the library, or in "
                           "<name>.weights beside it (mapped at load time)")
    comp.add_argument("--cc", default=None,
                      help="--emit library: the C compiler (default $CC, else cc; "
                           "aarch64-linux-gnu-gcc cross-compiles)")
    comp.add_argument("--no-graph", action="store_true",
                      help="leave the model's graph out of the executable (smaller file; "
                           "it can then not be rebuilt for another target or run without "
                           "its native code)")

    check = sub.add_parser(
        "check", help="read a .plait.py module (or import a .onnx / .pt2 model, or load a "
        ".plx executable), check it and print it")
    check.add_argument("module", help="a module in the text format, a .onnx model, a .pt2 "
                       "exported program or a .plx executable")

    from .tools.cli import add_commands  # passes, pipeline, opt, report, bisect

    add_commands(sub)
    return p


def _fallback(args: argparse.Namespace) -> str | None:
    """The ONNX importer's fallback: ``--fallback``, or onnxruntime when offloaded to."""
    if getattr(args, "fallback", None):
        return str(args.fallback)
    return "onnxruntime" if "onnxruntime" in (getattr(args, "offload", None) or ()) else None


def _params_of(vm: Any) -> list[Any]:
    return list(vm.executable.functions["main"].params)


# ---------------------------------------------------------------------- commands


def _build(mod: Any, target: str | None, offload: list[str] | None = None,
           timed: bool = False, keep_graph: bool = True) -> Any:
    """``mod`` built for ``target`` (with ``timed``, a ``c``-derived target's entry points
    time their calls: ``--profile``)."""
    from .build import build
    from .pipeline import default_pipeline
    from .target import Target
    from .tools.progress import progress

    target = target or "numpy"
    try:
        extra: dict[str, Any] = {"offload": tuple(offload)} if offload else {}
        if timed and Target(target).is_a("c"):
            extra["step_timing"] = True
        t = Target(target, **extra) if extra else target
        steps = len(default_pipeline(t, from_phase=mod.phase).names())
        held = [mod]   # handed to build alone: the originals can go once packed
        del mod
        with progress(steps):
            return build(held.pop(), target=t, keep_graph=keep_graph)
    except Exception as e:
        raise CliError(f"cannot build for target {target!r}: {first_line(e)}") from None


def _rebuild(exe: Any, path: str, target: str) -> Any:
    from .build import rebuild

    try:
        return rebuild(exe, target)
    except Exception as e:
        raise CliError(f"{path}: cannot rebuild its graph for target {target!r}: "
                       f"{first_line(e)}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime import Executable, VirtualMachine
    from .runtime.trust import UntrustedCodeError

    require_file(args.model)
    kind = file_kind(args.model)
    shapes = dict(parse_shape(s) for s in args.shape)
    given = dict(parse_input(s) for s in args.input)
    for name in sorted(set(shapes) & set(given)):
        if tuple(shapes[name]) != tuple(given[name].shape):
            raise CliError(
                f"--shape {name}={','.join(map(str, shapes[name]))} contradicts --input "
                f"{name}, whose array has shape {tuple(given[name].shape)}; give one of them")
    names: list[str] = []
    frozen: dict[str, np.ndarray] = {}
    ep: Any = None   # a .pt2's exported program
    compiles = kind != "plx" or args.target is not None  # a .plx alone: the runtime only
    stats0 = _compile_stats() if compiles else {}
    t0 = time.perf_counter()
    if kind == "pt2":
        ep, mod = import_pt2(args.model, args.allow_native)
        from .frontend.torch import output_names

        names = output_names(ep)
        exe = _build(mod, args.target, args.offload, args.profile)
    elif kind == "onnx":
        mod, frozen = import_onnx(args.model, shapes, given, static=True,
                                   fallback=_fallback(args))
        from .session import onnx_io_names

        names = onnx_io_names(args.model, frozen)[1]
        exe = _build(mod, args.target, args.offload, args.profile)
    elif kind == "plx":
        try:
            exe = Executable.load(args.model, allow_native=args.allow_native)
        except Exception as e:
            raise CliError(f"{args.model}: cannot load the executable: {first_line(e)}") from None
        from .session import recorded_output_names

        names = recorded_output_names(exe)
        say_fallback(exe.external)
        # an executable without native code, built for the target asked for, runs as it
        # is (there is nothing to rebuild, and nothing whose origin matters)
        if args.target is not None and not (
                args.target == exe.attrs.get("target") and not exe.libs and not exe.external):
            exe = _rebuild(exe, args.model, args.target)
    else:
        exe = _build(parse_text(args.model), args.target, args.offload, args.profile)
    t_compile = time.perf_counter() - t0
    reference = args.model
    if args.reference_model is not None:
        if kind != "plx" or args.compare != "onnxruntime":
            raise CliError("--model names the ONNX model a .plx was compiled from, for "
                           "--compare onnxruntime of that .plx")
        require_file(args.reference_model)
        reference = args.reference_model
    elif args.compare == "onnxruntime" and kind == "plx":
        raise CliError("--compare onnxruntime of a .plx needs the model it came from: "
                       "--model model.onnx")
    if args.compare == "onnxruntime" and not reference.lower().endswith(".onnx"):
        raise CliError("--compare onnxruntime needs an ONNX model (.onnx)")
    if args.compare == "torch" and kind != "pt2":
        raise CliError("--compare torch needs an exported program (.pt2, saved with "
                       "torch.export.save)")
    try:
        vm = VirtualMachine(exe)
    except UntrustedCodeError as e:
        raise CliError(str(e)) from None
    if "main" not in exe.functions:
        raise CliError(f"{args.model}: there is no function 'main' to run")
    params = _params_of(vm)
    unknown = sorted(set(given) - {p.name for p in params} - set(frozen))
    if unknown:
        raise CliError(
            f"--input {unknown[0]}: the model has no such input; its inputs are "
            + ", ".join(p.name for p in params)
        )
    inputs = make_inputs(params, given, shapes, args.seed, default_sizes(exe, ep, params))
    times = []
    result: Any = None
    for _ in range(max(args.repeat, 1)):
        t1 = time.perf_counter()
        try:
            result = vm["main"](*inputs)
        except Exception as e:
            raise CliError(f"running {args.model}: {first_line(e)}") from None
        times.append(time.perf_counter() - t1)
    outs = as_list(result)
    if not names or len(names) != len(outs):
        names = [f"output{i}" for i in range(len(outs))]
    target = exe.attrs.get("target", args.target or "numpy")
    print(f"{args.model}: target {target}, {len(params)} inputs, {len(outs)} outputs")
    for p, a in zip(params, inputs):
        print(f"  input  {p.name}: {a.dtype} {tuple(a.shape)}")
    for n, a in zip(names, outs):
        print(f"  output {n}: {a.dtype} {tuple(a.shape)}  {summary(a)}")
    native = _native_line(stats0, _compile_stats()) if compiles else ""
    if native:
        print(native)
    if len(times) > 1:
        ms = np.array(times) * 1e3
        print(f"time: compile {t_compile * 1e3:.1f} ms, run min {ms.min():.3f} ms, median "
              f"{np.median(ms):.3f} ms, p90 {np.percentile(ms, 90):.3f} ms "
              f"({len(times)} runs)")
    else:
        print(f"time: compile {t_compile * 1e3:.1f} ms, run {times[0] * 1e3:.3f} ms")
    if args.verbose:
        print(f"execution: {vm.execution_path('main')}")
        _print_isas(exe)
    if args.profile:
        _print_profile(vm, inputs)
    if args.compare:
        if args.compare == "onnxruntime":
            from .session import recorded_names

            keys = recorded_names(exe, "inputs")
            if len(keys) != len(params):  # a .plx without the model's names
                keys = [p.name for p in params]
            feeds = dict(zip(keys, inputs))
            feeds.update(frozen)
            ref = _run_onnxruntime(reference, feeds)
        else:
            ref = _run_torch(args.model, ep, inputs)
        print(f"compare with {args.compare}:")
        if not compare_outputs(outs, ref, names, args.rtol, args.atol, args.compare):
            print("FAIL")
            return 1
        print("PASS")
    return 0


def _compile_stats() -> dict[str, int]:
    from .codegen.c.compiler import compile_stats

    return compile_stats()


def _native_line(before: dict[str, int], after: dict[str, int]) -> str:
    """What the C compiler did for this build: a library from the cache, or compiled
    (with how many of its object files the cache had); empty when nothing native."""
    d = {k: after[k] - before.get(k, 0) for k in after}
    if d["compiles"]:
        objects = f", {d['object_hits']} object file(s) from the cache" \
            if d["object_hits"] else ""
        return f"native code: compiled {d['compiles']} library(ies){objects}"
    if d["cache_hits"]:
        return (f"native code: {d['cache_hits']} library(ies) from the cache (nothing "
                "compiled)")
    return ""


PROFILE_ROWS = 10
"""The costliest calls ``plait run --profile`` lists."""


def _print_profile(vm: Any, inputs: list[np.ndarray]) -> None:
    """One more run of main, every call timed: the costliest calls.  Inside main's
    single entry point when it times its calls (a model built here with ``--profile``);
    otherwise on the VM path, one call at a time from Python."""
    info = (vm.executable.attrs.get("single_entry") or {}).get("main")
    inside = vm.entry_point("main") is not None and isinstance(info, dict) and info.get("timed")
    try:
        if inside:
            _, entries = vm.profile_steps("main", *inputs)
        else:
            _, entries = vm.profile("main", *inputs)
    except Exception as e:
        raise CliError(f"profiling main: {first_line(e)}") from None
    total = sum(e.seconds for e in entries)
    note = ""
    if inside:
        note = " (inside main's single entry point, each call timed in C)"
    elif vm.entry_point("main") is not None:
        note = (" (on the VM path, one call at a time: this executable's single entry point "
                "does not time its calls; a model built by plait run --profile does)")
    print(f"profile: {len(entries)} calls, {total * 1e3:.3f} ms{note}")
    for e in sorted(entries, key=lambda e: -e.seconds)[:PROFILE_ROWS]:
        print(f"  {e}")


def _print_isas(exe: Any) -> None:
    """The CPU's instruction sets and the copy each kernel family of ``exe`` runs."""
    from .target.c.cpu import cpu_features, describe, library_isas

    try:
        lines = describe(cpu_features(), library_isas(exe))
    except Exception as e:  # no compiler for the probe: say so, the run itself worked
        lines = [f"instruction sets: unknown ({first_line(e)})"]
    for line in lines:
        print(line)


def cmd_compile(args: argparse.Namespace) -> int:
    require_file(args.model)
    kind = file_kind(args.model)
    shapes = dict(parse_shape(s) for s in args.shape)
    t0 = time.perf_counter()
    from .session import default_target, describe, onnx_io_names, record_io

    ins: list[str] | None = None
    outs: list[str] | None = None
    if kind == "onnx":
        mod, frozen = import_onnx(args.model, shapes, {}, static=False,
                                   fallback=_fallback(args))
        ins, outs = onnx_io_names(args.model, frozen)
    elif kind == "pt2":
        ep, mod = import_pt2(args.model, args.allow_native)
        from .frontend.torch import output_names

        outs = output_names(ep)
    elif kind == "text":
        mod = parse_text(args.model)
    elif args.emit == "library":   # a .plx: the graph it keeps, built again
        from .runtime import Executable

        try:
            mod = Executable.load(args.model, allow_native=args.allow_native)
        except Exception as e:
            raise CliError(f"{args.model}: cannot load the executable: {first_line(e)}") from None
        from .session import recorded_output_names

        outs = recorded_output_names(mod) or None
    else:
        raise CliError(f"{args.model} is already an executable")
    if args.emit == "library":
        return _emit_library(args, mod, outs, t0)
    target = args.target
    why = ""
    if target is None:
        target = default_target()
        why = (" (a C compiler was found)" if target == "c" else
               " (no C compiler was found: the executable runs on numpy)")
    from .ir.expr import Function

    io = (describe(mod, "main", ins, outs)
          if isinstance(mod.functions.get("main"), Function) else None)
    held = [mod]   # build holds the module alone (its weights go as they are packed)
    del mod
    exe = _build(held.pop(), target, args.offload, keep_graph=not args.no_graph)
    if "main" in exe.functions and io is not None:
        record_io(exe, "main", io)
    try:
        exe.save(args.output)
    except OSError as e:
        raise CliError(f"cannot write {args.output}: {e.strerror or e}") from None
    size = os.path.getsize(args.output)
    print(
        f"compiled {args.model} for target {target}{why} into {args.output} "
        f"({size / 1024:.1f} KiB, {(time.perf_counter() - t0) * 1e3:.0f} ms)"
    )
    return 0


def _emit_library(args: argparse.Namespace, mod: Any, outs: list[str] | None,
                  t0: float) -> int:
    """``plait compile --emit library``: the model's C library in the folder ``-o``."""
    from .export import export_library

    if args.target not in (None, "c"):
        raise CliError(f"--emit library builds for the c target, not {args.target!r}")
    name = args.name or os.path.splitext(os.path.basename(args.model))[0].split(".")[0]
    lib = export_library(mod, args.output, name=name, weights=args.weights,
                         output_names=outs, cc=args.cc)
    files = [lib.shared, lib.static, lib.header, *([lib.weights] if lib.weights else [])]
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1024:.1f} KiB" for p in files)
    print(f"compiled {args.model} into the C library {lib.shared.name} for {lib.arch} in "
          f"{args.output} ({sizes}; {(time.perf_counter() - t0) * 1e3:.0f} ms)")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .ir.well_formed import well_formed

    require_file(args.module)
    kind = file_kind(args.module) if args.module.lower().endswith(BINARY_SUFFIXES) else "text"
    if kind == "plx":
        return _check_executable(args.module)
    if kind == "onnx":
        mod = import_onnx(args.module, {}, {}, static=False)[0]
    elif kind == "pt2":
        mod = import_pt2(args.module)[1]
    else:
        mod = parse_text(args.module)
    try:
        problems = well_formed(mod)
    except Exception as e:
        raise CliError(f"{args.module}: cannot check the module: {first_line(e)}") from None
    print(mod.script())
    if problems:
        print(
            f"{args.module}: {len(problems)} well-formedness problem(s) in phase {mod.phase}:",
            file=sys.stderr,
        )
        for v in problems:
            print(f"  {v}", file=sys.stderr)
        return 1
    print(f"# {args.module}: well-formed (phase {mod.phase})", file=sys.stderr)
    return 0


def _check_executable(path: str) -> int:
    """``plait check x.plx``: load it (which validates every member and runs nothing)
    and print it."""
    from .runtime import Executable

    try:
        exe = Executable.load(path)
    except Exception as e:
        raise CliError(f"{path}: not a valid executable: {first_line(e)}") from None
    print(exe.as_text())
    print(f"# {path}: a valid executable ({exe.trust})", file=sys.stderr)
    return 0


def _error_text(text: str) -> str:
    """A command's error message: its lines joined with ``; ``, except a message that
    points at a column (a line holding only a ``^`` caret), whose lines stay."""
    lines = text.rstrip().splitlines()
    if any(ln.strip() == "^" or (ln.strip().startswith("^") and set(ln.strip()) <= {"^", "~"})
           for ln in lines[1:]):
        return "\n".join(lines)
    return text.replace("\n", "; ")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``plait`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "compile":
            return cmd_compile(args)
        if args.command == "check":
            return cmd_check(args)
        return args.handler(args)
    except CliError as e:
        # one line, unless the message shows a source line with a caret under it (a
        # parse error): those lines are kept as they are, under the first
        print(f"plait: error: {_error_text(str(e))}", file=sys.stderr)
        return 2
    except PlaitError as e:   # a refusal of the library (plait/errors.py): not a bug
        print(f"plait: error: {first_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `plait check m.py | head`)
        sys.stderr.close()
        return 0
    except Exception as e:  # an internal error: still one line, with where to report it
        print(
            f"plait: internal error: {type(e).__name__}: {first_line(e)} "
            "(please report it with the model)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":  # python -m plait.cli: run the one plait.cli module (its
    from plait.cli import main as _main  # error classes are the ones the tools raise)

    sys.exit(_main())
