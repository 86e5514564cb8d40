"""Which ONNX nodes go to onnxruntime, and in what groups.

With ``from_onnx(..., fallback="onnxruntime")`` a node of the main graph that plait has
no converter for (an unknown op, an onnxruntime contrib op such as
``com.microsoft::FusedMatMul``, or a control-flow node with such a node in its
subgraphs) is run by onnxruntime.  :func:`plan_fallback` groups those nodes into
maximal connected runs, each later one ONNX sub-model (:mod:`.fallback`):

* nodes are taken in topological order; an unsupported node joins the groups of its
  unsupported producers (merging them) unless that would make a cycle: a value leaving
  the group, going through a node outside it and coming back in.  The test is exact
  and cheap: each node keeps the set of groups it depends on (``anc``), so joining is
  refused when a producer outside the group depends on it;
* the result is the order in which the importer converts *units* — a supported node,
  or a whole group — such that every value is defined before it is used (Kahn's
  algorithm over the contracted graph, which stays acyclic by construction, keeping
  the original order where it can).

Everything here is iterative (graphs of 100,000 nodes).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from onnx import GraphProto, NodeProto

from .loader import iter_nodes, node_inputs_with_captures, subgraphs, topological_order
from .registry import find_converter, normalize_domain


@dataclass
class Group:
    """A connected run of nodes handed to onnxruntime as one sub-model."""

    index: int
    nodes: list[NodeProto]
    """In topological order."""
    inputs: list[str] = field(default_factory=list)
    """The values the nodes read that they do not produce (captures of subgraphs
    included), in order of first use."""
    outputs: list[str] = field(default_factory=list)
    """The values the nodes produce that are used after them (or are graph outputs)."""


@dataclass
class FallbackPlan:
    """The groups, and the order of conversion (nodes and groups)."""

    groups: list[Group]
    units: list[NodeProto | Group]


def lacks_converter(node: NodeProto, opsets: dict[str, int]) -> bool:
    """True when plait has no converter for ``node`` or for a node of its subgraphs."""
    todo = [node]
    if subgraphs(node):
        todo.extend(n for g in subgraphs(node) for n, _ in iter_nodes(g))
    for n in todo:
        dom = normalize_domain(n.domain)
        version = opsets.get(dom)
        if version is not None and find_converter(n.op_type, dom, version) is None:
            return True
    return False


class _UnionFind:
    def __init__(self) -> None:
        self.parent: list[int] = []

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, g: int) -> int:
        root = g
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[g] != root:
            self.parent[g], g = root, self.parent[g]
        return root


def _assign_groups(flags: list[bool], producers: list[list[int]]) -> list[int | None]:
    """A group root per node (None for supported ones); see the module docstring."""
    uf = _UnionFind()
    group: list[int | None] = [None] * len(flags)
    anc: list[frozenset[int]] = []
    members: dict[int, list[int]] = {}
    empty: frozenset[int] = frozenset()

    def depends_on(p: int, roots: set[int]) -> bool:
        return any(uf.find(x) in roots for x in anc[p])

    def can_join(root: int, i: int) -> bool:
        for p in producers[i]:
            if group[p] is not None and uf.find(group[p]) == root:  # type: ignore[arg-type]
                continue
            if depends_on(p, {root}):
                return False
        return True

    def can_merge(roots: set[int], i: int) -> bool:
        inside = {m for r in roots for m in members[r]} | {i}
        for m in inside:
            for p in producers[m]:
                if p not in inside and depends_on(p, roots):
                    return False
        return True

    for i, unsupported in enumerate(flags):
        sets = [anc[p] for p in producers[i] if anc[p]]
        direct = {group[p] for p in producers[i] if group[p] is not None}
        if not direct and len(sets) <= 1:
            mine = sets[0] if sets else empty
        else:
            mine = frozenset().union(*sets, direct)  # type: ignore[arg-type]
        anc.append(mine)
        if not unsupported:
            continue
        cands = sorted({uf.find(g) for g in direct})  # type: ignore[arg-type]
        chosen: int | None = None
        if len(cands) > 1 and can_merge(set(cands), i):
            chosen = cands[0]
            for r in cands[1:]:
                uf.parent[r] = chosen
                members[chosen].extend(members.pop(r))
        else:
            chosen = next((r for r in cands if can_join(r, i)), None)
        if chosen is None:
            chosen = uf.new()
            members[chosen] = []
        members[chosen].append(i)
        group[i] = chosen
    return [None if g is None else uf.find(g) for g in group]


def plan_fallback(graph: GraphProto, opsets: dict[str, int], source: str = "",
                  graph_outputs: set[str] | None = None) -> FallbackPlan | None:
    """The groups of the nodes of ``graph`` plait cannot convert and the order in which
    to convert nodes and groups; None when plait converts every node."""
    nodes = topological_order(graph, source)
    flags = [lacks_converter(n, opsets) for n in nodes]
    if not any(flags):
        return None
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = i
    reads = [node_inputs_with_captures(n) for n in nodes]
    producers = [sorted({producer[x] for x in r if x in producer}) for r in reads]
    roots = _assign_groups(flags, producers)
    by_root: dict[int, list[int]] = {}
    for i, r in enumerate(roots):
        if r is not None:
            by_root.setdefault(r, []).append(i)
    groups: dict[int, Group] = {}
    members: dict[int, list[int]] = {}
    unit_of: list[int] = [0] * len(nodes)   # unit id: a node's index, or a group's first member
    for k, idx in enumerate(sorted(by_root.values(), key=lambda idx: idx[0])):
        groups[idx[0]] = Group(k, [nodes[i] for i in idx])
        members[idx[0]] = idx
        for i in idx:
            unit_of[i] = idx[0]
    for i, r in enumerate(roots):
        if r is None:
            unit_of[i] = i
    # which values each group reads and which it hands on
    used_outside: dict[str, set[int]] = {}
    for i, r in enumerate(reads):
        for x in r:
            used_outside.setdefault(x, set()).add(unit_of[i])
    outs = graph_outputs if graph_outputs is not None else {o.name for o in graph.output}
    for first, g in groups.items():
        made: set[str] = {o for n in g.nodes for o in n.output if o}
        seen: set[str] = set()
        for i in members[first]:
            for x in reads[i]:
                if x not in made and x not in seen:
                    seen.add(x)
                    g.inputs.append(x)
        for n in g.nodes:
            for o in n.output:
                if o and (o in outs or used_outside.get(o, set()) - {first}):
                    g.outputs.append(o)
    # Kahn's algorithm over the units, smallest original position first
    deps: dict[int, set[int]] = {}
    for i, _ in enumerate(nodes):
        u = unit_of[i]
        deps.setdefault(u, set()).update(unit_of[p] for p in producers[i] if unit_of[p] != u)
    users: dict[int, list[int]] = {}
    for u, ds in deps.items():
        for d in ds:
            users.setdefault(d, []).append(u)
    waiting = {u: len(ds) for u, ds in deps.items()}
    ready = [u for u, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    units: list[NodeProto | Group] = []
    while ready:
        u = heapq.heappop(ready)
        units.append(groups[u] if u in groups else nodes[u])
        for v in users.get(u, ()):
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, v)
    assert len(units) == len(deps), "the contracted graph has a cycle"
    return FallbackPlan(list(groups.values()), units)


__all__ = ["FallbackPlan", "Group", "lacks_converter", "plan_fallback"]
