"""docs/performance.md's current figures are the benchmark's own: every block between
``<!-- figures:SUITE:begin -->`` and ``<!-- figures:SUITE:end -->`` is empty or exactly
what ``benchmarks/run.py --suite SUITE --write-docs`` writes (its command and machine
line, then the summary table and its geometric means), so a hand edit inside a block
fails here.  Notes about a run belong outside its markers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
BLOCK = re.compile(r"<!-- figures:([\w-]+):begin -->\n(.*?)<!-- figures:\1:end -->", re.S)
HEADER = re.compile(
    r"\*Written by `python benchmarks/run\.py (?P<args>[^`]*)` on (?P<cpu>[^,]+), "
    r"\d+ vCPUs \(ISA: [^)]+\), \d+ threads per backend(, PLAIT_ISA=\w+)?, "
    r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\.\*$")
SUMMARY_LINE = re.compile(r"^(\|.*\||geomean .*|[\w-]+: \d+ of \d+ models .*|)$")
"""The lines run.py's summary is made of: table rows, geometric means, blank lines."""


def blocks(text: str) -> dict[str, str]:
    """Each suite's figures block (between its markers)."""
    found = BLOCK.findall(text)
    suites = [s for s, _ in found]
    assert len(suites) == len(set(suites)), f"a suite's markers appear twice: {suites}"
    return dict(found)


def problems(suite: str, body: str) -> list[str]:
    """What in a block run.py would not have written."""
    if not body.strip():
        return []
    first, _, rest = body.partition("\n")
    m = HEADER.match(first)
    if not m:
        return [f"{suite}: the first line is not run.py's command and machine: {first!r}"]
    out = []
    if f"--suite {suite}" not in m.group("args") or "--write-docs" not in m.group("args"):
        out.append(f"{suite}: written by another command: {m.group('args')!r}")
    if not any(line.startswith("| model |") for line in rest.splitlines()):
        out.append(f"{suite}: no table of models")
    out += [f"{suite}: not a line of the summary: {line!r}" for line in rest.splitlines()
            if not SUMMARY_LINE.match(line)]
    return out


def test_a_hand_edit_inside_a_block_is_found() -> None:
    header = ("*Written by `python benchmarks/run.py --suite broad --write-docs` on AMD EPYC, "
              "2 vCPUs (ISA: avx2), 2 threads per backend, 2026-01-01 00:00 UTC.*")
    table = "\n| model | a |\n|---|---|\n| m | 1 |\n\ngeomean a / onnxruntime over 1 models: 1\n"
    assert problems("broad", header + "\n" + table) == []
    assert problems("broad", header + "\n*Indicative only.*\n" + table) == [
        "broad: not a line of the summary: '*Indicative only.*'"]
    assert problems("real", header + "\n" + table)[0].startswith("real: written by another")
    assert problems("broad", "| model | a |\n")[0].startswith("broad: the first line")
    assert blocks("<!-- figures:a:begin -->\nx\n<!-- figures:a:end -->") == {"a": "x\n"}


def test_the_current_figures_are_the_benchmarks_own() -> None:
    text = PAGE.read_text()
    found = blocks(text)
    assert {"broad", "real", "quantized", "broad-int8"} <= set(found), sorted(found)
    assert any(body.strip() for body in found.values()), "no suite's figures at all"
    bad = [p for suite, body in found.items() for p in problems(suite, body)]
    assert not bad, "docs/performance.md: edited by hand inside the figures:\n" + "\n".join(bad)
