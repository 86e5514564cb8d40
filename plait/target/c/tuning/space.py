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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Value = int | str
Point = dict[str, Value]


@dataclass(frozen=True)
class Choice:
    """One choice of a call: its ``name``, its valid ``values`` (in order), what it
    means (``doc``) and where it is free (``when``: ``((other choice, its values),
    ...)``; a point outside that takes the first value, the neutral one: a thread
    split means nothing to an algorithm that does not run the product)."""

    name: str
    values: tuple[Value, ...]
    doc: str = field(default="", compare=False)
    when: tuple[tuple[str, tuple[Value, ...]], ...] = ()

    def free(self, point: Mapping[str, Any]) -> bool:
        """Whether this choice may take any of its values at ``point``."""
        return all(point.get(k) in vs for k, vs in self.when)


@dataclass(frozen=True)
class SearchSpace:
    """The choices of one call of ``family`` and the default point (the heuristic's)."""

    family: str
    choices: tuple[Choice, ...]
    default: tuple[tuple[str, Value], ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.choices]
        for c in self.choices:
            if any(k not in names or k == c.name for k, _ in c.when):
                raise ValueError(f"search space {self.family}: choice {c.name} depends on "
                                 f"{[k for k, _ in c.when]}, not other choices of {names}")
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
        if not all(point[c.name] in c.values and type(point[c.name]) is type(
                c.values[c.values.index(point[c.name])]) for c in self.choices):
            return False
        return all(c.free(point) or point[c.name] == c.values[0] for c in self.choices)

    def complete(self, point: Mapping[str, Any]) -> Point:
        """``point`` with each choice it does not name at that choice's first value (0
        or ``auto``: the kernel's rule), so that the record of a space that had fewer
        choices (an older plait's: ``{"algorithm": "pixel_rows"}``) means the call it
        built then; a name the space does not have is kept (:meth:`contains` refuses
        it)."""
        if not isinstance(point, Mapping):
            return point  # type: ignore[return-value]
        return {**{c.name: c.values[0] for c in self.choices if c.name not in point},
                **point}

    def restricted(self, names: Iterable[str]) -> SearchSpace:
        """The space in which only the choices ``names`` vary: every other choice keeps
        its default value (``plait tune --choices``: a search of the algorithms alone, in
        a short budget)."""
        keep = set(names)
        d = dict(self.default)
        return SearchSpace(self.family, tuple(
            c if c.name in keep else Choice(c.name, (d[c.name],), c.doc)
            for c in self.choices), self.default)

    def distance(self, point: Mapping[str, Any]) -> int:
        """How many choices ``point`` sets otherwise than the default point."""
        d = dict(self.default)
        return sum(point[k] != v for k, v in d.items())

    def points(self) -> list[Point]:
        """Every point of the space: the default first, then the others by
        :meth:`distance` from it (one choice changed before two: the tuner tries each
        choice's values around the heuristic's point before their combinations), and
        among those each choice's first values before its later ones."""
        names = [c.name for c in self.choices]
        default = self.default_point()
        rest = [p for p in (dict(zip(names, values)) for values in
                            itertools.product(*(c.values for c in self.choices)))
                if p != default and self.contains(p)]
        return [default, *sorted(rest, key=lambda p: (self.distance(p), self._rank(p)))]

    def _rank(self, point: Mapping[str, Any]) -> int:
        """The latest position among its choice's values of a value ``point`` sets
        otherwise than the default: each choice's first values before any choice's
        later ones."""
        d = dict(self.default)
        return max((c.values.index(point[c.name]) for c in self.choices
                    if point[c.name] != d[c.name]), default=0)

    def size(self) -> int:
        """The number of points (:meth:`points`)."""
        if not any(c.when for c in self.choices):
            n = 1
            for c in self.choices:
                n *= len(c.values)
            return n
        return len(self.points())

    def as_json(self) -> dict[str, Any]:
        """The space as plain data (for reports and the tuner; :meth:`from_json`
        reads it back)."""
        out: dict[str, Any] = {"family": self.family,
                               "choices": {c.name: list(c.values) for c in self.choices},
                               "default": self.default_point()}
        when = {c.name: {k: list(vs) for k, vs in c.when} for c in self.choices if c.when}
        if when:
            out["when"] = when
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SearchSpace:
        """The space :meth:`as_json` gave."""
        when = data.get("when") or {}
        choices = tuple(Choice(k, tuple(v), when=tuple(
            (o, tuple(vs)) for o, vs in (when.get(k) or {}).items()))
            for k, v in data["choices"].items())
        return cls(data["family"], choices, tuple(sorted(data["default"].items())))


def point_text(point: Mapping[str, Any]) -> str:
    """A point as canonical JSON (sorted keys): how the database stores it."""
    return json.dumps(dict(point), sort_keys=True, separators=(",", ":"))


def point_label(point: Mapping[str, Any] | None, space: Mapping[str, Any] | None = None) -> str:
    """A point as short text for reports: ``name=value`` of its space's first choice and
    of every other choice that is not at its first value (0 or ``auto``: the kernel's
    rule), e.g. ``algorithm=direct, kc=96``; every choice without the space (``space``:
    :meth:`SearchSpace.as_json`)."""
    if not point:
        return ""
    choices = (space or {}).get("choices") or {}
    if not choices:
        return ", ".join(f"{k}={v}" for k, v in sorted(point.items()))
    names = list(choices)
    shown = [k for i, k in enumerate(names) if k in point
             and (i == 0 or not choices[k] or point[k] != list(choices[k])[0])]
    return ", ".join(f"{k}={point[k]}" for k in shown)


def thread_values(threads: int, parallel: bool) -> tuple[int, ...]:
    """The values of a ``threads`` choice: 0 (the pool's count) and the smaller thread
    counts, when the call can run on several threads; 0 alone otherwise."""
    if not parallel or threads < 2:
        return (0,)
    return (0, *range(1, threads))


CHOICE_NAMES = ("algorithm", "layout", "threads", "split", "kc", "mc", "nc")
"""The names of the choices of the c target's spaces (the dispatch rules', docs/tuning.md):
the tuner's cost model has a feature for each, ``plait tune --choices`` takes them."""


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


__all__ = ["CHOICE_NAMES", "SPACES", "Choice", "Point", "SearchSpace", "call_key", "point_label",
           "point_text", "register_space", "thread_values"]
