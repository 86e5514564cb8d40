"""Targets, target kinds and dialects: registration errors, derivation, hooks, and the
target's place in the text format."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.dialects import DIALECTS, dialect_passes, register_dialect
from plait.ir import assert_structural_equal
from plait.runtime import VirtualMachine
from plait.target import Target, register_target_kind
from plait.transform import make_pass


def test_target_kind_derivation_collects_hooks_child_first() -> None:
    register_target_kind("reg_base", dispatch=lambda t: ["base"], override=True)
    register_target_kind(
        "reg_child", parent="reg_base", dispatch=lambda t: ["child"], defaults={"opt": 2},
        override=True,
    )
    t = Target("reg_child")
    assert t.is_a("reg_base") and t.is_a("reg_child") and not t.is_a("numpy")
    assert t.hook_passes("dispatch") == ["child", "base"]
    assert t.attrs["opt"] == 2 and Target("reg_child", opt=3).attrs["opt"] == 3
    assert Target("reg_child") == Target("reg_child") and hash(t) == hash(Target("reg_child"))


def test_target_errors_name_the_kind_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"'nmupy'.*did you mean numpy"):
        Target("nmupy")
    with pytest.raises(ValueError, match=r"unknown extension point 'dispach'.*dispatch"):
        register_target_kind("reg_bad", dispach=lambda t: [])
    with pytest.raises(ValueError, match=r"derives from 'nope', which is not registered"):
        register_target_kind("reg_orphan", parent="nope")
    with pytest.raises(ValueError, match="already registered"):
        register_target_kind("numpy")


def test_target_prints_and_parses_in_module_attributes() -> None:
    register_target_kind("reg_text", defaults={"lanes": 4}, override=True)
    text = """
@module(attrs={"target": Target("reg_text", lanes=8)})
class M:
    @function
    def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
        return x
"""
    mod = plait.parse(text)
    assert mod.target == Target("reg_text", lanes=8)
    assert 'Target("reg_text", lanes=8)' in mod.script()
    assert_structural_equal(plait.parse(mod.script()), mod)
    with pytest.raises(plait.ir.parser.ParseError, match=r"2:26: unknown target kind 'reg_txet'"):
        plait.parse(text.replace('"reg_text"', '"reg_txet"'))


_ONE_RELU = """
@module
class M:
    @function
    def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
        with dataflow():
            y = relu(x)
            output(y)
        return y
"""


def test_a_string_target_attribute_builds_like_a_target() -> None:
    mod = plait.parse(_ONE_RELU.replace("@module", '@module(attrs={"target": "numpy"})'))
    exe = plait.build(mod)
    assert exe.attrs["target"] == "numpy"


def test_dialect_passes_join_the_default_pipeline_without_the_core_naming_them() -> None:
    seen: list[str] = []

    @plait.transform.module_pass(name="reg_dialect.Canonicalize", phases="ingestion",
                                 override=True)
    def canon(mod):
        seen.append("canonicalize")
        return mod

    register_dialect("reg_dialect", ingestion=lambda target: [canon], override=True)
    try:
        assert canon in dialect_passes("ingestion", Target("numpy"))
        pipe = plait.default_pipeline("numpy")
        assert "reg_dialect.Canonicalize" in str(pipe)
        plait.build(
            plait.parse(
                """
@module
class M:
    @function
    def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
        return x
