"""The tutorials of docs/tutorials/ and docs/quickstart.md run: every ```python block of a
page, in order, as one script, in a fresh process (a tutorial registers passes and a
target kind, which must not leak into the other tests) whose working directory is a
temporary one (a page writes files).  A failure's traceback names the Markdown file and
its line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
RUN = [*TUTORIALS, ROOT / "docs" / "quickstart.md"]
"""The pages whose code blocks run: the tutorials, and the quickstart guide."""
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

RUNNER = """
import re, sys
path = sys.argv[1]
text = open(path).read()
lines = [""] * (text.count("\\n") + 1)
for m in re.finditer(r"^```python\\n(.*?)^```", text, re.S | re.M):
    first = text.count("\\n", 0, m.start(1))
    for i, line in enumerate(m.group(1).splitlines()):
        lines[first + i] = line
exec(compile("\\n".join(lines), path, "exec"), {"__name__": "tutorial"})
"""
"""Each code line at its own line number, every other line blank: a traceback's line
numbers are the Markdown file's."""


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return BLOCK.findall(path.read_text())


def test_there_are_tutorials() -> None:
    names = {p.name for p in TUTORIALS}
    assert {"onnx_model.md", "kernel_family.md", "dialect_pass.md"} <= names
    for p in TUTORIALS:
        assert python_blocks(p), f"{p.name} has no ```python block to run"


def test_the_kernel_family_tutorial_is_under_100_lines() -> None:
    """The promise of docs/index.md: a kernel family and a dispatch rule in under 100
    lines (the C source is a string of the Python, so it counts)."""
    code = "\n".join(python_blocks(ROOT / "docs" / "tutorials" / "kernel_family.md"))
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) < 100, f"kernel_family.md has {len(lines)} lines of code"


@pytest.mark.parametrize("path", RUN, ids=[p.stem for p in RUN])
def test_tutorial_runs(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    if path.name == "quickstart.md":
        pytest.importorskip("torch")   # it hands torch tensors to the VM
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (
        f"{path.relative_to(ROOT)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
