"""The ``c`` target's pooling: ``c.DispatchPool`` sends float32 NCHW ``max_pool2d``
(the batch, channels and image static or symbolic: size arguments of the call) and
``avg_pool2d`` (its image static; any padding, stride, dilation, ``ceil_mode`` and
``count_include_pad``) to ``plait_pool.c`` (a kernel family:
:mod:`plait.target.c.kernels`), which pools output row by output row (the maximum or
sum of the window's input rows on vectors across the row, then of its taps, a vector of
output columns at a time, an average divided by its window's count of taps), and
float32 ``global_avg_pool2d`` (NCHW) and ``mean`` over the two spatial axes of a rank-4
value (kept or not) to its global average pooling, each plane summed on vector lanes
(the generated reduction sums a plane with one scalar chain: every ISA copy of a
generated kernel computes the same bits, so it may not reassociate).

The generated kernels for ``max_pool2d`` and ``avg_pool2d`` keep the window loops
innermost, which the C compiler does not vectorize (slow on large images: the window
loops are too short to pay for their set-up; PoolFormer's 3x3 average on 64 planes of
56 x 56 took 580 us); the row-wise library function reads each input row with a
contiguous or evenly strided loop.  Like ``c.DispatchGemm`` the library is one C file,
the same for every model (compiled once per machine), and each call gets a wrapper
with its shape as constants; both are recorded in the module's ``c_sources``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import Call, Expr, ExternFunc, Tuple
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, is_op
from plait.transform.pattern_rewrite import Rule, rewrite_module

from ..kernels.pool import avg_pool2d_call, global_avg_pool2d_call, max_pool2d_call
from ..kernels.registry import record_calls
from ..kernels.wrapper import emit_call
from ..shapes import float_shape, is_static_shape
from .squeeze_excite import spatial_axes


def _wrapper(call: Call) -> tuple[str, str, CFunction] | None:
    """The wrapper (name, C code, CFunction) of a max_pool2d or avg_pool2d call it
    takes, or None."""
    from plait.runtime.window import expand_ints, expand_padding

    x = call.args[0]
    xs, os_ = float_shape(x), float_shape(call)
    a = call.attrs
    if xs is None or os_ is None or len(xs) != 4 or a.get("layout", "NCHW") != "NCHW":
        return None
    avg = call.op.name == "avg_pool2d"
    if (a.get("ceil_mode") and not avg) or 0 in xs or 0 in os_:
        return None   # (symbolic sizes are size arguments)
    if avg and (not is_static_shape(xs[2:]) or _covers_image(call, xs, os_)):
        return None   # a global average (global_avg_rule), or one that may be
    kh, kw = expand_ints(a["pool_size"], 2)
    sh, sw = expand_ints(a["strides"], 2)
    dh, dw = expand_ints(a["dilation"], 2)
    pt, pl, pb, pr = expand_padding(a["padding"], 2)
    window = (kh, kw, sh, sw, dh, dw, pt, pl)
    if avg:
        return emit_call(avg_pool2d_call(xs, os_, window, (pb, pr),
                                         bool(a["count_include_pad"])))
    return emit_call(max_pool2d_call(xs, os_, window))


POOL = is_op("max_pool2d", "avg_pool2d").has_dtype("float32").has_rank(4)
"""The shapes :class:`DispatchPool` takes (NCHW, sizes static or symbolic, an average
pooling's image static; the rest is checked by the rewrite)."""

_GAP = is_op("global_avg_pool2d", layout="NCHW")
_MEAN = is_op("mean", axis=spatial_axes)
_AVG = is_op("avg_pool2d", "adaptive_avg_pool2d", layout="NCHW")
GLOBAL_AVG = (_GAP | _MEAN | _AVG).has_dtype("float32")
"""The global averages :class:`DispatchPool` takes: ``global_avg_pool2d`` (NCHW),
``mean`` over axes 2 and 3 of a rank-4 value, and the poolings that are one: an
``adaptive_avg_pool2d`` to 1 x 1 and an unpadded, undilated ``avg_pool2d`` whose one
window covers the image (EfficientNet's head as HF writes it: a 1280-wide window with
ceil_mode on 7 x 7; its image static, so that the cover is known); the batch, channels
and image of the others may be symbolic, checked by the rewrite.  The squeezes of
squeeze-and-excite gates are ``c.DispatchSqueezeExcite``'s, which runs first."""


def _covers_image(call: Call, xs: tuple[int, ...], os_: tuple[int, ...]) -> bool:
    """An ``avg_pool2d``/``adaptive_avg_pool2d`` call is the mean of each whole plane."""
    from plait.runtime.window import expand_ints, expand_padding

    if os_[2:] != (1, 1):
        return False
    if call.op.name == "adaptive_avg_pool2d":
        return True
    a = call.attrs
    k = expand_ints(a["pool_size"], 2)
    return (expand_ints(a["dilation"], 2) == (1, 1) and expand_padding(a["padding"], 2) == (0,) * 4
            and k[0] >= xs[2] and k[1] >= xs[3])


def _mean_wrapper(call: Call) -> tuple[str, str, CFunction] | None:
    """The wrapper (name, C code, CFunction) of a global average it takes, or None."""
    xs, os_ = float_shape(call.args[0]), float_shape(call)
    if xs is None or os_ is None or len(xs) != 4 or 0 in xs:
        return None
    if call.op.name == "avg_pool2d" and not is_static_shape(xs[2:]):
        return None   # whether its window covers a symbolic image is not known
    if call.op.name in ("avg_pool2d", "adaptive_avg_pool2d") and not _covers_image(call, xs, os_):
        return None
    return emit_call(global_avg_pool2d_call(xs, os_))


def pool_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchPool`: :data:`POOL`, rewritten into a call of its
    wrapper (recorded in ``wrappers``) when the shape is one the library takes."""

    def rewrite(m: Match) -> Expr | None:
        call = m.call(POOL)
        try:
            w = _wrapper(call)
        except UnboundSize:
            return None   # a size only an intermediate value has: not a call here
        if w is None:
            return None
        name, code, cfn = w
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(call.args), out=call.ty,
                         span=call.span)

    return Rule("c.pool2d", POOL, rewrite)


def global_avg_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchPool` for :data:`GLOBAL_AVG`: a call of its wrapper
    (recorded in ``wrappers``) when the library takes the shapes."""

    def rewrite(m: Match) -> Expr | None:
        call = next(m.call(p) for p in (_GAP, _MEAN, _AVG) if p in m)
        try:
            w = _mean_wrapper(call)
        except UnboundSize:
            return None
        if w is None:
            return None
        name, code, cfn = w
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(call.args[:1]), out=call.ty,
                         span=call.span)

    return Rule("c.global_avg_pool2d", GLOBAL_AVG, rewrite)


def dispatch_pool(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with float32 NCHW max_pool2d, avg_pool2d and global averages (:data:`GLOBAL_AVG`),
    static or symbolic sizes, rewritten into calls of ``plait_pool.c``; functions for which ``skip``
    is true (default: those of external codegens) are left alone."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    out = rewrite_module(mod, [pool_rule(wrappers), global_avg_rule(wrappers)], skip=skip)
    return record_calls(out, wrappers, "plait_pool_calls")


@module_pass(name="c.DispatchPool", phases=("optimization",))
class DispatchPool:
    """Send float32 NCHW max_pool2d, avg_pool2d and global average pooling to plait_pool.c.

    Max and average pooling run row-wise on vectors; a global average is ``global_avg_pool2d``, a
    mean over H and W or a pooling whose one window covers the image; the batch,
    channels and image may be symbolic (size arguments of the call)."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_pool(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]


__all__ = ["GLOBAL_AVG", "POOL", "DispatchPool", "dispatch_pool", "global_avg_rule", "pool_rule"]
