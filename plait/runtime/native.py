"""Native libraries: load a shared library built by the C code generator (from a path or
from the bytes an executable embeds) and call its functions on numpy arrays.

numpy and ctypes only: a built model runs on a machine without a compiler.

Every library carries its own ABI description: it exports
``const char* plait_manifest(void)`` returning JSON (data only)::

    {"abi": 1, "functions": [{"name": "add", "symbol": "plait_k_add",
      "params": [{"name": "a", "shape": [4, "n"], "dtype": "float32"}, ...],
      "num_outputs": 1, "size_vars": ["n"]}]}

and, for every function, ``int32_t <symbol>(void* const* args, const int64_t* sizes)``:
``args[i]`` is the data pointer of parameter ``i`` (a C-contiguous array of the declared
dtype), ``sizes[j]`` the value of size variable ``j``; the result is 0 on success.

A library also exports ``const char* plait_isa_report(void)`` (JSON: the CPU's
instruction sets, the copy of each kernel family it runs; ``plait_isa.c``) and
``const char* plait_isa_force(const char* isa)``; a ``PLAIT_ISA`` the library refused
(an unknown instruction set, or one the CPU lacks) fails the load
(:class:`NativeLoadError`).

Importing this module registers :func:`native_loader` with the VM, so a ``Call``
instruction naming a function of a library in ``exe.libs`` runs it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import tempfile
import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

try:
    import fcntl as fcntl_mod
except ImportError:  # pragma: no cover - not POSIX
    fcntl_mod = None  # type: ignore[assignment]

from plait.errors import PlaitError
from plait.runtime.elf import elf_problem, foreign_machine_problem
from plait.runtime.packed import register_native_loader
from plait.runtime.trust import cache_root
from plait.runtime.unload import LibraryHandle, library_stats

if TYPE_CHECKING:
    from plait.runtime.executable import Executable

ABI_VERSION = 1
"""Version of the manifest format and calling convention."""
MANIFEST_SYMBOL = "plait_manifest"
ISA_REPORT_SYMBOL = "plait_isa_report"
POOL_REPORT_SYMBOL = "plait_pool_report"
ISA_FORCE_SYMBOL = "plait_isa_force"
STATUS_MESSAGES = {
    1: "out of memory while allocating a scratch buffer",
    2: "an index is out of range (take, gather, gather_elements...: numpy raises "
       "IndexError for it; build with Target('c', out_of_range_indices='clamp') to clamp "
       "indices instead)",
}

if sys.platform == "win32":
    LIB_SUFFIX = ".dll"
elif sys.platform == "darwin":
    LIB_SUFFIX = ".dylib"
else:
    LIB_SUFFIX = ".so"

_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ")


class NativeLoadError(PlaitError, RuntimeError):
    """A native library could not be loaded or has no valid manifest."""


class NativeCallError(PlaitError, RuntimeError):
    """A native function returned a non-zero status."""


@dataclass(frozen=True)
class ParamSpec:
    """One buffer parameter of a native function."""

    name: str
    shape: tuple[int | str, ...]
    dtype: np.dtype
    is_output: bool

    def text(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.name}: ({dims}{',' if len(self.shape) == 1 else ''}) {self.dtype.name}"


_POINTER_CODE = next(c for c in "QLI" if array(c).itemsize == ctypes.sizeof(ctypes.c_void_p))
"""The ``array`` type code of a pointer-sized unsigned integer."""


def dtype_text(dtype: np.dtype) -> str:
    """A dtype's name, with its byte order when that is not this machine's (numpy names
    ``>f4`` and ``<f4`` both ``float32``)."""
    if dtype.isnative:
        return dtype.name
    return f"{dtype.name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"


def to_native_order(a: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``a`` converted to ``dtype`` when it differs from it only in byte order (a
    big-endian array on a little-endian machine: the same values, swapped), else None."""
    if not a.dtype.isnative and a.dtype.newbyteorder("=") == dtype:
        return a.astype(dtype)
    return None


def _data_pointer(a: np.ndarray) -> int:
    """The address of ``a``'s first element (fast path through the buffer protocol)."""
    if a.flags.writeable and a.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data   # (read-only: 1 us, where __array_interface__ took 2.6)


