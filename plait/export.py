"""``plait.export_library``: a model as a C library, with no Python at run time.

::

    lib = plait.export_library(plait.frontend.from_onnx("cnn.onnx"), "out/", name="cnn")
    # out/libcnn.so, out/libcnn.a, out/cnn.h, out/dlpack.h (and out/cnn.weights)

The model is built for the ``c`` target (its pipeline, as :func:`plait.build` runs it)
and its function ``main`` must run as one native entry point (``c.SingleEntry``,
docs/targets.md): the library holds the kernels, the thread pool, the entry point and
the C API of docs/c_api.md.  ``plait compile model.onnx --emit library -o out/`` is the
command line's way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .ir.module import IRModule
from .pipeline import build_pipeline
from .runtime.executable import Executable
from .target import Target


@contextmanager
def _compiler(cc: str | None) -> Iterator[None]:
    """$CC set to ``cc`` for the build (a cross compiler builds for its machine)."""
    if cc is None:
        yield
        return
    old = os.environ.get("CC")
    os.environ["CC"] = cc
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CC", None)
        else:
            os.environ["CC"] = old


def export_library(
    model: IRModule | Executable,
    out_dir: str | os.PathLike[str],
    *,
    name: str = "model",
    weights: str = "embed",
    output_names: Sequence[str] | None = None,
    cc: str | None = None,
    function: str = "main",
    target: Target | str | None = None,
) -> Any:
    """Build ``model`` (a module, or an executable that keeps its graph) for the ``c``
    target and write its C library into ``out_dir``: ``lib<name>.so``,
    ``lib<name>.a``, ``<name>.h`` and ``dlpack.h``; ``weights="file"`` writes the
    weights to ``<name>.weights`` (mapped when an instance is created) instead of
    into the library.  ``output_names`` name the outputs in the API (default
    ``output0``, ...); ``cc`` is the C compiler (default ``$CC``, else ``cc``: a cross
    compiler such as ``aarch64-linux-gnu-gcc`` gives a library for its machine);
    ``target`` a ``c`` target with attributes (``Target("c", threads=False)``).

    Returns a :class:`~plait.codegen.c.model_library.ModelLibrary` (the paths and the
    architecture).  Raises :class:`~plait.target.c.library_export.LibraryExportError`
    when ``function`` does not run as one native entry point, naming what stops it."""
    from .build import graph_module
    from .target.c.library_export import LibraryExportError, export_built_module

    if weights not in ("embed", "file"):
        raise LibraryExportError(f"weights={weights!r}: use 'embed' (inside the library) or "
                                 "'file' (a side file <name>.weights mapped at load time)")
    if isinstance(model, Executable):
        model = graph_module(model)
    if not isinstance(model, IRModule):
        raise TypeError(f"export_library() takes an IRModule or an Executable, got "
                        f"{type(model).__name__}")
    t = Target.from_any(target if target is not None else "c")
    if not t.is_a("c"):
        raise LibraryExportError(f"target {t.kind!r}: a C library is built for the c target "
                                 "(or a kind derived from it)")
    if not t.attrs.get("single_entry", True):
        raise LibraryExportError("target attribute single_entry=False: the library runs the "
                                 "model's entry point; build with single_entry on")
    with _compiler(cc):
        built = build_pipeline(t, model.phase)(model.with_attrs(target=t))
        return export_built_module(built, out_dir, name, function=function, weights=weights,
                                   output_names=output_names)


__all__ = ["export_library"]
