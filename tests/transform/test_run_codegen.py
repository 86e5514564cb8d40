"""RunCodegen and ForCodegen: passes on exactly one codegen's functions, then compile."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from transform_testlib import P

import plait
from plait.codegen.onnxruntime import compile_onnxruntime
from plait.interp import run
from plait.ir import assert_structural_equal
from plait.runtime import ExternalModule, VirtualMachine
from plait.transform import (
    CodegenError,
    ConfigError,
    ForCodegen,
    PassContext,
    PassError,
    RunCodegen,
    extract_external,
    is_op,
    make_pass,
    merge_external,
    register_codegen,
    unregister_codegen,
)

RECEIVED: list = []


def _recording_compile(mod):  # type: ignore[no-untyped-def]
    RECEIVED.append(mod)
    return compile_onnxruntime(mod, codegen="folds")


@pytest.fixture(scope="module", autouse=True)
def folds_codegen():
    register_codegen("folds", patterns=[("folds.op", is_op("add", "multiply"))],
                     compile=_recording_compile, passes=["FoldConstant"], override=True)
    yield
    unregister_codegen("folds")


MOD = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function(attrs={"compiler": "folds", "global_symbol": "folds_main_0"})
        def folds_main_0(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
            with dataflow():
                a = add(x, const(1.0, "float32"))
                b = add(x, const(1.0, "float32"))
                c = multiply(a, b)
                d = add(const(2.0, "float32"), const(3.0, "float32"))
                e = add(c, d)
                output(e)
            return e

        @function
        def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
            with dataflow():
                k = add(const(2.0, "float32"), const(3.0, "float32"))
                y = multiply(x, k)
                z = cls.folds_main_0(y)
                output(z)
            return z
"""


def _drop(text: str, line: str) -> str:
    """``text`` without the line holding ``line``."""
    return "\n".join(x for x in text.split("\n") if x.strip() != line)


FOLDED = MOD.replace('d = add(const(2.0, "float32"), const(3.0, "float32"))',
                    'd = const(5.0, "float32")').replace(
    "e = add(c, d)", 'e = add(c, const(5.0, "float32"))')
FOLDED_CSE = _drop(FOLDED, 'b = add(x, const(1.0, "float32"))').replace(
    "c = multiply(a, b)", "c = multiply(a, a)")


def _reference(x: np.ndarray) -> np.ndarray:
    y = x * np.float32(5)
    return (y + 1) * (y + 1) + np.float32(5)


def _received_text(text: str):  # type: ignore[no-untyped-def]
    """The module the codegen gets: its functions, without compiler attributes."""
    mod = P(text)
    return extract_external(mod, "folds")


def test_run_codegen_runs_the_codegen_and_user_passes_on_its_functions_only() -> None:
    RECEIVED.clear()
    with PassContext(config={"codegen.folds.passes": "EliminateCommonSubexpr"}):
        out = RunCodegen()(P(MOD))
    assert_structural_equal(RECEIVED[0], _received_text(FOLDED_CSE))
    after = """
        @module(attrs={"phase": "optimization"})
        class Module:
            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    k = add(const(2.0, "float32"), const(3.0, "float32"))
                    y = multiply(x, k)
                    z = call_extern(extern("folds_main_0"), (y,), out=Tensor((2,), "float32"))
                    output(z)
                return z
    """
    mods = out.attrs["external_mods"]
    assert_structural_equal(out.with_attrs(external_mods=None), P(after))
    assert len(mods) == 1 and isinstance(mods[0], ExternalModule)
    assert mods[0].codegen == "folds" and [f.name for f in mods[0].functions] == ["folds_main_0"]
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_allclose(mods[0].load()["folds_main_0"](x * 5), _reference(x), rtol=1e-6)
    # the reference interpreter calls the compiled module from plain Python too
    np.testing.assert_allclose(run(out, x), _reference(x), rtol=1e-6)


