"""Operators: the registry and the core operator set."""

# importing the op modules registers the ops
from ..runtime.call_schema import register_keyword_check
from ..runtime.numpy_ops import IMPLS
from . import create, elementwise, index, linalg, lowlevel, manipulate, nn, reduce  # noqa: F401
from .registry import (
    AttrSpec,
    InferContext,
    OpAttrError,
    OpDef,
    OpError,
    OpTypeError,
    get_op,
    keyword_check,
    list_ops,
    make_call,
    normalize_attrs,
    register_op,
)

for _def in list_ops():   # the ops' runtime functions check their keywords by the schema
    if _def.name in IMPLS:
        for _func in (f"numpy.{_def.name}", f"numpy.{_def.name}@alloc"):
            register_keyword_check(_func, keyword_check(_def))

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