class NativeFunction:
    """A function of a native library, callable on numpy arrays.

    ``f(*inputs, *outputs)`` writes the outputs in place and returns None
    (destination-passing style, as the VM calls it); ``f(*inputs)`` allocates the outputs
    and returns them (one array, or a tuple when there are several).  Size variables are
    inferred from the arrays' shapes; dtypes, ranks, static dimensions and the agreement
    of symbolic dimensions are checked, and every mismatch names the parameter.
    """

    def __init__(self, name: str, cfunc: Any, spec: dict[str, Any], module: NativeModule):
        self.name = name
        self.module = module
        """The library: a function keeps it loaded (its module holds its functions only
        weakly, so the library is unmapped as soon as the last one is dropped)."""
        self._cfunc = cfunc
        self.params = tuple(
            ParamSpec(p["name"], tuple(p["shape"]), np.dtype(p["dtype"]),
                      i >= len(spec["params"]) - spec["num_outputs"])
            for i, p in enumerate(spec["params"])
        )
        self.num_outputs = int(spec["num_outputs"])
        self.num_inputs = len(self.params) - self.num_outputs
        self.size_vars = tuple(spec["size_vars"])
        self._size_index = {s: k for k, s in enumerate(self.size_vars)}
        self._nargs = len(self.params)
        self._argv_type = ctypes.c_void_p * max(1, self._nargs)
        self._sizes_type = ctypes.c_int64 * max(1, len(self.size_vars))
        # (dtype, shape when fully static, is_output) for the fast path of __call__
        self._fast = tuple(
            (p.dtype, p.shape if all(isinstance(d, int) for d in p.shape) else None,
             p.is_output)
            for p in self.params
        )
        # (rank, ((axis, dim or ~size_index), ...)) for the symbolic shapes
        self._dims = tuple(
            (len(p.shape), tuple((ax, d if isinstance(d, int) else ~self._size_index[d])
                                 for ax, d in enumerate(p.shape)))
            for p in self.params
        )
        # a timed entry point (plait/codegen/c/entry.py): its steps' callees and the
        # function returning the calling thread's clock readings of its last call
        self.steps: tuple[str, ...] = tuple(spec.get("steps", ()))
        self._step_times = None
        if spec.get("step_times"):
            getter = module.handle.function(spec["step_times"],
                                            ctypes.POINTER(ctypes.c_double))
            if getter is None:
                raise NativeLoadError(
                    f"native library {module.path}: the manifest lists "
                    f"{spec['step_times']!r}, which the library does not export")
            self._step_times = getter

    def step_times(self) -> list[float]:
        """The seconds each step of this timed entry point took in its last call on the
        calling thread (in the order of :attr:`steps`).  A function that is not a timed
        entry point raises ValueError naming the fix."""
        if self._step_times is None:
            raise ValueError(
                f"native function {self.name!r} is not a timed entry point: build with "
                "Target('c', step_timing=True) to time the steps of an entry point")
        clock = self._step_times()
        return [clock[i + 1] - clock[i] for i in range(len(self.steps))]

    @property
    def entry_address(self) -> int:
        """The address of the C entry point the VM calls, ``int f(void** argv, int64_t*
        sizes)`` (argv: the buffers in parameter order; sizes: the size variables), for
        callers outside Python such as a benchmark's C loop.  Valid while this function
        object lives: the library is unmapped once nothing holds its functions."""
        return int(ctypes.cast(self._cfunc, ctypes.c_void_p).value or 0)

    @property
    def signature(self) -> str:
        """``name(a: (4, n) float32, ...) -> (out: ...)``."""
        ins = ", ".join(p.text() for p in self.params[: self.num_inputs])
        outs = ", ".join(p.text() for p in self.params[self.num_inputs :])
        return f"{self.name}({ins}) -> ({outs})"

    def _fail(self, i: int, message: str, exc: type[Exception] = ValueError) -> None:
        p = self.params[i]
        raise exc(f"native function {self.name!r}: argument {i} ({p.name!r}, "
                  f"{p.text().split(': ', 1)[1]}): {message}")

    def _check_shape(self, i: int, a: np.ndarray, sizes: list[int | None]) -> None:
        p = self.params[i]
        if a.ndim != len(p.shape):
            self._fail(i, f"rank is {a.ndim} (shape {a.shape}), expected {len(p.shape)}")
        for axis, (got, want) in enumerate(zip(a.shape, p.shape)):
            if isinstance(want, int):
                if got != want:
                    self._fail(i, f"dimension {axis} is {got}, expected {want}")
            else:
                k = self._size_index[want]
                bound = sizes[k]
                if bound is None:
                    sizes[k] = got
                elif bound != got:
                    self._fail(i, f"dimension {axis} is {got}, but {want} = {bound} from an "
                                  "earlier argument")

    def _prepare(self, i: int, a: Any) -> np.ndarray:
        """``a`` as an array fit for parameter ``i`` (slow path: conversions, errors)."""
        p = self.params[i]
        if not isinstance(a, np.ndarray):
            if p.is_output:
                self._fail(i, f"an output must be a numpy array, got {type(a).__name__}",
                           TypeError)
            a = np.asarray(a, dtype=p.dtype)
        if a.dtype != p.dtype:
            swapped = None if p.is_output else to_native_order(a, p.dtype)
            if swapped is None:
                self._fail(i, f"dtype is {dtype_text(a.dtype)}, expected "
                              f"{dtype_text(p.dtype)}", TypeError)
            a = swapped
        if not a.flags.c_contiguous:
            if p.is_output:
                self._fail(i, "an output must be C-contiguous")
            a = np.ascontiguousarray(a)
        if p.is_output and not a.flags.writeable:
            self._fail(i, "an output must be writeable")
        return a

    def __call__(self, *args: Any) -> Any:
        n = len(args)
        allocate = n == self.num_inputs and self.num_outputs > 0
        if n != self._nargs and not allocate:
            raise TypeError(
                f"native function {self.signature} takes {self.num_inputs} input(s) and "
                f"{self.num_outputs} output(s); called with {n} argument(s)"
            )
        sizes: list[int | None] = [None] * len(self.size_vars)
        ptrs: list[int] = []
        arrays: list[np.ndarray] = []
        for i, a in enumerate(args):
            dtype, static_shape, is_output = self._fast[i]
            if not (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
                    and (not is_output or a.flags.writeable)):
                a = self._prepare(i, a)
            if static_shape is not None:
                if a.shape != static_shape:
                    self._check_shape(i, a, sizes)
            else:
                shp = a.shape
                ndim, dims = self._dims[i]
                if len(shp) != ndim:
                    self._check_shape(i, a, sizes)
                for axis, want in dims:
                    got = shp[axis]
                    if want >= 0:
                        if got != want:
                            self._check_shape(i, a, sizes)
                    else:
                        bound = sizes[~want]
                        if bound is None:
                            sizes[~want] = got
                        elif bound != got:
                            self._check_shape(i, a, sizes)
            arrays.append(a)  # keeps converted copies alive during the call
            ptrs.append(_data_pointer(a))
        outs: list[np.ndarray] = []
        if allocate:
            for p in self.params[self.num_inputs :]:
                shape = []
                for d in p.shape:
                    if isinstance(d, str):
                        v = sizes[self._size_index[d]]
                        if v is None:
                            raise TypeError(
                                f"native function {self.signature}: size {d!r} of output "
                                f"{p.name!r} is not determined by the inputs; pass the outputs"
                            )
                        shape.append(v)
                    else:
                        shape.append(d)
                out = np.empty(tuple(shape), p.dtype)
                outs.append(out)
                ptrs.append(_data_pointer(out))
        status = self._cfunc(self._argv_type(*ptrs),
                             self._sizes_type(*[s or 0 for s in sizes]))
        if status != 0:
            self._raise_status(status)
        if allocate:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return None

    def with_fixed(self, fixed: dict[int, np.ndarray]) -> Any:
        """``f(*rest)`` calling this function with the arrays of ``fixed`` (argument
        position -> array, e.g. a model's constants) at their positions and ``rest`` in
        the others, all buffers given (destination-passing style).

        The fixed arrays are checked and their addresses taken once, here; each call
        checks only the others' dtype, shape and layout (and binds the size variables
        from their shapes), so it costs a few microseconds less per fixed argument than
        :meth:`__call__` (for which a wrong argument falls back, so errors read the
        same).  Fixed arguments that need a conversion, or whose parameter has a
        symbolic shape, get :meth:`__call__` back unchanged."""
        bad = [i for i in fixed if not 0 <= i < self.num_inputs]
        if bad:
            raise ValueError(f"native function {self.signature}: only inputs can be fixed, "
                             f"positions 0 to {self.num_inputs - 1}; got {bad}")
        if not fixed or any(
                not (type(a) is np.ndarray and a.dtype == self._fast[i][0]
                     and a.shape == self._fast[i][1] and a.flags.c_contiguous)
                for i, a in fixed.items()):
            return self
        n = self._nargs
        template = array(_POINTER_CODE, [0] * n)
        kept = dict(fixed)   # (the closure keeps the arrays alive)
        for i, a in kept.items():
            template[i] = _data_pointer(a)
        slots = tuple((i, *self._fast[i], *self._dims[i]) for i in range(n) if i not in kept)
        cfunc, slow = self._cfunc, self

        def fallback(rest: tuple[Any, ...]) -> Any:
            full: list[Any] = list(template)
            for (j, *_), b in zip(slots, rest):
                full[j] = b
            for j, b in kept.items():
                full[j] = b
            return slow(*full)   # converts, or raises the error naming the argument

        if not self.size_vars:
            sizes = self._sizes_type()

            def call(*rest: Any) -> None:
                # argv: a copy of the template (a memcpy, where a ctypes array of a
                # model's hundred constants took 10 us to build), one per call:
                # thread-safe
                ptrs = template[:]
                for (i, dtype, shape, is_output, _, _), a in zip(slots, rest):
                    if not (type(a) is np.ndarray and a.dtype == dtype and a.shape == shape
                            and a.flags.c_contiguous
                            and (not is_output or a.flags.writeable)):
                        return fallback(rest)
                    ptrs[i] = _data_pointer(a)
                status = cfunc(ptrs.buffer_info()[0], sizes)
                if status != 0:
                    slow._raise_status(status)
                return None

            return call
        num_sizes = len(self.size_vars)

        def call_sized(*rest: Any) -> None:
            # as call, and the size variables bound from the shapes of ``rest``
            ptrs = template[:]
            bound: list[int | None] = [None] * num_sizes
            for (i, dtype, shape, is_output, ndim, dims), a in zip(slots, rest):
                if not (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
                        and (not is_output or a.flags.writeable)):
                    return fallback(rest)
                shp = a.shape
                if shape is not None:
                    if shp != shape:
                        return fallback(rest)
                else:
                    if len(shp) != ndim:
                        return fallback(rest)
                    for axis, want in dims:
                        got = shp[axis]
                        if want >= 0:
                            if got != want:
                                return fallback(rest)
                        elif bound[~want] is None:
                            bound[~want] = got
                        elif bound[~want] != got:
                            return fallback(rest)
                ptrs[i] = _data_pointer(a)
            sizes = array("q", [s or 0 for s in bound])
            status = cfunc(ptrs.buffer_info()[0], sizes.buffer_info()[0])
            if status != 0:
                slow._raise_status(status)
            return None

        return call_sized

    def _raise_status(self, status: int) -> None:
        why = STATUS_MESSAGES.get(status, "see the function's documentation")
        raise NativeCallError(f"native function {self.name!r} failed with status {status}: "
                              f"{why}")

    def __repr__(self) -> str:
        return f"<NativeFunction {self.signature}>"


