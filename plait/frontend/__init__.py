"""Frontends: importers that turn models from other frameworks into plait IR.

``from_onnx`` needs the ``onnx`` package (``pip install plait[onnx]``); it is imported
on first use so that ``import plait.frontend`` works without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OnnxImportError", "from_onnx"]


def from_onnx(model_or_path: Any, shapes: Any = None, **kwargs: Any) -> Any:
    """Import an ONNX model as an IRModule (see :func:`plait.frontend.onnx.from_onnx`)."""
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model_or_path, shapes, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "OnnxImportError":
        from .onnx.errors import OnnxImportError

        return OnnxImportError
    raise AttributeError(f"module 'plait.frontend' has no attribute {name!r}")
