"""The op computes beyond the one sample per op of tests/op: the other dtypes, layouts,
modes and attribute combinations each compute handles, built op by op on
``Target("c", blas=False, fuse=False)`` (so every case runs the compute's own kernel)
and matched against the numpy references with the tolerances of tests/op/
test_ops_built_c.py.  All cases are functions of one module: one compiler run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import plait
from plait.ir import BlockBuilder, TensorType, Tuple, Var
from plait.op import make_call
from plait.runtime import Executable, VirtualMachine, numpy_ops
from plait.target.c import library_calls
from plait.transform import Sequential

RNG = np.random.default_rng(21)
TARGET = plait.Target("c", blas=False, fuse=False)


def f32(*s: int) -> np.ndarray:
    return RNG.standard_normal(s).astype(np.float32)


def f64(*s: int) -> np.ndarray:
    return RNG.standard_normal(s)


def i32(lo: int, hi: int, *s: int) -> np.ndarray:
    return RNG.integers(lo, hi, s).astype(np.int32)


def i64(lo: int, hi: int, *s: int) -> np.ndarray:
    return RNG.integers(lo, hi, s).astype(np.int64)


def b(*s: int) -> np.ndarray:
    return RNG.integers(0, 2, s).astype(bool)


SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 100.0, -100.0], np.float32)
INTS = np.array([7, -7, 0, 3, -3, 1, -1, 12], np.int32)
DIVS = np.array([2, 2, 5, 0, -2, -1, 3, -5], np.int32)

# (case id, op, inputs, attrs); a tuple input is a Tuple of tensors
CASES: list[tuple[str, str, list, dict]] = [
    # elementwise: other dtypes and special values
    ("add-bool", "add", [b(6), b(6)], {}),
    ("multiply-bool", "multiply", [b(2, 3), b(3)], {}),
    ("maximum-nan", "maximum", [SPECIAL, SPECIAL[::-1].copy()], {}),
    ("minimum-bool", "minimum", [b(5), b(5)], {}),
    ("divide-int-by-zero-and-negative", "divide", [INTS, DIVS], {}),
    ("divide-f64", "divide", [f64(3, 4), f64(4)], {}),
    ("floor_divide-int", "floor_divide", [INTS, DIVS], {}),
    ("floor_divide-uint8", "floor_divide", [np.array([7, 200, 9], np.uint8),
                                            np.array([2, 0, 4], np.uint8)], {}),
    ("mod-int", "mod", [INTS, DIVS], {}),
    ("mod-float", "mod", [f32(6) * 5, np.array([2, -2, 3, -3, 1.5, -1.5], np.float32)], {}),
    ("fmod-float", "mod", [f32(6) * 5, np.array([2, -2, 3, -3, 1.5, -1.5], np.float32)],
     {"fmod": True}),
    ("power-f64", "power", [np.abs(f64(5)) + 0.1, f64(5)], {}),
    ("power-int", "power", [i32(0, 4, 5), i32(0, 3, 5)], {}),
    ("sign-special", "sign", [SPECIAL], {}),
    ("sign-int", "sign", [INTS], {}),
    ("relu-int", "relu", [INTS], {}),
    ("abs-int8", "abs", [np.array([-128, -3, 0, 5], np.int8)], {}),
    ("neg-special", "neg", [SPECIAL], {}),
    ("bitwise_not-int32", "bitwise_not", [INTS], {}),
    ("bitwise_not-uint8", "bitwise_not", [np.array([0, 1, 200, 255], np.uint8)], {}),
    ("bitwise_or-bool", "bitwise_or", [b(4), b(4)], {}),
    ("clip-int-float-bounds", "clip", [INTS], {"min": -2.5, "max": 4.5}),
    ("clip-min-only", "clip", [SPECIAL], {"min": 0.5}),
    ("cast-float-to-int", "cast", [f32(8) * 10], {"dtype": "int32"}),
    ("cast-int-to-bool", "cast", [INTS], {"dtype": "bool"}),
    ("cast-bool-to-float", "cast", [b(5)], {"dtype": "float64"}),
    ("sigmoid-extremes", "sigmoid", [SPECIAL[[0, 2, 3, 7, 8]].copy()], {}),
    ("silu-f64", "silu", [f64(6) * 4], {}),
    ("softplus-threshold", "softplus", [np.array([-30, -1, 0, 1, 9, 11], np.float32)],
     {"beta": 2.0, "threshold": 20.0}),
    ("gelu-exact", "gelu", [f32(3, 4) * 3], {}),
    ("erf-f64", "erf", [f64(7) * 2], {}),
    ("hard_sigmoid-f64", "hard_sigmoid", [f64(6) * 4], {"alpha": 0.3, "beta": 0.4}),
    ("isinf", "isinf", [SPECIAL], {}),
    ("isnan", "isnan", [SPECIAL], {}),
    ("round-halves", "round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)], {}),
    ("where-broadcast", "where", [b(3, 1), f32(1, 4), f32(3, 4)], {}),
    # reductions
    ("sum-all-keepdims", "sum", [f32(2, 3, 4)], {"keepdims": True}),
    ("sum-int-no-axes", "sum", [i32(-9, 9, 3, 4)], {"axis": ()}),
    ("prod-int", "prod", [i64(-3, 4, 3, 5)], {"axis": -1}),
    ("mean-keepdims-f64", "mean", [f64(4, 5)], {"axis": 1, "keepdims": True}),
    ("max-nan", "max", [np.array([[1, np.nan, 3], [4, 5, 6]], np.float32)], {"axis": 1}),
    ("argmax-flat-last", "argmax", [i32(0, 3, 3, 4)], {"select_last_index": True}),
    ("argmin-ties-keepdims", "argmin", [i32(0, 2, 3, 5)], {"axis": 0, "keepdims": True}),
    ("argmax-nan", "argmax", [np.array([[1, np.nan, 3, np.nan]], np.float32)], {"axis": 1}),
    ("cumsum-reverse", "cumsum", [f32(3, 5)], {"axis": 1, "reverse": True}),
    ("cumsum-reverse-exclusive", "cumsum", [i32(-5, 5, 3, 5)],
     {"axis": 0, "reverse": True, "exclusive": True}),
    ("cumsum-flat", "cumsum", [i32(-5, 5, 2, 3)], {}),
    ("variance-keepdims", "variance", [f64(3, 6)], {"axis": (0, 1), "keepdims": True}),
    ("l2_norm-all", "l2_norm", [f32(3, 4)], {}),
    # normalizations and softmax
    ("softmax-axis0", "softmax", [f32(4, 3)], {"axis": 0}),
    ("log_softmax-3d", "log_softmax", [f64(2, 5, 3)], {"axis": 1}),
    ("layer_norm-last", "layer_norm", [f32(3, 8), f32(8), f32(8)], {"epsilon": 1e-3}),
    ("batch_norm-channels-last", "batch_norm",
     [f32(2, 3, 4), f32(4), f32(4), f32(4), np.abs(f32(4)) + 0.5], {"axis": -1}),
    ("group_norm-channels-last", "group_norm", [f32(2, 5, 6), f32(6), f32(6)],
     {"num_groups": 3, "channel_axis": -1}),
    ("instance_norm-1d", "instance_norm", [f32(2, 3, 7), f32(3), f32(3)], {}),
    # pooling
    ("max_pool2d-nhwc-ceil-dilated", "max_pool2d", [f32(1, 9, 8, 2)],
     {"pool_size": 2, "strides": 2, "dilation": 2, "ceil_mode": True, "layout": "NHWC"}),
    ("max_pool1d-int", "max_pool1d", [i32(-9, 9, 1, 2, 7)], {"pool_size": 3, "padding": 1}),
    ("avg_pool2d-include-pad", "avg_pool2d", [f32(1, 2, 5, 5)],
     {"pool_size": 3, "strides": 2, "padding": 1, "count_include_pad": True}),
    ("avg_pool2d-ceil-window-beyond-input", "avg_pool2d", [f32(1, 3, 7, 6)],
     {"pool_size": 1280, "strides": 1280, "ceil_mode": True}),
    ("max_pool2d-ceil-window-beyond-input", "max_pool2d", [f32(1, 3, 5, 4)],
     {"pool_size": (9, 300), "strides": (9, 300), "padding": (1, 0, 1, 0),
      "ceil_mode": True}),
    ("avg_pool1d-nwc-ceil", "avg_pool1d", [f32(2, 7, 3)],
     {"pool_size": 3, "strides": 2, "ceil_mode": True, "layout": "NWC"}),
    ("adaptive_avg_pool2d-nhwc", "adaptive_avg_pool2d", [f32(1, 5, 7, 2)],
     {"output_size": (3, 3), "layout": "NHWC"}),
    ("adaptive_avg_pool2d-same", "adaptive_avg_pool2d", [f32(1, 2, 3, 4)], {}),
    ("global_avg_pool2d-nhwc", "global_avg_pool2d", [f32(2, 3, 4, 5)], {"layout": "NHWC"}),
    # resize
    ("resize-nearest-asymmetric-floor", "resize2d", [f32(1, 2, 3, 4)],
     {"size": (7, 5), "method": "nearest", "coordinate_transformation_mode": "asymmetric",
      "rounding_method": "floor"}),
    ("resize-nearest-round", "resize2d", [i32(0, 9, 1, 1, 4, 4)],
     {"size": (6, 3), "method": "nearest"}),
    ("resize-linear-align-corners", "resize2d", [f32(1, 2, 3, 4)],
     {"size": (5, 7), "coordinate_transformation_mode": "align_corners"}),
    ("resize-linear-pytorch-nhwc", "resize2d", [f32(1, 4, 6, 3)],
     {"size": (2, 3), "coordinate_transformation_mode": "pytorch_half_pixel",
      "layout": "NHWC"}),
    # data movement
    ("reshape-middle", "reshape", [f32(2, 3, 4, 5)], {"shape": (2, 12, 5)}),
    ("reshape-all", "reshape", [i32(0, 9, 4, 6)], {"shape": (3, 8)}),
    ("flatten-all", "flatten", [f32(2, 3, 4)], {}),
    ("permute-reverse", "permute_dims", [f32(2, 3, 4)], {}),
    ("expand_dims-negative", "expand_dims", [f32(3, 4)], {"axis": -1}),
    ("squeeze-all", "squeeze", [f32(1, 3, 1, 2)], {}),
    ("broadcast_to-rank", "broadcast_to", [b(1, 4)], {"shape": (2, 3, 4)}),
    ("tile-short-repeats", "tile", [f32(2, 3, 2)], {"repeats": (2, 3)}),
    ("repeat-flat", "repeat", [i32(0, 9, 2, 3)], {"repeats": 3}),
    ("concat-three-last", "concat", [(f32(2, 1), f32(2, 3), f32(2, 2))], {"axis": -1}),
    ("split-indices", "split", [f32(3, 7)], {"indices_or_sections": (2, 5), "axis": 1}),
    ("pad-constant-crop", "pad", [f32(4, 5)],
     {"pad_width": (1, -1, -2, 2), "pad_value": 9.5}),
    ("pad-constant-int", "pad", [i32(0, 9, 3)], {"pad_width": (2, 1), "pad_value": 7.9}),
    ("pad-edge", "pad", [f32(3, 4)], {"pad_width": (2, 1, 0, 3), "pad_mode": "edge"}),
    ("pad-wrap", "pad", [f32(3, 4)], {"pad_width": (1, 2, 3, 0), "pad_mode": "wrap"}),
    ("strided_slice-multi", "strided_slice", [f32(6, 7, 3)],
     {"axes": (0, 1), "begin": (-1, 1), "end": (-7, 100), "strides": (-2, 3)}),
    ("take-flat-negative", "take", [f32(3, 4), i64(-12, 12, 5)], {}),
    ("take-axis1-int32", "take", [f32(3, 4), i32(-4, 4, 2, 3)], {"axis": 1}),
    ("gather_elements-axis1", "gather_elements", [f32(3, 4), i64(-4, 4, 3, 6)], {"axis": 1}),
    ("one_hot-axis0-int", "one_hot", [i64(-3, 4, 2, 3)],
     {"depth": 3, "axis": 0, "on_value": 5.7, "off_value": -1.0, "dtype": "int32"}),
    ("shape_of-3d", "shape_of", [f32(2, 5, 1)], {}),
    ("full_like-int", "full_like", [f32(2, 3)], {"fill_value": -3, "dtype": "int8"}),
    ("ones_like-bool", "ones_like", [i32(0, 2, 4)], {"dtype": "bool"}),
    # linear algebra as loop nests
    ("matmul-vector-vector", "matmul", [f32(5), f32(5)], {}),
    ("matmul-batched-broadcast", "matmul", [f32(2, 1, 3, 4), f32(5, 4, 2)], {}),
    ("matmul-int", "matmul", [i32(-3, 3, 3, 4), i32(-3, 3, 4)], {}),
    ("linear-3d-no-bias", "linear", [f32(2, 3, 4), f32(5, 4)], {}),
    ("conv2d-nhwc-hwio-groups", "conv2d", [f32(1, 7, 6, 4), f32(3, 3, 2, 6)],
     {"groups": 2, "padding": (1, 0, 2, 1), "dilation": (2, 1), "strides": (1, 2),
      "data_layout": "NHWC", "kernel_layout": "HWIO"}),
    # depthwise (one input channel per group): the window written out as one sum
    ("conv2d-depthwise-pad", "conv2d", [f32(1, 5, 7, 9), f32(5, 1, 3, 3)],
     {"groups": 5, "padding": 1}),
    ("conv2d-depthwise-stride2-dilated", "conv2d", [f32(2, 3, 9, 8), f32(3, 1, 3, 3)],
     {"groups": 3, "strides": 2, "dilation": 2, "padding": (2, 1, 2, 2)}),
    ("conv2d-depthwise-multiplier-7x7", "conv2d", [f32(1, 3, 11, 10), f32(6, 1, 7, 7)],
     {"groups": 3, "padding": 3}),
    ("conv2d-depthwise-nhwc-unpadded", "conv2d", [f32(1, 6, 5, 4), f32(3, 2, 1, 4)],
     {"groups": 4, "data_layout": "NHWC", "kernel_layout": "HWIO"}),
    ("conv1d-depthwise", "conv1d", [f32(1, 3, 13), f32(3, 1, 5)], {"groups": 3, "padding": 2}),
    ("conv2d-int", "conv2d", [i32(-3, 3, 1, 2, 5, 5), i32(-3, 3, 3, 2, 3, 3)], {}),
    ("conv1d-nwc-wio", "conv1d", [f32(2, 9, 3), f32(3, 3, 4)],
     {"data_layout": "NWC", "kernel_layout": "WIO", "strides": 2, "padding": 1}),
    ("conv_transpose2d-pad-outpad-dilation", "conv_transpose2d", [f32(1, 2, 3, 4),
                                                                  f32(2, 3, 3, 2)],
     {"strides": 2, "padding": (1, 0, 0, 1), "output_padding": (1, 0), "dilation": (1, 2)}),
    ("conv_transpose1d-nwc-groups", "conv_transpose1d", [f32(1, 5, 4), f32(4, 1, 3)],
     {"groups": 2, "data_layout": "NWC", "strides": 3}),
]

# cases a compute hands back to the numpy library call, with the reason
LIBRARY = {
    "power-int": "integer power",
}
TRANSCENDENTAL = (1e-5, 1e-7)
REDUCTION = (1e-5, 1e-6)
TOLERANCE = {
    "sigmoid-extremes": TRANSCENDENTAL, "silu-f64": TRANSCENDENTAL,
    "softplus-threshold": TRANSCENDENTAL, "gelu-exact": TRANSCENDENTAL,
    "erf-f64": TRANSCENDENTAL, "power-f64": TRANSCENDENTAL,
    **{c[0]: REDUCTION for c in CASES if c[1] in (
        "sum", "mean", "variance", "l2_norm", "cumsum", "softmax", "log_softmax",
        "layer_norm", "group_norm", "instance_norm", "avg_pool1d", "avg_pool2d",
        "adaptive_avg_pool2d", "global_avg_pool2d", "matmul", "linear", "conv1d", "conv2d",
        "conv_transpose1d", "conv_transpose2d")},
}


def _fn(case: str) -> str:
    return "f_" + case.replace("-", "_")


@pytest.fixture(scope="module")
def built() -> tuple[plait.IRModule, Executable]:
    bb = BlockBuilder()
    for case, op, inputs, attrs in CASES:
        params: list[Var] = []
        args: list[Any] = []
        for i, a in enumerate(inputs):
            if isinstance(a, tuple):
                fields = tuple(Var(f"t{i}_{j}", TensorType(t.shape, t.dtype.name))
                               for j, t in enumerate(a))
                params.extend(fields)
                args.append(Tuple(fields))
            else:
                v = Var(f"a{i}", TensorType(a.shape, a.dtype.name))
                params.append(v)
                args.append(v)
        with bb.function(_fn(case), params):
            with bb.dataflow():
                out = bb.emit_output(make_call(op, *args, **attrs), "out")
            bb.emit_func_output(out)
    mod = bb.get()
    stages = [s for s in plait.default_pipeline(TARGET).passes if s.name != "build"]
    lowered = Sequential(stages)(mod.with_attrs(target=TARGET))
    return lowered, plait.build(mod, TARGET)


@pytest.mark.parametrize("case, op, inputs, attrs", CASES, ids=[c[0] for c in CASES])
def test_compute_case_matches_the_reference(built: tuple[plait.IRModule, Executable], case: str,
                                            op: str, inputs: list, attrs: dict) -> None:
    lowered, exe = built
    flat = [t for a in inputs for t in (a if isinstance(a, tuple) else (a,))]
    with np.errstate(all="ignore"):
        want = numpy_ops.IMPLS[op](*inputs, **attrs)
    got = VirtualMachine(exe)[_fn(case)](*flat)
    rtol, atol = TOLERANCE.get(case, (1e-6, 0.0))
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    lib = library_calls(plait.IRModule({_fn(case): lowered[_fn(case)]}))
    assert lib == ([op] if case in LIBRARY else []), LIBRARY.get(case)


def test_power_by_a_constant_two_or_three_is_multiplications() -> None:
    """RMSNorm's square and GPT-2's cube: no libm ``pow`` call in the fused kernel (it
    keeps the loop scalar); the square is exact, the cube within an ulp; other
    exponents still call ``pow``."""
    from plait.ir import Constant
    from plait.kernel import Kernel
    from plait.kernel.text import print_kernel

    x = Var("x", TensorType((3, 37), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            sq = bb.emit(make_call("power", x, Constant(np.float32(2.0))))
            cu = bb.emit(make_call("power", x, Constant(np.float32(3.0))))
            other = bb.emit(make_call("power", x, Constant(np.float32(1.5))))
            out = bb.emit_output(make_call("add", make_call("add", sq, cu), other))
        bb.emit_func_output(out)
    mod = bb.get()
    target = plait.Target("c")
    stages = [s for s in plait.default_pipeline(target).passes if s.name != "build"]
    lowered = Sequential(stages)(mod.with_attrs(target=target))
    text = "\n".join(print_kernel(n, k) for n, k in lowered.functions.items()
                     if isinstance(k, Kernel))
    assert text.count("pow(") == 1 and "pow(x[i0, i1], 1.5)" in text, text
    data = np.abs(f32(3, 37)) + 0.5
    got = VirtualMachine(plait.build(mod, target))["main"](data)
    d = data.astype(np.float64)
    np.testing.assert_allclose(got, d * d + d ** 3 + d ** 1.5, rtol=3e-7)


def test_float32_gelu_chain_computes_erf_in_float32() -> None:
    """GELU as exported by torch (``x * (erf(x / sqrt 2) + 1) * 0.5``): the fused
    float32 kernel calls no float64 ``erf`` (a scalar libm call per element), and
    matches the float64 GELU within 3 ulp of the products' range (2e-7 relative, 3e-7
    absolute for the cancellation of ``erf + 1`` at large negative x)."""
    import math

    from plait.ir import Constant
    from plait.kernel import Kernel
    from plait.kernel.text import print_kernel

    x = Var("x", TensorType((5, 203), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            d = bb.emit(make_call("divide", x, Constant(np.float32(math.sqrt(2.0)))))
            e = bb.emit(make_call("add", bb.emit(make_call("erf", d)), Constant(np.float32(1))))
            m = bb.emit(make_call("multiply", x, e))
            out = bb.emit_output(make_call("multiply", m, Constant(np.float32(0.5))))
        bb.emit_func_output(out)
    mod = bb.get()
    target = plait.Target("c")
    stages = [s for s in plait.default_pipeline(target).passes if s.name != "build"]
    lowered = Sequential(stages)(mod.with_attrs(target=target))
    kernels = [print_kernel(n, k) for n, k in lowered.functions.items()
               if isinstance(k, Kernel)]
    assert len(kernels) == 1 and "erf(" in kernels[0] and "float64" not in kernels[0]
    data = np.linspace(-9, 9, 5 * 203, dtype=np.float32).reshape(5, 203)
    got = VirtualMachine(plait.build(mod, target))["main"](data)
    want = np.asarray([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in data.ravel()
                       .astype(np.float64)]).reshape(data.shape)
    np.testing.assert_allclose(got, want, rtol=2e-7 * 3, atol=3e-7)
