"""A model in, something to call out: :func:`load` and :class:`Session`.

``plait.load`` is the one-line path for someone coming from onnxruntime's
``InferenceSession`` or TVM's ``relax.build`` + ``VirtualMachine``::

    sess = plait.load("model.onnx", target="c")   # or a .pt2, a .plait.py module, a .plx
    sess.inputs    # (IOInfo(name='input_ids', shape=('batch', 'seq'), dtype='int64'), ...)
    sess.outputs   # (IOInfo(name='logits', shape=('batch', 'seq', 30522), ...), ...)
    out = sess.run({"input_ids": ids})            # {"logits": array, ...}
    logits = sess.run({"input_ids": ids}, ["logits"])["logits"]
    logits = sess(ids)                            # positional, as the VM takes them
    sess.save("model.plx")                        # names kept: plait.load("model.plx")

It composes the public pieces — the importers, :func:`plait.build`,
:class:`~plait.runtime.VirtualMachine` — and adds the model's input and output names:
the names the model gave them (ONNX value names, PyTorch output structure), kept in the
executable's attribute ``io`` so a saved ``.plx`` answers with the same names.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import PlaitError
from .runtime.executable import Executable
from .runtime.vm import VirtualMachine

if TYPE_CHECKING:  # the compiler's IR: imported where a model is built, not to serve one
    from .ir.module import IRModule

IO_ATTR = "io"
"""The executable attribute holding each function's input and output names, shapes and
dtypes: ``{"main": {"inputs": [{"name", "shape", "dtype"}...], "outputs": [...]}}``."""


class SessionError(PlaitError, ValueError):
    """A model that cannot be loaded, or feeds that do not match the model's inputs."""


@dataclass(frozen=True)
class IOInfo:
    """An input or output: its name, shape (ints; a symbolic size or size expression as
    its text, ``"batch"``, ``"seq * 12"``; None when the rank is unknown) and dtype
    (a numpy dtype name; None when unknown)."""

    name: str
    shape: tuple[int | str, ...] | None
    dtype: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> IOInfo:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise SessionError(f"{where}: the executable's {IO_ATTR!r} attribute is malformed")
        shape = data.get("shape")
        return cls(data["name"], None if shape is None else tuple(shape), data.get("dtype"))


def _dim(d: Any) -> int | str:
    return d if isinstance(d, int) else str(d)


def _info(name: str, ty: Any) -> IOInfo:
    from .ir.types import TensorType

    if isinstance(ty, TensorType):
        shape = None if ty.shape is None else tuple(_dim(d) for d in ty.shape)
        return IOInfo(name, shape, None if ty.dtype is None else str(ty.dtype))
    return IOInfo(name, None, None)


def describe(mod: IRModule, function: str = "main",
             input_names: Sequence[str] | None = None,
             output_names: Sequence[str] | None = None) -> dict[str, list[IOInfo]]:
    """The inputs and outputs of ``mod[function]``: names (``input_names`` /
    ``output_names`` when the model gave them, else the parameters' names and
    ``output<i>``), shapes and dtypes from the function's types."""
    from .ir.expr import Function
    from .ir.types import TupleType

    fn = mod[function]
    if not isinstance(fn, Function):
        raise SessionError(f"{function!r} is not a function of the module")
    params = list(fn.params)
    names = list(input_names) if input_names is not None else [p.name_hint for p in params]
    if len(names) != len(params):
        names = [p.name_hint for p in params]
    ret = fn.body.ty if fn.ret_ty is None else fn.ret_ty
    results = list(ret.fields) if isinstance(ret, TupleType) else [ret]
    outs = list(output_names) if output_names is not None else []
    if len(outs) != len(results):
        outs = [f"output{i}" for i in range(len(results))]
    return {"inputs": [_info(n, p.ty) for n, p in zip(names, params)],
            "outputs": [_info(n, t) for n, t in zip(outs, results)]}


def record_io(exe: Executable, function: str, io: Mapping[str, list[IOInfo]]) -> None:
    """Keep ``io`` (from :func:`describe`) in ``exe``'s attribute ``io`` for
    ``function``, so the saved file has the names."""
    table = dict(exe.attrs.get(IO_ATTR) or {})
    table[function] = {k: [i.to_json() for i in v] for k, v in io.items()}
    exe.attrs[IO_ATTR] = table


