"""The Winograd convolution family ``winograd`` (``plait_winograd.c``): its call interface.

``plait_conv2d_winograd`` (F(2x2, 3x3)) and ``plait_conv2d_winograd4`` (F(4x4, 3x3))
take a ``plait_conv2d_desc`` (``plait_gemm.h``) and weights transformed and packed at
compile time (:func:`winograd_weights`); stride 1, dilation 1, 3x3 kernels.  Which
convolutions run here is the dispatch rules' choice
(:func:`plait.target.c.dispatch.gemm.winograd_choice`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.ir.deferred import deferred_constant

from ..gemm import MR, pack_a
from ..registry import KernelFamily, register_family

WINOGRAD_G = {
    2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
    4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
}
"""The weight transforms of Winograd F(2x2, 3x3) and F(4x4, 3x3): U = G g G^T."""

WINOGRAD_FUNCTIONS = {2: "plait_conv2d_winograd", 4: "plait_conv2d_winograd4"}
"""The entry point of each output tile size ``m``."""


def winograd_weights(w: np.ndarray, m: int = 4) -> np.ndarray:
    """The ``O x C x 3 x 3`` weights transformed for F(m x m, 3x3) (``G g G^T``, in
    float64, rounded once) and packed per transform element: ``[(m+2)^2][ceil(O/MR)][C]
    [MR]`` (what ``plait_conv2d_winograd`` / ``plait_conv2d_winograd4`` read)."""
    g = WINOGRAD_G[m]
    o, c = w.shape[:2]
    a = m + 2
    out = np.empty((a * a, -(-o // MR), c, MR), np.float32)
    # a block of output channels at a time (whole panels): the float64 transform of all
    # the weights at once would be 8 (F(2x2)) or 16 (F(4x4)) times their size
    step = MR * max(1, WINOGRAD_BLOCK_BYTES // (MR * c * a * a * 8))
    for o0 in range(0, o, step):
        u = np.einsum("ij,ocjk,lk->ocil", g, w[o0:o0 + step].astype(np.float64), g)
        u = u.reshape(len(u), c, a * a).transpose(2, 0, 1).astype(np.float32)
        p0 = o0 // MR
        for xi in range(a * a):
            panels = pack_a(u[xi])
            out[xi, p0:p0 + len(panels)] = panels
    return out


WINOGRAD_BLOCK_BYTES = 1 << 20
"""The float64 transform :func:`winograd_weights` computes at a time (at least one
panel of output channels)."""


def winograd_constant(w: np.ndarray, m: int = 4, *, groups: int = 1) -> Any:
    """A constant of :func:`winograd_weights` of ``w`` (``O x C x 3 x 3``), computed when
    code generation first reads it (:mod:`plait.ir.deferred`): the pipeline holds the
    original only until then.  The transform rounds, so there is no way back: the graph
    an executable keeps holds the original.  With ``groups`` (a grouped convolution's
    weights, ``O x C/groups x 3 x 3``) each group's ``O / groups`` rows are transformed
    and packed on their own, group after group (``plait_conv2d_desc.G``)."""
    o, c = (int(d) for d in w.shape[:2])
    if groups < 1 or o % groups:
        raise ValueError(f"winograd_constant: {o} output channels do not split into "
                         f"{groups} groups")
    a, og = m + 2, o // groups

    def make(src: np.ndarray) -> np.ndarray:
        f = np.asarray(src, np.float32)
        if groups == 1:   # the transform's own array (a concatenation would copy it)
            return winograd_weights(f, m)
        out = np.empty((groups * a * a, -(-og // MR), c, MR), np.float32)
        for g in range(groups):   # one group's transform at a time beside the result
            out[g * a * a:(g + 1) * a * a] = winograd_weights(f[g * og:(g + 1) * og], m)
        return out

    return deferred_constant(w, make, (groups * a * a, -(-og // MR), c, MR), np.float32)


register_family(KernelFamily("winograd", "plait_winograd.c", tuple(WINOGRAD_FUNCTIONS.values()),
                             package=__name__, header="plait_gemm.h"))

__all__ = ["WINOGRAD_FUNCTIONS", "WINOGRAD_G", "winograd_constant", "winograd_weights"]
