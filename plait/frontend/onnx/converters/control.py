"""Control flow, sequences and optionals.

``If`` with a condition known at import time is replaced by the chosen branch; with a
run-time condition it becomes an IR ``If``.  ``Loop`` and ``Scan`` are unrolled (the
trip count, the loop condition and the scanned lengths must be known at import time).
Sequences and optionals are tracked at import time: a sequence is a list of values
whose length is known, so ``SequenceAt``, ``SequenceInsert`` and friends need constant
positions; a sequence graph output becomes a tuple.
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr, If, Tuple
from ..context import NodeContext
from ..registry import converter
from ..values import Value
from .common import norm_axis, select, shape_of

LOOP_LIMIT = 10_000
"""The most iterations a ``Loop`` is unrolled for."""


def _scalar_bool(v: np.ndarray) -> bool:
    return bool(np.asarray(v).reshape(-1)[0])


# ---------------------------------------------------------------------------- If


@converter("If", since=1)
def convert_if(ctx: NodeContext) -> list[Value] | list[Expr]:
    """The chosen branch when the condition is known, else an IR ``If``."""
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    cond = ctx.maybe_const(0)
    imp = ctx.importer
    if cond is not None:
        outs, _ = imp.run_subgraph(then_g if _scalar_bool(cond) else else_g, [])
        return outs
    c = ctx.x(0)
    if shape_of(ctx, c) != ():
        c = ctx.call("reshape", c, shape=())
    then_b, else_b = imp.branch_seq(then_g), imp.branch_seq(else_g)
    n = len(ctx.node.output)
    if (len(then_g.output), len(else_g.output)) != (n, n):
        ctx.fail(f"both branches must have {n} outputs")
    node = ctx.normalize(If(c, then_b, else_b))
    v = ctx.emit(node)
    if n == 1:
        return [v]
    return [ctx.item(v, i) for i in range(n)]


# -------------------------------------------------------------------------- Loop


def _stack(ctx: NodeContext, values: list[Value], axis: int = 0) -> Expr:
    items = [ctx.call("expand_dims", ctx.atom(v), axis=axis) for v in values]
    if len(items) == 1:
        return items[0]
    return ctx.call("concat", Tuple(tuple(ctx.atom(i) for i in items)), axis=axis)


@converter("Loop", since=1)
def convert_loop(ctx: NodeContext) -> list[Value | Expr]:
    """Unrolled; the trip count and the condition must be known at import time."""
    body = ctx.attr("body")
    m = int(ctx.const(0, "the trip count").reshape(-1)[0]) if ctx.has(0) else None
    keep = _scalar_bool(ctx.const(1, "the loop condition")) if ctx.has(1) else True
    if m is None and not ctx.has(1):
        ctx.fail("a loop without trip count and condition never ends")
    n_carried = len(ctx.node.input) - 2
    n_scan = len(body.output) - 1 - n_carried
    carried = [ctx.value(2 + k) for k in range(n_carried)]
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    i = 0
    while keep and (m is None or i < m):
        if i >= LOOP_LIMIT:
            ctx.fail(f"the loop runs more than {LOOP_LIMIT} iterations; plait unrolls loops")
        args = [Value.of_const(np.asarray(i, np.int64)), Value.of_const(np.asarray(keep))]
        outs, _ = ctx.importer.run_subgraph(body, args + carried)
        c = outs[0]
        if c.const is None:
            ctx.fail(
                "the loop condition is computed at run time; plait unrolls loops and needs it "
                "at compile time"
            )
        keep = _scalar_bool(c.const)
        carried = outs[1 : 1 + n_carried]
        for k, s in enumerate(outs[1 + n_carried :]):
            scans[k].append(s)
        i += 1
    results: list[Value | Expr] = list(carried)
    for k, items in enumerate(scans):
        if not items:
            ctx.fail(f"scan output {k} of a loop that runs zero times is not supported")
        results.append(_stack(ctx, items))
    return results


# -------------------------------------------------------------------------- Scan


@converter("Scan", since=9)
def convert_scan(ctx: NodeContext) -> list[Value | Expr]:
    """Unrolled over the (static) scanned length."""
    body = ctx.attr("body")
    n_in = ctx.attr_int("num_scan_inputs")
    n_state = len(ctx.node.input) - n_in
    n_scan_out = len(body.output) - n_state
    in_axes = ctx.attr_ints("scan_input_axes", [0] * n_in)
    in_dirs = ctx.attr_ints("scan_input_directions", [0] * n_in)
    out_axes = ctx.attr_ints("scan_output_axes", [0] * n_scan_out)
    out_dirs = ctx.attr_ints("scan_output_directions", [0] * n_scan_out)
    assert (
        in_axes is not None
        and in_dirs is not None
        and out_axes is not None
        and out_dirs is not None
    )
    states = [ctx.value(k) for k in range(n_state)]
    lengths = set()
    inputs = []
    for j in range(n_in):
        i = n_state + j
        shape = ctx.shape(i)
        axis = norm_axis(ctx, in_axes[j], len(shape), "scan_input_axes")
        if not isinstance(shape[axis], int):
            ctx.fail(f"the scanned length of input {i} must be static, got shape {shape}")
        lengths.add(shape[axis])
        inputs.append((ctx.x(i), axis, in_dirs[j]))
    if len(lengths) != 1:
        ctx.fail(f"the scan inputs have different lengths {sorted(lengths)}")
    n = lengths.pop()
    outs_per_step: list[list[Value]] = [[] for _ in range(n_scan_out)]
    for t in range(n):
        slices = []
        for x, axis, direction in inputs:
            pos = n - 1 - t if direction else t
            slices.append(Value.of_expr(select(ctx, x, pos, axis)))
        outs, _ = ctx.importer.run_subgraph(body, states + slices)
        states = outs[:n_state]
        for k, o in enumerate(outs[n_state:]):
            outs_per_step[k].append(o)
    results: list[Value | Expr] = list(states)
    for k, items in enumerate(outs_per_step):
        if not items:
            ctx.fail("a scan over an empty sequence is not supported")
        if out_dirs[k]:
            items = items[::-1]
        rank = len(shape_of(ctx, ctx.atom(items[0]))) + 1
        results.append(_stack(ctx, items, norm_axis(ctx, out_axes[k], rank, "scan_output_axes")))
    return results


@converter("Scan", since=8, until=8)
def convert_scan8(ctx: NodeContext) -> list[Value | Expr]:
    """Opset 8: a batch axis first; unrolled over the batch and the sequence."""
    body = ctx.attr("body")
    n_in = ctx.attr_int("num_scan_inputs")
    if ctx.has(0):
        ctx.unsupported("sequence_lens")
    n_state = len(ctx.node.input) - 1 - n_in
    dirs = ctx.attr_ints("directions", [0] * n_in)
    assert dirs is not None
    batch = ctx.shape(1)[0]
    seq = ctx.shape(1 + n_state)[1] if n_in else 0
    if not isinstance(batch, int) or not isinstance(seq, int):
        ctx.fail("the batch and sequence sizes must be static")
    per_batch_states: list[list[Value]] = []
    per_batch_scans: list[list[Expr]] = []
    for b in range(batch):
        states = [Value.of_expr(select(ctx, ctx.x(1 + k), b, 0)) for k in range(n_state)]
        scans: list[list[Value]] = [[] for _ in range(len(body.output) - n_state)]
        for t in range(seq):
            slices = []
            for j in range(n_in):
                pos = seq - 1 - t if dirs[j] else t
                xb = select(ctx, ctx.x(1 + n_state + j), b, 0)
                slices.append(Value.of_expr(select(ctx, xb, pos, 0)))
            outs, _ = ctx.importer.run_subgraph(body, states + slices)
            states = outs[:n_state]
            for k, o in enumerate(outs[n_state:]):
                scans[k].append(o)
        per_batch_states.append(states)
        per_batch_scans.append([_stack(ctx, s) for s in scans])
    results: list[Value | Expr] = []
    for k in range(n_state):
        results.append(_stack(ctx, [Value.of_expr(ctx.atom(s[k])) for s in per_batch_states]))
    for k in range(len(body.output) - n_state):
        results.append(_stack(ctx, [Value.of_expr(ctx.atom(s[k])) for s in per_batch_scans]))
    return results


# --------------------------------------------------------------------- sequences


def _seq(ctx: NodeContext, i: int) -> list[Value]:
    v = ctx.value(i)
    if v.seq is None:
        ctx.fail(f"input {i} must be a sequence")
    return v.seq


def _position(ctx: NodeContext, i: int, n: int, default: int, insert: bool = False) -> int:
    if not ctx.has(i):
        return default
    p = int(ctx.const(i, "the position").reshape(-1)[0])
    hi = n if insert else n - 1
    if p < 0:
        p += n
    if not 0 <= p <= hi:
        ctx.fail(f"position {p} is out of range for a sequence of {n} tensors")
    return p


@converter("SequenceEmpty", since=11)
def convert_sequence_empty(ctx: NodeContext) -> Value:
    """An empty sequence."""
    return Value(seq=[])


@converter("SequenceConstruct", since=11)
def convert_sequence_construct(ctx: NodeContext) -> Value:
    """A sequence of the inputs."""
    return Value(seq=[ctx.value(i) for i in range(ctx.n_inputs)])


@converter("SequenceInsert", since=11)
def convert_sequence_insert(ctx: NodeContext) -> Value:
    """The sequence with the tensor inserted (at the end by default)."""
    s = list(_seq(ctx, 0))
    s.insert(_position(ctx, 2, len(s), len(s), insert=True), ctx.value(1))
    return Value(seq=s)


@converter("SequenceAt", since=11)
def convert_sequence_at(ctx: NodeContext) -> Value:
    """The tensor at a constant position."""
    s = _seq(ctx, 0)
    return s[_position(ctx, 1, len(s), 0)]


@converter("SequenceErase", since=11)
def convert_sequence_erase(ctx: NodeContext) -> Value:
    """The sequence without the tensor at a position (the last by default)."""
    s = list(_seq(ctx, 0))
    del s[_position(ctx, 1, len(s), len(s) - 1)]
    return Value(seq=s)


@converter("SequenceLength", since=11)
def convert_sequence_length(ctx: NodeContext) -> Value:
    """The number of tensors, a constant."""
    return Value.of_const(np.asarray(len(_seq(ctx, 0)), np.int64))


@converter("ConcatFromSequence", since=11)
def convert_concat_from_sequence(ctx: NodeContext) -> Expr:
    """``concat`` (or a stack with ``new_axis``) of the tensors."""
    s = _seq(ctx, 0)
    if not s:
        ctx.fail("the sequence is empty")
    rank = len(shape_of(ctx, ctx.atom(s[0])))
    new_axis = bool(ctx.attr_int("new_axis", 0))
    axis = norm_axis(ctx, ctx.attr_int("axis"), rank + new_axis)
    if new_axis:
        return _stack(ctx, s, axis)
    if len(s) == 1:
        return ctx.atom(s[0])
    return ctx.call("concat", Tuple(tuple(ctx.atom(v) for v in s)), axis=axis)


@converter("SplitToSequence", since=11)
def convert_split_to_sequence(ctx: NodeContext) -> Value:
    """``split`` into a sequence (pieces of 1 without ``split``, squeezed unless
    ``keepdims``)."""
    shape = ctx.shape(0)
    axis = norm_axis(ctx, ctx.attr_int("axis", 0), len(shape))
    d = shape[axis]
    if not isinstance(d, int):
        ctx.fail(f"the split axis must have a static size, got {d}")
    x = ctx.x(0)
    keepdims = bool(ctx.attr_int("keepdims", 1))
    if ctx.has(1):
        sp = ctx.const(1, "the split")
        if sp.ndim == 0:
            k = int(sp)
            sizes = [k] * (d // k) + ([d % k] if d % k else [])
        else:
            sizes = [int(v) for v in sp.reshape(-1)]
        keepdims = True
    else:
        sizes = [1] * d
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    if len(sizes) == 1:
        parts = [x]
    else:
        y = ctx.call("split", x, indices_or_sections=points, axis=axis)
        parts = [ctx.item(y, i) for i in range(len(sizes))]
    if not keepdims:
        parts = [ctx.call("squeeze", p, axis=axis) for p in parts]
    return Value(seq=[Value.of_expr(ctx.atom(p)) for p in parts])


@converter("SequenceMap", since=17)
def convert_sequence_map(ctx: NodeContext) -> list[Value]:
    """The body applied to each element (unrolled)."""
    body = ctx.attr("body")
    first = _seq(ctx, 0)
    args = [ctx.value(i) for i in range(ctx.n_inputs)]
    for a in args:
        if a.seq is not None and len(a.seq) != len(first):
            ctx.fail("the input sequences have different lengths")
    results: list[list[Value]] = [[] for _ in body.output]
    for i in range(len(first)):
        step = [a.seq[i] if a.seq is not None else a for a in args]
        outs, _ = ctx.importer.run_subgraph(body, step)
        for k, o in enumerate(outs):
            results[k].append(o)
    return [Value(seq=r) for r in results]


# --------------------------------------------------------------------- optionals


@converter("Optional", since=15)
def convert_optional(ctx: NodeContext) -> Value:
    """The input itself, or an empty optional."""
    return ctx.value(0) if ctx.has(0) else Value(is_none=True)


@converter("OptionalHasElement", since=15)
def convert_optional_has_element(ctx: NodeContext) -> Value:
    """A constant: whether the optional holds a value."""
    return Value.of_const(np.asarray(ctx.has(0)))


@converter("OptionalGetElement", since=15)
def convert_optional_get_element(ctx: NodeContext) -> Value:
    """The value the optional holds."""
    if not ctx.has(0):
        ctx.fail("the optional is empty")
    return ctx.value(0)
