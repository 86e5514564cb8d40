"""FuseOpsByPattern and PartitionGraph: composites, regions, no cycles, results unchanged."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transform_testlib import P

import plait
from plait.codegen.onnxruntime import compile_onnxruntime
from plait.ir import BlockBuilder, Call, Op, TensorType, Var, assert_structural_equal
from plait.ir.well_formed import well_formed
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.transform import (
    CodegenError,
    FuseOpsByPattern,
    PartitionGraph,
    is_op,
    register_codegen,
    unregister_codegen,
    wildcard,
)
from plait.transform.fuse_by_pattern import fuse_by_pattern
from plait.transform.partition import partition_graph

ADD_RELU = is_op("relu")(is_op("add")(wildcard(), wildcard()))
RULES = [("adds.add_relu", ADD_RELU), ("adds.op", is_op("add", "multiply"))]


@pytest.fixture(scope="module", autouse=True)
def adds_codegen():
    register_codegen("adds", patterns=RULES,
                     compile=functools.partial(compile_onnxruntime, codegen="adds"),
                     override=True)
    yield
    unregister_codegen("adds")


BEFORE = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def main(x: Tensor((2, 3), "float32"),
                 y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                a = add(x, y)
                b = relu(a)
                c = multiply(b, x)
                d = exp(c)
                output(d)
            return d
"""

