"""Run-time sizes in the ``c`` target's native call wrappers.

A wrapper of a native kernel family (``plait_gemm.c``, ``plait_conv.c``...) fills the
family's descriptor (``plait_gemm_problem``, ``plait_conv2d_desc``...) and calls it.
With static shapes every field is a constant; with symbolic ones (issue 29: a model
exported with dynamic batch and sequence) the wrapper takes the sizes at run time:
its :class:`~plait.codegen.c.CFunction` declares the symbolic dimensions of its buffers
as size variables, which the VM (and the single entry point) bind from the shapes of
the arguments of each call, and the fields are C expressions over them.

:class:`SizeArgs` names those variables (``n0``, ``n1``... in order of first appearance
in the parameters, the order the typed ABI passes them in) and writes any dimension
(an ``int``, a symbolic name or a :class:`~plait.ir.symbolic.SymExpr` over names the
parameters bind) as C.  A dimension whose names no parameter binds cannot be written:
:class:`~plait.codegen.c.sizes.UnboundSize`, and the dispatch rule leaves that call
alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.codegen.c.sizes import C_PRELUDE, c_dim
from plait.ir.symbolic import Dim, product

from .shapes import is_static_shape

__all__ = ["C_PRELUDE", "Prod", "SizeArgs"]


class Prod(tuple):  # type: ignore[type-arg]
    """A product of dimensions kept as its factors (a descriptor field such as a matrix
    product's rows, ``batch * seq``), so it is written as the product of their size
    arguments: :meth:`SizeArgs.c`.  ``Prod.of(a, b...)`` flattens nested products and
    folds a static one to an int."""

    @staticmethod
    def of(*dims: Any) -> Dim | Prod:
        flat: list[Dim] = []
        for d in dims:
            flat.extend(d if isinstance(d, Prod) else (d,))
        if all(type(d) is int for d in flat):
            return product(flat)
        return Prod(flat)


class SizeArgs:
    """The size variables of a wrapper whose parameters have the shapes ``params``
    (``[(shape, dtype), ...]`` in parameter order: inputs, then outputs)."""

    def __init__(self, params: Sequence[tuple[Sequence[Dim], str]]) -> None:
        self.names: dict[Any, str] = {}
        for shape, _ in params:
            for d in shape:
                if type(d) is not int and d not in self.names:
                    self.names[d] = f"n{len(self.names)}"
        self.params = tuple(
            (tuple(d if type(d) is int else self.names[d] for d in shape), dtype)
            for shape, dtype in params)

    @property
    def static(self) -> bool:
        """Whether every parameter's shape is static (no size variables)."""
        return not self.names

    def c_params(self) -> list[str]:
        """The C parameters of the size variables, in ABI order."""
        return [f"int64_t {n}" for n in self.names.values()]

    def c(self, d: Dim | Prod) -> str:
        """``d`` (or a :class:`Prod`) as a C ``int64_t`` expression over the size
        variables; :class:`UnboundSize` when it names a size the parameters do not bind."""
        if isinstance(d, Prod):
            return self.prod(d)
        return c_dim(d, self.names)

    def empty_guard(self, shape: Sequence[Dim]) -> str:
        """A C line returning 0 (success, nothing to do) when ``shape`` has no elements
        at run time (a batch of 0); empty for a static shape, which dispatch only takes
        when it has elements."""
        if is_static_shape(shape):
            return ""
        return f"    if ({self.prod(shape)} == 0) return 0;\n"

    def prod(self, dims: Sequence[Dim]) -> str:
        """The product of ``dims`` as C, each written by itself (a dimension that is an
        expression is a size argument of its own; their product as one expression may
        name sizes no argument binds), static factors folded."""
        static = product(d for d in dims if type(d) is int)
        parts = [self.c(d) for d in dims if type(d) is not int]
        if not parts:
            return str(static)
        return "(" + "*".join(parts + ([] if static == 1 else [f"INT64_C({static})"])) + ")"
