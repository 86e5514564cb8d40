"""Kernel IR nodes: construction, dtypes, operators, structural equality."""

import pytest

from plait.ir import IRModule, structural_equal, structural_hash
from plait.kernel import (
    Add,
    Buffer,
    BufferStore,
    FloatImm,
    For,
    IntImm,
    Kernel,
    Let,
    Seq,
    Sub,
    Var,
    cast,
    maximum,
    select,
    seq,
)
from plait.kernel.intrin import exp, isnan


def _add_kernel(names: tuple[str, str, str, str, str] = ("n", "a", "b", "out", "i")) -> Kernel:
    n = Var(names[0])
    a = Buffer(names[1], (n,), "float32")
    b = Buffer(names[2], (n,), "float32")
    out = Buffer(names[3], (n,), "float32")
    i = Var(names[4])
    body = For(i, n, out.store(i, a[i] + b[i]), "parallel")
    return Kernel((a, b, out), body, 1)


def test_dtypes_and_operators() -> None:
    x = Var("x", "float32")
    i = Var("i")
    assert (x + 1).dtype == "float32"
    assert isinstance((x + 1).b, FloatImm)
    assert isinstance((i * 2).b, IntImm)
    assert (i < 3).dtype == "bool"
    assert (2 - i).a.value == 2
    assert exp(x).dtype == "float32"
    assert isnan(x).dtype == "bool"
    assert cast(i, "float32").dtype == "float32"
    assert select(i < 3, x, 0.0).dtype == "float32"
    assert maximum(x, 0).dtype == "float32"


def test_operator_errors_are_clear() -> None:
    x = Var("x", "float32")
    i = Var("i")
    with pytest.raises(TypeError, match=r"dtype mismatch in `x \+ i`: float32 vs int64"):
        x + i  # noqa: B018
    with pytest.raises(TypeError, match="float constant 0.5 used where int64"):
        i * 0.5  # noqa: B018
    with pytest.raises(TypeError, match="truth value .* not known at compile time"):
        bool(i < 3)
    with pytest.raises(TypeError, match="needs float arguments"):
        exp(i)
    with pytest.raises(TypeError, match="size variable 'm' must be int64"):
        Buffer("a", (Var("m", "int32"),), "float32")


def test_kernel_size_vars_and_outputs() -> None:
    k = _add_kernel()
    assert [v.name for v in k.size_vars] == ["n"]
    assert [b.name for b in k.inputs] == ["a", "b"]
    assert [b.name for b in k.outputs] == ["out"]
    assert IRModule({"add": k})["add"] is k


def test_structural_equality_up_to_renaming() -> None:
    k1 = _add_kernel()
    k2 = _add_kernel(("m", "x", "y", "z", "j"))
    assert structural_equal(k1, k2)
    assert structural_hash(k1) == structural_hash(k2)
    k3 = _add_kernel()
    body = k3.body
    assert isinstance(body, For)
    k4 = Kernel(k3.params, For(body.var, body.extent, body.body, "serial"), 1)
    assert not structural_equal(k1, k4)


def test_seq_flattens() -> None:
    a = Buffer("a", (2,), "int32")
    s1, s2, s3 = (a.store(0, 1), a.store(1, 2), a.store(0, 3))
    s = Seq((Seq((s1, s2)), s3))
    assert s.stmts == (s1, s2, s3)
    assert seq(s1) is s1
    assert isinstance(seq(), Seq) and seq().stmts == ()


def test_let_and_repr() -> None:
    a = Buffer("a", (4,), "float32")
    i, t = Var("i"), Var("t", "float32")
    body = For(i, 4, Let(t, a[i] * 2.0, BufferStore(a, (i,), Sub(t, FloatImm(1.0)))))
    text = repr(body)
    assert "t = a[i] * 2.0" in text and "a[i] = t - 1.0" in text
    assert repr(Add(i, IntImm(1))) == "i + 1"
