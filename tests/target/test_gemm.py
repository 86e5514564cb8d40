"""c.DispatchGemm: the c target's own matrix product and convolution (plait_gemm.c).

Every product is checked against an independent reference — numpy in float64 for
matmul/linear, PyTorch's conv2d for convolutions — at rtol 1e-4 / atol 1e-4 (float32
sums of up to 1,200 products of values in [-1, 1]).  Shapes are chosen to hit every
edge of the blocked product: M and N that are not multiples of the 6 x 16 register
tile, K beyond one 384-deep block, batches, strides, dilation, asymmetric padding and
1x1 (pointwise) convolutions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from graph_helpers import build_graph, const, emit  # tests/target

import plait
from plait.ir.expr import Call, ExternFunc
from plait.ir.visitor import post_order
from plait.runtime import VirtualMachine
from plait.target.c import DispatchGemm
from plait.target.c.dispatch.gemm import pixel_rows_applies, winograd_choice
from plait.target.c.kernels.gemm import MR, NR, pack_a, pack_b
from plait.transform import RecognizeActivations

pytest.importorskip("torch")
import torch  # noqa: E402

RTOL = ATOL = 1e-4
RNG = np.random.default_rng(7)


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _run(text: str, *args: np.ndarray, target: str | plait.Target = "c") -> np.ndarray:
    exe = plait.build(plait.parse(text), target)
    return VirtualMachine(exe)["main"](*args)


def _externs(mod: plait.IRModule) -> list[str]:
    return [n.args[0].symbol for n in post_order(mod["main"].body)
            if isinstance(n, Call) and getattr(n.op, "name", "") == "call_extern"
            and isinstance(n.args[0], ExternFunc)]


def _ops(mod: plait.IRModule) -> list[str]:
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and getattr(n.op, "name", "") != "call_extern"]


def test_packing_layouts() -> None:
    w = _rand(13, 5)
    a = pack_a(w)
    assert a.shape == (3, 5, MR)
    for i in range(13):
        np.testing.assert_array_equal(a[i // MR, :, i % MR], w[i])
    assert not a[2, :, 1:].any()  # rows 13..17 are zero padding
    b = _rand(5, 37)
    p = pack_b(b)
    assert p.shape == (3, 5, NR)
    for j in range(37):
        np.testing.assert_array_equal(p[j // NR, :, j % NR], b[:, j])
    assert not p[2, :, 5:].any()


MATMUL = """
@module
class Module:
    @function
    def main(a: Tensor({ashape}, "float32"), b: Tensor({bshape}, "float32")
             ) -> Tensor({oshape}, "float32"):
        with dataflow():
            y = matmul(a, b)
            output(y)
        return y
