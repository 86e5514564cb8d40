"""The import contracts (docs/index.md, Layers) hold: the layers point down, and the
packages named in them have no import cycles.

The contracts are import-linter's, written once in ``pyproject.toml``
(``[tool.importlinter]``); this test runs ``lint-imports`` on them, so the suite (and CI)
checks the same thing a developer's ``lint-imports`` does.  Every import counts, those
inside functions too (a lazy import is still a dependency; only imports under
``TYPE_CHECKING``, which never run, do not), and so do chains: a lower
module importing the package face ``plait`` that imports a higher one breaks the layers.
The few upward imports the code has today are the contracts' ``ignore_imports``, each
with its reason; an ignored import that is gone fails the check, so the list only
shrinks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_LINT = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the ``plait`` package under ``root`` with the contracts of
    ``config`` (no cache: the graph of ~240 modules builds in well under a second)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [sys.executable, "-c", _LINT, "--config", str(config), "--no-cache"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold() -> None:
    proc = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert proc.returncode == 0, (
        "an import contract is broken (see docs/index.md, Layers, and pyproject.toml's "
        f"[tool.importlinter]):\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}")
    assert "0 broken" in proc.stdout


def _copy_of_plait(tmp: Path) -> Path:
    """The package's Python files under ``tmp`` (the contracts read nothing else)."""
    shutil.copytree(ROOT / "plait", tmp / "plait",
                    ignore=lambda d, names: [n for n in names if not n.endswith(".py")
                                             and not (Path(d) / n).is_dir()])
    return tmp


def test_a_planted_upward_import_breaks_them(tmp_path: Path) -> None:
    """The check itself: an IR module importing the command line inside a function."""
    root = _copy_of_plait(tmp_path)
    (root / "plait" / "ir" / "planted.py").write_text(
        "def f():\n    from plait.cli import main\n    return main\n")
    proc = lint_imports(root, ROOT / "pyproject.toml")
    assert proc.returncode != 0
    assert "plait.ir is not allowed to import plait.cli" in proc.stdout, proc.stdout[-3000:]
    assert "plait.ir.planted -> plait.cli" in proc.stdout


def test_a_planted_cycle_breaks_them(tmp_path: Path) -> None:
    """A cycle in a package the contracts keep acyclic: the kernel IR importing its
    printer, which imports the kernel IR."""
    root = _copy_of_plait(tmp_path)
    path = root / "plait" / "kernel" / "ir.py"
    path.write_text(path.read_text() + "\n\ndef _planted():\n    from . import text\n"
                    "    return text\n")
    proc = lint_imports(root, ROOT / "pyproject.toml")
    assert proc.returncode != 0
    assert "plait.kernel" in proc.stdout and "BROKEN" in proc.stdout, proc.stdout[-3000:]
