"""The qnn dialect joins the default pipeline through the dialect registry only:
``build()``, the pipeline module and the targets name no qnn op, the passes run because
the dialect registered them, and a user composes the same passes by hand."""

from __future__ import annotations

import os

import numpy as np
import pytest

import plait
from plait.dialects import DIALECTS, dialect_passes
from plait.runtime.vm import VirtualMachine
from plait.target import Target
from plait.transform import Sequential, make_pass

ROOT = os.path.dirname(os.path.abspath(plait.__file__))


def _core_files() -> list[str]:
    files = [os.path.join(ROOT, "build.py"), os.path.join(ROOT, "pipeline.py")]
    for d, _, names in os.walk(os.path.join(ROOT, "target")):
        files += [os.path.join(d, n) for n in names if n.endswith((".py", ".c", ".h"))]
    return files


def test_build_pipeline_and_targets_name_no_qnn_op() -> None:
    files = _core_files()
    assert len(files) > 10
    for path in files:
        with open(path, encoding="utf-8") as f:
            assert "qnn" not in f.read(), f"{path} names the qnn dialect"


def test_the_dialect_is_loaded_by_import_plait_and_fills_the_extension_points() -> None:
    assert "qnn" in DIALECTS
    for t in ("numpy", "c"):
        names = plait.default_pipeline(t).names()
        assert names.index("qnn.Canonicalize") < names.index("Normalize")
        assert names.index("qnn.Legalize") < names.index("LegalizeOps")
    assert [p.name for p in dialect_passes("ingestion", Target("numpy"))] == ["qnn.Canonicalize"]


def test_without_the_registration_the_pipeline_has_no_qnn_pass() -> None:
    """build() knows the dialect only through the registry: take the registration
    away and its passes are gone (and a qnn op is then an error naming it)."""
    saved = DIALECTS.pop("qnn")
    try:
        assert not any(n.startswith("qnn.") for n in plait.default_pipeline("c").names())
        text = """
@module
class M:
    @function
    def main(x: Tensor((3,), "uint8")) -> Tensor((3,), "float32"):
        with dataflow():
            y = qnn.dequantize(x, const(0.5, "float32"), const(1, "uint8"))
            output(y)
        return y
"""
        with pytest.raises(Exception, match="qnn.dequantize"):
            plait.build(plait.parse(text), "numpy")
    finally:
        DIALECTS["qnn"] = saved


def test_by_hand_composition_equals_build(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``mod = qnn.Canonicalize()(mod)`` ... ``mod = qnn.Legalize()(mod)``, then the rest
    of the default pipeline without the dialect's passes: the same executable result as
    ``plait.build`` on the imported model."""
    pytest.importorskip("onnxruntime")
    from qnn_models import quantize, sample

    from plait.dialects import qnn
    from plait.frontend.onnx import from_onnx

    path = quantize("mlp", "qdq", str(tmp_path))
    x = sample("mlp", 4)
    want = np.asarray(VirtualMachine(plait.build(from_onnx(path), "numpy"))["main"](x))

    mod = from_onnx(path)
    mod = qnn.Canonicalize()(mod)
    mod = Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(mod)
    mod = qnn.Legalize()(mod)
    assert "qnn." not in str(mod)
    rest = plait.default_pipeline("numpy", from_phase="optimization").remove("qnn.Legalize")
    got = np.asarray(VirtualMachine(plait.build(mod, "numpy", pipeline=rest))["main"](x))
    np.testing.assert_array_equal(got, want)


def test_the_int8_dispatch_is_registered_for_c_only() -> None:
    """The dialect's dispatch hook gives qnn.DispatchInt8 to targets of kind c with their
    own kernels (gemm on), before the target's dispatch passes; numpy keeps qnn.Legalize
    for everything."""
    names = plait.default_pipeline("c").names()
    assert names.index("qnn.DispatchInt8") < names.index("c.DispatchGemm")
    assert names.index("qnn.DispatchInt8") < names.index("qnn.Legalize")
    assert "qnn.DispatchInt8" not in plait.default_pipeline("numpy").names()
    assert "qnn.DispatchInt8" not in plait.default_pipeline(Target("c", gemm=False)).names()


def test_by_hand_composition_on_c_equals_build(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On ``c``: ``qnn.DispatchInt8`` then ``qnn.Legalize`` by hand, the rest of the
    pipeline without them, gives what ``plait.build`` gives (the int8 kernels' result,
    equal to the numpy target's bit for bit)."""
    pytest.importorskip("onnxruntime")
    from qnn_models import quantize, sample

    from plait.dialects import qnn
    from plait.frontend.onnx import from_onnx

    path = quantize("mlp", "qop", str(tmp_path))
    x = sample("mlp", 5)
    want = np.asarray(VirtualMachine(plait.build(from_onnx(path), "numpy"))["main"](x))

    mod = from_onnx(path)
    mod = qnn.Canonicalize()(mod)
    mod = Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(mod)
    mod = qnn.DispatchInt8()(mod)
    assert "qnn.matmul" not in str(mod)
    mod = qnn.Legalize()(mod)
    assert "qnn." not in str(mod)
    rest = plait.default_pipeline("c", from_phase="optimization").remove(
        "qnn.DispatchInt8").remove("qnn.Legalize")
    got = np.asarray(VirtualMachine(plait.build(mod, "c", pipeline=rest))["main"](x))
    np.testing.assert_array_equal(got, want)
