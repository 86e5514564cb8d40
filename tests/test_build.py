"""Tests of ``plait.build``'s checks of its input module."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.build import BuildError
from plait.ir import BlockBuilder, IRModule, TensorType, Var
from plait.op import make_call
from plait.runtime import VirtualMachine


def two_params(first: str, second: str) -> IRModule:
    """``main(first, second) = first - second`` on float32 vectors of 4."""
    t = TensorType((4,), "float32")
    a, b = Var(first, t), Var(second, t)
    bb = BlockBuilder()
    with bb.function("main", [a, b]):
        bb.emit_func_output(bb.emit(make_call("subtract", a, b)))
    return bb.get()


def test_duplicate_parameter_names_are_refused_before_any_pass_runs():
    with pytest.raises(BuildError, match="function 'main' has more than one parameter named 'x'"):
        plait.build(two_params("x", "x"), "numpy")


def test_distinct_parameter_names_build_and_run():
    vm = VirtualMachine(plait.build(two_params("x", "y"), "numpy"))
    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(vm["main"](y=b, x=a), a - b)
