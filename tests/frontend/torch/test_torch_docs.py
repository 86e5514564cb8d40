"""docs/pytorch.md lists the converted ATen ops from the converter table and the OpInfo
results: it must be up to date (regenerate with ``python tools/gen_torch_docs.py``)."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _tool():
    spec = importlib.util.spec_from_file_location(
        "gen_torch_docs", os.path.join(ROOT, "tools", "gen_torch_docs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_are_up_to_date() -> None:
    tool = _tool()
    with open(tool.DOC, encoding="utf-8") as f:
        text = f.read()
    assert tool.updated(text) == text, (
        "docs/pytorch.md is out of date: run python tools/gen_torch_docs.py")


def test_every_converter_is_documented() -> None:
    from plait.frontend.torch import list_converters

    text = _tool().generate()
    for c in list_converters():
        assert f"| `{c.op}` |" in text
