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
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.errors import PlaitError


class CliError(PlaitError):
    """A problem to report in one line (exit code 2)."""


# ------------------------------------------------------------------ argument parsing


def _parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = spec.rpartition("=")
    if not sep or not name:
        raise CliError(f"--shape expects name=d0,d1,..., got {spec!r}")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise CliError(f"--shape {spec!r}: the sizes must be integers") from None
    if any(d < 0 for d in shape):
        raise CliError(f"--shape {spec!r}: sizes must not be negative")
    return name, shape


def _parse_input(spec: str) -> tuple[str, np.ndarray]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise CliError(f"--input expects name=file.npy, got {spec!r}")
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CliError(f"--input {name}: no such file {path!r}") from None
    except Exception as e:
        raise CliError(f"--input {name}: cannot read {path!r} as a .npy file ({e})") from None
    if not isinstance(arr, np.ndarray):
        raise CliError(f"--input {name}: {path!r} holds several arrays; save one array per file")
    return name, arr


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
                                     ".plait.py module")
    comp.add_argument("-o", "--output", required=True, help="the executable to write (.plx)")
    common(comp)
    comp.add_argument("--allow-native", action="store_true",
                      help="load a .pt2 (unpickled: it can run code; only for files whose "
                           "origin you trust)")
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


# --------------------------------------------------------------------- model loading


_KINDS = ("a .onnx model, a .pt2 exported program (torch.export.save), a .plx executable "
          "or a .plait.py module")
_BINARY_SUFFIXES = (".onnx", ".plx", ".pt2")


def _kind(path: str) -> str:
    low = path.lower()
    if low.endswith(".onnx"):
        return "onnx"
    if low.endswith(".plx"):
        return "plx"
    if low.endswith(".pt2"):
        return "pt2"
    if low.endswith(".py"):
        return "text"
    raise CliError(f"{path}: unknown file kind; expected {_KINDS}")


def _require_file(path: str) -> None:
    if not os.path.exists(path):
        raise CliError(f"no such file: {path}")


def _onnx_graph_inputs(path: str) -> list[tuple[str, int, list[Any]]]:
    """(name, element type, dims) of the graph inputs that are not initializers."""
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise CliError(f"{path}: not a readable ONNX model ({str(e).splitlines()[0]})") from None
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: list[Any] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
        ]
        out.append((vi.name, tt.elem_type, dims))
    return out


def _fallback(args: argparse.Namespace) -> str | None:
    """The ONNX importer's fallback: ``--fallback``, or onnxruntime when offloaded to."""
    if getattr(args, "fallback", None):
        return str(args.fallback)
    return "onnxruntime" if "onnxruntime" in (getattr(args, "offload", None) or ()) else None


def _say_fallback(modules: Any) -> None:
    """Name the ONNX nodes that external ``modules`` (of a module or an executable) run
    on onnxruntime because plait could not import them (``--fallback``)."""
    if not modules:  # nothing offloaded: the frontend (the compiler) is not imported
        return
    from .frontend.onnx.fallback import offloaded_nodes

    groups = offloaded_nodes(modules or ())
    if groups:
        n = sum(len(v) for v in groups.values())
        print(f"onnxruntime runs {n} node{'s' if n > 1 else ''} plait cannot import, as "
              f"{len(groups)} function{'s' if len(groups) > 1 else ''}:")
        for symbol, nodes in groups.items():
            print(f"  {symbol}: {', '.join(nodes)}")


