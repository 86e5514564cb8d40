"""docs/ops.md is generated from the registry by tools/gen_op_docs.py and must be up to
date with it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from plait.op import list_ops

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_op_docs", ROOT / "tools" / "gen_op_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_docs_are_up_to_date(gen):
    current = (ROOT / "docs" / "ops.md").read_text()
    assert current == gen.render(), "docs/ops.md is stale: run python tools/gen_op_docs.py"


def test_every_core_op_is_documented_with_signature_and_attributes(gen):
    text = gen.render()
    ops = [d for d in list_ops() if d.extra.get("module", "").startswith("plait.op.")]
    assert len(ops) > 100
    for d in ops:
        assert f"### `{d.name}`" in text
        assert f"`{gen.signature(d)}`" in text
    conv = text[text.index("### `conv2d`") : text.index("### `conv_transpose1d`")]
    assert (
        "`conv2d(data, weight, *, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1"
        in conv
    )
    assert '| `data_layout` | str | `"NCHW"` |' in conv and 'one of "NCHW", "NHWC"' in conv
    assert "pattern: `out_elemwise_fusable`" in conv
    assert "`cast(x, *, dtype)`" in text  # a required attribute has no default
    assert "`linear(x, weight, bias=None)`" in text
    assert text.index("## elementwise") < text.index("## linalg") < text.index("## nn")


def test_check_mode_reports_stale_docs(gen, tmp_path, capsys):
    stale = tmp_path / "ops.md"
    stale.write_text("# old\n")
    assert gen.main(["--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert gen.main(["--output", str(stale)]) == 0
    assert gen.main(["--check", "--output", str(stale)]) == 0
