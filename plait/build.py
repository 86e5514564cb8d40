"""``plait.build``: compile an IRModule into an executable through the default pipeline."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .codegen.vm_codegen import vm_codegen
from .ir.expr import Function
from .ir.module import IRModule
from .pipeline import build_pipeline
from .runtime.executable import Executable
from .target import Target


def build(
    mod: IRModule,
    target: Target | str | None = None,
    *,
    pipeline: Any = None,
    keep_graph: bool = True,
) -> Executable:
    """Compile ``mod`` for ``target`` (default: the module's ``target`` attribute, else
    ``numpy``) and return the executable.

    ``pipeline`` replaces the default pipeline (see :func:`plait.default_pipeline`,
    which returns the one ``build`` would run, for printing and editing).  When the
    executable holds native code and ``keep_graph`` is true, it keeps ``mod`` as text
    (``exe.graph``), so that whoever may not run its native code can rebuild it on
    numpy (:func:`rebuild`); the file grows by about the size of the weights."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"build() takes an IRModule, got {type(mod).__name__}")
    if target is None:
        target = mod.target if mod.target is not None else "numpy"
    _check_param_names(mod)
    t = Target.from_any(target)
    given = mod
    mod = mod.with_attrs(target=t)
    if pipeline is None:
        pipeline = build_pipeline(t, mod.phase)
    with _gc_paused():
        # (the built module is dropped before the collector resumes: its first pass
        # then scans only what survives, the executable)
        exe = vm_codegen(pipeline(mod))
        if exe.libs:
            _keep_graph(exe, given, keep_graph)
    return exe


def rebuild(exe: Executable, target: Target | str = "numpy", **options: Any) -> Executable:
    """Build the graph an executable keeps (``exe.graph``) again, for ``target``: the way
    to run an executable whose native code may not run here (an unsigned file from
    elsewhere) on numpy.  ``options`` go to :func:`build`."""
    from .ir.parser import parse

    if not isinstance(exe, Executable):
        raise TypeError(f"rebuild() takes an Executable, got {type(exe).__name__}")
    if exe.graph is None:
        why = exe.attrs.get("graph_not_kept") or "it holds no native code, or was built so"
        raise BuildError(f"the executable keeps no graph to rebuild ({why}); build the "
                         f"model again for target {str(target)!r}")
    mod = parse(exe.graph, f"<the graph of {exe.trust.source or 'the executable'}>")
    return build(mod, target, **options)


def _keep_graph(exe: Executable, mod: IRModule, keep: bool) -> None:
    if not keep:
        exe.attrs["graph_not_kept"] = "built with keep_graph=False"
        return
    try:
        exe.graph = mod.script()
    except Exception as e:  # a value without a text form: the executable still works
        exe.attrs["graph_not_kept"] = f"the module does not print: {type(e).__name__}: {e}"


class BuildError(ValueError):
    """``build`` refuses its input module before running any pass; the message says
    what to change."""


def _check_param_names(mod: IRModule) -> None:
    """The parameters of each function name the arguments of the executable's function
    (``vm["main"](x=...)``): two of the same name cannot both be called by it."""
    for name, func in mod.functions.items():
        if not isinstance(func, Function):
            continue
        dup = sorted(n for n, k in Counter(p.name_hint for p in func.params).items() if k > 1)
        if dup:
            raise BuildError(
                f"function {name!r} has more than one parameter named "
                f"{', '.join(map(repr, dup))}; parameter names must be unique (they name "
                "the executable's arguments): rename them"
            )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while compiling: the passes allocate
    many small immutable nodes and no reference cycles worth collecting, and the
    collector's generation scans make compile time grow faster than the module.

    When it resumes, what survived the build (the executable: a few objects per
    instruction) is moved to the oldest generation as it is (``gc.freeze()`` then
    ``gc.unfreeze()``), where the next full collection scans it with everything else
    long-lived: the executable lives as long as it is used, so the young
    generations' collections would only scan it and move it on (the first one, which
    resuming the collector starts at once, took 1 us per binding at 100k bindings).
    What the caller made since the collector last ran goes with it (at most a few
    thousand objects).  Nothing is lost: cyclic garbage among what is moved (a few
    dozen objects per build on numpy) is freed by that full collection or any
    ``gc.collect()``.  Not
    done when the process has frozen objects of its own (``gc.get_freeze_count()``),
    which ``unfreeze`` would release."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
