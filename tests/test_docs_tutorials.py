"""The tutorials of docs/tutorials/ and docs/quickstart.md run: every fenced ```python,
```bash and ```sh block of a page, in order, as one script in a fresh process (a
tutorial registers passes and a target kind, which must not leak into the other tests)
whose working directory is a temporary one (a page writes files).  A shell block runs
with ``bash -eo pipefail`` at its place in the script, so it sees the files the Python
before it wrote; the ``plait`` command is the one of this checkout.  A block that must
not run says so in its first line, visibly in the page: ``# not run by the tests:
<reason>``.  A failure's traceback names the Markdown file and its line."""

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
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
RUNS = {"python": "python", "bash": "shell", "sh": "shell"}
"""The fence languages that run, and how."""
SHOWN = {"text", "console", "c", "json", "toml"}
"""Fence languages that show output or a file, never run."""
SKIP = re.compile(r"#\s*not run by the tests:\s*(\S.*)")
"""A block's first line that skips it; the reason is what follows the colon."""

RUNNER = r"""
import json, subprocess, sys
path = sys.argv[1]
blocks = json.loads(sys.argv[2])   # [kind, first line (0-based), code]


def _shell(code, line):
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", code], capture_output=True,
                          text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode:
        raise RuntimeError(f"{path}:{line + 1}: the shell block exited with "
                           f"{proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


text = open(path).read()
lines = [""] * (text.count("\n") + 1)
for kind, first, code in blocks:
    if kind == "python":
        for i, line in enumerate(code.splitlines()):
            lines[first + i] = line
    else:
        lines[first] = f"_shell({code!r}, {first})"
exec(compile("\n".join(lines), path, "exec"), {"__name__": "tutorial", "_shell": _shell})
"""
"""Each Python line at its own line number, a shell block as one call at its first
line, every other line blank: a traceback's line numbers are the Markdown file's."""


def code_blocks(path: Path) -> list[tuple[str, int, str]]:
    """The fenced blocks of a Markdown file, in order: (language, the 0-based line of
    the block's first code line, code)."""
    text = path.read_text()
    return [(m.group(1).strip(), text.count("\n", 0, m.start(2)), m.group(2))
            for m in FENCE.finditer(text)]


def skip_reason(code: str) -> str | None:
    """The reason a block gives in its first line for not running, or None."""
    first = code.splitlines()[0] if code.strip() else ""
    m = SKIP.match(first.strip())
    return m.group(1).strip() if m else None


def runnable(path: Path) -> list[tuple[str, int, str]]:
    """The blocks of a page that run: (python or shell, first line, code)."""
    return [(RUNS[lang], first, code) for lang, first, code in code_blocks(path)
            if lang in RUNS and skip_reason(code) is None]


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return [code for lang, _, code in code_blocks(path) if lang == "python"]


def test_blocks_are_found_and_skips_need_a_reason(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# T\n\n```python\nx = 1\n```\n\ntext\n\n```sh\n# not run by the "
                    "tests: it installs\npip install x\n```\n\n```bash\necho hi\n```\n"
                    "```text\nout\n```\n")
    assert code_blocks(page) == [("python", 3, "x = 1\n"),
                                 ("sh", 9, "# not run by the tests: it installs\n"
                                           "pip install x\n"),
                                 ("bash", 14, "echo hi\n"), ("text", 17, "out\n")]
    assert runnable(page) == [("python", 3, "x = 1\n"), ("shell", 14, "echo hi\n")]
    assert skip_reason("# not run by the tests:\nx") is None      # no reason: it runs


@pytest.mark.parametrize("path", RUN, ids=[p.stem for p in RUN])
def test_every_block_runs_or_says_why_not(path: Path) -> None:
    """No fence of an unknown language (it would silently not run), and every skipped
    block gives its reason in the page."""
    for lang, first, code in code_blocks(path):
        where = f"{path.relative_to(ROOT)}:{first}"
        assert lang in RUNS or lang in SHOWN, (
            f"{where}: a ```{lang} block neither runs nor is output; label it python, "
            f"bash or sh (it runs), or one of {sorted(SHOWN)} (shown only)")
        first_line = code.splitlines()[0].strip() if code.strip() else ""
        if "not run by the tests" in first_line:
            assert skip_reason(code), f"{where}: say why after 'not run by the tests:'"


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
    import json

    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    if path.name == "quickstart.md":
        pytest.importorskip("torch")   # it hands torch tensors to the VM
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(path),
                           json.dumps(runnable(path))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, (
        f"{path.relative_to(ROOT)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
