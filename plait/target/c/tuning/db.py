"""The tuning database: measured points of calls, per machine, in one SQLite file.

A record is keyed by the call (:func:`~.space.call_key`: op, shapes, dtypes,
attributes) and the machine (:class:`Machine`: CPU model, the ISA copy the kernels
run, thread count) and carries the point (:mod:`.space`), its measured time inside
the model, the default point's time in the same run, plait's version and when it was
measured; a trial that failed is recorded as such (no time).  :meth:`TuningDB.best`
is the fastest successful record of a call on a machine (:func:`pick`: medians, and a
margin over the default point's where it was measured): what ``build()`` uses.

Writers append in short transactions with SQLite's locking (a busy database is
retried for up to :data:`BUSY_SECONDS`): two processes writing one file lose nothing.
A file that is not a SQLite database, or a SQLite database that is not a tuning
database (no ``plait_tuning`` table, or a newer format) raises
:class:`TuningDBError` naming the file and what to do; ``build()`` turns that into a
:class:`TuningDBWarning` and uses the heuristics (:mod:`.choose`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from plait.errors import PlaitError

from .space import point_text

FORMAT = "plait-tuning"
VERSION = 1
"""The format this plait writes and reads (``plait_tuning`` table: format, version)."""

BUSY_SECONDS = 60.0
"""How long a writer waits for another's transaction before failing."""

ENV_VAR = "PLAIT_TUNING_DB"
"""The environment variable naming the database ``build()`` reads (when the target
has no ``tuning_db`` attribute)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plait_tuning (format TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    call TEXT NOT NULL,
    op TEXT NOT NULL,
    cpu TEXT NOT NULL,
    isa TEXT NOT NULL,
    threads INTEGER NOT NULL,
    point TEXT NOT NULL,
    seconds REAL,
    default_seconds REAL,
    status TEXT NOT NULL,
    error TEXT,
    plait_version TEXT NOT NULL,
    measured REAL NOT NULL,
    host TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_call ON records (call, cpu, isa, threads);
"""


class TuningDBError(PlaitError, ValueError):
    """A tuning database that cannot be used: not SQLite, not a tuning database, a
    newer format, or a record that does not parse; the message names the file."""


class TuningDBWarning(UserWarning):
    """``build()`` skipped a tuning database (or a record of it) and used the
    heuristics; the message says why."""


@dataclass(frozen=True)
class Machine:
    """What a record is valid for: the CPU model, the ISA copy the kernels run there
    (``avx512``, ``avx2``, ``neon``, ``baseline``) and the thread count."""

    cpu: str
    isa: str
    threads: int

    def as_json(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "isa": self.isa, "threads": self.threads}


@dataclass(frozen=True)
class Record:
    """One measured (or failed) point of a call on a machine."""

    call: str
    op: str
    machine: Machine
    point: dict[str, Any]
    seconds: float | None
    default_seconds: float | None
    status: str = "ok"
    error: str = ""
    plait_version: str = ""
    measured: float = 0.0
    host: str = ""


