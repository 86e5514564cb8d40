"""torch dtypes and plait dtypes."""

from __future__ import annotations

from typing import Any

_NAMES = {
    "float32": "float32", "float64": "float64", "float16": "float16",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool",
}  # fmt: skip


def to_dtype(torch_dtype: Any) -> str | None:
    """The plait dtype of a ``torch.dtype`` (None if plait has none: bfloat16, complex,
    float8, ...)."""
    return _NAMES.get(str(torch_dtype).removeprefix("torch."))


def to_torch(dtype: str) -> Any:
    """The ``torch.dtype`` of a plait dtype."""
    import torch

    return getattr(torch, dtype)


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")
