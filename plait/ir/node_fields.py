"""Field tables shared by the generic traversals (structural equality, hashing,
visitors): which fields of a node class are compared, which define variables.

A node class may declare ``_def_fields`` (fields whose variables are *defined* there,
such as function parameters or a binding's variable) and ``_var_class = True`` (its
instances are variables compared up to renaming).  Both are read through
:func:`node_fields`, cached per class.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from .expr import Binding, Function, Node, Var

SKIPPED_FIELDS = frozenset({"span"})

# Where variables are defined in the graph IR.  Kernel IR classes declare their own.
Function._def_fields = ("params",)  # type: ignore[attr-defined]
Binding._def_fields = ("var",)  # type: ignore[attr-defined]
Var._var_class = True  # type: ignore[attr-defined]


@cache
def node_fields(cls: type) -> tuple[str, ...]:
    """The compared fields of a node class, in declaration order, with definition
    fields first so that variables are bound before they are used."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in SKIPPED_FIELDS]
    defs = def_fields(cls)
    return tuple([n for n in names if n in defs] + [n for n in names if n not in defs])


@cache
def def_fields(cls: type) -> frozenset[str]:
    return frozenset(getattr(cls, "_def_fields", ()))


@cache
def is_var_class(cls: type) -> bool:
    return bool(getattr(cls, "_var_class", False))


def is_node(x: object) -> bool:
    return isinstance(x, Node)
