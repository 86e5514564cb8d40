"""``c.SingleEntry``: a whole graph function as one native call, static or symbolic sizes.

The VM runs a function of the build phase one instruction at a time; each call of a
kernel crosses from Python into the native library (microseconds of argument checks
and ctypes per call; ``benchmarks/entry_overhead.py`` measures it), which dominates
models of many small layers.  This pass
(the ``c`` target's link hook, after ``PlanMemory`` and before ``c.CompileKernels``)
finds the functions that can run without Python between their calls and gives each an
**entry point**: one C function of the library that makes all of the function's calls
in order (:mod:`plait.codegen.c.entry`).

A function qualifies when

* every parameter is a tensor of known rank and dtype — static sizes, or symbolic
  ones (a dynamic batch or sequence: the entry point takes them at run time, its
  workspace offsets and its calls' sizes are size expressions over them,
  :mod:`plait.codegen.c.entry`) — and it returns tensors (or tuples of them);
* its body is straight-line code (no ``if``, no ``match_cast``) of the build-phase
  builtins — ``alloc_storage``, ``alloc_tensor``, ``tensor_from_storage`` — and
  ``call_dps`` of functions of the native library: the module's kernels and the
  functions of its C sources (``plait_gemm`` and friends, user C), without attributes;
  tuples, items and variables are followed at compile time;
* it makes at least :data:`MIN_CALLS` native calls (one call gains nothing on the VM;
  ``SingleEntry(min_calls=1)``, which ``plait.export_library`` runs again on a model of
  one call, takes it too: a C library runs nothing but entry points).

It does not qualify when it calls a packed function run by Python (``numpy.*``,
``blas.*``, ``vm.builtin.*``, an external codegen's runtime module), another graph
function, allocates a result at run time (``call_alloc``), or allocates a tensor whose
size names a size no parameter binds (one a ``match_cast`` introduces); the reason is
recorded.

For a function ``main`` that qualifies the pass adds

* the entry program to the module attribute ``native_entries`` (compiled into the
  library by ``c.CompileKernels`` as the native function ``main@entry``): its
  parameters are the inputs, the constants, a ``uint8`` *workspace* that holds the
  memory plan's storages (at 64-byte aligned offsets) and the outputs;
* a graph function ``main__entry`` with ``main``'s parameters that allocates the
  workspace and the outputs, makes the one call and returns what ``main`` returns (an
  input or a constant that ``main`` returns is returned as such);
* ``{"main": {"entry": "main__entry", "native": "main@entry", "calls": n}}`` under
  ``single_entry`` in the module attribute ``runtime_attrs``, which the executable
  carries in its attributes; a function that does not qualify gets ``{"reason": ...}``.

``main`` itself is unchanged: it is the VM path, which the VM runs when asked
(``VirtualMachine(exe, single_entry=False)``, and for :meth:`profile`, whose per-call
timings need it).  The VM runs ``vm["main"]`` through ``main__entry`` when the
executable has it: the VM checks the inputs, allocates the workspace (pooled across
calls, like any storage) and the outputs, and makes one native call.  Constants are
passed at each call; the VM takes their addresses once, when it loads the executable.

Target attribute ``single_entry`` (default True); with False every function is
recorded as not qualifying, with that reason.  Target attribute ``step_timing`` (default
False): the entry points read the clock around each call
(:meth:`VirtualMachine.profile_steps` gives each call's time inside the one native
call; plait/codegen/c/entry.py), and the report says ``"timed": True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.codegen.c import CFunction, EntryProgram, EntryStep
from plait.ir import symbolic as sym
from plait.ir.builder import BlockBuilder
from plait.ir.expr import (
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    constant_raw_data,
)
from plait.ir.module import IRModule
from plait.ir.types import TensorType, Type
from plait.kernel.ir import Kernel
from plait.kernel.ir import Var as SizeVar
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass

from .build import ENTRIES_ATTR, c_sources, module_kernels

REPORT_KEY = "single_entry"
"""The key of the report in ``runtime_attrs`` (and so in the executable's attributes)."""
ENTRY_SUFFIX = "@entry"
"""The native entry point of function ``f`` is the library function ``f@entry``."""
FUNCTION_SUFFIX = "__entry"
"""The graph function calling it is ``f__entry``."""
ENTRY_OF = "entry_of"
"""The attribute of an entry's graph function naming the function it runs."""
MIN_CALLS = 2
"""Fewer native calls than this gain nothing from an entry point."""
ALIGNMENT = 64
"""Byte alignment of the storages in the workspace (that of the VM's storages)."""


class NotQualified(Exception):
    """Why a function cannot have an entry point (the message is the reason)."""


# -------------------------------------------------------------- compile-time values


@dataclass(frozen=True)
class _Tensor:
    """A tensor at run time: ``kind`` is ``input`` (parameter index), ``const``
    (constant slot), ``alloc`` (allocation id: becomes an output or workspace bytes)
    or ``workspace`` (byte offset)."""

    kind: str
    index: Any            # the byte offset of a workspace tensor may be a size expression
    shape: tuple[Any, ...]
    dtype: str


@dataclass(frozen=True)
class _Storage:
    offset: Any
    nbytes: Any


@dataclass(frozen=True)
class _TupleValue:
    fields: tuple[Any, ...]


_NOTHING = object()
"""The value of ``_ = call_dps(...)``."""


def _static(ty: Type | None) -> tuple[tuple[int, ...], str] | None:
    if isinstance(ty, TensorType) and ty.is_static:
        return tuple(int(d) for d in ty.shape), str(ty.dtype)  # type: ignore[union-attr]
    return None


def _shaped(ty: Type | None) -> tuple[tuple[Any, ...], str] | None:
    """(shape, dtype) of a tensor type of known rank and dtype (sizes may be symbolic)."""
    if isinstance(ty, TensorType) and ty.shape is not None and ty.dtype is not None:
        return tuple(ty.shape), str(ty.dtype)
    return None


def _nbytes(shape: tuple[Any, ...], dtype: str) -> Any:
    return sym.mul(sym.product(shape), np.dtype(dtype).itemsize)


def _align(n: Any) -> Any:
    """``n`` rounded up to :data:`ALIGNMENT` (a size expression for a symbolic ``n``:
    the identity when each of its terms is a multiple of it)."""
    return sym.mul(sym.floordiv(sym.add(n, ALIGNMENT - 1), ALIGNMENT), ALIGNMENT)


def _names(shape: tuple[Any, ...]) -> set[str]:
    out: set[str] = set()
    for d in shape:
        if type(d) is not int:
            out |= sym.free_symbols(d)
    return out


def _describe(ty: Type | None) -> str:
    return str(ty) if ty is not None else "an untyped value"


# ------------------------------------------------------------------------- analysis


@dataclass
class _Plan:
    """What the analysis of one function found."""

    steps: list[tuple[str, list[_Tensor], tuple[Any, ...]]]
    constants: list[Constant]
    allocs: list[tuple[str, tuple[Any, ...], str]]  # (name, shape, dtype) by alloc id
    storage_bytes: Any
    result: Any


class _Analysis:
    def __init__(self, fname: str, func: Function, kernels: Mapping[str, Kernel],
                 cfuncs: Mapping[str, CFunction], graph_functions: set[str],
                 min_calls: int = MIN_CALLS) -> None:
        self.fname = fname
        self.min_calls = min_calls
        self.func = func
        self.kernels = kernels
        self.cfuncs = cfuncs
        self.graph_functions = graph_functions
        self.env: dict[Var, Any] = {}
        self.const_slots: dict[int, int] = {}
        self.constants: list[Constant] = []
        self.allocs: list[tuple[str, tuple[Any, ...], str]] = []
        self.storage_bytes: Any = 0
        self.steps: list[tuple[str, list[_Tensor], tuple[Any, ...]]] = []
        self.python_calls: dict[str, int] = {}
        self.bound: set[str] = set()   # the sizes the parameters' shapes name

    def run(self) -> _Plan:
        for i, p in enumerate(self.func.params):
            st = _shaped(p.ty)
            if st is None:
                if isinstance(p.ty, TensorType):
                    raise NotQualified(f"parameter {p.name_hint!r} has an unknown rank or "
                                       f"dtype ({_describe(p.ty)})")
                raise NotQualified(f"parameter {p.name_hint!r} is not a tensor "
                                   f"({_describe(p.ty)})")
            self.env[p] = _Tensor("input", i, *st)
            self.bound.update(d for d in st[0] if type(d) is str)
        body = self.func.body
        if not isinstance(body, SeqExpr):
            raise NotQualified("its body is not a sequence of bindings")
        for block in body.blocks:
            for b in block.bindings:
                self.binding(b)
        if self.python_calls:
            calls = ", ".join(f"{n!r} ({k}x)" for n, k in self.python_calls.items())
            raise NotQualified(f"it calls {calls}: not functions of the native library "
                               "(packed functions run in Python)")
        result = self.value(body.body, "the returned value")
        self.check_result(result)
        if len(self.steps) < self.min_calls:
            raise NotQualified(f"it makes {len(self.steps)} native call(s): an entry point "
                               "saves nothing")
        return _Plan(self.steps, self.constants, self.allocs, self.storage_bytes, result)

    # values
    def value(self, e: Expr, where: str) -> Any:
        if isinstance(e, Var):
            if e not in self.env:
                raise NotQualified(f"{where}: variable {e.name_hint!r} is not defined here")
            return self.env[e]
        if isinstance(e, Constant):
            raw = constant_raw_data(e)   # (a weight packed when first read stays unread)
            st = _static(e.ty) or (tuple(raw.shape), str(raw.dtype))
            slot = self.const_slots.get(id(raw))
            if slot is None:
                slot = self.const_slots[id(raw)] = len(self.constants)
                self.constants.append(e)
            return _Tensor("const", slot, *st)
        if isinstance(e, Tuple):
            return _TupleValue(tuple(self.value(f, where) for f in e.fields))
        raise NotQualified(f"{where}: a {type(e).__name__} is not a tensor of the library's "
                           "calls")

    def binding(self, b: Any) -> None:
        var, v = b.var, b.value
        where = f"binding {var.name_hint!r}"
        if isinstance(b, MatchCast):
            raise NotQualified(f"{where}: match_cast checks a shape at run time")
        if isinstance(v, If):
            raise NotQualified(f"{where}: control flow (if/else)")
        if isinstance(v, Var | Constant | Tuple):
            self.env[var] = self.value(v, where)
        elif isinstance(v, TupleGetItem):
            t = self.value(v.tuple_value, where)
            if not isinstance(t, _TupleValue) or not 0 <= v.index < len(t.fields):
                raise NotQualified(f"{where}: item {v.index} of a value that is not a tuple "
                                   "of that many items")
            self.env[var] = t.fields[v.index]
        elif isinstance(v, Call):
            self.env[var] = self.call(var, v, where)
        else:
            raise NotQualified(f"{where}: a {type(v).__name__} is not a native call")

    def call(self, var: Var, call: Call, where: str) -> Any:
        op = call.op
        if isinstance(op, GlobalVar):
            raise NotQualified(f"{where}: calls graph function {op.name_hint!r}")
        if not isinstance(op, Op):
            raise NotQualified(f"{where}: calls {getattr(op, 'symbol', op)!r} directly "
                               "(not a call of the native library)")
        name, attrs = op.name, call.attrs
        if name == "builtin.alloc_storage":
            n = attrs["nbytes"]
            self.check_bound(where, "a storage of", (n,))
            offset = _align(self.storage_bytes)
            self.storage_bytes = sym.add(offset, n)
            return _Storage(offset, n)
        if name == "builtin.alloc_tensor":
            st = _shaped(var.ty)
            if st is None:
                raise NotQualified(f"{where}: allocates {_describe(var.ty)}, not a known shape")
            self.check_bound(where, "a tensor of", st[0])
            self.allocs.append((var.name_hint, *st))
            return _Tensor("alloc", len(self.allocs) - 1, *st)
        if name == "builtin.tensor_from_storage":
            storage = self.value(call.args[0], where)
            st = _shaped(var.ty)
            if not isinstance(storage, _Storage) or st is None:
                raise NotQualified(f"{where}: a tensor_from_storage that is not a tensor of "
                                   "known shape in a storage of this function")
            offset, nbytes = attrs["offset"], _nbytes(*st)
            self.check_bound(where, "a tensor of", (*st[0], offset))
            end = sym.add(offset, nbytes)
            if type(end) is int and type(storage.nbytes) is int and end > storage.nbytes:
                raise NotQualified(f"{where}: {nbytes} bytes at offset {offset} do not fit in "
                                   f"a storage of {storage.nbytes} bytes")
            return _Tensor("workspace", sym.add(storage.offset, offset), *st)
        if name == "builtin.call_alloc":
            raise NotQualified(f"{where}: {self.callee_name(call.args[0])} allocates its "
                               "result at run time (call_alloc)")
        if name != "builtin.call_dps":
            raise NotQualified(f"{where}: op {name!r} is not a build-phase builtin")
        self.call_dps(call, where)
        return _NOTHING

    def check_bound(self, where: str, what: str, dims: tuple[Any, ...]) -> None:
        """Every size ``dims`` name is one the parameters bind (a size a ``match_cast``
        introduces is known only on the VM path)."""
        unbound = sorted(_names(dims) - self.bound)
        if unbound:
            raise NotQualified(f"{where}: {what} size {', '.join(unbound)}, which no "
                               "parameter's shape binds (known only at run time)")

    @staticmethod
    def callee_name(callee: Expr) -> str:
        if isinstance(callee, GlobalVar):
            return callee.name_hint
        if isinstance(callee, ExternFunc):
            return callee.symbol
        return type(callee).__name__

    def signature(self, callee: Expr, where: str) -> tuple[str, Kernel | None]:
        """The callee's name and signature; None for a packed function."""
        name = self.callee_name(callee)
        if isinstance(callee, GlobalVar) and name in self.kernels:
            return name, self.kernels[name]
        if isinstance(callee, ExternFunc) and name in self.cfuncs:
            return name, self.cfuncs[name].as_kernel_signature()
        if isinstance(callee, GlobalVar):
            what = "graph function" if name in self.graph_functions else "function"
            raise NotQualified(f"{where}: calls {what} {name!r}")
        return name, None

    def call_dps(self, call: Call, where: str) -> None:
        outs = call.args[2]
        if isinstance(outs, Tuple) and all(isinstance(o, Var) for o in outs.fields):
            where = "the call writing " + ", ".join(repr(o.name_hint) for o in outs.fields)
        name, sig = self.signature(call.args[0], where)
        if sig is None:   # (all such calls are listed in the reason)
            self.python_calls[name] = self.python_calls.get(name, 0) + 1
            return
        where = f"{where} (call of {name!r})"
        if call.attrs.get("attrs"):
            raise NotQualified(f"{where}: passes attributes, which native functions do not take")
        ins, outs = call.args[1], call.args[2]
        if not isinstance(ins, Tuple) or not isinstance(outs, Tuple):
            raise NotQualified(f"{where}: its arguments are not literal tuples")
        n_in, n_out = len(ins.fields), len(outs.fields)
        if n_in + n_out != len(sig.params) or n_out != sig.num_outputs:
            raise NotQualified(
                f"{where}: passes {n_in} input(s) and {n_out} output(s), the function "
                f"takes {len(sig.params) - sig.num_outputs} and {sig.num_outputs}")
        args: list[_Tensor] = []
        sizes: dict[SizeVar, Any] = {}
        for i, (e, buf) in enumerate(zip((*ins.fields, *outs.fields), sig.params)):
            v = self.value(e, where)
            at = f"{where}, argument {i} ({buf.name_hint!r})"
            if not isinstance(v, _Tensor):
                raise NotQualified(f"{at}: not a tensor")
            if i >= n_in and v.kind not in ("alloc", "workspace"):
                raise NotQualified(f"{at}: the call writes into an {v.kind}, not an allocation")
            if v.dtype != buf.dtype or len(v.shape) != len(buf.shape):
                raise NotQualified(f"{at}: {v.dtype}{list(v.shape)} does not match the "
                                   f"parameter's {buf.dtype} of rank {len(buf.shape)}")
            for axis, (got, want) in enumerate(zip(v.shape, buf.shape)):
                if isinstance(want, int):
                    ok = got == want
                else:
                    ok = sizes.setdefault(want, got) == got
                if not ok:
                    raise NotQualified(f"{at}: dimension {axis} is {got}, which does not "
                                       "match the parameter")
            args.append(v)
        missing = [v.name_hint for v in sig.size_vars if v not in sizes]
        if missing:
            raise NotQualified(f"{where}: size variable(s) {', '.join(missing)} not determined "
                               "by the arguments")
        self.steps.append((name, args, tuple(sizes[v] for v in sig.size_vars)))

    def check_result(self, result: Any) -> None:
        stack = [result]
        while stack:
            v = stack.pop()
            if isinstance(v, _TupleValue):
                stack.extend(v.fields)
            elif not isinstance(v, _Tensor):
                raise NotQualified("it returns a value that is not a tensor or a tuple of them")
            elif v.kind == "workspace":
                raise NotQualified("it returns a tensor that lives in the memory plan's "
                                   "storage")


# ------------------------------------------------------------------------- the entry


def _result_allocs(result: Any) -> list[int]:
    """The allocation ids the result holds, in order of first appearance."""
    out: list[int] = []
    stack = [result]
    while stack:
        v = stack.pop()
        if isinstance(v, _TupleValue):
            stack.extend(reversed(v.fields))
        elif isinstance(v, _Tensor) and v.kind == "alloc" and v.index not in out:
            out.append(v.index)
    return out


def _used_constants(plan: _Plan) -> list[int]:
    """The constant slots the calls use, in order of first use (a constant that is only
    returned is not passed to the entry point)."""
    out: list[int] = []
    for _, args, _ in plan.steps:
        for t in args:
            if t.kind == "const" and t.index not in out:
                out.append(t.index)
    return out


def _program(fname: str, func: Function, plan: _Plan,
             timed: bool = False) -> tuple[EntryProgram, list[int]]:
    """The entry program and the allocation ids of its outputs, in order."""
    outputs = _result_allocs(plan.result)
    inner_offsets: dict[int, int] = {}
    ws = plan.storage_bytes
    for a, (_, shape, dtype) in enumerate(plan.allocs):
        if a not in outputs:   # not planned (no PlanMemory): bytes of its own
            inner_offsets[a] = _align(ws)
            ws = sym.add(inner_offsets[a], _nbytes(shape, dtype))
    uses_ws = bool(inner_offsets) or any(
        t.kind == "workspace" for _, args, _ in plan.steps for t in args)
    used = _used_constants(plan)
    n_in, n_const = len(func.params), len(used)
    ws_index = n_in + n_const if uses_ws else None
    first_out = n_in + n_const + int(uses_ws)
    params: list[tuple[str, tuple[Any, ...], str]] = []
    for p in func.params:
        shape, dtype = _shaped(p.ty)  # type: ignore[misc]
        params.append((p.name_hint, shape, dtype))
    for k, slot in enumerate(used):
        data = constant_raw_data(plan.constants[slot])
        params.append((f"const{k}", tuple(data.shape), str(data.dtype)))
    if uses_ws:
        params.append(("workspace", (ws,), "uint8"))
    for a in outputs:
        name, shape, dtype = plan.allocs[a]
        params.append((name, shape, dtype))

    def ref(t: _Tensor) -> tuple[str, Any]:
        if t.kind == "input":
            return ("param", t.index)
        if t.kind == "const":
            return ("param", n_in + used.index(t.index))
        if t.kind == "workspace":
            return ("workspace", t.index)
        if t.index in inner_offsets:
            return ("workspace", inner_offsets[t.index])
        return ("param", first_out + outputs.index(t.index))

    steps = tuple(EntryStep(callee, tuple(ref(t) for t in args), sizes)
                  for callee, args, sizes in plan.steps)
    native = fname + ENTRY_SUFFIX
    doc = f"entry point {native}: the {len(steps)} native calls of {fname} in one"
    return EntryProgram(native, tuple(params), len(outputs) + int(uses_ws), steps,
                        ws_index, doc, timed), outputs


def _entry_function(bb: BlockBuilder, name: str, fname: str, func: Function, plan: _Plan,
                    program: EntryProgram, outputs: list[int]) -> None:
    params = [Var(p.name_hint, ty=p.ty, span=p.span) for p in func.params]
    with bb.function(name, params, attrs={ENTRY_OF: fname}, ret_ty=func.ret_ty):
        outs: list[Var] = []
        if program.workspace is not None:
            nbytes = program.params[program.workspace][1][0]
            storage = bb.emit(make_call("builtin.alloc_storage", nbytes=nbytes), "workspace")
            outs.append(bb.emit(make_call("builtin.tensor_from_storage", storage, offset=0,
                                          shape=(nbytes,), dtype="uint8"), "workspace_bytes"))
        out_vars: dict[int, Var] = {}
        for a in outputs:
            vname, shape, dtype = plan.allocs[a]
            out_vars[a] = bb.emit(make_call("builtin.alloc_tensor", shape=shape, dtype=dtype),
                                  vname)
            outs.append(out_vars[a])
        ins: list[Expr] = [*params, *(plan.constants[k] for k in _used_constants(plan))]
        bb.emit(make_call("builtin.call_dps", ExternFunc(program.name), Tuple(tuple(ins)),
                          Tuple(tuple(outs))), "_")
        bb.emit_func_output(_result_expr(plan.result, params, plan.constants, out_vars))


def _result_expr(v: Any, params: list[Var], constants: list[Constant],
                 out_vars: dict[int, Var]) -> Expr:
    """The expression of the entry function's result ``v`` (a tensor or nested tuples
    of them).  A function of the module, not a recursive closure: the closure's cell
    would be a reference cycle holding the plan's constants until the collector ran."""
    if isinstance(v, _TupleValue):
        return Tuple(tuple(_result_expr(f, params, constants, out_vars) for f in v.fields))
    if v.kind == "input":
        return params[v.index]
    if v.kind == "const":
        return constants[v.index]
    return out_vars[v.index]


def _entries_of(mod: IRModule) -> dict[str, str]:
    return {str(f.attrs[ENTRY_OF]): n for n, f in mod.graph_functions()
            if f.attrs.get(ENTRY_OF)}


@module_pass(name="c.SingleEntry", phases=("build",))
class SingleEntry:
    """Run each function of static shapes and native calls as one native call."""

    def __init__(self, min_calls: int = MIN_CALLS) -> None:
        super().__init__()
        self.min_calls = int(min_calls)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        attrs = getattr(mod.target, "attrs", None) or {}
        enabled = bool(attrs.get("single_entry", True))
        timed = bool(attrs.get("step_timing", False))
        kernels = module_kernels(mod)
        cfuncs = {f.name: f for src in c_sources(mod) for f in src.functions}
        graph = {n for n, _ in mod.graph_functions()}
        existing = _entries_of(mod)
        runtime = dict(mod.attrs.get("runtime_attrs") or {})
        report = dict(runtime.get(REPORT_KEY) or {})
        programs = list(mod.attrs.get(ENTRIES_ATTR) or ())
        bb = BlockBuilder(mod)
        for fname, func in list(mod.graph_functions()):
            if func.attrs.get("compiler") or func.attrs.get(ENTRY_OF) or fname in existing:
                continue
            if not enabled:
                report[fname] = {"reason": "turned off by the target attribute "
                                           "single_entry=False"}
                continue
            try:
                plan = _Analysis(fname, func, kernels, cfuncs, graph, self.min_calls).run()
            except NotQualified as e:
                report[fname] = {"reason": str(e)}
                continue
            program, outputs = _program(fname, func, plan, timed)
            name = bb.unique_name(fname + FUNCTION_SUFFIX)
            _entry_function(bb, name, fname, func, plan, program, outputs)
            programs.append(program.as_literal())
            report[fname] = {"entry": name, "native": program.name, "calls": len(plan.steps)}
            if timed:
                report[fname]["timed"] = True
        if not report:
            return mod
        runtime[REPORT_KEY] = report
        out = bb.get().with_attrs(runtime_attrs=runtime)
        return out.with_attrs(**{ENTRIES_ATTR: tuple(programs)}) if programs else out


__all__ = ["ENTRY_OF", "ENTRY_SUFFIX", "FUNCTION_SUFFIX", "MIN_CALLS", "NotQualified",
           "REPORT_KEY", "SingleEntry"]
