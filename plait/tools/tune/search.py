"""The tuner's search: candidate points of every distinct call, measured inside the
whole model, proposed by a cost model, until the budget is spent.

Every trial builds the whole model and times each call inside it (:mod:`.trial`), so
one trial measures a candidate of *every* call at once: the first trial runs every
call's default point (the heuristic's), each later one gives each call the next
candidate the cost model ranks best (:mod:`.cost_model`; a call whose candidates are
all measured runs its best point so far, measured again).  A candidate that becomes a
call's fastest is measured again (:data:`CONFIRM` times in all) before that call's next
candidate, and every :data:`DEFAULTS_EVERY`-th trial runs the defaults again, so a
lucky measurement on a loaded machine does not stand alone; the budget's last quarter
(:data:`CONFIRM_SHARE`) measures the defaults and the best points in turn even where
candidates are left, and the database takes a point over the default only with enough
samples and a margin (:func:`~plait.target.c.tuning.db.pick`).  Once every candidate is
measured, the defaults and the best points are measured again in turn until the
budget is spent: the database's choice is the point of the lowest median time
(:meth:`~plait.target.c.tuning.TuningDB.best`), so one lucky run does not win.  An
executor runs the trials — in this process (:class:`LocalExecutor`) or as Ray tasks
over a cluster (:mod:`.ray_runner`), grouped by machine (CPU model, ISA copy,
threads): each group is tuned on its own nodes and its records carry its machine.
Each trial's measurements go into the database as it finishes (a failed trial as
``status = 'failed'``), so an interrupted run keeps what it measured; ``build()``
takes the fastest point of each call (the default point's too: where nothing beats
the heuristic, it stays).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...target.c.tuning import Machine, Record, SearchSpace, TuningDB, point_text
from ...target.c.tuning.db import pick
from .cost_model import CostModel
from .trial import ModelRef, TrialResult, discover, run_trial


class Executor(Protocol):
    """Runs trials: on which machines (``groups``), how many at once (``width``)."""

    def groups(self, model: ModelRef) -> list[tuple[Machine, Any]]: ...

    def discover(self, group: Any, model: ModelRef) -> dict[str, dict[str, Any]]: ...

    def width(self, group: Any) -> int: ...

    def run(self, group: Any, model: ModelRef,
            trials: list[dict[str, dict[str, Any]]]) -> list[TrialResult]: ...


@dataclass
class LocalExecutor:
    """Trials one after another in this process."""

    runs: int = 5
    threads: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def groups(self, model: ModelRef) -> list[tuple[Machine, Any]]:
        import os

        if self.threads:
            os.environ["PLAIT_NUM_THREADS"] = str(self.threads)
        calls, machine = discover(model, self.attrs)
        return [(machine, calls)]

    def discover(self, group: Any, model: ModelRef) -> dict[str, dict[str, Any]]:
        return group

    def width(self, group: Any) -> int:
        return 1

    def run(self, group: Any, model: ModelRef,
            trials: list[dict[str, dict[str, Any]]]) -> list[TrialResult]:
        return [run_trial(model, t, self.runs, self.threads, self.attrs) for t in trials]


@dataclass
class CallSummary:
    """What the tuner found for one call."""

    call: str
    op: str
    default: dict[str, Any]
    default_seconds: float | None = None
    best: dict[str, Any] | None = None
    best_seconds: float | None = None
    measured: int = 0
    candidates: int = 0


@dataclass
class TuneReport:
    """A tuning run: per machine and call, the summary; the trials run and failed, the
    processes (pids) and hosts they ran in, the seconds spent."""

    model: str
    calls: dict[tuple[Machine, str], CallSummary] = field(default_factory=dict)
    trials: int = 0
    failed: int = 0
    pids: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)   # whole step: bests / defaults

    def lines(self) -> list[str]:
        out = [f"{self.model}: {self.trials} trials ({self.failed} failed) in "
               f"{self.seconds:.1f} s, in {len(self.pids)} processes on "
               f"{len(self.hosts)} hosts", *self.notes]
        if self.whole:
            out.append(f"  the whole model with the best points: "
                       f"{statistics.median(self.whole):.3f} of the defaults' time (median "
                       f"of {len(self.whole)} trials, each paired with the defaults)")
        for (machine, _), s in sorted(self.calls.items(), key=lambda kv: kv[1].op):
            if s.best is None or s.default_seconds is None or s.best_seconds is None:
                out.append(f"  {s.op}: not measured")
                continue
            gain = s.default_seconds / s.best_seconds if s.best_seconds else 1.0
            out.append(f"  {s.op} on {machine.cpu} ({machine.isa}, {machine.threads} "
                       f"threads): {s.measured}/{s.candidates} points measured; best "
                       f"{s.best} {s.best_seconds * 1e6:.1f} us, default {s.default} "
                       f"{s.default_seconds * 1e6:.1f} us ({gain:.2f}x)")
        return out


def _space(data: dict[str, Any]) -> SearchSpace:
    return SearchSpace.from_json(data)


def parse_budget(text: str | float) -> float:
    """Seconds of a budget: ``90``, ``90s``, ``10m``, ``1.5h``."""
    if isinstance(text, (int, float)):
        return float(text)
    t = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        value = float(t[:-1] if scale else t)
    except ValueError:
        raise ValueError(f"budget {text!r}: write seconds or a number with s, m or h "
                         "(90s, 10m, 1.5h)") from None
    if value <= 0:
        raise ValueError(f"budget {text!r} must be positive")
    return value * (scale or 1)


CONFIRM = 3
"""The measurements a point other than the default needs before the search goes on to
the call's next candidate once it is the call's fastest: a lucky trial (one quiet
moment of a loaded machine) is measured again rather than taken."""

CONFIRM_SHARE = 0.25
"""The share of the budget kept for the last rounds, which measure the defaults and the
best points in turn (as once every candidate is measured): the database takes a point
over the default only with enough samples of both (:func:`~plait.target.c.tuning.db.pick`)."""

DEFAULTS_EVERY = 4
"""Every this many trials, one runs every call's default point again: the default's
time follows the machine's load as the candidates' do."""


class _GroupSearch:
    """The search of one machine group (see the module docstring)."""

    def __init__(self, calls: dict[str, dict[str, Any]],
                 choices: Sequence[str] | None = None) -> None:
        self.spaces = {k: _space(v["space"]) for k, v in calls.items()}
        if choices is not None:
            self.spaces = {k: s.restricted(choices) for k, s in self.spaces.items()}
        # the cost model's features read each call's space as data: the searched one
        self.calls = {k: {**v, "space": self.spaces[k].as_json()} for k, v in calls.items()}
        self.tunable = [k for k, s in self.spaces.items() if s.size() > 1]
        self.todo = {k: self.spaces[k].points()[1:] for k in self.tunable}
        self.times: dict[str, dict[str, list[float]]] = {k: {} for k in calls}
        # each sample's time over its default's in the same runs (the trial's pairing)
        self.ratios: dict[str, dict[str, list[float]]] = {k: {} for k in calls}
        self.model = CostModel()
        self.rounds = 0
        self.issued = 0
        self.last_bests: list[dict[str, dict[str, Any]]] = []

    def default_seconds(self, key: str) -> float | None:
        t = self.times[key].get(point_text(self.spaces[key].default_point()))
        return statistics.median(t) if t else None

    def best(self, key: str) -> tuple[dict[str, Any], float] | None:
        """The point of the lowest median ratio to its paired default (the one to
        measure again), and its median seconds."""
        import json

        ratios = {p: statistics.median(t) for p, t in self.ratios[key].items() if t}
        if not ratios:
            return None
        p = min(ratios, key=lambda q: ratios[q])
        return json.loads(p), statistics.median(self.times[key][p])

    def paired_default(self, key: str, r: TrialResult) -> float | None:
        """The default's seconds paired with ``r``'s time of call ``key`` (the same
        runs), else the default's median so far."""
        d = r.default_seconds.get(key)
        return d if d else self.default_seconds(key)

    def chosen(self, key: str, op: str, machine: Machine) -> Record | None:
        """The point the database will give ``key`` from this search's samples
        (:func:`~plait.target.c.tuning.db.pick`)."""
        recs = [Record(key, op, machine, json.loads(p), t, t / q if q else None)
                for p in self.times[key]
                for t, q in zip(self.times[key][p], self.ratios[key].get(p, []))]
        return pick(recs, self.spaces[key].default_point())

    def defaults(self) -> dict[str, dict[str, Any]]:
        return {k: s.default_point() for k, s in self.spaces.items()}

    def bests(self) -> dict[str, dict[str, Any]]:
        out = {}
        for k, s in self.spaces.items():
            b = self.best(k)
            out[k] = b[0] if b else s.default_point()
        return out

    def next_trials(self, width: int, first: bool,
                    confirm: bool = False) -> list[dict[str, dict[str, Any]]]:
        """The next ``width`` trials; once every candidate is measured (or with
        ``confirm``: the budget's last :data:`CONFIRM_SHARE`), the defaults and the best
        points again, in turn (more runs of each, against noise)."""
        if (self.done() or confirm) and not first:
            self.rounds += 1
            out = [self.bests() if (self.rounds + i) % 2 else self.defaults()
                   for i in range(max(2, width))]
            self.last_bests = [t for t in out if t != self.defaults()]
            return out
        trials = []
        if first:
            trials.append(self.defaults())
            self.issued += 1
        while len(trials) < width and any(self.todo.values()):
            self.issued += 1
            if self.issued % DEFAULTS_EVERY == 0:
                trials.append(self.defaults())
                continue
            pts: dict[str, dict[str, Any]] = {}
            for k, s in self.spaces.items():
                b = self.best(k)
                if (b is not None and b[0] != s.default_point()
                        and len(self.times[k][point_text(b[0])]) < CONFIRM):
                    pts[k] = b[0]     # the fastest so far, measured again (CONFIRM)
                elif self.todo.get(k):
                    ranked = self.model.rank(k, self.calls[k]["space"], self.todo[k])
                    p = ranked[0]
                    self.todo[k].remove(p)
                    pts[k] = p
                else:
                    pts[k] = b[0] if b else s.default_point()
            trials.append(pts)
        return trials

    def take(self, r: TrialResult) -> None:
        for k, p in r.points.items():
            if k in r.seconds and k in self.times:
                self.times[k].setdefault(point_text(p), []).append(r.seconds[k])
        for k, p in r.points.items():
            d = self.paired_default(k, r)
            if k in r.seconds and k in self.times and d:
                self.ratios[k].setdefault(point_text(p), []).append(r.seconds[k] / d)
                self.model.add(k, self.calls[k]["space"], p, r.seconds[k], d)

    def done(self) -> bool:
        return not any(self.todo.values())


