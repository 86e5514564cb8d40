"""The ranges the dynamo exporter records (``pkg.torch.export.ExportedProgram.
range_constraints`` in the graph's metadata) become the module's ``dim_ranges``: under
torch's own symbols, under the ``Dim`` names they were renamed to (matched by torch's
numbering of an input's size, or when every range left is the same), and none where the
file cannot tell.  Hand-written models; the real exports are in
test_onnx_dynamo_models.py and test_whisper_encoder.py."""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from onnx_helpers import model, vi  # noqa: E402

from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx.export_ranges import (  # noqa: E402
    ORIGINAL_NAME_KEY,
    RANGES_KEY,
    parse_constraints,
)


def _symbol(name: str, axis: int) -> str:
    """The symbol torch's ShapeEnv gives size ``axis`` of input ``name`` (written out
    here, not imported, so a change of the importer's rule shows)."""
    source = f"L['{name}'].size()[{axis}]"
    return f"s{int(hashlib.sha256(source.encode()).hexdigest(), 16) % 100}"


def _model(dims: dict[str, list], constraints: str | None) -> object:
    names = list(dims)
    nodes = [helper.make_node("Relu", [n], [f"{n}_out"]) for n in names]
    m = model(nodes, [vi(n, d) for n, d in dims.items()], [vi(f"{n}_out", None) for n in names])
    if constraints is not None:
        helper.set_metadata_props(m.graph, {RANGES_KEY: constraints})  # type: ignore[attr-defined]
    return m


def test_parse_the_exporters_text() -> None:
    assert parse_constraints("{s17: VR[1, 8], s27: VR[6, 64], s94: VR[2, int_oo], "
                             "u0: VR[0, int_oo]}") == {"s17": (1, 8), "s27": (6, 64),
                                                       "s94": (2, None)}  # fmt: skip


def test_torchs_own_symbols_take_their_ranges() -> None:
    mod = from_onnx(_model({"x": ["s17", "s27"]}, "{s17: VR[1, 8], s27: VR[2, int_oo]}"))
    assert mod.attrs["dim_ranges"] == {"s17": (1, 8), "s27": (2, None)}


def test_renamed_sizes_matched_by_torchs_numbering() -> None:
    """x: (batch, xs), y: (batch, seq) as torch.onnx.export(dynamo=True) writes them for
    Dims named so; the batch's symbol is the one of y's axis 0 (either axis may give it)."""
    c = (f"{{{_symbol('y', 0)}: VR[1, 8], {_symbol('x', 1)}: VR[6, 64], "
         f"{_symbol('y', 1)}: VR[2, 12]}}")
    mod = from_onnx(_model({"x": ["batch", "xs"], "y": ["batch", "seq"]}, c))
    assert mod.attrs["dim_ranges"] == {"batch": (1, 8), "xs": (6, 64), "seq": (2, 12)}


def test_torchs_name_of_an_input_renamed_by_input_names_is_the_one_numbered() -> None:
    """input_names=["pixel_values"] for forward(self, x): the metadata keeps ``x``."""
    c = (f"{{{_symbol('x', 0)}: VR[1, 64], {_symbol('x', 2)}: VR[2, 64], "
         f"{_symbol('x', 3)}: VR[2, 32]}}")
    m = _model({"pixel_values": ["batch", 3, "height", "width"]}, c)
    helper.set_metadata_props(m.graph.input[0], {ORIGINAL_NAME_KEY: "x"})  # type: ignore[attr-defined]
    mod = from_onnx(m)
    assert mod.attrs["dim_ranges"] == {"batch": (1, 64), "height": (2, 64), "width": (2, 32)}


def test_renamed_sizes_of_one_range_take_it_and_others_stay_open() -> None:
    same = from_onnx(_model({"x": ["b", "t"]}, "{s1: VR[2, 64], s3: VR[2, 64]}"))
    assert same.attrs["dim_ranges"] == {"b": (2, 64), "t": (2, 64)}
    unclear = from_onnx(_model({"x": ["b", "t"]}, "{s1: VR[1, 8], s3: VR[2, 64]}"))
    assert unclear.attrs.get("dim_ranges") is None


def test_given_ranges_win_and_a_fixed_size_drops_its_range() -> None:
    c = "{s17: VR[1, 8], s27: VR[2, 64]}"
    mod = from_onnx(_model({"x": ["s17", "s27"]}, c), dim_ranges={"s17": (1, 100)})
    assert mod.attrs["dim_ranges"] == {"s17": (1, 100), "s27": (2, 64)}
    fixed = from_onnx(_model({"x": ["s17", "s27"]}, c), shapes={"x": (3, "s27")})
    assert fixed.attrs["dim_ranges"] == {"s27": (2, 64)}
