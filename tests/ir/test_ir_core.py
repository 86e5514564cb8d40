"""Core behaviour of the graph IR: types, the block builder, structural equality and
hashing, visitors and mutators, and their error messages."""

from __future__ import annotations

import copy
import functools
import pickle
from dataclasses import FrozenInstanceError, dataclass, fields, replace

import numpy as np
import pytest

from plait.ir import (
    Attrs,
    BaseFunc,
    BindingBlock,
    BlockBuilder,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    FuncType,
    GlobalVar,
    IRModule,
    IRTypeError,
    ObjectType,
    PrimType,
    SeqExpr,
    ShapeType,
    Span,
    StructuralMismatch,
    TensorType,
    Tuple,
    TupleType,
    Var,
    VarBinding,
    assert_structural_equal,
    normalize_module,
    structural_equal,
    structural_hash,
)
from plait.ir.expr import Op, new_call, new_tuple, new_var, new_var_binding
from plait.ir.structural import _compare, _generic_hash
from plait.ir.visitor import SKIP, ExprMutator, ExprVisitor, post_order
from plait.op import make_call

F32 = TensorType((2, 3), "float32")


def chain(names=("a", "b"), ty=F32, ops=("relu", "relu")) -> IRModule:
    bb = BlockBuilder()
    x = Var("x", ty)
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for name, op in zip(names, ops):
                v = bb.emit(make_call(op, v), name)
            out = bb.emit_output(v, "out")
        bb.emit_func_output(out)
    return bb.get()


# ---------------------------------------------------------------- types


def test_tensor_type_checks_its_fields():
    assert str(TensorType((1, "n"), "float32")) == 'Tensor((1, n), "float32")'
    assert str(TensorType(("n",), None)) == "Tensor((n,), None)"
    assert str(TupleType((F32, ShapeType(2)))) == 'Tuple(Tensor((2, 3), "float32"), Shape(2))'
    assert str(FuncType((F32,), ObjectType())) == 'Callable((Tensor((2, 3), "float32"), ), Object)'
    assert str(PrimType("int32")) == 'Prim("int32")'
    assert TensorType([2, 3], "float32") == F32  # lists become tuples
    with pytest.raises(TypeError, match="non-negative"):
        TensorType((-1,), "float32")
    with pytest.raises(TypeError, match="must be an int or a name"):
        TensorType((True,), "float32")
    with pytest.raises(TypeError, match="must be an identifier"):
        TensorType(("n m",), "float32")
    with pytest.raises(TypeError, match="unknown dtype 'float8'; expected one of bool, int8"):
        TensorType((1,), "float8")
    assert TensorType((1,), np.float32).dtype == "float32"


def test_tensor_sizes_must_fit_int64():
    assert TensorType((2**63 - 1,), "int8").shape == (2**63 - 1,)
    assert TensorType((0, 2**62, 4), "int8").shape == (0, 2**62, 4)  # no elements
    with pytest.raises(TypeError, match=r"dimension 9223372036854775808 does not fit in int64"):
        TensorType((2**63,), "float32")
    with pytest.raises(TypeError, match="does not fit in int64"):
        TensorType((0, 2**64), "float32")
    with pytest.raises(TypeError, match=r"\(4611686018427387904, 4\) has more than 2\*\*63-1"):
        TensorType((2**62, 4), "float32")


# ---------------------------------------------------------------- builder


def test_builder_normalizes_nested_calls_to_a_normal_form():
    bb = BlockBuilder()
    x = Var("x", F32)
    with bb.function("main", [x]):
        y = bb.emit(make_call("relu", make_call("add", x, make_call("relu", x))), "y")
        bb.emit_func_output(y)
    (block,) = bb.get()["main"].body.blocks
    assert [b.value.op.name for b in block.bindings] == ["relu", "add", "relu"]
    assert all(b.var.ty == F32 for b in block.bindings)


def test_builder_broadcasts_symbolic_dimensions():
    bb = BlockBuilder()
    x, y = Var("x", TensorType(("n", 1), "float32")), Var("y", TensorType((1, 4), "float32"))
    with bb.function("main", [x, y]):
        z = bb.emit(make_call("add", x, y))
        bb.emit_func_output(z)
    assert z.ty == TensorType(("n", 4), "float32")


