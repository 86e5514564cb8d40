"""c.DispatchDepthwise and plait_dwconv.c: grouped and depthwise convolutions; and
c.DispatchSqueezeExcite (plait_se_scale, the same family).

The rewrite is checked on the IR (which chain becomes one native call, what stays an
op), the kernel against numpy in float64 (rtol/atol 1e-4: sums of up to 81 products of
values in [-1, 1]) on shapes the per-ISA cases (test_kernel_variants.py) do not cover:
a window with no compiled form (4x4, stride 3, dilation 3), a 1x1 depthwise, a batch
of 3, a call large enough to be split over threads, a view before the residual; and a
grouped float64 convolution still goes to the library.  Which family takes a grouped
convolution (the tile, or from 8 channels per group a product per group on the conv
family) and the tuner's other product points are checked here too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graph_helpers import build_graph, const, conv2d_reference, emit  # tests/target

import plait
from plait.ir.expr import Call, ExternFunc, Op
from plait.runtime import VirtualMachine
from plait.target.c import dispatch_depthwise
from plait.transform.activation_rules import ACTIVATION_RULES
from plait.transform.pattern_rewrite import rewrite_module

RNG = np.random.default_rng(7)


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _grouped_reference(x: np.ndarray, w: np.ndarray, groups: int, **kw: Any) -> np.ndarray:
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate([conv2d_reference(x[:, i * cg:(i + 1) * cg],
                                            w[i * og:(i + 1) * og], **kw)
                           for i in range(groups)], axis=1)


def _callees(mod: plait.IRModule) -> list[str]:
    """What main's bindings call, in order: op names and external function names."""
    out = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, Call):
                continue
            if isinstance(v.op, Op) and v.op.name == "call_extern":
                fn = v.args[0]
                out.append(fn.symbol if isinstance(fn, ExternFunc) else "?")
            elif isinstance(v.op, Op):
                out.append(v.op.name)
    return out


def _chain(act_then_residual: bool = False) -> tuple[plait.IRModule, np.ndarray,
                                                      np.ndarray, np.ndarray]:
    x, w, b, r = _rand(1, 6, 9, 9), _rand(6, 1, 3, 3), _rand(6), _rand(1, 6, 9, 9)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1, 1, 1), groups=6)
        y = emit(bb, "add", y, const(b.reshape(6, 1, 1)))
        if act_then_residual:
            return emit(bb, "add", emit(bb, "relu", y), p[1])
        y = emit(bb, "relu", emit(bb, "add", p[1], y))
        return emit(bb, "clip", emit(bb, "clip", y, max=6.0), min=0.5)

    ref = _grouped_reference(x, w, 6, padding=(1, 1, 1, 1)) + b.reshape(1, 6, 1, 1)
    ref = np.maximum(ref, 0) + r if act_then_residual else np.clip(ref + r, 0.5, 6)
    return build_graph({"x": x.shape, "r": r.shape}, body), x, r, ref


def test_the_epilogue_chain_is_one_native_call() -> None:
    """conv2d, bias, residual, relu and two clips (one interval) become one call."""
    mod, x, r, ref = _chain()
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 1 and callees[0].startswith("plait_dwconv2d_"), callees
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, r)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_a_residual_after_the_relu_stays_an_op() -> None:
    """The native epilogue adds the residual before the relu: a residual after it is
    left as an add (the call takes conv2d, bias and relu)."""
    mod, x, r, ref = _chain(act_then_residual=True)
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 2 and callees[0].startswith("plait_dwconv2d_"), callees
    assert callees[1] == "add"
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, r)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_gelu_after_a_depthwise_is_in_the_call() -> None:
    """The convolution, its bias and a GELU are one call of plait_dwconv.c (the GELU on
    vectors after the planes are stored), against float64 with math.erf at 1e-4."""
    import math

    x, w, b = _rand(1, 6, 9, 9) * 3, _rand(6, 1, 3, 3), _rand(6)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1, 1, 1), groups=6)
        return emit(bb, "gelu", emit(bb, "add", y, const(b.reshape(6, 1, 1))))

    mod = build_graph({"x": x.shape}, body)
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 1 and callees[0].startswith("plait_dwconv2d_"), callees
    y = _grouped_reference(x, w, 6, padding=(1, 1, 1, 1)) + b.reshape(1, 6, 1, 1)
    ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("other_use", [False, True], ids=["alone", "transpose read twice"])
