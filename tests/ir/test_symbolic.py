"""The symbolic size expressions (plait/ir/symbolic.py): canonical forms checked against
plain Python evaluation of the expression as written, at random sizes (hypothesis)."""

from __future__ import annotations

import ast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import plait
from plait.ir import TensorType, structural_equal, structural_hash
from plait.ir import symbolic as sym

NAMES = ("a", "b", "c")
OPS = ("+", "-", "*", "//", "%", "min", "max")

# an expression tree as text: ints, names, binary ops and min/max
leaves = st.one_of(st.integers(-7, 12).map(str), st.sampled_from(NAMES))


def _join(op: str, x: str, y: str) -> str:
    return f"{op}({x}, {y})" if op in ("min", "max") else f"({x} {op} {y})"


texts = st.recursive(
    leaves,
    lambda kids: st.builds(_join, st.sampled_from(OPS), kids, kids),
    max_leaves=12,
)
envs = st.fixed_dictionaries({n: st.integers(0, 40) for n in NAMES})
SETTINGS = settings(max_examples=400, deadline=None)


def _python_value(text: str, env: dict[str, int]) -> int | None:
    """The value of ``text`` computed by Python itself (None on division by zero)."""
    code = compile(ast.parse(text, mode="eval"), "<dim>", "eval")
    try:
        return eval(code, {"__builtins__": {"min": min, "max": max}}, dict(env))  # noqa: S307
    except ZeroDivisionError:
        return None


@SETTINGS
@given(texts, envs)
def test_canonical_form_agrees_with_evaluation(text: str, env: dict[str, int]) -> None:
    want = _python_value(text, env)
    assume(want is not None)
    try:
        d = sym.parse_dim(text)
    except sym.SymbolicError:
        # only a division by a constant zero is refused while simplifying
        assume(False)
    assert sym.evaluate(d, env) == want, (text, sym.dim_text(d))


@SETTINGS
@given(texts)
def test_printing_round_trips(text: str) -> None:
    try:
        d = sym.parse_dim(text)
    except sym.SymbolicError:
        assume(False)
    printed = sym.dim_text(d)
    again = sym.parse_dim(printed)
    assert again == d and hash(again) == hash(d), (text, printed, sym.dim_text(again))
    # the canonical text is a fixed point
    assert sym.dim_text(again) == printed


@SETTINGS
@given(texts, envs)
def test_printed_text_evaluates_like_the_expression(text: str, env: dict[str, int]) -> None:
    try:
        d = sym.parse_dim(text)
    except sym.SymbolicError:
        assume(False)
    want = _python_value(sym.dim_text(d), env)
    assume(want is not None)
    assert sym.evaluate(d, env) == want


ranges = st.fixed_dictionaries(
    {n: st.tuples(st.integers(0, 20), st.integers(0, 20)).map(sorted).map(tuple)
     for n in NAMES}
)


@SETTINGS
@given(texts, ranges, st.data())
def test_bounds_contain_every_value_in_the_ranges(text: str, rng: dict, data) -> None:
    try:
        d = sym.parse_dim(text)
    except sym.SymbolicError:
        assume(False)
    lo, hi = sym.bounds(d, rng)
    env = {n: data.draw(st.integers(*rng[n])) for n in NAMES}
    try:
        v = sym.evaluate(d, env)
    except sym.SymbolicError:
        assume(False)
    assert lo <= v <= hi, (sym.dim_text(d), rng, env, v, (lo, hi))


@SETTINGS
@given(texts, texts, ranges, st.data())
def test_proofs_agree_with_evaluation(t1: str, t2: str, rng: dict, data) -> None:
    try:
        x, y = sym.parse_dim(t1), sym.parse_dim(t2)
    except sym.SymbolicError:
        assume(False)
    env = {n: data.draw(st.integers(*rng[n])) for n in NAMES}
    try:
        vx, vy = sym.evaluate(x, env), sym.evaluate(y, env)
    except sym.SymbolicError:
        assume(False)
    if sym.prove_eq(x, y, rng):
        assert vx == vy
    if sym.prove_ne(x, y, rng):
        assert vx != vy
    if sym.prove_ge(x, y, rng):
        assert vx >= vy


@SETTINGS
@given(texts, ranges, st.data())
def test_simplifying_with_ranges_keeps_the_value_in_the_ranges(text: str, rng: dict, data) -> None:
    try:
        d = sym.parse_dim(text)
    except sym.SymbolicError:
        assume(False)
    s = sym.simplify(d, rng)
    env = {n: data.draw(st.integers(*rng[n])) for n in NAMES}
    try:
        v = sym.evaluate(d, env)
    except sym.SymbolicError:
        assume(False)
    assert sym.evaluate(s, env) == v, (sym.dim_text(d), sym.dim_text(s), env)


