"""Fuzzing in the suite: a small budget of mutated text modules, ONNX models,
executables and VM arguments (hypothesis draws the mutations, so a failure shrinks to a
small case), the kept corpus of past findings, and tools/fuzz.py's judging of hangs and
crashes.  Long runs: ``python tools/fuzz.py --minutes N`` (docs/reliability.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import fuzzlib
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
BUDGET = settings(max_examples=100, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def judged(target: str, data: st.DataObject) -> None:
    case = fuzzlib.mutate(target, fuzzlib.DataChooser(data))
    outcome = fuzzlib.run_case(target, case)
    assert outcome.kind in ("ok", "clean"), f"{outcome.kind}: {outcome.detail}"


@BUDGET
@given(st.data())
def test_mutated_text_modules(data: st.DataObject) -> None:
    judged("text", data)


@BUDGET
@given(st.data())
def test_mutated_onnx_models(data: st.DataObject) -> None:
    judged("onnx", data)


@BUDGET
@given(st.data())
def test_corrupted_executables(data: st.DataObject) -> None:
    judged("exe", data)


@BUDGET
@given(st.data())
def test_hostile_vm_arguments(data: st.DataObject) -> None:
    judged("vm", data)


@pytest.mark.parametrize("target, path", fuzzlib.corpus_cases(),
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_kept_findings_stay_fixed(target: str, path: Path) -> None:
    outcome = fuzzlib.run_case(target, path.read_bytes())
    assert outcome.kind in ("ok", "clean"), f"{outcome.kind}: {outcome.detail}"


def test_the_corpus_covers_every_target() -> None:
    assert {t for t, _ in fuzzlib.corpus_cases()} == set(fuzzlib.TARGETS)


def test_the_long_runner_judges_crashes_hangs_and_raw_exceptions(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import fuzz
    finally:
        sys.path.remove(str(ROOT / "tools"))
    # The hang limit comes from this machine's speed now: a child that starts, imports
    # and judges the ok and the raw case (seeds 12, 13) with a limit no slow case reaches
    # takes ``took`` seconds; a case of the real run is a hang past 3 * took (at least
    # 5 s), which a loaded machine's slow case stays under and the hanging case (an hour
    # of sleep) passes.
    start = time.monotonic()
    calibration = fuzz.run(["selftest"], minutes=10, seed=12, hang_seconds=600,
                           memory_gb=4, findings=tmp_path / "calibration",
                           first_case_grace=0.0, max_cases=2, nice=0)
    took = time.monotonic() - start
    assert calibration["counts"]["selftest"]["ok"] == 1, calibration
    # seeds 12-15 give an ok case, a raw exception, a crash and a hang, in that order
    summary = fuzz.run(["selftest"], minutes=10, seed=12, hang_seconds=max(5.0, 3 * took),
                       memory_gb=4, findings=tmp_path, first_case_grace=0.0, max_cases=4,
                       nice=0)
    counts = summary["counts"]["selftest"]
    assert [counts[k] for k in ("ok", "raw", "crash", "hang")] == [1, 1, 1, 1], summary
    kinds = {f["kind"]: f["detail"] for f in summary["findings"]}
    assert kinds["crash"] == "exit status -11"  # SIGSEGV, survived by the parent
    assert "KeyError" in kinds["raw"]
    assert list((tmp_path / "selftest").glob("crash-*.bin"))  # the case is kept