def test_gelu_after_the_transpose_back_to_tokens(approximate: str, other_use: bool) -> None:
    """SegFormer's MLP: tokens to NCHW, a depthwise 3x3 with its bias, flattened and
    transposed back to tokens, then GELU.  The GELU moves before the transpose into the
    call (what stays is the call and a permute_dims); where the transposed value has
    another use it stays after it.  Against float64 (math.erf, numpy's tanh) at 1e-4."""
    import math

    c, h, w_ = 20, 6, 7
    t, w, b = _rand(1, h * w_, c) * 3, _rand(c, 1, 3, 3), _rand(c)

    def body(bb: Any, p: Any) -> Any:
        x = emit(bb, "reshape", emit(bb, "permute_dims", p[0], axes=(0, 2, 1)),
                 shape=(1, c, h, w_))
        y = emit(bb, "conv2d", x, const(w), padding=(1, 1, 1, 1), groups=c)
        y = emit(bb, "add", y, const(b.reshape(c, 1, 1)))
        y = emit(bb, "permute_dims", emit(bb, "reshape", y, shape=(1, c, h * w_)),
                 axes=(0, 2, 1))
        g = emit(bb, "gelu", y, approximate=approximate)
        return emit(bb, "add", g, y) if other_use else g

    mod = build_graph({"t": t.shape}, body)
    callees = _callees(dispatch_depthwise(mod))
    assert any(n.startswith("plait_dwconv2d_") for n in callees), callees
    assert ("gelu" in callees) == other_use, callees
    x = t.transpose(0, 2, 1).reshape(1, c, h, w_).astype(np.float64)
    y = _grouped_reference(x, w, c, padding=(1, 1, 1, 1)) + b.reshape(1, c, 1, 1)
    y = y.reshape(1, c, h * w_).transpose(0, 2, 1)
    if approximate == "tanh":
        ref = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    else:
        ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    if other_use:
        ref = ref + y
    got = VirtualMachine(plait.build(mod, "c"))["main"](t)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_without_the_pass_depthwise_is_generated_and_float64_goes_to_the_library() -> None:
    """depthwise=False: the generated depthwise kernel; a float64 grouped convolution is
    not the family's (blas.conv2d), in the same results."""
    mod, x, r, ref = _chain()
    got = VirtualMachine(plait.build(mod, plait.Target("c", depthwise=False)))["main"](x, r)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    x64, w64 = _rand(1, 4, 6, 7).astype(np.float64), _rand(4, 2, 3, 3).astype(np.float64)
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call

    p = Var("x", TensorType(x64.shape, "float64"))
    bb = BlockBuilder()
    with bb.function("main", [p]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(make_call("conv2d", p, const(w64), groups=2)))
        bb.emit_func_output(out)
    mod64 = bb.get()
    assert _callees(dispatch_depthwise(mod64)) == ["conv2d"]
    got64 = VirtualMachine(plait.build(mod64, "c"))["main"](x64)
    np.testing.assert_allclose(got64, _grouped_reference(x64, w64, 2), rtol=1e-10)


