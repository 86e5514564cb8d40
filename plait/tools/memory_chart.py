"""The memory plan of a build-phase function as a lifetime chart (SVG).

Every tensor placed in a storage (``builtin.tensor_from_storage``) is a rectangle: from
the binding that places it to its last use along x, its bytes ``[offset, offset +
size)`` along y.  Two rectangles that overlap would be two live tensors sharing bytes —
the bug a memory plan must never have.  Tensors allocated on their own
(``builtin.alloc_tensor``) are listed beside it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from ..ir.expr import Call, Function, Op, SeqExpr, Var
from ..ir.visitor import used_vars

W, H, PAD = 860, 320, 46


@dataclass
class Lifetime:
    """A tensor of the plan: name, storage, byte range and binding range."""

    name: str
    storage: str
    offset: int
    nbytes: int
    start: int
    end: int


def lifetimes(func: Function) -> tuple[list[Lifetime], list[tuple[str, int]], dict[str, int]]:
    """(placed tensors, own allocations (name, bytes), storages (name -> bytes))."""
    body = func.body
    if not isinstance(body, SeqExpr):
        return [], [], {}
    bindings = [b for blk in body.blocks for b in blk.bindings]
    placed: dict[Var, Lifetime] = {}
    own: list[tuple[str, int]] = []
    storages: dict[str, int] = {}
    for i, b in enumerate(bindings):
        v = b.value
        if isinstance(v, Call) and isinstance(v.op, Op):
            name = v.op.name
            if name == "builtin.alloc_storage":
                if type(v.attrs["nbytes"]) is int:   # (a symbolic plan is not drawn)
                    storages[b.var.name_hint] = int(v.attrs["nbytes"])
            elif name in ("builtin.tensor_from_storage", "builtin.alloc_tensor"):
                shape = tuple(v.attrs["shape"])
                size = int(np.prod([d if isinstance(d, int) else 1 for d in shape],
                                   dtype=np.int64)) * np.dtype(v.attrs["dtype"]).itemsize
                if name == "builtin.alloc_tensor":
                    own.append((b.var.name_hint, size))
                elif getattr(v.args[0], "name_hint", "?") in storages:
                    src = v.args[0]
                    placed[b.var] = Lifetime(b.var.name_hint, getattr(src, "name_hint", "?"),
                                             int(v.attrs["offset"]), size, i, i)
        for u in used_vars(v):
            lt = placed.get(u)
            if lt is not None:
                lt.end = max(lt.end, i)
    for u in used_vars(body.body):
        lt = placed.get(u)
        if lt is not None:
            lt.end = len(bindings)
    return list(placed.values()), own, storages


def render_memory(func: Function) -> str:
    """The chart and the figures (peak bytes, planned vs naive) as HTML."""
    lts, own, storages = lifetimes(func)
    planned = func.attrs.get("planned_bytes")
    naive = func.attrs.get("naive_bytes")
    facts = []
    if planned is not None:
        facts.append(f"peak planned bytes: <b>{int(planned):,}</b>")
    if naive is not None:
        facts.append(f"without a plan: {int(naive):,}")
    facts.append(f"storages: {', '.join(f'{k} ({v:,} B)' for k, v in storages.items()) or 'none'}")
    facts.append(f"tensors allocated on their own: {len(own)} "
                 f"({sum(s for _, s in own):,} B)")
    head = "<p>" + " · ".join(facts) + "</p>"
    if not lts:
        return head + '<p class="note">no tensor is placed in a storage (no memory plan).</p>'
    t_max = max(lt.end for lt in lts) + 1
    b_max = max(max(lt.offset + lt.nbytes for lt in lts), 1)
    sx = (W - 2 * PAD) / max(t_max, 1)
    sy = (H - 2 * PAD) / b_max
    out = [f'<svg class="memory" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}"><title>memory plan</title>',
           f'<line class="axis" x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}"/>',
           f'<line class="axis" x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}"/>',
           f'<text class="axislabel" x="{W / 2}" y="{H - 12}">binding (time) →</text>',
           f'<text class="axislabel" x="12" y="{PAD - 14}">bytes ↑ (peak {b_max:,})</text>']
    for i, lt in enumerate(lts):
        x = PAD + lt.start * sx
        w = max((lt.end - lt.start + 1) * sx, 2.0)
        y = H - PAD - (lt.offset + lt.nbytes) * sy
        h = max(lt.nbytes * sy, 1.5)
        hue = (i * 47) % 360
        out.append(f'<rect class="tensor" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
                   f'height="{h:.1f}" fill="hsl({hue},55%,62%)"><title>'
                   f"{html.escape(lt.name)}: {lt.nbytes:,} B at offset {lt.offset:,} of "
                   f"{html.escape(lt.storage)}, bindings {lt.start}–{lt.end}</title></rect>")
    out.append("</svg>")
    return head + "".join(out)


__all__ = ["Lifetime", "lifetimes", "render_memory"]
