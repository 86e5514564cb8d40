"""The float32 matrix product family ``gemm`` (``plait_gemm.c``): its call interface.

``plait_gemm(const plait_gemm_problem*)`` (``plait_gemm.h``) computes a (batched)
product ``C = A @ B`` after BLIS: panels of :data:`MR` rows of A and :data:`NR`
columns of B stream through a 6x16 register tile (``plait_tile.h``), threads from the
library's pool; A strided, B strided or packed at compile time (:func:`pack_b`), and
an epilogue applied to each tile as it is stored: a bias per row or column, a residual,
relu, then one activation (:data:`ACT_CLIP`, :data:`ACT_SILU`, :data:`ACT_GELU`,
:data:`ACT_GELU_TANH`).  The convolution families (``conv``, ``winograd``) and
attention run on the same tile.  This package knows no op: the dispatch rules
(:mod:`plait.target.c.dispatch.gemm`) decide which calls it computes.
"""

from __future__ import annotations

import numpy as np

from ..registry import KernelFamily, register_family

ACT_NONE, ACT_CLIP, ACT_SILU, ACT_GELU, ACT_GELU_TANH = 0, 1, 2, 3, 4
"""The activations of the native epilogue (``PLAIT_ACT_*`` of ``plait_gemm.h``)."""


MR, NR = 6, 16
"""The register tile of ``plait_gemm.c`` (rows of A per panel, columns of B per panel)."""


MR, NR = 6, 16
"""The register tile of ``plait_gemm.c`` (rows of A per panel, columns of B per panel)."""


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


register_family(KernelFamily("gemm", "plait_gemm.c", ("plait_gemm",), package=__name__,
                             header="plait_gemm.h"))

__all__ = ["ACT_CLIP", "ACT_GELU", "ACT_GELU_TANH", "ACT_NONE", "ACT_SILU", "MR", "NR",
           "pack_a", "pack_b"]
