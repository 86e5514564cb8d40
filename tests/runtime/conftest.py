"""Fixtures of the runtime's trust tests: a marker file that foreign code would write,
and another machine (a cache folder, so a local key, of its own)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture()
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a forged library's constructor writes when it runs
    ($PLAIT_TEST_EVIL_MARKER)."""
    path = tmp_path / "constructor-ran"
    monkeypatch.setenv("PLAIT_TEST_EVIL_MARKER", str(path))
    return path


@pytest.fixture()
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              seeded_cache: Callable[[Path], Path]) -> Path:
    """Another machine: a cache directory, and so a local key, of its own (seeded with
    the run's compiled objects: tests/conftest.py seed_cache)."""
    d = seeded_cache(tmp_path / "other-machine")
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(d))
    return d
