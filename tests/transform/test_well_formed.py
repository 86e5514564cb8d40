"""Well-formedness of each phase, with every violation named by function and binding."""

from __future__ import annotations

from dataclasses import replace

import pytest
from transform_testlib import BASIC, INGESTION, P

from plait.ir import (
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    IRModule,
    Op,
    SeqExpr,
    TensorType,
    Tuple,
    Var,
    VarBinding,
    const,
)
from plait.ir.well_formed import (
    Violation,
    WellFormedError,
    check_well_formed,
    register_phase_check,
    well_formed,
)
from plait.op import make_call

T = TensorType((2, 3), "float32")


def func(params: list[Var], *blocks: BindingBlock, result: object) -> Function:
    return Function(tuple(params), SeqExpr(tuple(blocks), result, ty=T), T)  # type: ignore


def mod_of(f: Function, phase: str = "optimization", **extra: Function) -> IRModule:
    return IRModule({"main": f, **extra}, {"phase": phase})


def messages(mod: IRModule, phase: str | None = None) -> list[tuple[str | None, str | None, str]]:
    return [(v.function, v.binding, v.message) for v in well_formed(mod, phase)]


def test_parsed_modules_are_well_formed_in_their_phase() -> None:
    assert well_formed(P(BASIC)) == []
    assert well_formed(P(INGESTION)) == []
    assert check_well_formed(P(BASIC)) is not None


def test_ingestion_rechecks_types() -> None:
    x = Var("x", T)
    y = Var("y", TensorType((3, 3), "float32"))  # wrong declared shape
    f = func([x], BindingBlock((VarBinding(y, make_call("relu", x)),)), result=y)
    (v,) = well_formed(mod_of(f, "ingestion"))
    assert (v.phase, v.function, v.binding) == ("ingestion", "main", "y")
    assert "declared Tensor((3, 3), \"float32\") but its value has type Tensor((2, 3)" in v.message
    z = Var("z")
    bad_call = make_call("add", x, const([1.0, 2.0], "float32"))  # shapes do not broadcast
    g = func([x], BindingBlock((VarBinding(z, bad_call),)), result=z)
    ((fn, b, msg),) = messages(mod_of(g, "ingestion"))
    assert (fn, b) == ("main", "z") and msg.startswith("the call of op 'add' is ill-typed")
    # unknown types are fine in ingestion
    u = Var("u")
    h = func([Var("p")], BindingBlock((VarBinding(u, make_call("relu", Var("p"))),)), result=u)
    assert well_formed(mod_of(h, "ingestion")) == []


def test_optimization_invariants() -> None:
    x = Var("x", T)
    a, b, c = Var("a", T), Var("b"), Var("c", T)
    nested = make_call("relu", make_call("relu", x))
    f = func(
        [x],
        BindingBlock((
            VarBinding(a, nested),                                    # not ANF
            VarBinding(b, make_call("relu", x)),                      # untyped
            VarBinding(c, Call(Op.get("reluu"), (x,), ty=T)),         # unregistered op
        )),
        result=c,
    )
    got = messages(mod_of(f))
    assert ("main", "a", "argument 0 of the call is a nested Call, not an atom: the function "
            "is not in A-normal form; run Normalize") in got
    assert ("main", "b", "the binding has no type; run Normalize (or give the inputs types)") \
        in got
    assert any(v[:2] == ("main", "c") and v[2].startswith(
        "op 'reluu' is not registered; did you mean 'relu'") for v in got)
    assert len(got) == 3


def test_nested_functions_and_unknown_globals() -> None:
    mod = P(INGESTION)
    got = messages(mod, "optimization")
    assert got == [("main", "f", "a nested function; run LambdaLift to lift it to the module")]
    x, y = Var("x", T), Var("y", T)
    f = func([x], BindingBlock((VarBinding(y, Call(GlobalVar("mian"), (x,), ty=T)),)), result=y)
    got = messages(mod_of(f))
    assert got == [("main", "y", "GlobalVar 'mian' names no function of the module; "
                    "did you mean 'main'?")]


def test_dataflow_invariants() -> None:
    x = Var("x", T)
    d1, d2, out = DataflowVar("d1", T), DataflowVar("d2", T), Var("out", T)
    cond = Var("cond", TensorType((), "bool"))
    impure = make_call("builtin.call_dps", ExternFunc("f"), Tuple((x,)), Tuple((x,)))
    t_branch = SeqExpr((), x, ty=T)
    f = func(
        [x, cond],
        DataflowBlock((
            VarBinding(d1, make_call("relu", x)),
            VarBinding(Var("e"), impure),
            VarBinding(d2, If(cond, t_branch, t_branch, ty=T)),
            VarBinding(out, make_call("relu", d1)),
        )),
        BindingBlock((VarBinding(Var("late", T), make_call("relu", d1)),
                      VarBinding(DataflowVar("stray", T), make_call("relu", x)))),
        result=out,
    )
    got = messages(mod_of(f))
    assert ("main", "e", "the impure call of 'builtin.call_dps' is inside a dataflow block; "
            "move it to an ordinary binding block") in got
    assert ("main", "d2", "an if inside a dataflow block; dataflow blocks are control-free") in got
    assert ("main", "late", "dataflow variable 'd1' is used outside the dataflow block that "
            "defines it; bind it with emit_output (a Var) instead") in got
    assert ("main", "stray", "a DataflowVar is bound outside a dataflow block") in got


