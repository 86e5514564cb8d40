"""The ONNX frontend: :func:`from_onnx` and the converter registry."""

from ...dialects import load_frontend_converters
from . import converters  # noqa: F401  (registers the converters)
from .errors import NeedsConstantError, OnnxImportError
from .importer import from_onnx
from .loader import MIN_OPSET, max_opset
from .registry import Converter, converter, find_converter, list_converters

load_frontend_converters("onnx")  # the dialects' converters (from_onnx loads later ones)

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
