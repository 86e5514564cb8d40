"""The virtual machine: runs an :class:`Executable` on numpy arrays.

Construction validates the executable, resolves every ``Call`` to a Python callable once
(a VM function of the executable, a packed function, or a function of a native library)
and pre-decodes instructions into tuples, so the interpreter loop only indexes registers
and calls.  Calls between VM functions push frames on an explicit stack: VM recursion
never uses Python recursion.
"""

from __future__ import annotations

import difflib
import math
import operator
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import plait.runtime.builtins  # noqa: F401  (registers the vm.builtin.* functions)
from plait.errors import PlaitError
from plait.runtime.executable import (
    AllocStorage,
    AllocTensor,
    Call,
    Const,
    Executable,
    ExecutableFormatError,
    Goto,
    If,
    Imm,
    Instr,
    Move,
    ParamSig,
    Reg,
    Ret,
    VMFunction,
)
from plait.runtime.external import resolve_external
from plait.runtime.limits import LimitExceeded, check_limit, limit_value
from plait.runtime.native import NativeFunction, dtype_text, to_native_order
from plait.runtime.packed import close_func_names, get_func, has_func, load_native_func
from plait.runtime.sizes import compile_size, eval_size, size_value

MAX_CALL_DEPTH = 10_000
STORAGE_ALIGNMENT = 64

_CALL, _CALL_KW, _ALLOC_TENSOR, _ALLOC_STORAGE, _RET, _VMCALL, _IF, _GOTO, _MOVE = range(9)
_ALLOC_STORAGE_SYM = 9
_UINT8 = np.dtype(np.uint8)
_UNREAD = object()
_ENTRY_REPORT = "single_entry"
SOURCE_MAP = "source_map"
"""Executable attribute: ``{function: {pc: source}}``, what each call instruction
computes (the ONNX nodes, or the PyTorch node and source line, its binding's span
names; a fused kernel names all its members): :meth:`VirtualMachine.profile` and
:meth:`VirtualMachine.profile_steps` report it beside each call."""
"""The executable attribute naming each function's single entry point (or the reason it
has none)."""


_DL_CPU = 1
_DL_HOST_DEVICES = (1, 3, 11, 13)
"""DLPack device types numpy reads: kDLCPU, kDLCUDAHost and kDLROCMHost (pinned host
memory), kDLCUDAManaged."""
_DL_DEVICE_NAMES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm",
                    14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


class VMError(PlaitError, RuntimeError):
    """An error while running (or linking) VM code.

    ``function``, ``pc`` and ``instruction`` locate the failing instruction when known;
    the original exception is chained as ``__cause__``."""

    def __init__(
        self,
        message: str,
        function: str | None = None,
        pc: int | None = None,
        instruction: str | None = None,
    ) -> None:
        super().__init__(message)
        self.function = function
        self.pc = pc
        self.instruction = instruction


class VMCallDepthError(VMError):
    """VM functions called each other more than :data:`MAX_CALL_DEPTH` deep."""


class VMInputError(VMError, ValueError):
    """The arguments given to a VM function do not match its signature."""


