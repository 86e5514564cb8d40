"""The pattern language: matching on dataflow blocks, rewrites by rules, bad patterns."""

from __future__ import annotations

import numpy as np
import pytest
from transform_testlib import P

from plait.ir import BlockBuilder, TensorType, Var, assert_structural_equal, const
from plait.op import make_call
from plait.transform import (
    PatternError,
    Rule,
    is_const,
    is_op,
    is_tuple,
    match_block,
    rewrite_module,
    rewrite_pass,
    wildcard,
)
from plait.transform.fuse_ops import count_uses

W = "const([[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]], \"float32\")"
B = "const([[[1.0]], [[2.0]]], \"float32\")"
W2 = "const([[[[1.0]]], [[[2.0]]]], \"float32\")"
CHAINS = f"""
    @module(attrs={{"phase": "optimization"}})
    class Module:
        @function
        def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
            with dataflow():
                a = conv2d(x, {W})
                b = add(a, {B})
                c = relu(b)
                d = conv2d(c, {W})
                e = relu(d)
                f = conv2d(e, {W2}, groups=2)
                g = add(f, {B})
                output(g)
            return g
"""


def _matches(text: str, pattern, **kw):
    mod = P(text)
    f = mod["main"]
    block = f.body.blocks[0]
    return block, match_block(block.bindings, pattern, count_uses(f.body), **kw)


def _names(block, m) -> list[str]:
    return [block.bindings[i].var.name_hint for i in m.bindings]


def conv_block():
    x, w = wildcard(), is_const()
    conv = is_op("conv2d", groups=1)(x, w).has_dtype("float32")
    return x, w, conv, conv.optional(lambda y: is_op("add")(y, is_const())).optional(
        is_op("relu"))


def test_optional_tails_take_the_longest_chain_from_each_root() -> None:
    x, w, conv, pat = conv_block()
    assert str(pat) == ("conv2d(_, const){groups=1}[dtype float32] >> add(^, const)? "
                        ">> relu(^)?")
    block, ms = _matches(CHAINS, pat)
    # f has groups=2: not matched; d -> e without the add; a -> b -> c whole
    assert [_names(block, m) for m in ms] == [["d", "e"], ["a", "b", "c"]]
    first = ms[1]
    assert first[x].name_hint == "x" and first.call(conv).op.name == "conv2d"
    assert first.inputs() == [first[x]] and first.is_contained()
    assert isinstance(first[w].data, np.ndarray)


def test_alternatives_attributes_and_types() -> None:
    pat = (is_op("relu") | is_op("add")(wildcard(), is_const(lambda d: d.shape == (2, 1, 1))))
    block, ms = _matches(CHAINS, pat)
    assert sorted(_names(block, m)[0] for m in ms) == ["b", "c", "e", "g"]
    grouped = is_op("conv2d", groups=lambda g: g > 1)
    assert [_names(block, m) for m in _matches(CHAINS, grouped)[1]] == [["f"]]
    shaped = is_op("conv2d").has_shape((1, None, 4, 4)).has_rank(4)
    assert len(_matches(CHAINS, shaped)[1]) == 3
    assert _matches(CHAINS, is_op("conv2d").has_dtype("float64"))[1] == []
    where = is_op("add").where(lambda call: call.args[1].data[0, 0, 0] == 1.0)
    assert len(_matches(CHAINS, where)[1]) == 2


def test_use_counts_and_containment() -> None:
    shared = CHAINS.replace(f"g = add(f, {B})", "g = multiply(a, f)")  # a used twice
    _, _, _, pat = conv_block()
    block, ms = _matches(shared, pat)
    assert [_names(block, m) for m in ms] == [["d", "e"], ["a", "b", "c"]]
    assert not ms[1].is_contained()           # a escapes to g
    block, ms = _matches(shared, pat, contained=True)
    # the root c cannot take a; b alone (add without conv) is no match; a alone is
    assert [_names(block, m) for m in ms] == [["d", "e"], ["a"]]
    single = is_op("relu")(is_op("add")(is_op("conv2d").single_use(), is_const()))
    assert [_names(block, m) for m in _matches(shared, single)[1]] == []
    assert [_names(block, m) for m in _matches(CHAINS, single)[1]] == [["a", "b", "c"]]


