"""Scenario S3: a vendor codegen registered from outside plait (examples/vendor_codegen.py,
``mydnn``) gets a ResNet-style model's convolution blocks, a second codegen (``mm``:
onnxruntime, given the matmuls only) its classifier; the default pipeline leaves their
functions alone; ``ConvertLayout`` (NHWC) + ``FoldConstant`` run on exactly mydnn's
functions — by hand, by ``ForCodegen`` in the pipeline and by the configuration key —
and the built model matches onnxruntime at rtol 1e-4 on ``numpy`` and ``c``."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import plait
from plait.ir import assert_structural_equal
from plait.ir.parser import parse
from plait.runtime import Executable, VirtualMachine
from plait.transform import CodegenError, ForCodegen, PassContext, unregister_codegen

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vendor_codegen.py"
RNG = np.random.default_rng(16)
C = 3


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    """Random weights on a grid of 1/16 (exact in float32 and in the text format)."""
    return (RNG.integers(-8, 9, shape) / 16).astype(np.float32)


W1, W2 = _weights((C, C, 3, 3)), _weights((C, C, 3, 3))
B1, B2 = _weights((C,)), _weights((C,))
M, BM = _weights((C, 4)), _weights((4,))


def _c(a: np.ndarray) -> str:
    return f'const({np.asarray(a, np.float32).tolist()!r}, "float32")'


def P(text: str):  # type: ignore[no-untyped-def]
    return parse(textwrap.dedent(text))


MODEL = f"""
    @module(attrs={{"phase": "optimization"}})
    class Module:
        @function
        def main(x: Tensor((1, {C}, 6, 6), "float32")) -> Tensor((1, 4), "float32"):
            with dataflow():
                a = conv2d(x, {_c(W1)}, padding=(1, 1, 1, 1))
                b = add(a, {_c(B1.reshape(C, 1, 1))})
                r = relu(b)
                d = conv2d(r, {_c(W2)}, padding=(1, 1, 1, 1))
                e = add(d, {_c(B2.reshape(C, 1, 1))})
                f = add(e, x)
                g = relu(f)
                h = global_avg_pool2d(g)
                i = reshape(h, shape=(1, {C}))
                j = matmul(i, {_c(M)})
                k = add(j, {_c(BM)})
                output(k)
            return k
"""
"""A residual block (conv, bias, relu, conv, bias, + input, relu), global average
pooling and a classifier, NCHW as imported."""

MAIN_PARTITIONED = f"""
        @function
        def main(x: Tensor((1, {C}, 6, 6), "float32")) -> Tensor((1, 4), "float32"):
            with dataflow():
                g = cls.mydnn_main_0(x)
                h = global_avg_pool2d(g)
                i = reshape(h, shape=(1, {C}))
                k = cls.mm_main_0(i)
                output(k)
            return k
"""

MM = f"""
        @function(attrs={{"compiler": "mm", "global_symbol": "mm_main_0"}})
        def mm_main_0(i: Tensor((1, {C}), "float32")) -> Tensor((1, 4), "float32"):
            with dataflow():
                j = matmul(i, {_c(M)})
                k = add(j, {_c(BM)})
                output(k)
            return k
"""

MYDNN_NCHW = f"""
        @function(attrs={{"compiler": "mydnn", "global_symbol": "mydnn_main_0"}})
        def mydnn_main_0(x: Tensor((1, {C}, 6, 6), "float32")) -> Tensor((1, {C}, 6, 6),
                                                                         "float32"):
            with dataflow():
                a = conv2d(x, {_c(W1)}, padding=(1, 1, 1, 1))
                b = add(a, {_c(B1.reshape(C, 1, 1))})
                r = relu(b)
                d = conv2d(r, {_c(W2)}, padding=(1, 1, 1, 1))
                e = add(d, {_c(B2.reshape(C, 1, 1))})
                f = add(e, x)
                g = relu(f)
                output(g)
            return g
"""

HWIO = (2, 3, 1, 0)
MYDNN_NHWC = f"""
        @function(attrs={{"compiler": "mydnn", "global_symbol": "mydnn_main_0"}})
        def mydnn_main_0(x: Tensor((1, {C}, 6, 6), "float32")) -> Tensor((1, {C}, 6, 6),
                                                                         "float32"):
            with dataflow():
                x1 = permute_dims(x, axes=(0, 2, 3, 1))
                a = conv2d(x1, {_c(W1.transpose(HWIO))}, padding=(1, 1, 1, 1),
                           data_layout="NHWC", kernel_layout="HWIO")
                b = add(a, {_c(B1.reshape(1, 1, 1, C))})
                r = relu(b)
                d = conv2d(r, {_c(W2.transpose(HWIO))}, padding=(1, 1, 1, 1),
                           data_layout="NHWC", kernel_layout="HWIO")
                e = add(d, {_c(B2.reshape(1, 1, 1, C))})
                f = add(e, x1)
                g = relu(f)
                g1 = permute_dims(g, axes=(0, 3, 1, 2))
                output(g1)
            return g1
