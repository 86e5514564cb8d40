"""c.Conv1dAsConv2d: float32 conv1d becomes a conv2d of height 1 (then plait's own
convolution); checked structurally and against numpy's conv1d on odd shapes."""

from __future__ import annotations

import base64

import numpy as np
import pytest

import plait
from plait.ir import BlockBuilder, Constant, TensorType, Var, structural_equal
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.runtime.numpy_ops import IMPLS
from plait.target.c import Conv1dAsConv2d

W = base64.b64encode(np.arange(7 * 5 * 3, dtype=np.float32).tobytes()).decode()
"""A 7x5x3 constant weight; the same bytes are the 7x5x1x3 weight after the rewrite."""

BEFORE = f"""
@module(attrs={{"phase": "optimization"}})
class Module:
    @function
    def main(x: Tensor((1, 5, 13), "float32"), w: Tensor((7, 5, 3), "float32"),
             i: Tensor((1, 2, 6), "int32"), v: Tensor((2, 2, 3), "int32")
             ) -> Tuple(Tensor((1, 7, 7), "float32"), Tensor((1, 7, 7), "float32"),
                        Tensor((1, 2, 4), "int32")):
        with dataflow():
            y = conv1d(x, const(base64="{W}", shape=(7, 5, 3), dtype="float32"),
                       strides=2, padding=(1, 2))
            z = conv1d(x, w, strides=2, padding=(1, 2))
            j = conv1d(i, v)
            out = (y, z, j)
            output(out)
        return out
"""

AFTER = f"""
@module(attrs={{"phase": "optimization"}})
class Module:
    @function
    def main(x: Tensor((1, 5, 13), "float32"), w: Tensor((7, 5, 3), "float32"),
             i: Tensor((1, 2, 6), "int32"), v: Tensor((2, 2, 3), "int32")
             ) -> Tuple(Tensor((1, 7, 7), "float32"), Tensor((1, 7, 7), "float32"),
                        Tensor((1, 2, 4), "int32")):
        with dataflow():
            a = expand_dims(x, axis=2)
            c = conv2d(a, const(base64="{W}", shape=(7, 5, 1, 3), dtype="float32"),
                       strides=(1, 2), padding=(0, 1, 0, 2), dilation=(1, 1))
            y = squeeze(c, axis=(2,))
            z = conv1d(x, w, strides=2, padding=(1, 2))
            j = conv1d(i, v)
            out = (y, z, j)
            output(out)
        return out
"""
"""The constant-weight float32 conv1d is rewritten; a parameter weight (DispatchGemm
would not take it) and an int32 one stay."""


def test_conv1d_becomes_conv2d_of_height_one() -> None:
    got = Conv1dAsConv2d()(plait.parse(BEFORE))
    assert structural_equal(got, plait.parse(AFTER)), got.script()


@pytest.mark.parametrize("shape", [(1, 5, 23), ("n", 5, "t")], ids=["static", "symbolic"])
def test_conv1d_on_c_runs_on_plaits_convolution_and_matches_numpy(shape: tuple) -> None:
    """Whisper's two convolutions in small: 3 wide, stride 1 then 2, GELU between,
    a constant weight (reshaped at compile time) and channels that are not a multiple
    of the vector width; with a symbolic batch and length (a dynamic frame count), one
    build runs two sizes, still on plait's convolution."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((11, 5, 3)).astype(np.float32)
    w2 = rng.standard_normal((9, 11, 3)).astype(np.float32)
    xv = Var("x", TensorType(shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [xv]):
        with bb.dataflow():
            a = bb.emit(make_call("conv1d", xv, Constant(w1), padding=1))
            b = bb.emit(make_call("gelu", a))
            c = bb.emit_output(make_call("conv1d", b, Constant(w2), strides=2, padding=1))
        bb.emit_func_output(c)
    exe = plait.build(bb.get(), "c")
    vm = VirtualMachine(exe)
    sizes = [(1, 5, 23)] if shape[0] == 1 else [(1, 5, 23), (2, 5, 40)]
    for size in sizes:
        x = rng.standard_normal(size).astype(np.float32)
        got = vm["main"](x)
        a = IMPLS["conv1d"](x, w1, padding=1)
        want = IMPLS["conv1d"](IMPLS["gelu"](a), w2, strides=2, padding=1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    calls = [i.func for i in exe.functions["main"].instructions if hasattr(i, "func")]
    calls = [c for c in calls if not c.startswith("vm.builtin.")]
    # the two convolutions, GELU in the first one's epilogue: no copies for the views
    assert len(calls) == 2 and all(c.startswith("plait_conv2d_") for c in calls), calls
