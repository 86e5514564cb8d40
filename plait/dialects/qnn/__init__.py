"""The qnn dialect (under construction)."""
from plait.dialects import register_dialect

from . import ops  # noqa: F401
from .canonicalize import Canonicalize
from .legalize import Legalize

register_dialect("qnn", ingestion=lambda target: [Canonicalize()],
                 legalize=lambda target: [Legalize()],
                 frontends={"onnx": "plait.dialects.qnn.onnx_import"})
