"""Models given by path, as the ``plait`` command and its tools take them: load them
(an ONNX model, a PyTorch exported program, a module in the text format), make their
inputs, run them on a reference (onnxruntime, PyTorch) and compare the outputs.

Library logic the command line (:mod:`plait.cli`) and the debugging tools
(:mod:`plait.tools`) share; it prints what the user should see (the sizes chosen for open
inputs, the nodes run by a fallback, the comparison) and raises :class:`CliError` with a
one-line message naming the file or the option at fault.  The compiler is imported when
a function needs it, so ``plait run x.plx`` loads the runtime only.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.errors import PlaitError


class CliError(PlaitError):
    """A problem to report in one line (exit code 2)."""


def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
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


def parse_input(spec: str) -> tuple[str, np.ndarray]:
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


KINDS = ("a .onnx model, a .pt2 exported program (torch.export.save), a .plx executable "
          "or a .plait.py module")


BINARY_SUFFIXES = (".onnx", ".plx", ".pt2")


def file_kind(path: str) -> str:
    low = path.lower()
    if low.endswith(".onnx"):
        return "onnx"
    if low.endswith(".plx"):
        return "plx"
    if low.endswith(".pt2"):
        return "pt2"
    if low.endswith(".py"):
        return "text"
    raise CliError(f"{path}: unknown file kind; expected {KINDS}")


def require_file(path: str) -> None:
    if not os.path.exists(path):
        raise CliError(f"no such file: {path}")


def onnx_graph_inputs(path: str) -> tuple[list[tuple[str, int, list[Any]]], dict[str, int]]:
    """(name, element type, dims) of the graph inputs that are not initializers, and the
    smallest value of each open size the exporter recorded a range for (the dynamo
    exporter's ``Dim(min=...)``: plait/frontend/onnx/export_ranges.py), by ``dim_param``."""
    import onnx

    from .frontend.onnx.dtypes import sanitize
    from .frontend.onnx.export_ranges import recorded_ranges

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise CliError(f"{path}: not a readable ONNX model ({str(e).splitlines()[0]})") from None
    inits = {i.name for i in model.graph.initializer}
    ranges = recorded_ranges(model)
    out, lows = [], {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: list[Any] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
        ]
        out.append((vi.name, tt.elem_type, dims))
        for d in dims:
            if isinstance(d, str) and sanitize(d) in ranges:
                lows[d] = ranges[sanitize(d)][0]
    return out, lows


def say_fallback(modules: Any) -> None:
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


def import_onnx(
    path: str, shapes: dict[str, tuple[int, ...]], given: dict[str, np.ndarray], static: bool,
    fallback: str | None = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """Import ``path``; with ``static`` every input shape is fixed (given arrays, --shape,
    else symbolic sizes 1, or the least value of a range the exporter recorded).  Inputs
    the model needs at compile time are frozen from ``given``; ``fallback`` runs the
    nodes plait cannot import (their list is printed).  Returns the module and the
    frozen inputs."""
    from .frontend.onnx import NeedsConstantError, OnnxImportError, from_onnx

    if static:
        shapes = dict(shapes)
        inputs, lows = onnx_graph_inputs(path)
        for name, _elem, dims in inputs:
            if name in given:
                shapes[name] = tuple(given[name].shape)
            elif name not in shapes:   # an open size: 1, or the least its range allows
                shapes[name] = tuple(d if isinstance(d, int) and d > 0 else
                                     max(1, lows.get(d, 1)) for d in dims)  # type: ignore[arg-type]
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
            say_fallback(mod.attrs.get("external_mods"))
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


def load_pt2(path: str, allow_native: bool) -> Any:
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
                       f"torch.export.save): {first_line(e)}") from None


def import_pt2(path: str, allow_native: bool) -> tuple[Any, Any]:
    """The exported program in ``path`` and its import (phase ingestion); symbolic sizes
    stay symbolic (their ranges are the module's ``dim_ranges``)."""
    ep = load_pt2(path, allow_native)
    from .frontend.torch import TorchImportError, from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ep, from_exported_program(ep)
    except TorchImportError as e:
        raise CliError(f"{path}: {e}") from None


def example_sizes(ep: Any, params: Sequence[Any]) -> dict[str, int]:
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


def run_torch(path: str, ep: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
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
                       f"{first_line(e)}") from None
    return [t.detach().cpu().numpy() for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dt)
    raise CliError(f"cannot make a random input of dtype {dtype}")


def make_inputs(
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
        args.append(random_input(rng, tuple(shape), p.dtype or "float32"))
    return args


def summary(a: np.ndarray) -> str:
    if a.size == 0:
        return "empty"
    flat = a.reshape(-1)
    if a.dtype.kind in "fiub":
        v = flat.astype(np.float64)
        head = ", ".join(f"{x:.4g}" for x in v[:4]) + (", ..." if flat.size > 4 else "")
        return f"min {v.min():.4g}  max {v.max():.4g}  mean {v.mean():.4g}  [{head}]"
    return str(flat[:4])


def as_list(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple | list):
        out: list[np.ndarray] = []
        for r in result:
            out.extend(as_list(r))
        return out
    return [np.asarray(result)]


def compare_outputs(
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


def default_sizes(exe: Any, ep: Any, params: Sequence[Any]) -> dict[str, int]:
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
        sizes.update(example_sizes(ep, params))
    return sizes


def run_onnxruntime(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
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
        raise CliError(f"onnxruntime failed: {first_line(e)}") from None


def parse_text(path: str) -> Any:
    from . import parse
    from .ir.parser import ParseError

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not a module in the text format (it is not UTF-8 text); "
                       f"plait reads {KINDS}") from None
    try:
        return parse(text, path)
    except ParseError as e:   # its file, line, source line and caret, as the parser wrote
        raise CliError(str(e)) from None
    except Exception as e:
        raise CliError(f"{path}: {first_line(e)}") from None


def first_line(e: BaseException) -> str:
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
