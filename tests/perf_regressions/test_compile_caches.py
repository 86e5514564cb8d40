"""Correctness of the compile-time speed work (issue 7, pipeline time per binding).
No timing asserts: each cache and fast path must give exactly what the uncached or
general path gives.

* ``normalize_attrs`` caches checked attributes per op, keyed on values *and* their
  Python types: ``1``, ``1.0`` and ``True`` (and ``0.0``/``-0.0``) never share an entry;
* ``OpDef.infer_call`` caches inferred types when inference sees only types (checked
  attributes, variable arguments); failures are never cached;
* ``ExprMutator.visit_expr`` has a fast path for calls on leaves and tuples of leaves
  that calls the same hooks in the same order as the general walk;
* ToNonDataflow keeps the types of the calls it renames variables in;
* PlanMemory's variable scan agrees with the generic post-order walk.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import plait
from plait.ir import (
    BlockBuilder,
    DataflowVar,
    ExternFunc,
    TensorType,
    Tuple,
    TupleType,
    Var,
    const,
)
from plait.ir import visitor as vis
from plait.ir.visitor import ExprMutator, post_order, used_vars
from plait.op import make_call
from plait.op.registry import OpAttrError, OpTypeError, get_op, normalize_attrs

T = TensorType((2, 3), "float32")


def test_attrs_cache_tells_bool_int_and_float_apart() -> None:
    a = make_call("concat", Tuple((Var("x", T), Var("y", T))), axis=1)
    assert a.attrs["axis"] == 1 and type(a.attrs["axis"]) is int
    with pytest.raises(OpAttrError, match="must be an int"):
        make_call("concat", Tuple((Var("x", T), Var("y", T))), axis=True)
    with pytest.raises(OpAttrError, match="must be an int"):
        make_call("concat", Tuple((Var("x", T), Var("y", T))), axis=1.0)
    # a float attribute given as an int is converted, given as a float is kept
    x = Var("x", T)
    assert type(make_call("leaky_relu", x, alpha=1).attrs["alpha"]) is float
    assert make_call("leaky_relu", x, alpha=1.0).attrs["alpha"] == 1.0
    neg = make_call("leaky_relu", x, alpha=-0.0).attrs["alpha"]
    pos = make_call("leaky_relu", x, alpha=0.0).attrs["alpha"]
    assert math.copysign(1, neg) == -1 and math.copysign(1, pos) == 1
    # "any" attributes: 1 and True are different values
    one = make_call("full_like", x, fill_value=1).attrs["fill_value"]
    true = make_call("full_like", x, fill_value=True).attrs["fill_value"]
    assert type(one) is int and type(true) is bool


def test_attrs_cache_returns_the_uncached_result() -> None:
    opdef = get_op("max_pool2d")
    for given in [{}, {"pool_size": 2}, {"pool_size": [2, 2], "strides": (1, 1)},
                  {"pool_size": (2, 2)}, {"padding": np.array([1, 1, 1, 1])},
                  {"padding": (np.int64(1),) * 4}, {"layout": "NHWC"}]:
        first = normalize_attrs(opdef, dict(given))
        again = normalize_attrs(opdef, dict(given))
        assert dict(first) == dict(again)
        assert [type(v) for v in first.values()] == [type(v) for v in again.values()]
        assert again.checked_by is opdef
    with pytest.raises(OpAttrError, match="no attribute"):
        normalize_attrs(opdef, {"pool": 2})
    with pytest.raises(OpAttrError, match="no attribute"):  # errors are never cached
        normalize_attrs(opdef, {"pool": 2})


def test_infer_cache_keeps_errors_and_distinguishes_types() -> None:
    x, y = Var("x", T), Var("y", TensorType((3, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        a = bb.emit(make_call("add", x, x))
        b = bb.emit(make_call("add", a, x))
        bb.emit_func_output(b)
    assert a.ty == T and b.ty == T
    call = make_call("add", x, y)
    opdef = get_op("add")
    for _ in range(2):
        with pytest.raises(OpTypeError):
            opdef.infer_call(call, (x.ty, y.ty))
    # same op and attributes, other argument types: other result
    z = Var("z", TensorType((2, 3), "int32"))
    assert opdef.infer_call(make_call("add", z, z), (z.ty, z.ty))[0].dtype == "int32"
    # a constant argument is never cached on (its value could matter)
    c = const(np.ones((2, 3), "float32"))
    ty, _ = opdef.infer_call(make_call("add", x, c), (x.ty, c.ty))
    assert ty == T


class _Recorder(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def rewrite_var(self, v: Var) -> Var:
        self.seen.append(f"var {v.name_hint}")
        return v

    def rewrite_tuple(self, t: Tuple) -> Tuple:
        self.seen.append(f"tuple {len(t.fields)}")
        return t

    def rewrite_extern_func(self, e: ExternFunc) -> ExternFunc:
        self.seen.append(f"extern {e.symbol}")
        return e

    def rewrite_call(self, c):  # type: ignore[no-untyped-def]
        self.seen.append("call")
        return c


def test_mutator_fast_path_matches_general_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = Var("x", T), DataflowVar("y", T)
    new_x = Var("x2", T)
    tup = Tuple((x, y, x))
    exprs = [
        make_call("add", x, y),
        make_call("add", x, x),
        make_call("call_extern", ExternFunc("numpy.add"), tup, out=T),
        make_call("builtin.call_dps", ExternFunc("numpy.add"), tup, tup),
    ]

    def run() -> list:
        out = []
        for e in exprs:
            m = _Recorder()
            m.var_remap[x] = new_x
            r = m.visit_expr(e)
            out.append((m.seen, type(r).__name__, [type(a).__name__ for a in r.args],
                        [getattr(a, "name_hint", None) for a in post_order(r)], r.ty))
        return out

    fast = run()
    monkeypatch.setattr(vis, "_FLAT_LEAVES", frozenset())
    assert run() == fast


def test_to_non_dataflow_keeps_call_types() -> None:
    x = Var("x", T)
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(make_call("add", x, x))
            b = bb.emit(make_call("multiply", a, x))
            out = bb.emit_output(b)
        bb.emit_func_output(out)
    mod = plait.transform.make_pass("ToNonDataflow")(
        bb.get().with_attrs(phase="lowering")
    )
    body = mod["main"].body
    (block,) = body.blocks
    assert all(not isinstance(b.var, DataflowVar) for b in block.bindings)
    assert all(b.value.ty == T for b in block.bindings)
    assert block.bindings[1].value.args[0] is block.bindings[0].var


def test_used_vars_fast_path_matches_post_order() -> None:
    """``used_vars`` (DeadCodeElimination's and PlanMemory's scan) reads a flat call
    directly; it must find the variables the general walk finds."""
    x, y, d = Var("x", T), Var("y", T), DataflowVar("d", T)
    values = [
        x,
        d,
        make_call("add", x, d),
        make_call("add", x, x),
        make_call("call_extern", ExternFunc("numpy.add"), Tuple((x, d)), out=T),
        Tuple((x, y)),
        make_call("concat", Tuple((x, make_call("relu", y))), axis=0),
        const(1.0),
    ]
    for v in values:
        fast = {id(n) for n in used_vars(v)}
        slow = {id(n) for n in post_order(v) if isinstance(n, Var)}
        assert fast == slow, v


def test_build_of_a_long_chain_still_runs() -> None:
    x = Var("x", TensorType((4, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(50):
                v = bb.emit(make_call("add" if i % 2 else "multiply", v, x))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    exe = plait.build(bb.get(), "numpy")
    data = np.full((4, 4), 0.5, "float32")
    expected = data
    for i in range(50):
        expected = expected + data if i % 2 else expected * data
    from plait.runtime import VirtualMachine

    got = VirtualMachine(exe)["main"](data)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert isinstance(TupleType((T,)), TupleType)


def test_structure_check_reports_tuple_uses_in_the_general_order() -> None:
    """The tuple fast path of the A-normal-form check reports undefined variables in
    the order of the general walk (last field first)."""
    from plait.ir import BindingBlock, Function, IRModule, SeqExpr, VarBinding
    from plait.ir.well_formed import well_formed

    a, b, z = Var("a", T), Var("b", T), Var("z", T)
    call = make_call("concat", Tuple((a, b)), axis=0)
    body = SeqExpr((BindingBlock((VarBinding(z, call),)),), z, ty=T)
    mod = IRModule({"main": Function((), body, T)}, {"phase": "optimization"})
    msgs = [v.message for v in well_formed(mod) if "before it is defined" in v.message]
    assert [m.split("'")[1] for m in msgs] == ["b", "a"]
