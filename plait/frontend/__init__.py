"""Frontends: importers that turn models from other frameworks into plait IR.

``from_onnx`` needs the ``onnx`` package (``pip install plait[onnx]``), ``from_torch``
and ``from_exported_program`` need ``torch`` (``pip install plait[torch]``); each is
imported on first use so that ``import plait.frontend`` works without them.
"""

from __future__ import annotations

from typing import Any

from .common import FrontendImportError

__all__ = [
    "FrontendImportError",
    "OnnxImportError",
    "TorchImportError",
    "from_exported_program",
    "from_onnx",
    "from_torch",
]


def from_onnx(model_or_path: Any, shapes: Any = None, **kwargs: Any) -> Any:
    """Import an ONNX model as an IRModule (see :func:`plait.frontend.onnx.from_onnx`)."""
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model_or_path, shapes, **kwargs)


def from_exported_program(ep: Any, **kwargs: Any) -> Any:
    """Import a ``torch.export.ExportedProgram`` as an IRModule (see
    :func:`plait.frontend.torch.from_exported_program`)."""
    from .torch import from_exported_program as _from_ep

    return _from_ep(ep, **kwargs)


def from_torch(module: Any, example_args: Any, example_kwargs: Any = None, **kwargs: Any
               ) -> Any:
    """Export a PyTorch module with ``torch.export`` and import it (see
    :func:`plait.frontend.torch.from_torch`)."""
    from .torch import from_torch as _from_torch

    return _from_torch(module, example_args, example_kwargs, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "OnnxImportError":
        from .onnx.errors import OnnxImportError

        return OnnxImportError
    if name == "TorchImportError":
        from .torch.errors import TorchImportError

        return TorchImportError
    raise AttributeError(f"module 'plait.frontend' has no attribute {name!r}")
