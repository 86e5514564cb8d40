"""The ranges of symbolic sizes that ``torch.onnx.export(..., dynamo=True)`` records.

The dynamo exporter writes the exported program's range constraints into the graph's
``metadata_props``, under the key :data:`RANGES_KEY`, as the text of a dict from
torch's own size symbols to value ranges::

    {s17: VR[1, 8], s27: VR[6, 64], s94: VR[2, int_oo]}

The graph inputs keep those symbols as their ``dim_param`` unless ``dynamic_shapes``
named the axes with ``torch.export.Dim("batch", ...)``: then the exporter renames the
``dim_param`` to the ``Dim``'s name and the file no longer says which symbol became
which name (checked with torch 2.13: the names appear in the inputs' types only, the
symbols in this one entry only).  :func:`recorded_ranges` matches them back where it
can tell:

1. a ``dim_param`` that is a symbol of the constraints takes its range;
2. a renamed size takes the range of the one symbol that torch derives from the
   input's name and axis (``s<k>`` with ``k = sha256("L['x'].size()[0]") % 100``, how
   torch's ``ShapeEnv`` numbers a size it first meets on that input; the name is
   torch's, which the input's metadata keeps under :data:`ORIGINAL_NAME_KEY` when
   ``input_names=`` renamed it; one of the axes that share the size must give it, and
   no other name may claim it);
3. the sizes still unmatched take the ranges still unclaimed when those are all the
   same range and as many as the sizes.

A size matched by none of these gets no range (``from_onnx(dim_ranges=...)`` gives
one); a size the constraints leave unbounded above gets ``None`` as its maximum.
"""

from __future__ import annotations

import hashlib
import re

import onnx

from .dtypes import sanitize

RANGES_KEY = "pkg.torch.export.ExportedProgram.range_constraints"
"""The graph metadata key of the dynamo exporter's range constraints."""
ORIGINAL_NAME_KEY = "pkg.torch.onnx.original_node_name"
"""An input's metadata key naming it as torch did (before ``input_names=``)."""

_ENTRY = re.compile(r"([A-Za-z_]\w*)\s*:\s*VR\[\s*(-?\w+)\s*,\s*(-?\w+)\s*\]")

Range = tuple[int, int | None]


def _bound(text: str) -> int | None:
    """An end of a value range: an int, or None for torch's ``int_oo``/``-int_oo``."""
    try:
        return int(text)
    except ValueError:
        return None


def parse_constraints(text: str) -> dict[str, Range]:
    """``{s17: VR[1, 8], s94: VR[2, int_oo]}`` as ``{"s17": (1, 8), "s94": (2, None)}``
    (size symbols only: ``s<k>``; a lower end below 0 or unbounded becomes 0)."""
    out: dict[str, Range] = {}
    for name, lo, hi in _ENTRY.findall(text):
        if not re.fullmatch(r"s\d+", name):
            continue   # unbacked sizes (u0: a nonzero's count) are no input's size
        low = _bound(lo)
        out[name] = (max(low, 0) if low is not None else 0, _bound(hi))
    return out


def _torch_symbol(input_name: str, axis: int) -> str:
    """The symbol torch's ShapeEnv first tries for size ``axis`` of input ``input_name``."""
    source = f"L['{input_name}'].size()[{axis}]"
    return f"s{int(hashlib.sha256(source.encode()).hexdigest(), 16) % 100}"


def recorded_ranges(model: onnx.ModelProto) -> dict[str, Range]:
    """The ranges of the graph inputs' symbolic sizes (by their sanitized names, as
    the import names them) that the exporter recorded; empty when it recorded none."""
    text = None
    for prop in list(model.graph.metadata_props) + list(model.metadata_props):
        if prop.key == RANGES_KEY:
            text = prop.value
    if not text:
        return {}
    constraints = parse_constraints(text)
    inits = {t.name for t in model.graph.initializer}
    axes: dict[str, list[tuple[str, int]]] = {}   # dim_param -> (input, axis) it sizes
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        # torch's name of the input (its forward's parameter), which input_names= hides
        meta = {p.key: p.value for p in vi.metadata_props}
        source = meta.get(ORIGINAL_NAME_KEY, vi.name)
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_param") and d.dim_param:
                axes.setdefault(d.dim_param, []).append((source, axis))
    found: dict[str, Range] = {}
    free = dict(constraints)
    for name in axes:                                     # 1: the symbol itself
        if name in free:
            found[name] = free.pop(name)
    open_names = [n for n in axes if n not in found]
    claims: dict[str, list[str]] = {}                     # 2: torch's numbering
    for name in open_names:
        for sym in {_torch_symbol(i, a) for i, a in axes[name]} & set(free):
            claims.setdefault(sym, []).append(name)
    for sym, names in claims.items():
        mine = [s for s, ns in claims.items() if names[0] in ns]
        if len(names) == 1 and len(mine) == 1:
            found[names[0]] = free.pop(sym)
    open_names = [n for n in axes if n not in found]      # 3: one range for all left
    if open_names and len(open_names) == len(free) and len(set(free.values())) == 1:
        only = next(iter(free.values()))
        found.update({n: only for n in open_names})
    return {sanitize(n): r for n, r in found.items()}
