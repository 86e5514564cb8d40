"""The ``c`` target's own matrix product and convolution, with fused epilogues.

:class:`DispatchGemm` (``c.DispatchGemm``, the first pass of the ``c`` target's dispatch
hook) rewrites float32 ``conv2d``, ``linear`` and ``matmul`` into calls of functions of
``plait_gemm.c`` (a blocked matrix product after BLIS with a 6x16 register tile),
``plait_conv.c`` and ``plait_winograd.c`` (kernel families compiled for every
instruction set of the machine, one chosen at load time: :mod:`plait.target.c.kernels`; threads from
the library's pool), compiled into the model's native library next to the generated
kernels.  On the way it

* **packs constant weights at compile time** into the layout the micro-kernel streams
  (conv2d: the ``O x (C*KH*KW)`` weight matrix in panels of 6 rows, or on small images,
  where the output pixels are the tile's rows (:func:`pixel_rows_applies`), its
  transpose in panels of 16 columns; linear/matmul: the ``K x N`` matrix in panels of 16
  columns), so a call packs only its activations;
* **fuses the epilogue**: a following ``add`` of a per-channel constant (the bias), an
  ``add`` of a tensor of the output's shape (a residual), a ``relu`` and last an
  activation — ``clip`` (ReLU6; clips in a row narrow one interval), ``silu`` or
  ``gelu`` of either form (as exported, ``x * sigmoid(x)``, ``x * (1 + erf(x / sqrt 2))
  * 0.5`` and GPT-2's ``0.5 x (1 + tanh(...))`` are made the single ops by the
  target-independent ``RecognizeActivations``, :mod:`plait.transform.activation_rules`,
  which the ``c`` target runs first),
  applied to each tile as it is stored (``plait_act_tile``) — are folded into the call
  when each intermediate result has no other use: one pass over the output instead of
  several;
* computes a convolution as an implicit im2col product: patches are packed straight
  from the zero-padded input, block by block, never materialized whole.

The families' files are the same for every model (compiled once per machine: the C
compiler driver caches each source's object), and each call of a shape gets a small
wrapper with the shape as constants (``plait_gemm_calls_<hash>.c``); both are recorded
in the module's ``c_sources``, so the module stays self-contained.

The shape it takes is a rule of the pattern language (:func:`product_pattern`: a
product followed by any number of epilogue steps, each reading the previous result
only); its rewrite plans the call step by step (:func:`extend_epilogue`) and declines a chain
the call cannot do, so the longest chain it can do is taken.

What it does not take (float64, grouped convolutions, non-NCHW layouts, non-constant
convolution weights, matmuls whose batch dimensions broadcast both ways, 1-D
operands) stays for the next dispatch pass (``c.DispatchLibrary``: BLAS through numpy)
or for legalization.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import (
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    Op,
    Tuple,
    Var,
)
from plait.ir.module import IRModule
from plait.ir.symbolic import Dim, product
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, Pattern, is_op, match_at, wildcard
from plait.transform.pattern_rewrite import Rule, functions_to_rewrite, rewrite_function

from ..dims import Prod
from ..kernels.conv import POOL_MAX_K, conv2d_call
from ..kernels.gemm import (
    ACT_CLIP,
    ACT_GELU,
    ACT_GELU_TANH,
    ACT_NONE,
    ACT_SILU,
    MR,
    NR,
    Epilogue,
    gemm_call,
    packed_a_constant,
    packed_b_constant,
)
from ..kernels.registry import record_calls
from ..kernels.winograd import winograd_constant
from ..kernels.wrapper import NativeCall, emit_call
from ..shapes import float_shape, is_static_shape
from ..tuning import Chooser, call_key
from ..tuning.space import Choice, SearchSpace, register_space, thread_values
from .common import fused_span, transposed_weight

OPS = ("conv2d", "linear", "matmul")
"""The ops :class:`DispatchGemm` rewrites (float32 only)."""


# ------------------------------------------------------------------ packing


def winograd_applies(desc: dict[str, int]) -> bool:
    """Whether a convolution can go through Winograd: 3x3 kernel, stride 1,
    dilation 1, at least 16 input and output channels (below that the transforms cost
    more than they save) and at most 512 input channels (one register-tile pass)."""
    return (desc["KH"] == desc["KW"] == 3 and desc["SH"] == desc["SW"] == 1
            and desc["DH"] == desc["DW"] == 1 and 16 <= desc["C"] <= 512 and desc["O"] >= 16)


WINOGRAD_COST = {4: (0.9, 0.3), 2: (0.75, 0.3)}
"""Time of Winograd F(m x m, 3x3) relative to the direct product, ``a * r + b``, where
``r`` is the ratio of multiply-adds (products of the padded tiles over the direct
product's, :func:`winograd_cost`).  ``b`` is what the input and output transforms cost,
``a`` the products' lower efficiency on few tiles.  Fitted to the minima of ResNet's 3x3
layers, each alone on one thread of an AVX-512 CPU: on other CPUs the choice it makes
is an estimate, which ``winograd=2``, ``4`` or ``False`` overrides."""


def winograd_cost(desc: dict[str, int], m: int) -> float:
    """The estimated time of F(m x m, 3x3) on ``desc`` relative to the direct product.
    Tiles are counted as ``plait_winograd.c`` lays them out: ``ceil(OH / m)`` rows of
    ``ceil(OW / m)`` tiles padded to a multiple of 8, each of ``(m + 2)^2`` products per
    channel pair, against 9 per output for the direct product."""
    oh, ow = desc["OH"], desc["OW"]
    th = -(-oh // m)
    tw = -(-ow // m)
    twp = -(-tw // 8) * 8
    a, b = WINOGRAD_COST[m]
    return a * (m + 2) ** 2 * th * twp / (9 * oh * ow) + b


def winograd_choice(desc: dict[str, int], winograd: int | str) -> int:
    """The Winograd variant a convolution runs: 0 (the direct product), 2 or 4 for
    F(m x m, 3x3).  ``winograd`` 2 or 4 forces that variant wherever Winograd applies;
    ``"auto"`` picks the cheapest by :func:`winograd_cost`: F(4x4) on large images, F(2x2)
    around 14 x 14, the direct product on 7 x 7 (where F(4x4)'s 4 tiles, padded to 16,
    made a 512-channel layer 2-3x slower than the direct product)."""
    if not winograd or not winograd_applies(desc):
        return 0
    if winograd in (2, 4):
        return int(winograd)
    costs = {0: 1.0, 2: winograd_cost(desc, 2), 4: winograd_cost(desc, 4)}
    return min(costs, key=lambda m: (costs[m], m))


def _tile_rows(m: int) -> int:
    """The rows the register tile computes for ``m`` rows: panels of :data:`MR`, a last
    panel of 1-2 or 3-4 rows on the 2- or 4-row tile."""
    return MR * (m // MR) + (0, 2, 2, 4, 4, 6)[m % MR]


def _tile_cols(n: int) -> int:
    """The columns the register tile computes for ``n`` columns: panels of :data:`NR`."""
    return -(-n // NR) * NR


PIXEL_ROWS_MIN_K = 64
"""The shortest reduction (C * KH * KW) computed with the pixels as rows.  Since the
output goes back into NCHW in blocks transposed in registers (plait_conv.c,
unpack_rows_block) the pixels as rows pay on 7 x 7 from short sums on: one thread, 1x1
layers 160 -> 960 183 -> 160 us, 960 -> 160 187 -> 168, 576 -> 160 114 -> 103, 64 ->
384 36.3 -> 35.0, 384 -> 64 equal (the tuner had chosen them too, docs/tuning.md);
with a strided scalar transposition 160 -> 960 was 5% slower that way."""

PIXEL_ROWS_MIN_MACS = 1_000_000
"""The fewest multiply-adds (per image) computed with the pixels as rows: below it the
two extra passes (packing, and the output transposed back) are not paid for (the
measurements of :data:`PIXEL_ROWS_MIN_K`; the threshold was 12 million with the scalar
transposition)."""

PIXEL_ROWS_RATIO = 0.8
"""Pixels as rows when the tile computes at most this share of what the direct product
computes (7 x 7 images: 50 rows against 64 columns, 0.78)."""


def pixel_rows_applies(desc: dict[str, int]) -> bool:
    """Whether a convolution runs as the transposed product (``plait_conv2d_pixel_rows``:
    the output pixels as the tile's rows, the output channels as its columns) rather
    than the direct one (channels as rows, pixels as columns): when the pixels of an
    image fill the 16-column panels badly (7 x 7 = 49 pixels take 64 columns but 50
    rows) and the reduction and the layer are large enough (:data:`PIXEL_ROWS_MIN_K`,
    :data:`PIXEL_ROWS_MIN_MACS`).  On ResNet's 7 x 7 layers it computes a fifth less
    padding, and the layer alone on one thread is 14-18% faster."""
    p, o, k = desc["OH"] * desc["OW"], desc["O"], desc["C"] * desc["KH"] * desc["KW"]
    if k < PIXEL_ROWS_MIN_K or p * o * k < PIXEL_ROWS_MIN_MACS:
        return False
    return _tile_rows(p) * _tile_cols(o) <= PIXEL_ROWS_RATIO * _tile_rows(o) * _tile_cols(p)


# ------------------------------------------------------------ search spaces


CONV2D_ALGORITHMS = ("direct", "pixel_rows", "winograd2", "winograd4")
"""The ways the ``conv`` and ``winograd`` families compute an ungrouped convolution."""

GEMM_MIN_PARALLEL = 1 << 18
"""``PLAIT_GEMM_MIN_PARALLEL`` of ``plait_gemm.c``: smaller products run on one thread."""

GEMM_SPLITS = {"auto": 0, "columns": 1, "rows": 2}
"""The thread splits of ``plait_gemm`` (``plait_gemm_problem.split``, ``PLAIT_SPLIT_*``):
the kernel's rule, column blocks alone, row blocks too."""

KC_MAX = 384
"""``PLAIT_KC``: the longest block of the sum (``plait_tile.h``); the kernel splits a
sum into equal blocks of at most this many values."""

KC_VALUES = (96, 128, 192, 256)
"""The shorter sum blocks a point may take (``plait_gemm_problem.kc``): a block of A and
B then fits a smaller cache, at the price of more loads and stores of the tile."""

MC_VALUES = (24, 48, 192)
"""Row blocks a point may take other than ``PLAIT_MC`` (96; ``plait_gemm_problem.mc``):
how many rows of A one block of B serves before the next."""

NC_VALUES = (64, 128, 256, 512, 1024)
"""Column blocks a point may take instead of the kernel's rule
(``plait_gemm_problem.nc``): the jobs the threads share, and the block of B each packs."""

def _k_block(k: int, cap: int) -> int:
    """The sum's block length with blocks of at most ``cap`` (equal blocks, as
    ``plait_gemm.c`` makes them)."""
    blocks = -(-k // cap)
    return -(-k // blocks)


def block_choices(m: int, n: int, k: int, values: tuple[int, ...],
                  when: tuple[tuple[str, tuple[Any, ...]], ...] = ()) -> tuple[Choice, ...]:
    """The product's ``split`` (:data:`GEMM_SPLITS`, where there are several thread
    counts ``values`` and rows for 2 blocks of 2 panels; free when the threads are not 1)
    and block sizes ``kc``, ``mc``, ``nc`` of an ``m x k`` by ``k x n`` product: 0 (the
    kernel's rule) and the values of :data:`KC_VALUES`, :data:`MC_VALUES`,
    :data:`NC_VALUES` that block this product otherwise than the rule and each other
    (a sum of 300 takes one block either way: no ``kc`` choice).  ``when``: where they
    are free (a convolution's algorithm)."""
    kcs, seen = [0], {_k_block(k, KC_MAX)}
    for v in KC_VALUES:
        if _k_block(k, v) not in seen:
            seen.add(_k_block(k, v))
            kcs.append(v)
    rows = -(-m // MR) * MR
    mcs = [0] + [v for v in MC_VALUES if min(v, rows) != min(96, rows)]
    ncs = [0] + [v for v in NC_VALUES if v < n]
    threaded = tuple(v for v in values if v != 1)
    splits = ("auto", "columns", "rows") if len(values) > 1 and m >= 4 * MR else ("auto",)
    return (Choice("split", splits, "how the threads share the product",
                   when=(*when, ("threads", threaded))),
            Choice("kc", tuple(kcs), "the sum's block (0: the kernel's)", when=when),
            Choice("mc", tuple(mcs), "the rows' block (0: the kernel's)", when=when),
            Choice("nc", tuple(ncs), "the columns' block (0: the kernel's rule)", when=when))


def conv2d_space(desc: dict[str, Any], winograd: int | str,
                 threads: int = 1) -> SearchSpace | None:
    """The search space of an ungrouped float32 convolution of static shape (``desc``:
    the fields of ``plait_conv2d_desc``) under the target's ``winograd`` attribute
    ("auto", 0, 2, 4: a forced variant leaves no choice where Winograd applies, 0 none
    of it) on a machine of ``threads`` threads: ``algorithm``, one of
    :data:`CONV2D_ALGORITHMS`, the default :func:`winograd_choice` then
    :func:`pixel_rows_applies`; ``threads`` (0: all, the default; ``direct`` and
    ``pixel_rows``: Winograd takes all); and for ``direct`` the product's thread split
    and block sizes (:func:`block_choices`: ``split``, ``kc``, ``mc``, ``nc``, each 0 or
    ``auto``, the kernel's rule, by default).  None when the shape is not static (the
    heuristic alone)."""
    if any(type(desc[k]) is not int for k in ("N", "H", "W", "OH", "OW")):
        return None
    applies = bool(winograd) and winograd_applies(desc)
    if applies and winograd in (2, 4):
        algos: tuple[str, ...] = (f"winograd{int(winograd)}",)
    else:
        algos = ("direct", "pixel_rows") + (("winograd2", "winograd4") if applies else ())
    wino = winograd_choice(desc, winograd)
    default = f"winograd{wino}" if wino else "pixel_rows" if pixel_rows_applies(desc) else "direct"
    p, o, k = desc["OH"] * desc["OW"], desc["O"], desc["C"] * desc["KH"] * desc["KW"]
    values = thread_values(threads, desc["N"] * p * o * k >= GEMM_MIN_PARALLEL)
    direct = (("algorithm", ("direct",)),)
    return SearchSpace("conv2d", (
        Choice("algorithm", algos, "how the convolution is computed"),
        Choice("threads", values, "at most this many threads (0: all)",
               when=(("algorithm", ("direct", "pixel_rows")),)),
        *block_choices(o, p, k, values, direct)),
        (("algorithm", default), ("kc", 0), ("mc", 0), ("nc", 0), ("split", "auto"),
         ("threads", 0)))


def gemm_space(desc: dict[str, Any], threads: int) -> SearchSpace | None:
    """The search space of a float32 product of static sizes (``desc``: ``M``, ``N``,
    ``K``, ``batch``...) on a machine of ``threads`` threads: ``threads``, 0 (all, the
    default) or fewer (:func:`~plait.target.c.tuning.space.thread_values`), and the
    thread split and block sizes of :func:`block_choices` (``split``: ``auto``, the
    kernel's rule, the default, or ``columns``, ``rows`` where there are rows for 2
    blocks of 2 panels; ``kc``, ``mc``, ``nc``: 0, the kernel's, by default); None when
    a size is symbolic."""
    if any(type(desc[k]) is not int for k in ("M", "N", "K", "batch")):
        return None
    work = desc["M"] * desc["N"] * max(desc["K"], 1) * desc["batch"]
    values = thread_values(threads, work >= GEMM_MIN_PARALLEL)
    return SearchSpace("gemm", (
        Choice("threads", values, "at most this many threads (0: all)"),
        *block_choices(desc["M"], desc["N"], desc["K"], values)),
        (("kc", 0), ("mc", 0), ("nc", 0), ("split", "auto"), ("threads", 0)))


register_space("conv2d", conv2d_space)
register_space("gemm", gemm_space)


# ------------------------------------------------------------ call plans


@dataclass
class ProductPlan:
    """A product being fused: the anchor call, its C description and the epilogue."""

    kind: str                      # "conv2d" | "gemm"
    inputs: list[Expr]             # activations and packed weights, in C order
    params: list[tuple[tuple[Dim, ...], str]]
    desc: dict[str, Any]           # the family's fields: ints, Dims (symbolic shapes), flags
    out_shape: tuple[Dim, ...]
    bias_axis: str                 # "row" (conv: per output channel) | "col" (per column)
    bias_len: int
    bias: Expr | None = None
    res: Expr | None = None
    res_shape: tuple[Dim, ...] | None = None   # the residual's own shape (a view may follow)
    relu: bool = False
    viewed: bool = False          # the output was reshaped (no more bias: its axis moved)
    pool: bool = False            # conv2d followed by a 2x2/2 max pooling
    act: int = ACT_NONE           # then ACT_CLIP to [act_lo, act_hi], ACT_SILU, ACT_GELU(_TANH)
    act_lo: float = -math.inf
    act_hi: float = math.inf
    winograd: int = 0             # 0: direct; 2 or 4: Winograd F(m x m, 3x3)
    pixel_rows: bool = False      # conv2d as the transposed product (pixel_rows_applies)
    max_threads: int = 0          # gemm: at most this many threads (0: all; a tuned point)
    split: int = 0                # gemm: the thread split (GEMM_SPLITS; 0: the kernel's rule)
    blocks: dict[str, int] = field(default_factory=dict)   # gemm: a tuned kc, mc, nc
    members: list[int] = field(default_factory=list)
    tuning: dict[str, Any] = field(default_factory=dict)   # the point and its origin

    def can_take_bias(self) -> bool:
        return (self.bias is None and self.res is None and not self.relu and not self.viewed
                and not self.pool and not self.act)

    def epilogue(self) -> Epilogue:
        """The epilogue the native call applies."""
        return Epilogue(
            bias=(self.bias_len,) if self.bias is not None else None,
            res=(self.res_shape or self.out_shape) if self.res is not None else None,
            relu=self.relu, act=self.act, act_lo=self.act_lo, act_hi=self.act_hi)

    def native_call(self) -> NativeCall:
        """The call of the family's entry point (symbolic sizes become size arguments of
        its wrapper, the descriptor's fields expressions over them)."""
        shapes = [shape for shape, _ in self.params]
        if self.kind == "conv2d":
            variant = ("pool" if self.pool else "pixel_rows" if self.pixel_rows
                       else f"winograd{self.winograd}" if self.winograd else "direct")
            return conv2d_call(shapes[0], shapes[1], self.out_shape, self.desc, variant,
                               self.epilogue())
        return gemm_call(shapes[0], shapes[1], self.out_shape, epilogue=self.epilogue(),
                         max_threads=self.max_threads, split=self.split, **self.blocks,
                         **self.desc)

    def symbol_and_code(self) -> tuple[str, str, CFunction]:
        """The wrapper's symbol, its C text and its :class:`CFunction`;
        :class:`~plait.codegen.c.sizes.UnboundSize` when a field names a size no buffer
        binds."""
        return emit_call(self.native_call())

    def call_args(self) -> list[Expr]:
        out = list(self.inputs)
        if self.bias is not None:
            out.append(self.bias)
        if self.res is not None:
            out.append(self.res)
        return out


def _const_data(e: Expr) -> np.ndarray | None:
    return e.data if isinstance(e, Constant) else None


def tuned_fields(point: dict[str, Any]) -> dict[str, int]:
    """The kernel fields a point of :func:`conv2d_space` or :func:`gemm_space` sets
    (``max_threads``, ``split``, ``kc``, ``mc``, ``nc`` of ``plait_gemm_problem`` and
    ``plait_conv2d_desc``), those that are not 0 (the rules') only: the default point
    adds none, so its call is the heuristic's byte for byte."""
    out = {"max_threads": int(point.get("threads", 0)),
           "split": GEMM_SPLITS[str(point.get("split", "auto"))],
           **{k: int(point.get(k, 0)) for k in ("kc", "mc", "nc")}}
    return {k: v for k, v in out.items() if v}


def _plan_conv2d(call: Call, winograd: int | str, chooser: Chooser) -> ProductPlan | None:
    x, w = call.args
    xs, ws, os_ = float_shape(x), float_shape(w), float_shape(call)
    wd = _const_data(w)
    a = call.attrs
    if xs is None or ws is None or os_ is None or wd is None or len(xs) != 4:
        return None
    if not (is_static_shape((xs[1], os_[1])) and is_static_shape(ws)):
        return None   # the batch and the image may be symbolic (size arguments)
    if a["groups"] != 1 or a["data_layout"] != "NCHW" or a["kernel_layout"] != "OIHW":
        return None
    from plait.runtime.window import expand_ints, expand_padding

    sh, sw = expand_ints(a["strides"], 2)
    dh, dw = expand_ints(a["dilation"], 2)
    pt, pl, pb, pr = expand_padding(a["padding"], 2)
    n, c, h, wdt = xs
    o, cw, kh, kw = ws
    if cw != c or 0 in xs or 0 in os_:
        return None
    desc: dict[str, Any] = dict(N=n, C=c, H=h, W=wdt, O=o, KH=kh, KW=kw, SH=sh, SW=sw,
                                DH=dh, DW=dw, PT=pt, PL=pl, PB=pb, PR=pr, OH=os_[2], OW=os_[3])
    tuning: dict[str, Any] = {}
    if is_static_shape(xs[2:] + os_[2:]):
        key = call_key("conv2d", desc)
        point, tuning = chooser.choose(key, conv2d_space(desc, winograd, chooser.threads))
        if point is None:   # a symbolic batch: no space, the heuristic
            wino = winograd_choice(desc, winograd)
            rows = not wino and pixel_rows_applies(desc)
        else:
            algorithm = str(point["algorithm"])
            wino = int(algorithm[-1]) if algorithm.startswith("winograd") else 0
            rows = algorithm == "pixel_rows"
            desc = {**desc, **tuned_fields(point)}
    else:   # an image size known at run time: Winograd only when asked for by name
        wino = int(winograd) if winograd in (2, 4) and winograd_applies(desc) else 0
        rows = False
    if wino:
        packed = winograd_constant(wd, wino)
    elif rows:   # W^T in 16-column panels, as linear's weights
        packed = packed_b_constant(wd, transposed=True)
    else:
        packed = packed_a_constant(wd)
    plan = ProductPlan("conv2d", [x, packed], [(xs, "float32"), (packed.ty.shape, "float32")],
                 desc, os_, "row", o)
    plan.winograd = wino
    plan.pixel_rows = rows
    plan.tuning = tuning
    return plan


def _plan_gemm(call: Call, op: str, chooser: Chooser) -> ProductPlan | None:
    """linear(x, w[, b]) or matmul(a, b) as a (batched) product with a strided A."""
    os_ = float_shape(call)
    shapes = [float_shape(a) for a in call.args]
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
        m = Prod.of(*xs[:-1])
        batch, a_bs, b_bs, c_bs = 1, 0, 0, 0
        wd = _const_data(w)
        if wd is not None:
            bmat: Expr = packed_b_constant(wd, transposed=True)
            b_packed, ldb_r, ldb_c = True, 0, 0
        else:
            bmat, b_packed, ldb_r, ldb_c = w, False, 1, k
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
            m = Prod.of(*xs[:-1])
            batch, a_bs, b_bs, c_bs = 1, 0, 0, 0
            if bd is not None:
                bmat, b_packed, ldb_r, ldb_c = packed_b_constant(bd), True, 0, 0
            else:
                bmat, b_packed, ldb_r, ldb_c = b, False, n, 1
        else:
            # batched: identical batch dimensions, or A of rank 2 broadcast over them
            if xs[:-2] != bs[:-2] and len(xs) != 2:
                return None
            m = xs[-2]
            batch = Prod.of(*bs[:-2])
            a_bs = Prod.of(m, xs[-1]) if len(xs) > 2 else 0
            b_bs, c_bs = Prod.of(k, n), Prod.of(m, n)
            bmat, b_packed, ldb_r, ldb_c = b, False, n, 1
            if os_ != tuple(bs[:-2]) + (m, n):
                return None
    if xs[-1] != k:
        return None
    desc = dict(M=m, N=n, K=k, lda_r=k, lda_c=1, b_packed=b_packed, ldb_r=ldb_r, ldb_c=ldb_c,
                batch=batch, a_bs=a_bs, b_bs=b_bs, c_bs=c_bs)
    bshape = float_shape(bmat)
    assert bshape is not None
    plan = ProductPlan("gemm", [x, bmat], [(xs, "float32"), (bshape, "float32")], desc,
                 os_, "col", n)
    plan.bias = bias
    point, plan.tuning = chooser.choose(call_key(op, desc), gemm_space(desc, chooser.threads))
    if point is not None:
        fields = tuned_fields(point)
        plan.max_threads = fields.pop("max_threads", 0)
        plan.split = fields.pop("split", 0)
        plan.blocks = fields
    return plan


def _plan(call: Call, ops: Sequence[str], winograd: int | str,
          chooser: Chooser) -> ProductPlan | None:
    op = call.op
    if not isinstance(op, Op) or op.name not in ops:
        return None
    if op.name == "conv2d":
        return _plan_conv2d(call, winograd, chooser)
    return _plan_gemm(call, op.name, chooser)


def _can_pool(plan: ProductPlan, call: Call) -> bool:
    """Whether the 2x2, stride-2 max pooling ``call`` of the plan's result can be fused
    into its convolution (see ``plait_conv2d_pool``)."""
    from plait.runtime.window import expand_ints, expand_padding

    d = plan.desc
    if (plan.kind != "conv2d" or plan.winograd or plan.pixel_rows or plan.res is not None
            or plan.pool or d.get("G", 1) > 1 or type(d["OH"]) is not int
            or type(d["OW"]) is not int):
        return False
    if plan.viewed or d["C"] * d["KH"] * d["KW"] > POOL_MAX_K:
        return False
    if d["OH"] % 2 or d["OW"] % 8:
        return False
    a = call.attrs
    return (tuple(expand_ints(a["pool_size"], 2)) == (2, 2)
            and tuple(expand_ints(a["strides"], 2)) == (2, 2)
            and tuple(expand_ints(a["dilation"], 2)) == (1, 1)
            and not any(expand_padding(a["padding"], 2))
            and a.get("layout", "NCHW") == "NCHW" and not a.get("ceil_mode"))


def _bias_of(plan: ProductPlan, other: Expr) -> Expr | None:
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


# -------------------------------------------------------------- the rule


def _is_op(value: Expr, name: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == name


VIEW_OPS = ("reshape", "expand_dims", "squeeze", "flatten", "permute_dims")


def view_source(value: Expr) -> Expr | None:
    """The input of ``value`` when ``value`` only reinterprets its shape — a reshape (or
    expand_dims, squeeze, flatten) of static shape, or a permute_dims that moves only
    axes of size 1 — so the two hold the same elements in the same order; else None."""
    if not isinstance(value, Call) or not isinstance(value.op, Op):
        return None
    name = value.op.name
    if name not in VIEW_OPS or len(value.args) != 1:
        return None
    src = value.args[0]
    ss, vs = float_shape(src), float_shape(value)
    if ss is None or vs is None or product(ss) != product(vs):
        return None
    if name == "permute_dims":
        axes = value.attrs.get("axes")
        order = list(range(len(ss)))[::-1] if axes is None else [int(a) % len(ss) for a in axes]
        moved = [a for a in order if ss[a] != 1]
        if moved != sorted(moved):
            return None
    return src


def _is_view(call: Call) -> bool:
    return view_source(call) is not None


def epilogue_step(y: Pattern) -> Pattern:
    """One step of a product's epilogue on its running result ``y``, which nothing else
    reads: a relu, an add (of a bias or a residual), a max pooling, or a view that keeps
    the elements in order (the product then writes the view directly)."""
    y = y.single_use()
    return (is_op("relu")(y) | is_op("add")(y, wildcard()).commutative()
            | is_op("clip", "silu", "gelu")(y) | is_op("max_pool2d")(y)
            | is_op(*VIEW_OPS)(y).where(_is_view))


def product_pattern(ops: Sequence[str] = OPS) -> Pattern:
    """The shape :class:`DispatchGemm` takes: a float32 product followed by any number
    of epilogue steps, ``conv2d|linear|matmul >> (relu(^) | add(^, _) | add(_, ^) |
    clip(^) | silu(^) | gelu(^) | max_pool2d(^) | <view>(^))*``.  Which of them one
    native call can do (a bias once, before a residual, before the relu, before a clip,
    SiLU or GELU (either form);
    pooling only after a convolution ...) is the plan's business (:func:`extend_epilogue`)."""
    return is_op(*ops).has_dtype("float32").repeat(epilogue_step)


def extend_epilogue(plan: ProductPlan, value: Call, src: Var) -> bool:
    """Fold epilogue step ``value`` (which reads the plan's result ``src``) into the
    plan; False when the native call cannot do it at this point."""
    if view_source(value) is not None:
        plan.out_shape = float_shape(value) or plan.out_shape
        plan.viewed = True
        return True
    if _is_op(value, "max_pool2d"):
        if not _can_pool(plan, value):
            return False
        plan.pool = True
        plan.out_shape = float_shape(value) or plan.out_shape
        return True
    if value.ty != src.ty:
        return False
    if _is_op(value, "clip") or _is_op(value, "silu") or _is_op(value, "gelu"):
        return _extend_act(plan, value)
    if plan.act:
        return False          # the activation comes last (after bias, residual, relu)
    if _is_op(value, "relu"):
        if plan.relu:
            return False
        plan.relu = True
        return True
    other = value.args[1] if value.args[0] is src else value.args[0]
    bias = _bias_of(plan, other) if plan.can_take_bias() else None
    if bias is not None:
        plan.bias = bias
        return True
    if (plan.res is None and not plan.relu and not plan.pool
            and other.ty == value.ty and not isinstance(other, Constant)):
        plan.res = other
        plan.res_shape = float_shape(other)
        return True
    return False


def _extend_act(plan: ProductPlan, value: Call) -> bool:
    """Fold a ``clip``, ``silu`` or ``gelu`` (either form) into the plan's activation
    (the last step of the native epilogue, ``plait_act_tile``); clips in a row narrow
    the interval."""
    if plan.pool or plan.winograd:
        return False          # neither epilogue has the activation
    if _is_op(value, "silu") or _is_op(value, "gelu"):
        if plan.act:
            return False
        if _is_op(value, "silu"):
            plan.act = ACT_SILU
        else:
            plan.act = ACT_GELU_TANH if value.attrs.get("approximate") == "tanh" else ACT_GELU
        return True
    if plan.act not in (ACT_NONE, ACT_CLIP):
        return False
    lo, hi = value.attrs.get("min"), value.attrs.get("max")
    new_lo = plan.act_lo if lo is None else max(plan.act_lo, float(lo))
    new_hi = plan.act_hi if hi is None else min(plan.act_hi, float(hi))
    if math.isnan(new_lo) or math.isnan(new_hi) or new_lo > new_hi:
        return False          # disjoint clips: not one interval
    plan.act, plan.act_lo, plan.act_hi = ACT_CLIP, new_lo, new_hi
    return True


def _chain_plan(m: Match, ops: Sequence[str], winograd: int | str,
                chooser: Chooser) -> ProductPlan | None:
    """The plan of a matched product and epilogue (in program order), or None when the
    native call cannot do the whole chain."""
    g = m.graph
    members = sorted(m.bindings)
    anchor = g.bindings[members[0]]
    value = anchor.value
    if _is_op(value, "matmul") and len(value.args) == 2:  # type: ignore[union-attr]
        # torch.export's linear, its weight above FoldConstant's cap: packed from the
        # transposed view, so the transpose never runs (at compile time or per call)
        weight = transposed_weight(value.args[1], m)  # type: ignore[union-attr]
        if weight is not None:
            value = Call(value.op, (value.args[0], Constant(weight.T)),  # type: ignore[union-attr]
                         value.attrs, value.ty, value.span)  # type: ignore[union-attr]
    plan = _plan(value, ops, winograd, chooser)  # type: ignore[arg-type]
    if plan is None:
        return None
    src = anchor.var
    for i in members[1:]:
        b = g.bindings[i]
        if not extend_epilogue(plan, b.value, src):  # type: ignore[arg-type]
            return None
        src = b.var
    plan.members = members
    return plan


def _read_through_view(plan: ProductPlan, m: Match, pattern: Pattern, ops: Sequence[str],
                       winograd: int | str, chooser: Chooser) -> None:
    """Let the product read its first operand ``x`` where it lies when ``x`` is a view
    (bound in the block) of a tensor holding the same elements in the same order —
    unless that view ends another product's epilogue (that product writes it)."""
    x = plan.inputs[0]
    value = m.definition(x) if m.graph.index.get(x) is not None else None  # type: ignore[arg-type]
    source = view_source(value) if value is not None else None
    if source is None:
        return
    if isinstance(source, Var) and m.graph.uses.get(source, 0) == 1 and any(
            _chain_plan(other, ops, winograd, chooser) is not None
            for other in match_at(pattern, source, m.graph)):
        return
    plan.inputs[0] = source
    plan.params[0] = (float_shape(source) or plan.params[0][0], "float32")


def gemm_rule(ops: Sequence[str], winograd: int | str,
              wrappers: dict[str, tuple[str, CFunction]], chooser: Chooser | None = None) -> Rule:
    """The rule of :class:`DispatchGemm`: :func:`product_pattern`, and a rewrite that
    plans the native call (declining what it cannot do; the point of a call with a
    search space from ``chooser``: a tuning database's, else the heuristics') and
    records its C wrapper in ``wrappers``."""
    pattern = product_pattern(ops)
    chooser = chooser if chooser is not None else Chooser(None)

    def rewrite(m: Match) -> Expr | None:
        plan = _chain_plan(m, ops, winograd, chooser)
        if plan is None:
            return None
        _read_through_view(plan, m, pattern, ops, winograd, chooser)
        try:
            name, code, cfn = plan.symbol_and_code()
        except UnboundSize:
            return None   # a size only an intermediate value has: not a call here
        wrappers.setdefault(name, (code, cfn))
        anchor = m.graph.bindings[plan.members[0]].value
        chooser.note(name, anchor.op.name, plan.tuning)  # type: ignore[attr-defined]
        root = m.graph.bindings[plan.members[-1]]
        return make_call("call_extern", ExternFunc(name), Tuple(plan.call_args()),
                         out=root.var.ty, span=fused_span(m.graph, plan.members, root))

    return Rule("c.gemm", pattern, rewrite)


def winograd_mode(winograd: int | bool | str) -> int | str:
    """The Winograd variant asked for: False/0 none, 2 F(2x2, 3x3), 4 F(4x4, 3x3)
    wherever Winograd applies; True/"auto" the cheapest of those and the direct product
    for each shape (:func:`winograd_choice`)."""
    if winograd is True or winograd == "auto":
        return "auto"
    if winograd is False or winograd == 0:
        return 0
    if winograd in (2, 4):
        return int(winograd)
    raise ValueError(f"winograd must be 'auto', True, False, 2 or 4 (the output tile of "
                     f"F(m x m, 3x3)), got {winograd!r}")


def dispatch_gemm(mod: IRModule, skip: Any = None, ops: Sequence[str] = OPS,
                  winograd: int | bool | str = "auto", tuning_db: str | None = None) -> IRModule:
    """``mod`` with float32 conv2d/linear/matmul (and their epilogues) rewritten into
    calls of ``plait_gemm.c`` (see the module docstring); functions for which ``skip``
    is true (default: those of external codegens) are left alone.  Calls with a search
    space take the points of the tuning database ``tuning_db`` (else
    ``PLAIT_TUNING_DB``'s; :mod:`plait.target.c.tuning`), else the heuristics'."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    chooser = Chooser(tuning_db)
    rule = gemm_rule(ops, winograd_mode(winograd), wrappers, chooser)
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = rewrite_function(f, [rule], mod, name=name)
        if nf is not mod[name]:
            funcs[name] = nf
    return chooser.annotate(record_calls(mod, wrappers, "plait_gemm_calls", funcs))


@module_pass(name="c.DispatchGemm", phases=("optimization",))
class DispatchGemm:
    """Send float32 conv2d, linear and matmul with their epilogues to plait_gemm.c.

    The weights are packed at compile time; the epilogue is a bias, a residual, a relu
    and a clip, SiLU or GELU."""

    def __init__(self, ops: Sequence[str] = OPS, *, winograd: int | bool | str = "auto",
                 tuning_db: str | None = None, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        self.winograd = winograd_mode(winograd)
        self.tuning_db = tuning_db
        unknown = [o for o in ops if o not in OPS]
        if unknown:
            raise ValueError(f"c.DispatchGemm: cannot dispatch {unknown}; it takes "
                             f"{', '.join(OPS)}")
        self.ops = tuple(ops)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_gemm(mod, skip=skips_external(self, ctx),  # type: ignore[arg-type]
                             ops=self.ops, winograd=self.winograd, tuning_db=self.tuning_db)
