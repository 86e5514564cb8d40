"""Fixtures of the end-to-end tests: one compiled-library cache (``PLAIT_CACHE_DIR``)
for the session, so native builds compile each library once and write nothing to the
user's cache."""

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def plait_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's plait cache directory."""
    d = tmp_path_factory.mktemp("plait-cache-e2e")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(d))
        yield d
