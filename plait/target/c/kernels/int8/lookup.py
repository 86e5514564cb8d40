"""The call record of ``plait_qlookup`` (``plait_qelementwise.c``): a 256-entry table
applied to an 8-bit tensor, each code's bit pattern its index.  A dispatch pass decides
what the table computes (it names no op)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.ir.expr import Constant, Expr

from ..wrapper import Buffer, NativeCall, Ref, emit_call


@dataclass
class QLookupCall:
    """``plait_qlookup``: ``out = table[x]`` for the 8-bit ``x`` and the 256 8-bit
    ``table`` entries (``out`` of the table's dtype, ``out_shape`` x's shape)."""

    x: Expr
    table: np.ndarray
    out_shape: tuple[int, ...]

    def wrapper(self) -> tuple[str, str, object, list[Expr]]:
        """(symbol, C code, CFunction, the call's arguments in order)."""
        table = np.ascontiguousarray(self.table)
        if table.shape != (256,) or table.dtype.name not in ("uint8", "int8"):
            raise ValueError(f"QLookupCall: the table must hold 256 uint8/int8 entries, "
                             f"got {table.dtype} {table.shape}")
        xdt = str(self.x.ty.dtype)  # type: ignore[union-attr]
        shape = self.out_shape
        call = NativeCall("qlookup", "plait_qlookup",
                          (Buffer("table", (256,), "uint8"), Buffer("x", shape, xdt),
                           Buffer("out", shape, table.dtype.name, out=True)),
                          (int(np.prod(shape)), Ref("table"), Ref("x"), Ref("out")),
                          guard=False)
        name, code, fn = emit_call(call)
        return name, code, fn, [Constant(table.view(np.uint8)), self.x]


__all__ = ["QLookupCall"]
