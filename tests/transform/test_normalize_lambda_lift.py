"""Normalize and LambdaLift: the ingestion -> optimization transition."""

from __future__ import annotations

import pytest
from transform_testlib import INGESTION, P

from plait.ir import (
    BindingBlock,
    Function,
    IRModule,
    SeqExpr,
    TensorType,
    Var,
    VarBinding,
    assert_structural_equal,
    const,
)
from plait.ir.builder import IRTypeError
from plait.op import make_call
from plait.transform import (
    LambdaLift,
    LambdaLiftError,
    Normalize,
    PassError,
    PassWellFormedError,
    Sequential,
)

T = TensorType((2, 3), "float32")
TO_OPT = Sequential([Normalize(), LambdaLift()])


def test_normalize_binds_nested_expressions_and_infers_types() -> None:
    x = Var("x", T)
    body = make_call("relu", make_call("add", x, make_call("multiply", x, x)))
    mod = IRModule({"main": Function((x,), body)}, {"phase": "ingestion"})
    out = Normalize()(mod)
    assert out.phase == "ingestion"  # Normalize makes no transition
    assert_structural_equal(out, P("""
        @module(attrs={"phase": "ingestion"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                lv = multiply(x, x)
                lv1 = add(x, lv)
                lv2 = relu(lv1)
                return lv2
    """))
    assert_structural_equal(Normalize()(out), out)  # idempotent


def test_normalize_reports_type_errors_with_their_place() -> None:
    x, y = Var("x", T), Var("y")
    bad = make_call("relu", make_call("add", x, const([1.0, 2.0], "float32")))
    body = SeqExpr((BindingBlock((VarBinding(y, bad),)),), y)
    mod = IRModule({"main": Function((x,), body)}, {"phase": "ingestion"})
    with pytest.raises(PassError) as info:
        Normalize()(mod)
    err = info.value
    assert (err.pass_name, err.phase, err.function, err.binding) == (
        "Normalize", "ingestion", "main", "y")
    assert isinstance(err.__cause__, IRTypeError)
    assert str(err).startswith("pass 'Normalize' failed in phase ingestion while transforming "
                               "function 'main', binding 'y': IRTypeError: in function 'main', "
                               "binding 'y': add: cannot broadcast")


def test_lambda_lift_turns_captures_into_parameters() -> None:
    out = TO_OPT(P(INGESTION))
    assert_structural_equal(out, P("""
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(
                x: Tensor((2, 3), "float32"),
                y: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                z = cls.main_f(x, y)
                w = relu(z)
                return w

            @function
            def main_f(
                a: Tensor((2, 3), "float32"),
                y: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                b = add(a, y)
                return b
    """))


def test_lambda_lift_threads_captures_through_nesting() -> None:
    out = TO_OPT(P("""
        @module(attrs={"phase": "ingestion"})
        class Module:
            @function
            def main(
                x: Tensor((2, 3), "float32"),
                y: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                @function
                def f(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                    @function
                    def g(c: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                        d = multiply(c, x)
                        return d
                    b = add(g(a), y)
                    return b
                z = f(x)
                return z
    """))
    assert_structural_equal(out, P("""
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(
                x: Tensor((2, 3), "float32"),
                y: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                z = cls.main_f(x, x, y)
                return z

            @function
            def main_g(
                c: Tensor((2, 3), "float32"),
                x: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                d = multiply(c, x)
                return d

            @function
            def main_f(
                a: Tensor((2, 3), "float32"),
                x: Tensor((2, 3), "float32"),
                y: Tensor((2, 3), "float32"),
            ) -> Tensor((2, 3), "float32"):
                lv = cls.main_g(a, x)
                b = add(lv, y)
                return b
    """))


def test_a_function_without_captures_may_be_used_as_a_value() -> None:
    out = TO_OPT(P("""
        @module(attrs={"phase": "ingestion", "target": "numpy"})
        class Module:
            @function(attrs={"compiler": "x"})
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                @function
                def f(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                    b = relu(a)
                    return b
                t = (f, x)
                z = f(x)
                return z
    """))
    assert_structural_equal(out, P("""
        @module(attrs={"phase": "optimization", "target": "numpy"})
        class Module:
            @function(attrs={"compiler": "x"})
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                t = (cls.main_f, x)
                z = cls.main_f(x)
                return z

            @function(attrs={"compiler": "x"})
            def main_f(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                b = relu(a)
                return b
    """))


def test_a_closure_used_as_a_value_is_an_error() -> None:
    with pytest.raises(PassError) as info:
        TO_OPT(P("""
            @module(attrs={"phase": "ingestion"})
            class Module:
                @function
                def main(
                    x: Tensor((2, 3), "float32"),
                    y: Tensor((2, 3), "float32"),
                ) -> Tensor((2, 3), "float32"):
                    @function
                    def f(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                        b = add(a, y)
                        return b
                    t = (f, x)
                    return x
        """))
    err = info.value
    assert err.pass_name == "LambdaLift" and isinstance(err.__cause__, LambdaLiftError)
    assert "nested function 'f' captures 'y' and is used as a value (in binding 't')" in str(err)


def test_lambda_lift_names_avoid_clashes() -> None:
    text = INGESTION.replace("class Module:", """class Module:
        @function
        def main_f(q: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            return q
""")
    out = TO_OPT(P(text))
    assert sorted(out.functions) == ["main", "main_f", "main_f_1"]
    assert "cls.main_f_1(x, y)" in out.script()


def test_the_transition_checks_the_optimization_invariants() -> None:
    x = Var("x")  # no type: Normalize cannot type the bindings
    mod = IRModule({"main": Function((x,), make_call("relu", x))}, {"phase": "ingestion"})
    with pytest.raises(PassWellFormedError) as info:
        TO_OPT(mod)
    err = info.value
    assert err.pass_name == "LambdaLift"
    assert "after transition pass 'LambdaLift' (ingestion -> optimization)" in str(err)
    assert "function 'main': parameter 'x' has no type" in str(err)
    assert "binding 'lv': the binding has no type" in str(err)
