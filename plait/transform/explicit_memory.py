"""ExplicitMemory: make every allocation explicit (the lowering→build transition).

    y = call_extern(extern("numpy.add"), (a, b), out=Tensor((2, 3), "float32"))

becomes

    y = builtin.alloc_tensor(shape=(2, 3), dtype="float32")
    _ = builtin.call_dps(extern("numpy.add"), (a, b), (y,))

and likewise for ``call_kernel``.  A result that is a tuple of tensors gets one
allocation per field.  A result whose shape is not known at compile time (unknown
rank) is produced by ``builtin.call_alloc``, which lets the callee allocate.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.attrs import Attrs
from ..ir.builder import tuple_type
from ..ir.expr import (
    Binding,
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    Var,
    VarBinding,
)
from ..ir.types import OBJECT, TensorType, TupleType, Type
from ..ir.visitor import ExprMutator
from ..op.registry import make_call, normalize_attrs
from .pass_base import function_pass


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
        # (id(result type), id(variable type)) -> _tensor_plan(both)
        self._tensor_plans: dict[tuple[int, int], tuple] = {}

    def visit_binding(self, binding: Binding) -> None:
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
                        self._lower(binding, value, (callee, new_args))
                        return
        value = self.visit_expr(value)
        if (
            isinstance(binding, VarBinding)
            and isinstance(value, Call)
            and isinstance(value.op, Op)
            and value.op.name in _LOWERED
        ):
            self._lower(binding, value, value.args)
            return
        self.emit_rewritten(binding, value)

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
        return Tuple(tuple(fields), ty, args.span)

    def _lower(self, binding: Binding, call: Call, call_args: tuple[Expr, ...]) -> None:
        bb = self.builder
        callee, args = call_args
        attrs = call.attrs
        out_ty = attrs.get("out")
        extra = attrs.get("attrs")
        var = binding.var
        plan = self._tensor_plans.get((id(out_ty), id(var.ty)))
        if plan is None or plan[0] is not out_ty or plan[1] is not var.ty:
            plan = self._tensor_plan(out_ty, var.ty)
        if plan[2] is not None:
            # The common result, a tensor of known shape and dtype: its allocation is
            # bound to the call's own variable when that is of the kind and type the
            # allocation needs (its uses stay as they are), else to a new variable.
            vcls = DataflowVar if bb.in_dataflow else Var
            if type(var) is vcls and plan[3]:
                out, outs_ty = var, plan[4]
            else:
                out, outs_ty = vcls(var.name_hint, out_ty), plan[5]
            emit = bb.emit_binding
            emit(VarBinding(out, Call(_ALLOC, (), plan[2], out.ty)))
            dps = Call(_DPS, (callee, args, Tuple((out,), outs_ty)), self._dps_attrs(extra),
                       OBJECT)
            if type(args) is Tuple and type(args.ty) is TupleType and (
                    type(callee) is ExternFunc or type(callee) is GlobalVar):
                # typed as call_dps's inference types it (an object; the callee and
                # both tuples are what it checks): bound as it is
                emit(VarBinding(vcls("_", OBJECT), dps))
            else:
                bb.emit(dps, "_")
            if out is not var:
                self.var_remap[var] = out
            return
        name = var.name_hint
        if not _allocatable(out_ty):
            new = make_call("builtin.call_alloc", callee, args, out=out_ty, attrs=extra)
            self.emit_rewritten(binding, new)
            return
        in_dataflow = bb.in_dataflow
        if isinstance(out_ty, TupleType):
            outs = [self._alloc(f, f"{name}_{i}", in_dataflow) for i, f in enumerate(out_ty.fields)]
            result: Expr = Tuple(tuple(outs))
            outs_ty = TupleType(tuple(v.ty for v in outs))  # type: ignore[misc]
        else:
            # The variable of the result holds its allocation: the same object when it
            # is of the kind and type the allocation needs (its uses stay as they are)
            keep = type(var) is (DataflowVar if in_dataflow else Var) and (
                var.ty is out_ty or var.ty == out_ty)
            outs = [self._alloc(out_ty, name, in_dataflow, var if keep else None)]
            result = outs[0]
            outs_ty = self._out_tuple_type(outs[0].ty)
        dps_attrs = self._dps_attrs(extra)
        dps = Call(_DPS, (callee, args, Tuple(tuple(outs), ty=outs_ty)), dps_attrs, ty=OBJECT)
        if type(args) is Tuple and type(args.ty) is TupleType and (
                type(callee) is ExternFunc or type(callee) is GlobalVar):
            # typed as call_dps's inference types it (an object; the callee and both
            # tuples are what it checks): bound as it is
            bb.emit_binding(VarBinding((DataflowVar if in_dataflow else Var)("_", OBJECT), dps))
        else:
            bb.emit(dps, "_")
        if result is var:
            return
        if isinstance(result, Var):
            self.var_remap[var] = result
        else:
            new_var = replace(var, ty=out_ty)
            bb.emit_binding(VarBinding(new_var, bb.normalize(result)))
            self.var_remap[var] = new_var

    def _tensor_plan(self, out_ty: object, var_ty: object) -> tuple:
        """What lowering a call of result type ``out_ty`` bound to a variable of type
        ``var_ty`` needs (kept per pair of type objects, which it keeps alive): both
        types; the checked attributes of the allocation (None unless ``out_ty`` is a
        tensor of known shape and dtype); whether the variable's type is the result's;
        the type of the outputs' tuple of the variable, and of a new variable."""
        if isinstance(out_ty, TensorType) and _allocatable(out_ty):
            alloc = self._alloc_call_attrs(out_ty)
            same = var_ty is out_ty or var_ty == out_ty
            plan = (out_ty, var_ty, alloc, same,
                    self._out_tuple_type(var_ty) if same else None,  # type: ignore[arg-type]
                    self._out_tuple_type(out_ty))
        else:
            plan = (out_ty, var_ty, None)
        self._tensor_plans[(id(out_ty), id(var_ty))] = plan
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

    def _alloc(self, ty: Type, name: str, in_dataflow: bool, var: Var | None = None) -> Var:
        """Bind a new allocation of a tensor of type ``ty`` to ``var`` (a new variable
        named ``name`` if None)."""
        assert isinstance(ty, TensorType)
        attrs = self._alloc_call_attrs(ty)
        # alloc_tensor(shape, dtype) has type Tensor(shape, dtype): ``ty`` itself
        if var is None:
            var = (DataflowVar if in_dataflow else Var)(name, ty)
        self.builder.emit_binding(VarBinding(var, Call(_ALLOC, (), attrs, var.ty)))
        return var


_LOWERED = ("call_extern", "call_kernel")
_LEAVES = frozenset(
    {Var, DataflowVar, Constant, GlobalVar, ExternFunc, ShapeExpr, PrimValue, StringImm}
)
_DPS = Op.get("builtin.call_dps")
_ALLOC = Op.get("builtin.alloc_tensor")


def explicit_memory(func: Function) -> Function:
    """``func`` with allocations made explicit (see the module docstring)."""
    return _ExplicitMemory().visit_function(func)


@function_pass(phases=("lowering",), transition="build", requires=("ToNonDataflow",))
class ExplicitMemory:
    """Allocate every result explicitly and call kernels/externs in DPS (enters build)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return explicit_memory(func)
