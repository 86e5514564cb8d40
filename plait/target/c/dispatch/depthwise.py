"""The ``c`` target's grouped and depthwise convolutions: ``c.DispatchDepthwise`` sends
float32 NCHW ``conv2d`` with ``groups > 1`` (MobileNet's and EfficientNet's depthwise
convolutions, ConvNeXt's 7x7, ResNeXt's and RegNet's grouped ones, wav2vec2's grouped
positional convolution), with its epilogue, to one of two kernel families
(:mod:`plait.target.c.kernels`).  The channels and the window are static; the batch and
the image may be symbolic (size arguments of the call, the default layout):

* few channels per group (depthwise ones: one), or weights that are not constant:
  ``plait_dwconv.c``.  The kernel reads the input where it lies (each group's planes
  are copied into a zero-padded, phase-split scratch image in the cache of the thread
  that computes them: no padded copy of the tensor) and computes each output plane on a
  register tile of output rows, one weight broadcast per tap (see the C file);
* from :data:`GROUPED_PRODUCT_MIN_CG` channels per group with constant weights: the
  ``conv`` family's implicit-im2col product once per image and group
  (``plait_conv2d_desc.G``; the weights packed group by group at compile time), the
  (image, group) products' column blocks shared by the threads; or, for 3x3 stride-1
  groups of at least 16 channels where it pays for one group's shape, the ``winograd``
  family per image and group (F(4x4) on RegNet's 56 x 56 and 28 x 28 layers: 0.4 of
  the product's time).  Each loaded input
  vector then serves 6 output channels instead of one: on RegNet's grouped 3x3 layers
  (64 channels per group) 1.5-4x faster than the tile, on wav2vec2's positional
  convolution (48 per group, a 128-wide window) about 15x.  With 8 channels per group
  the two are close; with 4 or fewer the tile wins.

The epilogue is :class:`~.gemm.DispatchGemm`'s, planned by the same steps
(:func:`~.gemm.extend_epilogue`): a per-channel constant ``add`` (the bias), an ``add``
of a tensor of the output's shape (a residual), a ``relu``, then ``clip`` (ReLU6),
``silu`` or ``gelu`` (either form), and views that keep the elements in order, each
folded while the intermediate result has no other use.  A ``gelu`` that follows a
``permute_dims`` of the result (SegFormer's MLP: a depthwise 3x3 between two
token-major products) is moved before it first (:func:`gelu_before_permute_rule`), so
the call computes it on vectors rather than a generated kernel on the transposed
elements.  Each call gets a wrapper with its shape as constants; both
are recorded in the module's ``c_sources``.  The tuning database may choose either
family per call (:func:`dwconv_space`).

It runs after ``c.DispatchGemm`` (which takes the ungrouped convolutions and turns
``x * sigmoid(x)`` into ``silu``) and before ``c.DispatchLibrary``; without it
(``Target("c", gemm=False)``) depthwise convolutions are generated kernels and other
grouped ones go to ``blas.conv2d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import Call, Constant, Expr, ExternFunc, Op, Tuple
from plait.ir.module import IRModule
from plait.ir.symbolic import Dim
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, is_op
from plait.transform.pattern_rewrite import Rule, rewrite_module

from ..kernels.dwconv import dwconv2d_call
from ..kernels.gemm import packed_a_constant, packed_b_constant
from ..kernels.registry import record_calls
from ..kernels.winograd import winograd_constant
from ..kernels.wrapper import emit_call
from ..shapes import float_shape, is_static_shape
from ..tuning import Chooser, call_key
from ..tuning.space import Choice, SearchSpace, register_space, thread_values
from .common import fused_span
from .gemm import (
    ProductPlan,
    block_choices,
    epilogue_step,
    extend_epilogue,
    tuned_fields,
    view_source,
    winograd_applies,
    winograd_choice,
    winograd_mode,
)

DWCONV_LAYOUTS = {"auto": 0, "planes": 1, "lanes": 2, "rows": 3}
"""The layouts of ``plait_dwconv2d`` and their values of ``plait_dwconv2d_desc.layout``
(``PLAIT_DW_LAYOUT_*``)."""

DWCONV_MIN_PARALLEL = 131072
"""The work (multiply-adds) from which ``plait_dwconv2d`` runs on several threads."""


GROUPED_PRODUCT_MIN_CG = 8
"""The fewest channels per group from which a grouped convolution with constant weights
runs as a product per group (``plait_conv.c``, :func:`grouped_product_applies`) by
default rather than on ``plait_dwconv.c``'s tile."""