"""


@pytest.mark.parametrize("ashape,bshape", [
    ((7, 5), (5, 9)),                # smaller than one tile
    ((64, 784), (784, 512)),         # the MLP layer: K in three blocks
    ((2, 3, 37, 19), (2, 3, 19, 33)),  # batched, ragged tiles
    ((37, 19), (4, 19, 33)),         # A broadcast over the batch
    ((1, 130, 7), (7, 1)),           # N of 1
])
def test_matmul_runtime_operands_match_numpy(ashape: tuple, bshape: tuple) -> None:
    a, b = _rand(*ashape), _rand(*bshape)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    text = MATMUL.format(ashape=ashape, bshape=bshape, oshape=ref.shape)
    mod = DispatchGemm()(plait.parse(text).with_attrs(phase="optimization"))
    assert _externs(mod) and _externs(mod)[0].startswith("plait_gemm_")
    np.testing.assert_allclose(_run(text, a, b), ref, rtol=RTOL, atol=ATOL)


_build_graph, _call, _c = build_graph, emit, const


def _build_and_run(mod: plait.IRModule, *args: np.ndarray) -> np.ndarray:
    return VirtualMachine(plait.build(mod, "c"))["main"](*args)


@pytest.mark.parametrize("m,k,n", [(64, 784, 512), (5, 3, 17), (128, 1024, 256), (1, 1, 1),
                                   # narrow outputs: the rows are split between threads
                                   (64, 512, 10), (101, 3000, 5)])
def test_linear_with_bias_and_relu_is_one_fused_call(m: int, k: int, n: int) -> None:
    x, w, b = _rand(m, k), _rand(n, k), _rand(n)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "linear", p[0], _c(w))
        y = _call(bb, "add", y, _c(b))
        return _call(bb, "relu", y)

    mod = _build_graph({"x": (m, k)}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    ref = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    np.testing.assert_allclose(_build_and_run(mod, x), ref, rtol=RTOL, atol=ATOL)


def test_linear_runtime_weight_and_residual() -> None:
    x, w, r = _rand(3, 10, 40), _rand(24, 40), _rand(3, 10, 24)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "linear", p[0], p[1])
        return _call(bb, "add", p[2], y)      # residual on the left

    mod = _build_graph({"x": x.shape, "w": w.shape, "r": r.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + r
    np.testing.assert_allclose(_build_and_run(mod, x, w, r), ref, rtol=RTOL, atol=ATOL)


def test_an_intermediate_used_twice_is_not_fused() -> None:
    x, w = _rand(8, 16), _rand(16, 32)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "matmul", p[0], _c(w))
        z = _call(bb, "relu", y)
        return _call(bb, "add", z, y)        # y has two uses: relu stays separate

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert sorted(_ops(lowered)) == ["add", "relu"]
    y = x.astype(np.float64) @ w
    np.testing.assert_allclose(_build_and_run(mod, x), np.maximum(y, 0) + y, rtol=RTOL,
                               atol=ATOL)


CONVS = [
    # (N, C, H, W), (O, KH, KW), strides, padding (t, l, b, r), dilation
    ((1, 3, 30, 30), (32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 16, 17, 13), (20, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 64, 9, 9), (64, 3, 3), (1, 1), (0, 2, 1, 0), (1, 1)),   # K = 576, asymmetric pad
    ((1, 8, 20, 20), (7, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),   # dilation
    ((2, 32, 14, 14), (64, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # pointwise
    ((1, 32, 14, 14), (64, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),  # strided 1x1
    # unpadded with a column stride: patches gathered from the input in place
    ((2, 6, 19, 23), (10, 3, 3), (2, 3), (0, 0, 0, 0), (2, 1)),
    ((1, 16, 33, 40), (24, 1, 1), (1, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 5, 11, 7), (9, 5, 3), (3, 2), (2, 1, 2, 1), (1, 1)),
    # padded with a column stride of 2 and rows of 16 or more: the vectorized phase split
    ((1, 8, 10, 37), (12, 3, 3), (2, 2), (1, 2, 0, 1), (1, 1)),   # even left padding
    ((2, 5, 9, 40), (7, 3, 3), (1, 2), (1, 1, 1, 1), (1, 1)),     # odd left padding
    # Winograd (F(4x4, 3x3), and F(2x2, 3x3) checked too): 3x3, stride 1, >= 16 channels
    ((2, 16, 15, 21), (22, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # odd sizes, O % 6 != 0
    ((1, 128, 28, 28), (128, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 24, 6, 40), (16, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),   # no padding
]


@pytest.mark.parametrize("xshape,wshape,strides,padding,dilation", CONVS)
@pytest.mark.parametrize("epilogue", ["none", "bias_res_relu"])
def test_conv2d_matches_torch(xshape, wshape, strides, padding, dilation, epilogue) -> None:  # type: ignore[no-untyped-def]
    o, kh, kw = wshape
    x, w, b = _rand(*xshape), _rand(o, xshape[1], kh, kw), _rand(o)
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(),
                                 (padding[1], padding[3], padding[0], padding[2]))
    ref = torch.nn.functional.conv2d(xt, torch.from_numpy(w).double(), stride=strides,
                                     dilation=dilation).numpy()
    r = _rand(*ref.shape)
    if epilogue != "none":
        ref = np.maximum(ref + b.reshape(1, o, 1, 1) + r, 0)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), strides=strides, padding=padding,
                  dilation=dilation)
        if epilogue != "none":
            y = _call(bb, "add", y, _c(b.reshape(o, 1, 1)))
            y = _call(bb, "add", y, p[1])
            y = _call(bb, "relu", y)
        return y

    mod = _build_graph({"x": x.shape, "r": r.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    applies = (kh, kw, strides, dilation) == (3, 3, (1, 1), (1, 1)) and min(xshape[1], o) >= 16
    desc = dict(C=xshape[1], O=o, KH=kh, KW=kw, SH=strides[0], SW=strides[1],
                DH=dilation[0], DW=dilation[1], OH=ref.shape[2], OW=ref.shape[3])
    wino = winograd_choice(desc, "auto")
    assert applies or not wino
    code = "".join(src["code"] for src in lowered.attrs["c_sources"])
    for m, fn in ((2, "plait_conv2d_winograd(&d"), (4, "plait_conv2d_winograd4(&d")):
        assert (fn in code) == (wino == m)
    # Winograd's error scales with the output's magnitude, not each element's: F(4x4, 3x3)
    # is checked to 5e-5 of the largest output (F(2x2, 3x3) and the direct product to 1e-4)
    atol = max(ATOL, 5e-5 * float(np.abs(ref).max())) if wino == 4 else ATOL
    np.testing.assert_allclose(_build_and_run(mod, x, r), ref, rtol=RTOL, atol=atol)
    if applies:  # every variant forced gives the same result
        for variant in (4, 2, False):
            exe = plait.build(mod, plait.Target("c", winograd=variant))
            tol = max(ATOL, 5e-5 * float(np.abs(ref).max())) if variant == 4 else ATOL
            np.testing.assert_allclose(VirtualMachine(exe)["main"](x, r), ref, rtol=RTOL,
                                       atol=tol)


@pytest.mark.parametrize("c,hw,expected", [
    (64, 56, 4), (128, 28, 4), (32, 112, 4), (512, 28, 4),   # many tiles: F(4x4)
    (256, 14, 2), (512, 14, 2), (64, 14, 2),                  # 4 x 4 tiles of 4: F(2x2)
    (512, 7, 0), (128, 7, 0),                                 # 2 x 2 tiles: direct
    (8, 56, 0),                                               # too few channels
])
def test_winograd_is_chosen_by_shape(c: int, hw: int, expected: int) -> None:
    """``winograd="auto"`` (the default) picks F(4x4), F(2x2) or the direct product from
    the tile count (ResNet's 3x3 layers, padding 1: F(4x4) where the output has many 4 x 4
    tiles, F(2x2) where F(4x4)'s tiles would be mostly padding, the direct product on 2 x 2
    tiles, where the transforms cost more than they save); 2 and 4 force their variant wherever
    Winograd applies, False never."""
    desc = dict(C=c, O=c, KH=3, KW=3, SH=1, SW=1, DH=1, DW=1, OH=hw, OW=hw)
    assert winograd_choice(desc, "auto") == expected
    applies = c >= 16
    assert winograd_choice(desc, 4) == (4 if applies else 0)
    assert winograd_choice(desc, 2) == (2 if applies else 0)
    assert winograd_choice(desc, False) == 0
    assert winograd_choice(dict(desc, SH=2, SW=2), "auto") == 0


@pytest.mark.parametrize("c,o,k,s,hw,expected", [
    (512, 512, 3, 1, 7, True), (256, 512, 3, 2, 14, True),     # ResNet's 7 x 7 layers
    (2048, 512, 1, 1, 7, True), (512, 2048, 1, 1, 7, True),
    (384, 96, 3, 1, 7, True),
    (1024, 256, 1, 1, 14, False), (128, 256, 3, 2, 28, False),  # 196 pixels: 208 columns
    (64, 64, 3, 1, 56, False),                                   # no padding to save
    (160, 960, 1, 1, 7, True), (960, 160, 1, 1, 7, True),       # MobileNetV2's
    (32, 256, 1, 1, 7, False),                                   # K 32: too short
    (64, 16, 1, 1, 7, False),                                    # 50,176 MACs: too few
])
def test_pixel_rows_is_chosen_by_shape(c: int, o: int, k: int, s: int, hw: int,
                                       expected: bool) -> None:
    """The transposed product (pixels as rows) is taken where the pixels fill the
    16-column panels badly (the padding to a panel multiple would be wasted work) and the
    layer is large enough for the transposed packing to pay for itself."""
    oh = (hw + 2 * (k // 2) - k) // s + 1
    desc = dict(C=c, O=o, KH=k, KW=k, SH=s, SW=s, DH=1, DW=1, OH=oh, OW=oh)
    assert pixel_rows_applies(desc) == expected


PIXEL_ROWS_CONVS = [
    # (N, C, H, W), (O, KH, KW), strides, padding (t, l, b, r), dilation
    ((2, 50, 7, 7), (64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),    # K 450: two blocks
    ((1, 9, 11, 9), (37, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1)),    # stride 2, 37 columns
    ((1, 7, 9, 9), (21, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),     # dilation 2
    ((2, 33, 5, 3), (40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # pointwise, 15 pixels
    ((1, 16, 9, 13), (17, 1, 1), (2, 3), (0, 0, 0, 0), (1, 1)),   # 1x1 read in place
]


def _conv_with_epilogue_matches_torch(xshape, wshape, strides, padding,  # type: ignore[no-untyped-def]
                                      dilation, epilogue, callee: str) -> None:
    """A convolution (wshape: O, KH, KW) with its bias and epilogue, built for the c target,
    against PyTorch in float64; the module's call must be callee's."""
    o, kh, kw = wshape
    x, w, b = _rand(*xshape), _rand(o, xshape[1], kh, kw), _rand(o)
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(),
                                 (padding[1], padding[3], padding[0], padding[2]))
    ref = torch.nn.functional.conv2d(xt, torch.from_numpy(w).double(), stride=strides,
                                     dilation=dilation).numpy() + b.reshape(1, o, 1, 1)
    r = _rand(*ref.shape)
    if epilogue == "bias_res_relu":
        ref = np.maximum(ref + r, 0)
    elif epilogue == "relu6":
        ref = np.clip(ref, 0, 6)
    else:
        ref = ref / (1 + np.exp(-ref))

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), strides=strides, padding=padding,
                  dilation=dilation)
        y = _call(bb, "add", y, _c(b.reshape(o, 1, 1)))
        if epilogue == "bias_res_relu":
            return _call(bb, "relu", _call(bb, "add", y, p[1]))
        if epilogue == "relu6":
            return _call(bb, "clip", y, min=0.0, max=6.0)
        return _call(bb, "silu", y)

    mod = _build_graph({"x": x.shape, "r": r.shape}, body)
    lowered = DispatchGemm(winograd=False)(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    code = "".join(src["code"] for src in lowered.attrs["c_sources"])
    assert f"{callee}(&d" in code
    exe = plait.build(mod, plait.Target("c", winograd=False))
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, r), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("xshape,wshape,strides,padding,dilation", PIXEL_ROWS_CONVS)
@pytest.mark.parametrize("epilogue", ["bias_res_relu", "relu6", "silu"])
def test_pixel_rows_conv_matches_torch(monkeypatch: pytest.MonkeyPatch, xshape, wshape,  # type: ignore[no-untyped-def]
                                       strides, padding, dilation, epilogue) -> None:
    """plait_conv2d_pixel_rows (the thresholds of pixel_rows_applies lowered so small odd
    shapes take it): pixel counts that leave 1- to 5-row tails, output channels that
    leave column tails, batches, every epilogue, against PyTorch."""
    import plait.target.c.dispatch.gemm as gemm

    monkeypatch.setattr(gemm, "PIXEL_ROWS_MIN_K", 1)
    monkeypatch.setattr(gemm, "PIXEL_ROWS_MIN_MACS", 1)
    monkeypatch.setattr(gemm, "PIXEL_ROWS_RATIO", 10.0)
    _conv_with_epilogue_matches_torch(xshape, wshape, strides, padding, dilation, epilogue,
                                      "plait_conv2d_pixel_rows")


SPLIT_SUM_CONVS = [
    ((1, 400, 9, 11), (37, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # K 400: halves of 200
    ((1, 777, 7, 7), (21, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),     # 2 K blocks a half
]


@pytest.mark.parametrize("xshape,wshape,strides,padding,dilation", SPLIT_SUM_CONVS)
@pytest.mark.parametrize("epilogue", ["bias_res_relu", "relu6", "silu"])
def test_split_sum_conv_matches_torch(xshape, wshape, strides, padding,  # type: ignore[no-untyped-def]
                                      dilation, epilogue) -> None:
    """A 1x1 convolution with few pixels and a sum of at least 384 on two threads: the
    sum split in two halves (plait_gemm.c, gemm_split_k: partial products, then added with
    the epilogue by row blocks): odd channels and pixels, every epilogue, against PyTorch
    (rtol/atol of the module)."""
    _conv_with_epilogue_matches_torch(xshape, wshape, strides, padding, dilation, epilogue,
                                      "plait_conv2d")


def test_winograd_weight_transforms_reproduce_the_convolution() -> None:
    """A^T [(G g G^T) * (B^T d B)] A is the 3x3 correlation of a tile, for both
    transforms (checked in float64 against a direct sum)."""
    from plait.target.c.kernels.winograd import WINOGRAD_G

    bt = {2: np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
          4: np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                       [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]])}
    at = {2: np.array([[1, 1, 1, 0], [0, 1, -1, -1]]),
          4: np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                       [0, 1, -1, 8, -8, 1]])}
    for m in (2, 4):
        d, g = RNG.standard_normal((m + 2, m + 2)), RNG.standard_normal((3, 3))
        ref = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(m)] for i in range(m)])
        gm = WINOGRAD_G[m]
        y = at[m] @ ((gm @ g @ gm.T) * (bt[m] @ d @ bt[m].T)) @ at[m].T
        np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_conv2d_it_cannot_take_stays_for_blas() -> None:
    x, w = _rand(1, 4, 8, 8), _rand(4, 2, 3, 3)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "conv2d", p[0], _c(w), groups=2)

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert _externs(lowered) == [] and _ops(lowered) == ["conv2d"]
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), groups=2)
    np.testing.assert_allclose(_build_and_run(mod, x), ref.numpy(), rtol=RTOL, atol=ATOL)


def test_views_around_a_product_cost_no_copy() -> None:
    """A unit-axis transpose feeding a linear is read through (no copy), and a reshape
    plus unit-axis transpose of its result before a residual add are written directly:
    the transformer's attention output projection becomes one call."""
    x, w, b = _rand(1, 12, 16), _rand(16, 16), _rand(16)

    def body(bb, p):  # type: ignore[no-untyped-def]
        t = _call(bb, "permute_dims", p[0], axes=(1, 0, 2))          # (12, 1, 16): a view
        y = _call(bb, "linear", t, _c(w), _c(b))                     # (12, 1, 16)
        y = _call(bb, "reshape", y, shape=(12, 16))
        y = _call(bb, "permute_dims", _call(bb, "reshape", y, shape=(12, 1, 16)),
                  axes=(1, 0, 2))                                    # (1, 12, 16)
        return _call(bb, "add", y, p[0])

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + b + x
    np.testing.assert_allclose(_build_and_run(mod, x), ref, rtol=RTOL, atol=ATOL)