def test_builder_type_error_names_function_binding_op_and_argument():
    bb = BlockBuilder()
    x, y = Var("x", F32), Var("y", TensorType((2, 3), "int32"))
    with pytest.raises(IRTypeError) as info:
        with bb.function("main", [x, y]):
            bb.emit(make_call("add", x, y), "z")
    msg = str(info.value)
    assert "in function 'main', binding 'z'" in msg
    assert "add: argument 1 (y) has dtype int32, expected float32" in msg
    assert info.value.function == "main" and info.value.binding == "z"


def test_inference_cache_does_not_hide_errors():
    bb = BlockBuilder()
    x, y = Var("x", F32), Var("y", TensorType((3, 3), "float32"))
    with bb.function("main", [x, y]):
        a = bb.emit(make_call("add", x, x))
        b = bb.emit(make_call("add", a, x))  # same types: answered from the cache
        assert a.ty is b.ty
        with pytest.raises(IRTypeError, match="cannot broadcast dimension"):
            bb.emit(make_call("add", a, y), "bad")
        bb.emit_func_output(b)


def test_builder_keeps_the_type_of_an_op_call_on_variables_per_key():
    """The builder keeps the type inferred for a call of an op on variables per op,
    attributes and the variables' classes and types: the same key gets the same type,
    another key its own, a failure is never kept, and an annotation that does not fit
    still sends the call to the general path (which reports it)."""
    bb = BlockBuilder()
    x, y = Var("x", F32), Var("y", TensorType((3, 3), "float32"))
    d = DataflowVar("d", F32)
    with bb.function("main", [x, y]):
        a = bb.emit(make_call("add", x, x))  # (a type object of its own, equal to F32)
        b = bb.emit(make_call("add", a, x))
        c = bb.emit(make_call("add", b, x))  # b's key: kept
        assert a.ty is b.ty is c.ty and len(bb._inferred) == 2
        e = bb.emit(make_call("add", y, y))
        assert e.ty == TensorType((3, 3), "float32") and len(bb._inferred) == 3
        call = make_call("add", d, x)  # another class of variable: another key
        assert bb._simple_call(call).ty == F32 and len(bb._inferred) == 4
        for _ in range(2):
            with pytest.raises(IRTypeError, match="cannot broadcast dimension"):
                bb.emit(make_call("add", a, y), "bad")
        assert len(bb._inferred) == 4
        wrong = Call(Op.get("add"), (a, x), make_call("add", a, x).attrs,
                     TensorType((9,), "float32"))
        assert bb._simple_call(wrong) is None
        with pytest.raises(IRTypeError):
            bb.normalize(wrong)
        bb.emit_func_output(b)


def test_builder_recovers_after_a_return_type_error():
    bb = BlockBuilder()
    x = Var("x", F32)
    with pytest.raises(IRTypeError, match="declared return type is Tensor"):
        with bb.function("f", [x], ret_ty=TensorType((3,), "float32")):
            bb.emit_func_output(x)
    with bb.function("g", [x]):  # the builder is still usable
        bb.emit_func_output(x)
    assert list(bb.get()) == ["g"]


def test_builder_rejects_misuse():
    bb = BlockBuilder()
    x = Var("x", F32)
    with pytest.raises(RuntimeError, match="not finished with emit_func_output"):
        with bb.function("f", [x]):
            pass
    with pytest.raises(RuntimeError, match="inside a dataflow block"):
        with bb.function("f", [x]):
            with bb.dataflow():
                bb.emit_func_output(x)
    with pytest.raises(RuntimeError, match="outside a dataflow block"):
        with bb.function("f", [x]):
            bb.emit_output(x)
    with pytest.raises(RuntimeError, match="outside a function"):
        with bb.dataflow():
            pass


