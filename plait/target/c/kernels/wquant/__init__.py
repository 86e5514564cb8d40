"""The ``c`` target's weight-only quantized products (``plait_wquant.c``): the kernel family
``wquant`` and its call wrappers.

``plait_wq_matmul`` computes ``a @ W.T (+ bias)`` with ``W`` (``N x K``) in onnxruntime's
``MatMulNBits`` layout (4 or 8 bits in blocks of ``block_size`` along K, a float scale
and a packed uint8 zero point per block; docs/dialects.md), dequantizing in registers:
a matrix-vector product streaming the packed weights for up to 4 rows (decode), a
tiled product over a dequantized panel of the weights for more (prefill).  With int8
activations (``act=8``: the op's ``accuracy_level`` 4) the rows of ``a`` are quantized
to int8 per block and each block's sum is an integer dot product (``vpdpbusd`` in the
AVX512-VNNI copy, plain C in the others).  Copies for every float ISA of the machine
and AVX512-VNNI (AVX-512 + VNNI, AVX-512, AVX2 + FMA, NEON, baseline), one chosen at
load time.

This module knows no op: a dispatch pass (a dialect's) describes each call with
:class:`WQCall` and records the wrappers with
:func:`plait.target.c.kernels.registry.record_calls`.  The rows of ``a``
(the product of its leading dimensions) may be symbolic: prefill and decode run from
one wrapper, which takes them at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.codegen.c import CFunction
from plait.codegen.c.variants import FLOAT_ISAS
from plait.ir.expr import Expr
from plait.ir.symbolic import Dim

from ...dims import Prod
from ..registry import KernelFamily, register_family
from ..wrapper import DESC, NULL, Buffer, Local, NativeCall, Ref, emit_call

PACKAGE = __name__
ISAS = ("avx512vnni",) + FLOAT_ISAS
"""The copies: the float ISAs, and AVX512-VNNI for the integer dot products of int8
activations (the float paths of its copy are the AVX-512 copy's)."""

MAX_OUTS = 4
"""The most outputs one call splits its product into (``PLAIT_WQ_MAX_OUTS``)."""

FAMILY = register_family(KernelFamily("wquant", "plait_wquant.c", ("plait_wq_matmul",),
                                      isas=ISAS, package=PACKAGE, header="plait_wquant.h"))
"""The family (copies for :data:`ISAS`)."""


@dataclass
class WQCall:
    """A call of ``plait_wq_matmul``: float32 ``a`` of shape ``(..., K)`` (its leading
    sizes may be symbolic), the packed ``b``, ``scales``, ``zero_points`` (and
    ``bias``) of an ``N x K`` weight of ``bits`` in blocks of ``block_size``; the
    output ``(..., N)``."""

    a: Expr
    b: Expr
    scales: Expr
    zero_points: Expr
    bias: Expr | None
    a_shape: tuple[Dim, ...]
    K: int
    N: int
    bits: int
    block_size: int
    zero: int = -1
    """The zero point every block has (a symmetric quantization's), or -1 (each
    block's is read from ``zero_points``)."""
    act: int = 0
    """8: ``a`` quantized to int8 per block (the op's ``accuracy_level`` 4), 0: float."""
    splits: tuple[int, ...] = ()
    """Several outputs (``plait_wq_outs``): the widths of the outputs the product's ``N``
    columns are split into, in order (their weights concatenated along ``N``: a layer's
    q, k and v); empty: one output ``(..., N)``."""

    def args(self) -> list[Expr]:
        """The call's tensor arguments, in the wrapper's order."""
        return [self.a, self.b, self.scales, self.zero_points] + (
            [self.bias] if self.bias is not None else [])

    def wrapper(self) -> tuple[str, str, CFunction]:
        """(symbol, C code, CFunction); :class:`~plait.codegen.c.sizes.UnboundSize` when a
        size of ``a`` cannot be written from the parameters."""
        names = ["a", "b", "scales", "zp"] + (["bias"] if self.bias is not None else [])
        buffers = [Buffer(n, tuple(e.ty.shape), e.ty.dtype)  # type: ignore[union-attr]
                   for n, e in zip(names, self.args())]
        rows = tuple(self.a_shape[:-1])
        desc = (("M", Prod.of(*rows)), ("N", self.N), ("K", self.K),
                ("bits", self.bits), ("block_size", self.block_size), ("zero", self.zero),
                ("act", self.act))
        bias = Ref("bias") if self.bias is not None else NULL
        head = (DESC, Ref("a"), Ref("b"), Ref("scales"), Ref("zp"), bias)
        if not self.splits:
            buffers.append(Buffer("out", rows + (self.N,), out=True))
            return emit_call(NativeCall("wq", "plait_wq_matmul", tuple(buffers),
                                        (*head, Ref("out"), NULL), "plait_wq_desc", desc,
                                        guard="a"))
        if sum(self.splits) != self.N or not 2 <= len(self.splits) <= MAX_OUTS:
            raise ValueError(f"WQCall: output widths {self.splits} must be 2 to {MAX_OUTS} "
                             f"widths summing to N = {self.N}")
        fields: list[tuple[str, object]] = [("count", len(self.splits))]
        end = 0
        for j, width in enumerate(self.splits):
            end += width
            buffers.append(Buffer(f"out{j}", rows + (width,), out=True))
            fields += [(f"end[{j}]", end), (f"out[{j}]", Ref(f"out{j}"))]
        outs = Local("o", "plait_wq_outs", tuple(fields))
        return emit_call(NativeCall("wq", "plait_wq_matmul", tuple(buffers),
                                    (*head, NULL, Ref("&o")), "plait_wq_desc", desc,
                                    guard="a", locals=(outs,)))


__all__ = ["FAMILY", "ISAS", "MAX_OUTS", "PACKAGE", "WQCall"]
