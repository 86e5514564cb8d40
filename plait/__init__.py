"""plait: a deep-learning compiler with a composable, phase-checked pass infrastructure."""

from . import op  # noqa: F401  (registers the core operators)
from .ir import *  # noqa: F403
from .ir import __all__ as _ir_all
from .ir.parser import parse as parse  # the text format: plait.parse(text)

__version__ = "0.1.0"
__all__ = list(_ir_all)
from . import kernel  # noqa: E402, F401  (kernel IR: @kernel text hooks, phase checks)
from . import transform as transform  # noqa: E402  (the pass infrastructure and its passes)
from .build import build  # noqa: E402
from .pipeline import default_pipeline  # noqa: E402
from .target import Target  # noqa: E402

__all__ += ["build", "default_pipeline", "parse", "Target"]
