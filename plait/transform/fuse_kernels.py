"""FuseKernels: lower each primitive function to one kernel, composed from the
computes of its ops.

:class:`~plait.transform.fuse_ops.FuseOps` leaves every fused group as a primitive
function (``attrs={"primitive": True}``) called from its caller.  FuseKernels, which
runs right after it and before :class:`~plait.transform.legalize.LegalizeOps`, takes
each primitive function and

1. makes a placeholder for each parameter, and for each binding in order calls the
   *compute* of the binding's op (``fn(inputs, attrs, out_ty) -> DSL tensor``, from
   the compute registry the target kind registered with
   :func:`register_kernel_fusion`) on the tensors of its operands;
2. inlines every elementwise and injective stage into its consumers
   (:func:`plait.kernel.inline.inline_stages`): a chain of such ops becomes one loop
   nest with no intermediate buffer; a reduction stays a stage of its own, with its
   elementwise producers inlined into it and its elementwise tail in a second loop
   nest of the same kernel;
3. lowers the result into one kernel with :func:`plait.kernel.dsl.create_kernel`,
   named after the primitive function and added to the module (structurally equal
   kernels are shared, so the twelve identical layers of a transformer make one);
4. replaces each call of the primitive function by
   ``call_kernel(kernel, (args...), out=<type>)`` and removes the primitive function.

Scalar constants (any constant of one element) become immediates of the kernel;
other constants are passed to it as extra arguments.  When a group cannot be composed
-- an op without a compute, a compute that declines the call, a dtype the target's
kernels do not handle, a result size that the inputs do not determine -- its
primitive function is inlined back into the caller (the reason is logged on the
``plait.transform`` logger) and LegalizeOps lowers its ops one by one, so FuseKernels
never changes what a module computes.  On a target kind that registered no computes
every primitive function is inlined back.

External functions (``compiler="x"``) and the primitive functions made from them are
left alone unless the pass is enabled for ``x``, as for every pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from ..ir.expr import (
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    If,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.structural import structural_equal, structural_hash
from ..ir.types import TensorType, TupleType, Type
from ..kernel import dsl
from ..kernel.inline import inline_stages
from ..kernel.ir import IntImm, Kernel, PrimExpr, const
from ..op.registry import make_call, normalize_attrs
from .context import PassContext
from .debug_counter import allow_rewrite
from .external import COMPILER_ATTR, enabled_codegens
from .fuse_ops import is_primitive
from .pass_base import module_pass

_LOG = logging.getLogger("plait.transform")

ComputeLookup = Callable[[str], Any]
"""``lookup(op_name) -> compute or None``; a compute is ``fn(inputs, attrs, out_ty)``
returning a DSL tensor (see ``plait/target/c/compute/registry.py``)."""


@dataclass(frozen=True)
class KernelFusion:
    """What a target kind registered for FuseKernels: how to find an op's compute and
    the dtypes its generated kernels support."""

    lookup: ComputeLookup
    dtypes: frozenset[str]


KERNEL_FUSION: dict[str, KernelFusion] = {}
"""Target kind -> its registration (see :func:`register_kernel_fusion`)."""

ALL_KERNEL_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})


def register_kernel_fusion(target_kind: str, lookup: ComputeLookup, *,
                           dtypes: Collection[str] = ALL_KERNEL_DTYPES,
                           override: bool = False) -> None:
    """Let FuseKernels build fused kernels for ``target_kind`` (and the kinds derived
    from it) from the computes that ``lookup(op_name)`` returns; tensors of a dtype
    not in ``dtypes`` are never put in a fused kernel."""
    if target_kind in KERNEL_FUSION and not override:
        raise ValueError(f"kernel fusion for target kind {target_kind!r} is already "
                         "registered (pass override=True)")
    KERNEL_FUSION[target_kind] = KernelFusion(lookup, frozenset(dtypes))


def find_kernel_fusion(target: Any) -> KernelFusion | None:
    """The registration for ``target`` (a Target, a kind name or None): its kind's,
    or the nearest ancestor's."""
    if target is None:
        return None
    if isinstance(target, str):
        from ..target import Target

        target = Target(target)
    for kind in target.kind_info.chain():
        reg = KERNEL_FUSION.get(kind.name)
        if reg is not None:
            return reg
    return None


def fusion_passes(target: Any) -> list[Any]:
    """The fusion passes for a target's ``legalize`` hook: ``[FuseOps(),
    FuseKernels()]``, or none when the target has the attribute ``fuse=False``."""
    from .fuse_ops import FuseOps

    if not target.attrs.get("fuse", True):
        return []
    return [FuseOps(), FuseKernels()]


# ------------------------------------------------------------------ composing a kernel


class NotFusable(Exception):
    """A primitive function cannot become one kernel; the message says why."""


