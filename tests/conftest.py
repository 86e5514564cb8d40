"""Session-wide fixtures: one compiled-library cache (``PLAIT_CACHE_DIR``) for the whole
test run, shared by the xdist workers, so every native library — and the object of
plait_gemm.c, the same source for every model — is compiled once per run and nothing is
written to the user's cache.  (tests/codegen keeps a cache of its own: its tests count
compiler runs.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run sees (the base temp directory's parent
    under xdist, the base temp directory otherwise)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def plait_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The run's plait cache directory."""
    d = shared_root(tmp_path_factory) / "plait-cache"
    d.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(d))
        yield d
