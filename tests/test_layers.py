"""The layers point down (docs/index.md, Layers): a module of a layer imports only
from its own layer and the ones below it, checked on every import statement of
``plait/`` (those inside functions too: a lazy import is still a dependency).

The few upward imports the code has today are listed in ``KNOWN`` with the reason each
is there; the test fails on a new one, and on a listed one that is gone (so the list
only shrinks).  An equivalent of import-linter's layers contract, without the
dependency: plait's import graph is read with ``ast`` in a few milliseconds."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RANK = {
    "errors": 0, "runtime": 1, "ir": 2, "kernel": 3, "op": 4, "interp": 5, "transform": 6,
    "codegen": 7, "target": 8, "pipeline": 9, "build": 9, "offload": 9,
    "frontend": 10, "dialects": 10, "session": 11, "script": 11, "llm": 11, "cli": 12, "tools": 12,
}
"""Each top-level module or package of ``plait`` and its layer (lower imports nothing
of higher); ``plait/__init__.py`` is the package's face and may import anything."""

KNOWN = {
    ("plait.ir.well_formed", "plait.op"):
        "the phase invariants name the lowered and build ops (op.lowlevel); issue 28 item 2 "
        "moves those lists or the checks",
    ("plait.pipeline", "plait.dialects"):
        "the default pipeline asks the dialect registry for its passes; the registry "
        "belongs below the pipeline",
    ("plait.transform.fuse_kernels", "plait.target"):
        "the target's compute rules (lazy import of Target)",
    ("plait.transform.legalize", "plait.target"):
        "the target kind's legalization hooks (lazy import of Target)",
}


def _top(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "plait" or len(parts) < 2:
        return None
    return parts[1]


def upward_imports(root: Path) -> Iterator[tuple[str, str, int]]:
    """(importing module, imported top-level module, line) of every import in
    ``root/plait`` that points to a higher layer."""
    base = root / "plait"
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        name = ".".join(rel.parts)
        is_pkg = path.name == "__init__.py"
        if is_pkg:
            name = name[: -len(".__init__")]
        mine = _top(name)
        if mine is None:
            continue
        package = name if is_pkg else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    mod = ".".join(parts + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            for t in targets:
                other = _top(t)
                if other is None or other == mine or other not in RANK:
                    continue  # plait itself (its version, its face), or a name of it
                assert mine in RANK, f"{name}: add its top-level module to RANK"
                if RANK[other] > RANK[mine]:
                    yield name, f"plait.{other}", node.lineno


def test_the_layers_point_down() -> None:
    found = {(m, o) for m, o, _ in upward_imports(ROOT)}
    new = sorted(found - set(KNOWN))
    assert not new, ("upward imports (a lower layer importing a higher one; see "
                     f"docs/index.md, Layers): {new}")
    gone = sorted(set(KNOWN) - found)
    assert not gone, f"these upward imports are gone: remove them from KNOWN: {gone}"


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.stem for p in (ROOT / "plait").glob("*.py")} - {"__init__"}
    names |= {p.name for p in (ROOT / "plait").iterdir()
              if p.is_dir() and (p / "__init__.py").exists()}
    assert names <= set(RANK), f"give these a layer in RANK: {sorted(names - set(RANK))}"


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    """The check itself: an IR module importing the command line, relatively and by
    name, inside a function too."""
    ir = tmp_path / "plait" / "ir"
    ir.mkdir(parents=True)
    (tmp_path / "plait" / "__init__.py").write_text("from . import cli\n")
    (ir / "__init__.py").write_text("")
    (ir / "bad.py").write_text("from ..op import registry\n"
                               "def f():\n    import plait.cli\n    from .. import tools\n")
    (ir / "fine.py").write_text("from ..runtime import vm\nfrom . import bad\n")
    found = sorted(upward_imports(tmp_path))
    assert found == [("plait.ir.bad", "plait.cli", 3), ("plait.ir.bad", "plait.op", 1),
                     ("plait.ir.bad", "plait.tools", 4)]
