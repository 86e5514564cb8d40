"""ExplicitMemory: make every allocation explicit (the lowering→build transition).

    y = call_extern(extern("numpy.add"), (a, b), out=Tensor((2, 3), "float32"))

becomes

    y = builtin.alloc_tensor(shape=(2, 3), dtype="float32")
    _ = builtin.call_dps(extern("numpy.add"), (a, b), (y,))

and likewise for ``call_kernel``.  A result that is a tuple of tensors gets one
allocation per field.  A result whose shape is not known at compile time (unknown
rank) is produced by ``builtin.call_alloc``, which lets the callee allocate.

The build phase has no dataflow blocks: the same walk does what
:mod:`~plait.transform.to_non_dataflow` does (every ``DataflowVar`` becomes a ``Var`` of
the same name, type and span, and the blocks of each sequence are merged into one
binding block), so the module is that of ``ToNonDataflow`` then this pass, made
without a module in between (the default pipeline runs this pass alone).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.attrs import Attrs
from ..ir.builder import tuple_type
from ..ir.expr import (
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    Var,
    VarBinding,
    new_call,
    new_tuple,
    new_var,
    new_var_binding,
)
from ..ir.types import OBJECT, TensorType, TupleType, Type
from ..ir.visitor import ExprMutator, same_objects
from ..op.registry import make_call, normalize_attrs
from .pass_base import function_pass
from .to_non_dataflow import merge_blocks


def _allocatable(ty: Type | None) -> bool:
    if isinstance(ty, TensorType):
        return ty.shape is not None and ty.dtype is not None
    if isinstance(ty, TupleType):
        return bool(ty.fields) and all(
            isinstance(f, TensorType) and _allocatable(f) for f in ty.fields
        )
    return False


class _ExplicitMemory(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        # (shape, dtype) -> the checked attributes of its alloc_tensor call
        self._alloc_attrs: dict[tuple, Attrs] = {}
        # id(tensor type) -> (the type, the tuple type of one output of that type)
        self._out_tuple_types: dict[int, tuple[Type, TupleType]] = {}
        # id(extra attributes) -> (them, the checked attributes of call_dps)
        self._dps: dict[int, tuple[object, Attrs]] = {}
        # (id(call attributes), id(variable type)) -> _call_plan(both)
        self._call_plans: dict[tuple[int, int], tuple] = {}

    def visit_seq(self, seq: SeqExpr) -> SeqExpr:
        return merge_blocks(super().visit_seq(seq))   # one binding block per sequence

    def visit_block(self, block: BindingBlock) -> BindingBlock:
        bb = self.builder
        bb.begin_scope(False)  # a dataflow block becomes an ordinary one
        for b in block.bindings:
            self.visit_binding(b)
        bindings = bb.end_scope()
        if type(block) is BindingBlock and len(bindings) == len(block.bindings) and \
                same_objects(bindings, block.bindings):
            return block
        return BindingBlock(tuple(bindings))

    def visit_binding(self, binding: Binding) -> None:
        orig = binding.var
        # the variable of the result: a DataflowVar becomes a Var (as ToNonDataflow
        # makes it), which the uses of ``orig`` get (``_lower``, ``_converted``)
        var = orig if type(orig) is Var or not isinstance(orig, DataflowVar) else \
            new_var(orig.name_hint, orig.ty, orig.span)
        value = binding.value
        if type(binding) is VarBinding and type(value) is Call:
            # Fast path: a lowered call on a tuple of leaves (the usual binding);
            # substituting variables by hand is all visit_expr would do here.
            op = value.op
            if type(op) is Op and op.name in _LOWERED and len(value.args) == 2:
                callee, args = value.args
                if type(callee) is ExternFunc or type(callee) is GlobalVar:
                    new_args = self._substitute_args(args)
                    if new_args is not None:
                        self._lower(binding, orig, var, value, (callee, new_args))
                        return
        value = self.visit_expr(value)
        if (
            isinstance(binding, VarBinding)
            and isinstance(value, Call)
            and isinstance(value.op, Op)
            and value.op.name in _LOWERED
        ):
            self._lower(binding, orig, var, value, value.args)
            return
        if var is orig:
            self.emit_rewritten(binding, value)
        else:
            self.emit_rewritten(self._converted(binding, var), value)
            self._follow(orig, var)

    def _converted(self, binding: Binding, var: Var) -> Binding:
        """``binding`` with its DataflowVar replaced by ``var``, which its uses get."""
        self.var_remap[binding.var] = var
        if type(binding) is VarBinding:
            return VarBinding(var, binding.value)
        return replace(binding, var=var)

    def _follow(self, orig: Var, var: Var) -> None:
        """``orig``'s uses get what ``var``'s get, if ``var`` was replaced in turn."""
        new = self.var_remap.get(var)
        if new is not None:
            self.var_remap[orig] = new

    def _substitute_args(self, args: Expr) -> Expr | None:
        """``args`` (a variable or a tuple of leaves) with the variables replaced by
        their allocations, or None for any other argument."""
        remap = self.var_remap
        t = type(args)
        if t is Var or t is DataflowVar:
            return remap.get(args, args)  # type: ignore[arg-type]
        if t is not Tuple:
            return None
        fields = []
        changed = False
        same_types = True
        for f in args.fields:  # type: ignore[attr-defined]
            tf = type(f)
            if tf is Var or tf is DataflowVar:
                nf = remap.get(f, f)
                if nf is not f:
                    changed = True
                    if nf.ty is not f.ty:
                        same_types = False
            elif tf in _LEAVES:
                nf = f
            else:
                return None
            fields.append(nf)
        if not changed:
            return args
        # The tuple keeps its type when every field kept its type; else it gets the
        # type of its fields (None if one is untyped: the builder types it then).
        ty = args.ty if same_types else tuple_type(fields)
        return new_tuple(tuple(fields), ty, args.span)

    def _lower(self, binding: Binding, orig: Var, var: Var, call: Call,
               call_args: tuple[Expr, ...]) -> None:
        """Lower ``binding`` (of variable ``orig``, whose result variable is ``var``:
        ``orig`` or its Var if it is a DataflowVar) of a lowered call."""
        bb = self.builder
        callee, args = call_args
        attrs = call.attrs
        vty = var.ty
        plan = self._call_plans.get((id(attrs), id(vty)))
        if plan is None or plan[0] is not attrs or plan[1] is not vty:
            plan = self._call_plan(attrs, vty)
        if plan[2] is not None:
            # The common result, a tensor of known shape and dtype: its allocation is
            # bound to the call's own variable when that is of the kind and type the
            # allocation needs (its uses stay as they are), else to a new variable.
            if type(var) is Var and plan[3]:
                out, outs_ty = var, plan[4]
            else:
                out, outs_ty = new_var(var.name_hint, plan[6], None), plan[5]
            emit = bb.emit_binding
            emit(new_var_binding(out, new_call(_ALLOC, (), plan[2], out.ty, None)))
            dps = new_call(_DPS, (callee, args, new_tuple((out,), outs_ty, None)), plan[8],
                           OBJECT, call.span)
            if type(args) is Tuple and type(args.ty) is TupleType and (
                    type(callee) is ExternFunc or type(callee) is GlobalVar):
                # typed as call_dps's inference types it (an object; the callee and
                # both tuples are what it checks): bound as it is
                emit(new_var_binding(new_var("_", OBJECT, None), dps))
            else:
                bb.emit(dps, "_")
            if out is not orig:
                self.var_remap[orig] = out
            return
        out_ty, extra = plan[6], plan[7]
        name = var.name_hint
        if not _allocatable(out_ty):
            new = make_call("builtin.call_alloc", callee, args, out=out_ty, attrs=extra,
                            span=call.span)
            if var is orig:
                self.emit_rewritten(binding, new)
            else:
                self.emit_rewritten(self._converted(binding, var), new)
                self._follow(orig, var)
            return
        if isinstance(out_ty, TupleType):
            outs = [self._alloc(f, f"{name}_{i}") for i, f in enumerate(out_ty.fields)]
            result: Expr = Tuple(tuple(outs))
            outs_ty = TupleType(tuple(v.ty for v in outs))  # type: ignore[misc]
        else:
            # The variable of the result holds its allocation: the same object when it
            # is of the kind and type the allocation needs (its uses stay as they are)
            keep = type(var) is Var and (var.ty is out_ty or var.ty == out_ty)
            outs = [self._alloc(out_ty, name, var if keep else None)]
            result = outs[0]
            outs_ty = self._out_tuple_type(outs[0].ty)
        dps_attrs = self._dps_attrs(extra)
        dps = Call(_DPS, (callee, args, Tuple(tuple(outs), ty=outs_ty)), dps_attrs, ty=OBJECT,
                   span=call.span)
        if type(args) is Tuple and type(args.ty) is TupleType and (
                type(callee) is ExternFunc or type(callee) is GlobalVar):
            # typed as call_dps's inference types it (an object; the callee and both
            # tuples are what it checks): bound as it is
            bb.emit_binding(VarBinding(Var("_", OBJECT), dps))
        else:
            bb.emit(dps, "_")
        if result is var:
            if var is not orig:
                self.var_remap[orig] = var
            return
        if isinstance(result, Var):
            self.var_remap[orig] = result
        else:
            retyped = replace(var, ty=out_ty)
            bb.emit_binding(VarBinding(retyped, bb.normalize(result)))
            self.var_remap[orig] = retyped

    def _call_plan(self, attrs: Attrs, var_ty: object) -> tuple:
        """What lowering a call of attributes ``attrs`` bound to a variable of type
        ``var_ty`` needs (kept per pair of objects, which it keeps alive): both; the
        allocation's attributes, whether the variable keeps its type and the two
        outputs' tuple types (``_tensor_plan``: None, None, None, None but for a
        tensor result of known shape and dtype); the result type, the extra
        attributes, and the checked attributes of the call_dps."""
        out_ty = attrs.get("out")
        extra = attrs.get("attrs")
        tp = self._tensor_plan(out_ty, var_ty)
        if tp[2] is None:
            plan = (attrs, var_ty, None, None, None, None, out_ty, extra, None)
        else:
            plan = (attrs, var_ty, tp[2], tp[3], tp[4], tp[5], out_ty, extra,
                    self._dps_attrs(extra))
        self._call_plans[(id(attrs), id(var_ty))] = plan
        return plan

    def _tensor_plan(self, out_ty: object, var_ty: object) -> tuple:
        """What lowering a call of result type ``out_ty`` bound to a variable of type
        ``var_ty`` needs: both types; the checked attributes of the allocation (None
        unless ``out_ty`` is a tensor of known shape and dtype); whether the variable's
        type is the result's; the type of the outputs' tuple of the variable, and of a
        new variable."""
        if isinstance(out_ty, TensorType) and _allocatable(out_ty):
            alloc = self._alloc_call_attrs(out_ty)
            same = var_ty is out_ty or var_ty == out_ty
            plan = (out_ty, var_ty, alloc, same,
                    self._out_tuple_type(var_ty) if same else None,  # type: ignore[arg-type]
                    self._out_tuple_type(out_ty))
        else:
            plan = (out_ty, var_ty, None)
        return plan

    def _dps_attrs(self, extra: object) -> Attrs:
        """The checked attributes of a call_dps passing ``extra`` (one object per
        ``extra`` object: the entry keeps it alive, so its id stays its own)."""
        hit = self._dps.get(id(extra))
        if hit is not None and hit[0] is extra:
            return hit[1]
        attrs = normalize_attrs(_DPS.definition, {"attrs": extra})
        self._dps[id(extra)] = (extra, attrs)
        return attrs

    def _out_tuple_type(self, ty: Type) -> TupleType:
        hit = self._out_tuple_types.get(id(ty))
        if hit is not None and hit[0] is ty:
            return hit[1]
        tt = TupleType((ty,))
        self._out_tuple_types[id(ty)] = (ty, tt)  # keeps ty alive: its id is not reused
        return tt

    def _alloc_call_attrs(self, ty: TensorType) -> Attrs:
        """The checked attributes of the allocation of a tensor of type ``ty`` (checked
        once per shape and dtype)."""
        key = (ty.shape, ty.dtype)
        attrs = self._alloc_attrs.get(key)
        if attrs is None:
            attrs = self._alloc_attrs[key] = make_call(
                "builtin.alloc_tensor", shape=ty.shape, dtype=ty.dtype).attrs
        return attrs

    def _alloc(self, ty: Type, name: str, var: Var | None = None) -> Var:
        """Bind a new allocation of a tensor of type ``ty`` to ``var`` (a new variable
        named ``name`` if None)."""
        assert isinstance(ty, TensorType)
        attrs = self._alloc_call_attrs(ty)
        # alloc_tensor(shape, dtype) has type Tensor(shape, dtype): ``ty`` itself
        if var is None:
            var = Var(name, ty)
        self.builder.emit_binding(VarBinding(var, Call(_ALLOC, (), attrs, var.ty)))
        return var


_LOWERED = ("call_extern", "call_kernel")
_LEAVES = frozenset(
    {Var, DataflowVar, Constant, GlobalVar, ExternFunc, ShapeExpr, PrimValue, StringImm}
)
_DPS = Op.get("builtin.call_dps")
_ALLOC = Op.get("builtin.alloc_tensor")


def explicit_memory(func: Function) -> Function:
    """``func`` with allocations made explicit and no dataflow blocks (see the module
    docstring)."""
    return _ExplicitMemory().visit_function(func)


@function_pass(phases=("lowering",), transition="build")
class ExplicitMemory:
    """Explicit allocations, DPS calls of kernels/externs, no dataflow blocks (enters build)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return explicit_memory(func)
