"""A small model with one call of each tunable family (a 3x3 convolution, a depthwise
3x3 convolution, a linear layer) and its float64 numpy reference, shared by the
tuning tests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import plait

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "target"))
from graph_helpers import build_graph, const, emit  # noqa: E402

RNG = np.random.default_rng(33)
W_CONV = RNG.uniform(-1, 1, (32, 16, 3, 3)).astype(np.float32)
W_DW = RNG.uniform(-1, 1, (32, 1, 3, 3)).astype(np.float32)
W_LIN = RNG.uniform(-1, 1, (64, 14 * 14)).astype(np.float32) / 16
X_SHAPE = (1, 16, 14, 14)


def small_model() -> plait.IRModule:
    """conv2d 16 -> 32 (3x3, pad 1) + relu -> depthwise 3x3 (pad 1) -> each channel's
    plane a row -> linear 196 -> 64, on a 14 x 14 image (the linear layer has 32 rows:
    plait's product, not the decode family's)."""

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = emit(bb, "conv2d", p[0], const(W_CONV), padding=(1, 1))
        y = emit(bb, "relu", y)
        y = emit(bb, "conv2d", y, const(W_DW), padding=(1, 1), groups=32)
        y = emit(bb, "reshape", y, shape=(32, 14 * 14))
        return emit(bb, "linear", y, const(W_LIN))

    return build_graph({"x": X_SHAPE}, body)


def conv_ref(x: np.ndarray, w: np.ndarray, groups: int = 1) -> np.ndarray:
    """NCHW/OIHW convolution, stride 1, padding 1, in float64 (numpy)."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    og = o // groups
    outs = []
    for g in range(groups):
        xs = win[:, g * cg:(g + 1) * cg]                    # n, cg, oh, ow, kh, kw
        ws = w[g * og:(g + 1) * og].astype(np.float64)     # og, cg, kh, kw
        outs.append(np.einsum("ncyxij,ocij->noyx", xs, ws))
    return np.concatenate(outs, axis=1)


def reference(x: np.ndarray) -> np.ndarray:
    """The small model in float64."""
    y = np.maximum(conv_ref(x, W_CONV), 0)
    y = conv_ref(y, W_DW, groups=32)
    return y.reshape(32, -1) @ W_LIN.astype(np.float64).T


def sample_input() -> np.ndarray:
    return np.random.default_rng(5).uniform(-1, 1, X_SHAPE).astype(np.float32)
