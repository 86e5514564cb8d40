"""Compute inlining for the compute DSL: substitute producer stages into their
consumers, so a chain of elementwise and injective stages lowers to one loop nest
with no intermediate buffers.

::

    x = dsl.placeholder((n,), "float32", "x")
    y = dsl.compute((n,), lambda i: x[i] + 1.0, "y")
    z = dsl.compute((n,), lambda i: dsl.maximum(y[i], 0.0), "z")
    (z2,) = inline_stages([z])          # z2[i] = max(x[i] + 1.0, 0.0)
    kernel = dsl.create_kernel([x, z2])   # one loop nest, no scratch buffer for y

:func:`inline_stages` rebuilds the stages that the given outputs need, with every
*inlinable* stage's body substituted (its index variables replaced by the consumer's
indices) at each load of it.  A stage is inlinable when it is not an output and its
body is not a reduction.  Reductions stay stages of their own (the body of a
reduction may itself have its producers inlined), and so does a stage whose inlined
body would grow too large:

* a stage whose body (after inlining its own producers) is deeper than
  ``max_depth`` or larger than ``max_size`` nodes is kept as a stage, so a chain of
  thousands of stages neither explodes nor nests deeper than the kernel IR's
  recursive walks allow;
* a stage read more than once (by one consumer or by several) is inlined only if its
  body has at most ``max_dup_size`` nodes; otherwise every consumer reads it from its
  buffer (duplicating a large expression would multiply work, and chains of such
  duplications grow exponentially: a depthwise convolution's 9-tap sum read by both
  sides of SiLU's ``x * sigmoid(x)`` was computed twice before).

The rebuilt stages are made with :func:`plait.kernel.dsl.compute` (reductions with
``dsl.sum``/``max``/``min``/``prod``), so the result is an ordinary DSL graph for
:func:`plait.kernel.dsl.create_kernel`.  The walk over stages is iterative;
expression rewriting recurses over expression depth, which ``max_depth`` bounds.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence

from . import dsl
from .dsl import Reduce, Tensor, dsl_children
from .ir import (
    BufferLoad,
    PrimExpr,
    Var,
)
from .rewrite import rewrite_expr, substitute

MAX_DEPTH = 64
"""Default bound on the depth of an inlined stage body."""

MAX_SIZE = 512
"""Default bound on the number of nodes of an inlined stage body."""

MAX_DUP_SIZE = 32
"""Default size up to which a stage is inlined at several loads of one consumer."""

_REDUCERS: dict[str, Callable[..., Reduce]] = {
    "sum": dsl.sum, "prod": dsl.prod, "max": dsl.max, "min": dsl.min,
}


def expr_size_depth(e: PrimExpr) -> tuple[int, int]:
    """The number of nodes of ``e`` (as a tree) and its depth, computed iteratively."""
    size = depth = 0
    stack: list[tuple[PrimExpr, int]] = [(e, 1)]
    while stack:
        x, d = stack.pop()
        size += 1
        if d > depth:
            depth = d
        for c in dsl_children(x):
            stack.append((c, d + 1))
    return size, depth


def _count_loads(e: PrimExpr) -> dict[int, int]:
    """Buffer id -> number of loads of it in ``e``."""
    out: dict[int, int] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, BufferLoad):
            out[id(x.buffer)] = out.get(id(x.buffer), 0) + 1
        stack.extend(dsl_children(x))
    return out


def _stages(outputs: Sequence[Tensor]) -> list[Tensor]:
    """The compute stages the outputs need, producers before consumers."""
    order: list[Tensor] = []
    state: dict[int, int] = {}
    for out in outputs:
        stack: list[tuple[Tensor, bool]] = [(out, False)]
        while stack:
            t, done = stack.pop()
            if done:
                state[id(t)] = 2
                order.append(t)
                continue
            if state.get(id(t)) is not None or t.op is None:
                continue
            state[id(t)] = 1
            stack.append((t, True))
            for inp in t.op.inputs:
                if inp.op is not None and state.get(id(inp)) is None:
                    stack.append((inp, False))
    return order


def _with_axes(fn: Callable[..., PrimExpr], names: Sequence[str]) -> Callable[..., PrimExpr]:
    """``fn`` with a signature naming its parameters ``names`` (the DSL names a
    stage's loop variables after them)."""
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return fn


def _rebuild_body(body: PrimExpr, post: Callable[[PrimExpr], PrimExpr]) -> PrimExpr:
    if isinstance(body, Reduce):
        src = rewrite_expr(body.source, post)
        if src is body.source:
            return body
        return _REDUCERS[body.combiner](src, list(body.axis))
    return rewrite_expr(body, post)


def _subst_axes(body: PrimExpr, vmap: dict[Var, PrimExpr]) -> PrimExpr:
    if isinstance(body, Reduce):
        src = substitute(body.source, vmap)
        return _REDUCERS[body.combiner](src, list(body.axis))  # type: ignore[arg-type]
    return substitute(body, vmap)  # type: ignore[return-value]


def inline_stages(
    outputs: Sequence[Tensor],
    *,
    keep: Iterable[Tensor] = (),
    max_depth: int = MAX_DEPTH,
    max_size: int = MAX_SIZE,
    max_dup_size: int = MAX_DUP_SIZE,
) -> list[Tensor]:
    """The ``outputs`` rebuilt with their inlinable producer stages substituted into
    their consumers (see the module docstring).  Stages in ``keep`` are never inlined.
    Placeholders are shared with the input graph; the returned tensors are new
    stages, in the order of ``outputs`` (a placeholder output is returned as is)."""
    stages = _stages(outputs)
    out_ids = {id(t) for t in outputs} | {id(t) for t in keep}
    by_buffer: dict[int, Tensor] = {id(t.buffer): t for t in stages}
    bodies: dict[int, PrimExpr] = {}       # stage id -> body with producers inlined
    inlinable: dict[int, bool] = {}
    sizes: dict[int, int] = {}
    new: dict[int, Tensor] = {}            # stage id -> rebuilt stage (when materialized)

    def materialize(t: Tensor) -> Tensor:
        got = new.get(id(t))
        if got is not None:
            return got
        op = t.op
        assert op is not None
        body = bodies[id(t)]
        axis = op.axis

        def fcompute(*ax: Var) -> PrimExpr:
            return _subst_axes(body, dict(zip(axis, ax)))

        made = dsl.compute(t.shape, _with_axes(fcompute, [v.name_hint for v in axis]), t.name)
        new[id(t)] = made
        return made

    raw_loads = {id(t): _count_loads(t.op.body.source if isinstance(t.op.body, Reduce)
                                     else t.op.body) for t in stages if t.op is not None}
    uses: dict[int, int] = {}   # buffer id -> loads of it over all stages
    for counts in raw_loads.values():
        for b, k in counts.items():
            uses[b] = uses.get(b, 0) + k
    for t in stages:
        op = t.op
        assert op is not None
        raw = op.body

        def post(e: PrimExpr) -> PrimExpr:
            if not isinstance(e, BufferLoad):
                return e
            p = by_buffer.get(id(e.buffer))
            if p is None:
                return e  # a placeholder
            pid = id(p)
            if inlinable[pid] and (uses[id(e.buffer)] == 1 or sizes[pid] <= max_dup_size):
                assert p.op is not None
                return substitute(bodies[pid], dict(zip(p.op.axis, e.indices)))  # type: ignore
            return BufferLoad(materialize(p).buffer, e.indices)

        body = _rebuild_body(raw, post)
        bodies[id(t)] = body
        size, depth = expr_size_depth(body)
        sizes[id(t)] = size
        inlinable[id(t)] = (
            id(t) not in out_ids
            and not isinstance(body, Reduce)
            and depth <= max_depth
            and size <= max_size
        )
    result = []
    for t in outputs:
        result.append(t if t.op is None else materialize(t))
    return result


__all__ = ["MAX_DEPTH", "MAX_DUP_SIZE", "MAX_SIZE", "expr_size_depth",
           "inline_stages"]
