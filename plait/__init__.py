"""plait: a deep-learning compiler with a composable, phase-checked pass infrastructure."""

from . import (
    kernel,  # noqa: F401  (kernel IR: @kernel text hooks, phase checks)
    op,  # noqa: F401  (registers the core operators)
)
from . import transform as transform  # the pass infrastructure and its passes
from .build import build, graph_module, rebuild
from .codegen import onnxruntime as _onnxruntime  # noqa: F401  (registers the codegen)
from .dialects import load_dialects as _load_dialects  # noqa: E402  (after the core)
from .ir import *  # noqa: F403
from .ir import __all__ as _ir_all
from .ir.parser import parse as parse  # the text format: plait.parse(text)
from .llm import generate
from .offload import partition
from .pipeline import default_pipeline
from .runtime.limits import LimitExceeded, Limits, current_limits, use_limits
from .session import Session, load
from .target import Target

_load_dialects()

__version__ = "0.1.0"
__all__ = [*_ir_all, "build", "default_pipeline", "graph_module", "parse", "partition",
           "rebuild", "Target", "transform", "LimitExceeded", "Limits", "current_limits",
           "use_limits", "load", "Session", "generate"]