class _Functions(Mapping[str, "NativeFunction"]):
    """A library's functions by name, made when asked for and held weakly: a function
    holds its module, and a module holding its functions too would make a cycle that
    leaves the library mapped until the cycle collector runs."""

    def __init__(self, module: NativeModule, specs: dict[str, dict[str, Any]]) -> None:
        self._module = weakref.ref(module)
        self._specs = specs
        self._made: weakref.WeakValueDictionary[str, NativeFunction] = \
            weakref.WeakValueDictionary()

    def __getitem__(self, name: str) -> NativeFunction:
        fn = self._made.get(name)
        if fn is None:
            module = self._module()
            assert module is not None, "the functions of a module outlived it"
            fn = self._made[name] = module._make(self._specs[name])
        return fn

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs


class NativeModule:
    """A loaded native library: its manifest and its functions by name.

    The library stays mapped while this object or one of its functions lives; then it
    is unmapped (:mod:`plait.runtime.unload`)."""

    def __init__(self, path: str, handle: LibraryHandle, manifest: dict[str, Any]) -> None:
        self.path = path
        self.handle = handle
        self.manifest = manifest
        specs = {spec["name"]: spec for spec in manifest["functions"]}
        for spec in specs.values():
            self._make(spec)   # every symbol the manifest names must be there
        self.functions: Mapping[str, NativeFunction] = _Functions(self, specs)

    def _make(self, spec: dict[str, Any]) -> NativeFunction:
        cfunc = self.handle.function(spec["symbol"], ctypes.c_int32, ctypes.c_void_p,
                                     ctypes.c_void_p)
        if cfunc is None:
            raise NativeLoadError(
                f"native library {self.path}: the manifest lists {spec['symbol']!r}, which "
                "the library does not export")
        return NativeFunction(spec["name"], cfunc, spec, self)

    def check_isa(self) -> None:
        """Raise :class:`NativeLoadError` when the library refused the ``PLAIT_ISA`` it
        was loaded under (an unknown instruction set, or one the CPU lacks: its families
        then run their best supported copies, never one the CPU cannot run)."""
        report = self.isa_report()
        if report is not None and report.get("error"):
            raise NativeLoadError(f"native library {self.path}: {report['error']}")

    def isa_report(self) -> dict[str, Any] | None:
        """What the library's kernel families run (``plait_isa_report``, see
        ``plait_isa.c``): ``arch``, ``cpu`` (feature: 0/1), ``supported``, ``allowed``
        (instruction sets, best first), ``cap``/``source`` (the PLAIT_ISA cap in force and
        where it came from), ``error`` and ``families`` (``name``, ``built``,
        ``chosen``); None for a library without it (built by an older plait)."""
        return self._json_report(ISA_REPORT_SYMBOL)

    def _json_report(self, symbol: str) -> dict[str, Any] | None:
        """The JSON text returned by the library's function ``symbol`` (no arguments),
        parsed; None when the library lacks it."""
        fn = self.handle.function(symbol, ctypes.c_char_p)
        if fn is None:
            return None
        report: dict[str, Any] = json.loads(fn().decode("utf-8", "replace"))
        return report

    def pool_report(self) -> dict[str, Any] | None:
        """The counts of the library's thread pool (``plait_pool_report``, see
        ``plait_threads.c``): ``threads`` (the most a call uses), ``workers`` (running
        now), ``parallel`` (calls run on the pool), ``serial`` (calls run on the calling
        thread alone because a worker was late shortly before), ``late`` (calls whose
        caller waited long for a worker that had lost its CPU), ``wait_ns`` and
        ``late_ns`` (the time callers waited for workers, in all and in late calls) and
        ``backoff_ns`` (the serial period the next late call starts); None for a library
        without it (built by an older plait)."""
        return self._json_report(POOL_REPORT_SYMBOL)

    def force_isa(self, isa: str | None) -> None:
        """Make every kernel family of the library run its best copy allowed by the
        instruction set ``isa`` (as ``PLAIT_ISA=isa`` would when loading; None: as the
        environment says now).  ``ValueError`` saying why when the CPU lacks ``isa`` or
        it is unknown.  Not while another thread calls into the library."""
        fn = self.handle.function(ISA_FORCE_SYMBOL, ctypes.c_char_p, ctypes.c_char_p)
        if fn is None:
            raise ValueError(f"native library {self.path} has no ISA variants (built by an "
                             "older plait); rebuild it")
        err = fn(isa.encode() if isa else None)
        if err:
            raise ValueError(err.decode("utf-8", "replace"))

    @property
    def names(self) -> list[str]:
        return list(self.functions)

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def get(self, name: str) -> NativeFunction:
        """The function ``name``; ``KeyError`` naming the functions there are."""
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"native library has no function {name!r}; it has "
                           f"{', '.join(self.functions) or 'none'}") from None

    def __repr__(self) -> str:
        return f"<NativeModule {self.path} functions={self.names}>"


