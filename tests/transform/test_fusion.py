"""FuseOps and FuseKernels: the module before and the module expected after, in the
text format, compared structurally (with the well-formedness and immutability checks
on), plus the fused kernels FuseKernels builds for the ``c`` target (no compiler
needed: nothing here is compiled)."""

from __future__ import annotations

import re
import textwrap

import pytest

import plait
import plait.target.c  # noqa: F401  (registers the c target kind)
from plait.ir import BlockBuilder, Call, IRModule, TensorType, Var, assert_structural_equal
from plait.ir.expr import Function, GlobalVar, Op
from plait.kernel import For, Kernel
from plait.kernel.ir import Allocate
from plait.target import Target
from plait.transform import (
    ImmutabilityCheck,
    PassContext,
    WellFormedCheck,
    make_pass,
)
from plait.transform.fuse_kernels import KERNEL_FUSION, fuse_kernels
from plait.transform.fuse_ops import is_primitive
from plait.transform.fusion_groups import register_fusion_rule, unregister_fusion_rule

CHECKS = [WellFormedCheck(), ImmutabilityCheck()]


def parse(text: str) -> IRModule:
    return plait.parse(textwrap.dedent(text))


def fuse(mod: IRModule, config: dict | None = None) -> IRModule:
    with PassContext(instruments=CHECKS, config=config or {}):
        return make_pass("FuseOps")(mod)


def check(before: str, after: str, config: dict | None = None) -> IRModule:
    got = fuse(parse(before), config)
    assert_structural_equal(got, parse(after))
    return got


# ------------------------------------------------------------------ FuseOps


def test_a_chain_becomes_one_primitive_function() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4, 8), "float32"),
                y: Tensor((4, 8), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    a = relu(x)
                    b = add(a, y)
                    c = exp(b)
                    output(c)
                return c
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4, 8), "float32"),
                y: Tensor((4, 8), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    c = cls.fused_relu_add_exp(x, y)
                    output(c)
                return c

            @function(attrs={"primitive": True, "private": True})
            def fused_relu_add_exp(
                x: Tensor((4, 8), "float32"),
                y: Tensor((4, 8), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    a = relu(x)
                    b = add(a, y)
                    c = exp(b)
                    output(c)
                return c
        """,
    )


def test_fusing_twice_changes_nothing_more() -> None:
    once = fuse(parse(EXTERNAL.replace('attrs={"compiler": "x"}', "")))
    assert [n for n, f in once.graph_functions() if is_primitive(f)] == ["fused_relu_exp"]
    assert fuse(once) is once


def test_a_diamond_is_one_group_with_broadcast_and_constants_inside() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    y = add(x, b)
                    e = exp(y)
                    r = relu(y)
                    s = multiply(e, r)
                    t = multiply(s, const(0.5, "float32"))
                    output(t)
                return t
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    t = cls.fused_add_exp_relu_multiply_1more(x, b)
                    output(t)
                return t

            @function(attrs={"primitive": True, "private": True})
            def fused_add_exp_relu_multiply_1more(
                x: Tensor((4, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((4, 8), "float32"):
                with dataflow():
                    y = add(x, b)
                    e = exp(y)
                    r = relu(y)
                    s = multiply(e, r)
                    t = multiply(s, const(0.5, "float32"))
                    output(t)
                return t
        """,
    )


def test_a_value_used_outside_the_group_stays_outside() -> None:
    # ``y`` is returned as well as used by the chain: it cannot be an intermediate of
    # a group, so only relu -> tanh fuse (and exp alone stays an ordinary call).
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4,), "float32"),
            ) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
                with dataflow():
                    y = exp(x)
                    z = relu(y)
                    t = tanh(z)
                    out = (y, t)
                    output(out)
                return out
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((4,), "float32"),
            ) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
                with dataflow():
                    y = exp(x)
                    t = cls.fused_relu_tanh(y)
                    out = (y, t)
                    output(out)
                return out

            @function(attrs={"primitive": True, "private": True})
            def fused_relu_tanh(y: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    z = relu(y)
                    t = tanh(z)
                    output(t)
                return t
        """,
    )


def test_a_value_used_in_a_later_block_stays_outside() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = exp(x)
                    b = relu(a)
                    output(a, b)
                c = add(a, b)
                return c
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = exp(x)
                    b = relu(a)
                    output(a, b)
                c = add(a, b)
                return c
        """,
    )