def test_for_codegen_by_hand_inside_build_and_the_standalone_form() -> None:
    mod = P(MOD)
    by_hand = ForCodegen("folds", "EliminateCommonSubexpr")(mod)
    assert_structural_equal(by_hand, P(_drop(MOD, 'b = add(x, const(1.0, "float32"))')
                                       .replace("c = multiply(a, b)", "c = multiply(a, a)")))
    standalone = merge_external(mod, make_pass("EliminateCommonSubexpr")(
        extract_external(mod, "folds")), "folds")
    assert_structural_equal(standalone, by_hand)
    assert ForCodegen("folds", "FoldConstant").to_text() == \
        "ForCodegen(codegen='folds', passes='FoldConstant')"
    x = np.array([1.0, -2.0], np.float32)
    for target in ("numpy", "c"):
        RECEIVED.clear()
        pipe = plait.default_pipeline(target, from_phase="optimization").insert_before(
            "RunCodegen", ForCodegen("folds", "EliminateCommonSubexpr"))
        exe = plait.build(P(MOD), target, pipeline=pipe)
        assert_structural_equal(RECEIVED[0].with_attrs(target=None), _received_text(FOLDED_CSE))
        np.testing.assert_allclose(VirtualMachine(exe)["main"](x), _reference(x), rtol=1e-6)


def test_passes_in_the_wrong_phase_and_misplaced_for_codegen_are_refused() -> None:
    with PassContext(config={"codegen.folds.passes": "ToNonDataflow"}):
        with pytest.raises(CodegenError, match=r"RunCodegen: the passes cannot run on the "
                           r"functions of codegen 'folds', which are in phase optimization.*"
                           r"'ToNonDataflow'.*accepts only lowering"):
            RunCodegen()(P(MOD))
    with pytest.raises(CodegenError, match=r"ForCodegen\('folds'\): the passes moved the "
                                           r"functions from phase optimization to lowering"):
        ForCodegen("folds", "LegalizeOps")(P(MOD).with_attrs(target=plait.Target("numpy")))
    compiled = RunCodegen()(P(MOD))
    with pytest.raises(CodegenError, match=r"already compiled \(RunCodegen ran before\); "
                                           r"ForCodegen must come before RunCodegen"):
        ForCodegen("folds", "FoldConstant")(compiled)
    with pytest.raises(ConfigError, match=r"unknown config key 'codegen\.fold\.passes'; did "
                                          r"you mean 'codegen\.folds\.passes'"):
        PassContext(config={"codegen.fold.passes": "FoldConstant"})
    with pytest.raises(CodegenError, match=r"ForCodegen: no external codegen 'fold' is "
                                           r"registered; did you mean 'folds'"):
        ForCodegen("fold", "FoldConstant")


def test_functions_of_an_unknown_codegen_name_it_with_suggestions() -> None:
    typo = MOD.replace('"compiler": "folds"', '"compiler": "fold"')
    with pytest.raises(CodegenError, match=r"RunCodegen \(the module's functions folds_main_0 "
                                           r"belong to it\): no external codegen 'fold' is "
                                           r"registered; did you mean 'folds'"):
        RunCodegen()(P(typo))
    with pytest.raises((CodegenError, PassError), match="no external codegen 'fold'"):
        plait.build(P(typo), "numpy")


def test_a_compiled_function_that_does_not_fit_is_refused() -> None:
    def wrong(mod):  # type: ignore[no-untyped-def]
        m = compile_onnxruntime(mod, codegen="bad")
        from plait.runtime import ExternalFunction, TensorSig

        f = m.functions[0]
        return ExternalModule("bad", m.format, (ExternalFunction(
            f.name, f.inputs, (TensorSig((3,), "float32"),)),), m.blobs, m.meta)

    register_codegen("bad", compile=wrong, override=True)
    try:
        with pytest.raises(CodegenError, match=r"codegen 'bad': the compiled 'folds_main_0' does "
                                               r"not fit function 'folds_main_0': output 0 is "
                                               r"\(3,\) float32, the function has"):
            RunCodegen()(P(MOD.replace('"compiler": "folds"', '"compiler": "bad"')))
    finally:
        unregister_codegen("bad")


def test_a_codegen_that_fails_names_itself_and_its_functions() -> None:
    register_codegen("boom", compile=functools.partial(_boom), override=True)
    try:
        with pytest.raises(CodegenError, match=r"codegen 'boom' failed to compile its functions "
                                               r"\(folds_main_0\): RuntimeError: no device"):
            RunCodegen()(P(MOD.replace('"compiler": "folds"', '"compiler": "boom"')))
    finally:
        unregister_codegen("boom")


def _boom(mod):  # type: ignore[no-untyped-def]
    raise RuntimeError("no device")
