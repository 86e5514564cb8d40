"""Target-specific dispatch: rewrite chosen op calls before LegalizeOps.

:func:`rewrite_ops` is the tool every dispatch pass is made of: it walks the graph
functions and hands each call of a chosen op to a rewrite function ``fn(bb, call,
target) -> Expr | None``, which returns the replacement — typically ``call_kernel`` of
a kernel it adds with :func:`~plait.target.c.legalize.add_kernel`, or
``call_extern`` of a library function — or None to leave the call to legalization.

The ``c`` target's own dispatch pass, :class:`DispatchLibrary` (``c.DispatchLibrary``),
sends float ``matmul``, ``linear`` and ``conv2d`` to the BLAS-backed library functions
``blas.matmul``, ``blas.linear`` and ``blas.conv2d`` of :mod:`plait.runtime.blas_ops`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from plait.ir.builder import BlockBuilder
from plait.ir.expr import Call, Expr, ExternFunc, Function, Op, Tuple
from plait.ir.module import IRModule
from plait.ir.types import TensorType
from plait.ir.visitor import ExprMutator
from plait.op.registry import make_call
from plait.runtime import blas_ops
from plait.transform.debug_counter import allow_rewrite
from plait.transform.pass_base import module_pass

RewriteFn = Callable[[BlockBuilder, Call, Any], Expr | None]
"""``fn(bb, call, target) -> replacement or None``: ``call`` is typed, ``bb`` the
builder of the function being rewritten (emit extra bindings with ``bb.emit``, add
kernels with :func:`~plait.target.c.legalize.add_kernel`)."""


class _OpRewriter(ExprMutator):
    def __init__(self, mod: IRModule, rewrites: Mapping[str, RewriteFn], target: Any) -> None:
        super().__init__(mod)
        self.rewrites = rewrites
        self.target = target

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op):
            return call
        fn = self.rewrites.get(op.name)
        if fn is None:
            return call
        new = fn(self.builder, self.builder.normalize(call), self.target)
        if new is None or not allow_rewrite(
                lambda: f"{op.name} at binding {self.builder.current_binding!r}"):
            return call
        return new


def rewrite_ops(
    mod: IRModule,
    rewrites: Mapping[str, RewriteFn],
    target: Any = None,
    skip: Callable[[Function], bool] | None = None,
) -> IRModule:
    """``mod`` with every call of an op in ``rewrites`` replaced by what its rewrite
    function returns (see :data:`RewriteFn`); functions for which ``skip`` is true
    (default: those of external codegens) are left alone.  Kernels the rewrite
    functions add go into the module.  ``target`` defaults to the module's."""
    if target is None:
        target = mod.target
    if isinstance(target, str):
        from plait.target import Target

        target = Target(target)
    if skip is None:
        def skip(f: Function) -> bool:
            return bool(f.attrs.get("compiler"))
    current = mod
    funcs: dict[str, Function] = {}
    for name, f in mod.graph_functions():
        if skip(f):
            continue
        rw = _OpRewriter(current, rewrites, target)
        nf = rw.visit_function(f)
        added = {k: v for k, v in rw.builder.get().items() if k not in current}
        if added:
            current = current.with_functions(added)
        if nf is not f:
            funcs[name] = nf
    return current.with_functions(funcs) if funcs else current


FLOAT_DTYPES = ("float32", "float64")


def library_rewrite(symbol: str, dtypes: Sequence[str] = FLOAT_DTYPES) -> RewriteFn:
    """A rewrite function turning a call into ``call_extern(symbol)`` when every
    argument is a tensor of one of ``dtypes`` (else it leaves the call alone)."""

    def rewrite(bb: BlockBuilder, call: Call, target: Any) -> Expr | None:
        for a in call.args:
            if not isinstance(a.ty, TensorType) or a.ty.dtype not in dtypes or a.ty.shape is None:
                return None
        return make_call("call_extern", ExternFunc(symbol), Tuple(call.args), out=call.ty,
                         attrs=dict(call.attrs) or None, span=call.span)

    rewrite.__name__ = rewrite.__qualname__ = f"to_{symbol.replace('.', '_')}"
    return rewrite


LIBRARY_OPS = {op: f"blas.{op}" for op in blas_ops.OPS}
"""The ops :class:`DispatchLibrary` sends to a library function, and the function."""


def is_depthwise(call: Call) -> bool:
    """Whether ``call`` is a conv2d with one input channel per group (MobileNet's and
    EfficientNet's depthwise convolutions, ConvNeXt's 7x7): its generated kernel (one
    unrolled sum over the window per output, vectorized along the output row) beats
    the library's product per group, which multiplies 1 x (KH*KW) matrices."""
    if call.attrs.get("groups", 1) == 1 or len(call.args) < 2:
        return False
    w = call.args[1].ty
    if not isinstance(w, TensorType) or w.shape is None:
        return False
    layout = call.attrs.get("kernel_layout", "OIHW")
    return w.shape[layout.index("I")] == 1


def _library_rewrite_for(op: str) -> RewriteFn:
    """:func:`library_rewrite` of ``op``'s library function; depthwise conv2d stays for
    the generated kernel."""
    rewrite = library_rewrite(LIBRARY_OPS[op])
    if op != "conv2d":
        return rewrite

    def conv2d(bb: BlockBuilder, call: Call, target: Any) -> Expr | None:
        return None if is_depthwise(call) else rewrite(bb, call, target)

    return conv2d


@module_pass(name="c.DispatchLibrary", phases=("optimization",))
class DispatchLibrary:
    """Send float matmul, linear and conv2d to BLAS-backed library functions (blas.*).

    Depthwise conv2d is left to its generated kernel (:func:`is_depthwise`)."""

    def __init__(self, ops: Sequence[str] = tuple(LIBRARY_OPS), *,
                 codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        unknown = [o for o in ops if o not in LIBRARY_OPS]
        if unknown:
            raise ValueError(f"c.DispatchLibrary: no library function for {unknown}; "
                             f"it dispatches {', '.join(LIBRARY_OPS)}")
        self.ops = tuple(ops)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        rewrites = {op: _library_rewrite_for(op) for op in self.ops}
        return rewrite_ops(mod, rewrites, skip=skips_external(self, ctx))  # type: ignore[arg-type]
