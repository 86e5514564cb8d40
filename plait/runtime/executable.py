"""The executable: a data-only, serializable VM program.

An :class:`Executable` holds VM functions (register-machine code), constants (numpy
arrays), JSON-able attributes and opaque native libraries.  It is saved as a zip file:

* ``manifest.json`` — format name and version, attributes, functions with their
  instructions (JSON objects tagged with their ``kind``), the constant and library index;
* ``constants/<i>.npy`` — one ``.npy`` member per constant (never pickled);
* ``libs/<i>`` — each native library, verbatim.

Loading never executes anything from the file: JSON is parsed, arrays are read with
``allow_pickle=False``, and every field is validated before an ``Executable`` is returned.
Values in immediates, keyword arguments and attributes are encoded so that tuples come
back as tuples (``{"tuple": [...]}``), dicts as dicts (``{"dict": {...}}``) and
non-finite floats as floats (``{"float": "nan"}``).
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

FORMAT_NAME = "plait.executable"
FORMAT_VERSION = 1
PARAM_KINDS = ("tensor", "tuple", "prim", "shape", "object")
_ARRAY_KINDS = "biufc"  # bool, signed, unsigned, float, complex
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: same program, same bytes


class ExecutableFormatError(ValueError):
    """An executable (in memory or on disk) is malformed; the message says where."""


# ----------------------------------------------------------------------------- values


def normalize_value(value: Any, *, allow_dict: bool = False, where: str = "value") -> Any:
    """Return ``value`` with numpy scalars turned into Python scalars.

    Accepts None, bool, int, float, str and nested lists/tuples of these (and dicts with
    string keys when ``allow_dict``); raises ``TypeError`` naming ``where`` otherwise.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, list):
        return [normalize_value(v, allow_dict=allow_dict, where=where) for v in value]
    if isinstance(value, tuple):
        return tuple(normalize_value(v, allow_dict=allow_dict, where=where) for v in value)
    if allow_dict and isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: dict keys must be strings, got {k!r}")
            out[k] = normalize_value(v, allow_dict=True, where=where)
        return out
    allowed = "None, bool, int, float, str or lists/tuples" + (" /dicts" if allow_dict else "")
    raise TypeError(f"{where}: {type(value).__name__} is not serializable (allowed: {allowed})")


def encode_value(value: Any) -> Any:
    """Encode a normalized value as JSON, tagging tuples, dicts and non-finite floats."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {k: encode_value(v) for k, v in value.items()}}
    raise TypeError(f"{type(value).__name__} is not serializable")


def decode_value(data: Any, *, allow_dict: bool = False) -> Any:
    """Inverse of :func:`encode_value`; raises ``ExecutableFormatError`` on bad input."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [decode_value(v, allow_dict=allow_dict) for v in data]
    if isinstance(data, dict) and len(data) == 1:
        (tag, inner), = data.items()
        if tag == "tuple" and isinstance(inner, list):
            return tuple(decode_value(v, allow_dict=allow_dict) for v in inner)
        if tag == "float" and inner in ("nan", "inf", "-inf"):
            return float(inner)
        if tag == "dict" and allow_dict and isinstance(inner, dict):
            return {k: decode_value(v, allow_dict=True) for k, v in inner.items()}
    raise ExecutableFormatError(f"malformed encoded value {_short(data)}")


def _short(data: Any, limit: int = 80) -> str:
    text = repr(data)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class Reg:
    """An argument read from register ``index`` of the current frame."""

    index: int

    def __str__(self) -> str:
        return f"%{self.index}"


@dataclass(frozen=True)
class Const:
    """An argument that is ``Executable.constants[index]``."""

    index: int

    def __str__(self) -> str:
        return f"c[{self.index}]"


@dataclass(frozen=True)
class Imm:
    """An immediate value: None, bool, int, float, str or nested lists/tuples of these."""

    value: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", normalize_value(self.value, where="immediate"))

    def __str__(self) -> str:
        return repr(self.value)


Arg = Reg | Const | Imm


def _arg_to_json(arg: Arg) -> dict[str, Any]:
    if isinstance(arg, Reg):
        return {"reg": arg.index}
    if isinstance(arg, Const):
        return {"const": arg.index}
    return {"imm": encode_value(arg.value)}


