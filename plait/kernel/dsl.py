"""The compute DSL: build kernels from tensor index expressions.

::

    from plait.kernel import dsl

    n = dsl.size_var("n")
    a = dsl.placeholder((n, 64), "float32", "a")
    b = dsl.placeholder((64, 32), "float32", "b")
    k = dsl.reduce_axis(64, "k")
    c = dsl.compute((n, 32), lambda i, j: dsl.sum(a[i, k] * b[k, j], axis=[k]), "c")
    kern = dsl.create_kernel([a, b, c], name="matmul")

Each :func:`compute` is a *stage*: a loop nest over its output shape that stores the
body's value at every index; a stage whose body is a reduction (:func:`sum`,
:func:`max`, :func:`min`, :func:`prod` over :func:`reduce_axis` axes) accumulates in a
local scalar.  :func:`create_kernel` lowers the stages that the outputs need, in
dependence order, into one :class:`~plait.kernel.ir.Kernel`; stages that are not
arguments become local scratch buffers.  The default schedule: in each stage the
outermost loop with more than one iteration is ``parallel`` (unless the stage is known
to be small), the innermost loop of an elementwise stage is ``vectorized`` when every
access is contiguous along it; index arithmetic is simplified and the kernel verified.
"""

from __future__ import annotations

import builtins
import inspect
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.ir.types import check_dtype

from .guard_split import split_guarded_store
from .indexsimp import Range, divisors_used, simplify_loads
from .intrin import (  # noqa: F401  (re-exported for DSL users)
    INTRINSICS,
    abs,
    call_intrin,
    cast,
    ceil,
    cos,
    erf,
    exp,
    floor,
    isnan,
    log,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    pow,
    round,
    rsqrt,
    select,
    sigmoid,
    sin,
    sqrt,
    tanh,
)
from .ir import (
    NODE_OPTIONS,
    Add,
    Allocate,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    FloorDiv,
    FloorMod,
    For,
    IntImm,
    Kernel,
    Let,
    Max,
    Min,
    Mul,
    PrimExpr,
    Stmt,
    Sub,
    Var,
    as_expr,
    const,
    expr_children,
    is_float_dtype,
    is_int_dtype,
    seq,
)
from .rewrite import substitute
from .simplify import simplify_kernel
from .verify import check_kernel

PARALLEL_MIN_WORK = 4096
"""Stages with fewer (statically known) scalar operations than this keep their outer
loop serial: starting threads would cost more than it saves."""

_SIZE_VARS: dict[str, Var] = {}
_TENSORS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_recording = threading.local()


def size_var(name: str) -> Var:
    """The int64 size variable called ``name`` (the same object for the same name, so
    shapes written with ``"n"`` or ``size_var("n")`` agree)."""
    if not name.isidentifier():
        raise ValueError(f"size variable name must be an identifier, got {name!r}")
    v = _SIZE_VARS.get(name)
    if v is None:
        v = _SIZE_VARS[name] = Var(name, "int64")
    return v


def _shape(shape: Sequence[int | str | Var] | int, what: str) -> tuple[int | Var, ...]:
    if isinstance(shape, int | str | Var):
        shape = (shape,)
    dims: list[int | Var] = []
    for d in shape:
        if isinstance(d, str):
            dims.append(size_var(d))
        elif isinstance(d, Var) or isinstance(d, int) and not isinstance(d, bool) and d >= 0:
            dims.append(d)
        elif isinstance(d, np.integer):
            dims.append(int(d))
        else:
            raise TypeError(f"{what}: a dimension must be a non-negative int or a size "
                            f"variable, got {d!r}")
    return tuple(dims)


# ---------------------------------------------------------------- tensors


