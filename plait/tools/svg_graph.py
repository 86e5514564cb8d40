"""The dataflow graph of a graph function as an SVG picture, laid out by plait itself.

One node per binding (and one per parameter), coloured by where its value is computed
— a generated kernel, a fused group's kernel, a library call, an external codegen, a
graph-level op, memory — and one edge per use, labelled with the value's shape.  The
layout is layered (Sugiyama-style): a node sits one layer below the deepest value it
reads, and two barycenter sweeps order each layer.  Everything is linear in the number
of bindings and iterative.

Why our own layout and not graphviz: graphviz draws prettier graphs, but the ``dot``
program is a system package (``apt-get install graphviz``) that ``pip install plait``
cannot bring; the Python packages (pydot, graphviz) only call it.  A report must open
for every user, and an ANF function is a DAG that a layered layout draws well enough.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..ir.expr import (
    Call,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.module import IRModule
from ..ir.types import TensorType, TupleType, Type
from ..ir.visitor import used_vars
from ..kernel.ir import Kernel

KINDS = {
    "kernel": ("#4e79a7", "generated kernel"),
    "fused": ("#59a14f", "fused group (one kernel)"),
    "library": ("#f28e2b", "library call"),
    "external": ("#b07aa1", "external codegen"),
    "op": ("#9c9c9c", "graph op"),
    "memory": ("#d4c4a8", "memory (allocation)"),
    "value": ("#e0e0e0", "tuple / alias"),
    "param": ("#ffffff", "parameter"),
}
"""Node kinds: fill colour and legend text."""

NODE_W, NODE_H, GAP_X, GAP_Y = 168, 34, 26, 46
MAX_NODES = 3000
"""Functions with more bindings are not drawn (the report says so)."""


@dataclass
class Node:
    """A binding (or parameter) of the function: its label, kind, layer and place."""

    key: int
    label: str
    kind: str
    detail: str
    layer: int = 0
    x: float = 0.0
    preds: list[int] = field(default_factory=list)


def shape_text(ty: Type | None) -> str:
    """A short text of a type for edge labels: ``1x32x16x16 f32``."""
    if isinstance(ty, TensorType):
        if ty.shape is None:
            return str(ty.dtype or "?")
        dims = "x".join(str(d) for d in ty.shape) or "scalar"
        dt = (ty.dtype or "?").replace("float", "f").replace("int", "i")
        return f"{dims} {dt}"
    if isinstance(ty, TupleType):
        return "(" + ", ".join(shape_text(f) for f in ty.fields) + ")"
    return "" if ty is None else type(ty).__name__.replace("Type", "").lower()


def classify(value: Any, mod: IRModule) -> tuple[str, str]:
    """(kind, label) of a binding's value (see :data:`KINDS`)."""
    externals = _external_names(mod)
    if isinstance(value, Call):
        op = value.op
        if isinstance(op, Op):
            name = op.name
            if name in ("call_kernel", "call_extern", "builtin.call_dps",
                        "builtin.call_alloc") and value.args:
                callee = value.args[0]
                if isinstance(callee, GlobalVar):
                    k = mod.functions.get(callee.name_hint)
                    if isinstance(k, Kernel):
                        fused = callee.name_hint.startswith("fused_")
                        return ("fused" if fused else "kernel"), callee.name_hint
                    return "kernel", callee.name_hint
                if isinstance(callee, ExternFunc):
                    sym = callee.symbol
                    return ("external" if sym in externals else "library"), sym
            if name.startswith("builtin."):
                return "memory", name.removeprefix("builtin.")
            return "op", name
        if isinstance(op, GlobalVar):
            f = mod.functions.get(op.name_hint)
            if isinstance(f, Function) and f.attrs.get("compiler"):
                return "external", f"{op.name_hint} [{f.attrs['compiler']}]"
            if isinstance(f, Function) and f.attrs.get("primitive"):
                return "fused", op.name_hint
            return "op", op.name_hint
        if isinstance(op, ExternFunc):
            return ("external" if op.symbol in externals else "library"), op.symbol
        return "op", "call"
    if isinstance(value, Tuple):
        return "value", "tuple"
    if isinstance(value, TupleGetItem):
        return "value", f"item {value.index}"
    if isinstance(value, Var):
        return "value", "alias"
    return "value", type(value).__name__


def _external_names(mod: IRModule) -> set[str]:
    names: set[str] = set()
    for m in mod.attrs.get("external_mods") or ():
        for f in getattr(m, "functions", ()):
            names.add(getattr(f, "name", str(f)))
    return names


