"""Limits: the budget of what a file or a model may ask plait to do.

A model file, a text module or an executable is data, and data can ask for absurd
amounts of work: a ``Split`` into ``2**31 - 1`` outputs, a 3 MB ``.plx`` whose deflated
constant inflates to 3 GiB, an input broadcast to 10^9 rows.  Each such request is
checked against a budget **before the work starts**, and refused with a
:class:`LimitExceeded` that names the limit, the amount asked for and how to raise it.

The budget is one frozen dataclass, :class:`Limits`, with three fields:

``max_outputs`` (default 65,536)
    the number of results one operation may produce (``split`` sections, an ONNX
    node's ``num_outputs``).  onnxruntime refuses ``Split`` with ``2**31 - 1`` outputs
    too; real models use a handful.
``max_inflated_bytes`` (default 4 GiB)
    the total bytes of an executable's compressed members once inflated (constants,
    libraries, the kept graph), checked against the sizes the archive declares before
    anything is inflated, and again while reading (a member is never read past the
    budget, whatever its header says).  Members stored uncompressed (plait writes
    constants so, to map them) do not count: their bytes are the file's own, so a file
    asks through them for no more than its size (an archive whose stored members
    declare more than it holds is refused as damaged); a 1B-parameter model's 4.4 GB
    of float32 weights loads under the default.
``max_tensor_bytes`` (default 4 GiB)
    the bytes of one tensor the VM makes: an argument it must copy (a broadcast or
    strided view, a byte-swapped array) and each tensor it allocates.

There is one way to set them, in three places, the innermost winning:

* the environment: ``PLAIT_MAX_OUTPUTS``, ``PLAIT_MAX_INFLATED_BYTES``,
  ``PLAIT_MAX_TENSOR_BYTES`` (an integer; ``0`` for no limit), read when
  :func:`current_limits` is called (so a process can set them before importing plait);
* ``with plait.use_limits(max_inflated_bytes=8 << 30): ...`` for the code in the block
  (this thread and the tasks it starts; ``contextvars``);
* the defaults above.

A limit of ``None`` (or ``0`` in the environment) turns that check off.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass

from plait.errors import PlaitError

ENV_PREFIX = "PLAIT_"
"""Environment variables are ``PLAIT_`` + the field name in upper case."""


@dataclass(frozen=True)
class Limits:
    """The budget of what a file or model may ask for (see the module's docstring);
    ``None`` for no limit."""

    max_outputs: int | None = 65_536
    max_inflated_bytes: int | None = 4 << 30
    max_tensor_bytes: int | None = 4 << 30

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"limit {f.name} must be a positive integer or None, "
                                 f"got {v!r}")


class LimitExceeded(PlaitError, ValueError):
    """A file or model asked for more than a limit of :class:`Limits` allows.

    ``limit`` is the field's name, ``requested`` the amount asked for and ``allowed``
    the limit in force."""

    def __init__(self, limit: str, requested: int, allowed: int, what: str) -> None:
        self.limit, self.requested, self.allowed = limit, requested, allowed
        env = ENV_PREFIX + limit.upper()
        super().__init__(
            f"{what}: {_amount(limit, requested)} exceeds the limit {limit} = "
            f"{_amount(limit, allowed)}; if the input is trusted, raise it with "
            f"`with plait.use_limits({limit}=...)` or the environment variable {env}")


_NO_OVERRIDE: dict[str, int | None] = {}   # (never changed: blocks set a new dict)
_OVERRIDE: contextvars.ContextVar[dict[str, int | None]] = contextvars.ContextVar(
    "plait_limits", default=_NO_OVERRIDE)  # noqa: B039


def _from_env() -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for f in dataclasses.fields(Limits):
        name = ENV_PREFIX + f.name.upper()
        text = os.environ.get(name)
        if text is None or not text.strip():
            continue
        try:
            value = int(text.strip().replace("_", ""), 0)
        except ValueError:
            raise ValueError(f"environment variable {name}={text!r} is not an integer "
                             "(0 for no limit)") from None
        if value < 0:
            raise ValueError(f"environment variable {name}={text!r} is negative "
                             "(0 for no limit)")
        out[f.name] = value or None
    return out


def current_limits() -> Limits:
    """The limits in force here: the defaults, then the environment, then the
    innermost :func:`use_limits` block."""
    return Limits(**{**_from_env(), **_OVERRIDE.get()})


@contextlib.contextmanager
def use_limits(**changes: int | None) -> Iterator[Limits]:
    """``with use_limits(max_outputs=10**6): ...`` — the given limits (``None``: no limit)
    for the code in the block; yields the limits in force inside it."""
    known = {f.name for f in dataclasses.fields(Limits)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise TypeError(f"unknown limit(s) {', '.join(unknown)}; known: "
                        f"{', '.join(sorted(known))}")
    merged = {**_OVERRIDE.get(), **changes}
    inside = Limits(**{**_from_env(), **merged})   # validates the values
    token = _OVERRIDE.set(merged)
    try:
        yield inside
    finally:
        _OVERRIDE.reset(token)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Limits)}


def limit_value(limit: str) -> int | None:
    """The value in force of the limit named ``limit`` (a field of :class:`Limits`),
    cheaply (for checks on hot paths); None for no limit."""
    override = _OVERRIDE.get()
    if limit in override:
        return override[limit]
    if os.environ.get(ENV_PREFIX + limit.upper()) is None:
        return _DEFAULTS[limit]  # type: ignore[return-value]
    return getattr(current_limits(), limit)


def check_limit(limit: str, requested: int, what: str) -> None:
    """Raise :class:`LimitExceeded` when ``requested`` exceeds the limit named
    ``limit`` (a field of :class:`Limits`) in force; ``what`` names the place."""
    allowed = limit_value(limit)
    if allowed is not None and requested > allowed:
        raise LimitExceeded(limit, requested, allowed, what)


def _amount(limit: str, n: int) -> str:
    if not limit.endswith("_bytes"):
        return f"{n:,}"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n:,} bytes ({n / (1 << shift):.1f} {unit})"
    return f"{n:,} bytes"


__all__ = ["Limits", "LimitExceeded", "check_limit", "current_limits", "limit_value",
           "use_limits"]
