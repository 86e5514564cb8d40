"""ONNX's backend node test cases of the quantized ops on the ``c`` target (the whole
node suite runs on ``numpy`` in tests/frontend/test_onnx_conformance.py; the cases
listed there as expected failures use element types plait does not have)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("onnx")

from plait.frontend.onnx.conformance import (  # noqa: E402
    load_node_cases,
    read_expected_failures,
    run_case,
)

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
                 "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear"}
EXPECTED = read_expected_failures(os.path.join(os.path.dirname(__file__), "..", "..",
                                               "frontend", "onnx_expected_failures.txt"))


def _cases() -> list:
    return [c for c in load_node_cases()
            if c.name not in EXPECTED
            and any(n.op_type in QUANTIZED_OPS for n in c.model.graph.node)]


CASES = _cases()


def test_the_quantized_cases_are_there() -> None:
    names = {c.name for c in CASES}
    assert {"test_qlinearconv", "test_qlinearmatmul_3D_int8_float32",
            "test_convinteger_with_padding",
            "test_matmulinteger", "test_dynamicquantizelinear", "test_quantizelinear_axis",
            "test_dequantizelinear_blocked"} <= names
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_on_c(case) -> None:  # type: ignore[no-untyped-def]
    result = run_case(case, target="c")
    assert result.passed, result.reason