def test_a_real_transpose_is_not_taken_for_a_view() -> None:
    x, w = _rand(3, 4, 8), _rand(5, 3)

    def body(bb, p):  # type: ignore[no-untyped-def]
        t = _call(bb, "permute_dims", p[0], axes=(2, 1, 0))          # (8, 4, 3): moves data
        return _call(bb, "linear", t, _c(w))

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert _ops(lowered) == ["permute_dims"]
    ref = x.transpose(2, 1, 0).astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(_build_and_run(mod, x), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("xshape,o", [((1, 3, 20, 32), 32), ((2, 5, 6, 16), 7)])
def test_conv_relu_max_pool_is_one_call(xshape: tuple, o: int) -> None:
    """conv2d -> bias -> relu -> 2x2/2 max pooling: the pooling is done on the product's
    register tile (the full-resolution output is never written)."""
    x, w, b = _rand(*xshape), _rand(o, xshape[1], 3, 3), _rand(o)
    x.reshape(-1)[5] = np.nan
    conv = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                      torch.from_numpy(b).double(), padding=1)
    ref = torch.nn.functional.max_pool2d(torch.relu(conv), 2).numpy()

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), padding=(1, 1, 1, 1))
        y = _call(bb, "add", y, _c(b.reshape(o, 1, 1)))
        y = _call(bb, "relu", y)
        return _call(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2))

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    code = "".join(src["code"] for src in lowered.attrs["c_sources"])
    assert "plait_conv2d_pool(&d" in code
    got = _build_and_run(mod, x)
    assert np.isnan(got).any() and np.array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_pooling_that_does_not_fit_the_tile_stays_separate() -> None:
    x, w = _rand(1, 3, 10, 12), _rand(4, 3, 3, 3)     # output width 12: not a multiple of 8

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w), padding=(1, 1, 1, 1))
        return _call(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2))

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert _ops(lowered) == ["max_pool2d"]
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    ref = torch.nn.functional.max_pool2d(conv, 2).numpy()
    np.testing.assert_allclose(_build_and_run(mod, x), ref, rtol=RTOL, atol=ATOL)