def test_dataflow_outputs_and_empty_dataflow_blocks():
    bb = BlockBuilder()
    x = Var("x", F32)
    with bb.function("main", [x]):
        a = bb.emit(make_call("relu", x), "a")
        with bb.dataflow():
            pass  # empty: leaves a single plain block
        b = bb.emit(make_call("relu", a), "b")
        with bb.dataflow():
            c = bb.emit(make_call("relu", b), "c")
            d = bb.emit_output(make_call("relu", c), "d")
        bb.emit_func_output(d)
    blocks = bb.get()["main"].body.blocks
    assert [type(b) for b in blocks] == [BindingBlock, DataflowBlock]
    assert len(blocks[0].bindings) == 2
    assert type(c) is DataflowVar and type(d) is Var


def test_called_global_and_variables_are_normalized():
    """A called GlobalVar gets its type, and a called variable whose binding gained a
    type is replaced by the typed variable."""
    x = Var("x", F32)
    p = Var("p", F32)
    inner = Function((p,), SeqExpr((), p), F32)
    f = Var("f")  # untyped: normalization types it
    y, z = Var("y"), Var("z")
    body = SeqExpr(
        (
            BindingBlock(
                (
                    VarBinding(f, inner),
                    VarBinding(y, Call(f, (x,))),
                    VarBinding(z, Call(GlobalVar("main"), (y,))),
                )
            ),
        ),
        z,
    )
    mod = normalize_module(IRModule({"main": Function((x,), body, F32)}))
    fb, yb, zb = mod["main"].body.blocks[0].bindings
    assert isinstance(fb.var.ty, FuncType)
    assert yb.value.op is fb.var  # the use follows the typed variable
    assert yb.var.ty == F32
    assert isinstance(zb.value.op.ty, FuncType) and zb.var.ty == F32


# ---------------------------------------------------------------- structural equality


def test_equality_is_up_to_renaming_of_bound_variables():
    a, b = chain(("a", "b")), chain(("p", "q"))
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    c = chain(ty=TensorType((3,), "float32"))
    assert not structural_equal(a, c)
    assert structural_hash(a) != structural_hash(c)


def test_assert_structural_equal_names_the_first_difference():
    a = chain()
    b = chain(ty=TensorType((2, 4), "float32"))
    with pytest.raises(StructuralMismatch) as info:
        assert_structural_equal(a, b)
    err = info.value
    assert err.path == "main.params[0].ty"
    assert "different values" in str(err) and 'Tensor((2, 4), "float32")' in str(err)


def test_free_variables_and_map_free_vars():
    x, y = Var("x", F32), Var("y", F32)
    ex, ey = make_call("relu", x), make_call("relu", y)
    assert not structural_equal(ex, ey)
    assert structural_equal(ex, ey, map_free_vars=True)
    assert structural_equal(ex, make_call("relu", x))
    assert structural_hash(ex, map_free_vars=True) == structural_hash(ey, map_free_vars=True)
    assert structural_hash(ex) != structural_hash(ey)


def test_constants_compare_bitwise():
    nan = Constant(np.array([np.nan, 1.0], "float32"))
    assert structural_equal(nan, Constant(np.array([np.nan, 1.0], "float32")))
    assert not structural_equal(Constant(np.array(0.0)), Constant(np.array(-0.0)))
    assert not structural_equal(Constant(np.array(1, "int32")), Constant(np.array(1, "int64")))
    assert structural_hash(nan) == structural_hash(Constant(np.array([np.nan, 1.0], "float32")))


def test_block_kinds_and_attributes_are_compared():
    x = Var("x", F32)
    a = make_call("sum", x, axis=(0,))
    assert not structural_equal(a, make_call("sum", x, axis=(1,)))
    assert structural_equal(a, make_call("sum", x, axis=(0,)))
    one_int = Call(Op.get("relu"), (x,), {"k": 1})
    one_float = Call(Op.get("relu"), (x,), {"k": 1.0})
    assert not structural_equal(one_int, one_float)  # 1 and 1.0 are different values
    b = VarBinding(Var("y", F32), a)
    assert not structural_equal(BindingBlock((b,)), DataflowBlock((b,)))
    assert structural_hash(BindingBlock((b,))) != structural_hash(DataflowBlock((b,)))


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class _Loop(BaseFunc):
    """A node class the fast paths do not know (like kernel IR): it defines a
    variable and has a body."""

    loop_var: Var = None  # type: ignore[assignment]
    body: Expr = None  # type: ignore[assignment]


