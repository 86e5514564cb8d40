"""Every walk over kernel IR dispatches through a type table that has a rule for every
node type: a node type added to plait.kernel.ir without a printer, simplifier, rewriter,
verifier, interpreter or C emitter entry fails here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import plait.codegen.c.emit
import plait.kernel.indexsimp
import plait.kernel.interp
import plait.kernel.rewrite
import plait.kernel.simplify
import plait.kernel.text
import plait.kernel.verify  # noqa: F401  (each module builds its tables on import)
from plait.kernel import ir
from plait.kernel.dispatch import (
    TABLES,
    NoRuleError,
    TypeTable,
    concrete_node_classes,
    missing_rules,
)

WALKS = {
    "kernel text printer", "kernel simplifier", "kernel statement simplifier",
    "kernel expression rewriter", "kernel statement rewriter", "kernel verifier",
    "kernel interpreter", "kernel C emitter", "kernel expression children",
    "kernel statement children", "kernel statement expressions", "kernel index keys",
}


def test_every_walk_has_a_rule_for_every_node_type() -> None:
    assert WALKS <= {t.what for t in TABLES}
    assert {c.__name__ for c in concrete_node_classes(ir.Stmt)} == {
        "Seq", "For", "BufferStore", "Let", "IfThenElse", "Allocate", "Evaluate"}
    assert len(concrete_node_classes(ir.PrimExpr)) == 24
    assert missing_rules() == []


def test_a_node_type_added_without_rules_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass(frozen=True, eq=False, slots=True, repr=False)
    class Popcount(ir.PrimExpr):
        a: ir.PrimExpr = None  # type: ignore[assignment]

    Popcount.__module__ = "plait.kernel.ir"
    monkeypatch.setattr(ir, "Popcount", Popcount, raising=False)
    missing = missing_rules()
    walks = {w for w, name in missing if name == "Popcount"}
    assert walks == {t.what for t in TABLES if t.base is ir.PrimExpr}
    # a walk still treats a node it has no rule for as before: the simplifier keeps it
    node = Popcount(ir.IntImm(1, "int64"))
    assert plait.kernel.simplify.simplify_node(node) is node


def test_a_variable_of_a_var_subclass_is_a_leaf_of_every_walk() -> None:
    """The compute DSL's ReduceAxis is a Var: the interpreter names it (as the isinstance
    tests did), the simplifier keeps it."""
    import numpy as np

    from plait.kernel.dsl import ReduceAxis
    from plait.kernel.interp import run_kernel

    i = ReduceAxis(4, "i")
    a = ir.Buffer("a", (4,), "float32")
    out = ir.Buffer("out", (4,), "float32")
    k = ir.Kernel((a, out), ir.For(i, ir.IntImm(4, "int64"), ir.BufferStore(
        out, (i,), ir.BufferLoad(a, (i,)) * ir.FloatImm(2.0, "float32"))), 1)
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    run_kernel(k, [x, y])
    np.testing.assert_array_equal(y, x * 2)   # numpy reference, exact (one product)
    assert plait.kernel.simplify.simplify_node(i) is i


def test_a_table_finds_a_subclass_through_its_base_and_refuses_two_entries() -> None:
    t: TypeTable = TypeTable("test walk", ir.PrimExpr, {ir.BinaryOp: "binary", ir.Add: "add"})
    TABLES.remove(t)
    assert t[ir.Add] == "add" and t[ir.Mul] == "binary" and t[ir.LT] == "binary"
    assert t.covers(ir.GE) and not t.covers(ir.Var)
    with pytest.raises(NoRuleError, match="test walk: no rule for kernel IR node type Var"):
        t[ir.Var]
    with pytest.raises(NoRuleError, match="node type Add has two entries"):
        TypeTable("test walk", ir.PrimExpr, {ir.Add: 1, (ir.Sub, ir.Add): 2})
