"""Commutative op patterns: a rule written once matches both operand orders, stays one
pattern (so ``m[p]`` and ``m.call(p)`` find the call) and binds each argument pattern to
the operand it matched."""

from __future__ import annotations

import numpy as np
import pytest
from transform_testlib import P

from plait.ir import Constant, assert_structural_equal
from plait.op import make_call
from plait.transform import (
    PatternError,
    Rule,
    is_const,
    is_op,
    match_block,
    rewrite_module,
    wildcard,
)
from plait.transform.fuse_ops import count_uses


def _block(body: str):
    lines = "\n".join(" " * 20 + line.strip() for line in body.splitlines())
    text = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((2, 2), "float32")) -> Tensor((2, 2), "float32"):
                with dataflow():
{lines}
                return out
    """
    mod = P(text)
    f = mod["main"]
    return mod, f.body.blocks[0], count_uses(f.body)


ORDERS = {
    "x first": 'out = add(x, const([[1.0, 2.0], [3.0, 4.0]], "float32"))\n'
               '                    output(out)',
    "const first": 'out = add(const([[1.0, 2.0], [3.0, 4.0]], "float32"), x)\n'
                   '                    output(out)',
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_one_pattern_matches_both_orders_with_bindings_right(order: str) -> None:
    x, c = wildcard(), is_const()
    add = is_op("add")(x, c).commutative()
    _, block, uses = _block(ORDERS[order])
    [m] = match_block(block.bindings, add, uses)
    assert m[x].name_hint == "x"                       # the variable, in either order
    assert isinstance(m[c], Constant)
    np.testing.assert_array_equal(m[c].data, [[1.0, 2.0], [3.0, 4.0]])
    assert m.call(add) is block.bindings[0].value        # the pattern itself, not a copy
    assert m.bindings == (0,)


def test_the_given_order_is_tried_first_and_the_other_only_when_it_fails() -> None:
    a, b = wildcard(), wildcard()
    add = is_op("add")(a, b).commutative()
    _, block, uses = _block(
        'y = relu(x)\n                    out = add(x, y)\n                    output(out)')
    found = list(_match_all(add, block, uses))
    # both orders match two wildcards: the given order first, then the swapped one
    assert [(m[a].name_hint, m[b].name_hint) for m in found] == [("x", "y"), ("y", "x")]


def _match_all(p, block, uses):
    from plait.transform.pattern_match import BlockGraph, match_at

    return match_at(p, block.bindings[-1].var, BlockGraph(block.bindings, uses))


def test_a_commutative_step_of_a_chain_takes_the_running_value_from_either_side() -> None:
    _, block, uses = _block(
        'a = relu(x)\n'
        '                    b = add(x, a)\n'      # the running value a on the right
        '                    out = multiply(b, x)\n'  # and on the left
        '                    output(out)')
    chain = is_op("relu").repeat(
        lambda y: is_op("add", "multiply")(y.single_use(), wildcard()).commutative())
    [m] = match_block(block.bindings, chain, uses)
    assert m.bindings == (0, 1, 2)


def test_a_rule_written_once_rewrites_both_orders() -> None:
    x, c = wildcard(), is_const(lambda d: bool(np.all(d == 0)), scalar=True)
    rule = Rule("add_zero", is_op("add")(x, c).commutative(), lambda m: make_call("relu", m[x]))
    zero = 'const(0.0, "float32")'
    before = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((2, 2), "float32")) -> Tensor((2, 2), "float32"):
                with dataflow():
                    a = add(x, {zero})
                    b = add({zero}, a)
                    output(b)
                return b
    """
    after = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 2), "float32")) -> Tensor((2, 2), "float32"):
                with dataflow():
                    a = relu(x)
                    b = relu(a)
                    output(b)
                return b
    """
    assert_structural_equal(rewrite_module(P(before), [rule]), P(after))


def test_commutative_keeps_constraints_and_prints_its_mark() -> None:
    p = is_op("multiply")(wildcard(), is_const()).commutative().has_dtype("float32")
    assert str(p) == "multiply(_, const)~[dtype float32]"
    q = is_op("multiply")(wildcard(), is_const()).commutative().has_dtype("int8")
    _, block, uses = _block(
        'out = multiply(const([[2.0, 2.0], [2.0, 2.0]], "float32"), x)\n'
        '                    output(out)')
    assert len(match_block(block.bindings, p, uses)) == 1
    assert match_block(block.bindings, q, uses) == []   # the dtype holds in neither order


def test_commutative_needs_two_argument_patterns() -> None:
    with pytest.raises(PatternError, match="give exactly two argument patterns"):
        is_op("add").commutative()
    with pytest.raises(PatternError, match="give exactly two argument patterns"):
        is_op("clip")(wildcard()).commutative()
