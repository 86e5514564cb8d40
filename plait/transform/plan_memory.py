"""PlanMemory: place intermediate tensors in shared arenas.

For each function, every ``builtin.alloc_tensor`` whose tensor does not escape the
function (is not returned, directly or inside a tuple) gets a byte offset in a storage
buffer, allocated once at the start of the function.  Two tensors share bytes only if
their lifetimes (from allocation to last use, following tuples and tuple items) do not
overlap.  Offsets are assigned greedily, largest tensor first, at the lowest offset
that fits (64-byte aligned).

**Symbolic sizes** (a dynamic batch or sequence).  A tensor's byte size is
an expression over the function's sizes.  Tensors whose sizes are constant multiples
of one monomial ``M`` (``batch * seq``: ``(batch, seq, 768)`` float32 is ``3072 *
batch * seq`` bytes) form a *class*, planned like static tensors in units of ``M``
bytes (offsets multiples of 64 units, so 64-byte aligned for any ``M``) into a storage
of their own of ``units * M`` bytes: its size, and every offset, are size expressions
the VM evaluates from the arguments at each call (a pooled storage is reused while it
is large enough).  Static tensors are the class ``M = 1``.  A tensor whose size is not
a multiple of one monomial (a sum such as ``n + 3``), or names a size that no parameter
binds (one a ``match_cast`` introduces), keeps its own allocation.

**At the range maximum** (``PlanMemory(at_range_max=True)``, or the target attribute
``memory_at_range_max=True``: ``plait.build(mod, Target("c", memory_at_range_max=True))``).
When the module's ``dim_ranges`` fact gives the sizes a tensor's shape names an upper
bound (and the function's parameters bind them: the VM and the C API refuse an argument
outside its range before anything runs), the tensor is planned as a static one of its
largest byte size (``symbolic.bounds`` under the ranges): every such tensor, sums of
sizes (``n + m``) included, shares the one static arena, allocated once at the size the
largest call needs and never again.  Tensors that name an unbounded size are planned as
above.

The function gets the attributes ``planned_bytes`` (static arena size plus the static
allocations that were not planned) and ``naive_bytes`` (the sum of every static
allocation, what a plan-free run would hold at once in the worst case); symbolic
storages are not counted in them (their size depends on the call).
Each tensor placed in the arena is a site of the debug counter
(:mod:`plait.transform.debug_counter`); a declined one keeps its own allocation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ..ir import symbolic as sym
from ..ir.expr import (
    BindingBlock,
    Call,
    DataflowVar,
    Function,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    new_call,
    new_var_binding,
)
from ..ir.facts import DimRange, dim_ranges
from ..ir.types import ObjectType, TensorType
from ..ir.visitor import NON_VAR_LEAVES, used_vars
from ..op.registry import make_call
from .debug_counter import allow_rewrite, counting
from .pass_base import function_pass

ALIGNMENT = 64

FIRST_FIT_LIMIT = 256
"""Tensors alive at once beyond which a tensor is placed above them rather than in the
lowest gap among them (see :func:`place`)."""


_ITEMSIZE: dict[str, int] = {}


def _nbytes(ty: TensorType) -> int:
    assert ty.shape is not None and ty.dtype is not None
    n = 1
    for d in ty.shape:
        n *= int(d)
    size = _ITEMSIZE.get(ty.dtype)
    if size is None:
        size = _ITEMSIZE[ty.dtype] = np.dtype(ty.dtype).itemsize
    return n * size




def _size_at_max(ty: object, bound: set[str], ranges: Mapping[str, DimRange]) -> int | None:
    """The largest byte size of a tensor type of symbolic shape when every size it names
    is bound by a parameter and has an upper bound in ``ranges``; else None."""
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        return None
    total = sym.mul(sym.product(ty.shape), np.dtype(ty.dtype).itemsize)
    names = sym.free_symbols(total)
    if not names <= bound or any(ranges.get(n, (0, None))[1] is None for n in names):
        return None
    hi = sym.bounds(total, ranges)[1]
    return int(hi) if hi != float("inf") else None


def _symbolic_size(ty: object, bound: set[str]) -> tuple[object, object, int] | None:
    """``(class key, unit, count)`` of a tensor type of symbolic shape whose byte size is
    ``count * unit`` with ``unit`` a monomial over sizes in ``bound``; else None."""
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        return None
    size = _ITEMSIZE.get(ty.dtype)
    if size is None:
        size = _ITEMSIZE[ty.dtype] = np.dtype(ty.dtype).itemsize
    total = sym.mul(sym.product(ty.shape), size)
    if type(total) is int:
        return None
    if not sym.free_symbols(total) <= bound:
        return None
    if type(total) is str:
        return total, total, 1
    terms = total.terms  # type: ignore[union-attr]
    if len(terms) != 1 or terms[0][1] <= 0:
        return None
    count = terms[0][1]
    unit = sym.exact_div(total, count)
    return (unit, unit, count) if unit is not None else None


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def place(tensors: list[tuple[int, int, int]], nbindings: int,
          starts: list[int] | None = None) -> tuple[list[int], int]:
    """Offsets in one arena of ``tensors`` (size in bytes, index of the first and of the
    last binding it lives at; largest first, then by first binding), and the arena's
    size: each tensor at the lowest offset (64-byte aligned) where it overlaps no bytes
    of a tensor placed before it whose lifetime overlaps its own.  ``starts``: the
    tensors' first bindings in increasing order, each once (computed if None)."""
    # live[k]: (offset, size) of each tensor placed so far that is alive at the k-th
    # start (the first binding of some tensor), so finding the tensors whose lifetimes
    # overlap a new one costs its lifetime's length, not the number of tensors placed
    # so far (the plan stays linear on long chains).  Starts suffice: a tensor whose
    # lifetime overlaps [s, e] is alive at s or starts within it.  A tensor met twice
    # (in two of the lists) changes nothing below.
    #
    # Past FIRST_FIT_LIMIT overlapping tensors (thousands of values alive at once: a
    # Split into 65,535 outputs) the gap search, which sorts them, would make the plan
    # quadratic: the tensor then goes above every byte used at its starts (end[k]: the
    # highest end of the tensors alive at start k), which stays correct and costs its
    # lifetime's length.  An empty tensor takes no bytes and overlaps nothing.
    if starts is None:
        starts = sorted({s for _, s, _ in tensors})
    live: list[list[tuple[int, int]]] = [[] for _ in starts]
    end = [0] * len(starts)
    offsets: list[int] = []
    arena = 0
    for nbytes, s, last in tensors:
        size = _align(nbytes)
        if size == 0:
            offsets.append(0)
            continue
        lo = bisect_left(starts, s)
        hi = bisect_right(starts, last, lo)
        if hi - lo == 1:
            overlap = live[lo]
        elif sum(len(live[k]) for k in range(lo, hi)) > FIRST_FIT_LIMIT:
            overlap = None
        else:
            overlap = []
            for k in range(lo, hi):
                overlap += live[k]
        offset = 0
        if overlap is None or len(overlap) > FIRST_FIT_LIMIT:
            offset = max(end[lo:hi])
        elif overlap:
            for o, sz in sorted(overlap):
                if offset + size <= o:
                    break
                if o + sz > offset:
                    offset = o + sz
        offsets.append(offset)
        placed = (offset, size)
        top = offset + size
        for k in range(lo, hi):
            live[k].append(placed)
            if top > end[k]:
                end[k] = top
        if top > arena:
            arena = top
    return offsets, arena


