"""The ``c`` target's grouped and depthwise convolutions: ``c.DispatchDepthwise`` sends
float32 NCHW ``conv2d`` with ``groups > 1`` (MobileNet's and EfficientNet's depthwise
convolutions, ConvNeXt's 7x7, ResNeXt's grouped ones) of static shape, with its
epilogue, to ``plait_dwconv.c`` (a kernel family: :mod:`plait.target.c.kernels`).

The epilogue is :class:`~.gemm.DispatchGemm`'s, planned by the same steps
(:func:`~.gemm.extend_epilogue`): a per-channel constant ``add`` (the bias), an ``add``
of a tensor of the output's shape (a residual), a ``relu``, then ``clip`` (ReLU6) or
``silu`` (not ``gelu``: the chain stops before it), and views that keep the elements in
order, each folded while the intermediate result has no other use.  The
kernel reads the input where it lies (each group's planes are copied into a zero-padded,
phase-split scratch image in the cache of the thread that computes them: no padded copy
of the tensor) and computes each output plane on a register tile of output rows (see
the C file).  Each call gets a wrapper
with its shape as constants; both are recorded in the module's ``c_sources``.

It runs after ``c.DispatchGemm`` (which takes the ungrouped convolutions and turns
``x * sigmoid(x)`` into ``silu``) and before ``c.DispatchLibrary``; without it
(``Target("c", gemm=False)``) depthwise convolutions are generated kernels and other
grouped ones go to ``blas.conv2d``.
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

from ..kernels.dwconv import dwconv2d_call
from ..kernels.gemm import ACT_GELU, ACT_GELU_TANH
from ..kernels.registry import record_calls
from ..kernels.wrapper import emit_call
from ..shapes import float_shape, is_static_shape
from ..tuning import Chooser, call_key
from ..tuning.space import Choice, SearchSpace, register_space, thread_values
from .common import fused_span
from .gemm import ProductPlan, epilogue_step, extend_epilogue

DWCONV_LAYOUTS = {"auto": 0, "planes": 1, "lanes": 2, "rows": 3}
"""The layouts of ``plait_dwconv2d`` and their values of ``plait_dwconv2d_desc.layout``
(``PLAIT_DW_LAYOUT_*``)."""

DWCONV_MIN_PARALLEL = 131072
"""The work (multiply-adds) from which ``plait_dwconv2d`` runs on several threads."""


def dwconv_space(desc: dict[str, Any], threads: int) -> SearchSpace | None:
    """The search space of a grouped convolution of static shape (``desc``: the fields
    of ``plait_dwconv2d_desc``): ``layout`` (``auto``, the default: the kernel's own
    rule, which depends on the vector width of the ISA copy; ``planes``; ``lanes`` and
    ``rows`` where the kernel can take them) and ``threads`` (0: all, the default);
    None when the batch or the image is symbolic."""
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
    work = desc["N"] * desc["O"] * desc["OH"] * desc["OW"] * desc["KH"] * desc["KW"] * cg
    values = thread_values(threads, work >= DWCONV_MIN_PARALLEL)
    return SearchSpace("dwconv2d", (
        Choice("layout", tuple(layouts), "where the kernel puts the pixels and channels"),
        Choice("threads", values, "at most this many threads (0: all)")),
        (("layout", "auto"), ("threads", 0)))


register_space("dwconv2d", dwconv_space)


def _is_grouped(call: Call) -> bool:
    return int(call.attrs.get("groups", 1)) > 1


def plan_grouped_conv2d(call: Call, chooser: Chooser | None = None) -> ProductPlan | None:
    """The native call of a grouped float32 NCHW/OIHW ``conv2d`` of static shape (as a
    plan the epilogue steps extend), or None when the family cannot take it; its layout
    and threads are ``chooser``'s point (a tuning database's, else the default: the
    kernel's own rule)."""
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
    pt, pl, _pb, _pr = expand_padding(a["padding"], 2)
    desc = dict(N=n, C=c, H=h, W=wd, O=o, G=g, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                PT=pt, PL=pl, OH=os_[2], OW=os_[3])
    plan = ProductPlan("dwconv2d", [x, w], [(xs, "float32"), (ws, "float32")], desc, os_,
                       "row", o)
    point, plan.tuning = (chooser or Chooser(None)).choose(
        call_key("dwconv2d", desc), dwconv_space(desc, (chooser or Chooser(None)).threads))
    if point is not None:
        plan.desc["layout"] = DWCONV_LAYOUTS[str(point["layout"])]
        plan.max_threads = int(point["threads"])
    return plan


