"""The PyTorch frontend: :func:`from_torch`, :func:`from_exported_program` and the
table of ATen op converters.  Needs ``torch`` (``pip install plait[torch]``); ``import
plait`` does not import it."""

from . import converters  # noqa: F401  (registers the converters)
from .context import ConversionError, NodeContext
from .errors import TorchImportError, UnsupportedOpsError
from .frontend import exported_params, from_exported_program, from_torch
from .importer import flatten_inputs, output_structure, unflatten_outputs
from .names import output_names
from .registry import Converter, converter, find_converter, list_converters

__all__ = [
    "ConversionError",
    "Converter",
    "NodeContext",
    "TorchImportError",
    "UnsupportedOpsError",
    "converter",
    "exported_params",
    "find_converter",
    "flatten_inputs",
    "from_exported_program",
    "from_torch",
    "list_converters",
    "output_names",
    "output_structure",
    "unflatten_outputs",
]