def _read_manifest(handle: LibraryHandle, path: str) -> dict[str, Any]:
    fn = handle.function(MANIFEST_SYMBOL, ctypes.c_char_p)
    if fn is None:
        raise NativeLoadError(f"{path} is not a plait native library (it does not export "
                              f"{MANIFEST_SYMBOL})")
    raw = fn()
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise NativeLoadError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("abi") != ABI_VERSION:
        raise NativeLoadError(
            f"{path}: manifest ABI {manifest.get('abi') if isinstance(manifest, dict) else '?'}"
            f" is not the supported version {ABI_VERSION}; rebuild the library"
        )
    return manifest


_WARNED_THREADS: set[str] = set()


def _check_thread_setting() -> None:
    """Native libraries read ``PLAIT_NUM_THREADS`` on their first parallel call and
    ignore a value that is not a positive integer (then ``OMP_NUM_THREADS``, else the
    CPUs available, decide): warn about such a value, once per value."""
    v = os.environ.get("PLAIT_NUM_THREADS")
    if v is None or v in _WARNED_THREADS or (v.strip().isdigit() and int(v) > 0):
        return
    _WARNED_THREADS.add(v)
    import warnings

    warnings.warn(f"PLAIT_NUM_THREADS={v!r} is not a positive integer: native libraries "
                  "ignore it and use OMP_NUM_THREADS or the CPUs available; set it to a "
                  "thread count such as 2", RuntimeWarning, stacklevel=3)


