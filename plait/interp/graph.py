"""The reference interpreter of graph functions: run an IRModule in any phase on numpy.

What "running the module" means in each phase:

* ``ingestion`` / ``optimization``: op calls run their numpy reference implementation
  (``OpDef.reference``, :mod:`plait.runtime.numpy_ops` for the core ops), calls of the
  module's functions (external ones, ``compiler="name"``, included: their body is
  ordinary IR) run those functions, nested functions are closures, ``if`` takes one
  branch;
* after dispatch and in ``lowering``: ``call_kernel`` runs the kernel through
  :func:`plait.kernel.interp.run_kernel` (the kernel IR's reference semantics; with
  ``native_kernels=True`` the module's compiled library instead, once it has one) and
  ``call_extern`` the extern function (:mod:`plait.interp.externs`: packed functions,
  the module's native libraries, the providers of targets and codegens);
* ``build``: storage and tensors are allocated as the VM would (fresh memory is filled
  with a poison pattern — NaN for floats — so reading what nothing wrote shows),
  tensors placed in a storage are views of it (a memory plan that overlaps two live
  tensors changes the results), ``call_dps`` writes its outputs in place.

Everything traverses iteratively except what nests for real: a call of a module
function and the branches of an ``if``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.errors import PlaitError

from ..ir.expr import (
    Call,
    Constant,
    DataflowVar,
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
)
from ..ir.module import IRModule
from ..ir.symbolic import Dim, SymbolicError, SymExpr, evaluate, free_symbols
from ..ir.types import TensorType, TupleType, Type
from ..kernel.interp import KernelRunError, run_kernel
from ..kernel.ir import Kernel
from .externs import ExternResolver


class InterpreterError(PlaitError, RuntimeError):
    """The module cannot be run: names the function, the binding and what went wrong."""

    def __init__(self, message: str, *, function: str | None = None,
                 binding: str | None = None) -> None:
        where = []
        if function is not None:
            where.append(f"function {function!r}")
        if binding is not None:
            where.append(f"binding {binding!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.function = function
        self.binding = binding


class _Ref:
    """A module function or extern function used as a value."""

    __slots__ = ("name", "extern")

    def __init__(self, name: str, extern: bool) -> None:
        self.name = name
        self.extern = extern


class _Closure:
    """A nested function with the frame it was made in."""

    __slots__ = ("func", "frame")

    def __init__(self, func: Function, frame: _Frame) -> None:
        self.func = func
        self.frame = frame


class _Frame:
    __slots__ = ("env", "sizes", "parent", "function")

    def __init__(self, function: str, parent: _Frame | None = None) -> None:
        self.env: dict[Var, Any] = {}
        self.sizes: dict[str, int] = dict(parent.sizes) if parent is not None else {}
        self.parent = parent
        self.function = function

    def lookup(self, v: Var) -> Any:
        f: _Frame | None = self
        while f is not None:
            try:
                return f.env[v]
            except KeyError:
                f = f.parent
        raise InterpreterError(f"variable {v.name_hint!r} is used before it is bound",
                               function=self.function)


POISON_BYTE = 0xFF
"""Fresh storage is filled with this byte (a NaN for float32 and float64)."""


def _fresh(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A new array filled with poison: NaN for floats, 0x5A bytes for the rest."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dtype=dt)
    out = np.empty(shape, dtype=dt)
    if dt.kind == "b":
        out.fill(False)
    else:
        out.reshape(-1).view(np.uint8).fill(0x5A)
    return out


class Interpreter:
    """Runs the functions of ``mod`` on numpy arrays (see the module docstring).

    ``native_kernels``: run kernels from the module's compiled library when it has one
    (the build phase after the target compiled them) instead of interpreting them."""

    def __init__(self, mod: IRModule, *, native_kernels: bool = False) -> None:
        if not isinstance(mod, IRModule):
            raise TypeError(f"the interpreter runs an IRModule, got {type(mod).__name__}")
        self.mod = mod
        self.native_kernels = native_kernels
        self.externs = ExternResolver(mod)

    # ------------------------------------------------------------------ entry
    def run(self, function: str = "main", *args: Any) -> Any:
        """Call graph function ``function`` on ``args``; return its result (an array,
        or a tuple for several outputs)."""
        if function not in self.mod.functions:
            names = ", ".join(n for n, _ in self.mod.graph_functions())
            raise InterpreterError(f"the module has no function {function!r} (its graph "
                                   f"functions: {names or 'none'})")
        func = self.mod[function]
        if not isinstance(func, Function):
            raise InterpreterError(f"{function!r} is a {type(func).__name__}, not a graph "
                                   "function; kernels run with plait.kernel.interp.run_kernel")
        return self._call_function(func, function, list(args), None)

    # ------------------------------------------------------------------ functions
    def _call_function(self, func: Function, name: str, args: list[Any],
                       parent: _Frame | None) -> Any:
        frame = _Frame(name, parent)
        if len(args) != len(func.params):
            raise InterpreterError(
                f"takes {len(func.params)} argument(s) "
                f"({', '.join(p.name_hint for p in func.params)}), got {len(args)}",
                function=name)
        for p, a in zip(func.params, args):
            if isinstance(p.ty, TensorType):
                a = np.asarray(a) if not isinstance(a, np.ndarray) else a
                self._bind_tensor(a, p.ty, frame, p.name_hint, "parameter")
            frame.env[p] = a
        body = func.body
        if isinstance(body, SeqExpr):
            return self._seq(body, frame)
        return self._eval(body, frame, "<body>")

    def _bind_tensor(self, a: Any, ty: TensorType, frame: _Frame, name: str,
                     what: str) -> None:
        if not isinstance(a, np.ndarray):
            raise InterpreterError(f"{what} {name!r} must be a tensor of type {ty}, got "
                                   f"{type(a).__name__}", function=frame.function)
        if ty.dtype is not None and a.dtype.name != ty.dtype:
            raise InterpreterError(f"{what} {name!r} has type {ty}, the value is "
                                   f"{a.dtype.name} {a.shape}", function=frame.function)
        if ty.shape is None:
            return
        if len(ty.shape) != a.ndim:
            raise InterpreterError(f"{what} {name!r} has type {ty}, the value has shape "
                                   f"{a.shape}", function=frame.function)
        for d, n in zip(ty.shape, a.shape):
            if isinstance(d, str):
                have = frame.sizes.setdefault(d, int(n))
                if have != n:
                    raise InterpreterError(
                        f"{what} {name!r} has type {ty} with {d}={have} bound already, the "
                        f"value has shape {a.shape}", function=frame.function)
            elif type(d) is SymExpr:
                if free_symbols(d) <= frame.sizes.keys() and evaluate(d, frame.sizes) != n:
                    raise InterpreterError(
                        f"{what} {name!r} has type {ty}: its size {d} is "
                        f"{evaluate(d, frame.sizes)}, the value has shape {a.shape}",
                        function=frame.function)
            elif d != n:
                raise InterpreterError(f"{what} {name!r} has type {ty}, the value has shape "
                                       f"{a.shape}", function=frame.function)

    def _seq(self, seq: SeqExpr, frame: _Frame) -> Any:
        for block in seq.blocks:
            for b in block.bindings:
                name = b.var.name_hint
                try:
                    value = self._eval(b.value, frame, name)
                    if isinstance(b, MatchCast):
                        if isinstance(b.cast_ty, TensorType):
                            self._bind_tensor(value, b.cast_ty, frame, name, "match_cast of")
                except InterpreterError:
                    raise
                except LookupError as e:
                    raise InterpreterError(str(e.args[0]) if e.args else str(e),
                                           function=frame.function, binding=name) from e
                except Exception as e:
                    raise InterpreterError(f"{type(e).__name__}: {e}", function=frame.function,
                                           binding=name) from e
                frame.env[b.var] = value
        return self._eval(seq.body, frame, "<result>")

    # ------------------------------------------------------------------ expressions
    def _leaf(self, e: Expr, frame: _Frame) -> Any:
        t = type(e)
        if t is Var or t is DataflowVar:
            return frame.lookup(e)  # type: ignore[arg-type]
        if t is Constant:
            return e.data  # type: ignore[attr-defined]
        if t is PrimValue:
            return e.value  # type: ignore[attr-defined]
        if t is StringImm:
            return e.value  # type: ignore[attr-defined]
        if t is ShapeExpr:
            return tuple(self._dim(d, frame) for d in e.values)  # type: ignore[attr-defined]
        if t is GlobalVar:
            return _Ref(e.name_hint, False)  # type: ignore[attr-defined]
        if t is ExternFunc:
            return _Ref(e.symbol, True)  # type: ignore[attr-defined]
        if t is Function:
            return _Closure(e, frame)  # type: ignore[arg-type]
        if t is SeqExpr:
            return self._seq(e, _Frame(frame.function, frame))  # type: ignore[arg-type]
        if t is If:
            c = self._eval(e.cond, frame, "<if condition>")  # type: ignore[attr-defined]
            branch = e.then_branch if bool(np.asarray(c)) else e.else_branch  # type: ignore[attr-defined]
            inner = _Frame(frame.function, frame)
            return self._seq(branch, inner) if isinstance(branch, SeqExpr) else self._eval(
                branch, inner, "<branch>")
        raise InterpreterError(f"cannot run a {type(e).__name__} expression",
                               function=frame.function)

    def _eval(self, root: Expr, frame: _Frame, where: str) -> Any:
        done: dict[int, Any] = {}
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            if id(e) in done:
                continue
            if isinstance(e, Call):
                kids = e.args
            elif isinstance(e, Tuple):
                kids = e.fields
            elif isinstance(e, TupleGetItem):
                kids = (e.tuple_value,)
            else:
                done[id(e)] = self._leaf(e, frame)
                continue
            if not expanded:
                stack.append((e, True))
                stack.extend((k, False) for k in kids if id(k) not in done)
                continue
            vals = [done[id(k)] for k in kids]
            if isinstance(e, Tuple):
                done[id(e)] = tuple(vals)
            elif isinstance(e, TupleGetItem):
                done[id(e)] = vals[0][e.index]
            else:
                done[id(e)] = self._call(e, vals, frame, where)
        return done[id(root)]

    def _dim(self, d: Dim, frame: _Frame) -> int:
        if type(d) is SymExpr:
            try:
                return evaluate(d, frame.sizes)
            except SymbolicError as e:
                raise InterpreterError(f"size {d}: {e}", function=frame.function) from None
        if isinstance(d, str):
            try:
                return frame.sizes[d]
            except KeyError:
                raise InterpreterError(f"symbolic size {d!r} is not bound here",
                                       function=frame.function) from None
        return int(d)

    def _shape(self, shape: Sequence[int | str], frame: _Frame) -> tuple[int, ...]:
        return tuple(self._dim(d, frame) for d in shape)

    # ------------------------------------------------------------------ calls
    def _call(self, call: Call, args: list[Any], frame: _Frame, where: str) -> Any:
        op = call.op
        if isinstance(op, Op):
            return self._call_op(call, op.name, args, frame, where)
        if isinstance(op, GlobalVar):
            return self._call_global(op.name_hint, args, frame)
        if isinstance(op, ExternFunc):
            return self.externs.get(op.symbol)(*args)
        callee = self._eval(op, frame, where)
        return self._call_value(callee, args, frame, where)

    def _call_value(self, callee: Any, args: list[Any], frame: _Frame, where: str) -> Any:
        if isinstance(callee, _Closure):
            return self._call_function(callee.func, f"{frame.function}.<lambda>", args,
                                       callee.frame)
        if isinstance(callee, _Ref):
            if callee.extern:
                return self.externs.get(callee.name)(*args)
            return self._call_global(callee.name, args, frame)
        raise InterpreterError(f"cannot call a {type(callee).__name__}",
                               function=frame.function, binding=where)

    def _call_global(self, name: str, args: list[Any], frame: _Frame) -> Any:
        func = self.mod.functions.get(name)
        if func is None:
            raise InterpreterError(f"calls {name!r}, which is not in the module",
                                   function=frame.function)
        if not isinstance(func, Function):
            raise InterpreterError(f"calls kernel {name!r} like a function; kernels are "
                                   "called with call_kernel or builtin.call_dps",
                                   function=frame.function)
        return self._call_function(func, name, args, None)

    def _outputs(self, ty: Type | None, frame: _Frame, where: str) -> list[np.ndarray] | None:
        """Fresh arrays for a call's ``out`` type, or None when its shape is unknown."""
        if isinstance(ty, TensorType) and ty.shape is not None and ty.dtype is not None:
            return [_fresh(self._shape(ty.shape, frame), ty.dtype)]
        if isinstance(ty, TupleType) and ty.fields:
            outs: list[np.ndarray] = []
            for f in ty.fields:
                one = self._outputs(f, frame, where)
                if one is None or len(one) != 1 or not isinstance(f, TensorType):
                    return None
                outs.extend(one)
            return outs
        return None

    def _callee(self, callee: Any, frame: _Frame, where: str) -> tuple[str, Any]:
        """(name, function writing its outputs) of a kernel or extern callee."""
        if not isinstance(callee, _Ref):
            raise InterpreterError(f"the callee must be a kernel or an extern function, got "
                                   f"{type(callee).__name__}", function=frame.function,
                                   binding=where)
        if callee.extern:
            return callee.name, self.externs.get(callee.name)
        kernel = self.mod.functions.get(callee.name)
        if not isinstance(kernel, Kernel):
            raise InterpreterError(f"{callee.name!r} is not a kernel of the module",
                                   function=frame.function, binding=where)
        if self.native_kernels:
            fn = self.externs.find(callee.name) if self.mod.attrs.get("native_libs") else None
            if fn is not None:
                return callee.name, fn
        name = callee.name

        def run(*arrays: Any, **attrs: Any) -> None:
            try:
                run_kernel(kernel, arrays, name)
            except KernelRunError as e:
                raise InterpreterError(str(e), function=frame.function, binding=where) from e

        return name, run

    def _call_op(self, call: Call, name: str, args: list[Any], frame: _Frame,
                 where: str) -> Any:
        attrs = call.attrs
        if name in ("call_kernel", "call_extern"):
            fname, fn = self._callee(args[0], frame, where)
            ins = list(args[1]) if isinstance(args[1], tuple) else [args[1]]
            extra = dict(attrs.get("attrs") or {})
            outs = self._outputs(attrs.get("out"), frame, where)
            if outs is None:
                alloc = self.externs.get(fname + "@alloc")
                return alloc(*ins, **extra)
            fn(*ins, *outs, **extra)
            return outs[0] if not isinstance(attrs.get("out"), TupleType) else tuple(outs)
        if name == "builtin.call_dps":
            _, fn = self._callee(args[0], frame, where)
            fn(*args[1], *args[2], **dict(attrs.get("attrs") or {}))
            return None
        if name == "builtin.call_alloc":
            fname = args[0].name if isinstance(args[0], _Ref) else str(args[0])
            alloc = self.externs.get(fname + "@alloc")
            return alloc(*args[1], **dict(attrs.get("attrs") or {}))
        if name == "builtin.alloc_tensor":
            return _fresh(self._shape(attrs["shape"], frame), attrs["dtype"])
        if name == "builtin.alloc_storage":
            return np.full(self._dim(attrs["nbytes"], frame), POISON_BYTE, dtype=np.uint8)
        if name == "builtin.tensor_from_storage":
            storage = args[0]
            shape = self._shape(attrs["shape"], frame)
            dt = np.dtype(attrs["dtype"])
            offset = self._dim(attrs["offset"], frame)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            if offset < 0 or offset + nbytes > storage.size:
                raise InterpreterError(
                    f"tensor_from_storage places {nbytes} bytes at offset {offset} of a "
                    f"storage of {storage.size} bytes", function=frame.function, binding=where)
            return storage[offset:offset + nbytes].view(dt).reshape(shape)
        return self._reference(call, name, args, frame, where)

    def _reference(self, call: Call, name: str, args: list[Any], frame: _Frame,
                   where: str) -> Any:
        op = call.op
        if not op.is_registered:  # type: ignore[attr-defined]
            raise InterpreterError(f"op {name!r} is not registered", function=frame.function,
                                   binding=where)
        opdef = op.definition  # type: ignore[attr-defined]
        if opdef.reference is None:
            raise InterpreterError(
                f"op {name!r} has no numpy reference implementation, so the reference "
                "interpreter cannot run it; give it one (register_op(..., reference=fn))",
                function=frame.function, binding=where)
        kwargs = dict(call.attrs)
        for key, spec in opdef.attrs.items():
            v = kwargs.get(key)
            if spec.kind in ("dims", "int_or_dims") and isinstance(v, tuple):
                kwargs[key] = self._shape(v, frame)
        return opdef.reference(*args, **kwargs)


def run(mod: IRModule, *args: Any, function: str = "main", native_kernels: bool = False) -> Any:
    """Run ``function`` of ``mod`` on ``args`` with the reference interpreter."""
    return Interpreter(mod, native_kernels=native_kernels).run(function, *args)


__all__ = ["POISON_BYTE", "Interpreter", "InterpreterError", "run"]
