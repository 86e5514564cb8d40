"""The tuning database (plait/target/c/tuning/db.py, choose.py): build() uses the
fastest record of a call on this machine only; a record for another CPU, ISA or
thread count, a point outside the call's space, a corrupt or foreign file: the
heuristic, with a warning (never a wrong result); two processes writing one file
lose nothing."""

from __future__ import annotations

import multiprocessing
import sqlite3
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tuning_models import reference, sample_input, small_model

import plait
from plait.errors import PlaitError
from plait.runtime import VirtualMachine
from plait.target.c.tuning import (
    Record,
    TuningDB,
    TuningDBError,
    TuningDBWarning,
    current_machine,
)

pytestmark = pytest.mark.skipif(plait.codegen.c.find_compiler() is None,
                                reason="needs a C compiler")


def _conv_key(tmp_path: Path) -> str:
    empty = tmp_path / "empty.db"
    TuningDB(empty)
    exe = plait.build(small_model(), plait.Target("c", tuning_db=str(empty)))
    return next(v["call"] for v in exe.attrs["tuning"].values() if v["op"] == "conv2d")


def _conv_noted(exe: plait.Executable) -> dict:
    return next(v for v in exe.attrs["tuning"].values() if v["op"] == "conv2d")


def test_fastest_record_of_this_machine_is_used(tmp_path: Path) -> None:
    key = _conv_key(tmp_path)
    me = current_machine()
    db = TuningDB(tmp_path / "t.db")
    db.add([Record(key, "conv2d", me, {"algorithm": "direct"}, 3e-5, 5e-5),
            Record(key, "conv2d", me, {"algorithm": "pixel_rows"}, 2e-5, 5e-5),
            Record(key, "conv2d", me, {"algorithm": "winograd4"}, None, None,
                   status="failed", error="killed"),
            # faster, but measured elsewhere: another CPU, another ISA, other threads
            Record(key, "conv2d", replace(me, cpu="Other CPU"), {"algorithm": "winograd4"},
                   1e-6, 5e-5),
            Record(key, "conv2d", replace(me, isa="baseline" if me.isa != "baseline"
                                          else "avx2"), {"algorithm": "winograd4"}, 1e-6, 5e-5),
            Record(key, "conv2d", replace(me, threads=me.threads + 7),
                   {"algorithm": "winograd4"}, 1e-6, 5e-5)])
    exe = plait.build(small_model(), plait.Target("c", tuning_db=db.path))
    noted = _conv_noted(exe)
    assert noted["origin"] == "database" and noted["point"]["algorithm"] == "pixel_rows"
    assert noted["seconds"] == 2e-5 and noted["default_seconds"] == 5e-5
    x = sample_input()
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), reference(x), rtol=1e-4,
                               atol=2e-3)


def test_environment_variable_names_the_database(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key = _conv_key(tmp_path)
    db = TuningDB(tmp_path / "env.db")
    db.add([Record(key, "conv2d", current_machine(), {"algorithm": "direct"}, 1e-5, 2e-5)])
    monkeypatch.setenv("PLAIT_TUNING_DB", db.path)
    exe = plait.build(small_model(), "c")
    assert _conv_noted(exe)["point"]["algorithm"] == "direct"


def test_records_of_another_cpu_only_leave_the_heuristic(tmp_path: Path) -> None:
    key = _conv_key(tmp_path)
    db = TuningDB(tmp_path / "other.db")
    db.add([Record(key, "conv2d", replace(current_machine(), cpu="Some Other CPU"),
                   {"algorithm": "direct"}, 1e-6, 2e-5)])
    exe = plait.build(small_model(), plait.Target("c", tuning_db=db.path))
    noted = _conv_noted(exe)
    assert noted["origin"] == "default" and noted["point"]["algorithm"] == "winograd2"


def test_a_point_outside_the_space_is_skipped(tmp_path: Path) -> None:
    key = _conv_key(tmp_path)
    db = TuningDB(tmp_path / "odd.db")
    db.add([Record(key, "conv2d", current_machine(), {"algorithm": "fft"}, 1e-6, 2e-5)])
    with pytest.warns(TuningDBWarning, match="does not contain"):
        exe = plait.build(small_model(), plait.Target("c", tuning_db=db.path))
    assert _conv_noted(exe)["origin"] == "default"


@pytest.mark.parametrize("kind", ["garbage", "foreign", "truncated", "missing"])
def test_corrupt_or_foreign_files(tmp_path: Path, kind: str) -> None:
    """build() warns and uses the heuristics (right answers); opening the file to write
    raises TuningDBError (a PlaitError) naming it."""
    path = tmp_path / f"{kind}.db"
    if kind == "garbage":
        path.write_bytes(b"this is not a database at all\n" * 100)
    elif kind == "foreign":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE people (name TEXT)")
        con.commit()
        con.close()
    elif kind == "truncated":
        db = TuningDB(path)
        db.add([Record("k", "conv2d", current_machine(), {"algorithm": "direct"}, 1.0, 1.0)])
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 3] + b"\xff" * 200)
    with pytest.warns(TuningDBWarning, match=str(path.name)):
        exe = plait.build(small_model(), plait.Target("c", tuning_db=str(path)))
    x = sample_input()
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), reference(x), rtol=1e-4,
                               atol=2e-3)
    if kind != "missing":
        with pytest.raises(TuningDBError, match=str(path.name)) as info:
            TuningDB(path).records()
        assert isinstance(info.value, PlaitError)


