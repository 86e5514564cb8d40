"""Targets, target kinds and their hooks."""

from . import c  # noqa: F401  (registers the "c" target kind)
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
