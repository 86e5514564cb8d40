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

from .. import gemm  # noqa: F401  (registered first: conv needs it)
from ..registry import KernelFamily, register_family

POOL_MAX_K = 384
"""The longest reduction (C * KH * KW) ``plait_conv2d_pool`` takes: one block of
``plait_gemm.c`` (PLAIT_KC), since pooled outputs cannot hold partial sums."""

CONV2D_FIELDS = ("N", "C", "H", "W", "O", "KH", "KW", "SH", "SW", "DH", "DW",
                 "PT", "PL", "PB", "PR", "OH", "OW")
"""The shape fields of ``plait_conv2d_desc``, in order (the activation follows)."""

register_family(KernelFamily("conv", "plait_conv.c", ("plait_conv2d", "plait_conv2d_pool",
                                                      "plait_conv2d_pixel_rows"),
                             needs=("gemm",), package=__name__, header="plait_gemm.h"))

__all__ = ["CONV2D_FIELDS", "POOL_MAX_K"]