def test_repeat_and_tuples() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 2), "float32")) -> Tensor((4, 2), "float32"):
                with dataflow():
                    s = matmul(x, x)
                    t = multiply(s, const(0.5, "float32"))
                    u = multiply(t, const(2.0, "float32"))
                    v = softmax(u, axis=-1)
                    w = concat((v, x), axis=0)
                    output(w)
                return w
    """
    scale = is_const(scalar=True)
    chain = is_op("matmul").repeat(lambda y: is_op("multiply")(y, scale))
    pat = is_op("softmax")(chain)
    block, ms = _matches(text, pat)
    assert str(chain) == "matmul >> multiply(^, const[where _is_scalar_const])*"
    assert [_names(block, m) for m in ms] == [["s", "t", "u", "v"]]
    assert [float(c.data) for c in ms[0].all(scale)] == [2.0, 0.5]  # outermost first
    capped = is_op("softmax")(is_op("multiply").repeat(
        lambda y: is_op("multiply")(y, scale), max=1))
    assert [_names(block, m) for m in _matches(text, capped)[1]] == [["t", "u", "v"]]
    tup = is_op("concat")(is_tuple(is_op("softmax"), wildcard()))
    assert [_names(block, m) for m in _matches(text, tup)[1]] == [["v", "w"]]


def test_rewrite_rule_text_before_and_after() -> None:
    x, w, conv, pat = conv_block()

    def to_biased(m):
        bias = m.get("bias")
        out = make_call("conv2d", m[x], m[w])
        if bias is not None:
            out = make_call("add", out, bias)
        return make_call("clip", out, min=0.0, max=6.0)

    biased = conv.optional(lambda y: is_op("add")(y, is_const().named("bias")))
    rule = Rule("relu6", is_op("relu")(biased), to_biased)
    after = f"""
        @module(attrs={{"phase": "optimization"}})
        class Module:
            @function
            def main(x: Tensor((1, 2, 4, 4), "float32")) -> Tensor((1, 2, 4, 4), "float32"):
                with dataflow():
                    lv = conv2d(x, {W})
                    lv1 = add(lv, {B})
                    c = clip(lv1, min=0.0, max=6.0)
                    lv2 = conv2d(c, {W})
                    e = clip(lv2, min=0.0, max=6.0)
                    f = conv2d(e, {W2}, groups=2)
                    g = add(f, {B})
                    output(g)
                return g
    """
    assert_structural_equal(rewrite_module(P(CHAINS), [rule]), P(after))
    # a rewrite that declines leaves the module as it is
    assert_structural_equal(rewrite_module(P(CHAINS), [Rule("no", pat, lambda m: None)]),
                            P(CHAINS))


def test_rewrite_pass_is_registered_and_skips_external_functions() -> None:
    rule = Rule("neg_neg", is_op("neg")(is_op("neg")(wildcard().named("v")).single_use()),
                lambda m: m["v"])
    p = rewrite_pass("test.NegNeg", [rule], register=False)
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function(attrs={"compiler": "x"})
            def ext(a: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    b = neg(a)
                    c = neg(b)
                    output(c)
                return c

            @function
            def main(a: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    b = neg(a)
                    c = neg(b)
                    d = cls.ext(c)
                    output(d)
                return d
    """
    out = p(P(text))
    assert_structural_equal(out, P(text.replace("""b = neg(a)
                    c = neg(b)
                    d = cls.ext(c)""", """c = a
                    d = cls.ext(c)""")))
    assert p.info.name == "test.NegNeg" and "neg_neg" in p.info.doc