_Loop._def_fields = ("loop_var",)  # type: ignore[attr-defined]


def _loop(name: str, op: str = "relu") -> _Loop:
    v = Var(name, F32)
    args = (v,) if op == "relu" else (v, v)
    return _Loop(loop_var=v, body=make_call(op, *args))


def test_node_builders_make_the_constructors_nodes_frozen():
    """new_var, new_call, new_tuple and new_var_binding (the passes' per-binding
    builders) make the node the class's constructor makes from the same arguments: of
    the class itself, with the same fields, as frozen (assigning or deleting a field
    raises), and copied, replaced and pickled as any node."""
    x = Var("x", F32)
    relu = Op.get("relu")
    span = Span("m.py", 3, 4)
    attrs = Attrs({"k": 1})
    pairs = [
        (new_var("v", F32, span), Var("v", F32, span)),
        (new_var("w", None, None), Var("w")),
        (new_call(relu, (x,), attrs, F32, span), Call(relu, [x], attrs, F32, span)),
        (new_call(relu, (x, x), Attrs({}), None, None), Call(relu, (x, x))),
        (new_tuple((x, x), TupleType((F32, F32)), None), Tuple([x, x], TupleType((F32, F32)))),
        (new_tuple((), None, span), Tuple((), span=span)),
        (new_var_binding(x, relu), VarBinding(x, relu)),
    ]
    for built, made in pairs:
        cls = type(made)
        assert type(built) is cls
        for f in fields(cls):
            a, b = getattr(built, f.name), getattr(made, f.name)
            assert a is b or a == b, f.name
        for f in fields(built):
            with pytest.raises(FrozenInstanceError):
                setattr(built, f.name, None)
            with pytest.raises(FrozenInstanceError):
                delattr(built, f.name)
        for again in (replace(built), copy.copy(built)):
            assert type(again) is cls and again is not built
            assert all(getattr(again, f.name) is getattr(built, f.name) for f in fields(cls))
        again = pickle.loads(pickle.dumps(built))
        assert type(again) is cls and repr(again) == repr(built)
        assert built != made  # equality is identity


def test_unknown_node_classes_take_the_generic_paths():
    mod = IRModule({"k": _loop("i"), "main": chain()["main"]})
    same = IRModule({"k": _loop("j"), "main": chain(("u", "v"))["main"]})
    other = IRModule({"k": _loop("j", "subtract"), "main": chain()["main"]})
    assert structural_equal(mod, same)
    assert structural_hash(mod) == structural_hash(same)
    assert not structural_equal(mod, other)
    with pytest.raises(StructuralMismatch, match=r"k\.body\.op"):
        assert_structural_equal(mod, other)


def test_fast_and_generic_paths_agree():
    cases = [
        (chain(), chain(("p", "q"))),
        (chain(), chain(ty=TensorType((2, 4), "float32"))),
        (chain(), chain(names=("a",), ops=("relu",))),
        (make_call("sum", Var("x", F32), axis=(0,)), make_call("sum", Var("x", F32), axis=(0,))),
    ]
    for a, b in cases:
        assert structural_equal(a, b) == (_compare(a, b, "", False) is None)
        assert structural_equal(a, b, True) == (_compare(a, b, "", True) is None)
        same_hash = structural_hash(a) == structural_hash(b)
        assert same_hash == (_generic_hash(a, False) == _generic_hash(b, False))


# ---------------------------------------------------------------- visitors


class _Trace(ExprVisitor):
    def __init__(self, skip_calls: bool = False) -> None:
        self.events: list[str] = []
        self.skip_calls = skip_calls

    def visit_function(self, f: Function) -> None:
        self.events.append("function")

    def visit_var_def(self, v: Var) -> None:
        self.events.append(f"def {v.name_hint}")

    def visit_var(self, v: Var) -> None:
        self.events.append(f"use {v.name_hint}")

    def visit_binding(self, b: VarBinding) -> None:
        self.events.append("binding")

    def visit_call(self, c: Call) -> object:
        self.events.append(f"call {c.op.name}")
        return SKIP if self.skip_calls else None

    def visit_op(self, op: Op) -> None:
        self.events.append(f"op {op.name}")

    def visit_tuple(self, t: Tuple) -> None:
        self.events.append("tuple")