def _wrapper(plan: ProductPlan) -> tuple[str, str, CFunction]:
    """The plan's call wrapper: (symbol, C code, CFunction)."""
    x, w = (shape for shape, _ in plan.params)
    return emit_call(dwconv2d_call(x, w, plan.out_shape, plan.desc, plan.epilogue(),
                                   layout=plan.desc.get("layout", 0),
                                   max_threads=plan.max_threads))


GROUPED_CONV = (is_op("conv2d").has_dtype("float32").has_rank(4).where(_is_grouped)
                .repeat(epilogue_step))
"""The shape :class:`DispatchDepthwise` takes: a grouped float32 conv2d and any number of
epilogue steps (what one call can do is the plan's business, as in c.DispatchGemm)."""


def depthwise_rule(wrappers: dict[str, tuple[str, CFunction]],
                   chooser: Chooser | None = None) -> Rule:
    """The rule of :class:`DispatchDepthwise`: :data:`GROUPED_CONV`, planned step by
    step (each call's point from ``chooser``) and rewritten into a call of its wrapper
    (recorded in ``wrappers``); a chain the call cannot do whole is declined (a shorter
    one is matched instead)."""
    chooser = chooser if chooser is not None else Chooser(None)

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = sorted(m.bindings)
        plan = plan_grouped_conv2d(g.bindings[members[0]].value, chooser)  # type: ignore[arg-type]
        reads = [g.bindings[i].var for i in members[:-1]]   # what each step reads
        if plan is None or not all(extend_epilogue(plan, g.bindings[i].value, src)  # type: ignore[arg-type]
                                   for i, src in zip(members[1:], reads)):
            return None
        if plan.act in (ACT_GELU, ACT_GELU_TANH):
            return None   # plait_dwconv.c has no GELU: the chain stops before it
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


def dispatch_depthwise(mod: IRModule, skip: Any = None, tuning_db: str | None = None) -> IRModule:
    """``mod`` with grouped float32 NCHW conv2d of static shape (and their epilogues)
    rewritten into calls of ``plait_dwconv.c``; functions for which ``skip`` is true
    (default: those of external codegens) are left alone.  The points of the calls: the
    tuning database ``tuning_db``'s (else ``PLAIT_TUNING_DB``'s), else the defaults."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    chooser = Chooser(tuning_db)
    out = rewrite_module(mod, [depthwise_rule(wrappers, chooser)], skip=skip)
    return chooser.annotate(record_calls(out, wrappers, "plait_dwconv_calls"))


@module_pass(name="c.DispatchDepthwise", phases=("optimization",))
class DispatchDepthwise:
    """Send grouped and depthwise float32 NCHW conv2d of static shape, with bias,
    residual, relu and clip/SiLU epilogues, to plait_dwconv.c."""

    def __init__(self, *, tuning_db: str | None = None,
                 codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        self.tuning_db = tuning_db

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_depthwise(mod, skip=skips_external(self, ctx),  # type: ignore[arg-type]
                                  tuning_db=self.tuning_db)


__all__ = ["DWCONV_LAYOUTS", "GROUPED_CONV", "DispatchDepthwise", "depthwise_rule", "dwconv_space",
           "dispatch_depthwise", "plan_grouped_conv2d"]
