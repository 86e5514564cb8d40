"""docs/performance.md's current figures are the benchmarks' own: every block between
``<!-- figures:KEY:begin -->`` and ``<!-- figures:KEY:end -->`` is empty or exactly what
the benchmark of KEY writes with ``--write-docs`` (benchmarks/docs_figures.py: its
command and machine line, then its tables and geometric means), so a hand edit inside a
block fails here.  Notes about a run belong outside its markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
BLOCK = re.compile(r"<!-- figures:([\w.@-]+):begin -->\n(.*?)<!-- figures:\1:end -->", re.S)
WRITERS = {"broad": "run.py", "real": "run.py", "quantized": "run.py",
           "broad-int8": "run.py", "dynamic-shapes": "dynamic_shapes.py",
           "memory": "memory.py", "scaling": "run.py", "llm-0.5b": "llm_decode.py",
           "llm-1b": "llm_decode.py"}
"""Each block's key and the benchmark that writes it (run.py: with ``--suite KEY``, the
pipeline's scaling with ``--scaling-only``)."""
OPTION = {"scaling": "--scaling-only", "llm-0.5b": "--config 0.5b", "llm-1b": "--config 1b"}
"""The option that writes a block: run.py's other than a suite's ``--suite KEY``,
llm_decode.py's config."""
TABLE = {"scaling": "| bindings |"}
"""How a block's table starts, where it is not a table of models."""
ISAS = ("avx2", "neon", "baseline")
"""The ISA copies other than AVX-512 a block may be named after (``broad@avx2``)."""
BY_ISA = set(WRITERS) - {"scaling"}
"""The blocks whose figures depend on the kernels' ISA copy (docs_figures.block_key)."""
HEADER = re.compile(
    r"\*Written by `python benchmarks/(?P<script>\w+\.py)(?P<args>[^`]*)` on "
    r"(?P<cpu>[^,]+), "
    r"\d+ vCPUs \(ISA: (?P<isa>[^)]+)\), \d+ threads per backend(, PLAIT_ISA=(?P<cap>\w+))?, "
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
    suite, _, isa = suite.partition("@")
    flags = m.group("isa").split(", ")
    if suite in BY_ISA:
        avx512 = "avx512f" in flags and m.group("cap") in (None, "avx512")
        if isa and (avx512 or isa not in ISAS):
            out.append(f"{suite}@{isa}: written by a run whose kernels were not {isa}'s")
        elif not isa and not avx512:
            out.append(f"{suite}: written by a run whose kernels were not AVX-512's "
                       f"(its block is {suite}@ISA)")
    elif isa:
        out.append(f"{suite}@{isa}: {suite}'s figures do not depend on the ISA")
    args = m.group("args").split()
    option = OPTION.get(suite, f"--suite {suite}")
    if (m.group("script") != WRITERS.get(suite) or "--write-docs" not in args
            or ((m.group("script") == "run.py" or suite in OPTION)
                and option not in m.group("args"))):
        out.append(f"{suite}: written by another command: {m.group(0)[:80]!r}")
    if not any(line.startswith(TABLE.get(suite, "| model |")) for line in rest.splitlines()):
        out.append(f"{suite}: no table of models")
    out += [f"{suite}: not a line of the summary: {line!r}" for line in rest.splitlines()
            if not SUMMARY_LINE.match(line)]
    return out


def test_a_hand_edit_inside_a_block_is_found() -> None:
    header = ("*Written by `python benchmarks/run.py --suite broad --write-docs` on AMD EPYC, "
              "2 vCPUs (ISA: avx2, fma, avx512f), 2 threads per backend, 2026-01-01 00:00 UTC.*")
    table = "\n| model | a |\n|---|---|\n| m | 1 |\n\ngeomean a / onnxruntime over 1 models: 1\n"
    assert problems("broad", header + "\n" + table) == []
    # an AVX2-only run's figures go to broad@avx2, never into the AVX-512 block
    avx2 = header.replace(", avx512f", "")
    assert problems("broad@avx2", avx2 + "\n" + table) == []
    assert problems("broad", avx2 + "\n" + table)[0].startswith(
        "broad: written by a run whose kernels were not AVX-512's")
    assert problems("broad@avx2", header + "\n" + table)[0].startswith("broad@avx2: written by")
    capped = header.replace(", 2026", ", PLAIT_ISA=avx2, 2026")
    assert problems("broad@avx2", capped + "\n" + table) == []
    assert problems("scaling@avx2", header.replace("--suite broad", "--scaling-only")
                    + "\n| bindings | a |\n")[0].startswith("scaling@avx2: scaling's figures")
    assert problems("broad", header + "\n*Indicative only.*\n" + table) == [
        "broad: not a line of the summary: '*Indicative only.*'"]
    assert problems("real", header + "\n" + table)[0].startswith("real: written by another")
    assert problems("broad", "| model | a |\n")[0].startswith("broad: the first line")
    assert blocks("<!-- figures:a:begin -->\nx\n<!-- figures:a:end -->") == {"a": "x\n"}


def test_the_current_figures_are_the_benchmarks_own() -> None:
    text = PAGE.read_text()
    found = blocks(text)
    assert {k.partition("@")[0] for k in found} == set(WRITERS), sorted(found)
    assert all(k.partition("@")[2] in ("", *ISAS) for k in found), sorted(found)
    assert any(body.strip() for body in found.values()), "no suite's figures at all"
    bad = [p for suite, body in found.items() for p in problems(suite, body)]
    assert not bad, "docs/performance.md: edited by hand inside the figures:\n" + "\n".join(bad)


def test_each_benchmark_writes_a_block_the_check_accepts(tmp_path: Path,
                                                          monkeypatch) -> None:
    """What docs_figures.write_figures writes for each writer passes ``problems``."""
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    sys.modules.pop("docs_figures", None)
    import docs_figures

    # the blocks a run on this machine writes (key@avx2 on an AVX2-only CPU, ...)
    here = {docs_figures.block_key(k, k in BY_ISA): k for k in WRITERS}
    page = tmp_path / "p.md"
    page.write_text("".join(f"<!-- figures:{k}:begin -->\nold\n<!-- figures:{k}:end -->\n"
                            for k in here))
    summary = "| model | a |\n|---|---|\n| m | 1.00 |\n| geomean | 1.00 |\n"
    scaling = "| bindings | µs per binding |\n|---|---|\n| 1000 | 20.0 |\n"
    for key, script in WRITERS.items():
        args = ([*OPTION.get(key, f"--suite {key}").split(), "--write-docs"]
                if script == "run.py" or key in OPTION else ["--write-docs"])
        docs_figures.write_figures(page, key, scaling if key == "scaling" else summary,
                                   docs_figures.command(script, args), 2, by_isa=key in BY_ISA)
    found = blocks(page.read_text())
    assert set(found) == set(here)
    assert [p for k, body in found.items() for p in problems(k, body)] == []
    memory = docs_figures.block_key("memory")
    assert problems(memory, found[docs_figures.block_key("dynamic-shapes")])[0].startswith(
        f"{memory.partition('@')[0]}: written by")
    # a block this machine's run would write is checked before the run measures
    docs_figures.require_block(page, "broad")
    empty = tmp_path / "empty.md"
    empty.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers to write"):
        docs_figures.require_block(empty, "broad")


def test_the_dynamic_shapes_table(monkeypatch) -> None:
    """dynamic_shapes.markdown_table: the ratios and their geometric means (sqrt(2 * 0.5)
    = 1 and sqrt(0.5 * 2) = 1), a model whose outputs disagree shown and left out."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import dynamic_shapes

    table = dynamic_shapes.markdown_table({
        "a": {"static": 1.0, "dynamic": 2.0, "ort-dynamic": 4.0, "rel_err": 0.0},
        "b": {"static": 4.0, "dynamic": 2.0, "ort-dynamic": 1.0, "rel_err": 1e-6},
        "c": {"static": 1.0, "dynamic": 1.0, "ort-dynamic": 1.0, "rel_err": 0.5}})
    rows = table.splitlines()
    assert rows[2] == "| a | 1.00 | 2.00 | 2.00 | 4.00 | 0.50 |"
    assert rows[3] == "| b | 4.00 | 2.00 | 0.50 | 1.00 | 2.00 |"
    assert "**outputs disagree** (5.0e-01)" in rows[4]
    assert rows[5] == "| geomean | | | 1.00 | | 1.00 |"
    assert all(SUMMARY_LINE.match(r) for r in rows)