def _is_alloc(value: object) -> bool:
    return (
        isinstance(value, Call)
        and isinstance(value.op, Op)
        and value.op.name == "builtin.alloc_tensor"
    )


def plan_function(func: Function, at_max: Mapping[str, DimRange] | None = None) -> Function:
    """``func`` with its intermediate tensors placed in arenas; with ``at_max`` (the
    module's ranges) tensors of bounded symbolic sizes are placed at their largest
    size in the static arena."""
    body = func.body
    if not isinstance(body, SeqExpr) or len(body.blocks) != 1:
        return func
    bindings = body.blocks[0].bindings
    # One walk: which allocation(s) each variable holds (tensors flow through
    # tuples/items) and the lifetime of each static allocation, from the index of
    # its binding to the index of its last use (a variable is defined before its
    # uses, so what it holds is known when a use is met, and uses come in increasing
    # order).  Each static allocation is a record [size, first, last, variable] and
    # what a variable holds a tuple of records: a use updates its records in place
    # (one table keyed by variable, not one per field: at a million bindings every
    # lookup in a table of the module's size misses the caches).
    holds: dict[Var, tuple[list, ...]] = {}
    # the allocations' records [count, first, last, variable, class, unit], in binding
    # order: static ones are `count` bytes of class None; symbolic ones `count * unit`
    allocs: list[list] = []
    sizes: dict[int, tuple[TensorType, tuple | None]] = {}  # id(type) -> (type, info)
    bound = _bound_sizes(func)
    naive = 0
    for i, b in enumerate(bindings):
        v = b.value
        tv = type(v)
        if tv is Call and type(v.op) is Op:  # type: ignore[attr-defined]
            if v.op.name == "builtin.alloc_tensor" and type(b) is VarBinding:  # type: ignore[attr-defined]
                var = b.var
                ty = var.ty
                hit = sizes.get(id(ty))
                if hit is None or hit[0] is not ty:
                    if isinstance(ty, TensorType) and ty.is_static:
                        info: tuple | None = (None, 1, _nbytes(ty))
                    else:
                        most = _size_at_max(ty, bound, at_max) if at_max else None
                        info = (None, 1, most) if most is not None else \
                            _symbolic_size(ty, bound)
                    hit = sizes[id(ty)] = (ty, info)  # keeps ty alive: its id stays its own
                info = hit[1]
                if info is not None:
                    key, unit, count = info
                    if key is None:
                        naive += count
                    rec = [count, i, i, var, key, unit]
                    allocs.append(rec)
                    holds[var] = (rec,)
            if not holds:
                continue
            # the common call: an op on variables, leaves and tuples of these (what
            # used_vars reads; a call holds no allocation of its own)
            for a in v.args:  # type: ignore[attr-defined]
                ta = type(a)
                if ta is Tuple:
                    items = a.fields  # type: ignore[attr-defined]
                elif ta in NON_VAR_LEAVES:
                    continue
                else:
                    items = (a,)
                for f in items:
                    tf = type(f)
                    if tf is Var or tf is DataflowVar:
                        held_by = holds.get(f)
                        if held_by is not None:
                            for x in held_by:
                                x[2] = i
                    elif tf not in NON_VAR_LEAVES:
                        break  # something nested: the general walk below
                else:
                    continue
                break
            else:
                continue
        uses = used_vars(v)
        if not holds:
            continue
        for n in uses:
            held_by = holds.get(n)
            if held_by is not None:
                for x in held_by:
                    x[2] = i
        if tv is Tuple or tv is TupleGetItem or isinstance(v, Var):
            held: dict[int, list] = {}
            for n in uses:
                for x in holds.get(n, ()):
                    held[id(x)] = x
            if held:
                holds[b.var] = tuple(held.values())
    if not allocs:
        return func
    escaping: set[int] = set()
    for n in used_vars(body.body):
        escaping.update(id(x) for x in holds.get(n, ()))
    if counting():
        planned = [x for x in allocs if id(x) not in escaping and allow_rewrite(
            lambda v=x[3]: f"place {v.name_hint!r} in the arena")]
    else:
        planned = [x for x in allocs if id(x) not in escaping]
    classes: dict[object, list[list]] = {}
    for x in planned:   # (each class in binding order: its starts increase)
        classes.setdefault(x[4], []).append(x)
    static_planned = sum(x[0] for x in classes.get(None, ()))
    unplanned = naive - static_planned
    if not classes:
        return func.with_attrs(planned_bytes=unplanned, naive_bytes=naive)  # type: ignore[return-value]
    storages: list[VarBinding] = []
    placements: list[tuple[int, Var, object, Var]] = []  # (binding, tensor, offset, storage)
    static_arena = 0
    # the static arena first (named "storage", as before), then one per symbolic class
    for key in sorted(classes, key=lambda k: (k is not None, str(k))):
        members = classes[key]
        unit = members[0][5]
        # largest first, then in order of allocation (no two allocations start
        # together, so the variables themselves are never compared)
        order = sorted([(-count, first, last, var) for count, first, last, var, _, _ in members])
        placed, arena = place([(-neg, s, e) for neg, s, e, _ in order], len(bindings),
                              [x[1] for x in members])
        name = "storage" if key is None else f"storage{len(storages)}"
        storage = Var(name, ObjectType())
        if key is None:
            static_arena = arena
            storages.append(VarBinding(storage, _typed_storage_call(arena)))
        else:
            storages.append(VarBinding(storage, _typed_storage_call(sym.mul(_align(arena), unit))))
        for (_, at, _, var), offset in zip(order, placed):
            placements.append((at, var, offset if key is None else sym.mul(offset, unit),
                               storage))
    # the bindings after the storages', each placed allocation (the binding at its
    # start) replaced by its tensor in its storage
    shift = len(storages)
    new_bindings = [*storages, *bindings]
    placed_attrs: dict[tuple, Call] = {}  # (storage, offset, shape, dtype) -> a call to copy
    for at, var, offset, storage in placements:
        ty = var.ty
        assert isinstance(ty, TensorType)
        key = (storage.name_hint, offset, ty.shape, ty.dtype)
        proto = placed_attrs.get(key)
        if proto is None:
            proto = placed_attrs[key] = make_call(
                "builtin.tensor_from_storage",
                storage,
                offset=offset,
                shape=ty.shape,
                dtype=ty.dtype,
            )
        new_bindings[at + shift] = new_var_binding(
            var, new_call(proto.op, proto.args, proto.attrs, ty, proto.span))
    new_body = SeqExpr((BindingBlock(tuple(new_bindings)),), body.body, ty=body.ty, span=body.span)
    out = Function(func.params, new_body, func.ret_ty, func.pure, attrs=func.attrs, span=func.span)
    return out.with_attrs(  # type: ignore[return-value]
        planned_bytes=static_arena + unplanned, naive_bytes=naive
    )