@pytest.mark.parametrize("lanes", ["0", "1"])
def test_relu_and_clip_on_the_tile_keep_nan_and_zero(lanes: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a residual, relu and clip run on the accumulators (the register tile with
    relu and a clip to [0.5, 6], channels in lanes with relu): NaN and inf pass as numpy
    passes them, bit for bit (a 1x1 depthwise of weight 1, so the sums are exact)."""
    x = _rand(1, 19, 5, 7) * 8
    x[0, 3, 1, 2] = np.nan
    x[0, 5, 0, 0] = np.inf
    w = np.ones((19, 1, 1, 1), np.float32)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "relu", emit(bb, "conv2d", p[0], const(w), groups=19))
        return emit(bb, "clip", y, min=0.5, max=6.0) if lanes == "0" else y

    monkeypatch.setenv("PLAIT_DW_LANES", lanes)
    mod = build_graph({"x": x.shape}, body)
    assert _callees(dispatch_depthwise(mod))[0].startswith("plait_dwconv2d_")
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    ref = np.maximum(x, np.float32(0))
    ref = np.where(np.isnan(x), x, ref)
    if lanes == "0":
        ref = np.clip(ref, np.float32(0.5), np.float32(6))
    assert got.tobytes() == ref.astype(np.float32).tobytes()


@pytest.mark.parametrize("residual", [False, True], ids=["on the tile", "after a residual"])
@pytest.mark.parametrize("lanes", ["0", "1"])
def test_silu_on_extreme_values(lanes: str, residual: bool,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectorized SiLU (a reciprocal estimate refined by a Newton step on AVX-512 and
    AVX2) on both layouts, on the accumulators or after a residual: within 4e-7 relative
    (1e-30 absolute) of numpy in float64 over -inf .. inf, NaN kept (-inf gives NaN, as
    -inf / inf does)."""
    vals = np.array([-np.inf, -1e4, -100, -88.5, -87.9, -20, -1, -1e-3, -0.0, 0, 1e-3, 1,
                     3.5, 20, 88.5, 100, 1e4, np.inf, np.nan], np.float32)
    x = np.resize(vals, (1, 19, 5, 7)).astype(np.float32)
    x[0, 4] = _rand(5, 7) * 10
    w = np.ones((19, 1, 1, 1), np.float32)
    r = np.zeros_like(x)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), groups=19)
        if residual:
            y = emit(bb, "add", y, p[1])
        return emit(bb, "multiply", y, emit(bb, "sigmoid", y))

    monkeypatch.setenv("PLAIT_DW_LANES", lanes)
    shapes = {"x": x.shape, "r": r.shape} if residual else {"x": x.shape}
    mod = build_graph(shapes, body)
    assert _callees(dispatch_depthwise(mod))[0].startswith("plait_dwconv2d_")
    with np.errstate(over="ignore", invalid="ignore"):
        got = VirtualMachine(plait.build(mod, "c"))["main"](*([x, r] if residual else [x]))
        x64 = x.astype(np.float64)
        ref = x64 / (1 + np.exp(-x64))
    np.testing.assert_allclose(got, ref, rtol=4e-7, atol=1e-30)


@pytest.mark.parametrize("shape", [
    # (N, C, H, W, O, groups, k, strides, dilation, padding)
    (3, 5, 17, 19, 5, 5, 4, (3, 3), (3, 3), (2, 1, 3, 2)),
    (1, 7, 6, 33, 7, 7, 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 64, 40, 41, 64, 64, 7, (1, 1), (1, 1), (3, 3, 3, 3)),
    (2, 12, 13, 15, 24, 4, 5, (2, 1), (1, 2), (2, 4, 2, 4)),
], ids=["4x4 stride 3 dilation 3 batch 3", "1x1 depthwise", "on 2 threads",
        "grouped 3 in 6 out per group"])
def test_shapes_against_numpy(shape: tuple[Any, ...]) -> None:
    n, c, h, wd, o, g, k, s, d, pad = shape
    x, w, b = _rand(n, c, h, wd), _rand(o, c // g, k, k), _rand(o)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), strides=s, dilation=d, padding=pad,
                 groups=g)
        return emit(bb, "multiply", y, emit(bb, "sigmoid", y))

    mod = build_graph({"x": x.shape}, body)
    assert _callees(dispatch_depthwise(mod))[0].startswith("plait_dwconv2d_")
    ref = _grouped_reference(x, w, g, strides=s, padding=pad, dilation=d)
    ref = ref / (1 + np.exp(-ref))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    del b


def _grouped_model(cg: int, groups: int, param_weight: bool = False
                   ) -> tuple[plait.IRModule, list[np.ndarray], np.ndarray]:
    """A grouped 3x3 convolution (stride 1, padding 1, dilation (1, 2)) of ``cg``
    channels per group on 2 x 7 x 9 images, with bias, a residual and relu; the weight
    a constant, or with ``param_weight`` a parameter."""
    c = cg * groups
    x, w, b, r = _rand(2, c, 7, 9), _rand(c, cg, 3, 3), _rand(c), _rand(2, c, 7, 9)
    pad = (1, 2, 1, 2)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], p[2] if param_weight else const(w), padding=pad,
                 dilation=(1, 2), groups=groups)
        y = emit(bb, "add", emit(bb, "add", y, const(b.reshape(c, 1, 1))), p[1])
        return emit(bb, "relu", y)

    shapes = {"x": x.shape, "r": r.shape, **({"w": w.shape} if param_weight else {})}
    ref = _grouped_reference(x, w, groups, padding=pad, dilation=(1, 2)) + b.reshape(1, c, 1, 1)
    inputs = [x, r, w] if param_weight else [x, r]
    return build_graph(shapes, body), inputs, np.maximum(ref + r, 0)