@SETTINGS
@given(st.permutations(["a", "b * 3", "c * a", "7", "b // 2"]))
def test_equal_sums_built_in_any_order_are_equal_and_hash_alike(parts: list[str]) -> None:
    d = sym.parse_dim(" + ".join(parts))
    ref = sym.parse_dim("a + b * 3 + c * a + 7 + b // 2")
    assert d == ref and hash(d) == hash(ref)
    t1 = TensorType((d, 4), "float32")
    t2 = TensorType((ref, 4), "float32")
    assert t1 == t2 and structural_equal(t1, t2) and structural_hash(t1) == structural_hash(t2)


def test_canonical_forms_of_the_sizes_models_make() -> None:
    p = sym.parse_dim
    assert p("(n * 12) // 12") == "n"          # a plain name stays a name
    assert p("n * 4 - n * 4 + 3") == 3         # constants are ints
    assert p("batch * heads") == p("heads * batch")
    assert sym.dim_text(p("(h - 3) // 2 + 1")) == "(h + 1) // 2 - 1"
    assert sym.dim_text(p("(n * 12 + 5) // 4")) == "n * 3 + 1"
    assert p("(x // 2) // 3") == p("x // 6")
    assert p("(x // 2 + 1) // 3") == p("(x + 2) // 6")
    assert p("min(n, n + 1)") == "n" and p("max(n, n + 1)") == p("n + 1")
    assert p("(n * 4 + 2) % 4") == 2
    assert sym.exact_div(p("batch * seq * 768"), p("batch * 768")) == "seq"
    assert sym.exact_div(p("batch * seq"), p("heads")) is None
    # a symbolic divisor simplifies only where it is provably >= 1
    assert p("(a * b) // b") != "a"
    assert p("(b + 1) // (b + 1)") == 1 and p("(b + 1) % (b + 1)") == 0
    assert p("3 // (b + 4)") == 0 and p("3 % (b + 4)") == 3


def test_ranges_prove_what_the_default_cannot() -> None:
    n1 = sym.parse_dim("n + 1")
    assert not sym.prove_ne(n1, 1)
    assert sym.prove_ne(n1, 1, {"n": (1, None)})
    assert sym.bounds(sym.parse_dim("(h - 3) // 2 + 1"), {"h": (3, 100)}) == (1, 49)
    assert sym.bounds("n") == (0, float("inf"))
    r = {"n": (1, 64), "m": (2, None)}
    assert sym.simplify(sym.parse_dim("max(0, n - 1)"), r) == sym.parse_dim("n - 1")
    assert sym.simplify(sym.parse_dim("(n * 4) // n + (m * n) % m"), r) == 4
    assert sym.simplify(sym.parse_dim("min(3, m)"), r) == sym.parse_dim("min(3, m)")


def test_bad_sizes_are_refused_with_the_reason() -> None:
    with pytest.raises(sym.SymbolicError, match="division by zero"):
        sym.parse_dim("n // 0")
    with pytest.raises(sym.SymbolicError, match="not a size expression"):
        sym.parse_dim("n ** 2")
    with pytest.raises(sym.SymbolicError, match="has no value"):
        sym.evaluate(sym.parse_dim("n * m"), {"n": 2})
    with pytest.raises(TypeError, match="negative for every size"):
        TensorType((sym.parse_dim("-n - 1"),), "float32")


def test_the_text_format_reads_and_writes_size_expressions() -> None:
    text = '''
@module
class M:
    @function
    def main(x: Tensor((batch, 12 * seq), "float32"),
             y: Tensor(((h - 3) // 2 + 1,), "int64")) -> Tensor((batch, seq * 12), "float32"):
        return x
'''
    mod = plait.parse(text)
    params = mod["main"].params
    assert params[0].ty.shape == ("batch", sym.mul("seq", 12))
    assert params[1].ty.shape == (sym.add(sym.floordiv(sym.sub("h", 3), 2), 1),)
    printed = str(mod)
    assert "Tensor((batch, seq * 12)" in printed and "(h + 1) // 2 - 1" in printed
    assert structural_equal(plait.parse(printed), mod)
    with pytest.raises(plait.ir.parser.ParseError, match=r"seq \*\* 2"):
        plait.parse(text.replace("12 * seq", "seq ** 2"))


def test_deep_nesting_is_refused_not_recursed() -> None:
    d: sym.Dim = "n"
    with pytest.raises(sym.SymbolicError, match="levels deep"):
        for _ in range(sym.MAX_DEPTH + 5):
            d = sym.add(sym.floordiv(d, 2), sym.floordiv("m", 3))


def test_a_size_times_min_of_one_and_itself_is_the_size() -> None:
    """``n * min(1, n)`` (a slice ``[0:1]`` of ``n`` broadcast back, as exporters write
    causal masks) is ``n``, and ``min(1, n)`` squared is itself, at every ``n >= 0``."""
    n, one = "n", sym.minimum(1, "n")
    assert sym.mul(n, one) == "n" and sym.mul(one, n) == "n"
    assert sym.mul(one, one) == one
    assert sym.mul(sym.mul("m", one), "n") == sym.mul("m", "n")
    assert sym.mul("m", one) != "m"          # m is not n: min(1, n) stays
    for v in range(4):
        assert sym.evaluate(sym.mul(n, one), {"n": v}) == v * min(1, v)
