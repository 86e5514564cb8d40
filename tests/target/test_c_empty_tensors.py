"""Calls on tensors with a zero-size dimension: a kernel over zero elements has no
loop to run, so the ``c`` target lowers them to the library call; the result matches
numpy."""

from __future__ import annotations

import numpy as np

import plait
from plait.runtime import VirtualMachine
from plait.target.c import library_calls


def test_zero_size_tensors_use_the_library_and_match_numpy() -> None:
    mod = plait.parse(
        """
@module
class M:
    @function
    def main(x: Tensor((3, 0), "float32"),
             y: Tensor((3, 4), "float32")) -> Tensor((3, 4), "float32"):
        with dataflow():
            s = sum(x, axis=1, keepdims=True)
            out = add(y, s)
            output(out)
        return out
"""
    )
    x = np.zeros((3, 0), np.float32)
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    for target in (plait.Target("c"), plait.Target("c", fuse=False)):
        exe = plait.build(mod, target)
        np.testing.assert_array_equal(VirtualMachine(exe)["main"](x, y), y)
    unfused = plait.Target("c", fuse=False)
    lowered = plait.default_pipeline(unfused)(mod.with_attrs(target=unfused))
    assert library_calls(lowered) == ["sum"]