def onnx_io_names(path: str, constants: Mapping[str, Any] = ()) -> tuple[list[str], list[str]]:
    """The graph's input names (initializers and inputs given as constants left out)
    and output names, read from the file without its weights."""
    from onnx import ModelProto

    from .frontend.onnx.weights import open_model

    model = ModelProto()
    model.ParseFromString(open_model(path))
    inits = {i.name for i in model.graph.initializer}
    ins = [vi.name for vi in model.graph.input if vi.name not in inits and vi.name not in constants]
    return ins, [vi.name for vi in model.graph.output]


def _import(model: Any, shapes: Any, constants: Mapping[str, Any], allow_native: bool,
            fallback: str | None = None
            ) -> tuple[IRModule, list[str] | None, list[str] | None]:
    """The module of ``model`` with the names its format gives inputs and outputs."""
    from .ir.module import IRModule

    if isinstance(model, IRModule):
        return model, None, None
    if not isinstance(model, str | os.PathLike):
        try:
            import onnx
        except ImportError:  # pragma: no cover - onnx is an optional extra
            onnx = None
        if onnx is not None and isinstance(model, onnx.ModelProto):
            from .frontend.onnx import from_onnx

            ins = [vi.name for vi in model.graph.input
                   if vi.name not in {i.name for i in model.graph.initializer}
                   and vi.name not in constants]
            return (from_onnx(model, shapes=shapes, constants=dict(constants),
                              fallback=fallback), ins,
                    [vi.name for vi in model.graph.output])
        raise SessionError(
            "plait.load takes a path (.onnx, .pt2, .plait.py, .plx), an onnx.ModelProto, an "
            f"IRModule or an Executable, got {type(model).__name__}")
    path = os.fspath(model)
    low = path.lower()
    if not os.path.exists(path):
        raise SessionError(f"no such file: {path}")
    if low.endswith(".onnx"):
        from .frontend.onnx import from_onnx

        mod = from_onnx(path, shapes=shapes, constants=dict(constants), fallback=fallback)
        ins, outs = onnx_io_names(path, constants)
        return mod, ins, outs
    if low.endswith(".pt2"):
        return _import_pt2(path, allow_native)
    if low.endswith(".py"):
        from .ir.parser import parse

        with open(path, encoding="utf-8") as f:
            return parse(f.read(), path), None, None
    raise SessionError(f"{path}: unknown file kind; expected .onnx, .pt2, .plx or a "
                       ".plait.py module")


def _import_pt2(path: str, allow_native: bool) -> tuple[IRModule, None, list[str]]:
    from .runtime.trust import Trust, require_trusted

    require_trusted(
        Trust("file", None, allow_native, path),
        "a PyTorch exported program, which torch.export.load unpickles",
        "Or export the model to ONNX (torch.onnx.export): an .onnx file is data.",
        allow="If you made the file or trust where it came from: allow_native=True.")
    import torch

    from .frontend.torch import from_exported_program, output_names

    with warnings.catch_warnings():  # torch's deprecation notes, not the user's
        warnings.simplefilter("ignore")
        ep = torch.export.load(path)
        return from_exported_program(ep), None, output_names(ep)


def load(model: Any, target: Any = None, *, shapes: Any = None,
         constants: Mapping[str, Any] | None = None, allow_native: bool = False,
         trusted_keys: Sequence[Any] = (), function: str = "main",
         fallback: str | None = None) -> Session:
    """Load ``model`` and return a :class:`Session` that runs it.

    ``model``: a path to an ONNX file, a ``torch.export`` program saved with
    ``torch.export.save`` (``.pt2``: unpickled by PyTorch, so only with
    ``allow_native=True``), a module in the text format (``.plait.py``) or a saved
    executable (``.plx``: loaded, not rebuilt; its native code runs when the file is
    signed by this machine or by one of ``trusted_keys``, or with ``allow_native``);
    or an ``onnx.ModelProto``, an :class:`~plait.IRModule` or an
    :class:`~plait.runtime.Executable`.

    ``target``: what to build for (``"c"``, ``"numpy"`` or a :class:`~plait.Target`);
    by default ``"c"`` when a C compiler is present, else ``"numpy"``.  ``shapes`` and
    ``constants`` are passed to the ONNX importer (fix open sizes; freeze inputs that
    decide shapes), and ``fallback="onnxruntime"`` (run the ONNX nodes plait cannot
    import with onnxruntime: docs/onnx.md)."""
    if isinstance(model, Executable):
        return Session(model, function)
    if isinstance(model, str | os.PathLike) and os.fspath(model).lower().endswith(".plx"):
        return Session(Executable.load(model, trusted_keys=trusted_keys,
                                       allow_native=allow_native), function)
    constants = dict(constants or {})
    mod, ins, outs = _import(model, shapes, constants, allow_native, fallback)
    from .build import build

    exe = build(mod, default_target() if target is None else target)
    record_io(exe, function, describe(mod, function, ins, outs))
    return Session(exe, function)


