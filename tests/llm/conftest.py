"""What the tests of tests/llm share within a worker's session: each tiny model of
llm_models.py made once, each ``torch.export`` of it with the cache done once (10-20 s
each on 2 cores, most of these tests' time) and built by each test for its own target
(:func:`plait.llm.build_exported_lm`), and ``transformers``' greedy generations and full
recomputations of those models computed once.  A test that changes a shared model puts
it back before it returns; a test of a copy, or of a model loaded from a directory,
calls llm_models' functions itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny() -> Callable[[str], Any]:
    """``tiny(arch)``: ``llm_models.make(arch)``, once per session."""
    from llm_models import make

    models: dict[str, Any] = {}

    def get(arch: str) -> Any:
        if arch not in models:
            models[arch] = make(arch)
        return models[arch]

    return get


@pytest.fixture(scope="session")
def exported(tiny: Callable[[str], Any]) -> Callable[..., tuple[Any, dict[str, Any]]]:
    """``exported(arch, max_cache=, logits=)``: ``plait.llm.export_causal_lm`` of
    ``tiny(arch)``, once per session and arguments (the module is not changed by a
    build, so every test builds it for its own target)."""
    from plait.llm import export_causal_lm

    done: dict[tuple[str, int, str], tuple[Any, dict[str, Any]]] = {}

    def get(arch: str, *, max_cache: int, logits: str) -> tuple[Any, dict[str, Any]]:
        key = (arch, max_cache, logits)
        if key not in done:
            done[key] = export_causal_lm(tiny(arch), max_cache=max_cache, logits=logits)
        return done[key]

    return get


@pytest.fixture(scope="session")
def hf_ref(tiny: Callable[[str], Any]) -> Callable[[str, np.ndarray, int], np.ndarray]:
    """``hf_ref(arch, ids, n)``: ``llm_models.hf_greedy(tiny(arch), ids, n)``, once per
    session and arguments."""
    from llm_models import hf_greedy

    done: dict[tuple[str, tuple[int, ...], bytes, int], np.ndarray] = {}

    def get(arch: str, ids: np.ndarray, n: int) -> np.ndarray:
        key = (arch, ids.shape, ids.astype(np.int64).tobytes(), n)
        if key not in done:
            done[key] = hf_greedy(tiny(arch), ids, n)
        return done[key].copy()

    return get


@pytest.fixture(scope="session")
def hf_logits(tiny: Callable[[str], Any]) -> Callable[[str, np.ndarray], np.ndarray]:
    """``hf_logits(arch, ids)``: PyTorch's logits of ``tiny(arch)`` over all of ``ids``
    (the full recomputation), once per session and ids."""
    import torch

    done: dict[tuple[str, tuple[int, ...], bytes], np.ndarray] = {}

    def get(arch: str, ids: np.ndarray) -> np.ndarray:
        key = (arch, ids.shape, ids.astype(np.int64).tobytes())
        if key not in done:
            with torch.no_grad():
                done[key] = tiny(arch)(torch.from_numpy(ids)).logits.numpy()
        return done[key].copy()

    return get
