"""ONNX's own node test suite (``onnx.backend.test``, ~1,900 cases generated in memory by
the installed onnx) run against plait through :class:`onnx.backend.test.BackendTest`:
each case is imported, built for the numpy target, run and compared with the case's
outputs and tolerances.

The cases plait is known to fail are listed, each with a reason, in
``onnx_expected_failures.txt`` and marked as expected failures: a listed case that
passes fails the run (an unexpected success), as does a failing case that is not
listed, so the list stays exact.  Regenerate it with
``python tools/onnx_conformance.py --update-expected``.

Run it in parallel: ``pytest -n 2 tests/frontend/test_onnx_conformance.py``.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest

pytest.importorskip("onnx")

import onnx.backend.test  # noqa: E402

from plait.frontend.onnx.backend import PlaitBackend  # noqa: E402
from plait.frontend.onnx.conformance import read_expected_failures  # noqa: E402

EXPECTED_FILE = os.path.join(os.path.dirname(__file__), "onnx_expected_failures.txt")
EXPECTED = read_expected_failures(EXPECTED_FILE)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators warn about overflows they intend
    _backend_test = onnx.backend.test.BackendTest(PlaitBackend, __name__)

for _name in EXPECTED:
    _backend_test.xfail(rf"^{re.escape(_name)}_cpu$")

OnnxBackendNodeModelTest = _backend_test.test_cases["OnnxBackendNodeModelTest"]
"""One test per node case (``test_<case>_cpu``)."""

for _attr in [a for a in vars(OnnxBackendNodeModelTest) if a.endswith("_cuda")]:
    delattr(OnnxBackendNodeModelTest, _attr)  # plait's backend runs on the CPU only


def _node_case_names() -> set[str]:
    return {
        n[: -len("_cpu")]
        for n in dir(OnnxBackendNodeModelTest)
        if n.startswith("test_") and n.endswith("_cpu")
    }


def test_expected_failures_name_existing_cases() -> None:
    """Every case in the expected-failures list exists in the installed suite."""
    unknown = sorted(set(EXPECTED) - _node_case_names())
    assert not unknown, f"{EXPECTED_FILE} lists cases the suite does not have: {unknown[:10]}"


def test_expected_failures_have_reasons() -> None:
    """Every listed case says why it fails."""
    missing = [n for n, reason in EXPECTED.items() if not reason]
    assert not missing, f"cases without a reason in {EXPECTED_FILE}: {missing[:10]}"


def test_most_cases_pass() -> None:
    """The suite is mostly expected to pass (a guard against an emptied test class)."""
    names = _node_case_names()
    assert len(names) > 1500
    assert len(set(EXPECTED) & names) < len(names) // 3
