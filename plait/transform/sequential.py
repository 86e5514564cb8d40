"""Sequential: a pipeline of passes, itself a pass.

Before running anything, a Sequential checks the whole list against the module's
phase and every pass's declarations (phases, transition, requires), with the current
context's skips (``disabled``, ``opt_level``) taken into account; a misordering raises
a :class:`~plait.transform.PhaseError` naming the first pass out of place, the phase it
would see and the pass that must come before it.

Pipelines print (``str(p)``: one line per pass with its phases and transition), edit
by name (:meth:`Sequential.insert_before`, :meth:`~Sequential.insert_after`,
:meth:`~Sequential.remove`, :meth:`~Sequential.replace` return new pipelines), and
have a textual form::

    Normalize,LambdaLift,FoldConstant(max_size=64),Cleanup[DeadCodeElimination,Canonicalize]

A pass is its registered name, optionally with keyword arguments (Python literals) in
parentheses; ``Name[...]`` is a nested Sequential named ``Name`` (``[...]`` an unnamed
one).  ``Sequential.parse(text).to_text() == text`` for text in this canonical form
(no spaces around commas, ``key=value`` separated by ``", "``).
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..ir.module import PHASES, IRModule
from .context import PassContext
from .errors import PhaseError, PipelineError
from .pass_base import Pass, PassInfo
from .phases import describe_route, phase_index
from .registry import registry_generation

DEFAULT_NAME = "sequential"
_NAME_AT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class _Running(threading.local):
    def __init__(self) -> None:
        self.stack: list[Sequential] = []


_RUNNING = _Running()


def running_pipelines() -> list[Sequential]:
    """The Sequentials running on this thread, outermost first."""
    return list(_RUNNING.stack)


@dataclass
class PlanStep:
    """One leaf pass of a flattened pipeline: its position (``"3.1"``), the reason
    it is skipped (None if it runs) and the phase it will see."""

    pass_: Pass
    position: str
    skip: str | None
    phase: str | None = None

    @property
    def info(self) -> PassInfo:
        return self.pass_.info


class Sequential(Pass):
    """Runs ``passes`` in order; see the module docstring."""

    _needs_info = False

    def __init__(
        self,
        passes: Iterable[Pass | str] = (),
        name: str = DEFAULT_NAME,
        opt_level: int = 0,
        doc: str = "",
    ) -> None:
        items: list[Pass] = []
        if isinstance(passes, Pass | str):
            passes = [passes]
        for p in passes:
            if isinstance(p, str):
                items.extend(_splice(parse_pipeline(p)))
            elif isinstance(p, Pass):
                items.append(p)
            else:
                raise TypeError(f"Sequential takes passes (or pass names), got {p!r}")
        self.passes: tuple[Pass, ...] = tuple(items)
        self.info = PassInfo(name, opt_level, PHASES, None, (), doc or f"pipeline {name}",
                             "sequential")
        self._params = {}
        self.codegens = frozenset()
        # what the last successful validation before a run was for (see _run)
        self._validated: tuple[Any, ...] | None = None

    # ------------------------------------------------------------ container
    def __iter__(self) -> Iterator[Pass]:
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __getitem__(self, index: int | str) -> Pass:
        if isinstance(index, str):
            return self._get(self._locate(index))
        return self.passes[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequential):
            return NotImplemented if not isinstance(other, Pass) else False
        return self.info.name == other.info.name and self.passes == other.passes

    def __hash__(self) -> int:
        return hash((Sequential, self.info.name, len(self.passes)))

    def with_params(self, **params: Any) -> Pass:
        raise TypeError("a Sequential has no parameters; edit it with insert_before, "
                        "insert_after, remove, replace or append")

    def names(self) -> list[str]:
        """The names of the leaf passes, in order (nested pipelines flattened)."""
        return [step.info.name for step in self.flatten(None)]

    # ------------------------------------------------------------ running
    def _run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        # The plan depends on the phase, the context's skips and (for requirements met
        # in earlier phases) the pass registry; the passes themselves never change (a
        # Sequential is edited into a new one): a pipeline run again under the same
        # (``build`` keeps the default pipeline) is not validated again.
        key = (mod.phase, ctx.opt_level, ctx.required, ctx.disabled, registry_generation())
        if key != self._validated:
            self.validate(mod.phase, ctx)
            self._validated = key
        _RUNNING.stack.append(self)
        try:
            for p in self.passes:
                mod = p._invoke(mod, ctx, nested=True)
        finally:
            _RUNNING.stack.pop()
        return mod

    def flatten(self, ctx: PassContext | None) -> list[PlanStep]:
        """The leaf passes with their positions, and (given a context) whether each is
        skipped by it."""
        out: list[PlanStep] = []
        stack: list[tuple[Pass, str, str | None]] = [
            (p, str(i + 1), None) for i, p in reversed(list(enumerate(self.passes)))
        ]
        while stack:
            p, pos, inherited = stack.pop()
            skip = inherited
            if skip is None and ctx is not None:
                skip = ctx.skip_reason(p.info)
            if isinstance(p, Sequential):
                child_skip = None if skip is None else (
                    skip if inherited is not None else
                    f"its pipeline {p.info.name!r} is skipped ({skip})")
                for i in range(len(p.passes) - 1, -1, -1):
                    stack.append((p.passes[i], f"{pos}.{i + 1}", child_skip))
            else:
                out.append(PlanStep(p, pos, skip))
        return out

    def validate(self, phase: str = "ingestion", ctx: PassContext | None = None) -> list[PlanStep]:
        """Check the pipeline for a module starting in ``phase`` under ``ctx`` (default:
        the current context) without running it; return the plan (every leaf pass,
        whether it is skipped, the phase it sees).  Raises :class:`PhaseError`."""
        ctx = PassContext.current() if ctx is None else ctx
        phase_index(phase)
        steps = self.flatten(ctx)
        cur = phase
        ran: dict[str, PlanStep] = {}
        moves: list[tuple[PlanStep, str, str]] = []
        for i, st in enumerate(steps):
            if st.skip is not None:
                continue
            info = st.info
            st.phase = cur
            if cur not in info.phases:
                raise PhaseError(self._misplaced(st, cur, steps, i, moves, phase))
            for req in info.requires:
                if req in ran or self._satisfied_earlier(req, cur):
                    continue
                raise PhaseError(self._missing(st, req, steps, i))
            ran[info.name] = st
            if info.transition is not None:
                moves.append((st, cur, info.transition))
                cur = info.transition
        return steps

    @staticmethod
    def _satisfied_earlier(req: str, cur: str) -> bool:
        """A requirement that can only run in phases before ``cur`` has run already
        (the module could not have reached ``cur`` otherwise)."""
        from .registry import is_registered, pass_info

        if not is_registered(req):
            return False
        rinfo = pass_info(req)
        return phase_index(rinfo.phases[-1]) < phase_index(cur)

    def _where(self, st: PlanStep) -> str:
        return f"pass {st.info.name!r} (#{st.position} of pipeline {self.info.name!r})"

    def _misplaced(
        self,
        st: PlanStep,
        cur: str,
        steps: list[PlanStep],
        i: int,
        moves: list[tuple[PlanStep, str, str]],
        start: str,
    ) -> str:
        info = st.info
        head = (f"{self._where(st)} would run in phase {cur} but accepts only "
                f"{', '.join(info.phases)}")
        if phase_index(cur) < phase_index(info.phases[-1]):
            text = f"{head}; {describe_route(cur, info.phases)} before it"
            from .phases import transition_route

            route, _ = transition_route(cur, info.phases)
            notes = []
            for _, _, names in route:
                for n in names:
                    later = [s for s in steps[i + 1:] if s.info.name == n]
                    earlier = [s for s in steps[:i] if s.info.name == n and s.skip]
                    if later:
                        notes.append(f"{n!r} is in the pipeline but comes later "
                                     f"(#{later[0].position}); move it before {info.name!r}")
                    elif earlier:
                        notes.append(f"{n!r} is in the pipeline (#{earlier[0].position}) but "
                                     f"skipped: {earlier[0].skip}")
            if notes:
                text += " (" + "; ".join(notes) + ")"
            return text
        last = phase_index(info.phases[-1])
        for mst, a, b in moves:
            if phase_index(a) <= last < phase_index(b):
                return (f"{head}; it must come before pass {mst.info.name!r} "
                        f"(#{mst.position}), which moves the module from {a} to {b}")
        return (f"{head}; the module is already in phase {start} when the pipeline starts, "
                f"so {info.name!r} belongs in an earlier pipeline")

    def _missing(self, st: PlanStep, req: str, steps: list[PlanStep], i: int) -> str:
        from .registry import is_registered

        head = f"{self._where(st)} requires {req!r} to run before it"
        if not is_registered(req):
            return f"{head}, but no pass named {req!r} is registered"
        later = [s for s in steps[i + 1:] if s.info.name == req]
        skipped = [s for s in steps[:i] if s.info.name == req and s.skip]
        if later:
            return f"{head}; {req!r} comes later (#{later[0].position}): move it before"
        if skipped:
            return f"{head}; {req!r} (#{skipped[0].position}) is skipped: {skipped[0].skip}"
        return f"{head}; insert it: pipeline.insert_before({st.info.name!r}, {req!r})"

    # ------------------------------------------------------------ text
    def to_text(self) -> str:
        """The textual form (see the module docstring)."""
        return self._text(top=True)

    def _text(self, top: bool) -> str:
        inner = ",".join(
            p._text(top=False) if isinstance(p, Sequential) else p.to_text()
            for p in self.passes
        )
        if self.info.name == DEFAULT_NAME:
            return inner if top else f"[{inner}]"
        return f"{self.info.name}[{inner}]"

    @staticmethod
    def parse(text: str) -> Sequential:
        """The pipeline written as ``text``; see the module docstring."""
        return parse_pipeline(text)

    def __repr__(self) -> str:
        return f"Sequential.parse({self.to_text()!r})"

    def __str__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """One line per pass: position, name, phases, transition, requirements."""
        rows: list[tuple[str, str, str]] = []
        stack: list[tuple[Pass, str, int]] = [
            (p, str(i + 1), 0) for i, p in reversed(list(enumerate(self.passes)))
        ]
        while stack:
            p, pos, depth = stack.pop()
            indent = "  " * depth
            if isinstance(p, Sequential):
                rows.append((indent + pos, p.info.name, f"({len(p.passes)} passes)"))
                for i in range(len(p.passes) - 1, -1, -1):
                    stack.append((p.passes[i], f"{pos}.{i + 1}", depth + 1))
            else:
                rows.append((indent + pos, p.to_text(), p.info.describe()))
        head = f"pipeline {self.info.name!r}: {len(self.names())} passes"
        if not rows:
            return head
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        return "\n".join([head] + [f"  {a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows])

    # ------------------------------------------------------------ editing
    def _locate(self, target: str | int | Pass) -> tuple[int, ...]:
        if isinstance(target, int):
            if not -len(self.passes) <= target < len(self.passes):
                raise PipelineError(f"pipeline {self.info.name!r} has {len(self.passes)} "
                                    f"passes; index {target} is out of range")
            return (target % len(self.passes),)
        found: list[tuple[tuple[int, ...], list[str]]] = []
        stack: list[tuple[Sequential, tuple[int, ...], list[str]]] = [(self, (), [])]
        while stack:
            seq, path, names = stack.pop()
            for i, p in enumerate(seq.passes):
                pth, nm = path + (i,), names + [p.info.name]
                found.append((pth, nm))
                if isinstance(p, Sequential):
                    stack.append((p, pth, nm))
        found.sort()
        if isinstance(target, Pass):
            hits = [f for f in found if self._get(f[0]) == target]
            label = target.to_text()
        else:
            comps = target.split("/")
            hits = [f for f in found if f[1][-len(comps):] == comps]
            label = target
        if not hits:
            import difflib

            close = difflib.get_close_matches(label, sorted({n for f in found for n in f[1]}))
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise PipelineError(f"pipeline {self.info.name!r} has no pass {label!r}{hint}")
        if len(hits) > 1:
            where = ", ".join(f"#{'.'.join(str(i + 1) for i in h[0])} ({'/'.join(h[1])})"
                              for h in hits)
            raise PipelineError(
                f"pass {label!r} appears {len(hits)} times in pipeline {self.info.name!r} "
                f"({where}); name it by path ('Outer/Inner') or edit by index"
            )
        return hits[0][0]

    def _get(self, path: tuple[int, ...]) -> Pass:
        p: Pass = self
        for i in path:
            p = p.passes[i]  # type: ignore[attr-defined]
        return p

    def _edit(
        self, path: tuple[int, ...], new_items: list[Pass], drop: int, offset: int
    ) -> Sequential:
        """Replace ``drop`` passes at ``path[-1] + offset`` in the nested pipeline at
        ``path[:-1]`` with ``new_items``; rebuild the chain of parents."""
        chain: list[Sequential] = [self]
        for i in path[:-1]:
            chain.append(chain[-1].passes[i])  # type: ignore[arg-type]
        at = path[-1] + offset
        seq = chain[-1]
        items = list(seq.passes)
        items[at:at + drop] = new_items
        new = seq._with_passes(items)
        for depth in range(len(path) - 2, -1, -1):
            parent = chain[depth]
            items = list(parent.passes)
            items[path[depth]] = new
            new = parent._with_passes(items)
        return new

    def _with_passes(self, passes: list[Pass]) -> Sequential:
        return Sequential(passes, self.info.name, self.info.opt_level, self.info.doc)

    def insert_before(self, target: str | int | Pass, *passes: Pass | str) -> Sequential:
        """A new pipeline with ``passes`` (instances, names or pipeline text) inserted
        before ``target`` (a name, a path ``"Outer/Inner"``, an index or a pass)."""
        return self._edit(self._locate(target), _as_passes(passes), 0, 0)

    def insert_after(self, target: str | int | Pass, *passes: Pass | str) -> Sequential:
        """A new pipeline with ``passes`` inserted after ``target``."""
        return self._edit(self._locate(target), _as_passes(passes), 0, 1)

    def remove(self, target: str | int | Pass) -> Sequential:
        """A new pipeline without ``target``."""
        return self._edit(self._locate(target), [], 1, 0)

    def replace(self, target: str | int | Pass, *passes: Pass | str) -> Sequential:
        """A new pipeline with ``target`` replaced by ``passes``."""
        return self._edit(self._locate(target), _as_passes(passes), 1, 0)

    def append(self, *passes: Pass | str) -> Sequential:
        """A new pipeline with ``passes`` added at the end."""
        return self._with_passes(list(self.passes) + _as_passes(passes))


def _splice(seq: Sequential) -> list[Pass]:
    return list(seq.passes) if seq.info.name == DEFAULT_NAME else [seq]


def _as_passes(passes: Iterable[Pass | str]) -> list[Pass]:
    out: list[Pass] = []
    for p in passes:
        if isinstance(p, str):
            out.extend(_splice(parse_pipeline(p)))
        elif isinstance(p, Pass):
            out.append(p)
        else:
            raise TypeError(f"expected a pass or a pass name, got {p!r}")
    return out


# ------------------------------------------------------------------ the textual form


def format_params(name: str, params: dict[str, Any]) -> str:
    """``key=value, ...`` with Python literals; an error if a value has no literal form."""
    parts = []
    for k, v in params.items():
        text = repr(tuple(sorted(v)) if isinstance(v, frozenset | set) else v)
        try:
            ok = ast.literal_eval(text) == (tuple(sorted(v)) if isinstance(v, frozenset | set)
                                            else v)
        except (ValueError, SyntaxError, TypeError):
            ok = False
        if not ok:
            raise PipelineError(f"parameter {k}={v!r} of pass {name!r} is not a Python "
                                "literal, so the pass has no textual form")
        parts.append(f"{k}={text}")
    return ", ".join(parts)


def parse_pipeline(text: str) -> Sequential:
    """Parse the textual form of a pipeline (see the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"a pipeline text must be a string, got {type(text).__name__}")
    parser = _Parser(text)
    items = parser.items(None)
    if len(items) == 1 and isinstance(items[0], Sequential) and text.strip().endswith("]"):
        return items[0]
    return Sequential(items)


