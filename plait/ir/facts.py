"""Facts about a module that hold for every run: what a frontend knows and the compiler
may use.

The one kind of fact today is the **range of a symbolic size**: the module attribute
``dim_ranges`` maps a symbolic size name to ``(min, max)`` — inclusive bounds, ``max``
None when unbounded — e.g. ``{"batch": (1, 64)}``.  The PyTorch importer writes the
ranges of ``torch.export.Dim`` (``ep.range_constraints``); a user may write them in the
text format (``@module(attrs={"dim_ranges": {"n": (1, 64)}})``).  Names are those of the
symbolic sizes in the module's function signatures (one namespace for the module).

Built executables carry the ranges (attribute ``dim_ranges``, ``[min, max]`` lists) and
the VM refuses an argument whose size falls outside its range, naming the parameter, the
axis and the range.  Passes may rely on a size being within its range (e.g. a lower bound
of 2 means the size is never 1, so it never broadcasts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.errors import PlaitError

DIM_RANGES = "dim_ranges"
"""The module attribute holding the ranges of symbolic sizes."""

DimRange = tuple[int, int | None]
"""Inclusive bounds of a symbolic size; ``None`` as the upper bound: unbounded."""


class FactError(PlaitError, ValueError):
    """A malformed fact (a range with a bad name or bounds)."""


def check_dim_ranges(ranges: Any, where: str = "dim_ranges") -> dict[str, DimRange]:
    """``ranges`` checked and normalized to ``{name: (min, max)}`` with Python ints;
    raises :class:`FactError` naming the bad entry."""
    if not isinstance(ranges, Mapping):
        raise FactError(f"{where} must be a mapping of symbolic size names to (min, max), "
                        f"got {type(ranges).__name__}")
    out: dict[str, DimRange] = {}
    for name, bounds in ranges.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise FactError(f"{where}: {name!r} is not a symbolic size name (an identifier)")
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise FactError(f"{where}[{name!r}] must be (min, max), got {bounds!r}")
        lo, hi = bounds
        if isinstance(lo, bool) or not isinstance(lo, int) or lo < 0:
            raise FactError(f"{where}[{name!r}]: the lower bound must be an int >= 0, got {lo!r}")
        if hi is not None and (isinstance(hi, bool) or not isinstance(hi, int) or hi < lo):
            raise FactError(
                f"{where}[{name!r}]: the upper bound must be None or an int >= {lo}, got {hi!r}"
            )
        out[name] = (int(lo), None if hi is None else int(hi))
    return out


def dim_ranges(mod: Any) -> dict[str, DimRange]:
    """The ranges of symbolic sizes recorded in module ``mod`` (empty if none)."""
    ranges = mod.attrs.get(DIM_RANGES)
    return {} if ranges is None else check_dim_ranges(ranges)


def with_dim_ranges(mod: Any, ranges: Mapping[str, DimRange]) -> Any:
    """``mod`` with ``ranges`` merged into its ``dim_ranges`` (a new module)."""
    merged = dict(dim_ranges(mod))
    merged.update(check_dim_ranges(ranges))
    return mod.with_attrs(**{DIM_RANGES: merged})


def dim_range_text(bounds: DimRange) -> str:
    """``[2, 64]`` or ``[2, inf)``."""
    lo, hi = bounds
    return f"[{lo}, {hi}]" if hi is not None else f"[{lo}, inf)"


__all__ = ["DIM_RANGES", "DimRange", "FactError", "check_dim_ranges", "dim_range_text",
           "dim_ranges", "with_dim_ranges"]
