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


def test_core_op_list_does_not_depend_on_what_ran_before() -> None:
    """The core ATen op list is the same in a fresh interpreter as after every ATen op
    packet was touched (``dir(torch.ops.aten)`` lists only the packets touched so far:
    the count in docs/pytorch.md changed with the order the tests ran in)."""
    import json
    import subprocess
    import sys

    tool = os.path.join(ROOT, "tools", "gen_torch_docs.py")
    code = (
        "import importlib.util, json, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('g', {tool!r})\n"
        "g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)\n"
        "fresh = g.core_aten_ops()\n"
        "for n in torch._C._dispatch_get_all_op_names():\n"
        "    if n.startswith('aten::'):\n"
        "        try: getattr(torch.ops.aten, n[6:].partition('.')[0])\n"
        "        except Exception: pass\n"
        "print(json.dumps([fresh, g.core_aten_ops()]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    fresh, touched = json.loads(out.strip().splitlines()[-1])
    assert fresh == touched and len(fresh) > 100