PRODUCT_LAYOUTS = {"product": "direct", "product_rows": "pixel_rows",
                   "winograd2": "winograd2", "winograd4": "winograd4"}
"""The layouts of a grouped convolution computed by the ``conv`` and ``winograd``
families, one convolution per image and group (``plait_conv2d_desc.G``), and the way
each computes it (:data:`~.gemm.CONV2D_ALGORITHMS`): channels as the tile's rows
(``product``, ``plait_conv2d``), pixels as its rows (``product_rows``,
``plait_conv2d_pixel_rows``), Winograd F(2x2) or F(4x4) (3x3, stride 1, at least 16
channels per group in and out: :func:`~.gemm.winograd_applies` of one group)."""


def group_desc(desc: dict[str, Any]) -> dict[str, Any]:
    """The shape of one group of a grouped convolution (``desc``: the fields of
    ``plait_dwconv2d_desc``) as an ungrouped one: ``C / G`` input and ``O / G`` output
    channels."""
    return {**desc, "C": desc["C"] // desc["G"], "O": desc["O"] // desc["G"], "G": 1}


def grouped_product_applies(desc: dict[str, Any]) -> bool:
    """Whether a grouped convolution (constant weights) runs as a product per group by
    default: from :data:`GROUPED_PRODUCT_MIN_CG` channels per group."""
    return desc["C"] // desc["G"] >= GROUPED_PRODUCT_MIN_CG


def grouped_default(desc: dict[str, Any], winograd: int | str = "auto") -> str:
    """The default layout of a grouped convolution with constant weights, under the
    target's ``winograd`` setting: where :func:`grouped_product_applies`, Winograd where
    :func:`~.gemm.winograd_choice` picks it for one group (as for an ungrouped
    convolution of that shape: F(4x4) on RegNet's 56 x 56 and 28 x 28 layers, F(2x2) on
    14 x 14), else ``product``; ``auto`` (``plait_dwconv.c``'s rule) below it.  Pixels
    as rows (``product_rows``) is the tuner's to choose: on RegNet's grouped 3x3 layers
    (64 channels per group, 56 x 56 to 7 x 7) and wav2vec2's positional convolution (48
    channels per group, K 6144, 50 pixels) it was slower than ``product`` (1.2-4x) on
    all but the 7 x 7 layer, where the two were within noise."""
    if not grouped_product_applies(desc):
        return "auto"
    m = winograd_choice(group_desc(desc), winograd)
    return f"winograd{m}" if m else "product"


def dwconv_space(desc: dict[str, Any], threads: int, product: bool = False,
                 winograd: int | str = "auto") -> SearchSpace | None:
    """The search space of a grouped convolution (``desc``: the fields of
    ``plait_dwconv2d_desc``): ``layout`` (``auto``: the kernel's own rule, which
    depends on the vector width of the ISA copy; ``planes``; ``lanes`` and ``rows``
    where the kernel can take them; with ``product`` (constant weights, more than one
    channel per group) the :data:`PRODUCT_LAYOUTS` of the ``conv`` and ``winograd``
    families (Winograd where it applies to one group and the target's ``winograd``
    allows it: a forced variant is the only Winograd choice, 0 none); the default
    :func:`grouped_default`) and ``threads`` (0: all, the default); None when the batch
    or the image is symbolic."""
    if any(type(desc[k]) is not int for k in ("N", "H", "W", "OH", "OW")):
        return None
    cg, og = desc["C"] // desc["G"], desc["O"] // desc["G"]
    layouts = ["auto", "planes"]
    if cg == 1 and og == 1:
        layouts.append("lanes")
    if (cg == 1 and og == 1 and desc["SH"] == desc["SW"] and desc["SH"] in (1, 2)
            and desc["DH"] == desc["DW"] == 1 and desc["KH"] == desc["KW"]
            and desc["KH"] in (3, 5)):
        layouts.append("rows")
    product = product and cg > 1
    if product:
        layouts += ["product", "product_rows"]
        if winograd and winograd_applies(group_desc(desc)):
            layouts += [f"winograd{winograd}"] if winograd in (2, 4) else ["winograd2",
                                                                            "winograd4"]
    work = desc["N"] * desc["O"] * desc["OH"] * desc["OW"] * desc["KH"] * desc["KW"] * cg
    values = thread_values(threads, work >= DWCONV_MIN_PARALLEL)
    # the product per group (layout product): its split and block sizes, as an
    # ungrouped convolution's (one group's product: O / G rows, C / G * KH * KW sums)
    blocks = (block_choices(og, desc["OH"] * desc["OW"], cg * desc["KH"] * desc["KW"], values,
                            (("layout", ("product",)),)) if product else ())
    return SearchSpace("dwconv2d", (
        Choice("layout", tuple(layouts), "where the kernel puts the pixels and channels"),
        Choice("threads", values, "at most this many threads (0: all)"), *blocks),
        (("layout", grouped_default(desc, winograd) if product else "auto"), ("threads", 0),
         *((c.name, c.values[0]) for c in blocks)))


register_space("dwconv2d", dwconv_space)


def _is_grouped(call: Call) -> bool:
    return int(call.attrs.get("groups", 1)) > 1


def plan_grouped_conv2d(call: Call, chooser: Chooser | None = None,
                        winograd: int | str = "auto") -> ProductPlan | None:
    """The native call of a grouped float32 NCHW/OIHW ``conv2d`` with static channels
    and window (the batch and image may be symbolic; as a plan the epilogue steps
    extend), or None when no family can take it: a convolution
    per group on the ``conv`` or ``winograd`` family (constant weights, several channels
    per group; kind ``conv2d``) or ``plait_dwconv.c`` (kind ``dwconv2d``), as
    ``chooser``'s point says (a tuning database's, else the default,
    :func:`grouped_default` under the target's ``winograd``)."""
    from plait.runtime.window import expand_ints, expand_padding

    x, w = call.args
    xs, ws, os_ = float_shape(x), float_shape(w), float_shape(call)
    a = call.attrs
    if xs is None or ws is None or os_ is None or len(xs) != 4 or len(ws) != 4:
        return None
    if not is_static_shape((xs[1], os_[1], *ws)):
        return None   # a symbolic batch or image is a size argument; the channels static
    if a["data_layout"] != "NCHW" or a["kernel_layout"] != "OIHW":
        return None
    g = int(a["groups"])
    n, c, h, wd = xs
    o, cg, kh, kw = ws
    if g < 2 or c % g or o % g or cg != c // g or 0 in xs or 0 in os_ or 0 in ws:
        return None
    sh, sw = expand_ints(a["strides"], 2)
    dh, dw = expand_ints(a["dilation"], 2)
    pt, pl, pb, pr = expand_padding(a["padding"], 2)
    desc = dict(N=n, C=c, H=h, W=wd, O=o, G=g, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                PT=pt, PL=pl, OH=os_[2], OW=os_[3])
    chooser = chooser or Chooser(None)
    weights = w.data if isinstance(w, Constant) else None
    point, tuning = chooser.choose(call_key("dwconv2d", desc),
                                   dwconv_space(desc, chooser.threads, weights is not None,
                                                winograd))
    layout = "auto" if point is None else str(point["layout"])
    threads = 0 if point is None else int(point["threads"])
    if point is None and weights is not None and type(os_[2]) is int and type(os_[3]) is int:
        layout = grouped_default(desc, winograd)   # a symbolic batch: the default rule
    if layout in PRODUCT_LAYOUTS and weights is not None:
        algorithm = PRODUCT_LAYOUTS[layout]
        rows, wino = algorithm == "pixel_rows", int(algorithm[-1]) if "winograd" in algorithm else 0
        packed = (winograd_constant(weights, wino, groups=g) if wino
                  else packed_b_constant(weights, transposed=True, groups=g) if rows
                  else packed_a_constant(weights, groups=g))
        cdesc = dict(N=n, C=c, H=h, W=wd, O=o, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                     PT=pt, PL=pl, PB=pb, PR=pr, OH=os_[2], OW=os_[3], G=g,
                     **tuned_fields(point or {}))   # the thread cap, split and blocks
        plan = ProductPlan("conv2d", [x, packed],
                           [(xs, "float32"), (packed.ty.shape, "float32")], cdesc, os_,
                           "row", o)
        plan.pixel_rows = rows
        plan.winograd = wino
    else:
        plan = ProductPlan("dwconv2d", [x, w], [(xs, "float32"), (ws, "float32")], desc,
                           os_, "row", o)
        if point is not None:
            plan.desc["layout"] = DWCONV_LAYOUTS[layout]
            plan.max_threads = threads
    plan.tuning = tuning
    return plan


def _wrapper(plan: ProductPlan) -> tuple[str, str, CFunction]:
    """The plan's call wrapper: (symbol, C code, CFunction)."""
    if plan.kind == "conv2d":
        return plan.symbol_and_code()
    x, w = (shape for shape, _ in plan.params)
    return emit_call(dwconv2d_call(x, w, plan.out_shape, plan.desc, plan.epilogue(),
                                   layout=plan.desc.get("layout", 0),
                                   max_threads=plan.max_threads))


GROUPED_CONV = (is_op("conv2d").has_dtype("float32").has_rank(4).where(_is_grouped)
                .repeat(epilogue_step))
"""The shape :class:`DispatchDepthwise` takes: a grouped float32 conv2d and any number of
epilogue steps (what one call can do is the plan's business, as in c.DispatchGemm)."""


_PERMUTED = is_op("permute_dims")(GROUPED_CONV.single_use()).single_use()
GELU_AFTER_PERMUTE = is_op("gelu")(_PERMUTED)
"""A ``gelu`` of a ``permute_dims`` of a grouped convolution's result (with its
epilogue), neither read by anything else: SegFormer's MLP, a depthwise 3x3 between two
token-major products, whose activation follows the transpose back to tokens."""


def gelu_before_permute_rule() -> Rule:
    """The rule that moves the ``gelu`` of :data:`GELU_AFTER_PERMUTE` before the
    ``permute_dims`` (an elementwise op commutes with any transpose), where the grouped
    convolution's call computes it as its epilogue on vectors instead of a generated
    kernel computing it on the transposed elements one by one."""

    def rewrite(m: Match) -> Expr | None:
        gelu, perm = m.call(GELU_AFTER_PERMUTE), m.call(_PERMUTED)
        inner = make_call("gelu", perm.args[0], **gelu.attrs)
        return make_call("permute_dims", inner, **perm.attrs)

    return Rule("c.gelu_before_permute", GELU_AFTER_PERMUTE, rewrite)


def _channels_last_source(m: Match, v: Expr, n: Dim, c: Dim) -> Expr | None:
    """The tensor whose elements are those of ``v`` (an ``n x c x H x W`` convolution
    input) with the channels last (``n x H x W x c`` in memory order), when ``v`` is a
    ``permute_dims`` moving the last axis of an ``n x ... x c`` tensor to axis 1 (seen
    through views that keep the order): a token-major ``n x HW x c`` tensor transposed
    and reshaped to an image, or an ``n x H x W x c`` one permuted; else None."""
    for _ in range(8):
        d = m.definition(v)
        if not isinstance(d, Call):
            return None
        if view_source(d) is not None:
            v = d.args[0]
            continue
        if not isinstance(d.op, Op) or d.op.name != "permute_dims":
            return None
        src = d.args[0]
        ss = float_shape(src)
        axes = d.attrs.get("axes")
        if ss is None or axes is None or len(ss) < 3:
            return None
        r = len(ss)
        if [int(a) % r for a in axes] != [0, r - 1, *range(1, r - 1)]:
            return None
        return src if ss[0] == n and ss[-1] == c else None
    return None


CHANNELS_LAST_CONV = is_op("permute_dims")(GROUPED_CONV.single_use())
"""The shape the channels-last rule takes: a ``permute_dims`` that moves the channels of
a grouped convolution's result (with its epilogue) last."""


def channels_last_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule that computes a depthwise convolution between two token-major (channels
    last) tensors with its channels last (``plait_dwconv2d_desc.nhwc``): its input a
    ``permute_dims`` moving the channels of an ``N x ... x C`` tensor to axis 1 and
    reshaped to ``N x C x H x W`` (:func:`_channels_last_source`), its result (after its
    epilogue: bias, relu, an activation; views) permuted back to channels last
    (:data:`CHANNELS_LAST_CONV`).  The call reads the tensor before the first transpose
    and writes the one after the second, so neither transpose is computed: SegFormer's and
    PVT-v2's Mix-FFN (a depthwise 3x3 and GELU between two products), CvT's convolutional
    projections.  Constant weights only (packed ``KH x KW x C`` at compile time), static
    shapes, no residual; the call is not tuned (the layouts of the tuning space are
    channels-first ones)."""

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = sorted(m.bindings)
        conv = g.bindings[members[0]].value
        root = g.bindings[members[-1]]
        plan = plan_grouped_conv2d(conv, Chooser(None))  # type: ignore[arg-type]
        w = conv.args[1]  # type: ignore[union-attr]
        if plan is None or plan.kind != "dwconv2d" or not isinstance(w, Constant):
            return None
        desc = plan.desc
        if not (desc["G"] == desc["C"] == desc["O"]) or not is_static_shape(
                tuple(desc[k] for k in ("N", "H", "W", "OH", "OW"))):
            return None
        x = _channels_last_source(m, conv.args[0], desc["N"], desc["C"])  # type: ignore[union-attr]
        xs, ys = (float_shape(x) if x is not None else None), float_shape(root.value)
        ins = float_shape(g.bindings[members[-2]].value)
        perm = root.value.attrs.get("axes")  # type: ignore[union-attr]
        if xs is None or ys is None or ins is None or perm is None:
            return None
        r = len(ins)
        if ([int(a) % r for a in perm] != [0, *range(2, r), 1] or ins[0] != desc["N"]
                or ins[1] != desc["C"]):
            return None   # the second permute does not put the channels last
        reads = [g.bindings[i].var for i in members[:-2]]
        if not all(extend_epilogue(plan, g.bindings[i].value, src)  # type: ignore[arg-type]
                   for i, src in zip(members[1:-1], reads)) or plan.res is not None:
            return None
        kh, kw = desc["KH"], desc["KW"]
        packed = Constant(np.ascontiguousarray(
            w.data.reshape(desc["C"], kh * kw).T.reshape(kh, kw, desc["C"]), np.float32))
        plan.inputs = [x, packed]
        plan.out_shape = ys
        call = dwconv2d_call(xs, (kh, kw, desc["C"]), ys, desc, plan.epilogue(), nhwc=True)
        name, code, cfn = emit_call(call)
        wrappers.setdefault(name, (code, cfn))
        args = [*plan.inputs, *(e for e in (plan.bias,) if e is not None)]
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=root.var.ty,
                         span=fused_span(g, members, root))

    return Rule("c.dwconv2d_channels_last", CHANNELS_LAST_CONV, rewrite)


def depthwise_rule(wrappers: dict[str, tuple[str, CFunction]],
                   chooser: Chooser | None = None, winograd: int | str = "auto") -> Rule:
    """The rule of :class:`DispatchDepthwise`: :data:`GROUPED_CONV`, planned step by
    step (each call's point from ``chooser``, under the target's ``winograd`` setting)
    and rewritten into a call of its wrapper (recorded in ``wrappers``); a chain the call
    cannot do whole is declined (a shorter one is matched instead)."""
    chooser = chooser if chooser is not None else Chooser(None)

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = sorted(m.bindings)
        plan = plan_grouped_conv2d(g.bindings[members[0]].value, chooser,  # type: ignore[arg-type]
                                   winograd)
        reads = [g.bindings[i].var for i in members[:-1]]   # what each step reads
        if plan is None or not all(extend_epilogue(plan, g.bindings[i].value, src)  # type: ignore[arg-type]
                                   for i, src in zip(members[1:], reads)):
            return None
        try:
            name, code, cfn = _wrapper(plan)
        except UnboundSize:
            return None   # a size only an intermediate value has: not a call here
        wrappers.setdefault(name, (code, cfn))
        chooser.note(name, "dwconv2d", plan.tuning)
        args = list(plan.inputs)
        args += [e for e in (plan.bias, plan.res) if e is not None]
        root = g.bindings[members[-1]]
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=root.var.ty,
                         span=fused_span(g, members, root))

    return Rule("c.dwconv2d", GROUPED_CONV, rewrite)


def dispatch_depthwise(mod: IRModule, skip: Any = None, tuning_db: str | None = None,
                       winograd: int | bool | str = "auto") -> IRModule:
    """``mod`` with grouped float32 NCHW conv2d (static channels and window; the batch
    and image may be symbolic) and their epilogues rewritten into native calls (a
    convolution per group, or ``plait_dwconv.c``); functions for which ``skip`` is true
    (default: those of external codegens) are left alone.  The points of the calls: the
    tuning database ``tuning_db``'s (else ``PLAIT_TUNING_DB``'s), else the defaults;
    ``winograd`` as ``Target("c")``'s."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    chooser = Chooser(tuning_db)
    mod = rewrite_module(mod, [gelu_before_permute_rule()], skip=skip)
    mod = rewrite_module(mod, [channels_last_rule(wrappers)], skip=skip)
    out = rewrite_module(mod, [depthwise_rule(wrappers, chooser, winograd_mode(winograd))],
                         skip=skip)
    return chooser.annotate(record_calls(out, wrappers, "plait_dwconv_calls"))


@module_pass(name="c.DispatchDepthwise", phases=("optimization",))
class DispatchDepthwise:
    """Send grouped and depthwise float32 NCHW conv2d and their epilogues to native calls.

    The channels and the window are static, the batch and the image may be symbolic;
    the epilogue is a bias, a residual, a relu and a clip, SiLU or GELU; the call is a
    convolution per group (``conv``, ``winograd``) or ``plait_dwconv.c``."""

    def __init__(self, *, winograd: int | bool | str = "auto", tuning_db: str | None = None,
                 codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        self.winograd = winograd_mode(winograd)
        self.tuning_db = tuning_db

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_depthwise(mod, skip=skips_external(self, ctx),  # type: ignore[arg-type]
                                  tuning_db=self.tuning_db, winograd=self.winograd)


__all__ = ["CHANNELS_LAST_CONV", "DWCONV_LAYOUTS", "GROUPED_CONV", "GROUPED_PRODUCT_MIN_CG",
           "PRODUCT_LAYOUTS", "DispatchDepthwise", "channels_last_rule", "depthwise_rule",
           "dispatch_depthwise", "dwconv_space", "group_desc", "grouped_default",
           "grouped_product_applies", "plan_grouped_conv2d"]
