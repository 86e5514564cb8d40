"""Every relative Markdown link of the docs (docs/, README.md, the benchmarks' journal)
names a file that exists, and every ``#anchor`` a heading of the page it points to
(GitHub's slugs: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md",
                ROOT / "benchmarks" / "results" / "journal.md"])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """The targets of the Markdown links of ``text``, outside code blocks and spans."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    return LINK.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_links_are_found() -> None:
    assert links("see [a](b.md#c), not `[x](y)`, [web](https://x.org)") == [
        "b.md#c", "https://x.org"]
    assert slug("Extension points of the `c` target") == "extension-points-of-the-c-target"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue   # a web address
        path, _, anchor = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with the anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


PATH_REF = re.compile(r"(?<![\w./~$-])((?:plait|tests|benchmarks|tools|examples)/[\w./-]*\w)")
"""A path of the repository named in prose or code (``plait/target/c/build.py``,
``benchmarks/run.py``); not a part of another path (``~/.cache/plait/x``)."""


def path_refs(text: str) -> list[str]:
    """The repository paths ``text`` names, without placeholders (``<family>``, ``*``)."""
    return [m.group(1) for m in PATH_REF.finditer(text)
            if not re.match(r"/?[<*{]", text[m.end(1):m.end(1) + 2])]


def test_path_refs_are_found() -> None:
    assert path_refs("see plait/ir/expr.py, `tests/conftest.py`. ~/.cache/plait/bench "
                     "plait/target/c/kernels/<family>/ and benchmarks/results/*.md") == [
        "plait/ir/expr.py", "tests/conftest.py"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_named_paths_exist(page: Path) -> None:
    """Every file or folder of the repository a page names exists (a moved file leaves
    no stale path in the docs)."""
    if page.name == "journal.md":
        return   # a record of the past: it names files as they were then
    missing = sorted({p for p in path_refs(page.read_text()) if not (ROOT / p).exists()})
    assert not missing, (f"{page.relative_to(ROOT)} names paths that do not exist: "
                         f"{', '.join(missing)}")
