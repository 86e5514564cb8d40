"""Lower a build-phase IRModule to a VM :class:`~plait.runtime.Executable`.

Each graph function becomes a VM function: parameters occupy the first registers,
every bound variable gets a register, constants go to the executable's constant
pool, and each binding becomes one instruction:

==========================================  =======================================
binding value                               instruction
==========================================  =======================================
``builtin.alloc_storage(nbytes=n)``         ``AllocStorage``
``builtin.alloc_tensor`` / ``tensor_from_storage``  ``AllocTensor``
``builtin.call_dps(f, (ins), (outs))``      ``Call(f, ins + outs)``, attrs as kwargs
``builtin.call_alloc(f, (ins))``            ``Call(f + "@alloc", ins) -> dst``
a call of a module function                 ``Call(name, args) -> dst``
``(a, b)`` / ``t[i]``                       ``vm.builtin.tuple`` / ``tuple_getitem``
``match_cast(x, T)``                        ``vm.builtin.check_tensor``
``if c: ... else: ...``                     ``If`` / ``Goto``
a variable                                  ``Move``
==========================================  =======================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from plait.errors import PlaitError

from ..ir.expr import (
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.facts import DIM_RANGES, dim_ranges
from ..ir.module import IRModule
from ..ir.symbolic import SymExpr, free_symbols
from ..ir.types import PrimType, ShapeType, TensorType, TupleType, Type
from ..runtime import executable as rx
from ..runtime.vm import SOURCE_MAP


def span_text(span: Any) -> str:
    """A span as a profile shows it: its note (``'/0/Gemm (Gemm)'``), and the file and
    line when it has one (``model.py:12``)."""
    if span is None:
        return ""
    note, line = span.note, span.line
    if not line:
        return note
    where = f"{_file_name(span.source)}:{line}"
    return f"{note} at {where}" if note else where


@lru_cache(maxsize=256)
def _file_name(source: str) -> str:
    """A span's source as a profile shows it: the file's name without its folder (one
    source file serves thousands of spans, so this is computed once per file)."""
    return os.path.basename(source) or source


class VMCodegenError(PlaitError, TypeError):
    """The module cannot be lowered to VM code (it is not in the build phase, or a
    binding has a form the VM has no instruction for)."""


def _shape_entries(shape: tuple | list) -> list:
    """A shape for the executable: ints, names, and size expressions as their text
    (``"batch * 12"``, read by :mod:`plait.runtime.sizes`)."""
    return [str(d) if type(d) is SymExpr else d for d in shape]


def _param_sig(var: Var) -> rx.ParamSig:
    ty = var.ty
    if isinstance(ty, TensorType):
        shape = None if ty.shape is None else tuple(_shape_entries(ty.shape))
        return rx.ParamSig(var.name_hint, "tensor", shape, ty.dtype)
    if isinstance(ty, TupleType):
        return rx.ParamSig(var.name_hint, "tuple", None, None)
    if isinstance(ty, PrimType):
        return rx.ParamSig(var.name_hint, "prim", None, ty.dtype)
    if isinstance(ty, ShapeType):
        return rx.ParamSig(var.name_hint, "shape", None, None)
    return rx.ParamSig(var.name_hint, "object", None, None)


def _param_sigs(params: tuple[Var, ...] | list[Var]) -> list[rx.ParamSig]:
    """The signatures of ``params``; a name that repeats (a pass may lift two captured
    variables of the same name into one function's parameters) gets a ``_<k>`` suffix,
    as the VM calls parameters by name.  ``build`` refuses repeated names in the
    functions it is given, so the names a user wrote are never changed."""
    sigs = [_param_sig(p) for p in params]
    taken = {s.name for s in sigs}
    seen: set[str] = set()
    for s in sigs:
        if s.name in seen:
            k = 1
            while f"{s.name}_{k}" in taken:
                k += 1
            s.name = f"{s.name}_{k}"
            taken.add(s.name)
        seen.add(s.name)
    return sigs


def _attr_value(v: Any) -> Any:
    if isinstance(v, Type):
        return str(v)
    if isinstance(v, tuple):
        return tuple(_attr_value(x) for x in v)
    return v


class _FunctionLowering:
    def __init__(
        self, name: str, func: Function, consts: list[np.ndarray], const_ids: dict
    ) -> None:
        self.name = name
        self.func = func
        self.consts = consts
        self.const_ids = const_ids
        self.regs: dict[Var, int] = {}
        # register i as an argument (made when first passed; one object, Reg is frozen),
        # a list beside the numbers (no second table keyed by variable)
        self.reg_args: list[rx.Reg | None] = []
        self.code: list[rx.Instr] = []
        for p in func.params:
            self.reg(p)
        # Symbolic sizes: those the VM binds from the parameters at entry, and the
        # registers holding sizes as values (for attributes such as a reshape target
        # and for sizes that match_cast introduces, which the VM does not bind).
        self.entry_syms: dict[str, tuple[int, int]] = {}
        for p in func.params:
            if isinstance(p.ty, TensorType) and p.ty.shape is not None:
                for axis, d in enumerate(p.ty.shape):
                    if isinstance(d, str) and d not in self.entry_syms:
                        self.entry_syms[d] = (self.regs[p], axis)
        self._check_param_exprs()
        self.sym_regs: dict[str, int] = {}
        self.spans: list[tuple[int, Any]] = []
        """(pc of a call instruction, the span of what it computes), in program order:
        the source map (:meth:`source_map`) is made from them once the code is."""
        # id(attributes of tensor_from_storage) -> (them, shape, dtype, offset)
        self.placed: dict[int, tuple[Any, tuple, str, int]] = {}

    def _check_param_exprs(self) -> None:
        """Every name a parameter's size expression uses is some parameter's plain size
        (the VM binds plain names from the arguments, then checks the expressions)."""
        for p in self.func.params:
            if not isinstance(p.ty, TensorType) or p.ty.shape is None:
                continue
            for axis, d in enumerate(p.ty.shape):
                if type(d) is not SymExpr:
                    continue
                free = sorted(n for n in free_symbols(d) if n not in self.entry_syms)
                if free:
                    raise VMCodegenError(
                        f"in function {self.name!r}, parameter {p.name_hint!r}: dimension "
                        f"{axis} is the size {d}, but no parameter has {', '.join(free)} as a "
                        "plain size, so the arguments cannot bind it; give a parameter that "
                        "size as a dimension of its own")

    def _load_entry_syms(self) -> None:
        """Put every entry-bound symbolic size in a register (at function start, so
        every branch sees them)."""
        for name, (reg, axis) in self.entry_syms.items():
            dst = self.fresh()
            self.code.append(rx.Call("vm.builtin.dim", [rx.Reg(reg), rx.Imm(axis)], dst))
            self.sym_regs[name] = dst

    def is_sym(self, d: Any) -> bool:
        if type(d) is SymExpr:
            return True
        return isinstance(d, str) and (d in self.sym_regs or d in self.entry_syms)

    def sym_reg(self, name: str, where: str) -> int:
        if name not in self.sym_regs:
            raise self.fail(where, f"symbolic size {name!r} is not bound at this point")
        return self.sym_regs[name]

    def dims_value(self, dims: tuple, where: str) -> rx.Arg:
        """A tuple of sizes as an argument: an immediate if static, else a register
        built at run time from the registers of its symbolic sizes (a size expression
        evaluated by ``vm.builtin.eval_size``)."""
        if all(type(d) is int for d in dims):
            return rx.Imm(tuple(dims))
        parts: list[rx.Arg] = []
        for d in dims:
            if isinstance(d, str):
                parts.append(rx.Reg(self.sym_reg(d, where)))
            elif type(d) is SymExpr:
                names = tuple(sorted(free_symbols(d)))
                regs = [rx.Reg(self.sym_reg(n, where)) for n in names]
                val = self.fresh()
                self.code.append(rx.Call(
                    "vm.builtin.eval_size", [rx.Imm(str(d)), rx.Imm(names), *regs], val))
                parts.append(rx.Reg(val))
            else:
                parts.append(rx.Imm(d))
        dst = self.fresh()
        self.code.append(rx.Call("vm.builtin.tuple", parts, dst))
        return rx.Reg(dst)

    def kwargs(self, extra: Any, where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in dict(extra or {}).items():
            if isinstance(v, tuple) and any(self.is_sym(d) for d in v):
                out[k] = self.dims_value(v, where)
            else:
                out[k] = _attr_value(v)
        return out

    def reg(self, var: Var) -> int:
        r = self.regs.get(var)
        if r is None:
            r = self.regs[var] = len(self.regs)
            self.reg_args.append(None)
        return r

    def fresh(self) -> int:
        tmp = Var("_tmp")
        return self.reg(tmp)

    def fail(self, binding: str, message: str) -> VMCodegenError:
        return VMCodegenError(f"in function {self.name!r}, binding {binding!r}: {message}")

    def arg(self, e: Expr, where: str) -> rx.Arg:
        if isinstance(e, Var):
            r = self.regs.get(e)
            if r is None:
                raise self.fail(where, f"variable {e.name_hint!r} is used before it is defined")
            ra = self.reg_args[r]
            if ra is None:
                ra = self.reg_args[r] = rx.Reg(r)
            return ra
        if isinstance(e, Constant):
            key = id(e.data)
            idx = self.const_ids.get(key)
            if idx is None:
                idx = self.const_ids[key] = len(self.consts)
                data = e.data  # (np.ascontiguousarray would turn a 0-d constant into 1-d)
                # C order and aligned elements, as native code reads them (an array made
                # from a buffer at an odd offset is not aligned: copied here)
                ok = data.flags.c_contiguous and data.flags.aligned
                self.consts.append(data if ok else data.copy(order="C"))
            return rx.Const(idx)
        if isinstance(e, PrimValue):
            return rx.Imm(e.value)
        if isinstance(e, StringImm):
            return rx.Imm(e.value)
        if isinstance(e, ShapeExpr):
            return rx.Imm(tuple(e.values))
        if isinstance(e, Tuple):
            dst = self.fresh()
            args = [self.arg(f, where) for f in e.fields]
            self.code.append(rx.Call("vm.builtin.tuple", args, dst))
            return rx.Reg(dst)
        raise self.fail(where, f"cannot pass a {type(e).__name__} as a VM argument")

    def lower(self) -> rx.VMFunction:
        body = self.func.body
        seq = body if isinstance(body, SeqExpr) else SeqExpr((), body)
        if self.entry_syms and _uses_symbolic_values(seq):
            self._load_entry_syms()
        result = self.lower_seq(seq)
        self.code.append(rx.Ret(result))
        return rx.VMFunction(
            self.name, _param_sigs(self.func.params), len(self.regs), self.code
        )

    def lower_seq(self, seq: SeqExpr) -> int:
        builtins = _BUILTINS
        regs = self.regs
        new_reg = self.reg_args.append
        for block in seq.blocks:
            for b in block.bindings:
                v = b.value
                if type(v) is Call and type(b) is VarBinding and type(v.op) is Op:
                    lower = builtins.get(v.op.name)  # type: ignore[attr-defined]
                    if lower is not None:  # the build phase's usual binding
                        var = b.var
                        r = regs.get(var)  # (self.reg(var))
                        if r is None:
                            r = regs[var] = len(regs)
                            new_reg(None)
                        lower(self, r, v.attrs, v, var.name_hint)
                        if v.span is not None:
                            code = self.code
                            if code and isinstance(code[-1], rx.Call):
                                self.spans.append((len(code) - 1, v.span))
                        continue
                self.lower_binding(b.var, b.value, isinstance(b, MatchCast), b)
        res = self.arg(seq.body, "<return>")
        if isinstance(res, rx.Reg):
            return res.index
        dst = self.fresh()
        self.code.append(rx.Call("vm.builtin.identity", [res], dst))
        return dst

    def lower_binding(self, var: Var, value: Expr, is_cast: bool, binding: Any) -> None:
        where = var.name_hint
        if is_cast:
            ty = binding.cast_ty
            src = self.arg(value, where)
            shape = list(ty.shape) if isinstance(ty, TensorType) and ty.shape is not None else None
            if shape is not None and any(type(d) is SymExpr for d in shape):
                raise self.fail(
                    where, f"match_cast to {ty}: a match_cast binds plain names, not size "
                    "expressions (match to fresh names instead)")
            dtype = ty.dtype if isinstance(ty, TensorType) else None
            dst = self.reg(var)
            self.code.append(
                rx.Call(
                    "vm.builtin.check_tensor",
                    [src, rx.Imm(shape), rx.Imm(dtype), rx.Imm(where)],
                    dst,
                )
            )
            for axis, d in enumerate(shape or ()):
                if isinstance(d, str) and d not in self.sym_regs and d not in self.entry_syms:
                    sreg = self.fresh()
                    self.code.append(rx.Call("vm.builtin.dim", [rx.Reg(dst), rx.Imm(axis)], sreg))
                    self.sym_regs[d] = sreg
            return
        if isinstance(value, Call):
            self.lower_call(var, value, where)
        elif isinstance(value, Var):
            self.code.append(rx.Move(self.reg(var), self.arg(value, where).index))  # type: ignore[union-attr]
        elif isinstance(value, Tuple):
            args = [self.arg(f, where) for f in value.fields]
            self.code.append(rx.Call("vm.builtin.tuple", args, self.reg(var)))
        elif isinstance(value, TupleGetItem):
            t = self.arg(value.tuple_value, where)
            self.code.append(
                rx.Call("vm.builtin.tuple_getitem", [t, rx.Imm(value.index)], self.reg(var))
            )
        elif isinstance(value, Constant | PrimValue | StringImm | ShapeExpr):
            self.code.append(
                rx.Call("vm.builtin.identity", [self.arg(value, where)], self.reg(var))
            )
        elif isinstance(value, If):
            self.lower_if(var, value, where)
        else:
            raise self.fail(where, f"the VM has no instruction for a {type(value).__name__}")

    def lower_if(self, var: Var, value: If, where: str) -> None:
        cond = self.arg(value.cond, where)
        if not isinstance(cond, rx.Reg):
            dst = self.fresh()
            self.code.append(rx.Call("vm.builtin.identity", [cond], dst))
            cond = rx.Reg(dst)
        dst = self.reg(var)
        branch = rx.If(cond.index, -1)
        self.code.append(branch)
        then_res = self.lower_seq(_seq(value.then_branch))
        self.code.append(rx.Move(dst, then_res))
        jump = rx.Goto(-1)
        self.code.append(jump)
        branch.else_target = len(self.code)
        else_res = self.lower_seq(_seq(value.else_branch))
        self.code.append(rx.Move(dst, else_res))
        jump.target = len(self.code)

    def lower_call(self, var: Var, call: Call, where: str) -> None:
        op = call.op
        dst = self.reg(var)
        if isinstance(op, Op):
            lower = _BUILTINS.get(op.name)
            if lower is None:
                raise self.fail(
                    where,
                    f"op {op.name!r} is still present; the module must be fully lowered "
                    "(run the default pipeline up to the build phase)",
                )
            lower(self, dst, call.attrs, call, where)
            return
        if isinstance(op, GlobalVar | ExternFunc):
            args = [self.arg(a, where) for a in call.args]
            name = op.name_hint if isinstance(op, GlobalVar) else op.symbol
            self.code.append(rx.Call(name, args, dst))
            if call.span is not None:
                self._record_source(call.span)
            return
        raise self.fail(where, f"cannot call a {type(op).__name__}")

    def _record_source(self, span: Any) -> None:
        """The last instruction, a call, computes what ``span`` names.  (The build
        phase's allocations carry their call's span too: they are no calls, and no
        source is recorded for them.)"""
        code = self.code
        if code and isinstance(code[-1], rx.Call):
            self.spans.append((len(code) - 1, span))

    def source_map(self) -> dict[str, str]:
        """pc of each call (as text, the source map's key) -> the source it computes
        (:func:`span_text` of its span; calls whose span has no text are left out).
        Made in one loop at the end, the text once per span, rather than by a method
        call per instruction while lowering: a module whose every binding has a span
        (parsed or imported) paid that per binding."""
        out: dict[str, str] = {}
        texts: dict[int, str] = {}   # id(span) -> its text (the spans are held by self)
        files: dict[str, str] = {}   # span source -> its file name (_file_name)
        for pc, span in self.spans:
            text = texts.get(id(span))
            if text is None:
                # span_text(span), inline: a module parsed from text has a span per
                # binding, each its own line (a call per span cost ~0.3 us a binding)
                note, line = span.note, span.line
                if line:
                    source = span.source
                    name = files.get(source)
                    if name is None:
                        name = files[source] = _file_name(source)
                    text = f"{note} at {name}:{line}" if note else f"{name}:{line}"
                else:
                    text = note
                texts[id(span)] = text
            if text:
                out[str(pc)] = text
        return out

    # The instructions of the build phase's builtins: (register of the result, the
    # call's attributes, the call, the binding's name for messages)
    def _alloc_storage(self, dst: int, attrs: Any, call: Call, where: str) -> None:
        nbytes = attrs["nbytes"]
        self.code.append(rx.AllocStorage(dst, nbytes if type(nbytes) is int else str(nbytes)))

    def _alloc_tensor(self, dst: int, attrs: Any, call: Call, where: str) -> None:
        shape = tuple(attrs["shape"])
        if any(type(d) is not int for d in shape) and any(
            n not in self.entry_syms for d in shape if type(d) is not int
            for n in ((d,) if isinstance(d, str) else free_symbols(d))
        ):
            # a size only known after a match_cast: allocate from its register
            dims = self.dims_value(shape, where)
            self.code.append(rx.Call("vm.builtin.empty", [dims, rx.Imm(attrs["dtype"])], dst))
        else:
            self.code.append(rx.AllocTensor(dst, _shape_entries(shape), attrs["dtype"]))

    def _tensor_from_storage(self, dst: int, attrs: Any, call: Call, where: str) -> None:
        src = call.args[0]
        storage = self.regs.get(src) if type(src) is Var else None
        if storage is None:
            storage = self.arg(src, where).index  # type: ignore[union-attr]
        # (shape, dtype, offset) read once per attributes object (PlanMemory shares one
        # per place, shape and dtype); the instructions of one attributes object share
        # its shape list (nothing changes an instruction's shape in place), one object
        # less per tensor for the garbage collector to scan
        hit = self.placed.get(id(attrs))
        if hit is None or hit[0] is not attrs:
            offset = attrs["offset"]
            hit = self.placed[id(attrs)] = (
                attrs, _shape_entries(attrs["shape"]), attrs["dtype"],
                offset if type(offset) is int else str(offset))
        self.code.append(rx.AllocTensor(dst, hit[1], hit[2], storage, hit[3]))

    def _call_dps(self, dst: int, attrs: Any, call: Call, where: str,
                  alloc: bool = False) -> None:
        callee, *tuples = call.args
        fname = callee.symbol if type(callee) is ExternFunc else callee.name_hint  # type: ignore[attr-defined]
        args: list[rx.Arg] = []
        reg_args, regs = self.reg_args, self.regs
        for tup in tuples:
            if type(tup) is not Tuple:
                name = "builtin.call_alloc" if alloc else "builtin.call_dps"
                raise self.fail(where, f"{name} needs literal tuples of arguments")
            for a in tup.fields:  # type: ignore[attr-defined]
                if type(a) is Var:
                    r = regs.get(a)
                    if r is not None:
                        ra = reg_args[r]
                        if ra is None:  # (a variable met as an argument the first time)
                            ra = reg_args[r] = rx.Reg(r)
                        args.append(ra)
                        continue
                args.append(self.arg(a, where))
        extra = attrs.get("attrs")
        kwargs = self.kwargs(extra, where) if extra else {}
        if alloc:
            self.code.append(rx.Call(fname + "@alloc", args, dst, kwargs))
        else:
            self.code.append(rx.Call(fname, args, None, kwargs))

    def _call_alloc(self, dst: int, attrs: Any, call: Call, where: str) -> None:
        self._call_dps(dst, attrs, call, where, alloc=True)



_BUILTINS: dict[str, Any] = {
    "builtin.alloc_storage": _FunctionLowering._alloc_storage,
    "builtin.alloc_tensor": _FunctionLowering._alloc_tensor,
    "builtin.tensor_from_storage": _FunctionLowering._tensor_from_storage,
    "builtin.call_dps": _FunctionLowering._call_dps,
    "builtin.call_alloc": _FunctionLowering._call_alloc,
}
"""Op name -> the method of :class:`_FunctionLowering` that lowers a call of it (a
table of plain functions: bound methods kept on the instance would make a reference
cycle, which kept the lowered function alive until the next garbage collection)."""


def _uses_symbolic_values(seq: SeqExpr) -> bool:
    """True if some call passes a symbolic size as an attribute value or a match_cast
    introduces sizes (so sizes are needed as register values)."""
    from ..ir.visitor import post_order

    for node in post_order(seq):
        if isinstance(node, MatchCast):
            return True
        if isinstance(node, Call) and isinstance(node.op, Op):
            extra = node.attrs.get("attrs")
            if extra and any(
                isinstance(v, tuple) and any(isinstance(d, str | SymExpr) for d in v)
                for v in dict(extra).values()
            ):
                return True
    return False


def _plain(value: Any) -> Any:
    """``value`` with every mapping (the module's immutable ``Attrs``) a dict, as the
    executable's attributes take them."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _seq(e: Expr) -> SeqExpr:
    return e if isinstance(e, SeqExpr) else SeqExpr((), e)


def vm_codegen(mod: IRModule) -> rx.Executable:
    """The executable for a module in the build phase."""
    if mod.phase != "build":
        raise VMCodegenError(
            f"vm_codegen needs a module in the build phase, got phase {mod.phase!r}; "
            "run the default pipeline (plait.build does) first"
        )
    consts: list[np.ndarray] = []
    const_ids: dict[int, int] = {}
    functions: dict[str, rx.VMFunction] = {}
    sources: dict[str, dict[str, str]] = {}
    planned = naive = 0
    for name, f in mod.graph_functions():
        if f.attrs.get("compiler"):
            raise VMCodegenError(
                f"function {name!r} belongs to external codegen {f.attrs['compiler']!r} and "
                "was not compiled; run RunCodegen (the first pass of the build stage) "
                "before lowering to the VM")
        lowering = _FunctionLowering(name, f, consts, const_ids)
        functions[name] = lowering.lower()
        table = lowering.source_map()
        if table:
            sources[name] = table
        planned += int(f.attrs.get("planned_bytes", 0))
        naive += int(f.attrs.get("naive_bytes", 0))
    target = mod.attrs.get("target")
    attrs: dict[str, Any] = {
        "target": getattr(target, "kind", target) if target is not None else None,
        "planned_peak_bytes": planned,
        "naive_peak_bytes": naive,
        "constant_bytes": int(sum(c.nbytes for c in consts)),
    }
    if sources:  # which ONNX nodes / source lines each call computes (plait run --profile)
        attrs[SOURCE_MAP] = sources
    ranges = dim_ranges(mod)
    if ranges:  # checked by the VM on every call
        attrs[DIM_RANGES] = {k: [lo, hi] for k, (lo, hi) in ranges.items()}
    libs = dict(mod.attrs.get("native_libs") or {})
    extra = mod.attrs.get("runtime_attrs")
    if extra:
        attrs.update(_plain(extra))
    external = list(mod.attrs.get("external_mods") or ())
    return rx.Executable(functions, consts, attrs, {k: bytes(v) for k, v in libs.items()},
                         external=external)
