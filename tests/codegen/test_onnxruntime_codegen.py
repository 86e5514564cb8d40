"""The onnxruntime codegen: ONNX export of each op checked against plait's numpy
reference, whole models offloaded and run on numpy and c (saved and loaded), and the
ops it cannot export."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import plait
from plait.codegen.onnxruntime import SUPPORTED, compile_onnxruntime
from plait.codegen.onnxruntime.export import OnnxExportError, export_function
from plait.frontend.onnx.importer import from_onnx
from plait.ir import BlockBuilder, Function, TensorType, Tuple, Var, const
from plait.op import make_call
from plait.runtime import Executable, VirtualMachine
from plait.transform import CodegenError, RunCodegen

RNG = np.random.default_rng(7)
X4 = (2, 3, 6, 6)

CASES = [
    ("relu", [(2, 5)], {}), ("sigmoid", [(2, 5)], {}), ("tanh", [(2, 5)], {}),
    ("exp", [(2, 5)], {}), ("abs", [(2, 5)], {}), ("neg", [(2, 5)], {}),
    ("erf", [(2, 5)], {}), ("silu", [(2, 5)], {}), ("gelu", [(2, 5)], {}),
    ("gelu", [(2, 5)], {"approximate": "tanh"}), ("leaky_relu", [(2, 5)], {"alpha": 0.1}),
    ("hard_sigmoid", [(2, 5)], {}), ("softplus", [(2, 5)], {}),
    ("clip", [(2, 5)], {"min": -0.5, "max": 0.5}), ("clip", [(2, 5)], {"min": 0.0}),
    ("add", [(2, 5), (5,)], {}), ("subtract", [(2, 5), (2, 1)], {}),
    ("multiply", [(2, 5), (2, 5)], {}), ("divide", [(2, 5), (2, 5)], {}),
    ("maximum", [(2, 5), (5,)], {}), ("minimum", [(2, 5), (5,)], {}),
    ("matmul", [(2, 4, 5), (5, 3)], {}), ("linear", [(2, 5), "w(3, 5)", "w(3,)"], {}),
    ("linear", [(4, 5), (3, 5)], {}),
    ("conv2d", [X4, "w(4, 3, 3, 3)"], {"strides": 2, "padding": (1, 0, 1, 1)}),
    ("conv2d", [X4, "w(6, 1, 3, 3)"], {"groups": 3, "dilation": 2}),
    ("conv2d", [(2, 6, 6, 3), "w(3, 3, 3, 4)"], {"data_layout": "NHWC",
                                                 "kernel_layout": "HWIO", "padding": 1}),
    ("max_pool2d", [X4], {"pool_size": 3, "strides": 2, "padding": 1}),
    ("max_pool2d", [(2, 6, 6, 3)], {"pool_size": 2, "strides": 2, "layout": "NHWC"}),
    ("avg_pool2d", [X4], {"pool_size": 2, "strides": 2, "count_include_pad": True}),
    ("global_avg_pool2d", [X4], {}), ("softmax", [(2, 5)], {"axis": 0}),
    ("log_softmax", [(2, 5)], {}), ("reshape", [(2, 6)], {"shape": (3, 4)}),
    ("permute_dims", [(2, 3, 4)], {"axes": (2, 0, 1)}), ("flatten", [X4], {"start_dim": 1}),
    ("expand_dims", [(2, 3)], {"axis": 1}), ("squeeze", [(2, 1, 3)], {"axis": 1}),
    ("sum", [(2, 3, 4)], {"axis": (0, 2)}), ("mean", [(2, 3, 4)], {"axis": 1,
                                                                  "keepdims": True}),
    ("max", [(2, 3, 4)], {}), ("min", [(2, 3, 4)], {"axis": -1}),
    ("layer_norm", [(2, 3, 4), "w(4,)", "w(4,)"], {}),
    ("batch_norm", [X4, "w(3,)", "w(3,)", "w(3,)", "pos(3,)"], {}),
    ("strided_slice", [(4, 6)], {"axes": (1,), "begin": (1,), "end": (5,), "strides": (2,)}),
    ("pad", [(2, 3)], {"pad_width": (1, 0, 2, 1), "pad_value": 1.5}),
    ("broadcast_to", [(1, 3)], {"shape": (4, 3)}), ("power", [(2, 3), (2, 3)], {}),
]


def _arg(spec, bb, params):  # type: ignore[no-untyped-def]
    if isinstance(spec, str):
        shape = tuple(int(s) for s in spec[spec.index("(") + 1:-1].split(",") if s.strip())
        data = RNG.standard_normal(shape).astype(np.float32)
        return const(np.abs(data) + 0.5 if spec.startswith("pos") else data)
    v = Var(f"x{len(params)}", TensorType(spec, "float32"))
    params.append(v)
    return v


def _single_op_module(op, specs, attrs):  # type: ignore[no-untyped-def]
    bb = BlockBuilder()
    params: list[Var] = []
    args = [_arg(s, bb, params) for s in specs]
    with bb.function("f", params, attrs={"global_symbol": "f"}):
        with bb.dataflow():
            out = bb.emit_output(make_call(op, *args, **attrs))
        bb.emit_func_output(out)
    return bb.get().with_phase("optimization"), params


@pytest.mark.parametrize("op, specs, attrs", CASES, ids=[f"{c[0]}{i}" for i, c in
                                                         enumerate(CASES)])
def test_each_exported_op_matches_the_numpy_reference(op, specs, attrs):
    mod, params = _single_op_module(op, specs, attrs)
    inputs = [RNG.standard_normal(p.ty.shape).astype(np.float32) for p in params]
    if op in ("divide", "power"):
        inputs[1] = np.abs(inputs[1]) + 0.5
        inputs[0] = np.abs(inputs[0])
    want = VirtualMachine(plait.build(mod.with_attrs(phase=None), "numpy"))["f"](*inputs)
    got = compile_onnxruntime(mod).load()["f"](*inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_mlp():  # type: ignore[no-untyped-def]
    model = onnx.load("examples/models/tiny_mlp.onnx")
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    return from_onnx(model), x, ref


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_an_offloaded_model_builds_saves_loads_and_runs(tiny_mlp, target, tmp_path):
    mod, x, ref = tiny_mlp
    part = plait.partition(mod, "onnxruntime")
    assert [n for n, f in part.graph_functions() if f.attrs.get("compiler")] == \
        ["onnxruntime_main_0"]
    exe = plait.build(part, target)
    path = tmp_path / "m.plx"
    exe.save(path)
    for e in (exe, Executable.load(path)):
        np.testing.assert_allclose(VirtualMachine(e)["main"](x), ref, rtol=1e-5, atol=1e-6)
    # the same through the target's offload attribute
    exe2 = plait.build(mod, plait.Target(target, offload=("onnxruntime",)))
    assert [m.codegen for m in exe2.external] == ["onnxruntime"]
    np.testing.assert_allclose(VirtualMachine(exe2)["main"](x), ref, rtol=1e-5, atol=1e-6)


def test_an_op_it_cannot_export_is_named_and_never_partitioned() -> None:
    mod, _ = _single_op_module("cumsum", [(2, 5)], {"axis": 1})
    with pytest.raises(OnnxExportError, match=r"function 'f', binding 'gv': cannot export to "
                                              r"ONNX: op 'cumsum' has no ONNX converter\. The "
                                              r"exporter converts abs, acos, add"):
        export_function(mod, "f")
    owned = mod.with_function("f", mod["f"].with_attrs(compiler="onnxruntime"))
    bb = BlockBuilder(owned)
    x = Var("x", TensorType((2, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make_call_global(owned, x))
        bb.emit_func_output(out)
    with pytest.raises(CodegenError, match=r"codegen 'onnxruntime' failed to compile its "
                                           r"functions \(f\): OnnxExportError: .*'cumsum'"):
        RunCodegen()(bb.get())
    assert "cumsum" not in SUPPORTED.ops
    plain, _ = _single_op_module("cumsum", [(2, 5)], {"axis": 1})
    kept = plait.partition(plain.with_function("f", plain["f"].with_attrs(global_symbol=None)),
                           "onnxruntime")
    assert not any(f.attrs.get("compiler") for _, f in kept.graph_functions())


def make_call_global(mod, x):  # type: ignore[no-untyped-def]
    from plait.ir import Call, GlobalVar

    f = mod["f"]
    assert isinstance(f, Function)
    return Call(GlobalVar("f", ty=f.ty), (x,))


def test_a_region_returning_two_values_exports_both() -> None:
    bb = BlockBuilder()
    x = Var("x", TensorType((2, 3), "float32"))
    with bb.function("f", [x], attrs={"global_symbol": "f"}):
        with bb.dataflow():
            a = bb.emit(make_call("relu", x))
            b = bb.emit(make_call("exp", a))
            out = bb.emit_output(Tuple((a, b)))
        bb.emit_func_output(out)
    mod = bb.get().with_phase("optimization")
    v = RNG.standard_normal((2, 3)).astype(np.float32)
    ra, rb = compile_onnxruntime(mod).load()["f"](v)
    np.testing.assert_allclose(ra, np.maximum(v, 0), rtol=1e-6)
    np.testing.assert_allclose(rb, np.exp(np.maximum(v, 0)), rtol=1e-6)
