"""plait: a deep-learning compiler with a composable, phase-checked pass infrastructure."""

from . import op  # noqa: F401  (registers the core operators)
from .ir import *  # noqa: F403
from .ir import __all__ as _ir_all

__version__ = "0.1.0"
__all__ = list(_ir_all)
