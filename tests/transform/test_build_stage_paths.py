"""The build stage's fast paths against their general paths: ExplicitMemory's lowering
of a call with a tensor result (from what it keeps per pair of types) against its
general lowering, on the module each real model's pipeline hands it (numpy and c) and
on the scaling benchmark's chain; PlanMemory's placement against a brute-force
first fit on random lifetimes."""

from __future__ import annotations

import random

import pytest
from transform_testlib import onnx_model

import plait
from plait.ir.structural import structural_equal
from plait.transform import PassContext, PassInstrument
from plait.transform import explicit_memory as em
from plait.transform.plan_memory import ALIGNMENT, place


class _Before(PassInstrument):
    def __init__(self, pass_name: str) -> None:
        self.pass_name = pass_name
        self.mods: list[plait.IRModule] = []

    def run_before_pass(self, mod, info) -> None:  # type: ignore[no-untyped-def]
        if info.name == self.pass_name:
            self.mods.append(mod)


def _module_before(name: str, model: str, target: str,
                   request: pytest.FixtureRequest) -> plait.IRModule:
    if model == "chain":
        from test_graph_passes import _chain

        mod = _chain(200)
    else:
        mod = onnx_model(model, request)
    grab = _Before(name)
    with PassContext(instruments=[grab]):
        plait.build(mod, target)
    (before,) = grab.mods
    return before


@pytest.mark.parametrize(("model", "target"), [
    ("chain", "numpy"), ("tiny_mlp", "numpy"), ("tiny_mlp", "c"), ("cnn", "numpy"),
    ("cnn", "c"), ("mlp", "numpy"), ("mlp", "c")])
def test_explicit_memory_fast_path_makes_the_general_paths_module(
        model: str, target: str, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module_before("ExplicitMemory", model, target, request)
    fast = {n: em.explicit_memory(f) for n, f in mod.graph_functions()}

    def general_only(self, out_ty, var_ty):  # type: ignore[no-untyped-def]
        return (out_ty, var_ty, None)

    monkeypatch.setattr(em._ExplicitMemory, "_tensor_plan", general_only)
    for name, func in mod.graph_functions():
        assert structural_equal(fast[name], em.explicit_memory(func)), name


def _first_fit(tensors: list[tuple[int, int, int]]) -> tuple[list[int], int]:
    """Each tensor at the lowest aligned offset where its bytes overlap no tensor placed
    before it whose lifetime overlaps its own: every candidate (0 and the end of each
    such tensor) tried in turn."""
    done: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets = []
    for nbytes, first, last in tensors:
        size = -(-nbytes // ALIGNMENT) * ALIGNMENT
        near = [(o, sz) for o, sz, f, la in done if f <= last and first <= la]
        candidates = sorted({0, *(o + sz for o, sz in near)})
        offset = next(c for c in candidates
                      if all(c + size <= o or o + sz <= c for o, sz in near))
        offsets.append(offset)
        done.append((offset, size, first, last))
    return offsets, max((o + sz for o, sz, _, _ in done), default=0)


@pytest.mark.parametrize("seed", range(20))
def test_placement_is_the_first_fit(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([5, 20, 60])
    tensors = []
    for first in rng.sample(range(n), k=rng.randint(1, n)):
        last = min(n - 1, first + rng.choice([0, 1, 2, 5, n]))
        tensors.append((rng.choice([1, 64, 100, 256, 4096, 5000]), first, last))
    tensors.sort(key=lambda t: (-t[0], t[1]))
    assert place(tensors, n) == _first_fit(tensors)