def test_scoping_invariants() -> None:
    x = Var("x", T)
    a, b = Var("a", T), Var("b", T)
    ghost = Var("ghost", T)
    f = func(
        [x],
        BindingBlock((
            VarBinding(a, make_call("relu", b)),     # b used before it is defined
            VarBinding(b, make_call("relu", ghost)),  # ghost is never defined
            VarBinding(a, make_call("relu", x)),     # a defined twice
        )),
        result=a,
    )
    got = messages(mod_of(f))
    assert ("main", "a", "variable 'b' is used before it is defined (or is not defined in this "
            "function)") in got
    assert ("main", "b", "variable 'ghost' is used before it is defined (or is not defined in "
            "this function)") in got
    assert ("main", "a", "variable 'a' is defined more than once; every binding must define a "
            "fresh variable") in got
    # a variable bound inside an if branch is not visible after the if
    cond = Var("cond", TensorType((), "bool"))
    inner, r, after = Var("inner", T), Var("r", T), Var("after", T)
    branch = SeqExpr((BindingBlock((VarBinding(inner, make_call("relu", x)),)),), inner, ty=T)
    g = func(
        [x, cond],
        BindingBlock((VarBinding(r, If(cond, branch, SeqExpr((), x, ty=T), ty=T)),
                      VarBinding(after, make_call("relu", inner)))),
        result=after,
    )
    assert messages(mod_of(g)) == [
        ("main", "after", "variable 'inner' is used outside the scope (an if branch) that "
         "defines it"),
    ]


def test_lowering_and_build_invariants() -> None:
    mod = P(BASIC).with_phase("lowering")
    got = messages(mod)
    assert [(f, b) for f, b, _ in got] == [("main", "y"), ("main", "z")]
    assert got[0][2].startswith("op 'relu' is left after legalization; only call_extern, "
                                "call_kernel may be called in the lowering phase")
    build = messages(P(BASIC).with_phase("build"))
    assert ("main", "y", "a dataflow block is left in the build phase; the pass that leaves "
            "dataflow form must run before this point") in build
    assert any("op 'relu' is left" in m for _, _, m in build)  # lowering rules still apply
    x, y = Var("x", T), Var("y", T)
    alloc = make_call("builtin.alloc_tensor", shape=(2, 3), dtype="float32")
    ok = func([x], BindingBlock((VarBinding(y, alloc),)), result=y)
    assert well_formed(mod_of(ok, "build")) == []
    assert [v.phase for v in well_formed(mod_of(ok, "lowering"))] == ["lowering"]


def test_earlier_phase_checks_apply_later() -> None:
    x, a = Var("x", T), Var("a", T)
    f = func([x], BindingBlock((VarBinding(a, make_call("call_kernel", GlobalVar("k"),
                                                        Tuple((make_call("relu", x),)))),)),
             result=a)
    phases = {v.phase for v in well_formed(mod_of(f, "lowering"))}
    assert phases == {"optimization", "lowering"}


def test_check_well_formed_lists_every_violation() -> None:
    x = Var("x", T)
    bindings = tuple(VarBinding(Var(f"v{i}"), make_call("relu", x)) for i in range(3))
    f = func([x], BindingBlock(bindings), result=x)
    with pytest.raises(WellFormedError) as info:
        check_well_formed(mod_of(f))
    err = info.value
    assert len(err.violations) == 3
    assert str(err).splitlines()[0] == ("the module is not well formed for phase optimization "
                                        "(3 violations):")
    for i in range(3):
        assert f"binding 'v{i}': the binding has no type" in str(err)


def test_registered_phase_checks() -> None:
    def no_big_functions(mod: IRModule):  # noqa: ANN202
        for name, f in mod.graph_functions():
            if len(f.params) > 1:
                yield name, None, "too many parameters"
        yield from ()

    register_phase_check("lowering", no_big_functions, name="test.no_big")
    try:
        x, y = Var("x", T), Var("y", T)
        f = func([x, y], result=x)
        assert messages(mod_of(f, "optimization")) == []
        expected = [("main", None, "too many parameters (check test.no_big)")]
        assert messages(mod_of(f, "lowering")) == expected
        assert messages(mod_of(f, "build")) == expected
        register_phase_check("lowering", lambda mod: [Violation("lowering", None, None, "x")],
                             name="test.no_big")  # replaces
        assert messages(mod_of(f, "lowering")) == [(None, None, "x")]
    finally:
        from plait.ir.well_formed import _EXTRA_CHECKS

        _EXTRA_CHECKS["lowering"][:] = [
            (k, c) for k, c in _EXTRA_CHECKS["lowering"] if k != "test.no_big"]
    with pytest.raises(ValueError, match="did you mean 'lowering'"):
        register_phase_check("lowring", no_big_functions)


def test_function_result_type_is_checked() -> None:
    x = Var("x", T)
    f = replace(func([x], result=x), ret_ty=TensorType((9,), "float32"))
    assert messages(mod_of(f, "ingestion")) == [
        ("main", None, 'the function body has type Tensor((2, 3), "float32"), but the declared '
         'return type is Tensor((9,), "float32")'),
    ]
