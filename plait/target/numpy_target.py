"""The ``numpy`` target: every op becomes a call of its numpy library function.

Its legalization is the "library call" path (docs/targets.md) used for a whole
target: each op call turns into ``call_extern(extern("numpy.<op>"), (args...),
out=<type>, attrs={...})``, and the runtime's packed-function registry provides
``numpy.<op>`` (destination-passing) and ``numpy.<op>@alloc`` (value-returning, for
results whose shape is only known at run time) from :mod:`plait.runtime.numpy_ops`.
Runs anywhere numpy does.
"""

from __future__ import annotations

from ..transform.legalize import reference_legalization, register_legalize
from .target import register_target_kind

register_target_kind("numpy", doc="runs every op through numpy library calls; runs anywhere")
register_legalize("*", "numpy", reference_legalization)
