"""PartitionGraph: adjacent calls of a codegen's composites become one external
function per region, without ever creating a cycle.

After ``FuseOpsByPattern(codegen="mydnn")`` the host calls composite functions of
``mydnn``.  PartitionGraph groups those calls, block by block, into regions: a call
joins the region of a call it reads (and regions it reads from are merged) unless
that would let a value leave the region and come back into it through a binding
outside it — the cycle TVM's MergeCompilerRegions has to guard against.  The test is
exact: a region is one node of the contracted graph, so joining is refused when a walk
from the group's outside consumers, through the bindings and whole regions placed so
far, comes back into the group.  (Its cost is the part of the block downstream of the
group that is already placed, usually small: the consumers of a region are mostly
other supported calls.)

Each region becomes one function ``mydnn_<host>_<k>`` with the attributes
``{"compiler": "mydnn", "global_symbol": "mydnn_<host>_<k>"}``, whose parameters are
the values the region reads and whose results are the values used after it (one, or
a tuple read back item by item, so every later use is unchanged).  The composites are
inlined into it (``inline_composites=False`` keeps them as calls), so the codegen and
any pass run on its functions see one ordinary function per region.  The host block
is put back in a dependency order that keeps the original order where it can.

``plait.partition(mod, "mydnn")`` runs FuseOpsByPattern and PartitionGraph for chosen
codegens.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..ir.expr import Binding, BindingBlock, Call, DataflowBlock, Function, GlobalVar, SeqExpr
from ..ir.module import IRModule
from .codegens import get_codegen
from .context import PassContext
from .external import COMPILER_ATTR
from .fuse_by_pattern import is_composite
from .fuse_ops import count_uses, value_uses
from .outline import inline_call, outline
from .pass_base import module_pass

GLOBAL_SYMBOL_ATTR = "global_symbol"
"""Attribute of an external function: the symbol its compiled module exports."""


class _Regions:
    """Region formation over one block (see the module docstring).

    Bindings are taken in order; a supported one joins the regions of its supported
    producers that it can join together — every region is one node of the contracted
    graph, so the test is whether, after contracting, a path leaves the group and comes
    back: a walk from the group's outside consumers through the bindings (and whole
    regions) already placed must not reach the group."""

    def __init__(self, bindings: Sequence[Binding], supported: list[bool]) -> None:
        self.bindings = bindings
        index = {b.var: i for i, b in enumerate(bindings)}
        self.inputs = [sorted({index[v] for v in value_uses(b.value) if v in index})
                       for b in bindings]
        self.consumers: list[list[int]] = [[] for _ in bindings]
        for i, ins in enumerate(self.inputs):
            for j in ins:
                self.consumers[j].append(i)
        self.parent: list[int] = []         # union-find over region ids
        self.members: list[list[int]] = []  # at the root
        self.region: dict[int, int] = {}    # binding -> region id
        for i in range(len(bindings)):
            if supported[i]:
                self.add(i)

    def find(self, r: int) -> int:
        while self.parent[r] != r:
            self.parent[r] = self.parent[self.parent[r]]
            r = self.parent[r]
        return r

    def _closes_a_cycle(self, group: list[int], i: int) -> bool:
        """Whether contracting the regions ``group`` and binding ``i`` into one node
        would close a cycle (a path from the node, through bindings outside it, back
        into it); only bindings before ``i`` exist yet."""
        inside = {i}
        for r in group:
            inside.update(self.members[r])
        seen: set[int] = set(inside)
        stack = [c for m in inside for c in self.consumers[m] if c < i and c not in inside]
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            r = self.region.get(c)
            nodes = self.members[self.find(r)] if r is not None else [c]
            for n in nodes:
                seen.add(n)
                for d in self.consumers[n]:
                    if d in inside:
                        return True
                    if d < i and d not in seen:
                        stack.append(d)
        return False

    def add(self, i: int) -> None:
        cands: list[int] = []
        for j in self.inputs[i]:
            if j in self.region:
                r = self.find(self.region[j])
                if r not in cands:
                    cands.append(r)
        group: list[int] = []
        for r in cands:
            if not self._closes_a_cycle(group + [r], i):
                group.append(r)
        rid = len(self.parent)
        self.parent.append(rid)
        members = [i]
        for r in group:
            self.parent[r] = rid
            members += self.members[r]
        self.members.append(sorted(members))
        for m in members:
            self.region[m] = rid

    def groups(self) -> list[list[int]]:
        roots = sorted({self.find(r) for r in self.region.values()},
                       key=lambda r: self.members[r][0])
        return [self.members[r] for r in roots]


def _order(n: int, inputs: list[list[int]], groups: list[list[int]]) -> list[tuple[str, int]]:
    """A dependency order of the block's nodes — ``("binding", i)`` or ``("group", g)``
    — that keeps the original order where it can (Kahn's algorithm, earliest first)."""
    node_of = list(range(n))
    nodes: list[tuple[str, int]] = [("binding", i) for i in range(n)]
    first: list[int] = list(range(n))
    for g, members in enumerate(groups):
        k = len(nodes)
        nodes.append(("group", g))
        first.append(min(members))
        for m in members:
            node_of[m] = k
    alive = sorted(set(node_of))
    deps: dict[int, set[int]] = {k: set() for k in alive}
    users: dict[int, set[int]] = {k: set() for k in alive}
    for i in range(n):
        for j in inputs[i]:
            a, b = node_of[j], node_of[i]
            if a != b:
                deps[b].add(a)
                users[a].add(b)
    heap = [(first[k], k) for k in alive if not deps[k]]
    heapq.heapify(heap)
    out: list[tuple[str, int]] = []
    while heap:
        _, k = heapq.heappop(heap)
        out.append(nodes[k])
        for u in users[k]:
            deps[u].discard(k)
            if not deps[u]:
                heapq.heappush(heap, (first[u], u))
    if len(out) != len(alive):  # pragma: no cover - region formation rules this out
        raise AssertionError("PartitionGraph made a cycle; please report this module")
    return out


class _Partitioner:
    def __init__(self, mod: IRModule, codegen: str, inline: bool) -> None:
        self.mod = mod
        self.codegen = codegen
        self.inline = inline
        self.used = set(mod.functions)
        self.new: dict[str, Function] = {}
        self.count = 0

    def supported(self, b: Binding) -> bool:
        v = b.value
        if not isinstance(v, Call) or not isinstance(v.op, GlobalVar):
            return False
        f = self.mod.functions.get(v.op.name_hint)
        return isinstance(f, Function) and f.attrs.get(COMPILER_ATTR) == self.codegen

    def name(self, host: str) -> str:
        while True:
            name = f"{self.codegen}_{host}_{self.count}"
            self.count += 1
            if name not in self.used:
                self.used.add(name)
                return name

    def region_function(self, out: Any, name: str) -> Function:
        func: Function = out.func
        if not self.inline:
            return func
        body = func.body
        assert isinstance(body, SeqExpr)
        inlined: list[Binding] = []
        for b in body.blocks[0].bindings:
            callee = b.value.op if isinstance(b.value, Call) else None
            target = self.mod.functions.get(callee.name_hint) if isinstance(
                callee, GlobalVar) else None
            if isinstance(target, Function) and is_composite(target):
                inlined.extend(inline_call(b, target))
            else:
                inlined.append(b)
        block = DataflowBlock(tuple(inlined))
        return replace(func, body=replace(body, blocks=(block,)))

    def block(self, block: BindingBlock, uses: dict, host: str) -> BindingBlock:
        if not isinstance(block, DataflowBlock):
            return block
        bindings = block.bindings
        supported = [self.supported(b) for b in bindings]
        if not any(supported):
            return block
        regions = _Regions(bindings, supported)
        groups = regions.groups()
        calls: list[list[Binding]] = []
        for members in groups:
            name = self.name(host)
            attrs = {COMPILER_ATTR: self.codegen, GLOBAL_SYMBOL_ATTR: name}
            out = outline(bindings, members, uses, attrs)
            self.new[name] = self.region_function(out, name)
            calls.append(out.call_bindings(GlobalVar(name), True))
        new: list[Binding] = []
        for kind, k in _order(len(bindings), regions.inputs, groups):
            if kind == "binding":
                new.append(bindings[k])
            else:
                new.extend(calls[k])
        return DataflowBlock(tuple(new))

    def function(self, name: str, func: Function) -> Function:
        if not isinstance(func.body, SeqExpr):
            return func
        uses = count_uses(func.body)
        blocks = tuple(self.block(b, uses, name) for b in func.body.blocks)
        if all(a is b for a, b in zip(blocks, func.body.blocks)):
            return func
        return replace(func, body=replace(func.body, blocks=blocks))


def _referenced(mod: IRModule) -> set[str]:
    from ..ir.visitor import post_order

    out: set[str] = set()
    for _, f in mod.graph_functions():
        for node in post_order(f.body):
            if isinstance(node, GlobalVar):
                out.add(node.name_hint)
    return out


def partition_graph(mod: IRModule, codegen: str, inline_composites: bool = True) -> IRModule:
    """``mod`` with the calls of ``codegen``'s composites grouped into one external
    function per region (see the module docstring)."""
    p = _Partitioner(mod, codegen, inline_composites)
    changed: dict[str, Function] = {}
    for name, f in mod.graph_functions():
        if COMPILER_ATTR in f.attrs or is_composite(f):
            continue
        nf = p.function(name, f)
        if nf is not f:
            changed[name] = nf
    if not changed:
        return mod
    out = mod.with_functions({**changed, **p.new})
    if inline_composites:  # composites only the regions called are gone now
        live = _referenced(out)
        for name, f in list(out.functions.items()):
            if (is_composite(f) and f.attrs.get(COMPILER_ATTR) == codegen
                    and name not in live):
                out = out.without_function(name)
    return out


@module_pass(name="PartitionGraph", phases=("optimization",))
class PartitionGraph:
    """Merge adjacent calls of a codegen's composites into one external function per region."""

    def __init__(self, codegen: str, inline_composites: bool = True) -> None:
        super().__init__()
        get_codegen(codegen, needed_by="PartitionGraph")
        self.codegen = codegen
        self.inline_composites = inline_composites

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return partition_graph(mod, self.codegen, self.inline_composites)


__all__ = ["GLOBAL_SYMBOL_ATTR", "PartitionGraph", "partition_graph"]