def test_a_chain_of_100000_bindings_is_matched_without_recursion() -> None:
    bb = BlockBuilder()
    x = Var("x", TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for _ in range(100_000):
                v = bb.emit(make_call("relu", v))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    f = bb.get()["main"]
    block = f.body.blocks[0]
    pat = is_op("relu").repeat(is_op("relu"))
    ms = match_block(block.bindings, pat, count_uses(f.body))
    assert len(ms) == 1 and len(ms[0].bindings) == 100_000


def test_malformed_patterns_are_refused_with_the_fix() -> None:
    with pytest.raises(PatternError, match=r"no op 'conv2dd' is registered; did you mean "
                                           r"'conv2d'"):
        is_op("conv2dd")
    with pytest.raises(PatternError, match=r"relu\(\.\.\.\) has 2 argument patterns; op 'relu' "
                                           r"takes 1 \(x\)"):
        is_op("relu")(wildcard(), wildcard())
    with pytest.raises(PatternError, match=r"has no attribute 'group'.*did you mean 'groups'"):
        is_op("conv2d", group=1)
    with pytest.raises(PatternError, match=r"argument 1 of pattern add\(\.\.\.\) is 1\.0, not a "
                                           r"pattern; use wildcard\(\), is_const\(\)"):
        is_op("add")(wildcard(), 1.0)
    with pytest.raises(PatternError, match=r"the step must use its argument inside an op "
                                           r"pattern"):
        is_op("relu").optional(lambda y: y)
    with pytest.raises(PatternError, match="the step must use its argument"):
        is_op("relu").optional(lambda y: is_op("relu"))
    with pytest.raises(PatternError, match="both sides must be patterns"):
        is_op("relu") | "relu"
    with pytest.raises(PatternError, match=r"rule 'r': the root of a rule's pattern must be an "
                                           r"op pattern"):
        Rule("r", is_const())
    with pytest.raises(PatternError, match="unknown dtype"):
        is_op("relu").has_dtype("float")
    rule = Rule("bad", is_op("relu"), lambda m: const(np.zeros((3,), np.float32)))
    with pytest.raises(PatternError, match=r"rule 'bad' rewrote binding 'e' in function 'main' "
                                           r"of type Tensor\(\(1, 2, 4, 4\), \"float32\"\) into "
                                           r"a value of type Tensor\(\(3,\), \"float32\"\)"):
        rewrite_module(P(CHAINS), [rule])


def test_the_guide_examples_run() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "patterns.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    namespace: dict = {"mod": P(CHAINS)}
    exec(compile("\n".join(blocks), "docs/patterns.md", "exec"), namespace)  # noqa: S102
    assert "conv_relu6" in str(namespace["rule"])


def test_steps_backtrack_over_their_alternatives_and_holes_take_constraints() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 2), "float32"),
                     y: Tensor((2, 2), "float32")) -> Tensor((2, 2), "float32"):
                with dataflow():
                    p = matmul(x, y)
                    q = add(y, p)
                    r = relu(q)
                    s = add(r, r)
                    output(s)
                return s
    """
    def step(v):
        return (is_op("relu")(v.single_use()) | is_op("add")(v.single_use(), wildcard())
                | is_op("add")(wildcard(), v.single_use()))

    pat = is_op("matmul").repeat(step)
    block, ms = _matches(text, pat)
    # s reads r twice (not single use); at q, add(^, _) leads to y (no matmul), so the
    # second alternative, add(_, ^), is taken
    assert [_names(block, m) for m in ms] == [["p", "q", "r"]]


def test_values_only_the_rewrite_read_are_removed() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((3, 2), "float32"):
                with dataflow():
                    t = reshape(x, shape=(3, 2))
                    u = reshape(x, shape=(6,))
                    r = relu(t)
                    output(r)
                return r
    """
    through = Rule("through", is_op("relu")(wildcard()),
                   lambda m: make_call("reshape", make_call("relu", m.definition(
                       m.call(through.pattern).args[0]).args[0]), shape=(3, 2)))
    after = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((3, 2), "float32"):
                with dataflow():
                    u = reshape(x, shape=(6,))
                    lv = relu(x)
                    r = reshape(lv, shape=(3, 2))
                    output(r)
                return r
    """
    # t lost its only use and goes; u was unused before and stays (no full DCE)
    assert_structural_equal(rewrite_module(P(text), [through]), P(after))


def test_root_ops_name_the_ops_a_match_can_end_in():
    from plait.transform.pattern import root_ops

    _, _, conv, chain = conv_block()
    assert root_ops(conv) == {"conv2d"}
    assert root_ops(chain) == {"conv2d", "add", "relu"}
    assert root_ops(is_op("add", "subtract")(wildcard(), wildcard()) | is_op("exp")) == {
        "add", "subtract", "exp"}
