"""Targets, target kinds and dialects: registration errors, derivation, hooks, and the
target's place in the text format."""

from __future__ import annotations

import pytest

import plait
from plait.dialects import DIALECTS, dialect_passes, register_dialect
from plait.ir import assert_structural_equal
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


def test_a_string_target_attribute_builds_like_a_target() -> None:
    mod = plait.parse(
        """
@module(attrs={"target": "numpy"})
class M:
    @function
    def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
        with dataflow():
            y = relu(x)
            output(y)
        return y
"""
    )
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
