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
  depthwise 3x3/5x5, stride 1 or 2) — and ``threads`` as for ``gemm``.

The dispatch rules (:mod:`plait.target.c.dispatch`) take a point for each call
(:mod:`.choose`: the database's, else the default) and validate it against the space:
a point outside it is never used.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
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


def _thread_values(threads: int, parallel: bool) -> tuple[int, ...]:
    """0 (the pool's count) and the smaller thread counts, when the call can run on
    several threads; 0 alone otherwise."""
    if not parallel or threads < 2:
        return (0,)
    return (0, *range(1, threads))


CONV2D_ALGORITHMS = ("direct", "pixel_rows", "winograd2", "winograd4")
"""The ways the ``conv`` and ``winograd`` families compute an ungrouped convolution."""


def conv2d_space(desc: Mapping[str, Any], winograd: int | str) -> SearchSpace | None:
    """The space of an ungrouped float32 convolution of static shape (``desc``: the
    fields of ``plait_conv2d_desc``) under the target's ``winograd`` attribute ("auto",
    0, 2, 4: a forced variant leaves no choice where Winograd applies, 0 leaves none of
    it); None when the shape is not static."""
    from ..dispatch.gemm import pixel_rows_applies, winograd_applies, winograd_choice

    if any(type(desc[k]) is not int for k in ("N", "H", "W", "OH", "OW")):
        return None
    applies = bool(winograd) and winograd_applies(dict(desc))
    if applies and winograd in (2, 4):
        algos: tuple[str, ...] = (f"winograd{int(winograd)}",)
    else:
        algos = ("direct", "pixel_rows") + (("winograd2", "winograd4") if applies else ())
    wino = winograd_choice(dict(desc), winograd)
    default = (f"winograd{wino}" if wino else
               "pixel_rows" if pixel_rows_applies(dict(desc)) else "direct")
    return SearchSpace("conv2d", (Choice("algorithm", algos, "how the convolution is "
                                         "computed"),), (("algorithm", default),))


GEMM_MIN_PARALLEL = 1 << 18
"""``PLAIT_GEMM_MIN_PARALLEL`` of ``plait_gemm.c``: smaller products run on one thread."""


def gemm_space(desc: Mapping[str, Any], threads: int) -> SearchSpace | None:
    """The space of a float32 product of static sizes (``desc``: ``M``, ``N``, ``K``,
    ``batch``...) on a machine of ``threads`` threads; None when a size is symbolic."""
    if any(type(desc[k]) is not int for k in ("M", "N", "K", "batch")):
        return None
    work = desc["M"] * desc["N"] * max(desc["K"], 1) * desc["batch"]
    values = _thread_values(threads, work >= GEMM_MIN_PARALLEL)
    return SearchSpace("gemm", (Choice("threads", values, "at most this many threads "
                                       "(0: all)"),), (("threads", 0),))


DWCONV_LAYOUTS = {"auto": 0, "planes": 1, "lanes": 2, "rows": 3}
"""The layouts of ``plait_dwconv2d`` and their values of ``plait_dwconv2d_desc.layout``."""

DWCONV_MIN_PARALLEL = 131072
"""The work (multiply-adds) from which ``plait_dwconv2d`` runs on several threads."""


def dwconv_space(desc: Mapping[str, Any], threads: int) -> SearchSpace | None:
    """The space of a grouped convolution of static shape (``desc``: the fields of
    ``plait_dwconv2d_desc``); None when the batch or the image is symbolic."""
    if any(type(desc[k]) is not int for k in ("N", "H", "W", "OH", "OW")):
        return None
    cg, og = desc["C"] // desc["G"], desc["O"] // desc["G"]
    layouts = ["auto", "planes"]
    if cg == 1 and og == 1:
        layouts.append("lanes")
    if (cg == 1 and og == 1 and desc["SH"] == desc["SW"] and desc["SH"] in (1, 2)
            and desc["DH"] == desc["DW"] == 1 and desc["KH"] == desc["KW"]
            and desc["KH"] in (3, 5)):
        layouts.append("rows")
    work = (desc["N"] * desc["O"] * desc["OH"] * desc["OW"] * desc["KH"] * desc["KW"] * cg)
    values = _thread_values(threads, work >= DWCONV_MIN_PARALLEL)
    return SearchSpace("dwconv2d", (
        Choice("layout", tuple(layouts), "where the kernel puts the pixels and channels"),
        Choice("threads", values, "at most this many threads (0: all)")),
        (("layout", "auto"), ("threads", 0)))


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


__all__ = ["CONV2D_ALGORITHMS", "DWCONV_LAYOUTS", "Choice", "Point", "SearchSpace",
           "call_key", "conv2d_space", "dwconv_space", "gemm_space", "point_text"]