@pytest.mark.parametrize("cg, param_weight, family", [
    (2, False, "plait_dwconv2d_"), (8, False, "plait_conv2d_"), (8, True, "plait_dwconv2d_")],
    ids=["2 per group: the tile", "8 per group: a product per group",
         "8 per group, weight a parameter: the tile"])
def test_channels_per_group_choose_the_family(cg: int, param_weight: bool,
                                              family: str) -> None:
    """From GROUPED_PRODUCT_MIN_CG (8) channels per group with constant weights, a grouped
    convolution is the conv family's product per group (weights packed group by group
    at compile time); fewer channels, or weights known only at run time, stay on
    plait_dwconv.c's tile: one call each, with the epilogue, against numpy in float64
    (1e-4)."""
    mod, inputs, ref = _grouped_model(cg, 3, param_weight)
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 1 and callees[0].startswith(family), callees
    got = VirtualMachine(plait.build(mod, "c"))["main"](*inputs)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_tuned_product_points_on_every_instruction_set(tmp_path: Any) -> None:
    """The tuner's other ways of a product per group — pixels as the tile's rows
    (plait_conv2d_pixel_rows with groups), channels as rows capped at one thread, and
    with a thread split and block sizes of its own —
    from a tuning database record, on every float copy this CPU runs (64 channels per
    group: a sum of 576, two blocks), against numpy in float64 (1e-4)."""
    from plait.codegen.c.variants import FLOAT_ISAS
    from plait.target.c import cpu_features, use_isa
    from plait.target.c.tuning import Record, TuningDB, current_machine

    mod, inputs, ref = _grouped_model(64, 2)
    empty = tmp_path / "empty.db"
    TuningDB(empty)
    (info,) = plait.build(mod, plait.Target("c", tuning_db=str(empty))).attrs["tuning"].values()
    default = info["point"]
    assert default == {"layout": "product", "threads": 0, "split": "auto", "kc": 0, "mc": 0,
                       "nc": 0}
    values = {k: v for k, v in info["space"]["choices"].items()}
    isas = [i for i in cpu_features()["supported"] if i in FLOAT_ISAS]
    for n, point in enumerate([{**default, "layout": "product_rows"},
                               {**default, "threads": 1},
                               # the product's split and blocks (tuning: block_choices)
                               {**default, "split": values["split"][-1],
                                "kc": values["kc"][1], "mc": values["mc"][1],
                                "nc": values["nc"][-1]}]):   # 63 pixels: 0 only
        db = tmp_path / f"{n}.db"
        TuningDB(db).add([Record(info["call"], "dwconv2d", current_machine(), point, 1e-3,
                                 2e-3)])
        exe = plait.build(mod, plait.Target("c", tuning_db=str(db)))
        (noted,) = exe.attrs["tuning"].values()
        assert noted["origin"] == "database" and noted["point"] == point
        for isa in isas:
            with use_isa(isa):
                got = VirtualMachine(exe)["main"](*inputs)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{point} on {isa}")


