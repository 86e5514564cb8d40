"""Elementwise and broadcasting operators."""

from __future__ import annotations

import numpy as np

from .infer import infer_broadcast, infer_unary
from .registry import register_op

_BINARY = {
    "add": (np.add, "x + y"),
    "subtract": (np.subtract, "x - y"),
    "multiply": (np.multiply, "x * y"),
    "divide": (np.divide, "x / y (true division for floats, truncating for ints)"),
}


def _divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.integer):
        return np.trunc(np.true_divide(x, y)).astype(x.dtype)
    return np.divide(x, y)


for _name, (_fn, _doc) in _BINARY.items():
    register_op(
        _name,
        inputs=("x", "y"),
        infer_type=infer_broadcast,
        pattern="broadcast",
        reference=_divide if _name == "divide" else _fn,
        doc=_doc + ", with numpy broadcasting",
    )

register_op(
    "relu",
    inputs=("x",),
    infer_type=infer_unary,
    pattern="elemwise",
    reference=lambda x: np.maximum(x, np.zeros((), x.dtype)),
    doc="max(x, 0)",
)
