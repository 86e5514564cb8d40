"""The default pipeline, assembled from the registries' extension points.

``default_pipeline(target)`` returns the :class:`~plait.transform.Sequential` that
``plait.build`` runs: one nested Sequential per extension point (docs/index.md),
in order, each filled from the registries (dialects, the target kind and its
ancestors, registered external codegens) — this module names none of them.

    ingestion     dialect canonicalizations, target hooks, Normalize, LambdaLift
    optimization  CanonicalizeBindings, FoldConstant, FoldBatchNorm,
                  EliminateCommonSubexpr, DeadCodeElimination, dialect and target
                  passes, user passes, partitioning for the codegens the target's ``offload`` lists
    dispatch      dialect dispatch passes, then the target's (custom kernels, library
                  calls)
    legalize      dialect legalizations, then LegalizeOps for the rest
    lowering      dialect and target kernel passes
    build         RunCodegen (external codegens), target codegen passes,
                  ExplicitMemory (which also turns dataflow blocks into ordinary
                  ones), PlanMemory, then the target's link passes (native code of
                  the planned module)

Print it, edit it by name (``insert_after``, ``remove``, ``replace``) and hand it back
to ``plait.build(mod, target, pipeline=...)``.
"""

from __future__ import annotations

from typing import Any

from .dialects import dialect_passes
from .dialects import model_attr_names as model_attr_names  # (for build: the registry)
from .dialects import model_target_attrs as model_target_attrs
from .ir.module import PHASES
from .target import Target
from .transform import Sequential, make_pass
from .transform.codegens import offload_passes

STAGES = ("ingestion", "optimization", "dispatch", "legalize", "lowering", "build")
"""The extension points of the default pipeline, in order."""

STAGE_PHASE = {
    "ingestion": "ingestion",
    "optimization": "optimization",
    "dispatch": "optimization",
    "legalize": "optimization",
    "lowering": "lowering",
    "build": "lowering",
}
"""The phase a module is in when each stage starts."""

USER_PASSES: list[Any] = []
"""Passes added to the optimization stage of every default pipeline, by
:func:`register_user_pass` (in order)."""


def register_user_pass(p: Any) -> None:
    """Add pass ``p`` (an instance) to the optimization stage of the default pipeline."""
    USER_PASSES.append(p)


def _stage_passes(stage: str, target: Target) -> list[Any]:
    if stage == "ingestion":
        return [
            *dialect_passes("ingestion", target),
            *target.hook_passes("ingestion"),
            make_pass("Normalize"),
            make_pass("LambdaLift"),
        ]
    if stage == "optimization":
        return [
            make_pass("CanonicalizeBindings"),
            make_pass("FoldConstant"),
            make_pass("FoldBatchNorm"),
            make_pass("EliminateCommonSubexpr"),
            make_pass("DeadCodeElimination"),
            *dialect_passes("optimization", target),
            *target.hook_passes("optimization"),
            *USER_PASSES,
            *offload_passes(target),
        ]
    if stage == "dispatch":
        return [*dialect_passes("dispatch", target), *target.hook_passes("dispatch")]
    if stage == "legalize":
        return [
            *dialect_passes("legalize", target),
            *target.hook_passes("legalize"),
            make_pass("LegalizeOps"),
        ]
    if stage == "lowering":
        return [*dialect_passes("lowering", target), *target.hook_passes("lowering")]
    if stage == "build":
        return [
            make_pass("RunCodegen"),
            *target.hook_passes("build"),
            make_pass("ExplicitMemory"),
            make_pass("PlanMemory"),
            *target.hook_passes("link"),
        ]
    raise ValueError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")


_CORE_PASSES = ("Normalize", "LambdaLift", "CanonicalizeBindings", "FoldConstant",
                "FoldBatchNorm", "EliminateCommonSubexpr", "DeadCodeElimination",
                "LegalizeOps", "RunCodegen", "ExplicitMemory", "PlanMemory")
"""The passes :func:`_stage_passes` makes by name."""

_BUILT: dict[tuple[Any, ...], tuple[list[Any], Sequential]] = {}
_BUILT_MAX = 64


def _inputs(t: Target) -> list[Any]:
    """Everything :func:`default_pipeline` reads for ``t`` besides ``t`` itself: the
    dialects and their hooks, the target kind's chain and its hooks, the classes
    registered under the core passes' names, the user passes, the codegens the target
    offloads to (objects, compared by identity; names, compared by value)."""
    from .dialects import DIALECTS
    from .transform.codegens import registered_codegen
    from .transform.registry import registered_class

    out: list[Any] = []
    for name, d in DIALECTS.items():
        out += (name, d)
        for item in d.hooks.items():
            out += item
    for kind in t.kind_info.chain():
        out.append(kind)
        for item in kind.hooks.items():
            out += item
    out += [registered_class(n) for n in _CORE_PASSES]
    out += USER_PASSES
    out.append(len(USER_PASSES))
    offload = t.attrs.get("offload") or ()
    for n in (offload,) if isinstance(offload, str) else offload:
        out += (n, registered_codegen(n))
    return out


def build_pipeline(target: Target, from_phase: str) -> Sequential:
    """The default pipeline as ``build`` runs it: the same object for the same target
    and phase while nothing it is made from changes (see :func:`_inputs`), so the
    passes are made and the pipeline validated once, not per build (about 0.1 ms of
    a build's fixed cost).  Its passes keep no state between runs (their attributes
    are their constructor's parameters) and the target hooks are functions of the
    target (docs/targets.md), which is what makes sharing them safe.  Do not edit
    the result in place; :func:`default_pipeline` gives a pipeline of one's own."""
    inputs = _inputs(target)
    # (ids of objects the entry keeps alive, so no id is reused while it is cached)
    key = (target, from_phase,
           tuple(x if type(x) is str or type(x) is int else id(x) for x in inputs))
    try:
        hit = _BUILT.get(key)
        if hit is not None:
            return hit[1]
        pipeline = default_pipeline(target, from_phase=from_phase)
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[key] = (inputs, pipeline)
    except (TypeError, ValueError):
        # a target attribute that has no hash or no plain equality (an array): the
        # pipeline is made every time
        pipeline = default_pipeline(target, from_phase=from_phase)
    return pipeline


def default_pipeline(
    target: Target | str = "numpy", *, from_phase: str = "ingestion"
) -> Sequential:
    """The pipeline ``plait.build`` runs for ``target``, starting with the first stage
    that accepts a module in ``from_phase`` (so a module already optimized skips
    ingestion)."""
    t = Target.from_any(target)
    if from_phase not in PHASES:
        raise ValueError(f"unknown phase {from_phase!r}; phases are {', '.join(PHASES)}")
    start = PHASES.index(from_phase)
    stages = []
    for stage in STAGES:
        again = from_phase == "build" and stage == "build"
        if PHASES.index(STAGE_PHASE[stage]) < start and not again:
            continue
        passes = _stage_passes(stage, t)
        if again:
            # a module already built (printed, perhaps edited, and parsed back) runs the
            # passes it cannot be built without: c.CompileKernels makes its library
            # again from the kernels it holds, so an edited kernel is never ignored (an
            # unedited module finds its library in the compile cache)
            passes = [p for p in passes
                      if p.info.essential and "build" in p.info.phases]
        if passes:
            stages.append(Sequential(passes, name=stage))
    return Sequential(stages, name="default")