@dataclass(eq=False)
class Tensor:
    """A placeholder (an input) or the result of a :func:`compute` stage.  Index it
    (``t[i, j]``) inside compute bodies."""

    name: str
    shape: tuple[int | Var, ...]
    dtype: str
    buffer: Buffer
    op: ComputeOp | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return self.op is None

    def __getitem__(self, indices: Any) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(f"tensor {self.name!r} has rank {self.ndim}, indexed with "
                             f"{len(indices)} index(es)")
        stack = getattr(_recording, "stack", None)
        if stack:
            stack[-1].append(self)
        exprs = []
        for ix in indices:
            e = as_expr(ix, "int64")
            if not is_int_dtype(e.dtype):
                raise TypeError(f"index of tensor {self.name!r} must be an integer, got "
                                f"{e.dtype} (`{e!r}`)")
            exprs.append(e)
        return BufferLoad(self.buffer, tuple(exprs))

    def __repr__(self) -> str:
        dims = ", ".join(d.name_hint if isinstance(d, Var) else str(d) for d in self.shape)
        kind = "placeholder" if self.op is None else "compute"
        return f"<{kind} {self.name}: ({dims}) {self.dtype}>"


@dataclass(eq=False)
class ComputeOp:
    """The definition of a compute stage: its index variables, its body and the tensors
    the body reads."""

    axis: tuple[Var, ...]
    body: PrimExpr
    inputs: tuple[Tensor, ...]


@dataclass(**NODE_OPTIONS, init=False)
class ReduceAxis(Var):
    """A reduction variable ranging over ``[0, extent)``; made by :func:`reduce_axis`."""

    extent: PrimExpr = None  # type: ignore[assignment]

    def __init__(self, extent: int | PrimExpr, name: str = "k") -> None:
        Var.__init__(self, name, "int64")
        object.__setattr__(self, "extent", as_expr(extent, "int64"))


@dataclass(**NODE_OPTIONS)
class Reduce(PrimExpr):
    """A reduction of ``source`` over ``axis`` with ``combiner`` (``sum``, ``prod``,
    ``max`` or ``min``).  Only valid as the whole body of a :func:`compute`."""

    combiner: str
    source: PrimExpr
    axis: tuple[ReduceAxis, ...]

    def __post_init__(self) -> None:
        self._set_dtype(self.source.dtype)