def test_a_view_then_a_residual() -> None:
    """conv2d + bias, reshaped (the call writes the view), then a residual of the view's
    shape: one call."""
    x, w, b, r = _rand(1, 8, 5, 6), _rand(8, 1, 3, 3), _rand(8), _rand(8, 30)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1, 1, 1), groups=8)
        y = emit(bb, "add", y, const(b.reshape(8, 1, 1)))
        return emit(bb, "add", emit(bb, "reshape", y, shape=(8, 30)), p[1])

    mod = build_graph({"x": x.shape, "r": r.shape}, body)
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 1 and callees[0].startswith("plait_dwconv2d_"), callees
    ref = (_grouped_reference(x, w, 8, padding=(1, 1, 1, 1))
           + b.reshape(1, 8, 1, 1)).reshape(8, 30) + r
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, r)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _se_model(act: str = "silu", leak: bool = False, squeeze: Any = None,
              shape: tuple[Any, ...] = (2, 12, 4, 6)
              ) -> tuple[plait.IRModule, np.ndarray, np.ndarray]:
    """EfficientNet's squeeze-and-excite on 2 x 12 x 4 x 6 (12 -> 3 -> 12 channels, the
    first 1x1 convolution without a bias); with ``leak`` the pooled means are also an
    output (so the gate is not one call); ``squeeze``: the axes of a ``mean`` (keepdims,
    as torch.export writes the pooling) instead of ``global_avg_pool2d``; ``shape``: the
    parameter's type (symbolic sizes: the model is typed with them, ``x`` is 2 x 12 x 4
    x 6)."""
    x, w1 = _rand(2, 12, 4, 6), _rand(3, 12, 1, 1)
    w2, b2 = _rand(12, 3, 1, 1), _rand(1, 12, 1, 1)

    def body(bb: Any, p: Any) -> Any:
        s = emit(bb, "global_avg_pool2d", p[0]) if squeeze is None else \
            emit(bb, "mean", p[0], axis=squeeze, keepdims=True)
        h = emit(bb, "conv2d", s, const(w1))
        h = emit(bb, "multiply", emit(bb, "sigmoid", h), h) if act == "silu" else \
            emit(bb, "relu", h)
        g = emit(bb, "add", emit(bb, "conv2d", h, const(w2)), const(b2))
        y = emit(bb, "multiply", emit(bb, "sigmoid", g), p[0])
        if leak:
            from plait.ir.expr import Tuple
            return bb.emit(Tuple([y, s]))
        return y

    return build_graph({"x": shape}, body), x, _se_reference(x, w1, w2, b2, act)


def _se_reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
                  act: str) -> np.ndarray:
    """The gate of :func:`_se_model` in float64 numpy."""
    x64 = x.astype(np.float64)
    h = x64.mean((2, 3)) @ w1.reshape(3, 12).T
    h = h / (1 + np.exp(-h)) if act == "silu" else np.maximum(h, 0)
    g = h @ w2.reshape(12, 3).T + b2.reshape(-1)
    return x64 / (1 + np.exp(-g))[:, :, None, None]


