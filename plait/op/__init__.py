"""Operators: the registry and the core operator set."""

# importing the op modules registers the ops
from . import create, elementwise, index, linalg, lowlevel, manipulate, nn, reduce  # noqa: F401
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
