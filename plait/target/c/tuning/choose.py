"""The points a build's calls take: a tuning database's, else the heuristics'.

A dispatch pass of a family with a search space (:mod:`.space`) makes one
:class:`Chooser` per run: it opens the database the target names (attribute
``tuning_db``) or ``PLAIT_TUNING_DB`` names, read-only, and takes the fastest
successful record of each call on this machine (:func:`current_machine`: the CPU
model, the ISA copy the kernels run, the thread count; :func:`~.db.pick`: the lowest
median, and where the default point was measured, a margin over it).  A record for another CPU,
ISA or thread count is not looked at; a record whose point the call's space does not
contain (another plait, another target setting) is skipped with a
:class:`~.db.TuningDBWarning`; a file that is not a tuning database is skipped with
one too, and the heuristics are used.  Every call that has a space is noted
(:meth:`Chooser.note`) in the module attribute ``runtime_attrs`` under
:data:`TUNING_ATTR` (so in the executable's attributes): its key, its space, the point
it took, where the point came from, the measured time and the default point's.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from plait.ir.module import IRModule

from .db import ENV_VAR, Machine, Record, TuningDB, TuningDBError, TuningDBWarning, pick
from .space import Point, SearchSpace

TUNING_ATTR = "tuning"
"""The key of the tuned calls in ``runtime_attrs`` and the executable's attributes:
``{wrapper symbol: {"call", "op", "space", "point", "origin", "seconds",
"default_seconds"}}`` (``origin`` is ``"database"`` or ``"default"``)."""


def thread_count() -> int:
    """The threads the native libraries run with here (``PLAIT_NUM_THREADS``, else
    ``OMP_NUM_THREADS``, else the CPUs this process may use), as ``plait_threads.h``
    counts them."""
    for var in ("PLAIT_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=8)
def _machine(isa_cap: str | None, threads: int) -> Machine:
    from ..cpu import cpu_features

    report = cpu_features()
    chosen = report["families"].get("gemm", {}).get("chosen", "baseline")
    return Machine(str(report["cpu"]), str(chosen), threads)


def current_machine() -> Machine:
    """This machine as the tuning database keys it (the CPU probe is compiled once per
    machine; the result is cached per ``PLAIT_ISA`` and thread count)."""
    return _machine(os.environ.get("PLAIT_ISA"), thread_count())


def database_path(attr: str | None) -> str | None:
    """The database a build reads: the target's ``tuning_db``, else
    ``PLAIT_TUNING_DB``, else none."""
    if attr:
        return os.fspath(attr)
    return os.environ.get(ENV_VAR) or None


class Chooser:
    """The points of one dispatch run's calls (see the module docstring).  Without a
    database every call takes its space's default point and nothing is noted."""

    def __init__(self, db: str | None) -> None:
        self.path = database_path(db)
        self.records: dict[str, list[Record]] = {}
        self.noted: dict[str, dict[str, Any]] = {}
        self.threads = thread_count()
        if self.path is None:
            return
        try:
            machine = current_machine()
            self.threads = machine.threads
            for r in TuningDB(self.path, readonly=True).records(machine=machine):
                self.records.setdefault(r.call, []).append(r)
        except TuningDBError as e:
            warnings.warn(f"{e}; the heuristics are used", TuningDBWarning, stacklevel=2)

    @property
    def active(self) -> bool:
        """Whether a database was asked for (then the calls are noted)."""
        return self.path is not None

    def choose(self, key: str, space: SearchSpace | None) -> tuple[Point | None, dict[str, Any]]:
        """The point of call ``key`` in ``space`` (None: the call has no space) and
        what to note about it."""
        if space is None:
            return None, {}
        default = space.default_point()
        rec = pick(self.records.get(key, []), default)
        info: dict[str, Any] = {"call": key, "space": space.as_json(), "origin": "default"}
        point = space.complete(rec.point) if rec is not None else None
        if rec is not None and space.contains(point):
            info.update(origin="database", seconds=rec.seconds,
                        default_seconds=rec.default_seconds)
            return dict(point), {**info, "point": dict(point)}  # type: ignore[arg-type]
        if rec is not None:
            warnings.warn(f"tuning database {self.path}: the record of {key} has the point "
                          f"{rec.point}, which its search space {space.as_json()['choices']} "
                          "does not contain (another plait or target setting); the "
                          "heuristic is used", TuningDBWarning, stacklevel=2)
        return default, {**info, "point": default}

    def note(self, symbol: str, op: str, info: dict[str, Any]) -> None:
        """Note that wrapper ``symbol`` computes a call with ``info`` (from
        :meth:`choose`)."""
        if self.active and info:
            self.noted[symbol] = {"op": op, **info}

    def annotate(self, mod: IRModule) -> IRModule:
        """``mod`` with the noted calls added to ``runtime_attrs[TUNING_ATTR]``."""
        if not self.noted:
            return mod
        runtime = dict(mod.attrs.get("runtime_attrs") or {})
        calls = dict(runtime.get(TUNING_ATTR) or {})
        calls.update(self.noted)
        runtime[TUNING_ATTR] = calls
        return mod.with_attrs(runtime_attrs=runtime)


__all__ = ["Chooser", "TUNING_ATTR", "current_machine", "database_path", "thread_count"]
