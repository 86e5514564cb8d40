"""The tolerance of weight-only quantized products: the float32 summation bound."""

from __future__ import annotations

import numpy as np

U = 2.0**-24
"""The unit roundoff of float32."""


def assert_close(got: np.ndarray, want: np.ndarray, a: np.ndarray, w_nk: np.ndarray,
                 what: str = "") -> None:
    """``got`` equals ``want`` (both ``a @ w_nk.T`` of the same float32 weight summed in
    some order) within ``4 K u (|a| @ |w_nk|^T)`` elementwise."""
    k = w_nk.shape[1]
    a2 = np.asarray(a, np.float64).reshape(-1, k)
    bound = 4 * k * U * (np.abs(a2) @ np.abs(w_nk.astype(np.float64)).T)
    g = np.asarray(got, np.float64).reshape(bound.shape)
    w = np.asarray(want, np.float64).reshape(bound.shape)
    err = np.abs(g - w)
    assert np.all(err <= bound + 1e-30), f"{what}: max error {err.max()}, bound {bound.max()}"
