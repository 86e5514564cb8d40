"""The direct convolution family ``conv`` (``plait_conv.c``): its call interface.

``plait_conv2d`` computes an NCHW convolution as an implicit im2col product on
``plait_gemm.c``'s register tile (patches packed straight from the zero-padded input,
block by block, never materialized whole; weights packed at compile time with
:func:`plait.target.c.kernels.gemm.pack_a`), ``plait_conv2d_pixel_rows`` the transposed
product (the output pixels as the tile's rows; weights with
:func:`~plait.target.c.kernels.gemm.pack_b`), ``plait_conv2d_pool`` a convolution with a
2x2, stride-2 max pooling fused (reductions of at most one block, :data:`POOL_MAX_K`).
All take a ``plait_conv2d_desc`` (``plait_gemm.h``) and the epilogue of the product.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.ir.symbolic import Dim

from ..gemm import Epilogue  # (and the gemm family registered first: conv needs it)
from ..registry import KernelFamily, register_family
from ..winograd import WINOGRAD_FUNCTIONS
from ..wrapper import DESC, Buffer, NativeCall, Ref

POOL_MAX_K = 384
"""The longest reduction (C * KH * KW) ``plait_conv2d_pool`` takes: one block of
``plait_gemm.c`` (PLAIT_KC), since pooled outputs cannot hold partial sums."""

CONV2D_FIELDS = ("N", "C", "H", "W", "O", "KH", "KW", "SH", "SW", "DH", "DW",
                 "PT", "PL", "PB", "PR", "OH", "OW")
"""The shape fields of ``plait_conv2d_desc``, in order (the activation follows)."""

CONV_ENTRIES = {"direct": "plait_conv2d", "pixel_rows": "plait_conv2d_pixel_rows",
                "pool": "plait_conv2d_pool"}
"""This family's entry point of each way to compute a convolution."""

CONV2D_ENTRIES = {**CONV_ENTRIES,
                  **{f"winograd{m}": fn for m, fn in WINOGRAD_FUNCTIONS.items()}}
"""The entry point of every way to compute a convolution (the Winograd ones are the
``winograd`` family's)."""


TUNED_FIELDS = ("max_threads", "split", "kc", "mc", "nc")
"""The fields of ``plait_conv2d_desc`` a tuned point sets (:mod:`plait.target.c.tuning`;
0, the rules', when absent): the threads, and the thread split and block sizes of the
product (``plait_gemm_problem``'s)."""


def conv2d_call(x: tuple[Dim, ...], w: tuple[Dim, ...], out: tuple[Dim, ...],
                desc: Mapping[str, Any], variant: str, epilogue: Epilogue) -> NativeCall:
    """The call of a convolution entry point (``variant``: a key of
    :data:`CONV2D_ENTRIES`) on ``x`` with the weights packed for it (shape ``w``),
    ``desc`` holding the :data:`CONV2D_FIELDS` (and optionally ``G``, the groups: not
    with ``pool``, the weights packed group by group; and the :data:`TUNED_FIELDS`, a
    tuned point's, each left out when 0: ``max_threads``, which Winograd ignores, and
    the product's ``split``, ``kc``, ``mc``, ``nc``, which only ``direct`` and ``pool``
    take); the bias per output channel.  With ``pool``
    the epilogue has no residual; neither pooling nor Winograd takes an activation."""
    ep = epilogue
    groups = int(desc.get("G", 1))
    if groups > 1 and variant == "pool":
        raise ValueError(f"conv2d_call: 'pool' takes no groups (G = {groups}); grouped "
                         "convolutions are 'direct', 'pixel_rows' or Winograd")
    fields = (tuple((k, desc[k]) for k in CONV2D_FIELDS) + ep.act_fields()
              + ((("G", groups),) if groups > 1 else ())
              + tuple((k, int(desc[k])) for k in TUNED_FIELDS if desc.get(k)))
    relu = int(ep.relu)
    args: tuple[Any, ...] = ((DESC, Ref("in0"), Ref("in1"), ep.bias_ref(), relu, Ref("out"))
                             if variant == "pool" else
                             (DESC, Ref("in0"), Ref("in1"), ep.bias_ref(), ep.res_ref(), relu,
                              Ref("out")))
    buffers = (Buffer("in0", x), Buffer("in1", w), *ep.buffers(), Buffer("out", out, out=True))
    return NativeCall("conv2d", CONV2D_ENTRIES[variant], buffers, args, "plait_conv2d_desc",
                      fields)


register_family(KernelFamily("conv", "plait_conv.c", tuple(CONV_ENTRIES.values()),
                             needs=("gemm",), package=__name__, header="plait_gemm.h"))

__all__ = ["CONV2D_ENTRIES", "CONV_ENTRIES", "CONV2D_FIELDS", "POOL_MAX_K", "TUNED_FIELDS",
           "conv2d_call"]