@pytest.mark.parametrize("act", ["silu", "relu"])
def test_squeeze_excite_is_one_call(act: str) -> None:
    """global_avg_pool2d, 1x1 conv, SiLU (sigmoid(h) * h as exported) or relu, 1x1 conv
    + bias, sigmoid and the scale: one plait_se_scale call, against numpy (1e-5)."""
    from plait.target.c import dispatch_squeeze_excite

    mod, x, ref = _se_model(act)
    callees = _callees(dispatch_squeeze_excite(rewrite_module(mod, ACTIVATION_RULES)))
    assert len(callees) == 1 and callees[0].startswith("plait_se_scale_"), callees
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_squeeze_excite_on_a_symbolic_batch_and_image_is_one_call() -> None:
    """A dynamic EfficientNet's gate (batch, height and width symbolic, the channels
    not): still one plait_se_scale call, sizes passed at run time; one build runs three
    sizes (an empty batch too) against numpy (1e-5)."""
    from plait.ir.expr import Constant
    from plait.target.c import dispatch_squeeze_excite

    mod, x, ref = _se_model(shape=("n", 12, "h", "w"))
    callees = _callees(dispatch_squeeze_excite(rewrite_module(mod, ACTIVATION_RULES)))
    assert len(callees) == 1 and callees[0].startswith("plait_se_scale_"), callees
    vm = VirtualMachine(plait.build(mod, "c"))
    np.testing.assert_allclose(vm["main"](x), ref, rtol=1e-5, atol=1e-5)
    consts = [a.data for block in mod["main"].body.blocks for b in block.bindings
              if isinstance(b.value, Call) for a in b.value.args if isinstance(a, Constant)]
    w1, w2, b2 = (next(d for d in consts if d.shape == s) for s in
                  ((3, 12, 1, 1), (12, 3, 1, 1), (1, 12, 1, 1)))
    for size in ((3, 12, 7, 5), (0, 12, 4, 6)):
        x = _rand(*size)
        want = _se_reference(x, w1, w2, b2, "silu") if size[0] else x
        np.testing.assert_allclose(vm["main"](x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [(2, 3), (-1, -2)])
def test_squeeze_excite_from_a_mean_is_one_call(axes: tuple[int, int]) -> None:
    """torch.export's form: the squeeze is ``mean`` over H and W with keepdims (EfficientNet
    through from_torch ran each gate as 2 convolutions, a mean and a fused multiply);
    one plait_se_scale call, against numpy (1e-5)."""
    from plait.target.c import dispatch_squeeze_excite

    mod, x, ref = _se_model(squeeze=axes)
    callees = _callees(dispatch_squeeze_excite(rewrite_module(mod, ACTIVATION_RULES)))
    assert len(callees) == 1 and callees[0].startswith("plait_se_scale_"), callees
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_squeeze_excite_over_other_axes_stays() -> None:
    """The same chain after a mean over C and H (a gate per column, not per channel):
    nothing becomes plait_se_scale, and the model still gives numpy's result (1e-5)."""
    from plait.target.c import dispatch_squeeze_excite

    x, w1, w2 = _rand(1, 4, 4, 5), _rand(3, 1, 1, 1), _rand(4, 3, 1, 1)

    def body(bb: Any, p: Any) -> Any:
        s = emit(bb, "mean", p[0], axis=(1, 2), keepdims=True)          # 1 x 1 x 1 x 5
        h = emit(bb, "relu", emit(bb, "conv2d", s, const(w1)))          # 1 x 3 x 1 x 5
        g = emit(bb, "sigmoid", emit(bb, "conv2d", h, const(w2)))       # 1 x 4 x 1 x 5
        return emit(bb, "multiply", p[0], g)

    mod = build_graph({"x": x.shape}, body)
    assert not any(c.startswith("plait_se_scale_")
                   for c in _callees(dispatch_squeeze_excite(mod)))
    x64 = x.astype(np.float64)
    h = np.maximum(np.einsum("jc,ncw->njw", w1.reshape(3, 1), x64.mean((1, 2))[:, None]), 0)
    g = 1 / (1 + np.exp(-np.einsum("cj,njw->ncw", w2.reshape(4, 3), h)))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got, x64 * g[:, :, None, :], rtol=1e-5, atol=1e-5)


