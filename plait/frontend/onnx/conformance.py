"""Running ONNX's node test suite against plait, case by case.

Used by ``tools/onnx_conformance.py`` (the count recorded in docs/onnx.md) and by the
test suite (``tests/frontend/test_onnx_conformance.py`` runs the same cases through
``onnx.backend.test.BackendTest``).  :func:`run_case` imports, builds for numpy, runs
and compares one case with the tolerances of the case, and returns a one-line reason
when it fails.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

EXOTIC_TYPES = (
    "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
    "FLOAT8E8M0", "FLOAT4E2M1", "INT4", "UINT4", "INT2", "UINT2",
)  # fmt: skip
"""The element types left out of the comparison count (float16, bfloat16, float8 and
sub-byte types), as in onnxruntime's published count."""


@dataclass
class CaseResult:
    """The outcome of one case: ``passed``, a one-line ``reason`` when it failed, and
    whether some inputs had to be compile-time constants (``specialized``)."""

    name: str
    passed: bool
    reason: str = ""
    specialized: bool = False


def load_node_cases() -> list[Any]:
    """ONNX's node test cases (generated in memory by the installed onnx package)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(load_model_tests(kind="node"))


def _exotic_numbers() -> set[int]:
    from onnx import TensorProto

    return {getattr(TensorProto, n) for n in EXOTIC_TYPES if hasattr(TensorProto, n)}


def uses_exotic_types(model: Any) -> bool:
    """True if any value, initializer, constant or cast target of the model (subgraphs
    included) has one of :data:`EXOTIC_TYPES`."""
    import onnx

    exotic = _exotic_numbers()
    stack = [model.graph]
    while stack:
        g = stack.pop()
        for v in list(g.input) + list(g.output) + list(g.value_info):
            t = v.type
            while t.HasField("sequence_type") or t.HasField("optional_type"):
                t = (
                    t.sequence_type.elem_type
                    if t.HasField("sequence_type")
                    else t.optional_type.elem_type
                )
            if t.HasField("tensor_type") and t.tensor_type.elem_type in exotic:
                return True
        if any(i.data_type in exotic for i in g.initializer):
            return True
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in exotic:
                    return True
                if a.name in ("to", "output_dtype", "output_datatype", "dtype") and a.i in exotic:
                    return True
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                if a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(a.graphs)
    return False


def failure_reason(exc: BaseException) -> str:
    """A one-line description of why a case failed."""
    from .errors import OnnxImportError

    text = str(exc)
    if isinstance(exc, OnnxImportError):
        if exc.unsupported:
            ops = ", ".join(sorted(exc.unsupported))
            return f"unsupported operator {ops}"
        line = exc.problems[0] if exc.problems else text
        line = re.sub(r"^node '[^']*' |^node <unnamed> ", "", line)
        return "import: " + line.split("\n")[0]
    if isinstance(exc, AssertionError):
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if any("incorrect shape" in ln for ln in lines):
            return "wrong output shape"
        if lines and "dtype" in text and "Items are not equal" in text:
            return "wrong output dtype"
        mism = next((ln for ln in lines if ln.startswith("Mismatched elements")), None)
        return "wrong values" + (f" ({mism})" if mism else "")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"


def _one_line(s: str, limit: int = 160) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def run_case(case: Any, target: str = "numpy") -> CaseResult:
    """Import, build (for ``target``, numpy by default), run and compare one node test
    case."""
    from onnx.backend.test.runner import Runner

    from .backend import PlaitRep

    try:
        from onnx.backend.test.runner import _normalize_tensor
    except ImportError:  # pragma: no cover - older onnx

        def _normalize_tensor(x: Any) -> Any:
            return x

    rep = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = PlaitRep(case.model, target=target)
            for inputs, outputs in case.data_sets:
                got = rep.run([_normalize_tensor(i) for i in inputs])
                Runner.assert_similar_outputs(
                    [_normalize_tensor(o) for o in outputs], list(got), case.rtol, case.atol
                )
    except Exception as e:
        return CaseResult(case.name, False, _one_line(failure_reason(e)))
    return CaseResult(case.name, True, specialized=bool(rep is not None and rep.specialized))


def read_expected_failures(path: str) -> dict[str, str]:
    """``{case name: reason}`` from an expected-failures file (``name: reason`` lines,
    ``#`` comments)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(":")
            out[name.strip()] = reason.strip()
    return out


def write_expected_failures(path: str, results: list[CaseResult], header: str = "") -> None:
    """Write the failing cases of ``results`` as an expected-failures file."""
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    for r in sorted(results, key=lambda r: r.name):
        if not r.passed:
            lines.append(f"{r.name}: {r.reason}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