def test_bad_options_name_the_pass_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"c.DispatchGemm: cannot dispatch \['softmax'\]"):
        DispatchGemm(ops=["softmax"])
    with pytest.raises(ValueError, match="winograd must be 'auto', True, False, 2 or 4"):
        DispatchGemm(winograd=3)
    with pytest.raises(ValueError, match="winograd must be 'auto', True, False, 2 or 4"):
        plait.default_pipeline(plait.Target("c", winograd="fast"))


def test_relu6_in_registers_keeps_nan() -> None:
    """The fused ReLU6 of a 1x1 convolution (on AVX-512 applied in registers as the tile
    is stored, elsewhere by a pass over the stored tile) keeps NaN as numpy's clip does
    and clips the rest: a NaN input pixel, 7 channels of 19 x 3 pixels (tails), inputs
    up to 8 so that both bounds bite, against numpy in float64."""
    x, w = _rand(1, 4, 19, 3) * 8, _rand(7, 4, 1, 1)
    x[0, 2, 5, 1] = np.nan

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "conv2d", p[0], _c(w))
        return _call(bb, "clip", _call(bb, "clip", y, min=0.0), max=6.0)

    mod = _build_graph({"x": x.shape}, body)
    assert len(_externs(DispatchGemm()(mod.with_attrs(phase="optimization")))) == 1
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    y = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    want = np.clip(y, 0.0, 6.0)
    assert np.isnan(got[0, :, 5, 1]).all() and np.isnan(want[0, :, 5, 1]).all()
    assert (got == 0).any() and (got == 6).any()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_relu6_and_silu_epilogues_are_one_fused_call() -> None:
    """MobileNetV2's ReLU6 (two clips, as exported) after a 1x1 convolution and its bias,
    EfficientNet's SiLU (x * sigmoid(x), either order) after a strided convolution and
    after a product: each chain one native call (``plait_act_tile`` on each stored
    tile), against numpy in float64; tails in every direction (7 and 13 channels, 9 x 11
    pixels)."""
    x, w, b = _rand(1, 5, 9, 11) * 3, _rand(7, 5, 1, 1), _rand(7)
    w3, a, wl = _rand(13, 5, 3, 3), _rand(5, 99) * 2, _rand(99, 13)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "add", _call(bb, "conv2d", p[0], _c(w)), _c(b.reshape(7, 1, 1)))
        relu6 = _call(bb, "clip", _call(bb, "clip", y, min=0.0), max=6.0)
        z = _call(bb, "conv2d", p[0], _c(w3), strides=(2, 2), padding=(1, 1, 1, 1))
        silu = _call(bb, "multiply", z, _call(bb, "sigmoid", z))
        m = _call(bb, "matmul", p[1], _c(wl))
        silu2 = _call(bb, "multiply", _call(bb, "sigmoid", m), m)
        return bb.emit(plait.ir.Tuple([relu6, silu, silu2]))

    mod = _build_graph({"x": x.shape, "a": a.shape}, body)
    lowered = DispatchGemm()(RecognizeActivations(mod.with_attrs(phase="optimization")))
    assert len(_externs(lowered)) == 3 and _ops(lowered) == []
    x64 = x.astype(np.float64)
    conv = torch.nn.functional.conv2d
    y = conv(torch.from_numpy(x64), torch.from_numpy(w.astype(np.float64))).numpy()
    z = conv(torch.from_numpy(x64), torch.from_numpy(w3.astype(np.float64)), stride=2,
             padding=1).numpy()
    m = a.astype(np.float64) @ wl
    want = (np.clip(y + b.reshape(1, 7, 1, 1), 0, 6), z / (1 + np.exp(-z)),
            m / (1 + np.exp(-m)))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, a)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_an_activation_ends_the_epilogue() -> None:
    """A residual after a ReLU6 cannot follow it in the native epilogue (the activation
    runs last), and disjoint clips are not one interval: both stay separate ops."""
    x, w = _rand(6, 8), _rand(8, 8)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = _call(bb, "clip", _call(bb, "matmul", p[0], _c(w)), min=0.0, max=6.0)
        r = _call(bb, "add", y, p[0])
        q = _call(bb, "clip", _call(bb, "clip", _call(bb, "matmul", p[0], _c(w)), max=-1.0),
                  min=1.0)
        return bb.emit(plait.ir.Tuple([r, q]))

    mod = _build_graph({"x": x.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert sorted(_ops(lowered)) == ["add", "clip"]
    m = x.astype(np.float64) @ w
    want = (np.clip(m, 0, 6) + x, np.clip(np.clip(m, None, -1.0), 1.0, None))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def _gelu_erf_graph(bb, x, order: int):  # type: ignore[no-untyped-def]
    """GELU as torch.onnx exports it, x * (1 + erf(x / sqrt 2)) * 0.5, with the operands
    of each step in the order ``order`` picks (and x * (1 / sqrt 2) for the division)."""
    if order == 0:
        arg = _call(bb, "divide", x, _c(np.array(np.sqrt(2.0), np.float32)))
    else:
        arg = _call(bb, "multiply", _c(np.array(np.sqrt(0.5), np.float32)), x)
    e = _call(bb, "erf", arg)
    one = _c(np.array(1.0, np.float32))
    s = _call(bb, "add", e, one) if order == 0 else _call(bb, "add", one, e)
    y = _call(bb, "multiply", x, s) if order == 0 else _call(bb, "multiply", s, x)
    half = _c(np.array(0.5, np.float32))
    return _call(bb, "multiply", y, half) if order == 0 else _call(bb, "multiply", half, y)


def test_gelu_rule_keeps_the_type() -> None:
    """A GELU pattern whose 0.5 is a (1, 1, 1) constant broadcasts x (13 x 37) to rank 3:
    it is not made ``gelu`` (which would keep x's shape); the five ops stay and give
    the reference's values and shape."""
    a, wl = _rand(13, 70), _rand(70, 37)

    def body(bb, p):  # type: ignore[no-untyped-def]
        m = _call(bb, "matmul", p[0], _c(wl))
        e = _call(bb, "add", _call(bb, "erf", _call(bb, "divide", m, _c(
            np.array(math.sqrt(2.0), np.float32)))), _c(np.array(1.0, np.float32)))
        return _call(bb, "multiply", _call(bb, "multiply", m, e),
                     _c(np.full((1, 1, 1), 0.5, np.float32)))

    mod = _build_graph({"a": a.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert "gelu" not in _ops(lowered) and "erf" in _ops(lowered)
    got = VirtualMachine(plait.build(mod, "c"))["main"](a)
    want = _gelu_reference(a.astype(np.float64) @ wl)[None]
    assert got.shape == want.shape == (1, 13, 37)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _gelu_reference(x: np.ndarray) -> np.ndarray:
    """GELU in float64 by math.erf (no scipy): x (1 + erf(x / sqrt 2)) / 2."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    with np.errstate(invalid="ignore"):
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def test_gelu_epilogue_is_one_fused_call() -> None:
    """ViT's and ConvNeXt's feed-forward product, bias and GELU (erf form, as exported:
    five elementwise ops, in both operand orders) is one native call (c.GELU_RULE makes
    it ``gelu``, the epilogue runs plait_gelu_sv on each tile), as is a convolution's and
    a product's ``gelu(approximate="tanh")`` (plait_gelu_tanh_sv); against float64 with
    math.erf and np.tanh at rtol/atol 1e-4 (the products' own tolerance)."""
    a, wl, bl = _rand(13, 70) * 2, _rand(70, 37), _rand(37)
    x, w = _rand(1, 5, 9, 11), _rand(7, 5, 3, 3)

    def body(bb, p):  # type: ignore[no-untyped-def]
        m = _call(bb, "add", _c(bl), _call(bb, "matmul", p[1], _c(wl)))
        g0 = _gelu_erf_graph(bb, m, 0)
        z = _call(bb, "conv2d", p[0], _c(w), padding=(1, 1, 1, 1), strides=(2, 2))
        g1 = _gelu_erf_graph(bb, z, 1)
        t = _call(bb, "gelu", _call(bb, "matmul", p[1], _c(wl)), approximate="tanh")
        return bb.emit(plait.ir.Tuple([g0, g1, t]))

    mod = _build_graph({"x": x.shape, "a": a.shape}, body)
    lowered = DispatchGemm()(RecognizeActivations(mod.with_attrs(phase="optimization")))
    assert len(_externs(lowered)) == 3 and _ops(lowered) == []
    code = "".join(src["code"] for src in lowered.attrs["c_sources"])
    assert ".act = 3," in code   # PLAIT_ACT_GELU in the product's wrapper
    assert ".act = 4," in code   # PLAIT_ACT_GELU_TANH
    m = a.astype(np.float64) @ wl + bl
    z = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                   torch.from_numpy(w.astype(np.float64)), stride=2,
                                   padding=1).numpy()
    mt = a.astype(np.float64) @ wl
    tanh = 0.5 * mt * (1 + np.tanh(math.sqrt(2 / math.pi) * (mt + 0.044715 * mt ** 3)))
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, a)
    for g, e in zip(got, (_gelu_reference(m), _gelu_reference(z), tanh), strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def _gelu_tanh_graph(bb, x, form: int):  # type: ignore[no-untyped-def]
    """GELU's tanh form as exporters write it: ``form`` 0 is GPT-2's gelu_new
    (0.5 * x * (1 + tanh(c * (x + 0.044715 * pow(x, 3))))), 1 torch.onnx's
    tanh-approximate GELU (0.5 * (x * (1 + tanh(c * (x + 0.044715 * (x * (x * x))))))),
    2 the same with every commutative step's operands swapped and (x * x) * x."""
    def f(v: float) -> plait.ir.Expr:
        return _c(np.array(v, np.float32))
    sw = form == 2
    if form == 0:
        cube = _call(bb, "power", x, f(3.0))
    elif form == 1:
        cube = _call(bb, "multiply", x, _call(bb, "multiply", x, x))
    else:
        cube = _call(bb, "multiply", _call(bb, "multiply", x, x), x)
    k = _call(bb, "multiply", f(0.044715), cube) if sw else _call(bb, "multiply", cube, f(0.044715))
    s = _call(bb, "add", k, x) if sw else _call(bb, "add", x, k)
    c = f(math.sqrt(2 / math.pi))
    t = _call(bb, "tanh", _call(bb, "multiply", c, s) if sw else _call(bb, "multiply", s, c))
    one = _call(bb, "add", f(1.0), t) if sw else _call(bb, "add", t, f(1.0))
    if form == 0:
        return _call(bb, "multiply", _call(bb, "multiply", x, f(0.5)), one)
    prod = _call(bb, "multiply", one, x) if sw else _call(bb, "multiply", x, one)
    return _call(bb, "multiply", f(0.5), prod) if sw else _call(bb, "multiply", prod, f(0.5))


def _gelu_tanh_reference(x: np.ndarray) -> np.ndarray:
    """GELU's tanh form in float64, as written: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    x^3)))."""
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("form", [0, 1, 2])
def test_gelu_tanh_as_exported_is_fused(form: int) -> None:
    """The tanh form of GELU as exported (eight elementwise ops reading x three times, in
    the three spellings of _gelu_tanh_graph) after a product with bias, and after a
    reshape of it (GPT-2's Conv1D is addmm then view), is made ``gelu(approximate="tanh")``
    by c.GELU_TANH_RULE and runs in the product's epilogue: one native call each, no
    generated kernel left; against float64 at rtol/atol 1e-4."""
    a, wl, bl = _rand(13, 70) * 2, _rand(70, 37), _rand(37)

    def body(bb, p):  # type: ignore[no-untyped-def]
        m = _call(bb, "add", _call(bb, "matmul", p[0], _c(wl)), _c(bl))
        g0 = _gelu_tanh_graph(bb, m, form)
        r = _call(bb, "reshape", _call(bb, "matmul", p[0], _c(wl)), shape=(1, 13, 37))
        g1 = _gelu_tanh_graph(bb, r, form)
        return bb.emit(plait.ir.Tuple([g0, g1]))

    mod = _build_graph({"a": a.shape}, body)
    lowered = DispatchGemm()(RecognizeActivations(mod.with_attrs(phase="optimization")))
    assert len(_externs(lowered)) == 2 and _ops(lowered) == []
    got = VirtualMachine(plait.build(mod, "c"))["main"](a)
    m = a.astype(np.float64) @ wl
    for g, e in zip(got, (_gelu_tanh_reference(m + bl), _gelu_tanh_reference(m)[None]),
                    strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_gelu_tanh_rule_declines_other_constants_and_xs() -> None:
    """A tanh-GELU look-alike is left as it is: 0.044 instead of 0.044715 (a different
    function), and one whose cube reads another tensor than x; both stay generated
    kernels and give the reference's values."""
    a, wl = _rand(13, 70), _rand(70, 37)

    def body(bb, p):  # type: ignore[no-untyped-def]
        m = _call(bb, "matmul", p[0], _c(wl))
        n = _call(bb, "matmul", p[0], _c(wl * 0.5))

        def f(v: float) -> plait.ir.Expr:
            return _c(np.array(v, np.float32))

        def look_alike(x, cubed, kappa):  # type: ignore[no-untyped-def]
            s = _call(bb, "add", x, _call(bb, "multiply", _call(bb, "power", cubed, f(3.0)),
                                          f(kappa)))
            t = _call(bb, "tanh", _call(bb, "multiply", s, f(math.sqrt(2 / math.pi))))
            return _call(bb, "multiply", _call(bb, "multiply", x, f(0.5)),
                         _call(bb, "add", t, f(1.0)))

        return bb.emit(plait.ir.Tuple([look_alike(m, m, 0.044), look_alike(m, n, 0.044715)]))

    mod = _build_graph({"a": a.shape}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert "gelu" not in _ops(lowered) and "tanh" in _ops(lowered)
    got = VirtualMachine(plait.build(mod, "c"))["main"](a)
    m = a.astype(np.float64) @ wl
    n = m * 0.5
    c = math.sqrt(2 / math.pi)
    want = (0.5 * m * (1 + np.tanh(c * (m + 0.044 * m ** 3))),
            0.5 * m * (1 + np.tanh(c * (m + 0.044715 * n ** 3))))
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def _gelu_epilogue_on(grid: np.ndarray, approximate: str) -> np.ndarray:
    """``gelu(approximate=...)`` of every value of ``grid`` by the products' epilogue: the
    values fed exactly as the bias of a product of zeros (one row of grid.size columns),
    which DispatchGemm makes one native call with nothing generated left."""
    zeros = np.zeros((1, grid.size), np.float32)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "gelu", _call(bb, "add", _call(bb, "matmul", p[0], _c(zeros)),
                                       _c(grid)), approximate=approximate)

    mod = _build_graph({"x": (1, 1)}, body)
    lowered = DispatchGemm()(mod.with_attrs(phase="optimization"))
    assert len(_externs(lowered)) == 1 and _ops(lowered) == []
    got = VirtualMachine(plait.build(mod, "c"))["main"](np.ones((1, 1), np.float32))
    return got.reshape(-1)


def test_gelu_tanh_epilogue_accuracy_over_the_range() -> None:
    """plait_gelu_tanh_sv (x / (1 + exp(-2u)), the identical form of 0.5 x (1 + tanh(u)))
    on every value of a dense grid of [-12, 12], near zero, and on inf, -inf and NaN, fed
    exactly as the bias of a product of zeros (one row: whole vectors and a tail): within
    1e-6 relative plus 1e-7 (1 + |x|) absolute of the float64 formula; NaN where it is
    NaN (-inf: -inf * 0, and NaN), inf for inf, and no NaN from the saturating exp at
    large |x|."""
    grid = np.concatenate([np.linspace(-12, 12, 16001, dtype=np.float32),
                           np.geomspace(1e-30, 1e-3, 40).astype(np.float32),
                           -np.geomspace(1e-30, 1e-3, 40).astype(np.float32),
                           np.array([1e20, -1e20, 3e38, -3e38], np.float32)])
    grid[:4] = [np.inf, -np.inf, np.nan, 0.0]
    got = _gelu_epilogue_on(grid, "tanh")
    xd = grid.astype(np.float64)
    ref = _gelu_tanh_reference(xd)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert got[0] == np.inf
    ok = ~np.isnan(ref) & np.isfinite(ref)
    err = np.abs(got[ok] - ref[ok])
    bound = 1e-6 * np.abs(ref[ok]) + 1e-7 * (1 + np.abs(xd[ok]))
    assert (err <= bound).all(), (float(err.max()), float((err / bound).max()))


def test_gelu_epilogue_accuracy_over_the_range() -> None:
    """plait_gelu_sv (a rational erf with fused multiply-adds, the quotient by a
    reciprocal estimate and a Newton step) on every value of a dense grid of [-8, 8] and
    on inf, -inf and NaN, fed exactly as the bias of a product of zeros (one row of
    16021 columns: whole vectors and a 5-column tail): within 2e-6 relative plus
    2.5e-7 (1 + |x|) absolute of GELU by math.erf in float64 (the erf's own error, up to
    5e-7 absolute in float32, enters GELU halved and scaled by |x|: 7.7e-7 near x = -3.5);
    NaN where the reference is NaN (-inf: -inf * 0, and NaN), inf for inf."""
    grid = np.linspace(-8, 8, 16021, dtype=np.float32)
    grid[:4] = [np.inf, -np.inf, np.nan, 0.0]
    got = _gelu_epilogue_on(grid, "none")
    ref = _gelu_reference(grid.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert got[0] == np.inf
    ok = ~np.isnan(ref) & np.isfinite(ref)
    err = np.abs(got[ok] - ref[ok])
    bound = 2e-6 * np.abs(ref[ok]) + 2.5e-7 * (1 + np.abs(grid[ok]))
    assert (err <= bound).all(), (float(err.max()), float((err / bound).max()))


def test_an_unfolded_transposed_weight_is_packed_not_transposed_per_call() -> None:
    """``matmul(x, permute_dims(W))`` (torch.export's linear) whose weight is larger
    than FoldConstant's cap (here set to 16 elements) is packed from the transposed view
    at compile time: no transpose runs per call, and the result equals numpy's."""
    w = _rand(48, 40)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return emit(bb, "matmul", p[0], emit(bb, "permute_dims", const(w), axes=(1, 0)))

    mod = build_graph({"x": ("b", 40)}, body)
    with plait.transform.PassContext(config={"transform.fold_constant.max_size": 16}):
        exe = plait.build(mod, "c")
    text = exe.as_text()
    assert "plait_gemm_" in text and "permute_dims" not in text, text
    x = _rand(3, 40)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x),
                               x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=RTOL, atol=ATOL)
