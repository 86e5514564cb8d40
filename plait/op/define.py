"""Registering the core operators with the module that defines them recorded.

The op documentation (``tools/gen_op_docs.py``) groups ops by the module that registered
them; :func:`op_definer` gives a module a ``register_op`` that records it in
``OpDef.extra["module"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import OpDef, register_op


def op_definer(module: str) -> Callable[..., OpDef]:
    """A :func:`~plait.op.registry.register_op` that records ``module`` as the op's home."""

    def define(name: str, **kwargs: Any) -> OpDef:
        opdef = register_op(name, **kwargs)
        opdef.extra["module"] = module
        return opdef

    define.__doc__ = f"Register an op of {module} (see register_op)."
    return define
