"""Op computes: every core op that the native targets lower to a generated kernel,
described as compute-DSL tensor expressions, one file per op family.

``get_compute(op)`` returns ``fn(inputs, attrs, out_ty) -> tensor(s)`` (see
:mod:`.registry`); the default legalization of the ``c`` target builds one kernel per
op call from it, and a fusion pass may compose the computes of a group of ops into one
kernel.  An op without a compute is lowered to its numpy library call.
"""

from . import create, elementwise, index, linalg, manipulate, nn, reduce  # noqa: F401  (register)
from .registry import (
    COMPUTES,
    ComputeDef,
    ComputeFn,
    ComputeUnsupported,
    compute_note,
    get_compute,
    list_computes,
    register_compute,
)

__all__ = [
    "COMPUTES", "ComputeDef", "ComputeFn", "ComputeUnsupported", "compute_note",
    "get_compute", "list_computes", "register_compute",
]
