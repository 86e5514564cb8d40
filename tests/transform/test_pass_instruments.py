"""Instruments: hooks, veto, timing, printing, dumping, per-pass checks."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from transform_testlib import BASIC, BASIC_ABS, P, Tag, recorder, relu_to_abs

from plait.ir import (
    Call,
    Constant,
    Function,
    IRModule,
    Op,
    SeqExpr,
    assert_structural_equal,
)
from plait.transform import (
    DumpIR,
    ImmutabilityCheck,
    ImmutabilityError,
    InstrumentError,
    PassContext,
    PassInstrument,
    PassTiming,
    PassWellFormedError,
    PrintIfChanged,
    PrintIR,
    Sequential,
    WellFormedCheck,
    function_pass,
    module_pass,
)


class Record(PassInstrument):
    def __init__(self, veto: str | None = None) -> None:
        self.events: list[str] = []
        self.veto = veto

    def enter_pass_ctx(self, ctx):  # noqa: ANN001, ANN201
        self.events.append("enter")

    def exit_pass_ctx(self, ctx):  # noqa: ANN001, ANN201
        self.events.append("exit")

    def should_run(self, mod, info):  # noqa: ANN001, ANN201
        return info.name != self.veto

    def run_before_pass(self, mod, info):  # noqa: ANN001, ANN201
        self.events.append(f"before {info.name}")

    def run_after_pass(self, mod, result, info):  # noqa: ANN001, ANN201
        self.events.append(f"after {info.name}")

    def run_skipped_pass(self, mod, info, reason):  # noqa: ANN001, ANN201
        self.events.append(f"skip {info.name}: {reason}")


def test_hooks_see_every_pass_in_order() -> None:
    rec = Record()
    seq = Sequential([relu_to_abs, Sequential([Tag()], name="inner")], name="outer")
    with PassContext(instruments=[rec]):
        seq(P(BASIC))
    assert rec.events == [
        "enter", "before outer", "before test.ReluToAbs", "after test.ReluToAbs",
        "before inner", "before test.Tag", "after test.Tag", "after inner", "after outer", "exit",
    ]


def test_should_run_vetoes_a_pass() -> None:
    rec = Record(veto="test.ReluToAbs")
    mod = P(BASIC)
    with PassContext(instruments=[rec]):
        assert relu_to_abs(mod) is mod
    assert rec.events[1] == "skip test.ReluToAbs: vetoed by instrument Record"


def test_outer_instruments_see_passes_of_inner_contexts() -> None:
    rec = Record()
    with PassContext(instruments=[rec]):
        with PassContext(opt_level=3):
            relu_to_abs(P(BASIC))
    assert rec.events == ["enter", "before test.ReluToAbs", "after test.ReluToAbs", "exit"]


def test_timing_report_nests() -> None:
    timing = PassTiming()
    seq = Sequential([
        Sequential([relu_to_abs, Tag()], name="inner"),
        Tag(value="x"),
        recorder("test.Heavy", [], opt_level=4),
    ], name="outer")
    with PassContext(instruments=[timing]):
        seq(P(BASIC))
    (root,) = timing.entries
    assert root.name == "outer"
    assert [c.name for c in root.children] == ["inner", "test.Tag", "test.Heavy"]
    assert [c.name for c in root.children[0].children] == ["test.ReluToAbs", "test.Tag"]
    assert root.seconds >= root.children[0].seconds >= root.children[0].children[0].seconds
    lines = timing.report().splitlines()
    assert lines[0].startswith("pass timing: ")
    assert lines[1].startswith("  outer ") and lines[1].endswith("100.0%")
    assert lines[2].startswith("    inner ")
    assert lines[3].startswith("      test.ReluToAbs ")
    assert lines[-1].startswith("    test.Heavy ") and "skipped: its opt_level 4" in lines[-1]


def test_print_ir_before_and_after_named_passes() -> None:
    out = io.StringIO()
    with PassContext(instruments=[PrintIR(before="test.ReluToAbs", after=["test.Tag"],
                                          file=out)]):
        Sequential([relu_to_abs, Tag()])(P(BASIC))
    text = out.getvalue()
    assert text.count("# IR ") == 2
    before, after = text.split("# IR after pass 'test.Tag' (phase optimization)\n")
    assert before.startswith("# IR before pass 'test.ReluToAbs' (phase optimization)\n")
    assert "relu(x)" in before
    assert "abs(x)" in after and '"tag": "t"' in after


def test_print_if_changed_prints_only_changes() -> None:
    out = io.StringIO()
    with PassContext(instruments=[PrintIfChanged(file=out)]):
        Sequential([relu_to_abs, relu_to_abs, Tag()])(P(BASIC))
    text = out.getvalue()
    assert text.count("# IR after pass") == 2
    assert "# IR after pass 'test.ReluToAbs' changed it" in text
    assert "# IR after pass 'test.Tag' changed it" in text


def test_dump_ir_writes_numbered_files(tmp_path: Path) -> None:
    dump = DumpIR(tmp_path / "dump")
    with PassContext(instruments=[dump]):
        Sequential([relu_to_abs, Tag()])(P(BASIC))
    names = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert names == ["000_input.py", "001_test.ReluToAbs.py", "002_test.Tag.py"]
    assert_structural_equal(P((tmp_path / "dump" / "001_test.ReluToAbs.py").read_text()),
                            P(BASIC_ABS))


@module_pass(name="test.Malformed", register=False)
def malformed(mod: IRModule) -> IRModule:
    """Nest a call inside another (not A-normal form) with an unregistered op."""
    f = mod["main"]
    assert isinstance(f.body, SeqExpr)
    block = f.body.blocks[0]
    b = block.bindings[1]
    bad = Call(Op.get("no_such_op"), (Call(Op.get("relu"), (f.params[0],)),))
    new_block = replace(block, bindings=(block.bindings[0], replace(b, value=bad)))
    return mod.with_function("main", replace(f, body=replace(f.body, blocks=(new_block,))))


def test_well_formed_check_names_the_pass() -> None:
    with PassContext(instruments=[WellFormedCheck()]):
        with pytest.raises(PassWellFormedError) as info:
            Sequential([relu_to_abs, malformed, Tag()])(P(BASIC))
    err = info.value
    assert err.pass_name == "test.Malformed"
    msg = str(err)
    assert msg.startswith("after pass 'test.Malformed' (phase optimization -> optimization): "
                          "the module is not well formed for phase optimization")
    assert "function 'main', binding 'z': op 'no_such_op' is not registered" in msg
    assert "function 'main', binding 'z': argument 0 of the call is a nested Call" in msg
    assert {v.binding for v in err.violations} == {"z"}


def test_well_formed_check_blames_a_malformed_input() -> None:
    bad = malformed(P(BASIC))
    with PassContext(instruments=[WellFormedCheck()]):
        with pytest.raises(PassWellFormedError, match="the module given to pass 'test.Tag' is "
                                                      "already malformed"):
            Tag()(bad)


@function_pass(name="test.CheatSetattr", register=False)
def cheat_setattr(func: Function) -> Function:
    """Mutate the input in place (forbidden)."""
    assert isinstance(func.body, SeqExpr)
    b = func.body.blocks[0].bindings[0]
    object.__setattr__(b, "value", Call(Op.get("abs"), (func.params[0],), ty=b.value.ty))
    return func


@module_pass(name="test.CheatConstant", register=False)
def cheat_constant(mod: IRModule) -> IRModule:
    """Write into a constant's array (forbidden)."""
    from plait.ir.visitor import post_order

    for node in post_order(mod["main"]):
        if isinstance(node, Constant):
            node.data.flags.writeable = True
            node.data[...] = 42
    return mod


