"""Fuzzing in the suite: a small budget of mutated text modules, ONNX models,
executables, VM arguments and attack files (hypothesis draws the mutations, so a failure
shrinks to a small case), the kept corpus of past findings, and tools/fuzz.py's judging
of hangs and crashes, and of breaches of the trust policy.  Long runs:
``python tools/fuzz.py --minutes N`` (docs/reliability.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import fuzzlib
import numpy as np
import pytest
import trustlib
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


@settings(BUDGET, max_examples=25)  # each may compile C (with consent)
@given(st.data())
def test_attack_files_meet_the_trust_policy_on_every_path(data: st.DataObject) -> None:
    judged("trust", data)


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


# ------------------------------------------------------------------ the trust judge


def _patched(monkeypatch: pytest.MonkeyPatch, hole: str) -> None:
    """Open ``hole`` in the trust policy, as a regression would."""
    import plait.runtime.external as external
    import plait.runtime.trust as trust

    if hole == "native code always allowed":
        monkeypatch.setattr(trust.Trust, "native_allowed", property(lambda self: True))
    elif hole == "external data not refused":
        monkeypatch.setattr(external, "_refuse_external_data", lambda *args: None)
    elif hole == "importer reads external data":
        loader = sys.modules["plait.frontend.onnx.loader"]
        monkeypatch.setattr(loader, "external_tensors", lambda model: [])
    else:  # "rebuilt executables signed"
        monkeypatch.setattr(sys.modules["plait.build"], "rebuilt_trust", lambda attr: None)


@pytest.mark.parametrize("kind, options, hole, breach", [
    ("c_source", {"calls": True}, "native code always allowed",
     "rebuild c (default policy): an output holds the value the carried code writes"),
    ("c_source", {"calls": False, "nonce": 11}, "native code always allowed",
     "rebuild c (default policy): the carried native code ran (constructor)"),
    ("kernel", {}, "native code always allowed",
     "rebuild c (default policy): an output holds the value the carried code writes"),
    ("native_module", {"nonce": 12}, "native code always allowed",
     "load and run (default policy): the carried native code ran (constructor)"),
    ("ort_external_data", {"position": "if_constant", "signed": True},
     "external data not refused",
     "load and run (default policy): an output holds the bytes of plait-fuzz-secret.bin"),
    ("ort_external_data", {"position": "if_initializer", "location": "sub/../"
                           + trustlib.SECRET_FILE}, "external data not refused",
     "load and run (default policy): an output holds the bytes of plait-fuzz-secret.bin"),
    ("ort_external_data", {"position": "constant"}, "importer reads external data",
     "onnx import (default policy): an output holds the bytes of plait-fuzz-secret.bin"),
    ("kernel", {}, "rebuilt executables signed",
     "rebuild c (allow_native): an executable rebuilt for c from an unsigned file saves "
     "signed by this machine"),
    ("c_source", {"calls": False, "nonce": 13}, "rebuilt executables signed",
     "rebuild numpy (allow_native): an executable rebuilt for numpy from an unsigned file "
     "saves signed by this machine"),
])
def test_the_trust_judge_flags_each_hole(monkeypatch: pytest.MonkeyPatch, kind: str,
                                         options: dict, hole: str, breach: str) -> None:
    """The judge is what makes the fuzzer find a hole: the same attack file is a breach
    once the policy has the hole, and clean under the policy.  (The hole comes first:
    a library this process mapped once does not run its constructor again.)"""
    case = trustlib.attack_file(kind, **options)
    _patched(monkeypatch, hole)
    outcome = fuzzlib.run_case("trust", case)
    assert (outcome.kind, outcome.detail[:len(breach)]) == ("breach", breach), outcome
    monkeypatch.undo()
    outcome = fuzzlib.run_case("trust", case)
    assert outcome.kind == "clean", outcome


def test_the_attack_files_are_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """With consent the carried code runs (its constructor and its function write the
    marker, and main returns what the C function writes); the secret file really holds
    what a leak would show."""
    import plait
    from plait.runtime import Executable, VirtualMachine

    case = trustlib.attack_file("c_source", calls=True, nonce=2)
    with trustlib.sandbox() as marker:
        exe = plait.rebuild(Executable.from_bytes(case, allow_native=True), "c")
        got = VirtualMachine(exe)["main"](np.zeros(4, np.float32))
        np.testing.assert_array_equal(got, np.full(4, 4321.0, np.float32))
        assert set(marker.read_text().split()) == {"constructor", "called"}
        leaked = np.fromfile(trustlib.SECRET_FILE, np.float32)
        np.testing.assert_array_equal(leaked, trustlib.SECRET)