def _bound_sizes(func: Function) -> set[str]:
    """The symbolic sizes the function's parameters bind (plain names in their
    shapes): those a storage's size may use (the VM knows them from the first
    instruction on)."""
    out: set[str] = set()
    for p in func.params:
        ty = p.ty
        if isinstance(ty, TensorType) and ty.shape is not None:
            out.update(d for d in ty.shape if type(d) is str)
    return out


def _typed_storage_call(nbytes: sym.Dim) -> Call:
    return replace(make_call("builtin.alloc_storage", nbytes=nbytes), ty=ObjectType())


@function_pass(phases=("build",), requires=("ExplicitMemory",))
class PlanMemory:
    """Place intermediate tensors in arenas sized at build or at run time (symbolic sizes).

    One arena for static sizes, one per class of symbolic sizes; tensors share bytes
    when their lifetimes do not overlap.  ``at_range_max=True`` (default: the target's
    ``memory_at_range_max`` attribute, False) plans tensors of sizes with upper bounds
    (the ``dim_ranges`` fact) at their largest size in the static arena."""

    def __init__(self, at_range_max: bool | None = None) -> None:
        self.at_range_max = at_range_max

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        at_max = self.at_range_max
        if at_max is None:
            target = mod.attrs.get("target")
            at_max = bool(getattr(target, "attrs", {}).get("memory_at_range_max", False))
        return plan_function(func, dim_ranges(mod) if at_max else None)