"""
"""mydnn's function after the user's passes: the input transposed once (the first
convolution and the residual share it), kernels HWIO and biases (1, 1, 1, C) folded by
FoldConstant (weights transposed by numpy here), one transpose back at the result."""


def _module(*functions: str) -> str:
    return '@module(attrs={"phase": "optimization"})\nclass Module:\n' + \
        "".join(textwrap.dedent(f).replace("\n", "\n    ").rstrip(" ") for f in functions)


def _onnx_model():  # type: ignore[no-untyped-def]
    """The same model in ONNX (the reference onnxruntime runs)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(a, n) for a, n in
             ((W1, "w1"), (B1, "b1"), (W2, "w2"), (B2, "b2"), (M, "m"), (BM, "bm"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["e"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["e", "x"], ["f"]), helper.make_node("Relu", ["f"], ["g"]),
             helper.make_node("GlobalAveragePool", ["g"], ["h"]),
             helper.make_node("Flatten", ["h"], ["i"]),
             helper.make_node("MatMul", ["i", "m"], ["j"]),
             helper.make_node("Add", ["j", "bm"], ["k"])]
    graph = helper.make_graph(
        nodes, "s3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 6, 6])],
        [helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def vendor() -> Iterator[ModuleType]:
    """The example module, its two codegens registered (as a vendor's plug-in would)."""
    spec = importlib.util.spec_from_file_location("plait_example_vendor_codegen", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mod.register(override=True)
    mod.register_matmuls_to_onnxruntime(override=True)
    yield mod
    unregister_codegen(mod.NAME)
    unregister_codegen(mod.MATMUL)


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    x = RNG.standard_normal((1, C, 6, 6)).astype(np.float32)
    return x, ort.InferenceSession(_onnx_model().SerializeToString()).run(None, {"x": x})[0]


def test_partition_then_passes_on_exactly_mydnn_functions(vendor: ModuleType) -> None:
    part = plait.partition(P(MODEL), vendor.NAME, vendor.MATMUL)
    assert_structural_equal(part, P(_module(MAIN_PARTITIONED, MYDNN_NCHW, MM)))
    # the default pipeline's optimization passes leave the external functions alone:
    # after ConvertLayout alone, its permute_dims(const) stay unfolded
    converted = ForCodegen(vendor.NAME, "ConvertLayout(desired={'conv2d': 'NHWC'})")(part)
    assert converted["main"] is part["main"] and converted["mm_main_0"] is part["mm_main_0"]
    optimized = plait.default_pipeline("numpy")["optimization"](converted)
    assert optimized["mydnn_main_0"] is converted["mydnn_main_0"]
    assert optimized["mm_main_0"] is part["mm_main_0"]
    assert "permute_dims(const" in converted.script()
    # the user's passes on exactly mydnn's functions: main and mm untouched
    after = ForCodegen(vendor.NAME, vendor.USER_PASSES)(part)
    assert_structural_equal(after, P(_module(MAIN_PARTITIONED, MYDNN_NHWC, MM)))
    assert after["main"] is part["main"] and after["mm_main_0"] is part["mm_main_0"]


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_the_model_builds_saves_loads_and_matches_onnxruntime(
        vendor: ModuleType, reference: tuple[np.ndarray, np.ndarray], target: str,
        tmp_path: Path) -> None:
    x, ref = reference
    part = plait.partition(P(MODEL), vendor.NAME, vendor.MATMUL)
    if target == "numpy":   # the user's passes as a pass of the pipeline
        pipe = plait.default_pipeline(target, from_phase="optimization").insert_before(
            "RunCodegen", ForCodegen(vendor.NAME, vendor.USER_PASSES))
        exe = plait.build(part, target, pipeline=pipe)
    else:                   # ... and by the configuration key
        with PassContext(config={f"codegen.{vendor.NAME}.passes": vendor.USER_PASSES}):
            exe = plait.build(part, target)
    assert sorted((m.codegen, m.format) for m in exe.external) == \
        [("mm", "onnxruntime"), ("mydnn", "native")]
    exe.save(tmp_path / "s3.plx")
    for e in (exe, Executable.load(tmp_path / "s3.plx")):
        np.testing.assert_allclose(VirtualMachine(e)["main"](x), ref, rtol=1e-4, atol=1e-6)


def test_without_the_passes_mydnn_refuses_nchw_naming_the_fix(vendor: ModuleType) -> None:
    part = plait.partition(P(MODEL), vendor.NAME, vendor.MATMUL)
    with pytest.raises(CodegenError, match=re.escape(
            "codegen 'mydnn' failed to compile its functions (mydnn_main_0): MyDnnError: "
            "mydnn: function 'mydnn_main_0', binding 'a': conv2d is NCHW/OIHW; mydnn "
            "compiles NHWC data with HWIO kernels only: run ConvertLayout(desired="
            "{'conv2d': 'NHWC'}) on its functions first")):
        plait.build(part, "numpy")
    marked = P("""
        @module(attrs={"phase": "optimization"})
        class Module:
            @function(attrs={"compiler": "mydnn", "global_symbol": "f"})
            def f(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    y = exp(x)
                    output(y)
                return y

            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                with dataflow():
                    y = cls.f(x)
                    output(y)
                return y
    """)
    with pytest.raises(CodegenError, match=r"binding 'y': op 'exp' is not one mydnn compiles"):
        plait.build(marked, "numpy")


def test_the_example_runs_the_scenario_on_an_imported_resnet(vendor: ModuleType) -> None:
    pytest.importorskip("onnxruntime")
    assert vendor.main("c", verbose=False) < 1e-4
