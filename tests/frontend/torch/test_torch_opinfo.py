"""The importer on PyTorch's OpInfo samples: the samples tools/torch_opinfo.py recorded as
passing (opinfo_results.json, shown in docs/pytorch.md) must still pass.  To keep the run
short, the first recorded sample of every OpInfo per dtype is run, all the samples of a
dtype in one exported module (one export, one build per target), compared with eager
PyTorch (float32: rtol 1e-4, atol 1e-5, NaN equal to NaN; int64 and bool: exact) on
numpy for every third OpInfo and on c for every sixth (another one): exporting every
OpInfo's samples takes minutes on two cores; tools/torch_opinfo.py runs them all, on both
targets, and records what it finds."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

from plait.frontend.torch import opinfo as oi  # noqa: E402

SUBSETS = {"numpy": slice(0, None, 3), "c": slice(1, None, 6)}
"""Which OpInfos of the sorted list each target runs."""

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opinfo_results.json")


def _recorded() -> dict:
    with open(RESULTS, encoding="utf-8") as f:
        return json.load(f)


def test_results_cover_the_claimed_opinfos() -> None:
    data = _recorded()
    assert sorted(data["ops"]) == sorted(oi.OPINFOS), (
        "opinfo_results.json is stale: run python tools/torch_opinfo.py")
    assert (data["rtol"], data["atol"]) == (oi.RTOL, oi.ATOL)


@pytest.mark.parametrize("target", ["numpy", "c"])
@pytest.mark.parametrize("dtype", oi.DTYPES)
def test_recorded_samples_still_pass(dtype: str, target: str) -> None:
    data = _recorded()
    names = sorted(n for n, e in data["ops"].items() if e["samples"].get(dtype))
    names = names[SUBSETS[target]]
    infos = [oi.find_opinfo(n) for n in names]
    indices = {n: {dtype: data["ops"][n]["samples"][dtype][:1]} for n in names}
    results = oi.run_ops(infos, dtypes=(dtype,), targets=(target,), indices=indices)
    bad = [f"{n} #{i}: {r.status} {r.reason}" for n, rs in results.items()
           for (_, i), r in rs.items() if r.status != "pass"]
    assert not bad, "\n".join(bad)
    assert sum(len(rs) for rs in results.values()) == len(names)