def tune(model: ModelRef, db: str, budget: float, executor: Executor | None = None,
         log: Callable[[str], None] = lambda s: None,
         confirm_rounds: int | None = None, choices: Sequence[str] | None = None
         ) -> TuneReport:
    """Tune ``model`` for ``budget`` seconds (see the module docstring), recording into
    the database ``db``; once every candidate is measured, rounds measure the default
    and the best points again until the budget is spent (at most ``confirm_rounds``
    rounds when given).  ``choices``: vary only the choices of these names (the others
    at their defaults; :meth:`~plait.target.c.tuning.SearchSpace.restricted`).  Returns
    what was found."""
    executor = executor if executor is not None else LocalExecutor()
    store = TuningDB(db)   # a foreign or damaged file fails here, before any trial
    t0 = time.perf_counter()
    report = TuneReport(model.name)
    groups = executor.groups(model)
    for gi, (machine, group) in enumerate(groups):
        deadline = t0 + budget * (gi + 1) / len(groups)
        explore_until = deadline - CONFIRM_SHARE * budget / len(groups)
        calls = executor.discover(group, model)
        search = _GroupSearch(calls, choices)
        if not search.model.available:
            report.notes.append("  " + search.model.why)
        log(f"{model.name} on {machine.cpu} ({machine.isa}, {machine.threads} threads): "
            f"{len(calls)} calls with a search space, {len(search.tunable)} with a choice")
        first, spent = True, []
        while (first or not search.done() or confirm_rounds is None
               or search.rounds < confirm_rounds):
            # (the last round's time: the first one's compiles what the others reuse)
            if not first and spent and time.perf_counter() + spent[-1] > deadline:
                break
            search.last_bests = []
            trials = search.next_trials(executor.width(group), first,
                                        time.perf_counter() > explore_until)
            if not trials:
                break
            ts = time.perf_counter()
            results = executor.run(group, model, trials)
            spent.append(time.perf_counter() - ts)
            records = []
            for r in results:
                report.trials += 1
                report.pids.add(r.pid)
                report.hosts.add(r.host)
                if r.error:
                    report.failed += 1
                    log(f"  trial failed in pid {r.pid} on {r.host}: {r.error}")
                    records += [Record(k, calls[k]["op"], machine, p, None, None,
                                       status="failed", error=r.error[:500])
                                for k, p in r.points.items() if k in calls]
                    continue
                search.take(r)
                if r.default_total and r.points in search.last_bests:
                    report.whole.append(r.total / r.default_total)
                records += [Record(k, calls[k]["op"], machine, p, r.seconds[k],
                                   search.paired_default(k, r))
                            for k, p in r.points.items() if k in r.seconds and k in calls]
            store.add(records)
            search.model.fit()
            if first and all(r.error for r in results):
                report.notes.append("  the trial of the default points failed: nothing to "
                                    "compare with")
                break
            first = False
            log(f"  {report.trials} trials, {time.perf_counter() - t0:.1f} s")
        for k, info in calls.items():
            b = search.chosen(k, info["op"], machine)
            report.calls[(machine, k)] = CallSummary(
                k, info["op"], search.spaces[k].default_point(),
                b.default_seconds if b and b.default_seconds else search.default_seconds(k),
                b.point if b else None, b.seconds if b else None,
                len(search.times[k]), search.spaces[k].size())
    report.seconds = time.perf_counter() - t0
    return report


__all__ = ["CallSummary", "Executor", "LocalExecutor", "TuneReport", "parse_budget", "tune"]