"""
            ),
            "numpy",
        )
        assert seen == ["canonicalize"]
    finally:
        DIALECTS.pop("reg_dialect", None)
    with pytest.raises(ValueError, match="unknown extension point 'legalise'"):
        register_dialect("reg_other", legalise=lambda t: [])
    assert make_pass("Normalize").name == "Normalize"



def test_build_keeps_its_default_pipeline_until_a_registry_changes() -> None:
    """``build`` makes the default pipeline once per target and phase (its passes keep no
    state between runs); registering a target kind, a dialect, a pass under a core
    pass's name or a user pass makes it anew, and the builds run the new one."""
    from plait.pipeline import USER_PASSES, build_pipeline, register_user_pass
    from plait.transform import register_pass, unregister_pass

    seen: list[str] = []

    @plait.transform.module_pass(name="reg_cache.Mark", phases="*", register=False)
    def mark(mod):
        seen.append("mark")
        return mod

    numpy = Target("numpy")
    first = build_pipeline(numpy, "ingestion")
    assert build_pipeline(Target("numpy"), "ingestion") is first  # an equal target
    assert build_pipeline(numpy, "optimization") is not first
    assert build_pipeline(Target("c"), "ingestion") is not first
    x = np.arange(2, dtype=np.float32) - 1
    vm = VirtualMachine(plait.build(plait.parse(_ONE_RELU), "numpy"))
    np.testing.assert_array_equal(vm["main"](x), np.maximum(x, 0))  # (exact)

    # a target with an array attribute (no plain equality) builds, cached or not
    for weights in (np.zeros(100, np.float32), np.zeros(100, np.float32)):
        vm = VirtualMachine(plait.build(plait.parse(_ONE_RELU), Target("numpy", w=weights)))
        np.testing.assert_array_equal(vm["main"](x), np.maximum(x, 0))

    register_target_kind("reg_cached", parent="numpy", dispatch=lambda t: [], override=True)
    t = Target("reg_cached")
    before = build_pipeline(t, "ingestion")
    assert build_pipeline(t, "ingestion") is before
    register_target_kind("reg_cached", parent="numpy", dispatch=lambda t: [mark],
                         override=True)
    after = build_pipeline(t, "ingestion")
    assert after is not before and "reg_cache.Mark" in after.names()
    plait.build(plait.parse(_ONE_RELU), t)
    assert seen == ["mark"]

    register_dialect("reg_cache_dialect", lowering=lambda target: [mark])
    try:
        assert "reg_cache.Mark" in build_pipeline(numpy, "ingestion").names()
        plait.build(plait.parse(_ONE_RELU), "numpy")
        assert seen == ["mark"] * 2
    finally:
        DIALECTS.pop("reg_cache_dialect")
    assert "reg_cache.Mark" not in build_pipeline(numpy, "ingestion").names()

    register_user_pass(mark)
    try:
        assert "reg_cache.Mark" in build_pipeline(numpy, "ingestion").names()
        plait.build(plait.parse(_ONE_RELU), "numpy")
        assert seen == ["mark"] * 3
    finally:
        USER_PASSES.remove(mark)
    assert "reg_cache.Mark" not in build_pipeline(numpy, "ingestion").names()

    # a class registered under a core pass's name replaces it in the next build
    dce = plait.transform.get_pass_class("DeadCodeElimination")

    @plait.transform.module_pass(name="DeadCodeElimination", override=True)
    class CountingDCE:
        def transform_module(self, mod, ctx):
            seen.append("dce")
            return mod

    try:
        plait.build(plait.parse(_ONE_RELU), "numpy")
        assert seen == ["mark"] * 3 + ["dce"]
    finally:
        unregister_pass("DeadCodeElimination")
        register_pass(dce)
    plait.build(plait.parse(_ONE_RELU), "numpy")
    assert seen == ["mark"] * 3 + ["dce"]


def test_a_pipeline_run_again_is_validated_again_when_the_context_changes() -> None:
    """A Sequential validates its plan once per phase, context skips and pass registry
    (``build`` runs the same default pipeline every time): a run under a context that
    disables a pass another one requires is still refused before anything runs."""
    from plait.transform import PassContext, PhaseError, Sequential

    ran: list[str] = []

    @plait.transform.module_pass(name="reg_val.First", phases="*", register=False)
    def first(mod):
        ran.append("first")
        return mod

    @plait.transform.module_pass(name="reg_val.Second", phases="*", requires="reg_val.First",
                                 register=False)
    def second(mod):
        ran.append("second")
        return mod

    pipe = Sequential([first, second])
    mod = plait.parse(_ONE_RELU)
    pipe(mod)
    pipe(mod)
    assert ran == ["first", "second"] * 2
    with PassContext(disabled=["reg_val.First"]):
        with pytest.raises(PhaseError, match="requires 'reg_val.First' to run before it"):
            pipe(mod)
    assert ran == ["first", "second"] * 2
    pipe(mod)
    assert ran == ["first", "second"] * 3