COMPOSITES = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def main(x: Tensor((2, 3), "float32"),
                 y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                b = cls.adds_add_relu(x, y)
                c = cls.adds_op(b, x)
                d = exp(c)
                output(d)
            return d

        @function(attrs={"composite": "adds.add_relu", "private": True, "compiler": "adds"})
        def adds_add_relu(x: Tensor((2, 3), "float32"),
                          y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                a = add(x, y)
                b = relu(a)
                output(b)
            return b

        @function(attrs={"composite": "adds.op", "private": True, "compiler": "adds"})
        def adds_op(b: Tensor((2, 3), "float32"),
                    x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                c = multiply(b, x)
                output(c)
            return c
"""

REGIONS = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def main(x: Tensor((2, 3), "float32"),
                 y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                c = cls.adds_main_0(x, y)
                d = exp(c)
                output(d)
            return d

        @function(attrs={"compiler": "adds", "global_symbol": "adds_main_0"})
        def adds_main_0(x: Tensor((2, 3), "float32"),
                        y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                a = add(x, y)
                b = relu(a)
                c = multiply(b, x)
                output(c)
            return c
"""


def test_fuse_ops_by_pattern_outlines_each_match_as_a_composite() -> None:
    out = FuseOpsByPattern(codegen="adds")(P(BEFORE))
    assert_structural_equal(out, P(COMPOSITES))
    assert FuseOpsByPattern(codegen="adds").to_text() == "FuseOpsByPattern(codegen='adds')"


def test_partition_graph_merges_adjacent_composites_into_one_region() -> None:
    assert_structural_equal(PartitionGraph("adds")(P(COMPOSITES)), P(REGIONS))
    assert_structural_equal(plait.partition(P(BEFORE), "adds"), P(REGIONS))
    kept = PartitionGraph("adds", inline_composites=False)(P(COMPOSITES))
    assert "adds_add_relu" in kept and "adds_op" in kept
    region = kept["adds_main_0"].body.blocks[0].bindings
    assert [b.value.op.name_hint for b in region] == ["adds_add_relu", "adds_op"]


def test_a_region_never_takes_a_value_back_in_through_an_outside_binding() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32"),
                     y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    a = add(x, y)
                    u = exp(a)
                    b = add(a, u)
                    output(b)
                return b
    """
    after = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32"),
                     y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    a = cls.adds_main_0(x, y)
                    u = exp(a)
                    b = cls.adds_main_1(a, u)
                    output(b)
                return b

            @function(attrs={"compiler": "adds", "global_symbol": "adds_main_0"})
            def adds_main_0(x: Tensor((2, 3), "float32"),
                            y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    a = add(x, y)
                    output(a)
                return a

            @function(attrs={"compiler": "adds", "global_symbol": "adds_main_1"})
            def adds_main_1(a: Tensor((2, 3), "float32"),
                            u: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    b = add(a, u)
                    output(b)
                return b
    """
    assert_structural_equal(plait.partition(P(text), "adds"), P(after))


def test_independent_regions_merge_and_values_used_outside_are_results() -> None:
    text = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32"),
                     y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    a = add(x, x)
                    e = exp(y)
                    b = multiply(e, e)
                    c = add(a, b)
                    d = exp(a)
                    f = subtract(c, d)
                    output(f)
                return f
    """
    after = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32"),
                     y: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    e = exp(y)
                    a_c_t = cls.adds_main_0(x, e)
                    a = a_c_t[0]
                    c = a_c_t[1]
                    d = exp(a)
                    f = subtract(c, d)
                    output(f)
                return f

            @function(attrs={"compiler": "adds", "global_symbol": "adds_main_0"})
            def adds_main_0(
                x: Tensor((2, 3), "float32"), e: Tensor((2, 3), "float32")
            ) -> Tuple(Tensor((2, 3), "float32"), Tensor((2, 3), "float32")):
                with dataflow():
                    a = add(x, x)
                    b = multiply(e, e)
                    c = add(a, b)
                    output(a, c)
                return (a, c)
    """
    assert_structural_equal(plait.partition(P(text), "adds"), P(after))


def test_unknown_codegens_and_missing_patterns_are_refused() -> None:
    with pytest.raises(CodegenError, match=r"PartitionGraph: no external codegen 'onnxruntim' is "
                                           r"registered; did you mean 'onnxruntime'"):
        PartitionGraph("onnxruntim")
    with pytest.raises(CodegenError, match=r"partition: no external codegen 'add' .*did you "
                                           r"mean 'adds'"):
        plait.partition(P(BEFORE), "add")
    with pytest.raises(ValueError, match=r"needs patterns=\[\.\.\.\] or codegen='name'"):
        FuseOpsByPattern()


# ------------------------------------------------------------------ random graphs

OPS = ("add", "multiply", "subtract", "maximum", "tanh", "relu", "exp")
BINARY = {"add", "multiply", "subtract", "maximum"}


@st.composite
def graphs(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(3, 24))
    nodes = []
    for i in range(n):
        op = draw(st.sampled_from(OPS))
        k = 2 if op in BINARY else 1
        args = [draw(st.integers(-2, i - 1)) for _ in range(k)]  # -2, -1: the parameters
        nodes.append((op, args))
    supported = draw(st.sets(st.sampled_from(("add", "multiply", "subtract", "tanh")),
                             min_size=1))
    outs = draw(st.sets(st.integers(0, n - 1), max_size=3))
    return nodes, sorted(supported), sorted(outs | {n - 1})


def _build(nodes, outs):  # type: ignore[no-untyped-def]
    bb = BlockBuilder()
    ty = TensorType((3, 4), "float32")
    x, y = Var("x", ty), Var("y", ty)
    with bb.function("main", [x, y]):
        with bb.dataflow():
            vals = []
            for op, args in nodes:
                ins = [(x, y)[a + 2] if a < 0 else vals[a] for a in args]
                vals.append(bb.emit(make_call(op, *ins), f"v{len(vals)}"))
            res = [vals[i] for i in outs]
            out = bb.emit_output(res[0] if len(res) == 1 else make_call_tuple(res))
        bb.emit_func_output(out)
    return bb.get().with_phase("optimization")


def make_call_tuple(vals):  # type: ignore[no-untyped-def]
    from plait.ir import Tuple

    return Tuple(tuple(vals))


def _run(mod, x, y):  # type: ignore[no-untyped-def]
    out = VirtualMachine(plait.build(mod, "numpy"))["main"](x, y)
    return out if isinstance(out, tuple) else (out,)


def _op_calls(func) -> list[str]:  # type: ignore[no-untyped-def]
    return [b.value.op.name for blk in func.body.blocks for b in blk.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, Op)]


# a region that grows after a binding read it: that binding now depends on the whole
# region (a cycle through it is caught only by looking at regions as contracted nodes)
GROWN = ([("multiply", [-1, -1]), ("add", [0, 0]), ("add", [0, 0]), ("add", [0, 0]),
          ("add", [0, 0]), ("multiply", [0, 1]), ("add", [2, 5]), ("add", [1, 2]),
          ("tanh", [0])], ["add"], [8])


@settings(max_examples=40, deadline=None)
@example(GROWN)
@given(graphs())
def test_random_graphs_partition_without_cycles_covering_each_node_once(case) -> None:
    nodes, supported, outs = case
    mod = _build(nodes, outs)
    rules = [("rand.op", is_op(*supported))]
    register_codegen("rand", patterns=rules,
                     compile=functools.partial(compile_onnxruntime, codegen="rand"),
                     override=True)
    try:
        part = partition_graph(fuse_by_pattern(mod, rules, "rand"), "rand")
    finally:
        unregister_codegen("rand")
    assert well_formed(part) == []  # every variable defined before its use: no cycle
    regions = [f for n, f in part.graph_functions() if f.attrs.get("compiler") == "rand"]
    assert all("global_symbol" in f.attrs for f in regions)
    inside = [op for f in regions for op in _op_calls(f)]
    host = _op_calls(part["main"])
    want = [op for op, _ in nodes]
    assert sorted(inside) == sorted(op for op in want if op in supported)
    assert sorted(host) == sorted(op for op in want if op not in supported)
    # the same numbers: the external functions run as ordinary functions
    plain = part.with_functions({n: f.with_attrs(compiler=None, global_symbol=None)
                                 for n, f in part.graph_functions()})
    rng = np.random.default_rng(len(nodes))
    x, y = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    for a, b in zip(_run(plain, x, y), _run(mod, x, y)):
        np.testing.assert_array_equal(a, b)
