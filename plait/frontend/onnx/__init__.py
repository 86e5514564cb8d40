"""The ONNX frontend: :func:`from_onnx` and the converter registry."""

from . import converters  # noqa: F401  (registers the converters)
from .errors import NeedsConstantError, OnnxImportError
from .importer import from_onnx
from .loader import MIN_OPSET, max_opset
from .registry import Converter, converter, find_converter, list_converters

__all__ = [
    "MIN_OPSET",
    "Converter",
    "NeedsConstantError",
    "OnnxImportError",
    "converter",
    "find_converter",
    "from_onnx",
    "list_converters",
    "max_opset",
]
