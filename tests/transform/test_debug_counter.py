"""Debug counters: rewriting passes number their sites and the context limits them."""

from __future__ import annotations

import pytest
from transform_testlib import P

from plait.ir.structural import structural_equal
from plait.transform import (
    ConfigError,
    DebugCounter,
    PassContext,
    allow_rewrite,
    make_pass,
)

FOLDABLE = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
            with dataflow():
                a = add(const([1.0, 2.0], "float32"), const([1.0, 1.0], "float32"))
                b = multiply(const([3.0, 4.0], "float32"), const([2.0, 2.0], "float32"))
                c = subtract(const([5.0, 6.0], "float32"), const([1.0, 1.0], "float32"))
                d = add(x, a)
                e = add(d, b)
                f = add(e, c)
                output(f)
            return f
"""


def _fold(counter: object) -> object:
    with PassContext(config={"debug_counter": counter}):
        return make_pass("FoldConstant")(P(FOLDABLE))


def test_fold_constant_rewrites_only_the_sites_the_counter_allows() -> None:
    counter = DebugCounter({"FoldConstant": 2})
    got = _fold(counter)
    want = P("""
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    a = const([2.0, 3.0], "float32")
                    b = const([6.0, 8.0], "float32")
                    c = subtract(const([5.0, 6.0], "float32"), const([1.0, 1.0], "float32"))
                    d = add(x, const([2.0, 3.0], "float32"))
                    e = add(d, const([6.0, 8.0], "float32"))
                    f = add(e, c)
                    output(f)
                return f
    """)
    assert structural_equal(got, want), got.script()
    sites = counter.sites_of("FoldConstant")
    assert [s.allowed for s in sites] == [True, True, False]
    assert sites[2].description == "fold subtract at binding 'c'"
    assert counter.counts() == {"FoldConstant": 3}


def test_skip_and_count_select_one_site_like_mlir() -> None:
    got = _fold({"FoldConstant": {"skip": 2, "count": 1}})
    text = got.script()
    assert 'c = const([4.0, 5.0], "float32")' in text
    assert "a = add(const(" in text and "b = multiply(const(" in text


def test_no_counter_allows_everything_and_a_star_counts_every_pass() -> None:
    assert allow_rewrite("anything") is True
    counter = DebugCounter({"*": None})
    with PassContext(config={"debug_counter": counter}):
        make_pass("FoldConstant")(P(FOLDABLE))
        make_pass("FoldConstant")(P(FOLDABLE))
    assert counter.runs == {"FoldConstant": 2}
    assert [s.run for s in counter.sites] == [1, 1, 1, 2, 2, 2]
    assert [s.index for s in counter.sites] == [0, 1, 2, 3, 4, 5]  # numbered across runs


def test_a_run_key_limits_one_run_of_a_pass() -> None:
    counter = DebugCounter({"FoldConstant@2": 0})
    with PassContext(config={"debug_counter": counter}):
        first = make_pass("FoldConstant")(P(FOLDABLE))
        second = make_pass("FoldConstant")(P(FOLDABLE))
    assert "subtract(" not in first.script() and "subtract(const" in second.script()
    assert [s.allowed for s in counter.sites_of("FoldConstant", run=2)] == [False] * 3


@pytest.mark.parametrize("spec, message", [
    ({"FoldConstant": -1}, "must not be negative"),
    ({"FoldConstant": "two"}, "must be an int"),
    ({"FoldConstant": {"skip": 1, "limit": 2}}, "unknown field"),
    ({"FoldConstant@0": 1}, "counted from 1"),
    ({"FoldConstant": {"skip": -2}}, "must not be negative"),
])
def test_bad_counter_specs_are_config_errors(spec: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PassContext(config={"debug_counter": spec})


def test_a_declined_legalization_falls_back_to_the_numpy_library_call() -> None:
    mod = P("""
        @module(attrs={"phase": "optimization", "target": Target("c")})
        class Module:
            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    y = relu(x)
                    z = tanh(y)
                    output(z)
                return z
    """)
    with PassContext(config={"debug_counter": {"LegalizeOps": {"skip": 1}}}):
        got = make_pass("LegalizeOps")(mod)
    text = got.script()
    assert 'y = call_extern(extern("numpy.relu"), (x,)' in text
    assert "z = call_kernel(cls.tanh" in text


def test_a_declined_pattern_match_keeps_its_bindings() -> None:
    mod = P("""
        @module(attrs={"phase": "optimization", "target": Target("c")})
        class Module:
            @function
            def main(x: Tensor((2, 8), "float32"), w: Tensor((4, 8), "float32"),
                     v: Tensor((4, 4), "float32")) -> Tensor((2, 4), "float32"):
                with dataflow():
                    a = linear(x, w)
                    b = relu(a)
                    c = linear(b, v)
                    output(c)
                return c
    """)
    counter = DebugCounter({"c.DispatchGemm": 1})
    with PassContext(config={"debug_counter": counter}):
        got = make_pass("c.DispatchGemm")(mod)
    text = got.script()
    # roots are tried from the last binding: the second product is the first site
    assert text.count("call_extern(") == 1 and "a = linear(x, w)" in text
    assert counter.sites[0].description.startswith("rule 'c.gemm' at binding 'c'")
