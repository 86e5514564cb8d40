"""Shared fixtures of the C codegen tests: one cache directory for the whole session
(``PLAIT_CACHE_DIR``, set before any other fixture runs), so every library is compiled
once and nothing is written to the user's cache."""

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def c_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's plait cache directory."""
    return tmp_path_factory.mktemp("plait-cache")


@pytest.fixture(scope="session", autouse=True)
def _use_session_cache(c_cache_dir: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(c_cache_dir))
        yield
