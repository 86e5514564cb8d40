"""External modules: what an external codegen compiles its functions into.

An :class:`ExternalModule` is data only — the codegen that made it, a ``format`` naming
the runtime loader that reads it, the functions it provides (global symbol, input and
output tensor signatures), binary members (an ONNX model, a shared library) and
JSON-able metadata.  The ``RunCodegen`` pass puts the modules in the IRModule's
attribute ``external_mods``; the VM code generator copies them into the executable,
which saves them as data (no pickle, nothing run at load).

At run time a loader, registered per format with :func:`register_external_loader`,
turns a module into Python callables: ``fn(*inputs) -> output`` (a tuple when there are
several outputs).  Loaders of two formats come with plait:

* ``"native"`` — a shared library (member ``"lib"``) following plait's native ABI
  (:mod:`plait.runtime.native`): any codegen that emits C can use it;
* ``"onnxruntime"`` — one ONNX model per function (the member named in
  ``meta["graphs"][name]["model"]``, with the graph's input and output names) run by
  an onnxruntime session (onnxruntime is imported only when such a module is loaded).

The VM resolves a call of ``symbol`` (destination-passing: inputs then outputs) and of
``symbol@alloc`` (returning its results) among the executable's external modules;
:func:`external_functions` gives the same callables to any Python caller (a reference
interpreter, a test).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from plait.errors import PlaitError
from plait.runtime.lazy_compiler import load_compiler
from plait.runtime.sizes import SizeExprError, compile_size

if TYPE_CHECKING:
    from plait.runtime.executable import Executable

Dim = int | str
ExternalFn = Callable[..., Any]
Loader = Callable[["ExternalModule"], dict[str, ExternalFn]]


def _is_size_text(d: str) -> bool:
    """A name or the text of a size expression (``"batch * 4"``)."""
    if d.isidentifier():
        return True
    try:
        compile_size(d)
    except SizeExprError:
        return False
    return True


class ExternalModuleError(PlaitError, RuntimeError):
    """An external module cannot be loaded or called; the message names the module,
    its codegen and the function."""


@dataclass(frozen=True)
class TensorSig:
    """A tensor of an external function's signature: shape (ints and symbolic size
    names) and dtype (a numpy dtype name)."""

    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.shape))}{',' if len(self.shape) == 1 else ''}) " \
               f"{self.dtype}"


@dataclass(frozen=True)
class ExternalFunction:
    """A function an external module provides: its global symbol, inputs, outputs."""

    name: str
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))

    def __str__(self) -> str:
        return (f"{self.name}({', '.join(map(str, self.inputs))}) -> "
                f"({', '.join(map(str, self.outputs))})")


@dataclass(frozen=True, eq=False)
class ExternalModule:
    """A compiled external module (see the module docstring).  Compares and hashes by
    content, so it can live in an IRModule's attributes."""

    codegen: str
    format: str
    functions: tuple[ExternalFunction, ...]
    blobs: Mapping[str, bytes] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "functions", tuple(self.functions))
        object.__setattr__(self, "blobs", {k: bytes(v) for k, v in self.blobs.items()})
        object.__setattr__(self, "meta", dict(self.meta))
        check_external_module(self)
        h = hashlib.sha256()
        h.update(json.dumps([self.codegen, self.format, [str(f) for f in self.functions],
                             repr(sorted(self.meta.items()))]).encode())
        for k in sorted(self.blobs):
            h.update(k.encode() + b"\0" + hashlib.sha256(self.blobs[k]).digest())
        object.__setattr__(self, "_digest", h.hexdigest())

    @property
    def digest(self) -> str:
        """sha256 of the module's content (format, functions, metadata, members)."""
        return self._digest  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExternalModule) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        size = sum(len(b) for b in self.blobs.values())
        names = ", ".join(f.name for f in self.functions)
        return (f"<external module {self.format} of codegen {self.codegen!r}: {names}; "
                f"{size} bytes sha256:{self.digest[:12]}>")

    def function(self, name: str) -> ExternalFunction:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"external module of codegen {self.codegen!r} has no function "
                       f"{name!r}; it has {', '.join(f.name for f in self.functions)}")

    def load(self) -> dict[str, ExternalFn]:
        """The module's functions as Python callables, ``fn(*inputs) -> output``
        (a tuple for several outputs); inputs are checked against the signature."""
        return _load(self)