def test_visitor_walks_in_pre_order_with_definition_hooks():
    bb = BlockBuilder()
    x = Var("x", F32)
    with bb.function("main", [x]):
        a = bb.emit(make_call("concat", Tuple((x, x)), axis=0), "a")
        bb.emit_func_output(a)
    t = _Trace()
    t.visit(bb.get())
    assert t.events == [
        "function",
        "def x",
        "binding",
        "def a",
        "call concat",
        "op concat",
        "tuple",
        "use x",
        "use x",
        "use a",
    ]
    skipping = _Trace(skip_calls=True)
    skipping.visit(bb.get())
    assert "op concat" not in skipping.events and "use a" in skipping.events


def test_visitor_generic_path_reports_definitions():
    t = _Trace()
    t.visit(_loop("i"))
    assert t.events == ["def i", "call relu", "op relu", "use i"]


def test_post_order_children_first_each_node_once():
    x = Var("x", F32)
    shared = make_call("relu", x)
    e = make_call("add", shared, shared)
    order = list(post_order(e))
    assert order[-1] is e
    assert order.index(shared) < order.index(e)
    assert sum(1 for n in order if n is shared) == 1


def test_mutator_returns_the_same_objects_and_rebuilds_only_changes():
    mod = chain(names=("a", "b", "c"), ops=("relu", "relu", "relu"))
    assert ExprMutator(mod).visit_module(mod) is mod

    class _SecondToAdd(ExprMutator):
        def rewrite_call(self, call: Call) -> Expr:
            if call.args and getattr(call.args[0], "name_hint", "") == "a":
                return make_call("add", call.args[0], call.args[0])
            return call

    new = _SecondToAdd(mod).visit_module(mod)
    old_b = mod["main"].body.blocks[0].bindings
    new_b = new["main"].body.blocks[0].bindings
    assert new_b[0] is old_b[0]  # untouched binding: the very same object
    assert new_b[1].value.op.name == "add" and new_b[1] is not old_b[1]
    assert new_b[2].value.args[0] is new_b[1].var or new_b[2] is old_b[2]
    assert not structural_equal(mod, new)


def bb_tuple() -> IRModule:
    bb = BlockBuilder()
    x = Var("x", F32)
    with bb.function("main", [x]):
        a = bb.emit(make_call("concat", Tuple((x, x)), axis=0), "a")
        bb.emit_func_output(a)
    return bb.get()


def test_visitors_are_freed_without_the_cycle_collector():
    """A visitor or mutator that ran is freed when dropped, with the modules it holds:
    its hook caches hold the class's functions, not bound methods (a bound method in
    the instance's own cache was a reference cycle, freed only by the collector,
    which plait.build pauses).  Hooks of every kind, static and class methods too."""
    import gc
    import weakref

    mod = chain(names=("a", "b"), ops=("relu", "relu"))

    class _Negate(ExprMutator):
        def rewrite_call(self, call: Call) -> Expr:
            return make_call("neg", call.args[0]) if call.op.name == "relu" else call

        @staticmethod
        def rewrite_var(v: Expr) -> Expr:
            return v

    class _Count(_Trace):
        @classmethod
        def visit_op(cls, op: Op) -> None:
            cls.ops = [*getattr(cls, "ops", []), op.name]

        def _seen(self, what: str, node: Expr) -> None:
            self.events.append(what)

        visit_tuple = functools.partialmethod(_seen, "tuple")   # a descriptor

    was = gc.isenabled()
    gc.disable()
    try:
        m = _Negate(mod)
        new = m.visit_module(mod)
        v = _Count()
        v.visit(new)
        refs = [weakref.ref(m), weakref.ref(v)]
        del m, v
        assert [r() for r in refs] == [None, None]
    finally:
        if was:
            gc.enable()
    ops = [b.value.op.name for b in new["main"].body.blocks[0].bindings
           if isinstance(b.value, Call)]
    assert ops == ["neg", "neg"] and _Count.ops == ["neg", "neg"]
    w = _Count()
    w.visit(bb_tuple())
    assert w.events.count("tuple") == 1 and _Count.ops[2:] == ["concat"]