def _import_onnx(
    path: str, shapes: dict[str, tuple[int, ...]], given: dict[str, np.ndarray], static: bool,
    fallback: str | None = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """Import ``path``; with ``static`` every input shape is fixed (given arrays, --shape,
    else symbolic sizes 1).  Inputs the model needs at compile time are frozen from
    ``given``; ``fallback`` runs the nodes plait cannot import (their list is printed).
    Returns the module and the frozen inputs."""
    from .frontend.onnx import NeedsConstantError, OnnxImportError, from_onnx

    if static:
        shapes = dict(shapes)
        for name, _elem, dims in _onnx_graph_inputs(path):
            if name in given:
                shapes[name] = tuple(given[name].shape)
            elif name not in shapes:
                shapes[name] = tuple(d if isinstance(d, int) and d > 0 else 1 for d in dims)
                if shapes[name] != tuple(dims):  # open sizes: say what was chosen
                    shown = ", ".join(str(d) if isinstance(d, int) and d > 0 else
                                      str(d or "?") for d in dims)
                    chosen = "x".join(map(str, shapes[name]))
                    print(f"input {name!r} has open sizes ({shown}): running with "
                          f"{chosen}; set them with --shape {name}={chosen}")
    constants: dict[str, np.ndarray] = {}
    while True:
        try:
            mod = from_onnx(path, shapes=shapes, constants=constants, fallback=fallback)
            _say_fallback(mod.attrs.get("external_mods"))
            return mod, constants
        except NeedsConstantError as e:
            missing = [n for n in e.needs_constants if n not in constants]
            unknown = [n for n in missing if n not in given]
            if not missing or unknown:
                raise CliError(
                    f"{e}; give {', '.join(repr(n) for n in unknown or e.needs_constants)} "
                    "with --input NAME=FILE.npy"
                ) from None
            for n in missing:
                constants[n] = given[n]
                shapes.pop(n, None)
        except OnnxImportError as e:
            raise CliError(str(e)) from None


def _load_pt2(path: str, allow_native: bool) -> Any:
    """The ``torch.export.ExportedProgram`` saved in ``path`` (``torch.export.save``):
    ``torch.export.load`` unpickles parts of the file, which runs code the file names,
    so it is loaded only with the caller's consent (``--allow-native``)."""
    from .runtime.trust import Trust, UntrustedCodeError, require_trusted

    try:
        require_trusted(
            Trust("file", None, allow_native, path),
            "a PyTorch exported program, which torch.export.load unpickles",
            "Or export the model to ONNX (torch.onnx.export): an .onnx file is data.",
            allow="If you made the file or trust where it came from: --allow-native.")
    except UntrustedCodeError as e:
        raise CliError(str(e).replace("\n", " ")) from None
    try:
        import torch
    except ImportError:
        raise CliError(f"{path}: reading a .pt2 file needs PyTorch (pip install "
                       "'plait[torch]')") from None
    try:
        with warnings.catch_warnings():   # torch's deprecation notes, not the user's
            warnings.simplefilter("ignore")
            return torch.export.load(path)
    except Exception as e:
        raise CliError(f"{path}: not a readable torch.export file (save one with "
                       f"torch.export.save): {_first_line(e)}") from None


def _import_pt2(path: str, allow_native: bool) -> tuple[Any, Any]:
    """The exported program in ``path`` and its import (phase ingestion); symbolic sizes
    stay symbolic (their ranges are the module's ``dim_ranges``)."""
    ep = _load_pt2(path, allow_native)
    from .frontend.torch import TorchImportError, from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ep, from_exported_program(ep)
    except TorchImportError as e:
        raise CliError(f"{path}: {e}") from None


def _example_sizes(ep: Any, params: Sequence[Any]) -> dict[str, int]:
    """The sizes the program's example inputs (saved with it) give the symbolic sizes of
    ``params`` (the tensor leaves of the inputs, in order)."""
    import torch
    from torch.utils import _pytree as pytree

    example = getattr(ep, "example_inputs", None)
    if example is None:
        return {}
    tensors = [t for t in pytree.tree_leaves(example) if isinstance(t, torch.Tensor)]
    sizes: dict[str, int] = {}
    for p, t in zip(params, tensors):
        if p.shape is not None and len(p.shape) == t.dim():
            for d, v in zip(p.shape, t.shape):
                if isinstance(d, str):
                    sizes.setdefault(d, int(v))
    return sizes


def _run_torch(path: str, ep: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs (tensor leaves, flattened) of the exported program's module, run by
    PyTorch eagerly on ``inputs`` (its tensor inputs, in order; other inputs are the
    example's)."""
    import torch
    from torch.utils import _pytree as pytree

    example = getattr(ep, "example_inputs", None)
    if example is not None:
        leaves, spec = pytree.tree_flatten(example)
    else:
        spec = ep.call_spec.in_spec
        leaves = [torch.empty(0)] * spec.num_leaves
    slots = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    if len(slots) != len(inputs):
        raise CliError(f"--compare torch: the program takes {len(slots)} tensors, plait's "
                       f"main {len(inputs)}")
    for i, a in zip(slots, inputs):
        leaves[i] = torch.from_numpy(np.array(a))   # a copy: eager PyTorch may write
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    try:
        with torch.no_grad():
            out = ep.module()(*args, **kwargs)
    except Exception as e:
        raise CliError(f"--compare torch: PyTorch failed to run {path}: "
                       f"{_first_line(e)}") from None
    return [t.detach().cpu().numpy() for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


# ------------------------------------------------------------------------ inputs


def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dt)
    raise CliError(f"cannot make a random input of dtype {dtype}")


def _params_of(vm: Any) -> list[Any]:
    return list(vm.executable.functions["main"].params)


def _make_inputs(
    params: Sequence[Any], given: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
    seed: int, defaults: dict[str, int] | None = None,
) -> list[np.ndarray]:  # fmt: skip
    """The arguments of main: the given arrays, else random ones whose symbolic sizes
    come from the given arrays, ``--shape`` or ``defaults`` (else 1)."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    for p in params:  # sizes fixed by the given arrays, then by --shape
        fixed = given[p.name].shape if p.name in given else shapes.get(p.name)
        if fixed is not None and p.shape is not None and len(fixed) == len(p.shape):
            for d, v in zip(p.shape, fixed):
                if isinstance(d, str):
                    sizes.setdefault(d, int(v))
    args = []
    for p in params:
        if p.name in given:
            arr = given[p.name]
            if p.dtype is not None and arr.dtype.name != p.dtype:
                raise CliError(
                    f"--input {p.name}: the array has dtype {arr.dtype.name}, the model expects "
                    f"{p.dtype}"
                )
            args.append(arr)
            continue
        if p.kind != "tensor":
            raise CliError(f"input {p.name!r} is a {p.kind}; give it with --input")
        if p.shape is None:
            if p.name not in shapes:
                raise CliError(f"input {p.name!r} has an unknown rank; give it with --shape")
            shape = shapes[p.name]
        elif p.name in shapes:
            shape = shapes[p.name]
            if len(shape) != len(p.shape):
                raise CliError(
                    f"--shape {p.name}: rank {len(shape)}, the input has rank {len(p.shape)}"
                )
        else:
            shape = tuple(d if isinstance(d, int) else
                          sizes.setdefault(d, (defaults or {}).get(d, 1)) for d in p.shape)
        args.append(_random_input(rng, tuple(shape), p.dtype or "float32"))
    return args


# ------------------------------------------------------------------------ output


def _summary(a: np.ndarray) -> str:
    if a.size == 0:
        return "empty"
    flat = a.reshape(-1)
    if a.dtype.kind in "fiub":
        v = flat.astype(np.float64)
        head = ", ".join(f"{x:.4g}" for x in v[:4]) + (", ..." if flat.size > 4 else "")
        return f"min {v.min():.4g}  max {v.max():.4g}  mean {v.mean():.4g}  [{head}]"
    return str(flat[:4])


def _as_list(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple | list):
        out: list[np.ndarray] = []
        for r in result:
            out.extend(_as_list(r))
        return out
    return [np.asarray(result)]


def _compare(
    outs: list[np.ndarray], ref: list[np.ndarray], names: list[str], rtol: float, atol: float,
    against: str = "onnxruntime",
) -> bool:
    ok = True
    if len(outs) != len(ref):
        print(f"FAIL: plait returned {len(outs)} outputs, {against} {len(ref)}")
        return False
    for name, a, b in zip(names, outs, ref):
        b = np.asarray(b)
        if a.shape != b.shape:
            print(f"  {name}: FAIL shape {a.shape} vs {against} {b.shape}")
            ok = False
            continue
        if a.size == 0:
            print(f"  {name}: PASS (empty)")
            continue
        af, bf = a.astype(np.float64), b.astype(np.float64)
        diff = np.abs(af - bf)
        max_abs = float(np.nanmax(diff)) if diff.size else 0.0
        rel = diff / np.maximum(np.abs(bf), np.finfo(np.float64).tiny)
        max_rel = float(np.nanmax(np.where(diff == 0, 0.0, rel)))
        good = bool(np.allclose(af, bf, rtol=rtol, atol=atol, equal_nan=True))
        ok &= good
        print(
            f"  {name}: {'PASS' if good else 'FAIL'}  max abs error {max_abs:.3g}  "
            f"max rel error {max_rel:.3g}  (rtol {rtol:g}, atol {atol:g})"
        )
    return ok


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
        with progress(len(default_pipeline(t, from_phase=mod.phase).names())):
            return build(mod, target=t, keep_graph=keep_graph)
    except Exception as e:
        raise CliError(f"cannot build for target {target!r}: {_first_line(e)}") from None


def _rebuild(exe: Any, path: str, target: str) -> Any:
    from .build import rebuild

    try:
        return rebuild(exe, target)
    except Exception as e:
        raise CliError(f"{path}: cannot rebuild its graph for target {target!r}: "
                       f"{_first_line(e)}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime import Executable, VirtualMachine
    from .runtime.trust import UntrustedCodeError

    _require_file(args.model)
    kind = _kind(args.model)
    shapes = dict(_parse_shape(s) for s in args.shape)
    given = dict(_parse_input(s) for s in args.input)
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
        ep, mod = _import_pt2(args.model, args.allow_native)
        from .frontend.torch import output_names

        names = output_names(ep)
        exe = _build(mod, args.target, args.offload, args.profile)
    elif kind == "onnx":
        mod, frozen = _import_onnx(args.model, shapes, given, static=True,
                                   fallback=_fallback(args))
        from .session import onnx_io_names

        names = onnx_io_names(args.model, frozen)[1]
        exe = _build(mod, args.target, args.offload, args.profile)
    elif kind == "plx":
        try:
            exe = Executable.load(args.model, allow_native=args.allow_native)
        except Exception as e:
            raise CliError(f"{args.model}: cannot load the executable: {_first_line(e)}") from None
        from .session import recorded_output_names

        names = recorded_output_names(exe)
        _say_fallback(exe.external)
        # an executable without native code, built for the target asked for, runs as it
        # is (there is nothing to rebuild, and nothing whose origin matters)
        if args.target is not None and not (
                args.target == exe.attrs.get("target") and not exe.libs and not exe.external):
            exe = _rebuild(exe, args.model, args.target)
    else:
        exe = _build(_parse_text(args.model), args.target, args.offload, args.profile)
    t_compile = time.perf_counter() - t0
    reference = args.model
    if args.reference_model is not None:
        if kind != "plx" or args.compare != "onnxruntime":
            raise CliError("--model names the ONNX model a .plx was compiled from, for "
                           "--compare onnxruntime of that .plx")
        _require_file(args.reference_model)
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
    inputs = _make_inputs(params, given, shapes, args.seed, _default_sizes(exe, ep, params))
    times = []
    result: Any = None
    for _ in range(max(args.repeat, 1)):
        t1 = time.perf_counter()
        try:
            result = vm["main"](*inputs)
        except Exception as e:
            raise CliError(f"running {args.model}: {_first_line(e)}") from None
        times.append(time.perf_counter() - t1)
    outs = _as_list(result)
    if not names or len(names) != len(outs):
        names = [f"output{i}" for i in range(len(outs))]
    target = exe.attrs.get("target", args.target or "numpy")
    print(f"{args.model}: target {target}, {len(params)} inputs, {len(outs)} outputs")
    for p, a in zip(params, inputs):
        print(f"  input  {p.name}: {a.dtype} {tuple(a.shape)}")
    for n, a in zip(names, outs):
        print(f"  output {n}: {a.dtype} {tuple(a.shape)}  {_summary(a)}")
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
        if not _compare(outs, ref, names, args.rtol, args.atol, args.compare):
            print("FAIL")
            return 1
        print("PASS")
    return 0


def _default_sizes(exe: Any, ep: Any, params: Sequence[Any]) -> dict[str, int]:
    """Sizes for the symbolic sizes of random inputs: a .pt2's example inputs', else
    the smallest in each size's range (the executable's ``dim_ranges``), at least 1."""
    sizes = {}
    ranges = exe.attrs.get("dim_ranges")
    if isinstance(ranges, dict):
        for name, bounds in ranges.items():
            try:
                sizes[str(name)] = max(1, int(bounds[0]))
            except (TypeError, ValueError, IndexError):
                continue
    if ep is not None:
        sizes.update(_example_sizes(ep, params))
    return sizes


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
        raise CliError(f"profiling main: {_first_line(e)}") from None
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
        lines = [f"instruction sets: unknown ({_first_line(e)})"]
    for line in lines:
        print(line)


def _run_onnxruntime(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise CliError(
            "--compare onnxruntime needs the onnxruntime package (pip install onnxruntime)"
        ) from None
    try:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        return [
            np.asarray(r) for r in sess.run(None, {k: v for k, v in feeds.items() if k in wanted})
        ]
    except Exception as e:
        raise CliError(f"onnxruntime failed: {_first_line(e)}") from None


def cmd_compile(args: argparse.Namespace) -> int:
    _require_file(args.model)
    kind = _kind(args.model)
    shapes = dict(_parse_shape(s) for s in args.shape)
    t0 = time.perf_counter()
    from .session import default_target, describe, onnx_io_names, record_io

    ins: list[str] | None = None
    outs: list[str] | None = None
    if kind == "onnx":
        mod, frozen = _import_onnx(args.model, shapes, {}, static=False,
                                   fallback=_fallback(args))
        ins, outs = onnx_io_names(args.model, frozen)
    elif kind == "pt2":
        ep, mod = _import_pt2(args.model, args.allow_native)
        from .frontend.torch import output_names

        outs = output_names(ep)
    elif kind == "text":
        mod = _parse_text(args.model)
    else:
        raise CliError(f"{args.model} is already an executable")
    target = args.target
    why = ""
    if target is None:
        target = default_target()
        why = (" (a C compiler was found)" if target == "c" else
               " (no C compiler was found: the executable runs on numpy)")
    exe = _build(mod, target, args.offload, keep_graph=not args.no_graph)
    if "main" in exe.functions:
        record_io(exe, "main", describe(mod, "main", ins, outs))
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


def _parse_text(path: str) -> Any:
    from . import parse
    from .ir.parser import ParseError

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not a module in the text format (it is not UTF-8 text); "
                       f"plait reads {_KINDS}") from None
    try:
        return parse(text, path)
    except ParseError as e:   # its file, line, source line and caret, as the parser wrote
        raise CliError(str(e)) from None
    except Exception as e:
        raise CliError(f"{path}: {_first_line(e)}") from None


def cmd_check(args: argparse.Namespace) -> int:
    from .ir.well_formed import well_formed

    _require_file(args.module)
    kind = _kind(args.module) if args.module.lower().endswith(_BINARY_SUFFIXES) else "text"
    if kind == "plx":
        return _check_executable(args.module)
    if kind == "onnx":
        mod = _import_onnx(args.module, {}, {}, static=False)[0]
    elif kind == "pt2":
        mod = _import_pt2(args.module)[1]
    else:
        mod = _parse_text(args.module)
    try:
        problems = well_formed(mod)
    except Exception as e:
        raise CliError(f"{args.module}: cannot check the module: {_first_line(e)}") from None
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
        raise CliError(f"{path}: not a valid executable: {_first_line(e)}") from None
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


def _first_line(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 (an error whose message cannot be made)
        text = ""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    return (
        "; ".join(lines)
        if len(lines) <= 6
        else "; ".join(lines[:6]) + f"; ... ({len(lines) - 6} more)"
    )


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
        print(f"plait: error: {_first_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `plait check m.py | head`)
        sys.stderr.close()
        return 0
    except Exception as e:  # an internal error: still one line, with where to report it
        print(
            f"plait: internal error: {type(e).__name__}: {_first_line(e)} "
            "(please report it with the model)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":  # python -m plait.cli: run the one plait.cli module (its
    from plait.cli import main as _main  # error classes are the ones the tools raise)

    sys.exit(_main())
