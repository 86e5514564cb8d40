"""Search spaces as data: the choices a kernel family can take for one call.

Each family that has choices declares them for a call (its descriptor: shapes, strides,
padding...) as a :class:`SearchSpace`: named :class:`Choice` s with their valid values
and the **default point**, what the present heuristic picks (so a build without a
tuning database computes exactly what it did before the spaces existed).  A point is a
plain ``{choice: value}`` dict (JSON in the tuning database, :mod:`.db`).

* ``conv2d`` (families ``conv`` and ``winograd``): ``algorithm`` — ``direct`` (the
  implicit im2col product, channels as the tile's rows), ``pixel_rows`` (the transposed
  product: pixels as rows), ``winograd2`` / ``winograd4`` (Winograd F(2x2, 3x3) /
  F(4x4, 3x3), where :func:`~plait.target.c.dispatch.gemm.winograd_applies`); the
  default is :func:`~plait.target.c.dispatch.gemm.winograd_choice` then
  :func:`~plait.target.c.dispatch.gemm.pixel_rows_applies`.
* ``gemm`` (``linear``, ``matmul``): ``threads`` — 0 (the pool's count, the default)
  or a smaller thread count (``plait_gemm_problem.max_threads``), when the product is
  large enough to run on several threads at all.
* ``dwconv2d`` (grouped and depthwise convolutions): ``layout`` — ``auto`` (the
  kernel's own rule, which depends on the vector width of the ISA copy the CPU runs:
  the default), ``planes`` (each output plane on the register tile), ``lanes``
  (channels in the vector lanes; depthwise only), ``rows`` (rows read in place;
  depthwise 3x3/5x5, stride 1 or 2), and with constant weights and several channels
  per group ``product`` / ``product_rows`` (the ``conv`` family's product per group,
  channels or pixels as the tile's rows) and, 3x3 stride 1 with at least 16 channels
  per group, ``winograd2`` / ``winograd4`` (the default from 8 channels per group:
  Winograd where it pays for one group, else ``product``) — and ``threads`` as for
  ``gemm``.

Each space is declared next to the heuristic it generalizes, by the dispatch rule that
takes its points (``conv2d_space`` and ``gemm_space`` in
:mod:`plait.target.c.dispatch.gemm`, ``dwconv_space`` in
:mod:`plait.target.c.dispatch.depthwise`), and registered here (:data:`SPACES`).  The
rules take a point for each call (:mod:`.choose`: the database's, else the default) and
validate it against the space: a point outside it is never used.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Value = int | str
Point = dict[str, Value]


@dataclass(frozen=True)
class Choice:
    """One choice of a call: its ``name``, its valid ``values`` (in order) and what it
    means (``doc``)."""

    name: str
    values: tuple[Value, ...]
    doc: str = ""


@dataclass(frozen=True)
class SearchSpace:
    """The choices of one call of ``family`` and the default point (the heuristic's)."""

    family: str
    choices: tuple[Choice, ...]
    default: tuple[tuple[str, Value], ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.choices]
        if sorted(names) != sorted(k for k, _ in self.default):
            raise ValueError(f"search space {self.family}: the default point names "
                             f"{sorted(k for k, _ in self.default)}, the choices {names}")
        if not self.contains(dict(self.default)):
            raise ValueError(f"search space {self.family}: the default point "
                             f"{dict(self.default)} is not in it")

    def default_point(self) -> Point:
        """The heuristic's point."""
        return dict(self.default)

    def contains(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point`` names every choice once with a valid value."""
        if not isinstance(point, Mapping) or set(point) != {c.name for c in self.choices}:
            return False
        return all(point[c.name] in c.values and type(point[c.name]) is type(
            c.values[c.values.index(point[c.name])]) for c in self.choices)

    def points(self) -> list[Point]:
        """Every point of the space (the default first)."""
        names = [c.name for c in self.choices]
        out = [self.default_point()]
        for values in itertools.product(*(c.values for c in self.choices)):
            p = dict(zip(names, values))
            if p != out[0]:
                out.append(p)
        return out

    def size(self) -> int:
        n = 1
        for c in self.choices:
            n *= len(c.values)
        return n

    def as_json(self) -> dict[str, Any]:
        """The space as plain data (for reports and the tuner)."""
        return {"family": self.family,
                "choices": {c.name: list(c.values) for c in self.choices},
                "default": self.default_point()}


def point_text(point: Mapping[str, Any]) -> str:
    """A point as canonical JSON (sorted keys): how the database stores it."""
    return json.dumps(dict(point), sort_keys=True, separators=(",", ":"))


def thread_values(threads: int, parallel: bool) -> tuple[int, ...]:
    """The values of a ``threads`` choice: 0 (the pool's count) and the smaller thread
    counts, when the call can run on several threads; 0 alone otherwise."""
    if not parallel or threads < 2:
        return (0,)
    return (0, *range(1, threads))


SPACES: dict[str, Callable[..., SearchSpace | None]] = {}
"""The space of each family's call, by family name (registered by the dispatch rules
that take the points: :func:`register_space`)."""


SpaceFn = Callable[..., "SearchSpace | None"]


def register_space(family: str, fn: SpaceFn) -> SpaceFn:
    """Register ``fn`` (a call's descriptor and settings -> its space, or None) as the
    search space of ``family``'s calls."""
    SPACES[family] = fn
    return fn


def call_key(op: str, desc: Mapping[str, Any], dtype: str = "float32",
             attrs: Mapping[str, Any] | None = None) -> str:
    """The canonical text of a call (op, its descriptor of shapes and attributes, its
    dtype): the tuning database's key, with the machine's."""
    body = {"op": op, "dtype": dtype,
            "desc": {k: (v if isinstance(v, (int, float, str)) else str(v))
                     for k, v in sorted(desc.items())}}
    if attrs:
        body["attrs"] = dict(sorted(attrs.items()))
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


__all__ = ["SPACES", "Choice", "Point", "SearchSpace", "call_key", "point_text",
           "register_space", "thread_values"]
