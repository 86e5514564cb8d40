"""Targets, target kinds and their hooks."""

from . import c, numpy_target  # noqa: F401  (register the "c" and "numpy" target kinds)
from .target import (
    EXTENSION_POINTS,
    TARGET_KINDS,
    Target,
    TargetKind,
    get_target_kind,
    register_target_kind,
)

__all__ = [
    "EXTENSION_POINTS",
    "TARGET_KINDS",
    "Target",
    "TargetKind",
    "get_target_kind",
    "register_target_kind",
]
