"""Phases: their order, the registered transitions between them, and the messages
that tell a user which pass must come first.

The phases (``ingestion``, ``optimization``, ``lowering``, ``build``) are linear.  A
transition pass (``PassInfo.transition``) moves a module forward; the route from one
phase to another is found among the registered transition passes, each preceded by
the passes it requires (``Normalize, LambdaLift`` for ingestion -> optimization).
"""

from __future__ import annotations

from ..ir.module import PHASES
from .errors import PhaseError
from .pass_base import PassInfo


def phase_index(phase: str) -> int:
    """Position of ``phase`` in :data:`PHASES`."""
    try:
        return PHASES.index(phase)
    except ValueError:
        raise PhaseError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}") from None


def transition_passes(source: str) -> list[PassInfo]:
    """Registered passes that accept ``source`` and move the module to a later phase."""
    from .registry import list_passes

    i = phase_index(source)
    return [
        info for info in list_passes()
        if info.transition is not None and source in info.phases
        and phase_index(info.transition) > i
    ]


def requirement_chain(info: PassInfo, phase: str) -> list[str]:
    """The passes ``info`` requires (transitively) that run in ``phase``, in an order
    that satisfies them, followed by ``info`` itself."""
    from .registry import get_pass_class, is_registered

    order: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[str, bool]] = [(info.name, False)]
    infos = {info.name: info}
    while stack:
        name, expanded = stack.pop()
        if expanded:
            if name not in order:
                order.append(name)
            continue
        if name in seen:
            continue
        seen.add(name)
        stack.append((name, True))
        cur = infos.get(name)
        if cur is None:
            if not is_registered(name):
                continue
            cur = infos[name] = get_pass_class(name).info
        for req in reversed(cur.requires):
            rinfo = get_pass_class(req).info if is_registered(req) else None
            if rinfo is None or phase in rinfo.phases:
                stack.append((req, False))
    return order


Route = list[tuple[str, str, list[str]]]


def transition_route(source: str, targets: tuple[str, ...]) -> tuple[Route, str | None]:
    """How to get from ``source`` to the nearest later phase in ``targets``:
    ``([(from, to, [pass names]), ...], stuck)`` where ``stuck`` is the phase no
    registered transition leaves (None when the route is complete)."""
    si = phase_index(source)
    later = [phase_index(t) for t in targets if phase_index(t) > si]
    if not later:
        return [], None
    goal = min(later)
    steps: list[tuple[str, str, list[str]]] = []
    cur = si
    while cur < goal:
        cands = [i for i in transition_passes(PHASES[cur]) if phase_index(i.transition) <= goal]
        if not cands:
            return steps, PHASES[cur]
        best = max(cands, key=lambda i: phase_index(i.transition))
        steps.append((PHASES[cur], best.transition, requirement_chain(best, PHASES[cur])))
        cur = phase_index(best.transition)
    return steps, None


def describe_route(source: str, targets: tuple[str, ...]) -> str:
    """``run 'Normalize, LambdaLift' (the ingestion->optimization transition)``."""
    steps, stuck = transition_route(source, targets)
    parts = [f"'{', '.join(names)}' (the {a}->{b} transition)" for a, b, names in steps]
    text = "run " + ", then ".join(parts) if parts else ""
    if stuck is not None:
        nxt = PHASES[phase_index(stuck) + 1]
        missing = (f"no registered pass makes the {stuck}->{nxt} transition (register one "
                   f"with transition={nxt!r})")
        text = f"{text}; then {missing}" if text else missing
    return text


def phase_error(info: PassInfo, phase: str, *, direct: bool) -> PhaseError:
    """The error for running pass ``info`` on a module in ``phase`` (not accepted)."""
    accepted = ", ".join(info.phases)
    verb = "was called on a module in phase" if direct else "would run in phase"
    head = f"pass {info.name!r} {verb} {phase} but accepts only {accepted}"
    if phase_index(phase) < phase_index(info.phases[-1]):
        return PhaseError(f"{head}; {describe_route(phase, info.phases)} before it")
    return PhaseError(
        f"{head}; the module has already moved past that phase, so {info.name!r} must run "
        "earlier, before the transition out of "
        f"{info.phases[-1]}"
    )


__all__ = [
    "PHASES",
    "describe_route",
    "phase_error",
    "phase_index",
    "requirement_chain",
    "transition_passes",
    "transition_route",
]
