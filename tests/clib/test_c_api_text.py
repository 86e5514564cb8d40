"""The C API's description and its refusals, without compiling a model's library: the
status codes of docs/c_api.md are the generated header's; a model that does not run as
one native entry point is refused with the reason; so is a size no input binds."""

from __future__ import annotations

from pathlib import Path

import pytest

import plait
from plait.codegen.c.c_api import (
    STATUS_CODES,
    ApiModel,
    ApiTensor,
    CApiError,
    emit_common_header,
    emit_header,
)
from plait.codegen.c.c_api_source import emit_source
from plait.codegen.c.entry import EntryProgram, EntryStep
from plait.frontend import from_onnx
from plait.target import Target
from plait.target.c.library_export import LibraryExportError, library_name

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "models" / "tiny_mlp.onnx"


def test_the_docs_list_every_status_code_with_its_value() -> None:
    doc = (ROOT / "docs" / "c_api.md").read_text()
    header = emit_common_header()
    for value, (name, _) in enumerate(STATUS_CODES):
        assert f"| `{name}` | {value} |" in doc, name
        assert f"    {name} = {value}," in header, name


def _model(out_shape: tuple) -> ApiModel:
    program = EntryProgram("main@entry", (("x", ("n", 4), "float32"),
                                          ("y", out_shape, "float32")), 1,
                           (EntryStep("k", (("param", 0), ("param", 1)), ()),))
    return ApiModel("m", program, "plait_e_main", (ApiTensor("x", ("n", 4), "float32"),),
                    (ApiTensor("y", out_shape, "float32"),), (1,), (), 0, True,
                    "00" * 8, {"n": (1, 16)})


def test_header_and_source_describe_symbolic_sizes() -> None:
    m = _model(("n", 4))
    header, source = emit_header(m), emit_source(m)
    assert " *   0: x: float32[n, 4]" in header and "n in [1, 16]" in header
    assert '{-1, "n", 1, 16}, {4, NULL, 4, 4}' in source
    assert "outside the range [1, 16] of the symbolic size '%s'" in source


def test_a_size_no_input_binds_is_refused() -> None:
    with pytest.raises(CApiError, match="the size\\(s\\) k appear only in outputs"):
        emit_source(_model(("k", 4)))


def test_library_names_are_c_identifiers() -> None:
    assert library_name("tiny-mlp.v2") == "tiny_mlp_v2"
    assert library_name("3d") == "m_3d"


def test_a_model_that_is_not_one_entry_point_is_refused(tmp_path: Path) -> None:
    """Without plait's products (gemm=False) the MLP's layers are BLAS calls run from
    Python: the refusal names them."""
    with pytest.raises(LibraryExportError, match=r"does not run as one native entry point.*"
                                                 r"blas\.linear"):
        plait.export_library(from_onnx(TINY), tmp_path,
                             target=Target("c", gemm=False))
    with pytest.raises(LibraryExportError, match="weights='inline'"):
        plait.export_library(from_onnx(TINY), tmp_path, weights="inline")
