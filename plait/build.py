"""``plait.build``: compile an IRModule into an executable through the default pipeline."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .codegen.vm_codegen import vm_codegen
from .ir.module import IRModule
from .pipeline import default_pipeline
from .runtime.executable import Executable
from .target import Target


def build(
    mod: IRModule,
    target: Target | str | None = None,
    *,
    pipeline: Any = None,
) -> Executable:
    """Compile ``mod`` for ``target`` (default: the module's ``target`` attribute, else
    ``numpy``) and return the executable.

    ``pipeline`` replaces the default pipeline (see :func:`plait.default_pipeline`,
    which returns the one ``build`` would run, for printing and editing)."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"build() takes an IRModule, got {type(mod).__name__}")
    if target is None:
        target = mod.target if mod.target is not None else "numpy"
    t = Target.from_any(target)
    mod = mod.with_attrs(target=t)
    if pipeline is None:
        pipeline = default_pipeline(t, from_phase=mod.phase)
    with _gc_paused():
        mod = pipeline(mod)
        return vm_codegen(mod)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while compiling: the passes allocate
    many small immutable nodes and no reference cycles worth collecting, and the
    collector's generation scans make compile time grow faster than the module."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
