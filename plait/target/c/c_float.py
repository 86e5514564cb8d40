"""Float constants written as C text."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["c_float"]


def c_float(v: float) -> str:
    """``v`` as a C float constant expression (infinities as GCC/clang builtins)."""
    if math.isinf(v):
        return "__builtin_inff()" if v > 0 else "(-__builtin_inff())"
    return f"{float(np.float32(v))!r}f"
