"""Range-aware index simplification (plait.kernel.indexsimp) and the loop split the DSL
makes with it, checked by evaluating the expressions over their whole ranges."""

import itertools

from plait.kernel import dsl, print_kernel
from plait.kernel.indexsimp import simplify_index
from plait.kernel.ir import Div, FloorDiv, FloorMod, IntImm, Var


def _eval(e, env):
    from plait.kernel.ir import Add, Mul, Sub

    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e.name_hint]
    a, b = _eval(e.a, env), _eval(e.b, env)
    if isinstance(e, Add):
        return a + b
    if isinstance(e, Sub):
        return a - b
    if isinstance(e, Mul):
        return a * b
    if isinstance(e, Div):
        return int(a / b)
    if isinstance(e, FloorDiv):
        return a // b
    if isinstance(e, FloorMod):
        return a % b
    raise TypeError(e)


def test_divisions_vanish_or_become_exact_within_the_ranges() -> None:
    i, j = Var("i"), Var("j")
    ranges = {i: (0, 3), j: (0, 63)}
    flat = i * 64 + j
    cases = {
        "0": Div(flat, IntImm(256)),  # flat < 256
        "i": Div(flat, IntImm(64)),
        "j": flat - Div(flat, IntImm(64)) * IntImm(64),
        "j ": FloorMod(flat, IntImm(64)),
        "i  ": Div(flat, IntImm(64)) - Div(Div(flat, IntImm(64)), IntImm(4)) * IntImm(4),
    }
    for want, e in cases.items():
        got = simplify_index(e, ranges)
        assert repr(got).replace(" ", "") == want.strip() or str(got) == want.strip(), (e, got)
        for vi, vj in itertools.product(range(4), range(64)):
            env = {"i": vi, "j": vj}
            assert _eval(got, env) == _eval(e, env)


def test_undecidable_divisions_are_kept() -> None:
    i, n = Var("i"), Var("n")
    e = FloorDiv(i + IntImm(3), IntImm(4))  # i + 3 may reach past 4
    assert simplify_index(e, {i: (0, 7)}) is not None
    got = simplify_index(e, {i: (0, 7)})
    for v in range(8):
        assert _eval(got, {"i": v}) == (v + 3) // 4
    # truncating division of a possibly negative value stays
    neg = Div(i - IntImm(2), IntImm(4))
    got = simplify_index(neg, {i: (0, 7)})
    for v in range(8):
        assert _eval(got, {"i": v}) == int((v - 2) / 4)
    # a size variable without an upper bound: only exact parts are taken out
    got = simplify_index(FloorDiv(n * IntImm(8) + i, IntImm(8)), {i: (0, 7), n: (0, None)})
    assert "//" not in repr(got) and "/" not in repr(got)


def test_transposing_reshape_gets_a_contiguous_inner_loop() -> None:
    x = dsl.placeholder((4, 128, 64), "float32", "x")
    # out[i, j] = x[j // 64, i, j % 64]: (4, 128, 64) -> (128, 4, 64) -> (128, 256)
    y = dsl.compute((128, 256), lambda i, j: x[Div(j, IntImm(64)), i,
                                               j - Div(j, IntImm(64)) * IntImm(64)], "y")
    text = print_kernel("k", dsl.create_kernel([x, y], "k"))
    assert "for j_i in vectorized(64):" in text
    assert "y[i, j_o * 64 + j_i] = x[j_o, i, j_i]" in text