@module_pass(name="test.CheatAttrs", register=False)
def cheat_attrs(mod: IRModule) -> IRModule:
    """Write into the module's attribute mapping (forbidden)."""
    mod.attrs._d["sneaky"] = 1  # type: ignore[attr-defined]
    return mod


def test_immutability_check_catches_cheating_passes() -> None:
    with PassContext(instruments=[ImmutabilityCheck()]):
        relu_to_abs(P(BASIC))  # honest
        with pytest.raises(ImmutabilityError) as info:
            cheat_setattr(P(BASIC))
        assert info.value.pass_name == "test.CheatSetattr"
        assert "pass 'test.CheatSetattr' modified the module it was given (changed 'main')" \
            in str(info.value)
        const_mod = _module_with_constant()
        with pytest.raises(ImmutabilityError, match="changed 'main'"):
            cheat_constant(const_mod)
        with pytest.raises(ImmutabilityError, match="changed '<module attrs>'"):
            cheat_attrs(P(BASIC))


def _module_with_constant() -> IRModule:
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call

    bb = BlockBuilder()
    x = Var("x", TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(make_call("add", x, Constant(np.ones((2, 3), "float32"))))
        bb.emit_func_output(y)
    return bb.get().with_phase("optimization")


def test_a_failing_instrument_is_named() -> None:
    class Broken(PassInstrument):
        def run_before_pass(self, mod, info):  # noqa: ANN001, ANN201
            raise KeyError("oops")

    with PassContext(instruments=[Broken()]):
        with pytest.raises(InstrumentError, match="instrument Broken failed in run_before_pass "
                                                  "for pass 'test.Tag': KeyError"):
            Tag()(P(BASIC))
