"""Fusion groups: which bindings of a block :class:`~plait.transform.fuse_ops.FuseOps`
puts together, and the rules that decide it.

The partition works on one *segment* of bindings (a dataflow block, or a run of pure
bindings of an ordinary block between two impure calls) and walks it backwards, from
the last binding to the first.  A binding starts a group of its own, or joins the
group of its consumers when

* its value is a call of a pure, registered op with a tensor result (and tensor
  operands) whose fusion pattern is not ``opaque`` (:func:`fusion_pattern`);
* every use of its variable, anywhere in the function, is in bindings of that one
  group (so the only value leaving a group is the value of its last binding, and
  merging never creates a cycle);
* the group has fewer than ``max_size`` bindings;
* the fusion rules allow it: the rules registered with :func:`register_fusion_rule`
  are asked in order, the first answer that is not ``None`` decides, and
  :func:`default_fusion_rule` decides when none answers.

The default rule follows TVM's op patterns: ``elemwise``, ``broadcast`` and
``injective`` producers fuse into their consumers; a ``reduce`` fuses into a group of
elementwise/broadcast/injective consumers (its elementwise tail) and elementwise
producers fuse into the reduction; an ``out_elemwise_fusable`` op (matmul, conv,
linear, pooling) fuses into a group of ``elemwise``/``broadcast`` consumers (bias add,
activation) but takes no producers; a group holds at most one reduction or
``out_elemwise_fusable`` op (its *anchor*).

Everything here is iterative; the cost is linear in the number of bindings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..ir.expr import Binding, Call, Constant, Op, Tuple, Var, VarBinding
from ..ir.types import TensorType
from ..op.registry import PATTERNS

PATTERN_RANK: dict[str, int] = {p: i for i, p in enumerate(PATTERNS)}
"""Rank of each op pattern, from the most fusable (``elemwise``: 0) to ``opaque``."""

ANCHOR_PATTERNS = ("reduce", "out_elemwise_fusable")
"""Patterns of which a group holds at most one (the group's anchor)."""

FUSION_PATTERNS: dict[str, str] = {}
"""Per-op overrides of the pattern the op registry declares (see
:func:`register_fusion_pattern`)."""


@dataclass(eq=False)
class FusionGroup:
    """A group being formed: its bindings (by index in the segment, in the order they
    joined: the group's last binding first), its anchor and the most complex pattern of
    its other members."""

    bindings: Sequence[Binding]
    members: list[int] = field(default_factory=list)
    anchor: int | None = None
    anchor_pattern: str | None = None
    max_pattern: str = "elemwise"

    @property
    def size(self) -> int:
        """The number of bindings in the group."""
        return len(self.members)

    @property
    def calls(self) -> list[Call]:
        """The calls of the group, in program order."""
        return [self.bindings[i].value for i in sorted(self.members)]  # type: ignore[misc]

    def add(self, index: int, pattern: str) -> None:
        """Add binding ``index`` with ``pattern`` to the group."""
        self.members.append(index)
        if pattern in ANCHOR_PATTERNS:
            self.anchor, self.anchor_pattern = index, pattern
        elif PATTERN_RANK[pattern] > PATTERN_RANK[self.max_pattern]:
            self.max_pattern = pattern


class FusionCandidate:
    """What a fusion rule sees: a producer ``call`` (with its ``pattern``) that may join
    ``group``, whose calls ``consumers`` use the producer's value.
    ``anchor_consumer`` is True when one of those consumers is the group's anchor."""

    __slots__ = ("call", "pattern", "group", "consumers", "anchor_consumer")

    def __init__(self, call: Call, pattern: str, group: FusionGroup,
                 consumers: tuple[Call, ...], anchor_consumer: bool) -> None:
        self.call = call
        self.pattern = pattern
        self.group = group
        self.consumers = consumers
        self.anchor_consumer = anchor_consumer

    def __repr__(self) -> str:
        return (f"FusionCandidate({self.op_name}, pattern={self.pattern!r}, "
                f"group size {self.group.size})")

    @property
    def op_name(self) -> str:
        """The producer's op name."""
        return self.call.op.name  # type: ignore[attr-defined]


FusionRule = Callable[[FusionCandidate], "bool | None"]
"""A fusion rule: True allows the candidate to join the group, False forbids it,
None leaves the decision to the next rule (and finally to the default rule)."""

FUSION_RULES: dict[str, FusionRule] = {}
"""Registered fusion rules by name, in registration order."""


def register_fusion_rule(name: str, rule: FusionRule | None = None, *,
                         override: bool = False) -> object:
    """Register ``rule(candidate) -> bool | None`` under ``name`` (usable as a
    decorator).  Rules are asked in registration order before the default rule; the
    dataflow conditions (every use inside the group, the size cap, one anchor) are
    checked before any rule and cannot be overridden."""

    def deco(fn: FusionRule) -> FusionRule:
        if name in FUSION_RULES and not override:
            raise ValueError(f"fusion rule {name!r} is already registered (pass override=True)")
        FUSION_RULES[name] = fn
        return fn

    return deco(rule) if rule is not None else deco


def unregister_fusion_rule(name: str) -> None:
    """Remove the fusion rule ``name`` (no error if it is not registered)."""
    FUSION_RULES.pop(name, None)


def register_fusion_pattern(op: str, pattern: str) -> None:
    """Fuse calls of ``op`` as if its registered pattern were ``pattern`` (one of
    :data:`plait.op.registry.PATTERNS`)."""
    if pattern not in PATTERN_RANK:
        raise ValueError(f"unknown pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    FUSION_PATTERNS[op] = pattern


def _fusable_arg(a: object) -> bool:
    if isinstance(a, Var | Constant):
        return isinstance(a.ty, TensorType)
    if isinstance(a, Tuple):
        return all(isinstance(f, Var | Constant) and isinstance(f.ty, TensorType)
                   for f in a.fields)
    return not isinstance(a, Var)  # PrimValue, ShapeExpr, StringImm: stay in the body


def fusion_pattern(binding: Binding) -> str:
    """The fusion pattern of a binding: the op's pattern (or its override) for a
    ``var = op(...)`` binding of a pure, registered op with a tensor result whose
    operands are tensors (or tuples of tensors, or literals); ``opaque`` otherwise."""
    if not isinstance(binding, VarBinding):
        return "opaque"
    call = binding.value
    if not isinstance(call, Call) or not isinstance(call.op, Op) or not call.op.is_registered:
        return "opaque"
    opdef = call.op.definition
    if not opdef.pure:
        return "opaque"
    ty = call.ty
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        return "opaque"
    for a in call.args:
        if not _fusable_arg(a):
            return "opaque"
    return FUSION_PATTERNS.get(opdef.name, opdef.pattern)


def default_fusion_rule(c: FusionCandidate) -> bool:
    """The pattern rule of TVM (see the module docstring)."""
    rank = PATTERN_RANK[c.pattern]
    if rank <= PATTERN_RANK["injective"]:
        return not (c.anchor_consumer and c.group.anchor_pattern == "out_elemwise_fusable")
    if c.pattern == "reduce":
        return PATTERN_RANK[c.group.max_pattern] <= PATTERN_RANK["injective"]
    if c.pattern == "out_elemwise_fusable":
        return PATTERN_RANK[c.group.max_pattern] <= PATTERN_RANK["broadcast"]
    return False


def _allowed(c: FusionCandidate) -> bool:
    for rule in FUSION_RULES.values():
        answer = rule(c)
        if answer is not None:
            return bool(answer)
    return default_fusion_rule(c)


def partition(
    bindings: Sequence[Binding],
    consumers: Sequence[Sequence[int]],
    escapes: Sequence[bool],
    max_size: int,
) -> list[list[int]]:
    """Partition one segment of ``bindings`` into fusion groups.

    ``consumers[i]`` lists the indices (in the segment) of the bindings that use the
    variable of binding ``i``; ``escapes[i]`` is True when that variable is also used
    anywhere outside the segment.  Returns the groups of two or more bindings, each as
    ascending indices (its last binding is the group's result)."""
    n = len(bindings)
    group_of: list[FusionGroup | None] = [None] * n
    groups: list[FusionGroup] = []
    for i in range(n - 1, -1, -1):
        pattern = fusion_pattern(bindings[i])
        if pattern == "opaque":
            continue
        target: FusionGroup | None = None
        cons = consumers[i]
        if cons and not escapes[i]:
            first = group_of[cons[0]]
            if first is not None and first.size < max_size and all(
                group_of[c] is first for c in cons
            ):
                is_anchor = pattern in ANCHOR_PATTERNS
                if not (is_anchor and first.anchor is not None):
                    cand = FusionCandidate(
                        bindings[i].value,  # type: ignore[arg-type]
                        pattern,
                        first,
                        tuple(bindings[c].value for c in dict.fromkeys(cons)),  # type: ignore[misc]
                        first.anchor is not None and first.anchor in cons,
                    )
                    if _allowed(cand):
                        target = first
        if target is None:
            target = FusionGroup(bindings)
            groups.append(target)
        target.add(i, pattern)
        group_of[i] = target
    return [sorted(g.members) for g in reversed(groups) if g.size >= 2]


__all__ = [
    "ANCHOR_PATTERNS",
    "FUSION_PATTERNS",
    "FUSION_RULES",
    "FusionCandidate",
    "FusionGroup",
    "FusionRule",
    "PATTERN_RANK",
    "default_fusion_rule",
    "fusion_pattern",
    "partition",
    "register_fusion_pattern",
    "register_fusion_rule",
    "unregister_fusion_rule",
]
