"""Shared fixtures of the C codegen tests: a cache directory of their own
(``PLAIT_CACHE_DIR``, set before any other fixture of a module runs: some tests count
compiler runs), one per worker for the whole session.

The variable is set for each codegen module and restored after it: set for the rest of
the session (as it once was), it sent every later test of that xdist worker to this
cache, which then compiled every kernel family a second time (250 CPU-s of the run)."""

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def c_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The codegen tests' plait cache directory (this worker's)."""
    return tmp_path_factory.mktemp("plait-cache")


@pytest.fixture(scope="module", autouse=True)
def _use_codegen_cache(c_cache_dir: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(c_cache_dir))
        yield
