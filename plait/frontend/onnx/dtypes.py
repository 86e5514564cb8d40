"""ONNX element types and plait dtypes, and identifier sanitizing."""

from __future__ import annotations

import re

from onnx import TensorProto

ONNX_TO_DTYPE: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT8: "int8",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}
"""The ONNX element types plait represents, and their plait dtype."""

DTYPE_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_TO_DTYPE.items()}


def onnx_type_name(elem_type: int) -> str:
    """``FLOAT``, ``BFLOAT16``, ... for an ONNX element type number."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"<element type {elem_type}>"


def to_dtype(elem_type: int) -> str | None:
    """The plait dtype of an ONNX element type, or None if plait has none."""
    return ONNX_TO_DTYPE.get(elem_type)


_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")


def sanitize(name: str, fallback: str = "v") -> str:
    """``name`` as a Python identifier: other characters become ``_``, a leading digit
    gets a ``_`` prefix; an empty name becomes ``fallback``."""
    s = _NOT_IDENT.sub("_", name)
    if not s:
        return fallback
    if s[0].isdigit():
        s = "_" + s
    return s
