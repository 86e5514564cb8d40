"""plait tune (plait/tools/tune): candidates measured inside the whole model, records
in the database, the same choices in a fresh process; trials as Ray tasks on a local
cluster (one per module: Ray starts slowly), in Ray worker processes, a killed worker's
trial retried; plait tune DIR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tuning_models import small_model

import plait
from plait.target.c.tuning import TuningDB, current_machine
from plait.tools.tune import LocalExecutor, ModelRef, tune

pytestmark = pytest.mark.skipif(plait.codegen.c.find_compiler() is None,
                                reason="needs a C compiler")

HERE = Path(__file__).resolve().parent

FRESH = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[2])
import plait
from tuning_models import small_model
exe = plait.build(small_model(), plait.Target("c", tuning_db=sys.argv[1]))
print(json.dumps({"points": {v["call"]: v["point"] for v in exe.attrs["tuning"].values()},
                  "origins": sorted(v["origin"] for v in exe.attrs["tuning"].values()),
                  "libs": {k: hashlib.sha256(bytes(v)).hexdigest() for k, v in exe.libs.items()}}))
"""


def _fresh_build(db: str) -> dict:
    """What a fresh process builds with ``db``: each call's point, the library digests."""
    out = subprocess.run([sys.executable, "-c", FRESH, db, str(HERE)], capture_output=True,
                         text=True, timeout=600, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tune") / "small.plait.py"
    path.write_text(small_model().script())
    # compile the kernel families once (a new test run's cache is empty): the budgets
    # below are for trials
    plait.build(small_model(), plait.Target("c", step_timing=True))
    return path


def _check_complete(db: str, report) -> dict:  # type: ignore[no-untyped-def]
    """Every call of the model has a successful record of every point of its space
    (failed trials aside), and the database's best of each call is the report's."""
    me = current_machine()
    store = TuningDB(db, readonly=True)
    best = store.best_by_call(me, {k: s.default for (_, k), s in report.calls.items()})
    assert len(report.calls) == 3 and set(best) == {k for _, k in report.calls}
    for (_, key), summary in report.calls.items():
        ok = {json.dumps(r.point, sort_keys=True) for r in store.records(key, me)
              if r.status == "ok"}
        failed = {json.dumps(r.point, sort_keys=True) for r in store.records(key, me)
                  if r.status == "failed"}
        assert len(ok | failed) == summary.candidates, (summary, ok, failed)
        # each time carries its default's, measured in the same runs (the pairing)
        assert all(r.default_seconds and r.default_seconds > 0
                   for r in store.records(key, me) if r.status == "ok")
        assert summary.default_seconds and summary.best_seconds
    return best


def test_local_tuning_records_and_a_fresh_build_uses_them(model_file: Path,
                                                          tmp_path: Path) -> None:
    db = str(tmp_path / "local.db")
    # the algorithms, layouts, thread caps and the sum's block vary (the whole spaces
    # are hundreds of points: tests/tuning/test_spaces.py builds each value once)
    report = tune(ModelRef.from_path(str(model_file)), db, 60, LocalExecutor(runs=3),
                  confirm_rounds=2, choices=("algorithm", "layout", "threads", "kc"))
    assert report.trials >= 5 and report.failed == 0 and report.pids == {os.getpid()}
    # the confirm rounds ran the best points paired with the defaults: the whole step's
    # ratio is reported
    assert report.whole and all(w > 0 for w in report.whole)
    assert any("of the defaults' time" in line for line in report.lines())
    best = _check_complete(db, report)
    fresh = _fresh_build(db)
    assert fresh["points"] == {k: r.point for k, r in best.items()}
    assert fresh["origins"] == ["database"] * 3
    # the same library, byte for byte, in another fresh process
    assert _fresh_build(db)["libs"] == fresh["libs"]


def test_tune_command_on_a_directory(model_file: Path, tmp_path: Path) -> None:
    from plait.cli import main

    models = tmp_path / "models"
    models.mkdir()
    (models / "a.plait.py").write_text(model_file.read_text())
    (models / "b.plait.py").write_text(model_file.read_text())
    (models / "notes.txt").write_text("not a model")
    db = tmp_path / "dir.db"
    assert main(["tune", str(models), "--budget", "40s", "--db", str(db), "--runs", "2",
                 "--confirm-rounds", "1", "--choices", "algorithm,layout"]) == 0
    recs = TuningDB(db, readonly=True).records()
    assert {r.op for r in recs} == {"conv2d", "dwconv2d", "linear"}
    assert main(["tune", str(tmp_path / "missing"), "--db", str(db)]) == 2
    assert main(["tune", str(models), "--db", str(db), "--choices", "algorithm,tiles"]) == 2


# ------------------------------------------------------------------ Ray


@pytest.fixture(scope="module")
def ray_cluster():  # type: ignore[no-untyped-def]
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install plait[tune])")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _trial_workers() -> list[int]:
    """The pids of Ray workers running a trial now (Ray titles them ray::run_trial)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::run_trial"):
                    pids.append(int(d))
        except OSError:
            continue
    return pids


def test_ray_trials_run_in_workers_and_survive_a_killed_one(ray_cluster, model_file: Path,
                                                            tmp_path: Path) -> None:
    from plait.tools.tune.ray_runner import RayExecutor

    db = str(tmp_path / "ray.db")
    executor = RayExecutor(runs=3, cpus_per_trial=1)
    killed: list[int] = []

    def killer() -> None:   # kill the first worker seen running a trial
        end = time.time() + 120
        while not killed and time.time() < end:
            for pid in _trial_workers():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.005)

    t = threading.Thread(target=killer)
    t.start()
    report = tune(ModelRef.from_path(str(model_file)), db, 90, executor, confirm_rounds=1,
                  choices=("algorithm", "layout", "threads"))
    t.join()
    assert killed, "no trial was seen running"
    assert os.getpid() not in report.pids and killed[0] not in report.pids
    assert report.failed == 0           # the killed trial was retried in another worker
    best = _check_complete(db, report)
    fresh = _fresh_build(db)
    assert fresh["points"] == {k: r.point for k, r in best.items()}
    assert _fresh_build(db)["libs"] == fresh["libs"]