def _arg_from_json(data: Any) -> Arg:
    if isinstance(data, dict) and len(data) == 1:
        (tag, inner), = data.items()
        if tag == "reg":
            return Reg(inner)
        if tag == "const":
            return Const(inner)
        if tag == "imm":
            try:
                return Imm(decode_value(inner))
            except TypeError as e:
                raise ExecutableFormatError(str(e)) from None
    raise ExecutableFormatError(
        f"malformed argument {_short(data)}; expected {{'reg': i}}, {{'const': i}} or {{'imm': v}}"
    )


# ----------------------------------------------------------------------- instructions


class Instr:
    """Base class of VM instructions.

    ``kind`` names the instruction in JSON; ``schema`` maps each field to its field type:
    ``reg``/``reg?`` (register, optional), ``nat`` (int >= 0), ``pc`` (instruction index),
    ``func`` (function name), ``args``, ``kwargs``, ``shape``, ``dtype``.
    """

    kind: ClassVar[str]
    schema: ClassVar[dict[str, str]]


@dataclass
class Call(Instr):
    """``dst = func(*args, **kwargs)``: a VM function of the executable, else a packed
    function, else a function of a native library.  ``kwargs`` values are plain
    immediate values or ``Reg``/``Const`` arguments."""

    func: str
    args: list[Arg]
    dst: int | None
    kwargs: dict[str, Any] = field(default_factory=dict)

    kind: ClassVar[str] = "call"
    schema: ClassVar[dict[str, str]] = {
        "func": "func", "args": "args", "dst": "reg?", "kwargs": "kwargs"
    }

    def __post_init__(self) -> None:
        self.kwargs = {
            k: v.value if isinstance(v, Imm) else v if isinstance(v, Reg | Const)
            else normalize_value(v, where=f"keyword argument {k!r} of call {self.func}")
            for k, v in self.kwargs.items()
        }

    def __str__(self) -> str:
        parts = [str(a) for a in self.args]
        parts += [f"{k}={v if isinstance(v, Reg | Const) else repr(v)}"
                  for k, v in self.kwargs.items()]
        call = f"call {self.func}({', '.join(parts)})"
        return call if self.dst is None else f"%{self.dst} = {call}"


@dataclass
class Ret(Instr):
    """Return the value in register ``src`` to the caller."""

    src: int

    kind: ClassVar[str] = "ret"
    schema: ClassVar[dict[str, str]] = {"src": "reg"}

    def __str__(self) -> str:
        return f"ret %{self.src}"


@dataclass
class Goto(Instr):
    """Jump to the instruction at absolute index ``target``."""

    target: int

    kind: ClassVar[str] = "goto"
    schema: ClassVar[dict[str, str]] = {"target": "pc"}

    def __str__(self) -> str:
        return f"goto {self.target}"


@dataclass
class If(Instr):
    """Fall through when register ``cond`` holds a true scalar, else jump to
    ``else_target``."""

    cond: int
    else_target: int

    kind: ClassVar[str] = "if"
    schema: ClassVar[dict[str, str]] = {"cond": "reg", "else_target": "pc"}

    def __str__(self) -> str:
        return f"if %{self.cond} else goto {self.else_target}"


@dataclass
class AllocStorage(Instr):
    """``dst`` = a fresh 1-D uint8 buffer of ``nbytes`` bytes (64-byte aligned)."""

    dst: int
    nbytes: int

    kind: ClassVar[str] = "alloc_storage"
    schema: ClassVar[dict[str, str]] = {"dst": "reg", "nbytes": "nat"}

    def __str__(self) -> str:
        return f"%{self.dst} = alloc_storage {self.nbytes}"


@dataclass
class AllocTensor(Instr):
    """``dst`` = a C-contiguous tensor at byte ``offset`` of the storage in register
    ``storage`` (or a fresh array when ``storage`` is None).  String shape entries are
    symbolic sizes bound by the function's parameters."""

    dst: int
    shape: list[int | str]
    dtype: str
    storage: int | None = None
    offset: int = 0

    kind: ClassVar[str] = "alloc_tensor"
    schema: ClassVar[dict[str, str]] = {
        "dst": "reg", "shape": "shape", "dtype": "dtype", "storage": "reg?", "offset": "nat"
    }

    def __str__(self) -> str:
        shape = ", ".join(str(d) for d in self.shape)
        where = "" if self.storage is None else f" in %{self.storage}+{self.offset}"
        return f"%{self.dst} = alloc_tensor ({shape}) {self.dtype}{where}"


