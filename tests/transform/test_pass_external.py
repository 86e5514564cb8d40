"""External functions: skipped by function passes unless enabled; extract and merge."""

from __future__ import annotations

import pytest
from transform_testlib import P, relu_to_abs

from plait.ir import assert_structural_equal
from plait.transform import (
    PassContext,
    Sequential,
    external_codegens,
    extract_external,
    merge_external,
    register_external_passes,
    unregister_external_passes,
)

MOD = """
    @module(attrs={"phase": "optimization", "target": "numpy"})
    class Module:
        @function(attrs={"compiler": "x"})
        def ext(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            b = relu(a)
            return b

        @function
        def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            y = relu(x)
            z = cls.ext(y)
            return z
"""
MAIN_DONE = MOD.replace("y = relu(x)", "y = abs(x)")
ALL_DONE = MAIN_DONE.replace("b = relu(a)", "b = abs(a)")


def test_external_function_untouched_by_default() -> None:
    mod = P(MOD)
    out = relu_to_abs(mod)
    assert_structural_equal(out, P(MAIN_DONE))
    assert out["ext"] is mod["ext"]


def test_enabled_through_the_context() -> None:
    for names in (["test.ReluToAbs"], ["*"], "test.ReluToAbs"):
        with PassContext(config={"transform.external_passes": {"x": names}}):
            assert_structural_equal(relu_to_abs(P(MOD)), P(ALL_DONE))
            assert_structural_equal(Sequential([relu_to_abs])(P(MOD)), P(ALL_DONE))
    with PassContext(config={"transform.external_passes": {"y": ["test.ReluToAbs"]}}):
        assert_structural_equal(relu_to_abs(P(MOD)), P(MAIN_DONE))


def test_enabled_per_pass() -> None:
    enabled = relu_to_abs.with_params(codegens=["x"])
    assert enabled.to_text() == "test.ReluToAbs(codegens=['x'])"
    out = enabled(P(MOD))
    assert_structural_equal(out, P(ALL_DONE))
    assert out["ext"].attrs["compiler"] == "x"


def test_enabled_by_the_codegen_registration() -> None:
    register_external_passes("x", ["test.ReluToAbs"])
    try:
        assert_structural_equal(relu_to_abs(P(MOD)), P(ALL_DONE))
    finally:
        unregister_external_passes("x")
    assert_structural_equal(relu_to_abs(P(MOD)), P(MAIN_DONE))


def test_extract_and_merge() -> None:
    mod = P(MOD)
    assert external_codegens(mod) == ["x"]
    ext = extract_external(mod, "x")
    assert list(ext.functions) == ["ext"]
    assert "compiler" not in ext["ext"].attrs
    assert ext.attrs == mod.attrs
    ext2 = relu_to_abs(ext)  # an ordinary pass, on an ordinary module
    merged = merge_external(mod, ext2, "x")
    assert_structural_equal(merged, P(MOD.replace("b = relu(a)", "b = abs(a)")))
    assert list(merged.functions) == ["ext", "main"]
    assert_structural_equal(merge_external(mod, ext, "x"), mod)
    with pytest.raises(ValueError, match="function 'main' of the external module clashes with a "
                                         "function of the host module"):
        merge_external(mod, ext.with_function("main", ext["ext"]), "x")
    # functions the external module drops are removed; new ones are added
    renamed = ext.without_function("ext").with_function("ext2", ext["ext"])
    out = merge_external(mod, renamed, "x")
    assert sorted(out.functions) == ["ext2", "main"] and out["ext2"].attrs["compiler"] == "x"