def _dlopen(path: str, fd: int | None = None) -> LibraryHandle:
    _check_thread_setting()
    try:
        return LibraryHandle(path, fd)
    except OSError as exc:
        msg = str(exc)
        try:
            with open(path, "rb") as f:
                foreign = foreign_machine_problem(f.read(64))
        except OSError:
            foreign = None
        if foreign:   # the loader says "No such file or directory" for another machine's
            raise NativeLoadError(f"cannot load native library {path}: {foreign}") from None
        hint = ""
        if "gomp" in msg or "omp" in msg:
            hint = (" The library was built with OpenMP (by plait before its own thread "
                    "pool) and needs its runtime (libgomp); install it (e.g. `apt install "
                    "libgomp1`) or rebuild it with this plait.")
        raise NativeLoadError(f"cannot load native library {path}: {msg}.{hint}") from None


_LOADED: weakref.WeakValueDictionary[str, NativeModule] = weakref.WeakValueDictionary()
"""The libraries loaded now, by path or content: loading one again while it is in use
maps nothing new."""
_RECENT: OrderedDict[str, NativeModule] = OrderedDict()
"""The last :data:`KEEP_RECENT` libraries loaded, kept mapped after their last user is
gone (a VM made again for the same model finds its library)."""
KEEP_RECENT = 4
"""How many libraries no longer in use stay mapped (the rest are unmapped: see
:mod:`plait.runtime.unload`)."""
_LOCK = threading.RLock()   # reentrant: dropping a library may run its finalizer