def check_external_module(m: ExternalModule) -> None:
    """Raise ``ValueError`` naming the problem when ``m`` is malformed."""
    where = f"external module of codegen {m.codegen!r}"
    if not isinstance(m.codegen, str) or not m.codegen:
        raise ValueError(f"an external module needs its codegen's name, got {m.codegen!r}")
    if not isinstance(m.format, str) or not m.format:
        raise ValueError(f"{where}: format must be a non-empty string, got {m.format!r}")
    if not m.functions:
        raise ValueError(f"{where}: it provides no function")
    names = [f.name for f in m.functions]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{where}: function(s) {', '.join(dup)} appear twice")
    for f in m.functions:
        if not isinstance(f, ExternalFunction) or not isinstance(f.name, str) or not f.name:
            raise ValueError(f"{where}: {f!r} is not an ExternalFunction with a name")
        if not f.outputs:
            raise ValueError(f"{where}: function {f.name!r} has no output")
        for t in (*f.inputs, *f.outputs):
            if not isinstance(t, TensorSig):
                raise ValueError(f"{where}: function {f.name!r}: {t!r} is not a TensorSig")
            try:
                dt = np.dtype(t.dtype)
            except TypeError:
                raise ValueError(f"{where}: function {f.name!r}: unknown dtype "
                                 f"{t.dtype!r}") from None
            if dt.kind not in "biuf":
                raise ValueError(f"{where}: function {f.name!r}: dtype {t.dtype!r} is not "
                                 "numeric or bool")
            for d in t.shape:
                ok = (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or (
                    isinstance(d, str) and _is_size_text(d))
                if not ok:
                    raise ValueError(f"{where}: function {f.name!r}: shape entry {d!r} is "
                                     "neither an int >= 0, a name nor a size expression")
    for k, v in m.blobs.items():
        if not isinstance(k, str) or not k or "/" in k:
            raise ValueError(f"{where}: member name {k!r} must be a non-empty string "
                             "without '/'")
        if not isinstance(v, bytes):
            raise ValueError(f"{where}: member {k!r} must be bytes")


# ------------------------------------------------------------------ loaders

_LOADERS: dict[str, Loader] = {}
_NATIVE_CODE: set[str] = set()
"""Formats whose modules hold native code (loading them runs it)."""


def register_external_loader(fmt: str, loader: Loader, *, native_code: bool = False,
                             override: bool = False) -> Loader:
    """Register ``loader(module) -> {name: fn}`` for external modules of format
    ``fmt``; ``fn(*inputs)`` returns the output (a tuple for several).  A format whose
    modules hold native code (``native_code=True``) follows the executable's trust
    policy: from a file nobody trusted it is not loaded (:mod:`plait.runtime.trust`)."""
    if not isinstance(fmt, str) or not fmt:
        raise ValueError(f"an external module format is a non-empty string, got {fmt!r}")
    if fmt in _LOADERS and not override and _LOADERS[fmt] is not loader:
        raise ValueError(f"a loader for external format {fmt!r} is already registered; "
                         "pass override=True to replace it")
    _LOADERS[fmt] = loader
    if native_code:
        _NATIVE_CODE.add(fmt)
    else:
        _NATIVE_CODE.discard(fmt)
    return loader


def external_formats() -> list[str]:
    """The formats a loader is registered for."""
    return sorted(_LOADERS)


_CACHE: weakref.WeakKeyDictionary[ExternalModule, dict[str, ExternalFn]] = \
    weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _load(m: ExternalModule) -> dict[str, ExternalFn]:
    with _LOCK:
        hit = _CACHE.get(m)
    if hit is not None:
        return hit
    loader = _LOADERS.get(m.format)
    if loader is None and load_compiler():  # a codegen of the compiler registers it
        loader = _LOADERS.get(m.format)
    if loader is None:
        import difflib

        close = difflib.get_close_matches(m.format, list(_LOADERS), n=2)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ExternalModuleError(
            f"no runtime loader for external modules of format {m.format!r}{hint} (the "
            f"module of codegen {m.codegen!r}, functions "
            f"{', '.join(f.name for f in m.functions)}); loaders are registered for "
            f"{', '.join(sorted(_LOADERS)) or 'none'}: import the package of codegen "
            f"{m.codegen!r}, which registers its loader")
    try:
        raw = loader(m)
    except ExternalModuleError:
        raise
    except Exception as e:
        raise ExternalModuleError(
            f"loading the external module of codegen {m.codegen!r} (format {m.format!r}) "
            f"failed: {type(e).__name__}: {e}") from e
    missing = [f.name for f in m.functions if f.name not in raw]
    if missing:
        raise ExternalModuleError(f"the {m.format!r} loader gave no function "
                                  f"{', '.join(missing)} of codegen {m.codegen!r}")
    fns = {f.name: _checked(m, f, raw[f.name]) for f in m.functions}
    with _LOCK:
        _CACHE[m] = fns
    return fns


def _checked(m: ExternalModule, sig: ExternalFunction, fn: ExternalFn) -> ExternalFn:
    """``fn`` with its inputs checked (count, dtype, rank and static sizes) and its
    results checked against the outputs, every mismatch named."""
    dtypes = [np.dtype(t.dtype) for t in sig.inputs]
    where = f"external function {sig.name!r} (codegen {m.codegen!r})"

    def call(*args: Any) -> Any:
        if len(args) != len(sig.inputs):
            raise ExternalModuleError(f"{where} takes {len(sig.inputs)} input(s), got "
                                      f"{len(args)}")
        arrays = []
        for i, (a, t, dt) in enumerate(zip(args, sig.inputs, dtypes)):
            a = np.asarray(a)
            if a.dtype != dt or a.ndim != len(t.shape) or any(
                    isinstance(d, int) and d != s for d, s in zip(t.shape, a.shape)):
                raise ExternalModuleError(f"{where}: input {i} is {a.shape} {a.dtype}, "
                                          f"expected {t}")
            arrays.append(np.ascontiguousarray(a))
        out = fn(*arrays)
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(sig.outputs):
            raise ExternalModuleError(f"{where} returned {len(outs)} result(s), expected "
                                      f"{len(sig.outputs)}")
        for i, (o, t) in enumerate(zip(outs, sig.outputs)):
            if (not isinstance(o, np.ndarray) or o.dtype != np.dtype(t.dtype)
                    or o.ndim != len(t.shape)):
                got = f"{o.shape} {o.dtype}" if isinstance(o, np.ndarray) else type(o).__name__
                raise ExternalModuleError(f"{where}: result {i} is {got}, expected {t}")
        return out

    call.__name__ = sig.name
    call.__doc__ = f"{sig} of codegen {m.codegen!r} ({m.format})."
    return call


def external_functions(modules: Sequence[ExternalModule]) -> dict[str, ExternalFn]:
    """Every function of ``modules`` by global symbol, as Python callables."""
    out: dict[str, ExternalFn] = {}
    for m in modules:
        for name, fn in m.load().items():
            if name in out:
                raise ExternalModuleError(f"external function {name!r} is provided by two "
                                          "modules")
            out[name] = fn
    return out


def _dps(fn: ExternalFn, n_in: int) -> ExternalFn:
    """``fn`` in destination-passing style: ``f(*inputs, *outputs)`` writes the
    outputs."""

    def call(*args: Any) -> None:
        res = fn(*args[:n_in])
        outs = res if isinstance(res, tuple) else (res,)
        for dst, src in zip(args[n_in:], outs):
            np.copyto(dst, src, casting="no")

    call.__name__ = getattr(fn, "__name__", "external")
    return call


def find_external(modules: Sequence[ExternalModule], name: str,
                  exe: Executable | None = None) -> ExternalFn | None:
    """``name`` (destination-passing: inputs, then outputs written in place) or
    ``name@alloc`` (returning its results) among ``modules``, loaded on first use; None
    when no module provides it.  With ``exe``, a module holding native code loads only
    when the executable's trust allows it."""
    alloc = name.endswith("@alloc")
    symbol = name[: -len("@alloc")] if alloc else name
    for m in modules:
        for f in m.functions:
            if f.name == symbol:
                if exe is not None:
                    _check_trust(exe, m)
                fn = m.load()[symbol]
                return fn if alloc else _dps(fn, len(f.inputs))
    return None


def resolve_external(exe: Executable, name: str) -> ExternalFn | None:
    """The VM's lookup: :func:`find_external` among ``exe``'s external modules."""
    mods = getattr(exe, "external", None)
    return find_external(mods, name, exe) if mods else None


def _check_trust(exe: Executable, m: ExternalModule) -> None:
    if m.format not in _NATIVE_CODE:
        return
    from plait.runtime.trust import native_code_description, rebuild_hint, require_trusted

    def code() -> str:
        return native_code_description(
            {f"external module of codegen {m.codegen!r}": b"".join(m.blobs.values())})

    require_trusted(getattr(exe, "trust", None), code, lambda: rebuild_hint(exe))


# ------------------------------------------------------------------ the shipped formats


def _native_loader(m: ExternalModule) -> dict[str, ExternalFn]:
    from plait.runtime.native import load_library_bytes

    lib = load_library_bytes(m.blobs["lib"], None, f"library of codegen {m.codegen!r}")
    out = {}
    for f in m.functions:
        native = lib.get(f.name)
        out[f.name] = native  # f(*inputs) allocates and returns the outputs
    return out


def _onnxruntime_loader(m: ExternalModule) -> dict[str, ExternalFn]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise ExternalModuleError(
            f"the external module of codegen {m.codegen!r} runs on onnxruntime, which is "
            "not installed: pip install onnxruntime (or plait[onnx])") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # ONNX (protobuf) only, which _refuse_external_data has read: bytes that also parse
    # as onnxruntime's own format (flatbuffers, "ORTM") would otherwise be run as that
    opts.add_session_config_entry("session.load_model_format", "ONNX")
    threads = m.meta.get("intra_op_num_threads")
    if isinstance(threads, int) and threads > 0:
        opts.intra_op_num_threads = threads
    graphs = m.meta.get("graphs", {})
    out = {}
    for f in m.functions:
        g = graphs.get(f.name)
        if not isinstance(g, dict) or g.get("model") not in m.blobs:
            raise ExternalModuleError(f"external module of codegen {m.codegen!r}: no ONNX "
                                      f"model recorded for {f.name!r}")
        _refuse_external_data(m, f.name, m.blobs[g["model"]])
        sess = ort.InferenceSession(m.blobs[g["model"]], opts,
                                    providers=["CPUExecutionProvider"])
        out[f.name] = _ort_function(sess, list(g["inputs"]), list(g["outputs"]))
    return out


def _refuse_external_data(m: ExternalModule, name: str, model: bytes) -> None:
    """An ONNX model inside an executable is data: it must hold its tensors itself.
    onnxruntime would read a tensor's ``external_data`` file (relative to the working
    directory for a model given as bytes), so such a model is refused whoever signed
    the file: an executable names no files of the machine that runs it."""
    from plait.runtime.onnx_wire import OnnxWireError, external_data_tensors

    try:
        bad = external_data_tensors(model)
    except OnnxWireError as e:
        raise ExternalModuleError(f"external function {name!r} of codegen {m.codegen!r}: "
                                  f"its ONNX model is malformed ({e})") from None
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise ExternalModuleError(
            f"external function {name!r} of codegen {m.codegen!r}: its ONNX model keeps "
            f"tensor data in other files ({', '.join(bad[:3])}{more}); an executable's "
            "models must hold their own data, and plait does not let a file make the "
            "process read other files: export the model with its data inside (onnx.save "
            "without save_as_external_data) and build it again")


def _ort_function(sess: Any, inputs: list[str], outputs: list[str]) -> ExternalFn:
    def run(*args: np.ndarray) -> Any:
        res = sess.run(outputs, dict(zip(inputs, args)))
        return res[0] if len(res) == 1 else tuple(res)

    return run


register_external_loader("native", _native_loader, native_code=True)
register_external_loader("onnxruntime", _onnxruntime_loader)


__all__ = [
    "ExternalFunction",
    "ExternalModule",
    "ExternalModuleError",
    "TensorSig",
    "check_external_module",
    "external_formats",
    "external_functions",
    "find_external",
    "register_external_loader",
    "resolve_external",
]