def _version() -> str:
    """plait's version, as installed (the package's metadata: this layer may not import
    the top-level ``plait``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("plait")
    except PackageNotFoundError:
        return "unknown"


@contextmanager
def _transaction(con: sqlite3.Connection) -> Iterator[None]:
    """A write transaction (taken at once: writers queue on SQLite's lock)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


MIN_SAMPLES = 3
"""The measurements a point other than the default needs to be taken over a measured
default (:func:`pick`)."""

MARGIN = 0.03
"""How much faster than the default's median a point's median must be to be taken
over a measured default (:func:`pick`): a point within noise of the heuristic leaves
the heuristic."""


def pick(records: list[Record], default: Mapping[str, Any] | None = None) -> Record | None:
    """The point ``build()`` takes among one call's ``records`` (one machine's).  Each
    point is scored by the median over its successful measurements (one lucky run does
    not win) of its time over the default's measured with it (``default_seconds``: the
    tuner pairs them, run for run, so the machine's load cancels), or, where a record
    lacks the default's time, by the median of its times.  The lowest score wins; where
    the ``default`` point was measured too (a tuning run), another point only with
    :data:`MIN_SAMPLES` measurements and a score :data:`MARGIN` below the default's: the
    search tries many points of a call, and the fastest of many noisy medians is mostly
    luck.  The record returned carries the point's median time and the median of its
    defaults' times."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.status == "ok" and r.seconds is not None:
            groups.setdefault(point_text(r.point), []).append(r)
    if not groups:
        return None
    paired = all(r.default_seconds for rs in groups.values() for r in rs)
    score = {p: statistics.median((r.seconds / r.default_seconds) if paired  # type: ignore[operator]
                                  else r.seconds for r in rs)
             for p, rs in groups.items()}
    dtext = point_text(default) if default is not None else None
    if dtext in score:
        bar = (1 - MARGIN) * score[dtext]
        score = {p: t for p, t in score.items()
                 if p == dtext or (len(groups[p]) >= MIN_SAMPLES and t < bar)}
    best = min(score, key=lambda p: score[p])
    rs = groups[best]
    d = [r.default_seconds for r in rs if r.default_seconds is not None]
    return replace(rs[-1], seconds=statistics.median(r.seconds for r in rs),  # type: ignore[misc]
                   default_seconds=statistics.median(d) if d else None)


class TuningDB:
    """A tuning database file (created by the first writer).  ``readonly`` opens an
    existing file without creating or changing it."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        if readonly and not os.path.isfile(self.path):
            raise TuningDBError(f"tuning database {self.path}: no such file (tune a model "
                                "with `plait tune MODEL --db FILE` first)")
        if not readonly:
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        self._check()

    # ------------------------------------------------------------- connections
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            if self.readonly:
                uri = "file:" + os.path.abspath(self.path) + "?mode=ro"
                con = sqlite3.connect(uri, uri=True, timeout=BUSY_SECONDS,
                                      isolation_level=None)
            else:
                con = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
        except sqlite3.Error as e:
            raise TuningDBError(f"tuning database {self.path}: cannot open it ({e})") from None
        try:
            yield con
        except sqlite3.DatabaseError as e:
            raise TuningDBError(f"tuning database {self.path}: {e} (not a plait tuning "
                                "database, or damaged: delete it or name another file)"
                                ) from None
        finally:
            con.close()

    def _check(self) -> None:
        """Create the tables (a writer, on a new or empty file), then check the file
        is a tuning database of a format this plait reads."""
        with self._connect() as con:
            names = {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not names and not self.readonly:
                # the tables and the format row in one write transaction: another process
                # opening the file meanwhile waits for both (it never sees the tables
                # without the row); the statements are idempotent, so a writer that lost
                # the race to create the file changes nothing
                with _transaction(con):
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            con.execute(statement)
                    if con.execute("SELECT COUNT(*) FROM plait_tuning").fetchone()[0] == 0:
                        con.execute("INSERT INTO plait_tuning VALUES (?, ?)", (FORMAT, VERSION))
                names = {r[0] for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "plait_tuning" not in names or "records" not in names:
                raise TuningDBError(
                    f"tuning database {self.path}: a SQLite file with tables "
                    f"{sorted(names) or 'none'}, not a plait tuning database (delete it or "
                    "name another file)")
            row = con.execute("SELECT format, version FROM plait_tuning").fetchone()
            if row is None or row[0] != FORMAT:
                raise TuningDBError(f"tuning database {self.path}: format {row!r}, not "
                                    f"{FORMAT!r}")
            if int(row[1]) > VERSION:
                raise TuningDBError(f"tuning database {self.path}: format version {row[1]} "
                                    f"is newer than this plait's ({VERSION}); upgrade plait")

    # ------------------------------------------------------------------ writing
    def add(self, records: list[Record]) -> None:
        """Append ``records`` in one transaction."""
        if self.readonly:
            raise TuningDBError(f"tuning database {self.path} is open read-only")
        if not records:
            return
        version = _version()
        host = os.uname().nodename
        rows = [(r.call, r.op, r.machine.cpu, r.machine.isa, int(r.machine.threads),
                 point_text(r.point), r.seconds, r.default_seconds, r.status, r.error,
                 r.plait_version or version, r.measured or time.time(), r.host or host)
                for r in records]
        with self._connect() as con, _transaction(con):
            con.executemany(
                "INSERT INTO records (call, op, cpu, isa, threads, point, seconds, "
                "default_seconds, status, error, plait_version, measured, host) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    # ------------------------------------------------------------------ reading
    def records(self, call: str | None = None, machine: Machine | None = None) -> list[Record]:
        """The records (of ``call``, on ``machine``, when given), oldest first."""
        where, args = [], []
        if call is not None:
            where.append("call = ?")
            args.append(call)
        if machine is not None:
            where += ["cpu = ?", "isa = ?", "threads = ?"]
            args += [machine.cpu, machine.isa, int(machine.threads)]
        sql = ("SELECT call, op, cpu, isa, threads, point, seconds, default_seconds, status, "
               "error, plait_version, measured, host FROM records"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id")
        with self._connect() as con:
            rows = con.execute(sql, args).fetchall()
        return [self._record(r) for r in rows]

    def _record(self, r: tuple[Any, ...]) -> Record:
        try:
            point = json.loads(r[5])
        except (TypeError, ValueError):
            raise TuningDBError(f"tuning database {self.path}: a record of {r[1]} has the "
                                f"point {r[5]!r}, which is not JSON") from None
        if not isinstance(point, dict):
            raise TuningDBError(f"tuning database {self.path}: a record of {r[1]} has the "
                                f"point {r[5]!r}, which is not an object")
        return Record(r[0], r[1], Machine(r[2], r[3], int(r[4])), point,
                      None if r[6] is None else float(r[6]),
                      None if r[7] is None else float(r[7]), r[8], r[9] or "", r[10],
                      float(r[11]), r[12])

    def best(self, call: str, machine: Machine,
             default: Mapping[str, Any] | None = None) -> Record | None:
        """The fastest point of ``call`` on ``machine`` (None: no successful record);
        see :meth:`best_by_call`."""
        return pick(self.records(call, machine), default)

    def best_by_call(self, machine: Machine,
                     defaults: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> dict[str, Record]:
        """The fastest point of every call on ``machine`` (:func:`pick`; ``defaults``:
        each call's default point, where known)."""
        by_call: dict[str, list[Record]] = {}
        for r in self.records(machine=machine):
            by_call.setdefault(r.call, []).append(r)
        out = {}
        for call, rs in by_call.items():
            rec = pick(rs, (defaults or {}).get(call))
            if rec is not None:
                out[call] = rec
        return out

    def machines(self) -> list[Machine]:
        """The machines the database has records of."""
        with self._connect() as con:
            rows = con.execute("SELECT DISTINCT cpu, isa, threads FROM records").fetchall()
        return [Machine(a, b, int(c)) for a, b, c in rows]


__all__ = ["BUSY_SECONDS", "ENV_VAR", "FORMAT", "MARGIN", "MIN_SAMPLES", "Machine", "Record",
           "TuningDB", "pick",
           "TuningDBError", "TuningDBWarning", "VERSION"]