def _remember(key: str, mod: NativeModule) -> NativeModule:
    """Record ``mod`` under ``key`` as loaded and most recently used (under _LOCK)."""
    _LOADED[key] = mod
    _RECENT[key] = mod
    _RECENT.move_to_end(key)
    while len(_RECENT) > KEEP_RECENT:
        _RECENT.popitem(last=False)
    return mod


def _cached(key: str) -> NativeModule | None:
    """The loaded library under ``key``, marked most recently used (under _LOCK)."""
    mod = _LOADED.get(key)
    if mod is not None:
        _remember(key, mod)
    return mod


def release_unused_libraries() -> None:
    """Unmap now every native library that nothing uses any more (also the last
    :data:`KEEP_RECENT`, kept for reuse): for a server that has dropped its models.
    Libraries of live VMs, executables' functions and modules stay."""
    import gc

    with _LOCK:
        _RECENT.clear()
    gc.collect()


def load_library(path: str | os.PathLike[str], *, check_isa: bool = True) -> NativeModule:
    """Load the native library at ``path`` (once while it is in use; unmapped when
    nothing uses it); ``check_isa``: raise when it refused ``PLAIT_ISA``
    (:meth:`NativeModule.check_isa`)."""
    key = "path:" + os.path.realpath(path)
    with _LOCK:
        mod = _cached(key)
        if mod is None:
            handle = _dlopen(str(path))
            mod = _remember(key, NativeModule(str(path), handle,
                                              _read_manifest(handle, str(path))))
    if check_isa:
        mod.check_isa()
    return mod


def loaded_libraries() -> list[NativeModule]:
    """The native libraries this process has loaded and still holds (each once)."""
    with _LOCK:
        return list(dict.fromkeys(_LOADED.values()))


def is_native_library(data: bytes) -> bool:
    """True when ``data`` starts like a shared library (ELF, Mach-O or PE)."""
    return any(data.startswith(m) for m in _MAGICS)


def _scratch_dirs() -> list[str]:
    return [tempfile.gettempdir(), str(cache_root() / "loaded")]