@dataclass
class Move(Instr):
    """``dst = src`` (register to register; no copy of the value)."""

    dst: int
    src: int

    kind: ClassVar[str] = "move"
    schema: ClassVar[dict[str, str]] = {"dst": "reg", "src": "reg"}

    def __str__(self) -> str:
        return f"%{self.dst} = move %{self.src}"


INSTRUCTIONS: dict[str, type[Instr]] = {
    cls.kind: cls for cls in (Call, Ret, Goto, If, AllocStorage, AllocTensor, Move)
}


# ------------------------------------------------------------------ functions, program


@dataclass
class ParamSig:
    """A VM function parameter: ``kind`` is one of ``PARAM_KINDS``; for tensors (and
    shapes) ``shape`` holds ints and symbolic size names, None when the rank is unknown;
    ``dtype`` is a numpy dtype name or None when any dtype is accepted."""

    name: str
    kind: str = "tensor"
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.shape, list):
            self.shape = tuple(self.shape)

    def __str__(self) -> str:
        if self.kind == "tensor":
            shape = "?" if self.shape is None else "(" + ", ".join(map(str, self.shape)) + ")"
            return f"{self.name}: tensor{shape} {self.dtype or '?'}"
        if self.kind == "shape" and self.shape is not None:
            return f"{self.name}: shape(" + ", ".join(map(str, self.shape)) + ")"
        return f"{self.name}: {self.kind}" + (f" {self.dtype}" if self.dtype else "")


@dataclass
class VMFunction:
    """A VM function: parameters occupy registers ``0..len(params)-1`` on entry."""

    name: str
    params: list[ParamSig]
    num_registers: int
    instructions: list[Instr]

    def symbols(self) -> list[str]:
        """The symbolic sizes bound by the parameters, in binding order."""
        out: list[str] = []
        for p in self.params:
            if p.kind in ("tensor", "shape") and p.shape is not None:
                out += [d for d in p.shape if isinstance(d, str) and d not in out]
        return out


