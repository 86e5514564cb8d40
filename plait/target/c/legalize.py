"""The default legalization of the ``c`` target: one generated kernel per op call.

For a call of an op with a compute (:mod:`plait.target.c.compute`), placeholders are
made for its arguments (static sizes, or size variables for symbolic ones), the compute
builds the result and :func:`~plait.kernel.dsl.create_kernel` lowers it into a kernel
that is added to the module; the call becomes ``call_kernel(kernel, (args...),
out=<type>)``.  Identical kernels are shared: ten ``relu`` s of one shape make one
kernel.

Every other call becomes the numpy library call ``call_extern("numpy.<op>")`` — the
library-call path (docs/targets.md), a legitimate lowering, not an error: ops without a
compute, calls whose types are not fully known (unknown rank or dtype), float16
tensors (the C code generator has no float16) and cases a compute declines
(:class:`~plait.target.c.compute.ComputeUnsupported`).  :func:`coverage` lists which
core ops get kernels, :func:`library_calls` which calls of a lowered module are
library calls.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.builder import BlockBuilder
from plait.ir.expr import Call, Expr, ExternFunc, GlobalVar, Op, Tuple, TupleGetItem
from plait.ir.module import IRModule
from plait.ir.structural import structural_equal, structural_hash
from plait.ir.types import TensorType, TupleType, Type
from plait.kernel import dsl
from plait.kernel.ir import Allocate, Buffer, Kernel, Stmt, Var, stmt_children
from plait.kernel.rewrite import substitute
from plait.op.registry import get_op, list_ops, make_call, normalize_attrs
from plait.runtime.packed import has_func
from plait.transform.legalize import LegalizeError

from .compute import ComputeUnsupported, compute_note, get_compute
from .compute.common import same_dim, to_dims

_LOG = logging.getLogger("plait.target.c")

KERNEL_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64",
})
"""The dtypes generated kernels handle (everything but float16)."""


# ---------------------------------------------------------------- kernels


def _tensor_types(ty: Type | None) -> list[TensorType] | None:
    """The tensor types of an argument or result (a tuple's fields), or None when one
    is not a tensor of known rank and dtype."""
    if isinstance(ty, TupleType):
        out: list[TensorType] = []
        for f in ty.fields:
            sub = _tensor_types(f)
            if sub is None or isinstance(f, TupleType):
                return None
            out.extend(sub)
        return out
    if isinstance(ty, TensorType) and ty.shape is not None and ty.dtype is not None:
        return [ty]
    return None


def _why_not_kernel(arg_types: Sequence[Type | None], out_ty: Type | None) -> str | None:
    """Why a call with these types cannot become a kernel (None: it can)."""
    for what, ty in [*((f"argument {i}", t) for i, t in enumerate(arg_types)), ("result", out_ty)]:
        tts = _tensor_types(ty)
        if tts is None:
            return f"the {what} has type {ty}, not tensors of known rank and dtype"
        for t in tts:
            if t.dtype not in KERNEL_DTYPES:
                return f"the {what} has dtype {t.dtype}, which generated kernels do not support"
    return None


def _placeholder(ty: TensorType, name: str) -> dsl.Tensor:
    return dsl.placeholder(to_dims(ty.shape), ty.dtype, name)  # type: ignore[arg-type]


def _check_result(op: str, k: int, t: Any, ty: TensorType) -> None:
    if not isinstance(t, dsl.Tensor):
        raise LegalizeError(f"the compute of op {op!r} returned {type(t).__name__}, not a "
                            "DSL tensor (plait/target/c/compute)")
    want = to_dims(ty.shape)  # type: ignore[arg-type]
    if t.dtype != ty.dtype or len(t.shape) != len(want) or not all(
            same_dim(a, b) for a, b in zip(t.shape, want)):
        raise LegalizeError(
            f"the compute of op {op!r} produced result {k} of shape {t.shape} and dtype "
            f"{t.dtype}, but the call's type is {ty} (plait/target/c/compute)"
        )


def op_kernel(op: str, arg_types: Sequence[Type], attrs: Attrs | dict[str, Any] | None,
              out_ty: Type) -> Kernel:
    """The kernel computing op ``op`` on arguments of ``arg_types`` (tensor types; a
    tuple type for a tuple argument), with its parameters in call order (a tuple
    argument's fields flattened), then the outputs.

    Raises :class:`~plait.target.c.compute.ComputeUnsupported` when the op has no
    compute or its compute does not handle this call."""
    fn = get_compute(op)
    if fn is None:
        raise ComputeUnsupported(f"op {op!r} has no compute")
    why = _why_not_kernel(arg_types, out_ty)
    if why is not None:
        raise ComputeUnsupported(why)
    opdef = get_op(op)
    full_attrs = normalize_attrs(opdef, attrs)
    params: list[dsl.Tensor] = []
    inputs: list[Any] = []
    for i, ty in enumerate(arg_types):
        name = opdef.input_name(i)
        if isinstance(ty, TupleType):
            fields = tuple(_placeholder(f, f"{name}{j}") for j, f in enumerate(ty.fields))  # type: ignore[arg-type]
            params.extend(fields)
            inputs.append(fields)
        else:
            t = _placeholder(ty, name)  # type: ignore[arg-type]
            params.append(t)
            inputs.append(t)
    result = fn(inputs, full_attrs, out_ty)
    results = list(result) if isinstance(result, tuple) else [result]
    out_types = _tensor_types(out_ty)
    assert out_types is not None
    if len(results) != len(out_types):
        raise LegalizeError(f"the compute of op {op!r} produced {len(results)} results for "
                            f"the call's {len(out_types)} (plait/target/c/compute)")
    outputs = []
    for k, (t, ty) in enumerate(zip(results, out_types)):
        _check_result(op, k, t, ty)
        # a placeholder (or a tensor listed twice) cannot be an output: copy it
        if t.is_placeholder or any(t is o for o in outputs):
            src = t
            t = dsl.compute(t.shape, lambda *i, src=src: src[i], f"out{k}")
        outputs.append(t)
    return own_size_vars(dsl.create_kernel([*params, *outputs], name=op))


def _allocated(s: Stmt) -> list[Buffer]:
    out: list[Buffer] = []
    stack = [s]
    while stack:
        st = stack.pop()
        if isinstance(st, Allocate):
            out.append(st.buffer)
        stack.extend(stmt_children(st))
    return out


def own_size_vars(kernel: Kernel) -> Kernel:
    """``kernel`` with size variables of its own.  The DSL interns size variables by
    name (``n`` is one object everywhere), so kernels built from it share them; a kernel
    in a module must own its variables, like a parsed one, for the module to compare
    structurally equal to its printed and parsed text."""
    if not kernel.size_vars:
        return kernel
    vmap = {v: Var(v.name_hint, v.dtype) for v in kernel.size_vars}

    def fresh(b: Buffer) -> Buffer:
        return Buffer(b.name_hint, tuple(vmap.get(d, d) if isinstance(d, Var) else d
                                         for d in b.shape), b.dtype)

    bmap = {b: fresh(b) for b in (*kernel.params, *_allocated(kernel.body))}
    body = substitute(kernel.body, vars=vmap, buffers=bmap)
    return Kernel(tuple(bmap[p] for p in kernel.params), body, kernel.num_outputs,  # type: ignore[arg-type]
                  attrs=kernel.attrs)


# ---------------------------------------------------------------- adding kernels

_BuilderCache = dict[Any, list[tuple[Kernel, GlobalVar]]]
_KERNEL_CACHE: weakref.WeakKeyDictionary[BlockBuilder, _BuilderCache] = weakref.WeakKeyDictionary()
"""Per block builder (so per pass run, never across modules): the kernels it holds by
structural hash, and the kernels made for each call signature."""


_HASHES: OrderedDict[int, tuple[Kernel, int]] = OrderedDict()
_HASHES_MAX = 8192


def kernel_hash(kernel: Kernel) -> int:
    """``structural_hash(kernel)``, memoized by identity (kernels are immutable): each
    pass run over a module otherwise rehashes the kernels it already has."""
    hit = _HASHES.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        _HASHES.move_to_end(id(kernel))
        return hit[1]
    h = structural_hash(kernel)
    _HASHES[id(kernel)] = (kernel, h)
    if len(_HASHES) > _HASHES_MAX:
        _HASHES.popitem(last=False)
    return h


def _builder_cache(bb: BlockBuilder) -> dict[Any, list[tuple[Kernel, GlobalVar]]]:
    cache = _KERNEL_CACHE.get(bb)
    if cache is None:
        cache = {}
        # the kernels the module already has (BlockBuilder has no public listing yet)
        for name, f in getattr(bb, "_functions", {}).items():
            if isinstance(f, Kernel):
                cache.setdefault(kernel_hash(f), []).append((f, GlobalVar(name)))
        _KERNEL_CACHE[bb] = cache
    return cache


def kernel_name(op: str) -> str:
    """A function name for a kernel of op ``op`` (dots of dialect ops become ``_``)."""
    name = re.sub(r"\W", "_", op)
    return name if name[:1].isalpha() or name[:1] == "_" else f"k_{name}"


def add_kernel(bb: BlockBuilder, kernel: Kernel, name: str) -> GlobalVar:
    """Add ``kernel`` to the module being built under a name based on ``name`` — or,
    when the module already holds a structurally equal kernel, return that one."""
    cache = _builder_cache(bb)
    h = kernel_hash(kernel)
    for k, gv in cache.get(h, ()):
        if structural_equal(k, kernel):
            return gv
    gv = bb.add_func(kernel, kernel_name(name))
    cache.setdefault(h, []).append((kernel, gv))
    return gv


def args_tuple(fields: Sequence[Expr]) -> Tuple:
    """The argument tuple of a ``call_kernel``/``call_extern``; an empty one carries its
    type (the block builder leaves an empty tuple literal untyped)."""
    if not fields:
        return Tuple((), ty=TupleType(()))
    return Tuple(tuple(fields))


def flatten_args(bb: BlockBuilder, args: Sequence[Expr]) -> list[Expr]:
    """The call arguments as a flat list of tensors: a tuple argument contributes its
    fields (read with ``TupleGetItem`` bindings when it is a variable)."""
    flat: list[Expr] = []
    for a in args:
        if isinstance(a, Tuple):
            flat.extend(a.fields)
        elif isinstance(a.ty, TupleType):
            for j in range(len(a.ty.fields)):
                flat.append(bb.emit(TupleGetItem(a, j), "field"))
        else:
            flat.append(a)
    return flat


# ---------------------------------------------------------------- legalization


def library_call(call: Call, target_kind: str = "c") -> Expr:
    """``call`` as a ``call_extern`` of its op's numpy library function."""
    name = call.op.name  # type: ignore[attr-defined]
    if not has_func(f"numpy.{name}"):
        raise LegalizeError(
            f"op {name!r} has neither a compute (plait/target/c/compute) nor a numpy library "
            f"function 'numpy.{name}' (plait/runtime/numpy_ops.py), so target "
            f"{target_kind!r} cannot lower it; register one with "
            "plait.target.c.register_compute or plait.transform.register_legalize"
        )
    return make_call("call_extern", ExternFunc(f"numpy.{name}"), args_tuple(call.args),
                     out=call.ty, attrs=dict(call.attrs) or None, span=call.span)


def _has_empty_tensor(types: list[Any]) -> bool:
    """True if a tensor among ``types`` (tuples included) has a static size of 0: a
    kernel over zero elements has no loop to run, so such calls use the library."""
    stack = list(types)
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, TensorType) and t.shape is not None and 0 in t.shape:
            return True
    return False


def legalize_to_kernel(bb: BlockBuilder, call: Call, target: Any) -> Expr:
    """The ``c`` target's legalization of any op (registered for ``"*"``): a generated
    kernel when the op has a compute that handles the call, else the library call."""
    op = call.op
    assert isinstance(op, Op)
    kind = getattr(target, "kind", "c")
    arg_types = [a.ty for a in call.args]
    key = ("call", op.name, tuple(arg_types), call.attrs, call.ty)
    cache = _builder_cache(bb)
    hit = cache.get(key)
    if hit is not None:
        return make_call("call_kernel", hit[0][1], args_tuple(flatten_args(bb, call.args)),
                         out=call.ty, span=call.span)
    if _has_empty_tensor([*arg_types, call.ty]):
        _LOG.info("op %r (binding %r) has an empty tensor; a library call on target %r",
                  op.name, bb.current_binding, kind)
        return library_call(call, kind)
    try:
        kernel = op_kernel(op.name, arg_types, call.attrs, call.ty)  # type: ignore[arg-type]
    except ComputeUnsupported as why:
        _LOG.info("op %r (binding %r) is a library call on target %r: %s",
                  op.name, bb.current_binding, kind, why)
        return library_call(call, kind)
    except LegalizeError:
        raise
    except Exception as err:  # a compute bug: name the op and the call's types
        types = ", ".join(str(t) for t in arg_types)
        raise LegalizeError(
            f"building the kernel of op {op.name!r} (binding {bb.current_binding!r}) for "
            f"target {kind!r} failed on arguments ({types}) -> {call.ty}: "
            f"{type(err).__name__}: {err}"
        ) from err
    gv = add_kernel(bb, kernel, op.name)
    cache[key] = [(kernel, gv)]
    return make_call("call_kernel", gv, args_tuple(flatten_args(bb, call.args)),
                     out=call.ty, span=call.span)


# ---------------------------------------------------------------- coverage


def coverage(ops: Iterable[str] | None = None) -> dict[str, str]:
    """How the ``c`` target lowers each core op (or each of ``ops``): ``"kernel"``
    (a generated kernel from its compute; some cases may still be library calls, see
    :func:`coverage_table`) or ``"library"`` (always the numpy library call)."""
    names = sorted(ops) if ops is not None else sorted(
        d.name for d in list_ops() if d.namespace == "core" and not d.name.startswith("builtin.")
        and d.name not in ("call_kernel", "call_extern")
    )
    return {n: "kernel" if get_compute(n) is not None else "library" for n in names}


DISPATCHED = {"matmul": "blas.matmul", "linear": "blas.linear", "conv2d": "blas.conv2d"}
"""Ops the ``c`` target's dispatch sends to BLAS-backed library functions (for float
tensors), before legalization."""


def coverage_table() -> str:
    """The coverage as a markdown table (the one in docs/targets.md)."""
    cov = coverage()
    kernels = [n for n, v in cov.items() if v == "kernel"]
    lines = [
        f"{len(kernels)} of {len(cov)} core ops have a compute (a generated kernel); "
        f"{len(cov) - len(kernels)} are always numpy library calls.",
        "",
        "| op | lowering on `c` | notes |",
        "|---|---|---|",
    ]
    for n, v in cov.items():
        notes = []
        if n in DISPATCHED:
            grouped = ("; grouped and depthwise: a product per group or plait_dwconv.c"
                       " (`c.DispatchDepthwise`)"
                       if n == "conv2d" else "")
            notes.append(f"float32: plait's matrix product (`c.DispatchGemm`){grouped}; "
                         f"other floats: `{DISPATCHED[n]}`")
        if n == "max_pool2d":
            notes.append("float32 NCHW (symbolic sizes taken at run time): plait_pool.c "
                         "(`c.DispatchPool`)")
        if n == "avg_pool2d":
            notes.append("float32 NCHW, its image static: plait_pool.c's row-wise average "
                         "(`c.DispatchPool`); one window over the whole image: its global "
                         "average")
        if n == "global_avg_pool2d":
            notes.append("float32 NCHW (symbolic sizes taken at run time): plait_pool.c's "
                         "global average (`c.DispatchPool`)")
        if n == "mean":
            notes.append("float32 over the two spatial axes of a rank-4 value: "
                         "plait_pool.c's global average (`c.DispatchPool`)")
        note = compute_note(n)
        if note:
            notes.append(note)
        lowering = "kernel" if v == "kernel" else "library call"
        lines.append(f"| `{n}` | {lowering} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def extern_calls(mod: IRModule) -> list[str]:
    """The symbols of every library function the graph functions of ``mod`` call
    (``call_extern``, or ``call_dps``/``call_alloc`` of an extern in the build phase),
    one entry per call, in function order."""
    from plait.ir.visitor import post_order

    out: list[str] = []
    for _, f in mod.graph_functions():
        for node in post_order(f):
            if (isinstance(node, Call) and isinstance(node.op, Op)
                    and node.op.name in ("call_extern", "builtin.call_dps", "builtin.call_alloc")
                    and isinstance(node.args[0], ExternFunc)):
                out.append(node.args[0].symbol)
    return out


def library_calls(mod: IRModule) -> list[str]:
    """The ops of a lowered module that run as numpy library calls (one entry per
    call), e.g. to check what a build left to numpy."""
    return [s[len("numpy."):] for s in extern_calls(mod) if s.startswith("numpy.")]


__all__ = [
    "DISPATCHED", "KERNEL_DTYPES", "add_kernel", "args_tuple", "coverage", "coverage_table",
    "extern_calls",
    "flatten_args", "kernel_name", "legalize_to_kernel", "library_call", "library_calls",
    "op_kernel", "own_size_vars",
]