def _dir_problem(message: str) -> bool:
    """True when a load failure looks caused by the directory (e.g. mounted noexec)."""
    return any(w in message for w in ("map segment", "ermission", "Operation not permitted"))


def _check_bytes(data: bytes, digest: str, expected_sha256: str | None, what: str) -> None:
    if not is_native_library(data):
        raise NativeLoadError(f"{what}: the bytes are not a shared library (no ELF, Mach-O or "
                              "PE header)")
    if expected_sha256 is not None and digest != expected_sha256:
        raise NativeLoadError(
            f"{what}: refusing to map it: its SHA-256 is {digest[:16]}..., the executable's "
            f"manifest records {expected_sha256[:16]}... (the library was replaced or changed "
            "after the file was loaded)"
        )
    if data.startswith(b"\x7fELF"):
        problem = elf_problem(data) or foreign_machine_problem(data)
        if problem:
            raise NativeLoadError(f"{what}: refusing to map it: {problem}")


_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def _load_sealed(data: bytes, digest: str, label: str) -> NativeModule | None:
    """Load ``data`` from a sealed in-memory file (Linux ``memfd``): nothing on disk
    that another process could swap between the check and the mapping, and the seals
    forbid any change once written; the bytes read back must still have ``digest``.
    None where memory files are not available (then a private temporary file is used)."""
    create = getattr(os, "memfd_create", None)
    if create is None or fcntl_mod is None or not all(
            hasattr(fcntl_mod, n) for n in ("F_ADD_SEALS", *_SEALS)):
        return None
    try:
        fd = create(f"plait-{digest[:12]}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        import gc

        gc.collect()   # out of descriptors: libraries left to the cycle collector go
        try:
            fd = create(f"plait-{digest[:12]}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            return None
    keep = False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        seals = 0
        for n in _SEALS:
            seals |= getattr(fcntl_mod, n)
        fcntl_mod.fcntl(fd, fcntl_mod.F_ADD_SEALS, seals)
        if hashlib.sha256(os.pread(fd, len(data) + 1, 0)).hexdigest() != digest:
            raise NativeLoadError(f"{label}: the sealed copy differs from the checked bytes")
        path = f"/proc/self/fd/{fd}"
        try:
            handle = _dlopen(path, fd)
        except NativeLoadError as exc:
            if _dir_problem(str(exc)) or "No such file" in str(exc):
                return None  # e.g. vm.memfd_noexec or no /proc: fall back to a file
            raise NativeLoadError(f"{label}: {exc}") from None
        # The descriptor stays open as long as the library is loaded: the loader knows a
        # library by its path, and a reused descriptor number would make a later dlopen
        # of "/proc/self/fd/<n>" return this library instead.  Once nothing uses the
        # library, its handle's finalizer unloads it and then closes the descriptor.
        keep = True
        return NativeModule(label, handle, _read_manifest(handle, label))
    finally:
        if not keep:
            os.close(fd)


def load_library_bytes(
    data: bytes, expected_sha256: str | None = None, name: str | None = None
) -> NativeModule:
    """Load a native library from its bytes (:func:`load_bytes_without_isa_check`); raises
    :class:`NativeLoadError` when it refused ``PLAIT_ISA`` (:meth:`NativeModule.check_isa`)."""
    mod = load_bytes_without_isa_check(data, expected_sha256, name)
    mod.check_isa()
    return mod


def load_bytes_without_isa_check(
    data: bytes, expected_sha256: str | None = None, name: str | None = None
) -> NativeModule:
    """Load a native library from its bytes.  Cached per content.

    ``expected_sha256`` (the digest an executable's manifest records) must match the
    bytes, else :class:`NativeLoadError` naming library ``name``; an ELF library is
    checked for truncation before it is mapped (a segment beyond the end of the file
    would raise SIGBUS).  On Linux the library is mapped from a sealed memory file;
    elsewhere from a private temporary file, removed once loaded where the platform
    allows.  The library's ``PLAIT_ISA`` refusal is not checked (:func:`load_library_bytes`
    checks it): for reading what a library reports about itself."""
    what = f"native library {name!r}" if name is not None else "native library"
    digest = hashlib.sha256(data).hexdigest()
    _check_bytes(data, digest, expected_sha256, what)
    key = "sha256:" + digest
    with _LOCK:
        mod = _cached(key)
        if mod is not None:
            return mod
        mod = _load_sealed(data, digest, f"<{what} {digest[:12]}>")
        if mod is not None:
            return _remember(key, mod)
        first_error: Exception | None = None
        for d in _scratch_dirs():
            try:
                os.makedirs(d, exist_ok=True)
                fd, path = tempfile.mkstemp(prefix=f"plait-{digest[:12]}-", suffix=LIB_SUFFIX,
                                            dir=d)
            except OSError as exc:
                first_error = first_error or exc
                continue
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                with open(path, "rb") as f:  # what is mapped must be what was checked
                    if hashlib.sha256(f.read()).hexdigest() != digest:
                        raise NativeLoadError(f"{what}: {path} changed after it was written")
                handle = _dlopen(path)
                mod = NativeModule(path, handle, _read_manifest(handle, path))
            except (OSError, NativeLoadError) as exc:
                first_error = first_error or exc
                mod = None
                if not _dir_problem(str(exc)):
                    break  # the library itself is at fault: another directory will not help
            finally:
                if sys.platform != "win32":
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            if mod is not None:
                return _remember(key, mod)
        if isinstance(first_error, NativeLoadError):
            raise first_error
        raise NativeLoadError(f"cannot load a native library from bytes: {first_error}")


def library_functions(data: bytes) -> list[str]:
    """The function names a native library (given as bytes) provides."""
    return load_library_bytes(data).names


def is_plait_library(data: bytes) -> bool:
    """True when ``data`` is a shared library exporting the plait manifest (libraries
    of other producers are left to their own loaders)."""
    return is_native_library(data) and MANIFEST_SYMBOL.encode() in data


def native_loader(exe: Executable, name: str) -> NativeFunction | None:
    """The VM's hook: ``name`` from the plait native libraries in ``exe.libs``, or None.
    A plait library that cannot be loaded, or whose digest is not the one the file's
    manifest recorded, raises :class:`NativeLoadError` saying why.  (Whether the
    executable's native code may run at all was decided before: see
    :func:`plait.runtime.packed.load_native_func`.)"""
    digests = getattr(exe, "lib_digests", {})
    try:
        seen = _SEEN.setdefault(exe, {})
    except TypeError:   # not weakly referable: nothing remembered
        seen = {}
    for lib, blob in exe.libs.items():
        known = seen.get(lib)
        mod = None
        if known is not None and known[0] is blob:   # checked before: these very bytes
            if known[1] is None:
                continue
            with _LOCK:
                mod = _cached(known[1])   # (None once unmapped: loaded and checked again)
        if mod is None:
            if not isinstance(blob, bytes | bytearray) or not is_plait_library(bytes(blob)):
                if isinstance(blob, bytes):
                    seen[lib] = (blob, None)
                continue
            mod = load_library_bytes(bytes(blob), digests.get(lib), lib)
            if isinstance(blob, bytes):
                seen[lib] = (blob, "sha256:" + (digests.get(lib)
                                                or hashlib.sha256(blob).hexdigest()))
        if name in mod.functions:
            return mod.functions[name]
    return None


_SEEN: weakref.WeakKeyDictionary[Any, dict[str, tuple[bytes, str | None]]] = \
    weakref.WeakKeyDictionary()
"""Per executable, the library blobs :func:`native_loader` has checked (immutable
``bytes``, by identity) with the key of their loaded library, or None for a blob that
is not a plait library: a VM resolving its functions one by one hashes each library
once, not once per function (MobileNetV2's 2 MiB library was hashed 56 times, 0.22 s
of a 0.36 s load).  The library itself is not held here: once no VM uses it, it is
unmapped as before (and then loaded and checked again)."""


register_native_loader(native_loader)

__all__ = [
    "ABI_VERSION", "ISA_FORCE_SYMBOL", "ISA_REPORT_SYMBOL", "LIB_SUFFIX", "MANIFEST_SYMBOL",
    "POOL_REPORT_SYMBOL",
    "NativeCallError", "NativeFunction",
    "NativeLoadError", "NativeModule", "ParamSpec", "dtype_text", "is_native_library",
    "is_plait_library", "library_functions", "to_native_order",
    "KEEP_RECENT", "library_stats", "load_library", "load_library_bytes",
    "loaded_libraries", "native_loader", "release_unused_libraries",
]
