"""The grouped and depthwise convolution family ``dwconv`` (``plait_dwconv.c``): its call
interface.

``plait_dwconv2d`` (a ``plait_dwconv2d_desc``, ``plait_dwconv.h``) computes grouped
convolutions with few channels per group, depthwise ones included, in one of three
layouts chosen per call, with the product's epilogue (bias, residual, relu, an
activation); ``plait_se_scale`` (a ``plait_se_desc``) a squeeze-and-excite gate (the
spatial mean, two small products with their activations, the scaling) in one call.
"""

from __future__ import annotations

from ..registry import KernelFamily, register_family

DWCONV2D_FIELDS = ("N", "C", "H", "W", "O", "G", "KH", "KW", "SH", "SW", "DH", "DW",
                   "PT", "PL", "OH", "OW")
"""The shape fields of ``plait_dwconv2d_desc``, in order."""

register_family(KernelFamily("dwconv", "plait_dwconv.c", ("plait_dwconv2d", "plait_se_scale"),
                             package=__name__, header="plait_dwconv.h"))

__all__ = ["DWCONV2D_FIELDS"]
