"""Simplification: constant folding and algebraic identities, statement cleanup."""

import math

import pytest

from plait.ir import structural_equal
from plait.kernel import (
    Buffer,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Let,
    Max,
    Seq,
    Var,
    logical_and,
    parse_kernel_source,
    print_kernel,
    select,
    simplify_expr,
    simplify_kernel,
    simplify_stmt,
)

i = Var("i")
x = Var("x", "float32")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (i + 0, "i"),
        (i * 1, "i"),
        (i * 0, "0"),
        (i - 0, "i"),
        (i - i, "0"),
        (FloorDiv(i, IntImm(1)), "i"),
        (FloorMod(i, IntImm(1)), "0"),
        ((i + 1) + 2, "i + 3"),
        ((i - 1) + 1, "i"),
        ((i + 3) - 1, "i + 2"),
        (2 * i + 0, "i * 2"),
        ((i * 2) * 3, "i * 6"),
        (FloorDiv(i * 4, IntImm(4)), "i"),
        (FloorMod(i * 8, IntImm(4)), "0"),
        (i + (-3), "i - 3"),
        (IntImm(7) // IntImm(-2), "-4"),
        (IntImm(7) % IntImm(-2), "-1"),
        (Div(IntImm(-7), IntImm(2)), "-3"),
        (x * 1.0, "x"),
        (FloatImm(0.1) + FloatImm(0.2), repr(float(__import__("numpy").float32(0.1)
                                                   + __import__("numpy").float32(0.2)))),
        (Max(IntImm(3), IntImm(5)), "5"),
        (select(IntImm(True, "bool"), x, 0.0), "x"),
        (logical_and(True, i < 3), "i < 3"),
        (logical_and(False, i < 3), "False"),
        (Cast("int32", FloatImm(-2.7)), "int32(-2)"),
        (Cast("int64", i), "i"),
        (IntImm(3) < IntImm(4), "True"),
        (Call("pow", (x, FloatImm(2.0)), "float32"), "x * x"),
        (Call("pow", (x, FloatImm(3.0)), "float32"), "x * x * x"),
        (Call("pow", (x, FloatImm(1.5)), "float32"), "pow(x, 1.5)"),
    ],
)
def test_expression_rules(expr, expected: str) -> None:
    assert repr(simplify_expr(expr)) == expected


def test_float_identities_that_would_change_results_are_kept() -> None:
    assert repr(simplify_expr(x + 0.0)) == "x + 0.0"  # -0.0 + 0.0 is +0.0
    assert repr(simplify_expr(x * 0.0)) == "x * 0.0"  # nan * 0 is nan
    assert math.isinf(simplify_expr(FloatImm(3e38) * 10.0).value)


def test_statement_rules() -> None:
    a = Buffer("a", (4,), "float32")
    j = Var("j")
    s = Seq((
        For(j, 0, a.store(j, 1.0)),
        For(j, 1, a.store(j + 1, 2.0)),
        IfThenElse(IntImm(False, "bool"), a.store(0, 3.0)),
        Let(Var("t"), IntImm(2), a.store(0, 4.0)),
    ))
    out = simplify_stmt(s)
    assert repr(out) == "a[1] = 2.0\na[0] = 4.0"


def test_simplify_kernel_keeps_signature() -> None:
    k = parse_kernel_source('''
@kernel
def k(a: Buffer((n, 4), "float32"), o: Buffer((n, 4), "float32", output=True)):
    for i in range(n):
        for j in range(4):
            o[i * 1, j + 0] = a[i, (j + 1) - 1] * 1.0
''')
    s = simplify_kernel(k)
    assert "o[i, j] = a[i, j]" in print_kernel("k", s)
    assert s.params is k.params
    assert structural_equal(simplify_kernel(s), s)
