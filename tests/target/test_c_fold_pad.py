"""c.FoldPadIntoConv: a zero pad of H and W read only by a conv2d becomes the
convolution's padding (transformers' MobileNetV2/EfficientNet "same" padding); checked
structurally and against numpy on a strided depthwise convolution with asymmetric
padding."""

from __future__ import annotations

import numpy as np

import plait
from plait.ir import structural_equal
from plait.ir.parser import parse
from plait.runtime import VirtualMachine
from plait.target.c import FoldPadIntoConv

HEADER = """
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((1, 6, 9, 11), "float32"), w: Tensor((6, 1, 3, 3), "float32")
             ) -> Tuple(Tensor((1, 6, 5, 6), "float32"), Tensor((1, 6, 5, 6), "float32"),
                        Tensor((1, 6, 11, 13), "float32")):
        with dataflow():
"""

BEFORE = HEADER + """
            p = pad(x, pad_width=(0, 0, 0, 0, 0, 1, 1, 1))
            y = conv2d(p, w, strides=(2, 2), padding=(1, 0, 0, 0), groups=6)
            q = pad(x, pad_width=(0, 0, 0, 0, 1, 1, 1, 1), pad_value=1.0)
            z = conv2d(q, w, strides=(2, 2), groups=6)
            r = pad(x, pad_width=(0, 0, 0, 0, 1, 1, 1, 1))
            s = conv2d(r, w, strides=(2, 2), groups=6)
            s2 = add(s, z)
            out = (y, s2, r)
            output(out)
        return out
"""

AFTER = HEADER + """
            y = conv2d(x, w, strides=(2, 2), padding=(1, 1, 1, 1), groups=6)
            q = pad(x, pad_width=(0, 0, 0, 0, 1, 1, 1, 1), pad_value=1.0)
            z = conv2d(q, w, strides=(2, 2), groups=6)
            r = pad(x, pad_width=(0, 0, 0, 0, 1, 1, 1, 1))
            s = conv2d(r, w, strides=(2, 2), groups=6)
            s2 = add(s, z)
            out = (y, s2, r)
            output(out)
        return out
"""


def test_a_zero_pad_read_once_folds_into_the_convolution() -> None:
    """Folded: the zero pad (asymmetric, added to the conv's own padding); kept: a pad
    of value 1 and a pad that is also an output."""
    got = FoldPadIntoConv(parse(BEFORE))
    assert structural_equal(got["main"], parse(AFTER)["main"]), str(got)


def test_folded_model_matches_numpy() -> None:
    """The c build (folded, then the depthwise kernel, plait_dwconv.c) against the numpy
    target on the unfolded graph, float32 to 1e-5."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 9, 11)).astype(np.float32)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    mod = parse(BEFORE)
    want = VirtualMachine(plait.build(mod, "numpy"))["main"](x, w)
    got = VirtualMachine(plait.build(mod, "c"))["main"](x, w)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
