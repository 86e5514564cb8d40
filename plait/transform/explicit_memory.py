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
from ..ir.expr import Binding, Call, Expr, Function, Op, Tuple, Var, VarBinding
from ..ir.types import TensorType, TupleType, Type
from ..ir.visitor import ExprMutator
from ..op.registry import make_call
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

    def visit_binding(self, binding: Binding) -> None:
        value = self.visit_expr(binding.value)
        if (
            isinstance(binding, VarBinding)
            and isinstance(value, Call)
            and isinstance(value.op, Op)
            and value.op.name in ("call_extern", "call_kernel")
        ):
            self._lower(binding, value)
            return
        self.emit_rewritten(binding, value)

    def _lower(self, binding: Binding, call: Call) -> None:
        bb = self.builder
        callee, args = call.args
        out_ty = call.attrs.get("out")
        extra = call.attrs.get("attrs")
        name = binding.var.name_hint
        if not _allocatable(out_ty):
            new = make_call("builtin.call_alloc", callee, args, out=out_ty, attrs=extra)
            self.emit_rewritten(binding, new)
            return
        if isinstance(out_ty, TupleType):
            outs = [self._alloc(f, f"{name}_{i}") for i, f in enumerate(out_ty.fields)]
            result: Expr = Tuple(tuple(outs))
        else:
            outs = [self._alloc(out_ty, name)]
            result = outs[0]
        bb.emit(make_call("builtin.call_dps", callee, args, Tuple(tuple(outs)), attrs=extra), "_")
        if isinstance(result, Var):
            self.var_remap[binding.var] = result
        else:
            var = replace(binding.var, ty=out_ty)
            bb.emit_binding(VarBinding(var, bb.normalize(result)))
            self.var_remap[binding.var] = var

    def _alloc(self, ty: Type, name: str) -> Var:
        assert isinstance(ty, TensorType)
        key = (ty.shape, ty.dtype)
        attrs = self._alloc_attrs.get(key)
        if attrs is None:
            call = make_call("builtin.alloc_tensor", shape=ty.shape, dtype=ty.dtype)
            self._alloc_attrs[key] = call.attrs
        else:
            call = Call(_ALLOC, (), attrs)
        return self.builder.emit(call, name)


_ALLOC = Op.get("builtin.alloc_tensor")


def explicit_memory(func: Function) -> Function:
    """``func`` with allocations made explicit (see the module docstring)."""
    return _ExplicitMemory().visit_function(func)


@function_pass(phases=("lowering",), transition="build", requires=("ToNonDataflow",))
class ExplicitMemory:
    """Allocate every result explicitly and call kernels/externs in DPS (enters build)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return explicit_memory(func)
