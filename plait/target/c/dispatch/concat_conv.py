"""``c.SplitConcatConv``: a 1x1 convolution of a channel concatenation as the sum of
the convolutions of its parts, each part that is an upsampling convolved first.

SegFormer's decode head projects each of its four stages to 256 channels, upsamples
them to the first stage's size (``resize2d``, bilinear), concatenates the four and
fuses them with a 1x1 convolution: 1024 -> 256 channels on 64 x 64 pixels, a billion
multiply-adds, 41% of the model's time on plait.  A 1x1 convolution mixes channels
pixel by pixel and a resize mixes pixels channel by channel, both linear, so

    conv1x1(concat(p_0, ..., p_k), W) = sum_i conv1x1(p_i, W_i)   (W_i: p_i's columns)
    conv1x1(resize2d(x), W_i)        = resize2d(conv1x1(x, W_i))

and each stage's part is convolved on its own pixels before it is upsampled (8 x 8,
16 x 16, 32 x 32 instead of 64 x 64: a third of the multiply-adds), and the
concatenation (a million-float copy) is never made.  A resize whose output has its
input's size (the first stage's) is dropped where it is the identity (linear or nearest
interpolation, every coordinate mode but ``tf_half_pixel_for_nn``).  The sum is written
``conv(first, W_0) [+ bias] + (the other parts' sum)``, so that ``c.DispatchGemm`` takes
the first convolution with its bias, the sum as its residual and what follows (a relu)
as one call.  The sums are reassociated: the result differs from the concatenated
product by float32 rounding only.

Only float32 NCHW/OIHW 1x1 convolutions of stride 1, no padding, one group, constant
weights, over a concatenation along the channels that nothing else reads, with at
least one part an upsampling (NCHW ``resize2d`` read only by the concatenation) are
rewritten; anything else is left as it is.
"""

from __future__ import annotations

from typing import Any

from plait.ir.expr import Call, Constant, Expr, Tuple, Var
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, rewrite_module

from ..shapes import float_shape, is_static_shape

IDENTITY_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
"""The coordinate modes in which a linear or nearest ``resize2d`` to its input's own size
returns its input (``tf_half_pixel_for_nn`` reads half a pixel further on)."""


def _is_pointwise(call: Call) -> bool:
    a = call.attrs
    return (tuple(a["strides"]) == (1, 1) and not any(a["padding"])
            and tuple(a["dilation"]) == (1, 1) and int(a["groups"]) == 1
            and a["data_layout"] == "NCHW" and a["kernel_layout"] == "OIHW")


def _upsampling(m: Match, part: Expr) -> tuple[Expr, Call] | None:
    """(its input, the resize) when ``part`` is an NCHW ``resize2d`` of static shapes
    that only the concatenation reads and whose output has at least its input's
    pixels; else None."""
    if not isinstance(part, Var) or m.graph.uses.get(part, 0) != 1:
        return None
    value = m.definition(part)
    if not (isinstance(value, Call) and getattr(value.op, "name", None) == "resize2d"
            and value.attrs.get("layout", "NCHW") == "NCHW"):
        return None
    xs, ys = float_shape(value.args[0]), float_shape(value)
    if xs is None or ys is None or not is_static_shape(xs + ys):
        return None
    if xs[2] * xs[3] > ys[2] * ys[3]:
        return None   # a downsampling: convolving first would cost more
    return value.args[0], value


def _identity(resize: Call) -> bool:
    """Whether ``resize`` (of static shapes) returns its input."""
    a = resize.attrs
    xs, ys = float_shape(resize.args[0]), float_shape(resize)
    return (xs is not None and ys is not None and tuple(xs[2:]) == tuple(ys[2:])
            and a.get("method") in ("linear", "nearest")
            and a.get("coordinate_transformation_mode") in IDENTITY_MODES)


def split_concat_conv_rule() -> Rule:
    """The rule of :class:`SplitConcatConv` (see the module's docstring); a bias
    ``add`` after the convolution is taken with it when there is one."""
    parts = wildcard()
    weight = is_const()
    concat = is_op("concat")(parts).single_use()
    conv = is_op("conv2d")(concat, weight).has_dtype("float32").has_rank(4)
    bias = is_const()
    conv_then_bias = conv.single_use()
    root = is_op("add")(conv_then_bias, bias).commutative() | conv

    def rewrite(m: Match) -> Expr | None:
        call = m.call(conv_then_bias if conv_then_bias in m else conv)
        cat, tup = m.call(concat), m[parts]
        if (not _is_pointwise(call) or int(cat.attrs["axis"]) not in (1, -3)
                or not isinstance(tup, Tuple)):
            return None
        w = m[weight].data
        if w.ndim != 4 or w.shape[2:] != (1, 1):
            return None
        terms: list[tuple[bool, Expr]] = []
        c0 = 0
        for part in tup.fields:
            shape = float_shape(part)
            if shape is None or len(shape) != 4 or type(shape[1]) is not int:
                return None
            wi = Constant(w[:, c0:c0 + shape[1]])
            c0 += shape[1]
            up = _upsampling(m, part)
            if up is None:
                terms.append((False, make_call("conv2d", part, wi, **call.attrs)))
            elif _identity(up[1]):
                terms.append((False, make_call("conv2d", up[0], wi, **call.attrs)))
            else:
                y = make_call("conv2d", up[0], wi, **call.attrs)
                terms.append((True, make_call("resize2d", y, **up[1].attrs)))
        if c0 != w.shape[1] or not any(resized for resized, _ in terms):
            return None
        terms.sort(key=lambda t: t[0])   # stable: the parts not resized first
        first = terms[0][1]
        if m.get(bias) is not None:
            first = make_call("add", first, m[bias])
        rest: Expr | None = None
        for _, t in terms[1:]:
            rest = t if rest is None else make_call("add", rest, t)
        return first if rest is None else make_call("add", first, rest)

    return Rule("c.split_concat_conv", root, rewrite)


def split_concat_conv(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with :func:`split_concat_conv_rule` applied; functions for which ``skip``
    is true (default: those of external codegens) are left alone."""
    return rewrite_module(mod, [split_concat_conv_rule()], skip=skip)


@module_pass(name="c.SplitConcatConv", phases=("optimization",))
class SplitConcatConv:
    """Rewrite a float32 1x1 convolution of a concatenation as a sum of per-part convolutions.

    The concatenation is of channels, with upsampled parts; each part's convolution is
    computed before its upsampling."""

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return split_concat_conv(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]


__all__ = ["IDENTITY_MODES", "SplitConcatConv", "split_concat_conv", "split_concat_conv_rule"]
