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


class _Node:
    """A cyclic-garbage test object (weak-referenceable)."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_executable_goes_to_the_oldest_generation_and_no_garbage_is_kept():
    """``build`` resumes the collector with what survived it in the oldest generation
    (no young collection scanning the new executable); a garbage cycle made before the
    build is still freed by ``gc.collect()``; the caller's frozen objects stay frozen."""
    import gc
    import weakref

    # (the first build of a process loads the compiler, whose imports may collect: a
    # build before makes the test's own build the same in any process)
    plait.build(two_params("x", "y"), "numpy")
    gc.collect()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    del a, b
    exe = plait.build(two_params("x", "y"), "numpy")
    ins = exe.functions["main"].instructions[0]
    assert any(o is ins for o in gc.get_objects(generation=2))
    assert dead() is not None  # (moved with the rest, not collected yet)
    gc.collect()
    assert dead() is None
    vm = VirtualMachine(exe)
    np.testing.assert_array_equal(vm["main"](x=np.ones(4, np.float32), y=np.ones(4, np.float32)),
                                  np.zeros(4, np.float32))

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        exe = plait.build(two_params("x", "y"), "numpy")
        # none added, and the caller's stay frozen (an unfreeze would release them all);
        # a few may be freed meanwhile: an entry a bounded cache evicts during the build
        # (which caches are full depends on the tests run before in the process)
        assert frozen - 64 <= gc.get_freeze_count() <= frozen
        assert exe.functions["main"].instructions
    finally:
        gc.unfreeze()


def test_the_source_map_names_each_call_by_its_span():
    """The executable labels each call with what its span names (``plait run
    --profile``): a module parsed from text by the line of its binding, an imported
    one by its note (the ONNX node), a span with both by both."""
    from plait.ir.expr import Span
    from plait.runtime.vm import SOURCE_MAP

    text = """
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            a = exp(x)
            b = add(a, x)
            output(b)
        return b
"""
    exe = plait.build(plait.parse(text), "numpy")
    calls = [pc for pc, ins in enumerate(exe.functions["main"].instructions)
             if type(ins).__name__ == "Call"]
    assert sorted(exe.attrs[SOURCE_MAP]["main"].values()) == ["<string>:7", "<string>:8"]
    assert sorted(map(int, exe.attrs[SOURCE_MAP]["main"])) == calls

    x = Var("x", TensorType((4,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(make_call("exp", x, span=Span("/models/net.onnx", 0, 0, "Exp_0")))
            b = bb.emit(make_call("add", a, x, span=Span("/src/net.py", 12, 4, "add_1")))
            out = bb.emit_output(make_call("relu", b, span=Span("/src/net.py", 13, 0, "")))
        bb.emit_func_output(out)
    exe = plait.build(bb.get(), "numpy")
    assert sorted(exe.attrs[SOURCE_MAP]["main"].values()) == [
        "Exp_0", "add_1 at net.py:12", "net.py:13"]