def function_graph(func: Function, mod: IRModule) -> tuple[list[Node], list[tuple[int, int, str]]]:
    """The nodes (parameters first, then bindings in order) and edges (from, to,
    label) of ``func``'s top-level bindings."""
    nodes: list[Node] = []
    index: dict[Var, int] = {}
    for p in func.params:
        index[p] = len(nodes)
        nodes.append(Node(len(nodes), p.name_hint, "param", shape_text(p.ty)))
    edges: list[tuple[int, int, str]] = []
    body = func.body
    bindings = [b for blk in body.blocks for b in blk.bindings] if isinstance(
        body, SeqExpr) else []
    for b in bindings:
        kind, label = classify(b.value, mod)
        key = len(nodes)
        node = Node(key, label, kind, f"{b.var.name_hint}: {shape_text(b.var.ty)}")
        for v in used_vars(b.value):
            src = index.get(v)
            if src is not None and src not in node.preds:
                node.preds.append(src)
                edges.append((src, key, shape_text(v.ty)))
        index[b.var] = key
        nodes.append(node)
    return nodes, edges


def _layout(nodes: list[Node]) -> list[list[int]]:
    layers: list[list[int]] = []
    for n in nodes:
        n.layer = 1 + max((nodes[p].layer for p in n.preds), default=-1)
        while len(layers) <= n.layer:
            layers.append([])
        layers[n.layer].append(n.key)
    for row in layers:
        for i, k in enumerate(row):
            nodes[k].x = float(i)
    for _ in range(2):  # barycenter sweeps, top to bottom
        for row in layers[1:]:
            row.sort(key=lambda k: (sum(nodes[p].x for p in nodes[k].preds) /
                                    len(nodes[k].preds)) if nodes[k].preds else nodes[k].x)
            for i, k in enumerate(row):
                nodes[k].x = float(i)
    return layers


def _short(text: str, n: int = 24) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def render_svg(func: Function, mod: IRModule, title: str = "main") -> str:
    """``func`` drawn as an inline SVG element (see the module docstring)."""
    nodes, edges = function_graph(func, mod)
    bindings = sum(1 for n in nodes if n.kind != "param")
    if bindings > MAX_NODES:
        return (f'<p class="note">{html.escape(title)}: {bindings} bindings; graphs of more '
                f"than {MAX_NODES} are not drawn.</p>")
    layers = _layout(nodes)
    width = max((len(r) for r in layers), default=1)
    w = width * (NODE_W + GAP_X) + GAP_X
    h = len(layers) * (NODE_H + GAP_Y) + GAP_Y
    pos: dict[int, tuple[float, float]] = {}
    for li, row in enumerate(layers):
        offset = (width - len(row)) * (NODE_W + GAP_X) / 2
        for k in row:
            x = GAP_X + offset + nodes[k].x * (NODE_W + GAP_X)
            pos[k] = (x, GAP_Y / 2 + li * (NODE_H + GAP_Y))
    out = [f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" '
           f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" data-bindings="{bindings}">',
           f"<title>{html.escape(title)}</title>"]
    for src, dst, label in edges:
        x1, y1 = pos[src][0] + NODE_W / 2, pos[src][1] + NODE_H
        x2, y2 = pos[dst][0] + NODE_W / 2, pos[dst][1]
        my = (y1 + y2) / 2
        out.append(f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{my:.1f} '
                   f'{x2:.1f},{my:.1f} {x2:.1f},{y2:.1f}"/>')
        if label:
            out.append(f'<text class="elabel" x="{(x1 + x2) / 2 + 4:.1f}" y="{my + 3:.1f}">'
                       f"{html.escape(_short(label, 28))}</text>")
    for n in nodes:
        x, y = pos[n.key]
        fill = KINDS[n.kind][0]
        cls = "param" if n.kind == "param" else f"node {n.kind}"
        out.append(
            f'<g class="{cls}"><title>{html.escape(n.detail)} — {html.escape(n.label)} '
            f"({KINDS[n.kind][1]})</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="6" '
            f'fill="{fill}"/>'
            f'<text x="{x + NODE_W / 2:.1f}" y="{y + 14:.1f}">{html.escape(_short(n.label))}'
            f'</text><text class="sub" x="{x + NODE_W / 2:.1f}" y="{y + 27:.1f}">'
            f"{html.escape(_short(n.detail, 30))}</text></g>")
    out.append("</svg>")
    return "".join(out)


def legend_html() -> str:
    """The colour legend of the node kinds."""
    items = "".join(f'<span class="key"><span class="swatch" style="background:{c}"></span>'
                    f"{html.escape(t)}</span>" for c, t in KINDS.values())
    return f'<div class="legend">{items}</div>'


__all__ = ["KINDS", "Node", "classify", "function_graph", "legend_html", "render_svg",
           "shape_text"]