def _writer(path: str, tag: int, n: int) -> None:
    from plait.target.c.tuning import Machine

    db = TuningDB(path)
    m = Machine("cpu", "avx2", 2)
    for i in range(n):
        db.add([Record(f"call-{tag}-{i}", "conv2d", m, {"algorithm": "direct"}, 1e-3 * i, 1.0),
                Record(f"call-{tag}-{i}", "conv2d", m, {"algorithm": "pixel_rows"}, 1.0, 1.0)])


def test_two_processes_writing_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, 60)) for tag in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    recs = TuningDB(path, readonly=True).records()
    assert len(recs) == 2 * 60 * 2
    assert {r.call for r in recs} == {f"call-{t}-{i}" for t in (1, 2) for i in range(60)}


def test_no_warning_without_a_database() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningDBWarning)
        exe = plait.build(small_model(), "c")
    assert "tuning" not in exe.attrs


def test_plait_report_lists_the_tuned_calls(tmp_path: Path) -> None:
    """`plait report --tuning-db` names the call that came from the database, its point
    and both times; the others are listed as defaults."""
    from plait.cli import main

    key = _conv_key(tmp_path)
    db = TuningDB(tmp_path / "r.db")
    db.add([Record(key, "conv2d", current_machine(), {"algorithm": "direct"}, 4.25e-5,
                   6.5e-5)])
    model = tmp_path / "m.plait.py"
    model.write_text(small_model().script())
    out = tmp_path / "r.html"
    assert main(["report", str(model), "--target", "c", "-o", str(out),
                 "--tuning-db", db.path]) == 0
    page = out.read_text()
    section = page.split("<h2>Tuned calls</h2>", 1)[1].split("<h2>", 1)[0]
    assert "1 of 3 calls" in section
    assert "algorithm=direct</td><td>database</td>" in section
    assert "42.5 us" in section and "65.0 us" in section
    assert section.count("<td>default</td>") == 2


def test_a_point_must_beat_a_measured_default_clearly() -> None:
    """Where the default point was measured (a tuning run), another is taken only with 3
    samples and a median 3% below the default's (db.pick): a lucky sample, or a point
    within noise, leaves the heuristic."""
    from plait.target.c.tuning.db import pick

    me = current_machine()
    default = {"algorithm": "winograd2"}

    def recs(point: dict, times: list[float]) -> list[Record]:
        return [Record("k", "conv2d", me, point, t, 1e-4) for t in times]

    base = recs(default, [1.0e-4, 1.1e-4, 0.9e-4, 1.0e-4])
    lucky = recs({"algorithm": "direct"}, [0.5e-4])                       # one sample
    close = recs({"algorithm": "pixel_rows"}, [0.99e-4, 0.98e-4, 0.99e-4])  # within 3%
    assert pick(base + lucky + close, default).point == default
    # without the default's point (records written by hand): the lowest median
    assert pick(base + lucky + close).point == {"algorithm": "direct"}
    clear = recs({"algorithm": "winograd4"}, [0.9e-4, 0.95e-4, 0.9e-4])
    best = pick(base + lucky + close + clear, default)
    assert best is not None and best.point == {"algorithm": "winograd4"}
    assert best.seconds == 0.9e-4 and best.default_seconds == 1e-4