def split_pass_text(text: str) -> tuple[str, dict[str, Any]]:
    """``("Name", {params})`` from the text of one pass, ``Name(key=value, ...)``,
    without looking the name up."""
    parser = _Parser(text)
    parser.ws()
    m = _NAME_AT.match(text, parser.i)
    if not m:
        raise parser.error("expected a pass name")
    parser.i = m.end()
    params = parser.params(m.group(0)) if parser.peek() == "(" else {}
    if parser.peek():
        raise parser.error("unexpected text after the pass")
    return m.group(0), params


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, message: str) -> PipelineError:
        return PipelineError(f"pipeline text, column {self.i + 1}: {message}\n  {self.s}\n"
                             f"  {' ' * self.i}^")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        self.ws()
        return self.s[self.i] if self.i < len(self.s) else ""

    def items(self, closing: str | None) -> list[Pass]:
        out: list[Pass] = []
        c = self.peek()
        if c == (closing or ""):
            if closing:
                self.i += 1
            return out
        while True:
            out.append(self.item())
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if closing is None and c == "":
                return out
            if closing is not None and c == closing:
                self.i += 1
                return out
            if c == "":
                raise self.error(f"missing {closing!r}")
            raise self.error(f"expected ',' or {closing or 'the end'!r}, got {c!r}")

    def item(self) -> Pass:
        c = self.peek()
        if c == "[":
            self.i += 1
            return Sequential(self.items("]"))
        m = _NAME_AT.match(self.s, self.i)
        if not m:
            raise self.error("expected a pass name")
        name = m.group(0)
        start = self.i
        self.i += len(name)
        params: dict[str, Any] = {}
        if self.peek() == "(":
            params = self.params(name)
        if self.peek() == "[":
            if params:
                raise self.error(f"a nested pipeline ({name}[...]) takes no parameters")
            self.i += 1
            return Sequential(self.items("]"), name=name)
        from .registry import make_pass

        try:
            return make_pass(name, **params)
        except PipelineError as e:
            self.i = start
            raise self.error(str(e)) from None

    def params(self, name: str) -> dict[str, Any]:
        start = self.i
        j = self.s.find(")", start)
        while j != -1:
            try:
                call = ast.parse(f"f{self.s[start:j + 1]}", mode="eval").body
                break
            except SyntaxError:
                j = self.s.find(")", j + 1)
        else:
            raise self.error(f"unbalanced parameters of pass {name!r}")
        assert isinstance(call, ast.Call)
        if call.args:
            raise self.error(f"parameters of pass {name!r} must be written key=value")
        out: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is None:
                raise self.error("**parameters are not allowed")
            try:
                out[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                raise self.error(f"parameter {kw.arg!r} of pass {name!r} must be a Python "
                                 "literal") from None
        self.i = j + 1
        return out


__all__ = [
    "DEFAULT_NAME",
    "PlanStep",
    "Sequential",
    "format_params",
    "parse_pipeline",
    "running_pipelines",
    "split_pass_text",
]
