"""No private name crosses a module boundary: a module of ``plait/`` uses another
module's ``_name`` neither by ``from plait.x import _name`` (relative or absolute, inside
a function too) nor as ``x._name`` after importing module ``x``.  A name two modules
share is public in the module that owns it (docs/index.md, Layers).

Read with ``ast`` over every file of ``plait/``; names of other packages (``torch``'s
``_pytree``...) are theirs to judge."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) of every module under ``root/plait``."""
    out = {}
    for path in sorted((root / "plait").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_pkg = path.name == "__init__.py"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a chain of attribute reads on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def private_uses(root: Path) -> Iterator[tuple[str, int, str]]:
    """(file relative to ``root``, line, ``module._name``) of every use of another
    module's private name in ``root/plait``."""
    modules = _modules(root)
    for name, (path, is_pkg) in modules.items():
        package = name if is_pkg else name.rsplit(".", 1)[0]
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        local: dict[str, str] = {}   # a local name bound to a module of plait -> the module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    mod = ".".join(parts + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    if full in modules:
                        local[a.asname or a.name] = full
                    elif mod in modules and mod != name and _is_private(a.name):
                        yield rel, node.lineno, full
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        local[a.asname or a.name.split(".")[0]] = \
                            a.name if a.asname else a.name.split(".")[0]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            base = _dotted(node.value)
            if base is None:
                continue
            head, _, rest = base.partition(".")
            mod = local.get(head)
            if mod is None:
                continue
            mod = f"{mod}.{rest}" if rest else mod
            if mod in modules and mod != name:
                yield rel, node.lineno, f"{mod}.{node.attr}"


def test_no_private_name_crosses_a_module_boundary() -> None:
    found = list(private_uses(ROOT))
    assert not found, (
        "another module's private name used (make it public in the module that owns it, "
        "with a docstring): " + "; ".join(f"{f}:{n} {what}" for f, n, what in found))


def test_a_planted_private_use_is_found(tmp_path: Path) -> None:
    """The check itself: each way of reaching another module's private name, and the
    ways that are fine (a module's own names, public names, dunders)."""
    pkg = tmp_path / "plait"
    (pkg / "ir").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ir" / "__init__.py").write_text("")
    (pkg / "ir" / "own.py").write_text("_x = 1\ny = _x\n__all__ = []\n")
    (pkg / "ir" / "user.py").write_text(
        "from .own import _x, y\n"                    # 1: relative, private
        "from plait.ir.own import __all__\n"          # 2: a dunder: fine
        "import plait.ir.own\n"                       # 3
        "from . import own as o\n"                    # 4
        "def f():\n"
        "    from plait.ir.own import _x as z\n"      # 6: inside a function
        "    return plait.ir.own._x + o._x + o.y\n")  # 7: two attribute reads
    found = sorted(private_uses(tmp_path))
    assert found == [("plait/ir/user.py", 1, "plait.ir.own._x"),
                     ("plait/ir/user.py", 6, "plait.ir.own._x"),
                     ("plait/ir/user.py", 7, "plait.ir.own._x"),
                     ("plait/ir/user.py", 7, "plait.ir.own._x")]
