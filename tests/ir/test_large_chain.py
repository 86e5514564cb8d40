"""A function whose body is a chain of 100,000 bindings goes through build, print,
parse, visit, mutate, structural equality and hashing under the default recursion
limit, and through the whole default pipeline (``plait.build`` on numpy: every pass,
the transition checks, memory planning and VM code generation) to an executable whose
result matches numpy; an expression nested far deeper than the recursion limit is
normalized and printed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import plait
from plait.ir import (
    BlockBuilder,
    Call,
    IRModule,
    TensorType,
    Var,
    structural_equal,
    structural_hash,
)
from plait.ir.expr import Op
from plait.ir.parser import parse
from plait.ir.visitor import ExprMutator, ExprVisitor, post_order
from plait.runtime import VirtualMachine

N = 100_000
T = TensorType((1, "n"), "float32")


def relu_add_chain(ty: TensorType) -> IRModule:
    """``main(x)``: a dataflow chain of N bindings, relu and add(previous, x) in turn,
    ending with a relu."""
    bb = BlockBuilder()
    x = Var("x", ty)
    add, relu = Op.get("add"), Op.get("relu")
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(N - 1):
                v = bb.emit(Call(add, (v, x)) if i % 2 else Call(relu, (v,)), "lv")
            out = bb.emit_output(Call(relu, (v,)), "out")
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def chain() -> IRModule:
    assert sys.getrecursionlimit() <= 1000  # nothing below may rely on a raised limit
    return relu_add_chain(T)


class _Count(ExprVisitor):
    def __init__(self) -> None:
        self.calls = 0
        self.defs = 0

    def visit_call(self, call: Call) -> None:
        self.calls += 1

    def visit_var_def(self, var: Var) -> None:
        self.defs += 1


class _AddToSubtract(ExprMutator):
    def rewrite_call(self, call: Call) -> Call:
        if call.op is Op.get("add"):
            return Call(Op.get("subtract"), call.args, call.attrs, span=call.span)
        return call


def test_print_parse_compare(chain: IRModule) -> None:
    text = chain.script()
    assert text.count("\n") == N + 7
    parsed = parse(text)
    assert structural_equal(chain, parsed)
    assert structural_hash(chain) == structural_hash(parsed)


def test_visit_and_post_order(chain: IRModule) -> None:
    counter = _Count()
    counter.visit(chain)
    assert counter.calls == N
    assert counter.defs == N + 1  # the parameter and every binding
    assert sum(1 for _ in post_order(chain["main"])) > 2 * N


def test_mutate(chain: IRModule) -> None:
    assert ExprMutator(chain).visit_module(chain) is chain  # nothing changed: same object
    mutated = _AddToSubtract(chain).visit_module(chain)
    assert not structural_equal(chain, mutated)
    ops = [b.value.op.name for b in mutated["main"].body.blocks[0].bindings]
    assert ops.count("subtract") == (N - 1) // 2 and "add" not in ops


def test_deeply_nested_expression_normalizes_and_prints() -> None:
    depth = 20 * sys.getrecursionlimit()
    x = Var("x", T)
    e = x
    for _ in range(depth):
        e = Call(Op.get("relu"), (e,))
    assert repr(e).count("relu(") == depth  # printing a nested expression does not recurse
    bb = BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(e, "y"))
    mod = bb.get()
    (block,) = mod["main"].body.blocks
    assert len(block.bindings) == depth
    assert structural_equal(mod, parse(mod.script()))


def test_the_default_pipeline_builds_a_100k_chain() -> None:
    """plait.build on numpy of a 100,000-binding chain of static shape, under the
    default recursion limit; the result equals numpy's (the same float32 operations in
    the same order: exact), and memory planning keeps two tensors of the chain in its
    arena whatever its length (each value dies at the next binding)."""
    assert sys.getrecursionlimit() <= 1000
    exe = plait.build(relu_add_chain(TensorType((2, 3), "float32")), "numpy")
    assert len(exe.functions["main"].instructions) > 2 * N  # an allocation and a call each
    assert exe.attrs["planned_peak_bytes"] == 2 * 64 + 24  # two in the arena, the result
    data = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = data
    for i in range(N - 1):
        want = want + data if i % 2 else np.maximum(want, np.float32(0))
    want = np.maximum(want, np.float32(0))
    got = VirtualMachine(exe)["main"](data)
    np.testing.assert_array_equal(got, want)  # tolerance 0: the same float32 operations