@dataclass
class Executable:
    """A VM program: functions, constants, JSON-able attributes and native libraries."""

    functions: dict[str, VMFunction]
    constants: list[np.ndarray] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    libs: dict[str, bytes] = field(default_factory=dict)

    # --------------------------------------------------------------------- checking
    def validate(self) -> None:
        """Check every invariant the VM relies on; raise ``ExecutableFormatError``."""
        _validate_executable(self)

    # ---------------------------------------------------------------- serialization
    def to_bytes(self) -> bytes:
        """The executable as the bytes of its zip file (validating it first)."""
        self.validate()
        buf = io.BytesIO()
        _write_zip(self, buf)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Executable:
        """Load an executable from the bytes of its zip file (see :meth:`load`)."""
        exe = _read_zip(io.BytesIO(data))
        exe.validate()
        return exe

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the executable to ``path`` as a zip file (validating it first)."""
        data = self.to_bytes()
        with open(path, "wb") as f:
            f.write(data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Executable:
        """Read and validate an executable saved by :meth:`save`.

        Never runs code from the file; raises ``ExecutableFormatError`` for anything
        malformed (not a zip, unknown version or instruction, bad indices, ...)."""
        with open(path, "rb") as f:
            data = f.read()
        return cls.from_bytes(data)

    # ------------------------------------------------------------------- inspection
    def stats(self) -> dict[str, Any]:
        """Sizes and counts: per function registers, instructions and callees; constant
        and library bytes; the attributes."""
        funcs = {}
        for name, fn in self.functions.items():
            callees: dict[str, int] = {}
            for ins in fn.instructions:
                if isinstance(ins, Call):
                    callees[ins.func] = callees.get(ins.func, 0) + 1
            funcs[name] = {
                "params": len(fn.params),
                "registers": fn.num_registers,
                "instructions": len(fn.instructions),
                "calls": callees,
            }
        return {
            "functions": funcs,
            "num_constants": len(self.constants),
            "constant_bytes": int(sum(int(c.nbytes) for c in self.constants)),
            "num_libs": len(self.libs),
            "lib_bytes": int(sum(len(b) for b in self.libs.values())),
            "attrs": dict(self.attrs),
        }

    def as_text(self) -> str:
        """A readable listing of attributes, constants, functions and instructions."""
        st = self.stats()
        lines = [
            f"executable: {len(self.functions)} function(s), {st['num_constants']} "
            f"constant(s) ({st['constant_bytes']} bytes), {st['num_libs']} lib(s)"
        ]
        for key, value in self.attrs.items():
            lines.append(f"attr {key} = {value!r}")
        for i, c in enumerate(self.constants):
            lines.append(f"const c[{i}]: {c.dtype} {tuple(c.shape)}")
        for name, nbytes in ((n, len(b)) for n, b in self.libs.items()):
            lines.append(f"lib {name!r}: {nbytes} bytes")
        for fn in self.functions.values():
            params = ", ".join(str(p) for p in fn.params)
            lines.append("")
            lines.append(f"func {fn.name}({params})  # {fn.num_registers} registers")
            width = len(str(max(len(fn.instructions) - 1, 0)))
            for pc, ins in enumerate(fn.instructions):
                lines.append(f"  {pc:>{width}}: {ins}")
        return "\n".join(lines) + "\n"



# ------------------------------------------------------------------------ validation


def _fail(where: str, message: str) -> None:
    raise ExecutableFormatError(f"{where}: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dtype(dtype: Any, where: str) -> None:
    if not isinstance(dtype, str):
        _fail(where, f"dtype must be a string, got {_short(dtype)}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        _fail(where, f"unknown dtype {dtype!r}")
    if dt.kind not in _ARRAY_KINDS:
        _fail(where, f"dtype {dtype!r} is not a numeric or bool dtype")


def _check_shape(shape: Any, where: str, symbols: list[str] | None = None) -> None:
    if not isinstance(shape, tuple | list):
        _fail(where, f"shape must be a list of ints and names, got {_short(shape)}")
    for d in shape:
        if isinstance(d, str):
            if not d.isidentifier():
                _fail(where, f"symbolic size {d!r} is not an identifier")
            if symbols is not None and d not in symbols:
                bound = ", ".join(symbols) or "none"
                _fail(where, f"symbolic size {d!r} is not bound by any parameter "
                             f"(bound: {bound})")
        elif not _is_int(d) or d < 0:
            _fail(where, f"shape entry {_short(d)} is neither an int >= 0 nor a name")


def _check_param(p: Any, where: str) -> None:
    if not isinstance(p, ParamSig):
        _fail(where, f"parameter must be a ParamSig, got {type(p).__name__}")
    if not isinstance(p.name, str) or not p.name:
        _fail(where, f"parameter name must be a non-empty string, got {_short(p.name)}")
    where = f"{where} {p.name!r}"
    if p.kind not in PARAM_KINDS:
        _fail(where, f"unknown parameter kind {_short(p.kind)}; expected one of "
                     f"{', '.join(PARAM_KINDS)}")
    if p.shape is not None:
        if p.kind not in ("tensor", "shape"):
            _fail(where, f"a {p.kind} parameter has no shape")
        _check_shape(p.shape, where)
    if p.dtype is not None:
        if p.kind not in ("tensor", "prim"):
            _fail(where, f"a {p.kind} parameter has no dtype")
        _check_dtype(p.dtype, where)


def _check_arg(arg: Any, where: str, num_registers: int, num_constants: int) -> None:
    if isinstance(arg, Reg):
        _check_index(arg.index, num_registers, where, "register", "registers")
    elif isinstance(arg, Const):
        _check_index(arg.index, num_constants, where, "constant", "constants")
    elif isinstance(arg, Imm):
        try:
            normalize_value(arg.value, where="immediate")
        except TypeError as e:
            _fail(where, str(e))
    else:
        _fail(where, f"argument must be Reg, Const or Imm, got {type(arg).__name__}")


def _check_index(value: Any, limit: int, where: str, what: str, plural: str) -> None:
    if not _is_int(value):
        _fail(where, f"{what} index must be an int, got {_short(value)}")
    if not 0 <= value < limit:
        owner = "function" if what == "register" else "executable"
        _fail(where, f"{what} {value} out of range ({owner} has {limit} {plural})")


def _check_field(
    ftype: str, name: str, value: Any, where: str, fn: VMFunction, nconst: int,
    symbols: list[str],
) -> None:
    nreg = fn.num_registers
    if ftype == "reg" or (ftype == "reg?" and value is not None):
        _check_index(value, nreg, f"{where} field {name!r}", "register", "registers")
    elif ftype == "pc":
        _check_index(value, len(fn.instructions), f"{where} field {name!r}",
                     "jump target", "instructions")
    elif ftype == "nat":
        if not _is_int(value) or value < 0:
            _fail(where, f"field {name!r} must be an int >= 0, got {_short(value)}")
    elif ftype == "func":
        if not isinstance(value, str) or not value:
            _fail(where, f"field {name!r} must be a non-empty string, got {_short(value)}")
    elif ftype == "args":
        if not isinstance(value, list | tuple):
            _fail(where, f"field {name!r} must be a list of arguments")
        for i, a in enumerate(value):
            _check_arg(a, f"{where} argument {i}", nreg, nconst)
    elif ftype == "kwargs":
        if not isinstance(value, dict):
            _fail(where, f"field {name!r} must be a dict")
        for k, v in value.items():
            if not isinstance(k, str) or not k.isidentifier():
                _fail(where, f"keyword {_short(k)} is not an identifier")
            if isinstance(v, Reg | Const):
                _check_arg(v, f"{where} keyword {k!r}", nreg, nconst)
            else:
                _check_kwarg(v, where, k)
    elif ftype == "shape":
        _check_shape(value, where, symbols)
    elif ftype == "dtype":
        _check_dtype(value, where)


def _check_kwarg(value: Any, where: str, key: str) -> None:
    try:
        normalize_value(value, where=f"keyword argument {key!r}")
    except TypeError as e:
        _fail(where, str(e))


def _describe(ins: Any) -> str:
    try:
        return str(ins)
    except Exception:  # a malformed field must not hide the real error
        return type(ins).__name__


def _check_function(fn: VMFunction, nconst: int) -> None:
    where = f"function {fn.name!r}"
    if not isinstance(fn.params, list | tuple):
        _fail(where, "params must be a list of ParamSig")
    for p in fn.params:
        _check_param(p, f"{where} parameter")
    names = [p.name for p in fn.params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        _fail(where, f"duplicate parameter name(s) {', '.join(map(repr, dup))}")
    if not _is_int(fn.num_registers) or fn.num_registers < len(fn.params):
        _fail(where, f"num_registers must be an int >= the number of parameters "
                     f"({len(fn.params)}), got {_short(fn.num_registers)}")
    if not isinstance(fn.instructions, list | tuple) or not fn.instructions:
        _fail(where, "instructions must be a non-empty list")
    symbols = fn.symbols()
    known = tuple(INSTRUCTIONS.values())
    for pc, ins in enumerate(fn.instructions):
        if type(ins) not in known:
            _fail(f"{where}, pc {pc}", f"unknown instruction {type(ins).__name__}")
        at = f"{where}, pc {pc} ({_describe(ins)})"
        for fname, ftype, value in instr_fields(ins):
            _check_field(ftype, fname, value, at, fn, nconst, symbols)
    if not isinstance(fn.instructions[-1], Ret | Goto):
        _fail(where, "the last instruction must be ret or goto (execution would run off "
                     "the end)")


def _validate_executable(exe: Executable) -> None:
    if not isinstance(exe.functions, dict):
        _fail("executable", "functions must be a dict of name -> VMFunction")
    if not isinstance(exe.constants, list | tuple):
        _fail("executable", "constants must be a list of numpy arrays")
    for i, c in enumerate(exe.constants):
        if not isinstance(c, np.ndarray):
            _fail(f"constant {i}", f"must be a numpy array, got {type(c).__name__}")
        if c.dtype.hasobject or c.dtype.kind not in _ARRAY_KINDS:
            _fail(f"constant {i}", f"dtype {c.dtype} is not allowed (numeric and bool only)")
    for key, fn in exe.functions.items():
        if not isinstance(fn, VMFunction):
            _fail(f"function {key!r}", f"must be a VMFunction, got {type(fn).__name__}")
        if fn.name != key:
            _fail(f"function {key!r}", f"is stored under the name {key!r} but is named "
                                       f"{_short(fn.name)}")
        _check_function(fn, len(exe.constants))
    if not isinstance(exe.attrs, dict) or not all(isinstance(k, str) for k in exe.attrs):
        _fail("executable", "attrs must be a dict with string keys")
    try:
        normalize_value(exe.attrs, allow_dict=True, where="attrs")
    except TypeError as e:
        _fail("executable", str(e))
    if not isinstance(exe.libs, dict):
        _fail("executable", "libs must be a dict of name -> bytes")
    for name, blob in exe.libs.items():
        if not isinstance(name, str) or not name:
            _fail("executable", f"library name must be a non-empty string, got {_short(name)}")
        if not isinstance(blob, bytes | bytearray):
            _fail(f"library {name!r}", f"must be bytes, got {type(blob).__name__}")
