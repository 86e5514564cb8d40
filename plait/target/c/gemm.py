"""The ``c`` target's own matrix product and convolution, with fused epilogues.

:class:`DispatchGemm` (``c.DispatchGemm``, the first pass of the ``c`` target's dispatch
hook) rewrites float32 ``conv2d``, ``linear`` and ``matmul`` into calls of functions of
``plait_gemm.c`` (:data:`NATIVE_SOURCE`, a blocked matrix product after BLIS with a 6x16
register tile, AVX2+FMA chosen at run time on x86-64, threads from the library's pool),
compiled into the model's native library next to the generated kernels.  On the way it

* **packs constant weights at compile time** into the layout the micro-kernel streams
  (conv2d: the ``O x (C*KH*KW)`` weight matrix in panels of 6 rows; linear/matmul: the
  ``K x N`` matrix in panels of 16 columns), so a call packs only its activations;
* **fuses the epilogue**: a following ``add`` of a per-channel constant (the bias), an
  ``add`` of a tensor of the output's shape (a residual) and a ``relu`` are folded into
  the call when each intermediate result has no other use — one pass over the output
  instead of three;
* computes a convolution as an implicit im2col product: patches are packed straight
  from the zero-padded input, block by block, never materialized whole.

The library is one C file, the same for every model (``plait_gemm.c``, compiled once
per machine: the C compiler caches each source's object), and each call of a shape gets
a small wrapper with the shape as constants (``plait_gemm_calls_<hash>.c``); both are
recorded in the module's ``c_sources``, so the module stays self-contained.

What it does not take (float64, grouped convolutions, non-NCHW layouts, non-constant
convolution weights, matmuls whose batch dimensions broadcast both ways, 1-D
operands) stays for the next dispatch pass (``c.DispatchLibrary``: BLAS through numpy)
or for legalization.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from plait.codegen.c import CFunction, CSource
from plait.ir.builder import BlockBuilder
from plait.ir.expr import (
    BindingBlock,
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    Node,
    Op,
    SeqExpr,
    Tuple,
    Var,
    VarBinding,
)
from plait.ir.module import IRModule
from plait.ir.node_fields import def_fields, node_fields
from plait.ir.types import TensorType
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass

from .build import add_c_source

MR, NR = 6, 16
"""The register tile of ``plait_gemm.c`` (rows of A per panel, columns of B per panel)."""

OPS = ("conv2d", "linear", "matmul")
"""The ops :class:`DispatchGemm` rewrites (float32 only)."""


def _native_file(name: str) -> str:
    return resources.files("plait.target.c.native").joinpath(name).read_text()


def native_header_text() -> str:
    """The text of ``plait_gemm.h`` (the library's interface)."""
    return _native_file("plait_gemm.h")


def native_source_text() -> str:
    """The library ``plait_gemm.c`` as one self-contained C file (its headers inlined)."""
    from plait.codegen.c.emit import EXP_F32, threads_header_text

    return (_native_file("plait_gemm.c")
            .replace('#include "plait_gemm.h"\n', native_header_text())
            .replace('#include "plait_threads.h"\n', threads_header_text())
            .replace('#include "plait_exp_f32.h"\n', EXP_F32 + "\n"))


NATIVE_SOURCE_NAME = "plait_gemm.c"
"""The name of the library source in a module's ``c_sources``; it is the same text for
every model, so its compiled object is cached once per machine."""


# ------------------------------------------------------------------ packing


def pack_a(w: np.ndarray) -> np.ndarray:
    """The ``M x K`` matrix ``w`` in panels of :data:`MR` rows, ``[ceil(M/MR)][K][MR]``,
    zero-padded (what ``PLAIT_A_PACKED`` reads)."""
    m, k = w.shape
    mp = -(-m // MR) * MR
    full = np.zeros((mp, k), np.float32)
    full[:m] = w
    return np.ascontiguousarray(full.reshape(mp // MR, MR, k).transpose(0, 2, 1))


def pack_b(b: np.ndarray) -> np.ndarray:
    """The ``K x N`` matrix ``b`` in panels of :data:`NR` columns, ``[ceil(N/NR)][K][NR]``,
    zero-padded (what ``PLAIT_B_PACKED`` reads)."""
    k, n = b.shape
    np_ = -(-n // NR) * NR
    full = np.zeros((k, np_), np.float32)
    full[:, :n] = b
    return np.ascontiguousarray(full.reshape(k, np_ // NR, NR).transpose(1, 0, 2))


WINOGRAD_G = {
    2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
    4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
}
"""The weight transforms of Winograd F(2x2, 3x3) and F(4x4, 3x3): U = G g G^T."""

WINOGRAD_FUNCTIONS = {2: "plait_conv2d_winograd", 4: "plait_conv2d_winograd4"}


def winograd_weights(w: np.ndarray, m: int = 4) -> np.ndarray:
    """The ``O x C x 3 x 3`` weights transformed for F(m x m, 3x3) (``G g G^T``, in
    float64, rounded once) and packed per transform element: ``[(m+2)^2][ceil(O/MR)][C]
    [MR]`` (what ``plait_conv2d_winograd`` / ``plait_conv2d_winograd4`` read)."""
    g = WINOGRAD_G[m]
    o, c = w.shape[:2]
    a = m + 2
    u = np.einsum("ij,ocjk,lk->ocil", g, w.astype(np.float64), g)
    u = u.reshape(o, c, a * a).transpose(2, 0, 1).astype(np.float32)
    return np.ascontiguousarray(np.stack([pack_a(u[xi]) for xi in range(a * a)]))


def winograd_applies(desc: dict[str, int]) -> bool:
    """Whether a convolution goes through Winograd: 3x3 kernel, stride 1,
    dilation 1, at least 16 input and output channels (below that the transforms cost
    more than they save) and at most 512 input channels (one register-tile pass)."""
    return (desc["KH"] == desc["KW"] == 3 and desc["SH"] == desc["SW"] == 1
            and desc["DH"] == desc["DW"] == 1 and 16 <= desc["C"] <= 512 and desc["O"] >= 16)


# ------------------------------------------------------------ call plans


def _static_shape(e: Expr) -> tuple[int, ...] | None:
    ty = e.ty
    if not isinstance(ty, TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    if not all(isinstance(d, int) for d in ty.shape):
        return None
    return tuple(int(d) for d in ty.shape)


@dataclass
class _Plan:
    """A product being fused: the anchor call, its C description and the epilogue."""

    kind: str                      # "conv2d" | "gemm"
    inputs: list[Expr]             # activations and packed weights, in C order
    params: list[tuple[tuple[int, ...], str]]
    desc: dict[str, int]
    out_shape: tuple[int, ...]
    bias_axis: str                 # "row" (conv: per output channel) | "col" (per column)
    bias_len: int
    bias: Expr | None = None
    res: Expr | None = None
    relu: bool = False
    viewed: bool = False          # the output was reshaped (no more bias: its axis moved)
    pool: bool = False            # conv2d followed by a 2x2/2 max pooling
    winograd: int = 0             # 0: direct; 2 or 4: Winograd F(m x m, 3x3)
    members: list[int] = field(default_factory=list)

    def can_take_bias(self) -> bool:
        return (self.bias is None and self.res is None and not self.relu and not self.viewed
                and not self.pool)

    def symbol_and_code(self) -> tuple[str, str, CFunction]:
        args = [f"const float* in{i}" for i in range(len(self.inputs))]
        if self.bias is not None:
            args.append("const float* bias")
        if self.res is not None:
            args.append("const float* res")
        args.append("float* out")
        bias = "bias" if self.bias is not None else "NULL"
        res = "res" if self.res is not None else "NULL"
        d = self.desc
        if self.kind == "conv2d":
            fields = ", ".join(str(d[k]) for k in (
                "N", "C", "H", "W", "O", "KH", "KW", "SH", "SW", "DH", "DW",
                "PT", "PL", "PB", "PR", "OH", "OW"))
            fn = WINOGRAD_FUNCTIONS.get(self.winograd, "plait_conv2d")
            call = (f"plait_conv2d_pool(&d, in0, in1, {bias}, {int(self.relu)}, out)"
                    if self.pool else
                    f"{fn}(&d, in0, in1, {bias}, {res}, {int(self.relu)}, out)")
            body = (f"    static const plait_conv2d_desc d = {{{fields}}};\n"
                    f"    return {call};\n")
        else:
            bias_kind = "PLAIT_BIAS_COL" if self.bias is not None else "PLAIT_BIAS_NONE"
            body = (
                "    plait_gemm_problem p;\n    memset(&p, 0, sizeof p);\n"
                f"    p.M = {d['M']}; p.N = {d['N']}; p.K = {d['K']};\n"
                f"    p.a_kind = PLAIT_A_STRIDED; p.a = in0; p.lda_r = {d['lda_r']}; "
                f"p.lda_c = {d['lda_c']};\n"
                f"    p.b_kind = {d['b_kind']}; p.b = in1; p.ldb_r = {d['ldb_r']}; "
                f"p.ldb_c = {d['ldb_c']};\n"
                f"    p.c = out; p.ldc = {d['N']};\n"
                f"    p.bias_kind = {bias_kind}; p.bias = {bias}; p.res = {res}; "
                f"p.relu = {int(self.relu)};\n"
                f"    p.batch = {d['batch']}; p.a_bs = {d['a_bs']}; p.b_bs = {d['b_bs']}; "
                f"p.c_bs = {d['c_bs']};\n"
                "    return plait_gemm(&p);\n"
            )
        params = list(self.params)
        if self.bias is not None:
            params.append(((self.bias_len,), "float32"))
        if self.res is not None:
            params.append((self.out_shape, "float32"))
        params.append((self.out_shape, "float32"))
        key = repr((self.kind, self.winograd, self.pool, sorted(d.items()), params,
                    self.bias is not None, self.res is not None, self.relu))
        name = f"plait_{self.kind}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        code = f"int {name}({', '.join(args)}) {{\n{body}}}\n"
        return name, code, CFunction(name, tuple(params), 1, name, "int")

    def call_args(self) -> list[Expr]:
        out = list(self.inputs)
        if self.bias is not None:
            out.append(self.bias)
        if self.res is not None:
            out.append(self.res)
        return out


def _const_data(e: Expr) -> np.ndarray | None:
    return e.data if isinstance(e, Constant) else None


def _plan_conv2d(call: Call, winograd: int) -> _Plan | None:
    x, w = call.args
    xs, ws, os_ = _static_shape(x), _static_shape(w), _static_shape(call)
    wd = _const_data(w)
    a = call.attrs
    if xs is None or ws is None or os_ is None or wd is None or len(xs) != 4:
        return None
    if a["groups"] != 1 or a["data_layout"] != "NCHW" or a["kernel_layout"] != "OIHW":
        return None
    from plait.runtime.numpy_ops import _expand, _expand_padding

    sh, sw = _expand(a["strides"], 2)
    dh, dw = _expand(a["dilation"], 2)
    pt, pl, pb, pr = _expand_padding(a["padding"], 2)
    n, c, h, wdt = xs
    o, cw, kh, kw = ws
    if cw != c or 0 in xs or 0 in os_:
        return None
    desc = dict(N=n, C=c, H=h, W=wdt, O=o, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                PT=pt, PL=pl, PB=pb, PR=pr, OH=os_[2], OW=os_[3])
    wino = winograd if winograd and winograd_applies(desc) else 0
    if wino:
        packed = Constant(winograd_weights(np.asarray(wd, np.float32), wino))
    else:
        packed = Constant(pack_a(np.asarray(wd, np.float32).reshape(o, c * kh * kw)))
    plan = _Plan("conv2d", [x, packed], [(xs, "float32"), (packed.data.shape, "float32")],
                 desc, os_, "row", o)
    plan.winograd = wino
    return plan


def _plan_gemm(call: Call, op: str) -> _Plan | None:
    """linear(x, w[, b]) or matmul(a, b) as a (batched) product with a strided A."""
    os_ = _static_shape(call)
    shapes = [_static_shape(a) for a in call.args]
    if os_ is None or any(s is None for s in shapes) or 0 in os_:
        return None
    x = call.args[0]
    xs = shapes[0]
    assert xs is not None
    if len(xs) < 2 or 0 in xs:
        return None
    if op == "linear":
        w = call.args[1]
        ws = shapes[1]
        assert ws is not None
        if len(ws) != 2:
            return None
        n, k = ws
        m = int(np.prod(xs[:-1]))
        batch, a_bs, b_bs, c_bs = 1, 0, 0, 0
        wd = _const_data(w)
        if wd is not None:
            bmat: Expr = Constant(pack_b(np.asarray(wd, np.float32).T))
            b_kind, ldb_r, ldb_c = "PLAIT_B_PACKED", 0, 0
        else:
            bmat, b_kind, ldb_r, ldb_c = w, "PLAIT_B_STRIDED", 1, k
        bias = call.args[2] if len(call.args) == 3 else None
        if bias is not None and shapes[2] != (n,):
            return None
    else:
        b = call.args[1]
        bs = shapes[1]
        assert bs is not None
        if len(bs) < 2:
            return None
        k, n = bs[-2:]
        bias = None
        bd = _const_data(b)
        if len(bs) == 2:
            m = int(np.prod(xs[:-1]))
            batch, a_bs, b_bs, c_bs = 1, 0, 0, 0
            if bd is not None:
                bmat, b_kind, ldb_r, ldb_c = (Constant(pack_b(np.asarray(bd, np.float32))),
                                              "PLAIT_B_PACKED", 0, 0)
            else:
                bmat, b_kind, ldb_r, ldb_c = b, "PLAIT_B_STRIDED", n, 1
        else:
            # batched: identical batch dimensions, or A of rank 2 broadcast over them
            if xs[:-2] != bs[:-2] and len(xs) != 2:
                return None
            m = xs[-2]
            batch = int(np.prod(bs[:-2]))
            a_bs = m * xs[-1] if len(xs) > 2 else 0
            b_bs, c_bs = k * n, m * n
            bmat, b_kind, ldb_r, ldb_c = b, "PLAIT_B_STRIDED", n, 1
            if os_ != tuple(bs[:-2]) + (m, n):
                return None
    if xs[-1] != k:
        return None
    desc = dict(M=m, N=n, K=k, lda_r=k, lda_c=1, b_kind=b_kind, ldb_r=ldb_r, ldb_c=ldb_c,
                batch=batch, a_bs=a_bs, b_bs=b_bs, c_bs=c_bs)
    bshape = _static_shape(bmat)
    assert bshape is not None
    plan = _Plan("gemm", [x, bmat], [(xs, "float32"), (bshape, "float32")], desc,
                 os_, "col", n)
    plan.bias = bias
    return plan


def _plan(call: Call, ops: Sequence[str], winograd: int) -> _Plan | None:
    op = call.op
    if not isinstance(op, Op) or op.name not in ops:
        return None
    if op.name == "conv2d":
        return _plan_conv2d(call, winograd)
    return _plan_gemm(call, op.name)


POOL_MAX_K = 384
"""The longest reduction (C * KH * KW) a convolution fused with pooling may have: one
block of ``plait_gemm.c`` (PLAIT_KC), since pooled outputs cannot hold partial sums."""


def _can_pool(plan: _Plan, call: Call) -> bool:
    """Whether the 2x2, stride-2 max pooling ``call`` of the plan's result can be fused
    into its convolution (see ``plait_conv2d_pool``)."""
    from plait.runtime.numpy_ops import _expand, _expand_padding

    d = plan.desc
    if plan.kind != "conv2d" or plan.winograd or plan.res is not None or plan.pool:
        return False
    if plan.viewed or d["C"] * d["KH"] * d["KW"] > POOL_MAX_K:
        return False
    if d["OH"] % 2 or d["OW"] % 8:
        return False
    a = call.attrs
    return (tuple(_expand(a["pool_size"], 2)) == (2, 2)
            and tuple(_expand(a["strides"], 2)) == (2, 2)
            and tuple(_expand(a["dilation"], 2)) == (1, 1)
            and not any(_expand_padding(a["padding"], 2))
            and a.get("layout", "NCHW") == "NCHW" and not a.get("ceil_mode"))


def _bias_of(plan: _Plan, other: Expr) -> Expr | None:
    """``other`` as the plan's bias vector (a constant broadcasting along the bias axis
    only), or None."""
    data = _const_data(other)
    if data is None or data.dtype != np.float32:
        return None
    shape = data.shape
    rank = len(plan.out_shape)
    if len(shape) > rank:
        return None
    full = (1,) * (rank - len(shape)) + tuple(shape)
    axis = 1 if plan.bias_axis == "row" else rank - 1
    if any(d != 1 for i, d in enumerate(full) if i != axis):
        return None
    if full[axis] not in (1, plan.bias_len):
        return None
    vec = np.broadcast_to(data.reshape(-1), (plan.bias_len,))
    return Constant(np.ascontiguousarray(vec, np.float32))


# -------------------------------------------------------------- the rewrite


def _use_counts(func: Function) -> dict[Var, int]:
    """How many times each variable is used in ``func``'s body (every occurrence
    counts: ``add(y, y)`` uses ``y`` twice)."""
    counts: dict[Var, int] = {}
    stack: list[Any] = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, Var):
            counts[node] = counts.get(node, 0) + 1
        elif isinstance(node, tuple):
            stack.extend(node)
        elif isinstance(node, Node) and not isinstance(node, Constant | Op | ExternFunc):
            for name in node_fields(type(node)):
                if name not in def_fields(type(node)):
                    child = getattr(node, name)
                    if isinstance(child, Node | tuple):
                        stack.append(child)
    return counts


def _is_op(value: Expr, name: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == name


VIEW_OPS = ("reshape", "expand_dims", "squeeze", "flatten", "permute_dims")


def _view_source(value: Expr) -> Expr | None:
    """The input of ``value`` when ``value`` only reinterprets its shape — a reshape (or
    expand_dims, squeeze, flatten) of static shape, or a permute_dims that moves only
    axes of size 1 — so the two hold the same elements in the same order; else None."""
    if not isinstance(value, Call) or not isinstance(value.op, Op):
        return None
    name = value.op.name
    if name not in VIEW_OPS or len(value.args) != 1:
        return None
    src = value.args[0]
    ss, vs = _static_shape(src), _static_shape(value)
    if ss is None or vs is None or int(np.prod(ss)) != int(np.prod(vs)):
        return None
    if name == "permute_dims":
        axes = value.attrs.get("axes")
        order = list(range(len(ss)))[::-1] if axes is None else [int(a) % len(ss) for a in axes]
        moved = [a for a in order if ss[a] != 1]
        if moved != sorted(moved):
            return None
    return src


def _rewrite_block(block: BindingBlock, counts: dict[Var, int],
                   wrappers: dict[str, tuple[str, CFunction]],
                   ops: Sequence[str], winograd: int) -> BindingBlock:
    bindings = block.bindings
    plans: dict[int, _Plan] = {}      # index of the last member -> plan
    tail: dict[Var, _Plan] = {}       # current result var of an open plan -> plan
    views: dict[Var, tuple[int, Expr]] = {}   # var bound to a view -> (index, its source)
    dead: set[int] = set()            # views no one reads any more

    def extend(plan: _Plan, old: Var, i: int, var: Var) -> None:
        """Binding ``i`` (of ``var``) becomes the plan's last member, replacing ``old``."""
        del tail[old]
        del plans[plan.members[-1]]
        plan.members.append(i)
        plans[i] = plan
        tail[var] = plan

    for i, b in enumerate(bindings):
        if not isinstance(b, VarBinding) or not isinstance(b.value, Call):
            continue
        value = b.value
        src_view = _view_source(value)
        if src_view is not None:
            views[b.var] = (i, src_view)
            src = src_view if isinstance(src_view, Var) and src_view in tail else None
            if src is not None and counts.get(src, 0) == 1:
                # a view of a product's result: the product writes it directly
                plan = tail[src]
                plan.out_shape = _static_shape(value) or plan.out_shape
                plan.viewed = True
                extend(plan, src, i, b.var)
                del views[b.var]      # bound by the product now, not a view to read through
            continue
        if _is_op(value, "max_pool2d"):
            src = value.args[0]
            if isinstance(src, Var) and src in tail and counts.get(src, 0) == 1:
                plan = tail[src]
                if _can_pool(plan, value):
                    plan.pool = True
                    plan.out_shape = _static_shape(value) or plan.out_shape
                    extend(plan, src, i, b.var)
                    continue
        if _is_op(value, "relu") or _is_op(value, "add"):
            src = [a for a in value.args if isinstance(a, Var) and a in tail]
            if src and counts.get(src[0], 0) == 1 and value.ty == src[0].ty:
                plan = tail[src[0]]
                took = False
                if _is_op(value, "relu") and not plan.relu:
                    plan.relu = took = True
                elif _is_op(value, "add") and len(value.args) == 2:
                    other = value.args[1] if value.args[0] is src[0] else value.args[0]
                    bias = _bias_of(plan, other) if plan.can_take_bias() else None
                    if bias is not None:
                        plan.bias = bias
                        took = True
                    elif (plan.res is None and not plan.relu and not plan.pool
                          and other.ty == value.ty and not isinstance(other, Constant)):
                        plan.res = other
                        took = True
                if took:
                    extend(plan, src[0], i, b.var)
                    continue
        plan = _plan(value, ops, winograd)
        if plan is not None:
            x = plan.inputs[0]
            if isinstance(x, Var) and x in views:
                # the product reads the view's source: the same elements, no copy
                j, source = views[x]
                plan.inputs[0] = source
                plan.params[0] = (_static_shape(source) or plan.params[0][0], "float32")
                counts[x] = counts.get(x, 0) - 1
                if counts[x] == 0:
                    dead.add(j)
            plan.members.append(i)
            plans[i] = plan
            tail[b.var] = plan
    if not plans:
        return block
    drop = {m for p in plans.values() for m in p.members[:-1]} | dead
    bb = BlockBuilder()
    out = []
    for i, b in enumerate(bindings):
        if i in drop:
            continue
        plan = plans.get(i)
        if plan is None:
            out.append(b)
            continue
        name, code, cfn = plan.symbol_and_code()
        wrappers.setdefault(name, (code, cfn))
        call = bb.normalize(make_call("call_extern", ExternFunc(name), Tuple(plan.call_args()),
                                      out=b.var.ty, span=b.value.span))
        out.append(VarBinding(b.var, call))
    return type(block)(tuple(out))


def _rewrite_seq(seq: SeqExpr, counts: dict[Var, int],
                 wrappers: dict[str, tuple[str, CFunction]], ops: Sequence[str],
                 winograd: int) -> SeqExpr:
    blocks = tuple(_rewrite_block(blk, counts, wrappers, ops, winograd) for blk in seq.blocks)
    if all(a is b for a, b in zip(blocks, seq.blocks)):
        return seq
    return SeqExpr(blocks, seq.body, ty=seq.ty, span=seq.span)


def _winograd_m(winograd: int | bool) -> int:
    """The Winograd variant asked for: False/0 none, 2 F(2x2, 3x3), True/4 F(4x4, 3x3)."""
    if winograd is True:
        return 4
    if winograd is False or winograd == 0:
        return 0
    if winograd in (2, 4):
        return int(winograd)
    raise ValueError(f"winograd must be False, True, 2 or 4 (the output tile of F(m x m, "
                     f"3x3)), got {winograd!r}")


def functions_to_rewrite(mod: IRModule, skip: Any = None) -> list[tuple[str, Function]]:
    """The graph functions of ``mod`` (name, function) with a block body and for which
    ``skip`` is false (default: all but those of external codegens)."""
    if skip is None:
        def skip(f: Function) -> bool:
            return bool(f.attrs.get("compiler"))
    return [(name, f) for name, f in mod.graph_functions()
            if not skip(f) and isinstance(f.body, SeqExpr)]


def dispatch_gemm(mod: IRModule, skip: Any = None, ops: Sequence[str] = OPS,
                  winograd: int | bool = 4) -> IRModule:
    """``mod`` with float32 conv2d/linear/matmul (and their epilogues) rewritten into
    calls of ``plait_gemm.c`` (see the module docstring); functions for which ``skip``
    is true (default: those of external codegens) are left alone."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        assert isinstance(f.body, SeqExpr)
        # bindings inside If branches are left alone; the top-level blocks are rewritten
        body = _rewrite_seq(f.body, _use_counts(f), wrappers, ops, _winograd_m(winograd))
        if body is not f.body:
            funcs[name] = Function(f.params, body, f.ret_ty, f.pure, attrs=f.attrs, span=f.span)
    return with_native_calls(mod, funcs, wrappers, "plait_gemm_calls")


def with_native_calls(mod: IRModule, funcs: dict[str, Function],
                      wrappers: dict[str, tuple[str, CFunction]], prefix: str) -> IRModule:
    """``mod`` with the rewritten functions ``funcs``, the library source
    (``plait_gemm.c``) and the call wrappers (``{name: (C code, CFunction)}``, one file
    ``<prefix>_<digest>.c``) recorded; ``mod`` itself when nothing was rewritten."""
    if not funcs:
        return mod
    names = sorted(wrappers)
    code = native_header_text() + "\n" + "\n".join(wrappers[n][0] for n in names)
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    calls = CSource(code, tuple(wrappers[n][1] for n in names), f"{prefix}_{digest}.c")
    out = add_c_source(mod.with_functions(funcs), CSource(native_source_text(), (),
                                                          NATIVE_SOURCE_NAME))
    return add_c_source(out, calls)


@module_pass(name="c.DispatchGemm", phases=("optimization",))
class DispatchGemm:
    """Send float32 conv2d/linear/matmul, with bias, residual and relu epilogues, to
    plait_gemm.c (weights packed at compile time)."""

    def __init__(self, ops: Sequence[str] = OPS, *, winograd: int | bool = 4,
                 codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        self.winograd = _winograd_m(winograd)
        unknown = [o for o in ops if o not in OPS]
        if unknown:
            raise ValueError(f"c.DispatchGemm: cannot dispatch {unknown}; it takes "
                             f"{', '.join(OPS)}")
        self.ops = tuple(ops)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import enabled_codegens

        enabled = enabled_codegens(self, ctx)  # type: ignore[arg-type]
        return dispatch_gemm(mod, skip=lambda f: bool(f.attrs.get("compiler"))
                             and f.attrs.get("compiler") not in enabled, ops=self.ops,
                             winograd=self.winograd)