def test_reduce_takes_its_elementwise_producers_and_tail_one_reduce_per_group() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4, 8), "float32")) -> Tensor((1,), "float32"):
                with dataflow():
                    e = exp(x)
                    s = sum(e, axis=1)
                    r = sqrt(s)
                    m = max(r, axis=0, keepdims=True)
                    n = log(m)
                    output(n)
                return n
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4, 8), "float32")) -> Tensor((1,), "float32"):
                with dataflow():
                    s = cls.fused_exp_sum(x)
                    n = cls.fused_sqrt_max_log(s)
                    output(n)
                return n

            @function(attrs={"primitive": True, "private": True})
            def fused_exp_sum(x: Tensor((4, 8), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    e = exp(x)
                    s = sum(e, axis=1)
                    output(s)
                return s

            @function(attrs={"primitive": True, "private": True})
            def fused_sqrt_max_log(s: Tensor((4,), "float32")) -> Tensor((1,), "float32"):
                with dataflow():
                    r = sqrt(s)
                    m = max(r, axis=0, keepdims=True)
                    n = log(m)
                    output(n)
                return n
        """,
    )


def test_matmul_takes_its_bias_add_and_relu_but_no_producer() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((2, 16), "float32"),
                w: Tensor((16, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((2, 8), "float32"):
                with dataflow():
                    a = tanh(x)
                    y = matmul(a, w)
                    z = add(y, b)
                    r = relu(z)
                    output(r)
                return r
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(
                x: Tensor((2, 16), "float32"),
                w: Tensor((16, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((2, 8), "float32"):
                with dataflow():
                    a = tanh(x)
                    r = cls.fused_matmul_add_relu(a, w, b)
                    output(r)
                return r

            @function(attrs={"primitive": True, "private": True})
            def fused_matmul_add_relu(
                a: Tensor((2, 16), "float32"),
                w: Tensor((16, 8), "float32"),
                b: Tensor((8,), "float32"),
            ) -> Tensor((2, 8), "float32"):
                with dataflow():
                    y = matmul(a, w)
                    z = add(y, b)
                    r = relu(z)
                    output(r)
                return r
        """,
    )


def test_an_impure_call_breaks_a_group() -> None:
    # Without the extern call between them, a and d would fuse; across it they don't
    # (a pure value is never moved across a call that may have side effects).
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function(pure=False)
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                a = relu(x)
                b = exp(a)
                c = extern("test.log")(x)
                d = tanh(b)
                e = sigmoid(d)
                return e
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function(pure=False)
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                b = cls.fused_relu_exp(x)
                c = extern("test.log")(x)
                e = cls.fused_tanh_sigmoid(b)
                return e

            @function(attrs={"primitive": True, "private": True})
            def fused_relu_exp(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = relu(x)
                    b = exp(a)
                    output(b)
                return b

            @function(attrs={"primitive": True, "private": True})
            def fused_tanh_sigmoid(b: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    d = tanh(b)
                    e = sigmoid(d)
                    output(e)
                return e
        """,
    )


def test_opaque_ops_and_single_ops_are_left_alone() -> None:
    before = """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4, 8), "float32")) -> Tensor((4, 8), "float32"):
                with dataflow():
                    a = relu(x)
                    s = softmax(a, axis=1)
                    t = tanh(s)
                    output(t)
                return t
    """
    mod = parse(before)
    assert fuse(mod) is mod


def test_fusion_inside_if_branches() -> None:
    check(
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(c: Tensor((), "bool"), x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                if c:
                    a = relu(x)
                    b = exp(a)
                    r = b
                else:
                    r = x
                return r
        """,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(c: Tensor((), "bool"), x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                if c:
                    b = cls.fused_relu_exp(x)
                    r = b
                else:
                    r = x
                return r

            @function(attrs={"primitive": True, "private": True})
            def fused_relu_exp(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = relu(x)
                    b = exp(a)
                    output(b)
                return b
        """,
    )


EXTERNAL = """
    @module(attrs={"phase": "optimization"})
    class M:
        @function(attrs={"compiler": "x"})
        def ext(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
            with dataflow():
                a = relu(x)
                b = exp(a)
                output(b)
            return b

        @function
        def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
            with dataflow():
                y = cls.ext(x)
                output(y)
            return y
"""


def test_external_functions_are_untouched_by_default() -> None:
    mod = parse(EXTERNAL)
    assert fuse(mod) is mod


def test_external_functions_are_fused_when_enabled_and_keep_their_codegen() -> None:
    check(
        EXTERNAL,
        """
        @module(attrs={"phase": "optimization"})
        class M:
            @function(attrs={"compiler": "x"})
            def ext(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    b = cls.fused_relu_exp(x)
                    output(b)
                return b

            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    y = cls.ext(x)
                    output(y)
                return y

            @function(attrs={"primitive": True, "private": True, "compiler": "x"})
            def fused_relu_exp(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = relu(x)
                    b = exp(a)
                    output(b)
                return b
        """,
        config={"transform.external_passes": {"x": ["FuseOps"]}},
    )


def test_max_group_size_splits_a_chain() -> None:
    chain = "\n".join(f"                    a{i + 1} = relu(a{i})" for i in range(5))
    mod = parse(f"""
        @module(attrs={{"phase": "optimization"}})
        class M:
            @function
            def main(a0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
{chain}
                    output(a5)
                return a5
    """)
    out = fuse(mod, {"transform.fuse.max_group_size": 2})
    sizes = sorted(len(f.body.blocks[0].bindings) for _, f in out.graph_functions()
                   if is_primitive(f))
    assert sizes == [2, 2]  # a5 = fused(a3), a3 = fused(a1), a1 = relu(a0)
    assert len(out["main"].body.blocks[0].bindings) == 3
    with pytest.raises(Exception, match="at least 2"):
        fuse(mod, {"transform.fuse.max_group_size": 1})


def test_a_custom_fusion_rule_vetoes_a_fusion() -> None:
    before = """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = exp(x)
                    b = relu(a)
                    c = tanh(b)
                    output(c)
                return c
    """

    @register_fusion_rule("test.keep_exp_alone")
    def keep_exp_alone(cand):  # type: ignore[no-untyped-def]
        return False if cand.op_name == "exp" else None

    try:
        out = fuse(parse(before))
    finally:
        unregister_fusion_rule("test.keep_exp_alone")
    prims = [n for n, f in out.graph_functions() if is_primitive(f)]
    assert prims == ["fused_relu_tanh"]
    assert [n for n, f in fuse(parse(before)).graph_functions() if is_primitive(f)] == [
        "fused_exp_relu_tanh"
    ]


def test_a_100k_chain_fuses_without_recursion() -> None:
    n = 100_000
    ty = TensorType((1, "n"), "float32")
    bb = BlockBuilder()
    x = Var("x", ty)
    add, relu = Op.get("add"), Op.get("relu")
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(n - 1):
                v = bb.emit(Call(add, (v, x)) if i % 2 else Call(relu, (v,)), "lv")
            out = bb.emit_output(Call(relu, (v,)), "out")
        bb.emit_func_output(out)
    mod = bb.get().with_phase("optimization")
    fused = make_pass("FuseOps")(mod)  # iterative: no RecursionError at the default limit
    prims = [f for _, f in fused.graph_functions() if is_primitive(f)]
    assert len(prims) == -(-n // 256)  # groups capped at 256 bindings
    assert sum(len(f.body.blocks[0].bindings) for f in prims) == n
    main_bindings = fused["main"].body.blocks[0].bindings
    assert len(main_bindings) == len(prims)
    assert all(isinstance(b.value.op, GlobalVar) for b in main_bindings)


# ------------------------------------------------------------------ FuseKernels

@pytest.fixture
def c_fusion() -> None:
    """The c target must have registered its computes for kernel fusion."""
    if "c" not in KERNEL_FUSION:
        pytest.fail("the c target registers no kernel fusion: its registration must call "
                    "plait.transform.fuse_kernels.register_kernel_fusion('c', ...)")


def lower(text: str, target: str = "c") -> IRModule:
    """Parse, set the target, run FuseOps then FuseKernels (checked)."""
    mod = parse(text).with_attrs(target=Target(target))
    with PassContext(instruments=CHECKS):
        return make_pass("FuseKernels")(make_pass("FuseOps")(mod))


def kernels(mod: IRModule) -> dict[str, Kernel]:
    return {n: f for n, f in mod.items() if isinstance(f, Kernel)}


def loop_nests(k: Kernel) -> int:
    """The number of outermost loops of a kernel (one per loop nest)."""
    count, stack = 0, [k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, For):
            count += 1
            continue
        stack.extend(getattr(s, "stmts", None) or ())
        if isinstance(s, Allocate):
            stack.append(s.body)
    return count


def scratch_buffers(k: Kernel) -> int:
    count, stack = 0, [k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, Allocate):
            count += 1
            stack.append(s.body)
        elif isinstance(s, For):
            stack.append(s.body)
        else:
            stack.extend(getattr(s, "stmts", None) or ())
    return count


TAIL = """
    @module(attrs={"phase": "optimization"})
    class M:
        @function
        def main(
            y: Tensor((n, 32), "float32"),
            b: Tensor((32,), "float32"),
        ) -> Tensor((n, 32), "float32"):
            with dataflow():
                h = add(y, b)
                a = multiply(h, const(0.5, "float32"))
                g = multiply(h, const(0.70710677, "float32"))
                e = erf(g)
                f = add(e, const(1.0, "float32"))
                out = multiply(a, f)
                output(out)
            return out
"""


def test_fuse_kernels_makes_one_loop_nest_for_an_elementwise_tail(c_fusion: None) -> None:
    mod = lower(TAIL)
    ks = kernels(mod)
    assert list(ks) == ["fused_add_multiply_multiply_erf_2more"]
    k = ks["fused_add_multiply_multiply_erf_2more"]
    assert loop_nests(k) == 1 and scratch_buffers(k) == 0
    assert k.attrs["fused_ops"] == ("add", "multiply", "multiply", "erf", "add", "multiply")
    assert not any(is_primitive(f) for _, f in mod.graph_functions())
    (b,) = mod["main"].body.blocks[0].bindings
    assert b.value.op.name == "call_kernel"
    assert b.value.args[0].name_hint == "fused_add_multiply_multiply_erf_2more"
    assert [a.name_hint for a in b.value.args[1].fields] == ["y", "b"]


def test_fuse_kernels_keeps_a_reduction_as_its_own_stage(c_fusion: None) -> None:
    mod = lower("""
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4, 8), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    e = exp(x)
                    s = sum(e, axis=1)
                    r = sqrt(s)
                    output(r)
                return r
    """)
    (k,) = kernels(mod).values()
    assert loop_nests(k) == 2  # the reduction (exp inlined), then sqrt over its result
    assert "exp(" in k.script("k") and "sqrt(" in k.script("k")


def test_identical_groups_share_one_kernel_and_constants_become_arguments(c_fusion: None) -> None:
    mod = lower("""
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
                with dataflow():
                    a = add(x, const([1.0, 2.0, 3.0, 4.0], "float32"))
                    b = relu(a)
                    c = softmax(b, axis=0)
                    d = add(c, const([1.0, 2.0, 3.0, 4.0], "float32"))
                    e = relu(d)
                    output(e)
                return e
    """)
    assert list(kernels(mod)) == ["fused_add_relu"]
    calls = [b.value for b in mod["main"].body.blocks[0].bindings
             if b.value.op.name == "call_kernel"]
    assert len(calls) == 2
    for call in calls:
        assert call.args[0].name_hint == "fused_add_relu"
        assert len(call.args[1].fields) == 2  # x (or c), then the constant


def test_a_group_whose_compute_declines_is_inlined_back(c_fusion: None) -> None:
    # the c target computes power for floats only: the int32 group is lowered op by op
    text = """
        @module(attrs={"phase": "optimization"})
        class M:
            @function
            def main(x: Tensor((4,), "int32"), y: Tensor((4,), "int32")) -> Tensor((4,), "int32"):
                with dataflow():
                    a = add(x, y)
                    p = power(a, y)
                    r = relu(p)
                    output(r)
                return r
    """
    before = parse(text).with_attrs(target=Target("c"))
    assert any(is_primitive(f) for _, f in fuse(before).graph_functions())
    assert_structural_equal(lower(text), before)


def test_a_group_without_computes_is_inlined_back() -> None:
    # numpy registers no kernel fusion: FuseKernels puts every group back as it was
    before = parse(TAIL).with_attrs(target=Target("numpy"))
    with PassContext(instruments=CHECKS):
        after = make_pass("FuseKernels")(make_pass("FuseOps")(before))
    assert_structural_equal(after, before)


def test_fuse_kernels_leaves_external_primitive_functions_alone() -> None:
    mod = fuse(parse(EXTERNAL), {"transform.external_passes": {"x": ["FuseOps"]}})
    out = fuse_kernels(mod, KERNEL_FUSION.get("c"), frozenset())
    assert out is mod
    assert isinstance(out["fused_relu_exp"], Function)


def test_fuse_kernels_enabled_for_a_codegen_gives_the_kernel_to_it(c_fusion: None) -> None:
    enable = {"transform.external_passes": {"x": ["FuseOps", "FuseKernels"]}}
    mod = parse(EXTERNAL).with_attrs(target=Target("c"))
    with PassContext(instruments=CHECKS, config=enable):
        out = make_pass("FuseKernels")(make_pass("FuseOps")(mod))
    (k,) = kernels(out).values()
    assert k.attrs["compiler"] == "x" and k.attrs["fused_ops"] == ("relu", "exp")
    (b,) = out["ext"].body.blocks[0].bindings
    assert b.value.op.name == "call_kernel"
    assert sorted(out.functions) == ["ext", "fused_relu_exp", "main"]


def test_inline_stages_makes_one_loop_nest_and_bounds_growth() -> None:
    from plait.kernel import dsl
    from plait.kernel.inline import MAX_DEPTH, MAX_SIZE, expr_size_depth, inline_stages

    x = dsl.placeholder((8, 4), "float32", "x")
    y = dsl.compute((8, 4), lambda i, j: x[i, j] + 1.0, "y")
    z = dsl.compute((4, 8), lambda j, i: dsl.maximum(y[i, j], 0.0), "z")  # transposed read
    (z2,) = inline_stages([z])
    k = dsl.create_kernel([x, z2], name="k")
    assert loop_nests(k) == 1 and scratch_buffers(k) == 0
    # each stage reads the previous one 4 times: inlining everything would grow as 4^n
    def stage(v: dsl.Tensor, n: int) -> dsl.Tensor:
        return dsl.compute((8, 4), lambda i, j: dsl.sigmoid(v[i, j]) * v[i, j]
                           + v[i, j] * v[i, j], f"s{n}")

    v = x
    for n in range(40):
        v = stage(v, n)
    (out,) = inline_stages([v])
    k = dsl.create_kernel([x, out], name="chain")
    assert 1 < loop_nests(k) < 40
    size, depth = expr_size_depth(out.op.body)
    assert depth <= 2 * MAX_DEPTH and size <= 4 * MAX_SIZE


def test_inline_stages_computes_a_large_stage_read_by_two_consumers_once() -> None:
    """SiLU after a depthwise convolution: the 9-tap sum ``a`` is read by ``sig`` (4
    times, so ``a`` is kept as a buffer) and once by ``out``; ``out`` reads that buffer
    too instead of computing the sum a second time."""
    from plait.kernel import dsl
    from plait.kernel.inline import MAX_DUP_SIZE, expr_size_depth, inline_stages
    from plait.kernel.ir import BufferLoad

    x = dsl.placeholder((6, 16), "float32", "x")
    a = dsl.compute((6, 8), lambda i, j: sum(
        (x[i, j + t] * (t + 1.0) for t in range(1, 9)), x[i, j]), "a")
    assert expr_size_depth(a.op.body)[0] > MAX_DUP_SIZE
    sig = dsl.compute((6, 8), lambda i, j: dsl.sigmoid(a[i, j]), "sig")
    out = dsl.compute((6, 8), lambda i, j: a[i, j] * sig[i, j], "out")
    (out2,) = inline_stages([out])
    k = dsl.create_kernel([x, out2], name="silu")
    text = k.script()
    assert len(re.findall(r"x\[\w+, \w+ \+ 8\]", text)) == 1, text   # the last tap, once
    loads = [e for e in dsl._children(out2.op.body) if isinstance(e, BufferLoad)]
    assert [e.buffer.name for e in loads] == ["a"]