class VMFunctionNotFoundError(VMError, KeyError):
    """``vm[name]`` or ``vm.invoke(name)`` for a function the executable lacks."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0])


@dataclass
class ProfileEntry:
    """Time spent in one call instruction during :meth:`VirtualMachine.profile`."""

    function: str
    pc: int
    instruction: str
    callee: str
    calls: int
    seconds: float
    source: str = ""
    """What the call computes in the model (ONNX node names, PyTorch nodes and source
    lines), when the executable records it."""

    def __str__(self) -> str:
        return (
            f"{self.seconds * 1e3:10.3f} ms {self.calls:6d}x  "
            f"{self.function}[{self.pc}] {self.instruction}"
            + (f"  [{self.source}]" if self.source else "")
        )


_STORAGE_ROOTS: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
"""The arrays behind storage buffers this module allocated, by id (only those are
reused)."""


def aligned_storage(nbytes: int, alignment: int = STORAGE_ALIGNMENT) -> np.ndarray:
    """A 1-D uint8 buffer of ``nbytes`` bytes whose data address is ``alignment``-aligned."""
    raw = np.empty(nbytes + alignment, dtype=_UINT8)
    _STORAGE_ROOTS[id(raw)] = raw
    start = -raw.ctypes.data % alignment
    return raw[start : start + nbytes]


# ----------------------------------------------------------------- argument checking


def _fmt_shape(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class _Binder:
    """Checks the arguments of one call against a parameter list and binds symbols."""

    def __init__(self, fn: VMFunction, ranges: dict[str, Any] | None = None) -> None:
        self.fname = fn.name
        self.params = list(fn.params)
        # the ranges of the symbolic sizes the parameters bind (the executable's
        # ``dim_ranges`` fact: {name: [min, max or None]})
        symbols = set(fn.symbols())
        self.ranges = {k: (int(v[0]), None if v[1] is None else int(v[1]))
                       for k, v in (ranges or {}).items() if k in symbols}
        self.dtypes = [None if p.dtype is None else np.dtype(p.dtype) for p in fn.params]
        # (parameter index, axis, size expression) of the dims that are expressions
        # over the names other dims bind: checked once every name is bound
        self.exprs = [
            (i, axis, d) for i, p in enumerate(fn.params)
            if p.kind in ("tensor", "shape") and p.shape is not None
            for axis, d in enumerate(p.shape) if isinstance(d, str) and not d.isidentifier()
        ]
        self.num_registers = fn.num_registers
        names = ", ".join(p.name for p in fn.params)
        self.signature = f"{fn.name}({names})"
        # bind's fast path: per parameter (dtype, rank, ((axis, size), ...)), each size
        # an int or a symbol's name (expressions are checked once all are bound); None
        # unless every parameter is a tensor of known rank and dtype
        plans: list[tuple[np.dtype, int, tuple[tuple[int, int | str], ...]]] = []
        for p, dt in zip(fn.params, self.dtypes):
            if p.kind != "tensor" or p.shape is None or dt is None:
                break
            dims = tuple((axis, d) for axis, d in enumerate(p.shape)
                         if not isinstance(d, str) or d.isidentifier())
            plans.append((dt, len(p.shape), dims))
        self.plans = plans if len(plans) == len(fn.params) else None

    def bind(self, args: Sequence[Any]) -> tuple[list[Any], dict[str, int]]:
        """Registers with the (checked, contiguous) arguments in place, and the symbols.

        Arguments that are C-contiguous arrays of their parameters' dtypes, ranks and
        sizes (a language model's decode step: 49 of them at 24 layers, every step) are
        taken without a check call per argument; any other argument, or a size outside
        its range, goes through the full checks, which convert what they can and name
        the problem."""
        plans = self.plans
        if plans is None or len(args) != len(plans):
            return self._bind_checked(args)
        regs: list[Any] = [None] * self.num_registers
        syms: dict[str, int] = {}
        for i, a in enumerate(args):
            dtype, ndim, dims = plans[i]
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                return self._bind_checked(args)
            shape = a.shape
            if len(shape) != ndim:
                return self._bind_checked(args)
            for axis, want in dims:
                got = shape[axis]
                if want.__class__ is int:
                    if got != want:
                        return self._bind_checked(args)
                elif syms.setdefault(want, got) != got:   # type: ignore[arg-type]
                    return self._bind_checked(args)
            regs[i] = a
        for name, (lo, hi) in self.ranges.items():
            size = syms.get(name)
            if size is not None and (size < lo or (hi is not None and size > hi)):
                return self._bind_checked(args)
        if self.exprs:
            self._check_exprs(regs, syms)
        return regs, syms

    def _bind_checked(self, args: Sequence[Any]) -> tuple[list[Any], dict[str, int]]:
        """:meth:`bind` with each argument checked (and converted) by :meth:`_check`."""
        if len(args) != len(self.params):
            n = len(self.params)
            raise VMInputError(
                f"{self.signature} takes {n} argument{'s' * (n != 1)} "
                f"but {len(args)} {'was' if len(args) == 1 else 'were'} given",
                self.fname,
            )
        regs: list[Any] = [None] * self.num_registers
        syms: dict[str, int] = {}
        bound_by: dict[str, str] = {}
        for i, (p, a) in enumerate(zip(self.params, args)):
            regs[i] = self._check(p, self.dtypes[i], a, syms, bound_by)
        if self.ranges:
            self._check_ranges(syms, bound_by)
        if self.exprs:
            self._check_exprs(regs, syms)
        return regs, syms

    def _check_exprs(self, regs: list[Any], syms: dict[str, int]) -> None:
        for i, axis, text in self.exprs:
            p, a = self.params[i], regs[i]
            got = a.shape[axis] if isinstance(a, np.ndarray) else a[axis]
            want = eval_size(text, syms)
            if got != want:
                names = ", ".join(f"{n} = {syms[n]}" for n in compile_size(text)[0])
                raise self._error(
                    p,
                    f"dimension {axis} is {got} but its size {text} is {want} ({names}, bound "
                    f"by the other sizes; expected shape {_fmt_shape(p.shape)})",
                )

    def _check_ranges(self, syms: dict[str, int], bound_by: dict[str, str]) -> None:
        for name, (lo, hi) in self.ranges.items():
            size = syms.get(name)
            if size is None or (lo <= size and (hi is None or size <= hi)):
                continue
            p = next(q for q in self.params if q.name == bound_by[name])
            assert p.shape is not None
            axis = p.shape.index(name)
            bounds = f"[{lo}, {hi}]" if hi is not None else f"[{lo}, inf)"
            raise self._error(
                p,
                f"dimension {axis} is {size}, outside the range {bounds} of symbolic size "
                f"{name!r} (the module's dim_ranges fact, e.g. the torch.export.Dim it was "
                "exported with); give a size in the range, or import the model again with "
                "a wider range",
            )

    def _error(self, p: ParamSig, message: str) -> VMInputError:
        return VMInputError(f"calling {self.fname!r}: parameter {p.name!r}: {message}", self.fname)

    def _bind_dims(
        self, p: ParamSig, got: Sequence[int], syms: dict[str, int], bound_by: dict[str, str]
    ) -> None:
        assert p.shape is not None
        for axis, (want, size) in enumerate(zip(p.shape, got)):
            if isinstance(want, str):
                if not want.isidentifier():
                    continue   # a size expression: checked once every name is bound
                have = syms.get(want)
                if have is None:
                    syms[want] = size
                    bound_by[want] = p.name
                elif have != size:
                    raise self._error(
                        p,
                        f"dimension {axis} is {size} but symbolic size {want!r} was bound "
                        f"to {have} by parameter {bound_by[want]!r}",
                    )
            elif want != size:
                raise self._error(
                    p,
                    f"dimension {axis} is {size}, expected {want} "
                    f"(expected shape {_fmt_shape(p.shape)}, got {_fmt_shape(got)})",
                )

    def _from_dlpack(self, p: ParamSig, a: Any) -> np.ndarray:
        """``a`` (an object with ``__dlpack__``: a torch tensor, a CuPy or JAX array...)
        as a numpy array over the same memory (:func:`numpy.from_dlpack`, no copy).  A
        torch tensor that requires grad is detached first (the VM computes no
        gradients); memory on another device than the CPU is refused, naming the fix."""
        device = getattr(a, "__dlpack_device__", None)
        if device is not None:
            try:
                kind, index = device()
            except Exception:  # noqa: BLE001 (np.from_dlpack below reports it)
                kind, index = _DL_CPU, 0
            if kind not in _DL_HOST_DEVICES:
                where = _DL_DEVICE_NAMES.get(int(kind), f"DLPack device type {int(kind)}")
                raise self._error(
                    p,
                    f"the {type(a).__name__} is in {where} memory (device {index}); plait "
                    "runs on the CPU: move it there first (tensor.cpu())")
        if getattr(a, "requires_grad", False) and hasattr(a, "detach"):
            a = a.detach()
        try:
            return np.from_dlpack(a)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise self._error(
                p,
                f"cannot read the {type(a).__name__} through DLPack ({e}); convert it to a "
                "numpy array of a dtype numpy has (e.g. tensor.float().numpy())") from e

    def _tuple_from_dlpack(self, p: ParamSig, a: tuple | list) -> tuple:
        """Tuple ``a`` with every leaf that has ``__dlpack__`` (in nested tuples and lists
        too, followed without recursion) as a numpy array; containers keep their kind."""
        root = list(a)
        todo, rebuilt = [root], []   # rebuilt: (container, index, kind), outermost first
        while todo:
            items = todo.pop()
            for i, v in enumerate(items):
                if isinstance(v, tuple | list):
                    items[i] = inner = list(v)
                    todo.append(inner)
                    rebuilt.append((items, i, type(v)))
                elif not isinstance(v, np.ndarray) and hasattr(v, "__dlpack__"):
                    items[i] = self._from_dlpack(p, v)
        for items, i, kind in reversed(rebuilt):   # innermost first
            items[i] = kind(items[i])
        return tuple(root)

    def _check_copy(self, p: ParamSig, a: np.ndarray) -> None:
        """Refuse to copy argument ``a`` (a view, or of another byte order) when the
        copy would exceed ``max_tensor_bytes`` (:mod:`plait.runtime.limits`)."""
        try:
            check_limit("max_tensor_bytes", a.nbytes,
                        f"the contiguous copy of this argument (shape {_fmt_shape(a.shape)}, "
                        f"{dtype_text(a.dtype)}) needs")
        except LimitExceeded as e:
            raise self._error(p, str(e)) from None

    def _check(
        self,
        p: ParamSig,
        dtype: np.dtype | None,
        a: Any,
        syms: dict[str, int],
        bound_by: dict[str, str],
    ) -> Any:
        kind = p.kind
        if kind == "tensor":
            if not isinstance(a, np.ndarray):
                if hasattr(a, "__dlpack__"):
                    a = self._from_dlpack(p, a)
                elif not isinstance(a, np.generic):
                    raise self._error(
                        p,
                        f"expected a tensor (numpy.ndarray), or an array with __dlpack__ "
                        f"such as a torch.Tensor, got {type(a).__name__}; convert it with "
                        "numpy.asarray(value, dtype=...)",
                    )
                else:
                    a = np.asarray(a)
            if p.shape is not None:
                if a.ndim != len(p.shape):
                    raise self._error(
                        p,
                        f"expected rank {len(p.shape)} (shape {_fmt_shape(p.shape)}), "
                        f"got rank {a.ndim} (shape {_fmt_shape(a.shape)})",
                    )
                self._bind_dims(p, a.shape, syms, bound_by)
            if (dtype is not None and a.dtype != dtype) or not a.flags.c_contiguous:
                self._check_copy(p, a)   # a broadcast view of 10^9 rows: refuse, not copy
            if dtype is not None and a.dtype != dtype:
                swapped = to_native_order(a, dtype)
                if swapped is None:
                    raise self._error(
                        p, f"expected dtype {dtype_text(dtype)}, got {dtype_text(a.dtype)}"
                    )
                a = swapped
            if not a.flags.c_contiguous:
                try:
                    a = a.copy(order="C")
                except MemoryError:
                    raise self._error(p, f"no memory for the contiguous copy of this argument "
                                         f"({a.nbytes:,} bytes): pass a contiguous array "
                                         "(numpy.ascontiguousarray)") from None
            return a
        if kind == "tuple":
            if not isinstance(a, tuple | list):
                raise self._error(p, f"expected a tuple, got {type(a).__name__}")
            return self._tuple_from_dlpack(p, a)
        if kind == "prim":
            if not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):
                a = self._from_dlpack(p, a)
            if isinstance(a, np.ndarray) and a.ndim == 0:
                return a
            if not isinstance(a, bool | int | float | np.generic):
                raise self._error(p, f"expected a scalar, got {type(a).__name__}")
            return a
        if kind == "shape":
            if not isinstance(a, tuple | list) or not all(
                isinstance(d, int | np.integer) and not isinstance(d, bool) for d in a
            ):
                raise self._error(p, f"expected a shape (tuple of ints), got {a!r}")
            a = tuple(int(d) for d in a)
            if p.shape is not None:
                if len(a) != len(p.shape):
                    raise self._error(
                        p,
                        f"expected a shape of {len(p.shape)} entries "
                        f"{_fmt_shape(p.shape)}, got {_fmt_shape(a)}",
                    )
                self._bind_dims(p, a, syms, bound_by)
            return a
        return a  # object


# ------------------------------------------------------------------------- decoding


class _Code:
    """A decoded VM function."""

    __slots__ = ("name", "fn", "binder", "instrs", "storages")

    def __init__(self, fn: VMFunction, ranges: dict[str, Any] | None = None) -> None:
        self.name = fn.name
        self.fn = fn
        self.binder = _Binder(fn, ranges)
        self.instrs: list[tuple[Any, ...]] = []
        # (register, free buffers) of every AllocStorage: see _release_storages
        self.storages: list[tuple[int, int | None, list[np.ndarray]]] = []

    def checked_as(self, other: _Code) -> _Code:
        """This code with ``other``'s argument checks (the same parameters), so that
        input errors name ``other``: how ``vm[name]`` runs name's entry point."""
        code = _Code.__new__(_Code)
        code.name, code.fn, code.binder = self.name, self.fn, other.binder
        code.instrs, code.storages = self.instrs, self.storages
        return code


STORAGE_POOL_SIZE = 2
"""Free storage buffers kept per AllocStorage instruction (more than one only matters
for recursive or concurrent calls of the same function)."""


def _root(a: Any) -> Any:
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _holds(value: Any, root: Any) -> bool:
    """Whether ``value`` (an array, or tuples of them) has memory of buffer ``root``."""
    if isinstance(value, np.ndarray):
        return _root(value) is root
    if isinstance(value, tuple):
        for v in value:   # (a model's outputs: arrays, rarely a nested tuple)
            if v.__class__ is np.ndarray:
                if _root(v) is root:
                    return True
            elif _holds(v, root):
                return True
    return False


def _release_storages(code: _Code, regs: list[Any], value: Any) -> None:
    """At a function's return, give its storage buffers back for the next call: an
    arena is allocated (and its pages faulted in) once, not on every call.  A buffer the
    returned value still uses — which memory planning never does on its own, but a
    callee returning its argument could — is not reused."""
    for reg, nbytes, pool in code.storages:
        buf = regs[reg]
        if (isinstance(buf, np.ndarray) and len(pool) < STORAGE_POOL_SIZE
                and buf.dtype is _UINT8 and (buf.shape == (nbytes,) or nbytes is None)):
            root = _root(buf)
            if _STORAGE_ROOTS.get(id(root)) is root and not _holds(value, root):
                pool.append(buf)


def _no_args(regs: list[Any]) -> tuple[()]:
    return ()


def _args_getter(args: Sequence[Any], constants: list[np.ndarray]) -> Callable[[list[Any]], Any]:
    """A function from the registers to the argument values of a call (a C-level
    ``itemgetter`` in the common case where every argument is a register)."""
    if not args:
        return _no_args
    if all(isinstance(a, Reg) for a in args):
        if len(args) >= 2:
            return operator.itemgetter(*(a.index for a in args))
        only = args[0].index
        return lambda regs: (regs[only],)
    template: list[Any] = []
    slots = []
    for pos, a in enumerate(args):
        if isinstance(a, Reg):
            slots.append((pos, a.index))
            template.append(None)
        elif isinstance(a, Const):
            template.append(constants[a.index])
        else:
            template.append(a.value)

    def mixed(regs: list[Any]) -> list[Any]:
        argv = template.copy()
        for pos, r in slots:
            argv[pos] = regs[r]
        return argv

    return mixed


def _decode_kwargs(
    kwargs: dict[str, Any], constants: list[np.ndarray]
) -> tuple[dict[str, Any], tuple[tuple[str, int], ...]]:
    static: dict[str, Any] = {}
    regs = []
    for k, v in kwargs.items():
        if isinstance(v, Reg):
            regs.append((k, v.index))
        elif isinstance(v, Const):
            static[k] = constants[v.index]
        else:
            static[k] = v.value if isinstance(v, Imm) else v
    return static, tuple(regs)


def _timed(fn: Callable[..., Any], record: list[float]) -> Callable[..., Any]:
    perf = time.perf_counter

    def run(*args: Any, **kwargs: Any) -> Any:
        start = perf()
        try:
            return fn(*args, **kwargs)
        finally:
            record[0] += 1
            record[1] += perf() - start

    return run


# --------------------------------------------------------------------------- the VM


class VirtualMachine:
    """Runs the functions of an executable.

    ``vm["main"](*arrays)`` and ``vm.invoke("main", *arrays)`` return an ndarray or a tuple
    (the value the function returns).  Construction raises ``ExecutableFormatError`` for a
    malformed executable and ``VMError`` for a call to a function that cannot be resolved.

    **Single entry points.**  When the executable gives a function ``f`` an entry point
    (the attribute ``single_entry``, which the ``c`` target's ``c.SingleEntry`` pass
    records: ``{"f": {"entry": "f__entry", ...}}``), ``vm["f"]`` and ``invoke("f")`` run
    ``f__entry`` — which checks the inputs against ``f``'s parameters and makes one native
    call for all of ``f``'s calls — unless ``single_entry=False``.  ``f`` itself is the
    *VM path*, one instruction at a time; :meth:`profile` always runs it (its timings
    are per call).  :meth:`execution_path` says which one ``vm[f]`` runs, and why.
    """

    def __init__(self, exe: Executable, *, single_entry: bool = True) -> None:
        exe.validate()
        self.executable = exe
        self.single_entry = single_entry
        """Whether ``vm[f]`` runs ``f``'s single entry point when it has one."""
        self._constants = []
        for c in exe.constants:
            view = c.view()
            view.flags.writeable = False  # kernels must not write into constants
            self._constants.append(view)
        self._code = self._decode()
        self._entries = self._entry_codes() if single_entry else {}
        self._profiled: dict[str, _Code] | None = None
        self._timed_entries: dict[str, NativeFunction] = {}   # profile_steps
        self._records: dict[tuple[str, int], list[float]] = {}

    # ----------------------------------------------------------------- public API
    def __getitem__(self, name: str) -> Callable[..., Any]:
        """A callable running VM function ``name`` (through its single entry point, when
        it has one): positional arguments, or arguments by parameter name.  Unknown
        ``name`` raises ``KeyError`` (with close matches)."""
        code = self._entries.get(name) or self._lookup(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._run(code, self._positional(code, args, kwargs))

        call.__name__ = name
        call.__doc__ = f"Run VM function {code.binder.signature}."
        return call

    def __contains__(self, name: object) -> bool:
        return name in self._code

    def function_names(self) -> list[str]:
        """The names of the executable's VM functions."""
        return list(self._code)

    def invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run VM function ``name`` on ``args`` (and arguments given by parameter name)
        and return its result (through ``name``'s single entry point, when it has one)."""
        code = self._entries.get(name) or self._lookup(name)
        return self._run(code, self._positional(code, args, kwargs))

    def entry_point(self, name: str) -> str | None:
        """The VM function that ``vm[name]`` runs as one native call (``name``'s single
        entry point), or None when ``vm[name]`` runs on the VM path."""
        code = self._entries.get(name)
        return None if code is None else code.name

    def execution_path(self, name: str) -> str:
        """One line: how ``vm[name]`` runs (its single entry point, or the VM path and
        why)."""
        self._lookup(name)
        report = self.executable.attrs.get(_ENTRY_REPORT)
        info = report.get(name) if isinstance(report, dict) else None
        entry = self.entry_point(name)
        if entry is not None:
            assert isinstance(info, dict)
            calls = info.get("calls")
            return (f"{name}: single native entry point {info.get('native')!r} ({calls} "
                    f"native call{'' if calls == 1 else 's'} in one, through {entry!r})")
        if isinstance(info, dict) and "entry" in info:
            return (f"{name}: VM path (it has the single entry point {info['entry']!r}; "
                    "turned off by VirtualMachine(..., single_entry=False))")
        if isinstance(info, dict) and "reason" in info:
            return f"{name}: VM path (no single entry point: {info['reason']})"
        return (f"{name}: VM path (the executable records no single entry point for it: "
                "built for a target without them, or by an older plait)")

    def profile(self, name: str, *args: Any) -> tuple[Any, list[ProfileEntry]]:
        """Run ``name`` once on the VM path, timing every call instruction (packed and
        native functions; a nested VM call is accounted in its callee's instructions).
        Returns the result and the entries of the instructions that ran, in program
        order.  A function with a single entry point is profiled on its VM path (the
        same kernels, called one by one from Python): the entry point's one call has no
        per-kernel timings."""
        self._lookup(name)
        if self._profiled is None:
            self._profiled = self._decode(timed=True)
        for record in self._records.values():
            record[0] = record[1] = 0.0
        result = self._run(self._profiled[name], args)
        entries = []
        for (fname, pc), (calls, seconds) in self._records.items():
            if calls:
                ins = self.executable.functions[fname].instructions[pc]
                assert isinstance(ins, Call)
                entries.append(ProfileEntry(fname, pc, str(ins), ins.func, int(calls), seconds,
                                            self._sources(fname).get(pc, "")))
        return result, entries

    def _sources(self, fname: str) -> dict[int, str]:
        """pc -> what the call computes, from the executable's :data:`SOURCE_MAP`
        (malformed entries are ignored: it only labels a profile)."""
        table = self.executable.attrs.get(SOURCE_MAP)
        table = table.get(fname) if isinstance(table, dict) else None
        if not isinstance(table, dict):
            return {}
        return {int(k): str(v) for k, v in table.items() if str(k).isdigit()}

    def _step_sources(self, name: str, steps: Sequence[str]) -> list[str]:
        """What each step of ``name``'s entry point computes: its k-th call of a callee
        is the VM path's k-th call of it (the entry point runs the same calls in the
        same order), labelled from :data:`SOURCE_MAP`."""
        fn = self.executable.functions.get(name)
        sources = self._sources(name)
        by_callee: dict[str, list[str]] = {}
        for pc, ins in enumerate(fn.instructions if fn is not None else ()):
            if isinstance(ins, Call):
                by_callee.setdefault(ins.func.removesuffix("@alloc"), []).append(
                    sources.get(pc, ""))
        seen: dict[str, int] = {}
        out = []
        for callee in steps:
            k = seen.get(callee, 0)
            seen[callee] = k + 1
            texts = by_callee.get(callee, [])
            out.append(texts[k] if k < len(texts) else "")
        return out

    def profile_steps(self, name: str, *args: Any) -> tuple[Any, list[ProfileEntry]]:
        """Run ``name`` once through its single entry point and return the result and
        the time of each native call inside that one call, in order (``function`` is
        the entry point's native name, ``pc`` the step's index).  Unlike
        :meth:`profile`, nothing runs between the calls but the calls: these are the
        times inside the model.  Needs an executable built with the ``c`` target's
        ``step_timing=True``; otherwise raises :class:`VMError` saying so."""
        native = self._timed_entries.get(name)
        if native is None:
            self._lookup(name)
            report = self.executable.attrs.get(_ENTRY_REPORT)
            info = report.get(name) if isinstance(report, dict) else None
            if self.entry_point(name) is None or not isinstance(info, dict):
                raise VMError(f"profile_steps({name!r}): {self.execution_path(name)}; only "
                              "a single entry point has steps to time (use profile() for "
                              "the VM path)", name)
            found = load_native_func(self.executable, str(info.get("native")))
            if not isinstance(found, NativeFunction) or not found.steps:
                raise VMError(f"profile_steps({name!r}): the entry point "
                              f"{info.get('native')!r} does not time its steps: build with "
                              "Target('c', step_timing=True)", name)
            native = self._timed_entries[name] = found
        result = self[name](*args)
        seconds = native.step_times()
        sources = self._step_sources(name, native.steps)
        entries = [ProfileEntry(native.name, i, f"step {i}: {callee}", callee, 1, t, src)
                   for i, (callee, t, src) in enumerate(zip(native.steps, seconds, sources))]
        return result, entries

    # ------------------------------------------------------------------- decoding
    def _entry_codes(self) -> dict[str, _Code]:
        """The codes ``vm[name]`` runs instead of ``name``'s VM path: each function's
        single entry point, with ``name``'s argument checks."""
        report = self.executable.attrs.get(_ENTRY_REPORT)
        if report is None:
            return {}
        where = f"attribute {_ENTRY_REPORT!r}"
        if not isinstance(report, dict):
            raise ExecutableFormatError(f"{where} must be a dict of function name -> dict")
        out: dict[str, _Code] = {}
        for name, info in report.items():
            if not isinstance(info, dict):
                raise ExecutableFormatError(f"{where}: the entry of {name!r} must be a dict")
            entry = info.get("entry")
            if entry is None:
                continue   # a function without entry point (info["reason"] says why)
            fn, code = self._code.get(name), self._code.get(entry)
            if fn is None or code is None:
                missing = name if fn is None else entry
                raise ExecutableFormatError(f"{where}: function {name!r} has the entry point "
                                            f"{entry!r}, but the executable has no function "
                                            f"{missing!r}")
            if code.fn.params != fn.fn.params:
                raise ExecutableFormatError(
                    f"{where}: the entry point {entry!r} of {name!r} takes "
                    f"({', '.join(map(str, code.fn.params))}), not {name!r}'s parameters "
                    f"({', '.join(map(str, fn.fn.params))})")
            out[name] = code.checked_as(fn)
        return out

    def _lookup(self, name: str) -> _Code:
        code = self._code.get(name)
        if code is None:
            close = difflib.get_close_matches(name, list(self._code), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            known = ", ".join(self._code) or "none"
            raise VMFunctionNotFoundError(
                f"the executable has no function {name!r} (functions: {known}){hint}", name
            )
        return code

    @staticmethod
    def _positional(code: _Code, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Sequence[Any]:
        if not kwargs:
            return args
        names = [p.name for p in code.fn.params]
        out = list(args) + [None] * (len(names) - len(args))
        filled = [True] * len(args) + [False] * (len(names) - len(args))
        for key, value in kwargs.items():
            if key not in names:
                raise VMInputError(f"{code.binder.signature} has no parameter {key!r}", code.name)
            i = names.index(key)
            if filled[i]:
                raise VMInputError(
                    f"{code.binder.signature} got parameter {key!r} twice", code.name
                )
            out[i], filled[i] = value, True
        missing = [n for n, f in zip(names, filled) if not f]
        if missing:
            raise VMInputError(
                f"{code.binder.signature} is missing argument(s) {', '.join(map(repr, missing))}",
                code.name,
            )
        return out

    def _decode(self, timed: bool = False) -> dict[str, _Code]:
        exe = self.executable
        ranges = exe.attrs.get("dim_ranges")
        ranges = ranges if isinstance(ranges, dict) else None
        codes = {name: _Code(fn, ranges) for name, fn in exe.functions.items()}
        for code in codes.values():
            for pc, ins in enumerate(code.fn.instructions):
                code.instrs.append(self._decode_instr(ins, code, pc, codes, timed))
        return codes

    def _decode_instr(
        self, ins: Instr, code: _Code, pc: int, codes: dict[str, _Code], timed: bool
    ) -> tuple[Any, ...]:
        if isinstance(ins, Call):
            getter = _args_getter(ins.args, self._constants)
            callee = codes.get(ins.func)
            if callee is not None:
                self._check_vm_call(ins, code, pc, callee)
                return (_VMCALL, callee, getter, ins.dst)
            fn = self._resolve(ins, code, pc)
            if isinstance(fn, NativeFunction) and not ins.kwargs and any(
                    isinstance(a, Const) for a in ins.args):
                # constants are checked and their addresses taken once, not per call
                fixed = {i: self._constants[a.index] for i, a in enumerate(ins.args)
                         if isinstance(a, Const)}
                if len(fixed) + sum(isinstance(a, Reg) for a in ins.args) == len(ins.args):
                    fast = fn.with_fixed(fixed)
                    if fast is not fn:
                        fn = fast
                        regs_only = [a for a in ins.args if isinstance(a, Reg)]
                        getter = _args_getter(regs_only, self._constants)
            if timed:
                record = self._records.setdefault((code.name, pc), [0.0, 0.0])
                fn = _timed(fn, record)
            if not ins.kwargs:
                return (_CALL, fn, getter, ins.dst)
            kw, kwregs = _decode_kwargs(ins.kwargs, self._constants)
            return (_CALL_KW, fn, getter, ins.dst, kw, kwregs)
        if isinstance(ins, AllocTensor):
            dtype = np.dtype(ins.dtype)
            spec = tuple(ins.shape)
            static = None if any(isinstance(d, str) for d in spec) else spec
            if isinstance(ins.offset, str):   # a planned offset of a symbolic size
                static = None
            nbytes = None if static is None else dtype.itemsize * math.prod(static)
            return (_ALLOC_TENSOR, ins.dst, static, spec, dtype, ins.storage, ins.offset, nbytes)
        if isinstance(ins, AllocStorage):
            pool: list[np.ndarray] = []
            if isinstance(ins.nbytes, str):   # its size known per call: any buffer as large
                code.storages.append((ins.dst, None, pool))
                return (_ALLOC_STORAGE_SYM, ins.dst, ins.nbytes, pool)
            code.storages.append((ins.dst, ins.nbytes, pool))
            return (_ALLOC_STORAGE, ins.dst, ins.nbytes, pool)
        if isinstance(ins, Ret):
            return (_RET, ins.src)
        if isinstance(ins, If):
            return (_IF, ins.cond, ins.else_target)
        if isinstance(ins, Goto):
            return (_GOTO, ins.target)
        assert isinstance(ins, Move)
        return (_MOVE, ins.dst, ins.src)

    @staticmethod
    def _check_vm_call(ins: Call, code: _Code, pc: int, callee: _Code) -> None:
        problem = None
        if ins.kwargs:
            problem = f"VM function {callee.name!r} takes no keyword arguments"
        elif len(ins.args) != len(callee.fn.params):
            problem = (
                f"VM function {callee.binder.signature} takes {len(callee.fn.params)} "
                f"argument(s), the call passes {len(ins.args)}"
            )
        if problem:
            raise VMError(
                f"VM function {code.name!r}, pc {pc} (`{ins}`): {problem}", code.name, pc, str(ins)
            )

    def _resolve(self, ins: Call, code: _Code, pc: int) -> Callable[..., Any]:
        if has_func(ins.func):
            return get_func(ins.func)
        external = resolve_external(self.executable, ins.func)
        if external is not None:
            return external
        native = load_native_func(self.executable, ins.func)
        if native is not None:
            return native
        close = close_func_names(ins.func, list(self.executable.functions))
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        where = "not a VM function of the executable, not a registered packed function"
        if self.executable.external:
            where += ", not a function of its external modules"
        if self.executable.libs:
            where += ", and no native loader provides it from the executable's libraries"
        raise VMError(
            f"VM function {code.name!r}, pc {pc} (`{ins}`): unknown function "
            f"{ins.func!r}: {where}{hint}",
            code.name,
            pc,
            str(ins),
        )

    # ---------------------------------------------------------------- interpreter
    def _run(self, code: _Code, args: Sequence[Any]) -> Any:
        regs, syms = code.binder.bind(args)
        instrs = code.instrs
        allowed: Any = _UNREAD   # the max_tensor_bytes limit, read when a tensor needs it
        stack: list[tuple[_Code, list[tuple[Any, ...]], list[Any], dict[str, int], int]] = []
        pc = 0
        try:
            while True:
                ins = instrs[pc]
                op = ins[0]
                if op == _CALL:
                    _, fn, getter, dst = ins
                    result = fn(*getter(regs))
                    if dst is not None:
                        regs[dst] = result
                    pc += 1
                elif op == _CALL_KW:
                    _, fn, getter, dst, kw, kwregs = ins
                    if kwregs:
                        kw = dict(kw)
                        for key, r in kwregs:
                            kw[key] = regs[r]
                    result = fn(*getter(regs), **kw)
                    if dst is not None:
                        regs[dst] = result
                    pc += 1
                elif op == _ALLOC_TENSOR:
                    _, dst, shape, spec, dtype, storage, offset, nbytes = ins
                    if shape is None:
                        shape = tuple([syms[d] if d.__class__ is str and d in syms
                                       else size_value(d, syms) for d in spec])
                        nbytes = dtype.itemsize * math.prod(shape)
                        if type(offset) is str:
                            offset = size_value(offset, syms)
                        if allowed is _UNREAD:   # read once per call, not per tensor
                            allowed = limit_value("max_tensor_bytes")
                        if allowed is not None and nbytes > allowed:
                            raise LimitExceeded("max_tensor_bytes", nbytes, allowed,
                                                f"a tensor of shape {_fmt_shape(shape)} "
                                                f"{dtype} needs")
                    if storage is None:
                        regs[dst] = np.empty(shape, dtype)
                    else:
                        buf = regs[storage]
                        end = offset + nbytes
                        if (
                            not isinstance(buf, np.ndarray)
                            or buf.dtype is not _UINT8
                            or buf.ndim != 1
                            or end > buf.shape[0]
                        ):
                            raise ValueError(_storage_problem(buf, offset, nbytes))
                        regs[dst] = buf[offset:end].view(dtype).reshape(shape)
                    pc += 1
                elif op == _ALLOC_STORAGE:
                    try:  # (not `if pool`: another thread may take the last one between)
                        regs[ins[1]] = ins[3].pop()
                    except IndexError:
                        regs[ins[1]] = aligned_storage(ins[2])
                    pc += 1
                elif op == _ALLOC_STORAGE_SYM:
                    regs[ins[1]] = _symbolic_storage(size_value(ins[2], syms), ins[3])
                    pc += 1
                elif op == _RET:
                    value = regs[ins[1]]
                    if code.storages:
                        _release_storages(code, regs, value)
                    if not stack:
                        return value
                    code, instrs, regs, syms, pc = stack.pop()
                    dst = instrs[pc][3]
                    if dst is not None:
                        regs[dst] = value
                    pc += 1
                elif op == _VMCALL:
                    _, callee, getter, dst = ins
                    if len(stack) >= MAX_CALL_DEPTH:
                        raise VMCallDepthError(
                            f"VM call depth exceeds {MAX_CALL_DEPTH} (a function that calls "
                            "itself without end?)", code.name, pc)
                    new_regs, new_syms = callee.binder.bind(getter(regs))
                    stack.append((code, instrs, regs, syms, pc))
                    code, instrs, regs, syms, pc = callee, callee.instrs, new_regs, new_syms, 0
                elif op == _IF:
                    pc = pc + 1 if regs[ins[1]] else ins[2]
                elif op == _GOTO:
                    pc = ins[1]
                else:  # _MOVE
                    regs[ins[1]] = regs[ins[2]]
                    pc += 1
        except Exception as e:
            raise _located_error(e, code, pc, stack, regs) from e


def _symbolic_storage(nbytes: int, pool: list[np.ndarray]) -> np.ndarray:
    """A storage of at least ``nbytes`` bytes for a memory plan of symbolic sizes: a
    pooled buffer when one is large enough (the sizes of the last call, or larger),
    else a new one (a larger batch than before)."""
    allowed = limit_value("max_tensor_bytes")
    if allowed is not None and nbytes > allowed:
        raise LimitExceeded("max_tensor_bytes", nbytes, allowed, "the memory plan's storage "
                            "for these sizes needs")
    try:
        buf = pool.pop()
    except IndexError:
        return aligned_storage(nbytes)
    return buf if buf.shape[0] >= nbytes else aligned_storage(nbytes)


def _storage_problem(buf: Any, offset: int, nbytes: int) -> str:
    if not isinstance(buf, np.ndarray) or buf.dtype != _UINT8 or buf.ndim != 1:
        desc = (
            type(buf).__name__
            if not isinstance(buf, np.ndarray)
            else f"a {buf.dtype} array of shape {buf.shape}"
        )
        return f"the storage register holds {desc}, not a storage buffer"
    return (
        f"tensor of {nbytes} bytes at offset {offset} does not fit in a storage of "
        f"{buf.shape[0]} bytes"
    )


def _describe_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"{dtype_text(v.dtype)} {_fmt_shape(v.shape)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_describe_value(x) for x in v[:4]) + (", ..." if len(v) > 4
                                                                     else "") + ")"
    text = repr(v)
    return text if len(text) <= 40 else type(v).__name__


def _located_error(
    e: Exception, code: _Code, pc: int, stack: list[tuple[Any, ...]], regs: list[Any]
) -> VMError:
    """The error of instruction ``pc`` of ``code``: where (the instruction, the chain of
    callers) and, for a call, what it was given (the shapes and dtypes of its register
    arguments: a kernel that refuses its arguments usually means a size bound at run time
    disagrees with one the model assumed when it was built)."""
    instr = code.fn.instructions[pc]
    ins = str(instr)
    lines = [f"VM function {code.name!r}, pc {pc} (`{ins}`): {type(e).__name__}: {e}"]
    if isinstance(instr, Call) and not isinstance(e, VMError):
        given = [f"%{a.index} = {_describe_value(regs[a.index])}" for a in instr.args
                 if isinstance(a, Reg) and a.index < len(regs)]
        if given:
            lines.append(f"  its arguments: {'; '.join(given)}")
    frames = list(reversed(stack))
    if len(frames) > 2 * _SHOWN_CALLERS:  # deep recursion: the innermost and outermost
        skipped = len(frames) - 2 * _SHOWN_CALLERS
        frames = [*frames[:_SHOWN_CALLERS], None, *frames[-_SHOWN_CALLERS:]]
    for frame in frames:
        if frame is None:
            lines.append(f"  ... {skipped} more callers ...")
            continue
        caller, _instrs, _regs, _syms, call_pc = frame
        lines.append(
            f"  called from {caller.name!r}, pc {call_pc} (`{caller.fn.instructions[call_pc]}`)"
        )
    cls = type(e) if isinstance(e, VMError) else VMError  # keeps VMCallDepthError, ...
    return cls("\n".join(lines), code.name, pc, ins)


_SHOWN_CALLERS = 5
"""Callers listed at each end of the chain of a located error."""