def _dims(ty: TensorType) -> tuple[Any, ...]:
    out = []
    for d in ty.shape:  # type: ignore[union-attr]
        if isinstance(d, str):
            out.append(dsl.size_var(d))
        elif type(d) is int:
            out.append(d)
        else:
            raise NotFusable(f"the size {d} is an expression (kernels take static sizes and "
                             "plain size names)")
    return tuple(out)


def _check_type(ty: Type | None, what: str, dtypes: frozenset[str]) -> TensorType:
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        raise NotFusable(f"{what} has type {ty}, not a tensor of known rank and dtype")
    if ty.dtype not in dtypes:
        raise NotFusable(f"{what} has dtype {ty.dtype}, which the target's kernels do not "
                         "support")
    return ty


def _same_dim(a: Any, b: Any) -> bool:
    """Two DSL dims that are certainly equal: the same int or the same size variable."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a is b


def _scalar(value: Any, dtype: str) -> PrimExpr:
    if dtype == "bool":
        return IntImm(bool(value), "bool")
    return const(value, dtype)


class _Composer:
    """Builds the kernel of one primitive function."""

    def __init__(self, fusion: KernelFusion) -> None:
        self.fusion = fusion
        self.const_params: list[dsl.Tensor] = []
        self.const_args: list[Constant] = []

    def constant(self, c: Constant) -> dsl.Tensor:
        ty = _check_type(c.ty, "a constant", self.fusion.dtypes)
        dims = _dims(ty)
        if c.data.size == 1:  # an immediate, inlined wherever it is read
            v = _scalar(c.data.reshape(()).item(), ty.dtype)  # type: ignore[arg-type]
            return dsl.compute(dims, lambda *_: v, "const")
        t = dsl.placeholder(dims, ty.dtype, f"c{len(self.const_params)}")  # type: ignore[arg-type]
        self.const_params.append(t)
        self.const_args.append(c)
        return t

    def operand(self, a: Expr, env: dict[Var, dsl.Tensor]) -> Any:
        if isinstance(a, Var):
            t = env.get(a)
            if t is None:
                raise NotFusable(f"variable {a.name_hint!r} is not a tensor of the group")
            return t
        if isinstance(a, Constant):
            return self.constant(a)
        if isinstance(a, Tuple):
            return tuple(self.operand(f, env) for f in a.fields)
        raise NotFusable(f"an operand is a {type(a).__name__}")

    def compose(self, func: Function, name: str) -> tuple[Kernel, list[Constant]]:
        dtypes = self.fusion.dtypes
        body = func.body
        if not isinstance(body, SeqExpr) or not isinstance(body.body, Var):
            raise NotFusable("the body is not a sequence of bindings ending in a variable")
        env: dict[Var, dsl.Tensor] = {}
        params: list[dsl.Tensor] = []
        for p in func.params:
            ty = _check_type(p.ty, f"parameter {p.name_hint!r}", dtypes)
            t = dsl.placeholder(_dims(ty), ty.dtype, p.name_hint)  # type: ignore[arg-type]
            env[p] = t
            params.append(t)
        ops: list[str] = []
        for block in body.blocks:
            for b in block.bindings:
                env[b.var] = self.binding(b, env)
                ops.append(b.value.op.name)  # type: ignore[union-attr]
        out = env.get(body.body)
        if out is None:
            raise NotFusable("the result is not bound in the body")
        ret = _check_type(func.ret_ty or body.body.ty, "the result", dtypes)
        if out.is_placeholder:
            src = out
            out = dsl.compute(src.shape, lambda *i: src[i], "out")
        (out,) = inline_stages([out])
        inputs = {id(d) for t in (*params, *self.const_params) for d in t.shape}
        for d in out.shape:
            if not isinstance(d, int) and id(d) not in inputs:
                raise NotFusable(f"the result size {d.name_hint} is not a size of an input "
                                 f"(result type {ret})")
        kernel = dsl.create_kernel([*params, *self.const_params, out], name=name,
                                   attrs={"fused_ops": tuple(ops)})
        return kernel, self.const_args

    def binding(self, b: Binding, env: dict[Var, dsl.Tensor]) -> dsl.Tensor:
        call = b.value
        if not isinstance(b, VarBinding) or not isinstance(call, Call) or not isinstance(
                call.op, Op):
            raise NotFusable(f"binding {b.var.name_hint!r} is not an op call")
        op = call.op.name
        fn = self.fusion.lookup(op)
        if fn is None:
            raise NotFusable(f"op {op!r} has no compute")
        ty = _check_type(call.ty, f"the result of {op!r}", self.fusion.dtypes)
        inputs = [self.operand(a, env) for a in call.args]
        try:
            result = fn(inputs, normalize_attrs(call.op.definition, call.attrs), call.ty)
        except Exception as err:  # the compute declines (or fails): lower op by op
            raise NotFusable(f"the compute of {op!r} declined: {type(err).__name__}: {err}") \
                from err
        want = _dims(ty)
        if (not isinstance(result, dsl.Tensor) or result.dtype != ty.dtype
                or len(result.shape) != len(want)
                or not all(_same_dim(a, b) for a, b in zip(result.shape, want))):
            raise NotFusable(f"the compute of {op!r} did not give a tensor of type {ty}")
        return result


def compose_kernel(func: Function, fusion: KernelFusion, name: str
                   ) -> tuple[Kernel, list[Constant]]:
    """One kernel computing the primitive function ``func`` from its ops' computes,
    and the constants to pass after the function's arguments.  Raises
    :class:`NotFusable` (with the reason) when it cannot."""
    return _Composer(fusion).compose(func, name)


# ------------------------------------------------------------------ rewriting the callers


def _inline_bindings(func: Function, args: tuple[Expr, ...], result: Var,
                     dataflow: bool) -> list[Binding] | None:
    """The bindings of primitive function ``func`` for a call with ``args`` whose value
    is bound to ``result``; None when the body is not a plain sequence of pure
    bindings."""
    body = func.body
    if not isinstance(body, SeqExpr) or not isinstance(body.body, Var):
        return None
    bindings = [b for block in body.blocks for b in block.bindings]
    if not bindings or bindings[-1].var is not body.body:
        return None
    subst: dict[Var, Expr] = dict(zip(func.params, args))
    out: list[Binding] = []
    for k, b in enumerate(bindings):
        v = b.value
        if not isinstance(b, VarBinding) or not isinstance(v, Call | Tuple | TupleGetItem | Var):
            return None
        if isinstance(v, Call) and not (isinstance(v.op, Op) and v.op.definition.pure):
            return None
        if k == len(bindings) - 1:
            var = result
        else:
            var = (DataflowVar if dataflow else Var)(b.var.name_hint, b.var.ty, span=b.var.span)
        out.append(VarBinding(var, _subst(v, subst)))
        subst[b.var] = var
    return out


def _subst(e: Expr, subst: dict[Var, Expr]) -> Expr:
    if isinstance(e, Var):
        return subst.get(e, e)
    if isinstance(e, Call):
        args = tuple(_subst(a, subst) for a in e.args)
        return replace(e, args=args) if any(x is not y for x, y in zip(args, e.args)) else e
    if isinstance(e, Tuple):
        fields = tuple(_subst(f, subst) for f in e.fields)
        return replace(e, fields=fields) if any(x is not y for x, y in zip(fields, e.fields)) \
            else e
    if isinstance(e, TupleGetItem):
        tv = _subst(e.tuple_value, subst)
        return e if tv is e.tuple_value else replace(e, tuple_value=tv)
    return e


def _call_kernel(gv: GlobalVar, args: list[Expr], ty: Type, span: Any) -> Call:
    tup = Tuple(tuple(args), ty=TupleType(tuple(a.ty for a in args)))  # type: ignore[misc]
    call = make_call("call_kernel", gv, tup, out=ty, span=span)
    return replace(call, ty=ty)


class _CallRewriter:
    """Replaces calls of primitive functions in one function."""

    def __init__(self, mod: IRModule, lowered: dict[str, tuple[GlobalVar, list[Constant]]],
                 primitives: Collection[str]) -> None:
        self.mod = mod
        self.lowered = lowered
        self.primitives = primitives

    def seq(self, seq: SeqExpr) -> SeqExpr:
        blocks: list[BindingBlock] = []
        changed = False
        for block in seq.blocks:
            nb = self.block(block)
            changed |= nb is not block
            blocks.append(nb)
        return replace(seq, blocks=tuple(blocks)) if changed else seq

    def block(self, block: BindingBlock) -> BindingBlock:
        out: list[Binding] = []
        changed = False
        dataflow = isinstance(block, DataflowBlock)
        for b in block.bindings:
            v = b.value
            if isinstance(b, VarBinding) and isinstance(v, If):
                then_b = self.seq(v.then_branch) if isinstance(v.then_branch, SeqExpr) \
                    else v.then_branch
                else_b = self.seq(v.else_branch) if isinstance(v.else_branch, SeqExpr) \
                    else v.else_branch
                if then_b is not v.then_branch or else_b is not v.else_branch:
                    b = replace(b, value=replace(v, then_branch=then_b, else_branch=else_b))
                    changed = True
                out.append(b)
                continue
            if (isinstance(b, VarBinding) and isinstance(v, Call)
                    and isinstance(v.op, GlobalVar) and v.op.name_hint in self.primitives):
                name = v.op.name_hint
                done = self.lowered.get(name)
                if done is not None:
                    gv, consts = done
                    out.append(VarBinding(b.var, _call_kernel(gv, [*v.args, *consts],
                                                              b.var.ty, v.span)))
                    changed = True
                    continue
                inlined = _inline_bindings(self.mod[name], v.args, b.var, dataflow)  # type: ignore[arg-type]
                if inlined is not None:
                    out.extend(inlined)
                    changed = True
                    continue
            out.append(b)
        return type(block)(tuple(out)) if changed else block


def _references(f: Function) -> set[str]:
    """Names of the module functions ``f`` refers to."""
    from ..ir.visitor import post_order

    return {n.name_hint for n in post_order(f) if isinstance(n, GlobalVar)}


def fuse_kernels(mod: IRModule, fusion: KernelFusion | None,
                 enabled: frozenset[str]) -> IRModule:
    """``mod`` with the primitive functions of the functions it handles (not external,
    or external of a codegen in ``enabled``) lowered to fused kernels (or inlined back
    where they cannot be, or when ``fusion`` is None)."""

    def handled(f: Function) -> bool:
        codegen = f.attrs.get(COMPILER_ATTR)
        return codegen is None or codegen in enabled

    primitives = [n for n, f in mod.graph_functions() if is_primitive(f) and handled(f)]
    if not primitives:
        return mod
    prim_set = set(primitives)
    kept: set[str] = set()  # referred to by functions this pass leaves alone
    for fname, f in mod.graph_functions():
        if fname not in prim_set and not handled(f):
            kept |= _references(f) & prim_set
    lowered: dict[str, tuple[GlobalVar, list[Constant]]] = {}
    kernels: dict[str, Kernel] = {}
    by_hash: dict[int, list[str]] = {}
    for name, k in mod.items():
        if isinstance(k, Kernel):
            by_hash.setdefault(structural_hash(k), []).append(name)
    taken = set(mod.functions) - (prim_set - kept)
    if fusion is not None:
        for name in primitives:
            func: Function = mod[name]  # type: ignore[assignment]
            if not allow_rewrite(lambda name=name: f"compose primitive {name!r} into a kernel"):
                continue  # inlined back below: lowered op by op
            try:
                kernel, consts = compose_kernel(func, fusion, name)
            except NotFusable as why:
                _LOG.info("FuseKernels: primitive function %r is lowered op by op: %s",
                          name, why)
                continue
            except Exception as err:  # never wrong, at worst unfused: say why
                _LOG.warning("FuseKernels: composing primitive function %r failed (%s: %s); "
                             "it is lowered op by op", name, type(err).__name__, err)
                continue
            owner = func.attrs.get(COMPILER_ATTR)
            if owner is not None:  # extract_external must take the kernel along
                kernel = kernel.with_attrs(**{COMPILER_ATTR: owner})
            h = structural_hash(kernel)
            same = None
            for n in by_hash.get(h, ()):
                other = kernels[n] if n in kernels else mod[n]
                if other.attrs.get(COMPILER_ATTR) == owner and structural_equal(other, kernel):
                    same = n
                    break
            if same is None:
                kname, k = name, 1
                while kname in taken:
                    kname, k = f"{name}_{k}", k + 1
                taken.add(kname)
                kernels[kname] = kernel  # type: ignore[assignment]
                by_hash.setdefault(h, []).append(kname)
                same = kname
            lowered[name] = (GlobalVar(same), consts)
    changed: dict[str, Any] = {}
    for fname, f in mod.graph_functions():
        if fname in prim_set or not handled(f) or not isinstance(f.body, SeqExpr):
            continue
        body = _CallRewriter(mod, lowered, prim_set).seq(f.body)
        if body is not f.body:
            changed[fname] = replace(f, body=body)
    new = mod.with_functions(changed)
    # drop the primitive functions nothing refers to any more
    refs: set[str] = set()
    for fname, f in new.graph_functions():
        if fname not in prim_set:
            refs |= _references(f)
    funcs = {n: f for n, f in new.items() if n not in prim_set or n in refs}
    funcs.update(kernels)
    return IRModule(funcs, new.attrs)


@module_pass(phases=("optimization",))
class FuseKernels:
    """Lower each primitive function to one kernel composed from its ops' computes."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return fuse_kernels(mod, find_kernel_fusion(mod.target), enabled_codegens(self, ctx))


__all__ = [
    "ALL_KERNEL_DTYPES",
    "KERNEL_FUSION",
    "FuseKernels",
    "KernelFusion",
    "NotFusable",
    "compose_kernel",
    "find_kernel_fusion",
    "fuse_kernels",
    "fusion_passes",
    "register_kernel_fusion",
]