def default_target() -> str:
    """``"c"`` when this machine can compile C (a compiler is on the path), else
    ``"numpy"``."""
    from .codegen.c.compiler import NativeUnavailableError, find_compiler

    try:
        find_compiler()
    except NativeUnavailableError:
        return "numpy"
    return "c"


class Session:
    """A built model with names: :attr:`inputs`, :attr:`outputs`, :meth:`run` with a
    dict of feeds, and calls with positional arrays."""

    def __init__(self, exe: Executable, function: str = "main") -> None:
        if function not in exe.functions:
            raise SessionError(f"the executable has no function {function!r} (it has "
                               f"{', '.join(sorted(exe.functions))})")
        self.executable = exe
        self.function = function
        self._call = VirtualMachine(exe)[function]
        params = exe.functions[function].params
        recorded = (exe.attrs.get(IO_ATTR) or {}).get(function)
        if isinstance(recorded, dict):
            where = f"function {function!r}"
            self.inputs = tuple(IOInfo.from_json(d, where) for d in recorded.get("inputs", ()))
            self.outputs = tuple(IOInfo.from_json(d, where)
                                 for d in recorded.get("outputs", ()))
        else:  # an executable built without names: its parameters' names
            self.inputs = tuple(IOInfo(p.name, p.shape, p.dtype) for p in params)
            self.outputs = ()
        if len(self.inputs) != len(params):
            raise SessionError(f"function {function!r} takes {len(params)} inputs, but its "
                               f"{IO_ATTR!r} attribute names {len(self.inputs)}")

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def __call__(self, *args: Any) -> Any:
        """Run with the inputs in order; returns what the function returns (an array,
        or a tuple for several outputs)."""
        return self._call(*args)

    def run(self, feeds: Mapping[str, Any],
            outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run with ``feeds`` (input name -> array); returns ``{output name: array}``
        for ``outputs`` (default: all), in the model's order."""
        if not isinstance(feeds, Mapping):
            raise SessionError("run() takes a dict of input name -> array (call the "
                               "session itself with arrays in order)")
        names = self.input_names
        unknown = [k for k in feeds if k not in names]
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
            if unknown:
                parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
            raise SessionError(f"{'; '.join(parts)}: the model's inputs are "
                               f"{', '.join(map(repr, names))}")
        result = self._call(*(feeds[n] for n in names))
        values = list(result) if isinstance(result, tuple) else [result]
        out_names = self.output_names
        if len(out_names) != len(values):
            out_names = [f"output{i}" for i in range(len(values))]
        table = dict(zip(out_names, values))
        if outputs is None:
            return table
        bad = [o for o in outputs if o not in table]
        if bad:
            raise SessionError(f"unknown output(s) {', '.join(map(repr, bad))}: the model's "
                               f"outputs are {', '.join(map(repr, out_names))}")
        return {o: table[o] for o in outputs}

    def save(self, path: str | os.PathLike[str], sign_key: Any = None) -> None:
        """Save the executable (names included) as a ``.plx`` file."""
        self.executable.save(path, sign_key=sign_key)

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {_sig(i)}" for i in self.inputs)
        outs = ", ".join(f"{o.name}: {_sig(o)}" for o in self.outputs)
        return f"Session(({ins}) -> ({outs}))"


def _sig(i: IOInfo) -> str:
    shape = "?" if i.shape is None else "(" + ", ".join(map(str, i.shape)) + ")"
    return f"{i.dtype or '?'}{shape}"


def recorded_names(exe: Executable, which: str, function: str = "main") -> list[str]:
    """The names of ``function``'s ``which`` (``"inputs"`` or ``"outputs"``) kept in
    ``exe``'s attribute ``io`` (empty when none were kept)."""
    recorded = (exe.attrs.get(IO_ATTR) or {}).get(function)
    if not isinstance(recorded, dict):
        return []
    return [o.get("name", "") for o in recorded.get(which, ()) if isinstance(o, dict)]


def recorded_output_names(exe: Executable, function: str = "main") -> list[str]:
    """The output names kept in ``exe`` for ``function`` (empty when none were kept)."""
    return recorded_names(exe, "outputs", function)


__all__ = ["IO_ATTR", "IOInfo", "Session", "SessionError", "default_target", "describe",
           "load", "onnx_io_names", "record_io", "recorded_names", "recorded_output_names"]
