"""``plait.build``: compile an IRModule into an executable through the default pipeline."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from plait.errors import PlaitError

from .codegen.vm_codegen import vm_codegen
from .ir.deferred import DeferredArray, recording_deferred
from .ir.expr import Function
from .ir.module import IRModule
from .kernel.ir import Kernel
from .pipeline import build_pipeline, model_attr_names, model_target_attrs
from .runtime.derived_constants import DerivedConstants, Unpack
from .runtime.executable import Executable
from .runtime.trust import (
    MODULE_TRUST_ATTR,
    code_attributes,
    module_trust_attr,
    rebuilt_trust,
    require_trusted,
)
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
    numpy (:func:`rebuild`); the file grows by about the size of the weights.

    Memory: for a ``c`` target the weights packed for its kernels are computed when
    code generation reads them (:mod:`plait.ir.deferred`) and the kept graph unpacks
    them from the executable's constants, so when nothing but ``build`` holds ``mod``
    (``build(from_onnx(path), "c")``, ``plait compile``) each original goes as it is
    packed: the build peaks at about the larger of the weights and their packed form.
    A module the caller keeps keeps its weights."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"build() takes an IRModule, got {type(mod).__name__}")
    if target is None:
        target = mod.target if mod.target is not None else "numpy"
    _check_param_names(mod)
    t = Target.from_any(target)
    _check_built_for(mod, t)
    given: IRModule | None = mod
    rebuilt = rebuilt_trust(mod.attrs.get(MODULE_TRUST_ATTR))
    mod = mod.with_attrs(target=t)
    if pipeline is None:
        pipeline = build_pipeline(t, mod.phase)
    with _gc_paused():
        # A target of native code: the graph is printed first and ``given`` dropped, so
        # that the pipeline's modules are the last holders of the original weights and
        # each goes once packed (plait.ir.deferred); the kept graph refers to the packed
        # ones (KeptGraph.refer_to_packed).  Other targets print it after, if needed.
        kept = KeptGraph(given, keep_graph) if _native_target(t) else None
        if kept is not None:
            given = None
        # (the packers' deferred constants are recorded as they are made, so that
        # nothing walks the built module for them: a walk cost the scaling chain's
        # builds a third of their time)
        with recording_deferred() as record:
            built = pipeline(mod)
        del mod
        if kept is not None:
            packed = record.pending()
            kept.refer_to_packed(packed)
            _pack_largest_first(packed)
            del packed
        # (no collection is needed for the originals to go: the passes leave no
        # reference cycle holding a module; the built module is dropped before the
        # collector resumes, whose first pass then scans only what survives)
        exe = vm_codegen(built)
        del built
        if exe.libs:
            (kept or KeptGraph(given, keep_graph)).attach(exe, model_target_attrs(t))
    if rebuilt is not None:  # from the graph of an untrusted file: never signed here
        exe.trust = rebuilt
    return exe


def _pack_largest_first(pending: list[DeferredArray]) -> None:
    """Compute the built module's deferred constants (the packed weights, ``pending``:
    those its passes made that are still held and not computed) in the order of their
    originals' size, largest first, before code generation reads them in program order.

    Computing one holds its original and its packed form at once, and the packed forms
    made before it (a Winograd transform is 16/9 or 4 times its original, panels pad)
    are already held: in program order a network's largest weights, its last ones,
    were packed when the executable held the most (ResNet-18's 9 MiB 3x3 weights of 512
    channels raised its build's peak by 9 MiB).  Largest first, the largest transit
    falls when the most originals are still unpacked and the packed forms have grown
    least.  Each is computed once either way (the same arrays: the order changes no
    value)."""
    sizes = [d.source.nbytes if d.source is not None else 0 for d in pending]
    for k in sorted(range(len(pending)), key=lambda i: -sizes[i]):
        pending[k].materialize()


def _native_target(t: Target) -> bool:
    """Whether ``t`` compiles native code (derives from ``c``): its executables keep
    their graph, and its packed weights replace the originals."""
    return bool(t.is_a("c"))


def _check_built_for(mod: IRModule, t: Target) -> None:
    """A module at the build phase was lowered for its own target: its kernels and
    library calls are that target's, and only its passes (``c.CompileKernels``, which
    compiles the kernels it holds) can finish it.  Building it for another kind would
    run its old library (the kernels' edits ignored), so that is refused."""
    own = mod.target
    if mod.phase != "build" or own is None:
        return
    kind = getattr(Target.from_any(own), "kind", None)
    if kind is not None and kind != t.kind:
        raise ValueError(
            f"the module is at the build phase, lowered for target {kind!r}: build it for "
            f"{kind!r} (its libraries are compiled again from its kernels), or build the "
            f"module of an earlier phase for {t.kind!r}")


def rebuild(exe: Executable, target: Target | str = "numpy", *, allow_native: bool = False,
            **options: Any) -> Executable:
    """Build the graph an executable keeps (``exe.graph``) again, for ``target``: the way
    to run an executable whose native code may not run here (an unsigned file from
    elsewhere) on numpy, or on native code this compiler generates.  ``options`` go to
    :func:`build`.

    The graph comes through :func:`graph_module`, which applies the trust policy: code
    the graph carries (hand-written kernels, C sources, compiled libraries, external
    modules) is not built from a file nobody vouched for unless the file was loaded
    with ``allow_native=True`` or ``allow_native`` is given here; and an executable
    rebuilt from such a file is never signed by this machine's key when saved.

    The target attributes that changed what the model computes when it was built (a
    dialect's :attr:`~plait.dialects.Dialect.model_attrs`: ``weight_quant``), recorded
    beside the graph (:data:`GRAPH_TARGET_ATTRS`), are given to ``target`` again unless
    it sets them itself: the graph is the model before them, and rebuilt without them
    it would compute other numbers than the executable."""
    t = with_model_attrs(Target.from_any(target), exe.attrs.get(GRAPH_TARGET_ATTRS))
    return build(graph_module(exe, allow_native=allow_native), t, **options)


GRAPH_TARGET_ATTRS = "graph_target_attrs"
"""The executable attribute that records the build's target attributes that change what
the model computes (:func:`~plait.dialects.model_target_attrs`), for :func:`rebuild`."""


def with_model_attrs(target: Target, recorded: Any) -> Target:
    """``target`` with the model attributes an executable recorded
    (:data:`GRAPH_TARGET_ATTRS`) that it does not set itself; only attributes a
    registered dialect declares are taken from a file."""
    if not recorded:
        return target
    if not isinstance(recorded, dict):
        raise BuildError(f"the executable's attribute {GRAPH_TARGET_ATTRS!r} is not a "
                         f"mapping of target attributes: {recorded!r}")
    unknown = sorted(set(recorded) - model_attr_names())
    if unknown:
        raise BuildError(f"the executable records target attributes {unknown} that change "
                         "what its model computes, but no registered dialect declares "
                         "them (a dialect missing here?); rebuild with a target that sets "
                         "them, or import the dialect first")
    extra = {k: v for k, v in recorded.items() if k not in target.attrs}
    return Target(target.kind, **target.attrs, **extra) if extra else target


def graph_module(exe: Executable, *, allow_native: bool = False) -> IRModule:
    """The graph an executable keeps, parsed (never executed), under the trust policy
    of :mod:`plait.runtime.trust`: this is how a file's graph becomes a module.

    For a file not vouched for (neither built here nor signed by a trusted key) the
    module records where it came from (module attribute ``trust``, so the executable
    built from it is ``rebuilt`` and never signed by this machine), and a graph that
    carries code of its own — kernels, or an attribute a target or codegen registered
    as code (:func:`~plait.runtime.trust.register_code_attribute`: C sources, native
    libraries, entry points, external modules) — raises
    :class:`~plait.runtime.trust.UntrustedCodeError` unless the file was loaded with
    ``allow_native=True`` or ``allow_native`` is given here.  ``parse(exe.graph,
    constants=exe.graph_constants)`` skips this decision: text you parse yourself is
    your own code."""
    from .ir.parser import parse

    if not isinstance(exe, Executable):
        raise TypeError(f"graph_module() takes an Executable, got {type(exe).__name__}")
    if exe.graph is None:
        why = exe.attrs.get("graph_not_kept") or "it holds no native code, or was built so"
        raise BuildError(f"the executable keeps no graph to rebuild ({why}); build the "
                         "model again")
    trust = exe.trust
    if allow_native and not trust.native_allowed:
        trust = replace(trust, allow_native=True)
    mod = parse(exe.graph, f"<the graph of {trust.source or 'the executable'}>",
                constants=exe.graph_constants)
    attr = module_trust_attr(trust)
    if attr is None:
        return mod
    code = carried_code(mod)
    if code:
        require_trusted(trust, f"a graph that carries code of its own ({'; '.join(code)})",
                        "To build it anyway: plait.rebuild(exe, target, allow_native=True) "
                        "(plait run FILE --target T --allow-native).")
    return mod.with_attrs(**{MODULE_TRUST_ATTR: attr})


def carried_code(mod: IRModule) -> list[str]:
    """What in ``mod`` is code rather than a graph of ops: its kernels and every
    registered code attribute it holds, each as ``"<what>: <names>"``."""
    out = []
    kernels = [name for name, f in mod.items() if isinstance(f, Kernel)]
    if kernels:
        out.append(f"kernels: {', '.join(kernels[:5])}" +
                   (f" and {len(kernels) - 5} more" if len(kernels) > 5 else ""))
    for attr, what in code_attributes().items():
        value = mod.attrs.get(attr)
        if value:
            out.append(f"{what} (module attribute {attr!r})")
    return out


class KeptGraph:
    """The module given to :func:`build`, as text and a table of its large constants
    (``exe.graph``, ``exe.graph_constants``), or why it is not kept."""

    def __init__(self, mod: IRModule | None, keep: bool) -> None:
        self.text: str | None = None
        self.table = DerivedConstants()
        self.why = "built with keep_graph=False"
        if not keep or mod is None:
            return
        try:  # large constants kept by reference: once in memory and in the file
            table: dict[str, Any] = {}
            self.text = mod.script(constants=table)
            self.table = DerivedConstants(table)
        except Exception as e:  # a value without a text form: the executable still works
            self.why = f"the module does not print: {type(e).__name__}: {e}"

    def refer_to_packed(self, pending: list[DeferredArray]) -> None:
        """Let each constant of the table that the build packs (one of ``pending``, the
        built module's deferred constants not computed yet, made from the same array, or
        from its transpose: ``matmul(x, permute_dims(W))``, with an exact inverse) be
        unpacked from the packed array when read, instead of holding the original."""
        if not self.text:
            return
        packs: dict[tuple[Any, ...], tuple[DeferredArray, Unpack]] = {}
        for d in pending:
            if d.source is not None and d.inverse is not None:
                packs.setdefault(_buffer_of(d.source), (d, d.inverse))
                if d.source.ndim == 2:   # packed from a transposed view
                    packs.setdefault(_buffer_of(d.source.T), (d, _transposed(d.inverse)))
        for key in list(self.table):
            found = packs.get(_buffer_of(self.table[key]))
            if found is not None:
                self.table.derive(key, found[0].materialize, found[1])

    def attach(self, exe: Executable, model_attrs: dict[str, Any] | None = None) -> None:
        """Give ``exe`` the graph (or the reason it has none) and the target attributes
        that change what the model computes (``model_attrs``), for :func:`rebuild`."""
        if self.text is None:
            exe.attrs["graph_not_kept"] = self.why
            return
        if model_attrs:
            exe.attrs[GRAPH_TARGET_ATTRS] = dict(model_attrs)
        self.table.resolve()   # the packed arrays themselves, not the IR's objects
        exe.graph = self.text
        exe.graph_constants = self.table


def _transposed(inverse: Unpack) -> Unpack:
    """The original of a matrix packed from its transposed view: the transpose of what
    ``inverse`` unpacks, C-ordered."""
    return lambda p: np.ascontiguousarray(inverse(p).T)


def _buffer_of(a: np.ndarray) -> tuple[Any, ...]:
    """What identifies the elements of ``a`` in memory (two views of one buffer with
    the same layout are the same array)."""
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)


class BuildError(PlaitError, ValueError):
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
