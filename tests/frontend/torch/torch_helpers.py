"""Shared helpers of the PyTorch importer tests: import, build once, compare with eager
PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np

import plait
from plait.runtime import VirtualMachine

RTOL = 1e-4
"""float32 results match eager PyTorch within rtol 1e-4 (and atol 1e-5 for values near
zero)."""
ATOL = 1e-5

_VMS: dict[tuple[int, str], tuple[Any, VirtualMachine]] = {}
"""(id of a module, target) -> (that module, its VM): the module is held, so its id is
not reused by another module while the entry lives."""


def vm_for(mod: Any, target: str) -> VirtualMachine:
    """The VM of ``mod`` built for ``target`` (built once per module object)."""
    key = (id(mod), target)
    held = _VMS.get(key)
    if held is None or held[0] is not mod:
        held = _VMS[key] = (mod, VirtualMachine(plait.build(mod, target=target)))
    return held[1]


def assert_close(got: Any, want: Any, rtol: float = RTOL, atol: float = ATOL) -> None:
    import torch

    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
