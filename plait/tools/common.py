"""What the debugging commands share: loading plugins and models, pass options, pipelines.

Errors are :class:`plait.models.CliError` (one line, exit code 2) naming the file, the
pass or the column of the pipeline text at fault.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..models import (
    CliError,
    file_kind,
    first_line,
    import_onnx,
    parse_input,
    parse_shape,
    parse_text,
)

if TYPE_CHECKING:  # the compiler: imported when a command uses it (`plait run x.plx`
    from ..ir.module import IRModule  # builds the argument parser without it)
    from ..transform.pass_base import Pass
    from ..transform.sequential import Sequential


def load_plugins(paths: Sequence[str]) -> None:
    """Import each Python file of ``paths`` (it registers passes, ops, targets...), like
    ``mlir-opt --load-pass-plugin``."""
    for i, path in enumerate(paths):
        if not os.path.isfile(path):
            raise CliError(f"--plugin {path}: no such file")
        real = os.path.realpath(path)
        if any(os.path.realpath(getattr(m, "__file__", None) or "") == real
               for m in list(sys.modules.values())):
            continue  # imported already (by this command or as a module)
        stem = os.path.splitext(os.path.basename(path))[0]
        # under its own name when free, so a later `import <stem>` finds the same module
        # (and the same pass classes) instead of registering them twice
        name = stem if stem.isidentifier() and stem not in sys.modules else \
            f"plait_plugin_{i}_{stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CliError(f"--plugin {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise CliError(f"--plugin {path} failed while loading: {type(e).__name__}: "
                           f"{first_line(e)}") from None


@dataclass
class Model:
    """A model given on the command line: the module, the ONNX file (if any) and the
    inputs that had to be frozen at import."""

    module: IRModule
    path: str
    onnx_path: str | None = None
    frozen: dict[str, np.ndarray] | None = None


def load_model(path: str, shapes: Sequence[str] = (), *, static: bool = True) -> Model:
    """The module in ``path``: an ONNX model (imported with the ``--shape`` values, and
    every other size fixed to 1 when ``static``) or a module in the text format."""
    if not os.path.exists(path):
        raise CliError(f"no such file: {path}")
    kind = file_kind(path)
    if kind == "onnx":
        mod, frozen = import_onnx(path, dict(parse_shape(s) for s in shapes), {}, static)
        return Model(mod, path, path, frozen)
    if kind == "text":
        return Model(parse_text(path), path)
    raise CliError(f"{path} is an executable; give the model (.onnx) or its text (.plait.py)")


def parse_passes(text: str, what: str = "--passes") -> Sequential:
    """The pipeline written as ``text`` (the textual form of
    :class:`~plait.transform.Sequential`); a mistake names the column and, for an
    unknown pass, the close names."""
    if not text.strip():
        raise CliError(f"{what} is empty; give pass names separated by commas, e.g. "
                       "'Normalize,LambdaLift,FoldConstant'")
    from ..transform.errors import PipelineError
    from ..transform.sequential import parse_pipeline

    try:
        return parse_pipeline(text)
    except PipelineError as e:
        lines = str(e).splitlines()
        msg = lines[0]
        if len(lines) >= 3:  # the text and a caret under the column
            msg += f" (in {lines[1].strip()!r})"
        raise CliError(f"{what}: {msg}; `plait passes` lists the registered passes") from None


def pass_options(cls: type[Pass]) -> list[str]:
    """The constructor parameters of a pass class as ``name: type = default``."""
    out: list[str] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        sig = inspect.signature(init)
        more = False
        for i, p in enumerate(sig.parameters.values()):
            if i == 0:
                continue
            if p.kind is p.VAR_KEYWORD:
                more = True
                continue
            if p.kind is p.VAR_POSITIONAL or p.name in seen:
                continue
            seen.add(p.name)
            text = p.name
            if p.annotation is not p.empty:
                ann = p.annotation if isinstance(p.annotation, str) else getattr(
                    p.annotation, "__name__", str(p.annotation))
                text += f": {ann}"
            if p.default is not p.empty:
                text += f" = {p.default!r}"
            out.append(text)
        if not more:
            break
    return out


def parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """``--input name=file.npy`` values."""
    return dict(parse_input(s) for s in specs)


def describe_error(e: BaseException) -> str:
    """``Type: message`` on one line."""
    return f"{type(e).__name__}: {first_line(e)}"


__all__ = [
    "Model",
    "describe_error",
    "load_model",
    "load_plugins",
    "parse_inputs",
    "parse_passes",
    "pass_options",
]
