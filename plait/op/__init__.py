"""Operators: the registry and the core operator set."""

from . import elementwise, linalg, manipulate, reduce  # noqa: F401  (register the ops)
from .registry import (
    AttrSpec,
    InferContext,
    OpAttrError,
    OpDef,
    OpError,
    OpTypeError,
    get_op,
    list_ops,
    make_call,
    normalize_attrs,
    register_op,
)

__all__ = [
    "AttrSpec",
    "InferContext",
    "OpAttrError",
    "OpDef",
    "OpError",
    "OpTypeError",
    "get_op",
    "list_ops",
    "make_call",
    "normalize_attrs",
    "register_op",
]
