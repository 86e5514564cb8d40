"""Passes: decorators, PassInfo, calling, results, phases, registry."""

from __future__ import annotations

import pytest
from transform_testlib import BASIC, BASIC_ABS, INGESTION, P, Tag, relu_to_abs

from plait.ir import DataflowBlock, IRModule, assert_structural_equal
from plait.ir.visitor import ExprMutator
from plait.transform import (
    DataflowBlockPass,
    FunctionPass,
    ModulePass,
    PassContext,
    PassError,
    PassInfo,
    PassWellFormedError,
    PhaseError,
    PipelineError,
    dataflow_block_pass,
    function_pass,
    get_pass_class,
    make_pass,
    module_pass,
    pass_info,
)
from plait.transform.registry import register_pass, unregister_pass


def test_function_decorator_makes_a_callable_instance() -> None:
    mod = P(BASIC)
    before = P(BASIC)
    out = relu_to_abs(mod)
    assert_structural_equal(out, P(BASIC_ABS))
    assert_structural_equal(mod, before)  # the input is untouched
    assert isinstance(relu_to_abs, FunctionPass)
    info = relu_to_abs.info
    assert (info.name, info.kind, info.phases, info.transition) == (
        "test.ReluToAbs", "function", ("optimization",), None)
    assert info.doc == "Rewrite relu into abs (a tiny rewrite for tests)."


def test_unchanged_module_comes_back_identical() -> None:
    mod = P(BASIC_ABS)
    assert relu_to_abs(mod) is mod


def test_class_decorator_on_a_plain_class() -> None:
    assert issubclass(Tag, ModulePass)
    mod = P(BASIC)
    out = Tag(value="v")(mod)
    assert out.attrs["tag"] == "v" and "tag" not in mod.attrs
    assert Tag.info.phases == ("ingestion", "optimization", "lowering", "build")
    assert Tag(value="v").to_text() == "test.Tag(value='v')"
    assert Tag().to_text() == "test.Tag"
    assert Tag(value="a").with_params(value="b") == Tag(value="b")
    assert Tag(value="a") != Tag(value="b")


def test_class_decorator_on_a_pass_subclass() -> None:
    @dataflow_block_pass(name="test.CountBlocks", register=False)
    class CountBlocks(DataflowBlockPass):
        """Count dataflow blocks."""

        seen = 0

        def transform_block(self, block: DataflowBlock, mod: IRModule, ctx: PassContext):
            type(self).seen += 1
            return block

    mod = P(BASIC)
    assert CountBlocks()(mod) is mod
    assert CountBlocks.seen == 1
    assert CountBlocks.info.kind == "dataflow_block"


def test_dataflow_block_pass_rewrites_only_dataflow_blocks() -> None:
    @dataflow_block_pass(name="test.AbsInDataflow", register=False)
    def abs_in_dataflow(block: DataflowBlock, mod: IRModule) -> DataflowBlock:
        from transform_testlib import _ReluToAbs

        m = _ReluToAbs()
        m.builder.begin_scope(True)
        for b in block.bindings:
            m.visit_binding(b)
        return DataflowBlock(tuple(m.builder.end_scope()))

    mod = P("""
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                a = relu(x)
                with dataflow():
                    y = relu(a)
                    output(y)
                return y
    """)
    out = abs_in_dataflow(mod)
    text = out.script()
    assert "a = relu(x)" in text and "y = abs(a)" in text


def test_decorator_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match="must define transform_module"):
        @module_pass(name="test.Bad1", register=False)
        class Bad1:
            pass

    with pytest.raises(TypeError, match="must take"):
        @function_pass(name="test.Bad2", register=False)
        def bad2(a, b, c, d):  # noqa: ANN001, ANN202
            return a

    with pytest.raises(ValueError, match="did you mean 'optimization'"):
        @function_pass(name="test.Bad3", phases=("optimisation",), register=False)
        def bad3(f):  # noqa: ANN001, ANN202
            return f

    with pytest.raises(ValueError, match="backwards"):
        PassInfo("test.Bad4", phases=("build",), transition="lowering")
    with pytest.raises(ValueError, match="invalid pass name"):
        PassInfo("no spaces")
    with pytest.raises(TypeError, match="use the matching decorator"):
        @module_pass(name="test.Bad5", register=False)
        class Bad5(FunctionPass):
            def transform_function(self, func, mod, ctx):  # noqa: ANN001, ANN201
                return func


def test_undecorated_subclass_cannot_be_instantiated() -> None:
    class Sub(Tag):
        pass

    with pytest.raises(TypeError, match="decorate it"):
        Sub()


def test_pass_must_return_a_module() -> None:
    @module_pass(name="test.ReturnsNone", register=False)
    def returns_none(mod: IRModule) -> None:
        return None

    with pytest.raises(PassError, match="returned NoneType, not an IRModule"):
        returns_none(P(BASIC))


def test_undeclared_phase_change_is_an_error() -> None:
    @module_pass(name="test.Sneaky", register=False)
    def sneaky(mod: IRModule) -> IRModule:
        return mod.with_phase("lowering")

    with pytest.raises(PassError, match="declare transition='lowering'"):
        sneaky(P(BASIC))


def test_transition_sets_the_phase_and_is_checked() -> None:
    @module_pass(name="test.ToLowering", transition="lowering", register=False)
    def to_lowering(mod: IRModule) -> IRModule:
        return mod  # forgets to set the phase: the manager sets it

    mod = P(BASIC)
    with pytest.raises(PassWellFormedError) as info:
        to_lowering(mod)
    err = info.value
    assert err.pass_name == "test.ToLowering"
    assert "after transition pass 'test.ToLowering' (optimization -> lowering)" in str(err)
    assert "op 'relu' is left after legalization" in str(err)
    assert "function 'main', binding 'y'" in str(err)
    with PassContext(config={"transform.check_transitions": False}):
        assert to_lowering(mod).phase == "lowering"


def test_direct_call_in_the_wrong_phase() -> None:
    with pytest.raises(PhaseError) as info:
        relu_to_abs(P(INGESTION))
    msg = str(info.value)
    assert "pass 'test.ReluToAbs' was called on a module in phase ingestion" in msg
    assert "run 'Normalize, LambdaLift' (the ingestion->optimization transition)" in msg


def test_registry_by_name() -> None:
    assert get_pass_class("test.ReluToAbs") is type(relu_to_abs)
    assert make_pass("test.Tag", value="q") == Tag(value="q")
    assert pass_info("LambdaLift").transition == "optimization"
    with pytest.raises(PipelineError, match="did you mean 'test.ReluToAbs'"):
        make_pass("test.ReluToAb")
    with pytest.raises(PipelineError, match="cannot create pass 'test.Tag'"):
        make_pass("test.Tag", nonsense=1)

    @module_pass(name="test.Dup", register=False)
    def dup(mod: IRModule) -> IRModule:
        return mod

    register_pass(type(dup))
    try:
        other = module_pass(lambda mod: mod, name="test.Dup", register=False)
        with pytest.raises(ValueError, match="already registered"):
            register_pass(type(other))
        register_pass(type(other), override=True)
        assert get_pass_class("test.Dup") is type(other)
    finally:
        unregister_pass("test.Dup")


def test_function_pass_with_a_mutator_class() -> None:
    @function_pass(name="test.Identity", register=False)
    class Identity:
        def transform_function(self, func, mod, ctx):  # noqa: ANN001, ANN201
            return ExprMutator(mod).visit_function(func)

    mod = P(BASIC)
    assert Identity()(mod) is mod