def placeholder(shape: Sequence[int | str | Var] | int, dtype: str = "float32",
                name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape (ints, size-variable names or size Vars)."""
    shp = _shape(shape, f"placeholder {name!r}")
    dtype = check_dtype(dtype, f"placeholder {name!r}")  # type: ignore[assignment]
    t = Tensor(name, shp, dtype, Buffer(name, shp, dtype))
    _TENSORS[id(t.buffer)] = t
    return t


def reduce_axis(extent: int | str | PrimExpr, name: str = "k") -> ReduceAxis:
    """A reduction axis over ``[0, extent)`` for :func:`sum`, :func:`max`, :func:`min`."""
    if isinstance(extent, str):
        extent = size_var(extent)
    return ReduceAxis(extent, name)


def _reduce(combiner: str, expr: Any, axis: Any) -> Reduce:
    axes = tuple(axis) if isinstance(axis, list | tuple) else (axis,)
    if not axes:
        raise ValueError(f"{combiner}() needs at least one reduce_axis")
    for a in axes:
        if not isinstance(a, ReduceAxis):
            raise TypeError(f"{combiner}(): axis entries must come from reduce_axis(), "
                            f"got {a!r}")
    src = as_expr(expr)
    if src.dtype == "bool":
        raise TypeError(f"{combiner}() of bool values; cast them to a number first")
    return Reduce(combiner, src, axes)


def sum(expr: Any, axis: Any) -> Reduce:  # noqa: A001
    """The sum of ``expr`` over the reduction axes ``axis``."""
    return _reduce("sum", expr, axis)


def prod(expr: Any, axis: Any) -> Reduce:
    """The product of ``expr`` over the reduction axes ``axis``."""
    return _reduce("prod", expr, axis)


def max(expr: Any, axis: Any) -> Reduce:  # noqa: A001
    """The maximum of ``expr`` over the reduction axes ``axis`` (NaN propagates)."""
    return _reduce("max", expr, axis)


def min(expr: Any, axis: Any) -> Reduce:  # noqa: A001
    """The minimum of ``expr`` over the reduction axes ``axis`` (NaN propagates)."""
    return _reduce("min", expr, axis)


def _axis_names(fcompute: Callable[..., Any], ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and builtins.all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                               for p in params):
        if len(params) != ndim:
            raise TypeError(f"the compute function takes {len(params)} index(es) but the "
                            f"shape has rank {ndim}")
        return [p.name for p in params]
    return [f"i{k}" for k in range(ndim)]


def dsl_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The operands of ``e``, including a reduction's source."""
    return (e.source,) if isinstance(e, Reduce) else expr_children(e)


_children = dsl_children  # its old name (tests read it)


def _walk(e: PrimExpr) -> list[PrimExpr]:
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        out.append(x)
        stack.extend(dsl_children(x))
    return out


def compute(shape: Sequence[int | str | Var] | int, fcompute: Callable[..., Any],
            name: str = "compute") -> Tensor:
    """A stage computing ``fcompute(*indices)`` at every index of ``shape``.

    The body may be a reduction (``sum``/``prod``/``max``/``min``) as a whole; a
    reduction nested inside a larger expression is an error (compute it in its own
    stage).  The dtype is the body's.
    """
    shp = _shape(shape, f"compute {name!r}")
    axis = tuple(Var(n, "int64") for n in _axis_names(fcompute, len(shp)))
    stack = getattr(_recording, "stack", None)
    if stack is None:
        stack = _recording.stack = []
    stack.append([])
    try:
        body = as_expr(fcompute(*axis))
    finally:
        used = stack.pop()
    for x in _walk(body.source if isinstance(body, Reduce) else body):
        if isinstance(x, Reduce):
            raise ValueError(
                f"compute {name!r}: a reduction must be the whole body, not part of "
                f"`{body!r}`; compute the reduction in a stage of its own and use it here"
            )
    inputs: dict[int, Tensor] = {}
    for t in used:
        inputs.setdefault(id(t.buffer), t)
    for x in _walk(body):
        if isinstance(x, BufferLoad) and id(x.buffer) not in inputs:
            t = _TENSORS.get(id(x.buffer))
            if t is None:
                raise ValueError(f"compute {name!r} reads buffer {x.buffer.name_hint!r}, "
                                 "which is not a placeholder or compute tensor")
            inputs[id(x.buffer)] = t
    buf = Buffer(name, shp, body.dtype)
    t = Tensor(name, shp, body.dtype, buf, ComputeOp(axis, body, tuple(inputs.values())))
    _TENSORS[id(buf)] = t
    return t


# ---------------------------------------------------------------- lowering


def _reduce_init(combiner: str, dtype: str) -> PrimExpr:
    if combiner == "sum":
        return const(0, dtype)
    if combiner == "prod":
        return const(1, dtype)
    if is_float_dtype(dtype):
        return const(-math.inf if combiner == "max" else math.inf, dtype)
    info = np.iinfo(dtype)
    return const(info.min if combiner == "max" else info.max, dtype)


_COMBINE: dict[str, type[BinaryOp]] = {"sum": Add, "prod": Mul, "max": Max, "min": Min}


def _static_product(dims: Sequence[PrimExpr | int | Var]) -> int | None:
    total = 1
    for d in dims:
        if isinstance(d, int):
            total *= d
        elif isinstance(d, IntImm):
            total *= d.value
        else:
            return None
    return total


def _stride_one(body: PrimExpr, var: Var) -> bool:
    """True when every load in ``body`` is contiguous (or invariant) along ``var``."""
    for x in _walk(body):
        if isinstance(x, BufferLoad):
            for k, ix in enumerate(x.indices):
                coef = _coef(ix, var)
                if coef is None or (k < len(x.indices) - 1 and coef != 0) or coef not in (0, 1):
                    return False
    return True


def _coef(e: PrimExpr, var: Var) -> int | None:
    """The coefficient of ``var`` in ``e`` if ``e`` is affine in it, else None."""
    if e is var:
        return 1
    if isinstance(e, Add):
        a, b = _coef(e.a, var), _coef(e.b, var)
        return None if a is None or b is None else a + b
    if isinstance(e, Sub):
        a, b = _coef(e.a, var), _coef(e.b, var)
        return None if a is None or b is None else a - b
    if isinstance(e, Mul):
        a, b = _coef(e.a, var), _coef(e.b, var)
        if a is None or b is None:
            return None
        if a == 0 and b == 0:
            return 0
        other = e.a if a == 0 else e.b if b == 0 else None
        if isinstance(other, IntImm):
            return (a or b) * other.value
        return None
    return 0 if not builtins.any(x is var for x in _walk(e)) else None


REDUCE_LANES_BYTES = 64
"""A reduction whose innermost axis is contiguous in memory accumulates in this many
bytes of independent partial results (16 float32 lanes, 8 float64), which the C compiler
keeps in vector registers; the lanes are combined pairwise at the end."""
REDUCE_LANES_MIN = 32
"""Innermost reduction axes with fewer (static) elements than this accumulate serially."""


def _reduce_lanes(body: Reduce, src: PrimExpr, rvar: Var, dtype: str) -> int:
    """The number of accumulator lanes for reduction ``body`` (1: serial)."""
    lanes = builtins.max(1, REDUCE_LANES_BYTES // np.dtype(dtype).itemsize)
    lanes = builtins.min(lanes, 16)
    extent = body.axis[-1].extent
    if isinstance(extent, IntImm):
        if extent.value < builtins.max(REDUCE_LANES_MIN, 2 * lanes):
            return 1
    elif not isinstance(extent, Var):
        return 1
    if not _stride_one(src, rvar) or not builtins.any(
            isinstance(x, BufferLoad) and builtins.any(x2 is rvar for x2 in _walk(x))
            for x in _walk(src)):
        return 1
    return lanes


def _lower_reduce(t: Tensor, body: Reduce, out_idx: tuple[Var, ...]) -> Stmt:
    """The loop nest of reduction stage ``t`` at output index ``out_idx``.

    Serial form: ``acc[0] = init; for r...: acc[0] = acc[0] (+) src; out = acc[0]``.
    When the innermost reduction axis is contiguous in memory (and long enough), it is
    split into ``lanes`` interleaved partial results: ``acc[l]`` combines the elements
    ``r = lanes * q + l``, a ``vectorized`` loop over ``l`` (no loop-carried
    dependence, so it becomes SIMD code), the remainder goes to ``acc[0]``, and the
    lanes are combined as a balanced tree.  For floats this sums in a different order
    than index order; the error bound of the tree is smaller than the serial one."""
    loop_vars = {ax: Var(ax.name_hint, "int64") for ax in body.axis}
    src = substitute(body.source, loop_vars)
    comb = _COMBINE[body.combiner]
    init = _reduce_init(body.combiner, t.dtype)
    rlast = body.axis[-1]
    rvar = loop_vars[rlast]
    lanes = _reduce_lanes(body, src, rvar, t.dtype)
    acc = Buffer(f"{t.name}_acc", (lanes,), t.dtype)
    zero = (IntImm(0),)
    if lanes == 1:
        update: Stmt = BufferStore(acc, zero, comb(BufferLoad(acc, zero), src))
        for ax in reversed(body.axis):
            update = For(loop_vars[ax], ax.extent, update)
        return Allocate(acc, seq(
            BufferStore(acc, zero, init),
            update,
            BufferStore(t.buffer, out_idx, BufferLoad(acc, zero)),
        ))
    n = rlast.extent
    L = IntImm(lanes)
    lane = Var("lane", "int64")
    q = Var(f"{rvar.name_hint}_o", "int64")
    rt = Var(f"{rvar.name_hint}_t", "int64")
    full = FloorDiv(n, L) if not isinstance(n, IntImm) else IntImm(n.value // lanes)
    rest = FloorMod(n, L) if not isinstance(n, IntImm) else IntImm(n.value % lanes)
    main = For(q, full, For(lane, L, BufferStore(
        acc, (lane,), comb(BufferLoad(acc, (lane,)), substitute(src, {rvar: q * L + lane}))),
        "vectorized"))
    tail = For(rt, rest, BufferStore(
        acc, zero, comb(BufferLoad(acc, zero), substitute(src, {rvar: full * L + rt}))))
    update = seq(main, tail)
    for ax in reversed(body.axis[:-1]):
        update = For(loop_vars[ax], ax.extent, update)
    tree: list[Stmt] = []
    width = lanes // 2
    while width >= 1:
        lw = Var("lane", "int64")
        tree.append(For(lw, IntImm(width), BufferStore(
            acc, (lw,), comb(BufferLoad(acc, (lw,)), BufferLoad(acc, (lw + IntImm(width),)))),
            "vectorized"))
        width //= 2
    li = Var("lane", "int64")
    return Allocate(acc, seq(
        For(li, L, BufferStore(acc, (li,), init), "vectorized"),
        update,
        *tree,
        BufferStore(t.buffer, out_idx, BufferLoad(acc, zero)),
    ))


SPLIT_MIN = 8
"""An innermost loop whose loads split its variable with ``// c`` and ``% c`` (a
reshape feeding a transpose) is split in two loops, the inner one of ``c >= SPLIT_MIN``
iterations, when that makes every load contiguous along the inner one."""


def _ranges(t: Tensor, extra: Sequence[tuple[Var, PrimExpr | int]] = ()) -> dict[Var, Range]:
    """The value ranges of the loop variables of stage ``t`` (and of ``extra`` loops)
    and of the size variables of its shapes, for index simplification."""
    op = t.op
    assert op is not None
    ranges: dict[Var, Range] = {}
    loops = list(zip(op.axis, t.shape)) + list(extra)
    if isinstance(op.body, Reduce):
        loops += [(ax, ax.extent) for ax in op.body.axis]
    for v, extent in loops:
        if isinstance(extent, int):
            ranges[v] = (0, builtins.max(extent - 1, 0))
        elif isinstance(extent, IntImm):
            ranges[v] = (0, builtins.max(extent.value - 1, 0))
        else:
            ranges[v] = (0, None)
    stack = [op.body]
    while stack:  # size variables (of any extent or index) are >= 0
        for x in _walk(stack.pop()):
            if isinstance(x, BufferLoad):
                for d in x.buffer.shape:
                    if isinstance(d, Var):
                        ranges.setdefault(d, (0, None))
            if isinstance(x, ReduceAxis) and isinstance(x.extent, Var):
                ranges.setdefault(x.extent, (0, None))
    for d in t.shape:
        if isinstance(d, Var):
            ranges.setdefault(d, (0, None))
    return ranges


def _split_innermost(t: Tensor, body: PrimExpr) -> tuple[Var, Var, int, PrimExpr] | None:
    """``(outer, inner, c, body)`` when splitting the innermost loop of elementwise stage
    ``t`` by ``c`` makes its loads contiguous along the inner loop."""
    v = t.op.axis[-1]  # type: ignore[union-attr]
    extent = t.shape[-1]
    if not isinstance(extent, int) or _stride_one(body, v):
        return None
    for c in sorted(divisors_used(body, v)):
        if c < SPLIT_MIN or c >= extent or extent % c:
            continue
        vo = Var(f"{v.name_hint}_o", "int64")
        vi = Var(f"{v.name_hint}_i", "int64")
        ranges = _ranges(t, [(vo, extent // c), (vi, c)])
        split = simplify_loads(substitute(body, {v: vo * IntImm(c) + vi}), ranges)
        if _stride_one(split, vi):
            return vo, vi, c, split
    return None


def _lower_stage(t: Tensor) -> Stmt:
    op = t.op
    assert op is not None
    body = op.body
    out_idx = op.axis
    work = _static_product(t.shape)
    split = None
    if isinstance(body, Reduce):
        body = Reduce(body.combiner, simplify_loads(body.source, _ranges(t)), body.axis)
        inner: Stmt = _lower_reduce(t, body, out_idx)
        rwork = _static_product([ax.extent for ax in body.axis])
        work = None if work is None or rwork is None else work * rwork
        vectorize = False
    else:
        body = simplify_loads(body, _ranges(t))
        split = _split_innermost(t, body) if out_idx else None
        if split is not None:
            vo, vi, c, sbody = split
            inner = For(vi, IntImm(c), BufferStore(
                t.buffer, (*out_idx[:-1], vo * IntImm(c) + vi), sbody), "vectorized")
            vectorize = False
        else:
            inner = BufferStore(t.buffer, out_idx, body)
            vectorize = bool(out_idx) and _stride_one(body, out_idx[-1])
    nloops = len(out_idx)
    # the outermost loop that has more than one iteration runs in parallel (at batch
    # size 1 that is the channel or row loop, not the batch loop)
    par = next((k for k in range(nloops) if t.shape[k] != 1), None)
    last = nloops - 1
    if (split is None and isinstance(inner, BufferStore) and nloops > 1 and par != last
            and isinstance(t.shape[last], int)):
        guarded = split_guarded_store(inner, out_idx, t.shape[last], _stride_one)
        if guarded is not None:   # the innermost loop, split at a guard's bounds
            inner, last = guarded, last - 1
    # a size known at run time (a dynamic batch) may be 1 there: its loop is fused with
    # the next one into one parallel loop, so that a batch of 1 runs on every thread as
    # a static batch of 1 does (whose next loop is the parallel one)
    fuse = (par is not None and isinstance(t.shape[par], Var) and par + 1 < last
            and (work is None or work >= PARALLEL_MIN_WORK))
    for k in range(last, -1, -1):
        kind = "serial"
        extent = t.shape[k]
        var = out_idx[k]
        if split is not None and k == nloops - 1:
            var, extent = split[0], extent // split[2]
        if fuse and k == par + 1:
            continue   # made with loop par, below
        if fuse and k == par:
            inner, var, extent = _fused(inner, out_idx[k], extent, out_idx[k + 1],
                                        t.shape[k + 1])
        if k == par and (work is None or work >= PARALLEL_MIN_WORK):
            kind = "parallel"
        elif k == nloops - 1 and vectorize:
            kind = "vectorized"
        inner = For(var, as_expr(extent, "int64"), inner, kind)
    return inner


def _fused(body: Stmt, outer: Var, n_outer: PrimExpr | int, inner: Var,
           n_inner: PrimExpr | int) -> tuple[Stmt, Var, PrimExpr]:
    """``body`` of the loops over ``outer`` (``n_outer`` iterations) and ``inner``
    (``n_inner``), as the body of one loop over both: that loop's variable ``v``, the
    body with ``outer = v // n_inner`` and ``inner = v % n_inner`` bound once per
    iteration (so the indices inside stay as they were), and its extent."""
    fused = Var(f"{outer.name_hint}_{inner.name_hint}", "int64")
    n = as_expr(n_inner, "int64")
    body = Let(outer, FloorDiv(fused, n), Let(inner, FloorMod(fused, n), body))
    return body, fused, Mul(as_expr(n_outer, "int64"), n)  # type: ignore[return-value]


def create_kernel(args: Sequence[Tensor], name: str = "kernel",
                  attrs: dict[str, Any] | None = None) -> Kernel:
    """Lower the stages that the outputs in ``args`` need into one kernel.

    ``args`` lists the kernel's parameters in order: the placeholders it reads, then the
    compute tensors it produces (its outputs).  Every placeholder the outputs read must be
    listed; compute stages that are not listed become local scratch.  The result is
    simplified and verified (``name`` is used in messages).
    """
    args = list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"create_kernel {name!r}: arguments must be DSL tensors, got {a!r}")
    outputs = [a for a in args if not a.is_placeholder]
    n_in = len(args) - len(outputs)
    if any(not a.is_placeholder for a in args[:n_in]):
        raise ValueError(f"create_kernel {name!r}: list the placeholders (inputs) first, then "
                         "the compute tensors (outputs)")
    if len({id(a) for a in args}) != len(args):
        raise ValueError(f"create_kernel {name!r}: a tensor is listed twice")
    # dependence order by an iterative depth-first walk from the outputs
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
            if state.get(id(t)) == 2:
                continue
            state[id(t)] = 1
            stack.append((t, True))
            for inp in t.op.inputs if t.op else ():
                if inp.op is not None and state.get(id(inp)) is None:
                    stack.append((inp, False))
    arg_ids = {id(a) for a in args}
    for t in order:
        for inp in t.op.inputs if t.op else ():
            if inp.op is None and id(inp) not in arg_ids:
                raise ValueError(f"create_kernel {name!r}: placeholder {inp.name!r} is read by "
                                 f"{t.name!r} but is not among the arguments")
    body = seq(*(_lower_stage(t) for t in order))
    for t in reversed(order):
        if id(t) not in arg_ids:
            body = Allocate(t.buffer, body)
    kern = Kernel(tuple(a.buffer for a in args), body, len(outputs), attrs=attrs or {})
    kern = simplify_kernel(kern)
    check_kernel(kern, name)
    return kern
