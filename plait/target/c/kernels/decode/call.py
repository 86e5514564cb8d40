"""A call wrapper of the decode family: what a dispatch rule records and calls."""

from __future__ import annotations

from dataclasses import dataclass

from plait.codegen.c import CFunction


@dataclass(frozen=True)
class DecodeCall:
    """A C wrapper of a decode-family function for one shape: its ``symbol``, C ``code``
    and :class:`CFunction` (inputs, the output, then the size arguments)."""

    symbol: str
    code: str
    function: CFunction


__all__ = ["DecodeCall"]