def test_squeeze_excite_with_a_value_used_elsewhere_stays() -> None:
    """The pooled means are an output too: the gate is left to the other passes."""
    from plait.target.c import dispatch_squeeze_excite

    mod, x, ref = _se_model(leak=True)
    callees = _callees(dispatch_squeeze_excite(mod))
    assert not any(c.startswith("plait_se_scale_") for c in callees), callees
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], x.astype(np.float64).mean((2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [
    # (C, H, W, k, stride, dilation, activation, 4-D tokens)
    (20, 6, 7, 3, 1, 1, "gelu", False),
    (144, 9, 11, 5, 2, 1, "relu6", False),
    (37, 10, 9, 7, 1, 1, "silu", True),
    (24, 8, 8, 3, 1, 2, None, True),
    (256, 5, 4, 3, 2, 1, "gelu_tanh", False),
], ids=["3x3 C 20 GELU", "5x5 stride 2 C 144 (two parts) ReLU6", "7x7 C 37 SiLU NHWC",
        "3x3 dilation 2 C 24 NHWC", "3x3 stride 2 C 256 tanh GELU"])
def test_channels_last_depthwise_reads_and_writes_tokens(case: tuple[Any, ...]) -> None:
    """A depthwise convolution between token-major tensors (SegFormer's and PVT-v2's
    Mix-FFN: tokens transposed and reshaped to NCHW, the convolution with its bias and
    activation, flattened and transposed back; or an N x H x W x C tensor permuted
    there and back) is one channels-last call of plait_dwconv.c: no transpose is left.
    On every float copy this CPU runs, against numpy in float64 (1e-4)."""
    import math

    from plait.codegen.c.variants import FLOAT_ISAS
    from plait.target.c import cpu_features, use_isa

    c, h, w_, k, s, dil, act, four_d = case
    pad = dil * (k // 2)
    oh, ow = (h + 2 * pad - dil * (k - 1) - 1) // s + 1, (w_ + 2 * pad - dil * (k - 1) - 1) // s + 1
    t = _rand(1, h, w_, c) * 3 if four_d else _rand(1, h * w_, c) * 3
    wt, b = _rand(c, 1, k, k), _rand(c)

    def body(bb: Any, p: Any) -> Any:
        if four_d:
            x = emit(bb, "permute_dims", p[0], axes=(0, 3, 1, 2))
        else:
            x = emit(bb, "reshape", emit(bb, "permute_dims", p[0], axes=(0, 2, 1)),
                     shape=(1, c, h, w_))
        y = emit(bb, "conv2d", x, const(wt), strides=(s, s), dilation=(dil, dil),
                 padding=(pad,) * 4, groups=c)
        y = emit(bb, "add", y, const(b.reshape(c, 1, 1)))
        if act == "relu6":
            y = emit(bb, "clip", y, min=0.0, max=6.0)
        elif act == "gelu_tanh":
            y = emit(bb, "gelu", y, approximate="tanh")
        elif act is not None:
            y = emit(bb, act, y)
        if four_d:
            return emit(bb, "permute_dims", y, axes=(0, 2, 3, 1))
        return emit(bb, "permute_dims", emit(bb, "reshape", y, shape=(1, c, oh * ow)),
                    axes=(0, 2, 1))

    mod = build_graph({"t": t.shape}, body)
    callees = _callees(dispatch_depthwise(mod))
    assert len(callees) == 1 and callees[0].startswith("plait_dwconv2d_"), callees
    x = t.reshape(1, h, w_, c).transpose(0, 3, 1, 2).astype(np.float64)
    y = _grouped_reference(x, wt, c, strides=(s, s), padding=(pad,) * 4,
                           dilation=(dil, dil)) + b.reshape(1, c, 1, 1)
    if act == "gelu":
        y = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    elif act == "gelu_tanh":
        y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    elif act == "silu":
        y = y / (1 + np.exp(-y))
    elif act == "relu6":
        y = np.clip(y, 0, 6)
    ref = y.transpose(0, 2, 3, 1).reshape((1, oh, ow, c) if four_d else (1, oh * ow, c))
    exe = plait.build(mod, "c")
    tol = 1e-4 * np.abs(ref).max()
    for isa in [i for i in cpu_features()["supported"] if i in FLOAT_ISAS]:
        with use_isa(isa):
            got = VirtualMachine(exe)["main"](t)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=tol, err_msg=isa)


def test_channels_last_declines_a_residual_and_weights_that_are_not_constant() -> None:
    """Where the channels-last call cannot take the chain (a residual of the channels-
    first result; weights computed in the graph) the transposes stay and the convolution
    is the channels-first call, in the same results (numpy, float64, 1e-4)."""
    c, h, w_ = 16, 5, 6
    t, wt, r = _rand(1, h * w_, c), _rand(c, 1, 3, 3), _rand(1, c, h, w_)

    def body(bb: Any, p: Any) -> Any:
        x = emit(bb, "reshape", emit(bb, "permute_dims", p[0], axes=(0, 2, 1)),
                 shape=(1, c, h, w_))
        y = emit(bb, "add", emit(bb, "conv2d", x, p[1], padding=(1,) * 4, groups=c), p[2])
        return emit(bb, "permute_dims", emit(bb, "reshape", y, shape=(1, c, h * w_)),
                    axes=(0, 2, 1))

    mod = build_graph({"t": t.shape, "w": wt.shape, "r": r.shape}, body)
    callees = _callees(dispatch_depthwise(mod))
    assert "permute_dims" in callees and any(n.startswith("plait_dwconv2d_") for n in callees)
    x = t.transpose(0, 2, 1).reshape(1, c, h, w_).astype(np.float64)
    ref = (_grouped_reference(x, wt, c, padding=(1,) * 4) + r).reshape(1, c, -1)
    got = VirtualMachine(plait.build(mod, "c"))["main"](t, wt, r)
    np.testing.assert_allclose(got, ref.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
