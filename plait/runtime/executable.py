"""The executable: a data-only, serializable VM program.

An :class:`Executable` holds VM functions (register-machine code), constants (numpy
arrays), JSON-able attributes, opaque native libraries and, when it has libraries, the
text of the graph it was built from (to rebuild it on numpy).  It is saved as a zip
file:

* ``manifest.json`` — format name and version, attributes, functions with their
  instructions (JSON objects tagged with their ``kind``), the constant, library and
  graph members, and the SHA-256 of every other member (``members``);
* ``constants/<i>.npy`` — one ``.npy`` member per constant (never pickled);
* ``libs/<i>`` — each native library, verbatim;
* ``graph/module.plait.py`` — the graph in the text format (parsed, never executed);
* ``external/<i>/<member>`` — the binary members of each external module (what an
  external codegen compiled its functions into, :mod:`plait.runtime.external`),
  described in the manifest's ``external`` list (present only when there are some);
* ``signatures.json`` — signatures of ``manifest.json`` (see :mod:`plait.runtime.trust`).

Loading never executes anything from the file: every member's digest is checked first
(a corrupted or edited member is an error), JSON is parsed, arrays are read with
``allow_pickle=False``, and every field is validated before an ``Executable`` is
returned.  Running native code is another matter: the VM maps a library (which runs its
code) only when the file was signed by this machine or a trusted key, or the caller
allowed it (:class:`plait.runtime.trust.Trust`).  Values in immediates, keyword
arguments and attributes are encoded so that tuples come back as tuples
(``{"tuple": [...]}``), dicts as dicts (``{"dict": {...}}``) and non-finite floats as
floats (``{"float": "nan"}``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import tempfile
import zipfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from plait.errors import PlaitError
from plait.runtime.call_schema import keyword_problem
from plait.runtime.external import ExternalFunction, ExternalModule, TensorSig
from plait.runtime.limits import LimitExceeded, check_limit, current_limits
from plait.runtime.sizes import SizeExprError, compile_size, is_name
from plait.runtime.trust import BUILT, SIGNATURES_MEMBER, Trust, sha256_hex, signatures, verify

FORMAT_NAME = "plait.executable"
FORMAT_VERSION = 2
"""2: the manifest holds every member's SHA-256, the graph, and signatures may follow."""
GRAPH_MEMBER = "graph/module.plait.py"
PARAM_KINDS = ("tensor", "tuple", "prim", "shape", "object")
_ARRAY_KINDS = "biufc"  # bool, signed, unsigned, float, complex
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: same program, same bytes
_MAX_SIZE = 2**63 - 1  # sizes are int64
_SPARE_REGISTERS = 1024


class ExecutableFormatError(PlaitError, ValueError):
    """An executable (in memory or on disk) is malformed; the message says where."""


class SignatureError(ExecutableFormatError):
    """A signature by a key the caller trusts (or by this machine) does not match the
    file: it was changed after it was signed."""


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
        ((tag, inner),) = data.items()
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
        ((tag, inner),) = data.items()
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
        "func": "func",
        "args": "args",
        "dst": "reg?",
        "kwargs": "kwargs",
    }

    def __post_init__(self) -> None:
        if not isinstance(self.kwargs, dict):
            raise TypeError(
                f"call {self.func}: kwargs must be a dict, got {type(self.kwargs).__name__}"
            )
        if not self.kwargs:
            return
        self.kwargs = {
            k: v.value
            if isinstance(v, Imm)
            else v
            if isinstance(v, Reg | Const)
            else normalize_value(v, where=f"keyword argument {k!r} of call {self.func}")
            for k, v in self.kwargs.items()
        }

    def __str__(self) -> str:
        parts = [str(a) for a in self.args]
        parts += [
            f"{k}={v if isinstance(v, Reg | Const) else repr(v)}" for k, v in self.kwargs.items()
        ]
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
    """``dst`` = a fresh 1-D uint8 buffer of ``nbytes`` bytes (64-byte aligned):
    an int, or a size expression over the function's symbolic sizes (a memory plan of
    a model with a dynamic batch: ``"batch * seq * 12288"``)."""

    dst: int
    nbytes: int | str

    kind: ClassVar[str] = "alloc_storage"
    schema: ClassVar[dict[str, str]] = {"dst": "reg", "nbytes": "size"}

    def __str__(self) -> str:
        return f"%{self.dst} = alloc_storage {self.nbytes}"


@dataclass
class AllocTensor(Instr):
    """``dst`` = a C-contiguous tensor at byte ``offset`` of the storage in register
    ``storage`` (or a fresh array when ``storage`` is None).  String shape entries (and
    a string offset) are symbolic sizes, or expressions over them, bound by the
    function's parameters."""

    dst: int
    shape: list[int | str]
    dtype: str
    storage: int | None = None
    offset: int | str = 0

    kind: ClassVar[str] = "alloc_tensor"
    schema: ClassVar[dict[str, str]] = {
        "dst": "reg",
        "shape": "shape",
        "dtype": "dtype",
        "storage": "reg?",
        "offset": "size",
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
                out += [d for d in p.shape if is_name(d) and d not in out]
        return out


@dataclass(eq=False)
class Executable:
    """A VM program: functions, constants, JSON-able attributes, native libraries and
    the text of the graph it was built from (None when not kept).

    ``trust`` says where it came from (built in this process, or read from a file and
    by whom that file is signed) and so whether its native code may run;
    ``lib_digests`` holds the SHA-256 of each library as the file's manifest recorded
    it (the VM refuses to map a library that no longer matches).  Compared by identity
    (constants are arrays); compare ``functions``, ``attrs`` and ``libs`` directly, or
    the bytes of :meth:`to_bytes`."""

    functions: dict[str, VMFunction]
    constants: list[np.ndarray] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    libs: dict[str, bytes] = field(default_factory=dict)
    graph: str | None = None
    trust: Trust = field(default=BUILT, repr=False)
    lib_digests: dict[str, str] = field(default_factory=dict, repr=False)
    external: list[ExternalModule] = field(default_factory=list)
    """The external modules: what external codegens compiled their functions into."""
    graph_constants: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    """The large constants of :attr:`graph`, which refers to them by key
    (``const(ref="sha256:...")``): kept once in the file (shared with :attr:`constants`
    where equal) and, for a loaded file, read from it only when the graph is parsed
    (:func:`plait.graph_module`)."""

    # --------------------------------------------------------------------- checking
    def validate(self) -> None:
        """Check every invariant the VM relies on; raise ``ExecutableFormatError``."""
        _validate_executable(self)

    # ---------------------------------------------------------------- serialization
    def to_bytes(self, sign_key: Any = None) -> bytes:
        """The executable as the bytes of its zip file (validating it first), signed by
        this machine when it was built here or came from a trusted file, and by
        ``sign_key`` (see :meth:`save`) when given."""
        self.validate()
        buf = io.BytesIO()
        _write_zip(self, buf, sign_key)
        return buf.getvalue()

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        trusted_keys: Iterable[Any] = (),
        allow_native: bool = False,
        source: str | None = None,
    ) -> Executable:
        """Load an executable from the bytes of its zip file (see :meth:`load`)."""
        try:
            exe = _read_zip(io.BytesIO(data), trusted_keys, allow_native, source or "<bytes>",
                            lambda: io.BytesIO(data))
        except RecursionError:
            raise ExecutableFormatError("manifest.json is nested too deeply") from None
        exe.validate()
        return exe

    def save(self, path: str | os.PathLike[str], sign_key: Any = None) -> None:
        """Write the executable to ``path`` as a zip file (validating it first).

        Every member's SHA-256 goes into the manifest.  The manifest is signed with
        this machine's key (so loading the file here runs its native code without
        further ado) unless the executable came from an untrusted file, and with
        ``sign_key`` when given: ``bytes`` of at least 16 (an HMAC-SHA256 secret shared
        with whoever loads the file) or a ``cryptography`` ``Ed25519PrivateKey`` (those
        who load it need only the public key)."""
        self.validate()
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".plait-save-", dir=folder)
        try:  # written next to its place, then renamed: never a half-written file
            with os.fdopen(fd, "wb") as f:
                _write_zip(self, f, sign_key)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        trusted_keys: Iterable[Any] = (),
        allow_native: bool = False,
    ) -> Executable:
        """Read and validate an executable saved by :meth:`save`.

        Never runs code from the file: every member is checked against its SHA-256
        before anything is used, and nothing is mapped or executed.  Raises
        ``ExecutableFormatError`` for anything malformed or altered (not a zip, unknown
        version or instruction, bad indices, a member whose digest differs, ...) and
        :class:`SignatureError` when a signature by a trusted key does not match.

        The result's native code may run (in a ``VirtualMachine``) when the file is
        signed by this machine or by one of ``trusted_keys`` (HMAC secrets as bytes,
        Ed25519 public keys), or when ``allow_native`` is true; otherwise the VM raises
        :class:`~plait.runtime.trust.UntrustedCodeError`, which names the way to run
        the kept graph on numpy instead (``plait.rebuild(exe, "numpy")``)."""
        source = os.fspath(path)
        with open(path, "rb") as f:  # members are read one at a time, never the whole file
            try:
                exe = _read_zip(f, trusted_keys, allow_native, source,
                                lambda: open(source, "rb"))
            except RecursionError:
                raise ExecutableFormatError("manifest.json is nested too deeply") from None
        exe.validate()
        return exe

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
            "graph_bytes": None if self.graph is None else len(self.graph.encode()),
            "trust": str(self.trust),
            "num_constants": len(self.constants),
            "constant_bytes": int(sum(int(c.nbytes) for c in self.constants)),
            "num_libs": len(self.libs),
            "lib_bytes": int(sum(len(b) for b in self.libs.values())),
            "external": {m.codegen: [f.name for f in m.functions] for m in self.external},
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
        for m in self.external:
            lines.append(f"external {m.format} module of codegen {m.codegen!r}:")
            lines.extend(f"  {f}" for f in m.functions)
        if self.graph is not None:
            lines.append(f"graph: {st['graph_bytes']} bytes of text")
        lines.append(f"from: {self.trust}")
        for fn in self.functions.values():
            params = ", ".join(str(p) for p in fn.params)
            lines.append("")
            lines.append(f"func {fn.name}({params})  # {fn.num_registers} registers")
            width = len(str(max(len(fn.instructions) - 1, 0)))
            for pc, ins in enumerate(fn.instructions):
                lines.append(f"  {pc:>{width}}: {ins}")
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ validation


_HERE = "\x00here\x00"
"""A placeholder for the location of an instruction in a validation error, replaced by
the location when one is raised."""


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
            if d.isidentifier():
                names: tuple[str, ...] = (d,)
            else:
                try:
                    names = compile_size(d)[0]
                except SizeExprError as e:
                    _fail(where, str(e))
            for name in names:
                if symbols is not None and name not in symbols:
                    bound = ", ".join(symbols) or "none"
                    _fail(where, f"symbolic size {name!r} is not bound by any parameter "
                          f"(bound: {bound})")
        elif not _is_int(d) or not 0 <= d <= _MAX_SIZE:
            _fail(where, f"shape entry {_short(d)} is neither an int in [0, 2**63-1] nor a name")


def _check_param(p: Any, where: str) -> None:
    if not isinstance(p, ParamSig):
        _fail(where, f"parameter must be a ParamSig, got {type(p).__name__}")
    if not isinstance(p.name, str) or not p.name:
        _fail(where, f"parameter name must be a non-empty string, got {_short(p.name)}")
    where = f"{where} {p.name!r}"
    if p.kind not in PARAM_KINDS:
        _fail(
            where,
            f"unknown parameter kind {_short(p.kind)}; expected one of {', '.join(PARAM_KINDS)}",
        )
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
    ftype: str,
    name: str,
    value: Any,
    where: str,
    fn: VMFunction,
    nconst: int,
    symbols: list[str],
) -> None:
    nreg = fn.num_registers
    if ftype == "reg" or (ftype == "reg?" and value is not None):
        _check_index(value, nreg, f"{where} field {name!r}", "register", "registers")
    elif ftype == "pc":
        _check_index(
            value, len(fn.instructions), f"{where} field {name!r}", "jump target", "instructions"
        )
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
    elif ftype == "size":
        if not isinstance(value, str | int) or isinstance(value, bool) or (
                isinstance(value, int) and value < 0):
            _fail(where, f"field {name!r} must be an int >= 0 or a size expression, "
                  f"got {_short(value)}")
        _check_shape([value], f"{where} field {name!r}", symbols)
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


def _check_function(fn: VMFunction, nconst: int, vm_functions: Collection[str] = ()) -> None:
    where = f"function {fn.name!r}"
    if not isinstance(fn.params, list | tuple):
        _fail(where, "params must be a list of ParamSig")
    for p in fn.params:
        _check_param(p, f"{where} parameter")
    names = [p.name for p in fn.params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        _fail(where, f"duplicate parameter name(s) {', '.join(map(repr, dup))}")
    most = len(fn.params) + len(fn.instructions) + _SPARE_REGISTERS
    if not _is_int(fn.num_registers) or not len(fn.params) <= fn.num_registers <= most:
        _fail(
            where,
            f"num_registers must be an int >= the number of parameters "
            f"({len(fn.params)}) and at most {most} (each instruction defines at most one "
            f"register), got {_short(fn.num_registers)}",
        )
    if not isinstance(fn.instructions, list | tuple) or not fn.instructions:
        _fail(where, "instructions must be a non-empty list")
    symbols = fn.symbols()
    for p in fn.params:   # a size expression of a parameter uses names others bind
        if p.shape is not None:
            _check_shape(p.shape, f"{where} parameter {p.name!r}", symbols)
    known = tuple(INSTRUCTIONS.values())
    for pc, ins in enumerate(fn.instructions):
        if type(ins) not in known:
            _fail(f"{where}, pc {pc}", f"unknown instruction {type(ins).__name__}")
        # the location (which prints the instruction) is written only for an error: a
        # function of 65,535 instructions is checked in a fraction of the time
        try:
            for fname, ftype, value in instr_fields(ins):
                _check_field(ftype, fname, value, _HERE, fn, nconst, symbols)
            if isinstance(ins, Call) and ins.kwargs and ins.func not in vm_functions:
                problem = keyword_problem(ins.func, ins.kwargs)   # by the function's schema
                if problem:
                    _fail(_HERE, problem)
        except ExecutableFormatError as e:
            at = f"{where}, pc {pc} (`{_describe(ins)}`)"
            raise ExecutableFormatError(str(e).replace(_HERE, at, 1)) from None
    if not isinstance(fn.instructions[-1], Ret | Goto):
        _fail(where, "the last instruction must be ret or goto (execution would run off the end)")


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
            _fail(
                f"function {key!r}",
                f"is stored under the name {key!r} but is named {_short(fn.name)}",
            )
        _check_function(fn, len(exe.constants), exe.functions)
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
    if exe.graph is not None and not isinstance(exe.graph, str):
        _fail("executable", f"graph must be text or None, got {type(exe.graph).__name__}")
    if not isinstance(exe.graph_constants, Mapping):
        _fail("executable", "graph_constants must be a mapping of key -> numpy array, got "
                            f"{type(exe.graph_constants).__name__}")
    if not isinstance(exe.trust, Trust):
        _fail("executable", f"trust must be a Trust, got {type(exe.trust).__name__}")
    _validate_external(exe)


def _validate_external(exe: Executable) -> None:
    if not isinstance(exe.external, list | tuple):
        _fail("executable", "external must be a list of ExternalModule")
    seen: dict[str, str] = {}
    for i, m in enumerate(exe.external):
        if not isinstance(m, ExternalModule):
            _fail(f"external module {i}", f"must be an ExternalModule, got {type(m).__name__}")
        for f in m.functions:
            if f.name in exe.functions or f.name in seen:
                other = "a VM function" if f.name in exe.functions else \
                    f"the module of codegen {seen[f.name]!r}"
                _fail(f"external module {i} (codegen {m.codegen!r})",
                      f"function {f.name!r} is also {other}")
            seen[f.name] = m.codegen


def instr_fields(ins: Instr) -> list[tuple[str, str, Any]]:
    """``(field name, field type, value)`` for each field of an instruction."""
    return [(f.name, ins.schema[f.name], getattr(ins, f.name)) for f in fields(ins)]


# --------------------------------------------------------------------- serialization

_MANIFEST = "manifest.json"
_MANIFEST_KEYS = {
    "format", "version", "attrs", "functions", "constants", "libs", "graph", "members"
}
_OPTIONAL_KEYS = {"external", "graph_constants"}
_EXTERNAL_KEYS = {"codegen", "format", "functions", "meta", "members"}
_EXTERNAL_FUNCTION_KEYS = {"name", "inputs", "outputs"}
_DIGEST = re.compile(r"[0-9a-f]{64}")
_FUNCTION_KEYS = {"name", "params", "num_registers", "instructions"}
_PARAM_KEYS = {"name", "kind", "shape", "dtype"}


def _instr_to_json(ins: Instr) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": ins.kind}
    for name, ftype, value in instr_fields(ins):
        if ftype == "args":
            value = [_arg_to_json(a) for a in value]
        elif ftype == "kwargs":
            value = {
                k: _arg_to_json(v if isinstance(v, Reg | Const) else Imm(v))
                for k, v in value.items()
            }
        elif ftype == "shape":
            value = list(value)
        out[name] = value
    return out


def _function_to_json(fn: VMFunction) -> dict[str, Any]:
    return {
        "name": fn.name,
        "params": [
            {
                "name": p.name,
                "kind": p.kind,
                "shape": None if p.shape is None else list(p.shape),
                "dtype": p.dtype,
            }
            for p in fn.params
        ],
        "num_registers": fn.num_registers,
        "instructions": [_instr_to_json(ins) for ins in fn.instructions],
    }


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, briefly,
    for every thread); 0o022 where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _c_order(array: np.ndarray) -> np.ndarray:
    """``array`` if C-contiguous, else a C-ordered copy (keeps 0-d arrays 0-d, unlike
    ``np.ascontiguousarray``)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _write_member(zf: zipfile.ZipFile, name: str, data: bytes, compress: bool) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    zf.writestr(info, data)


class _Hashing:
    """A write-only file that hashes what goes through it (SHA-256)."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha.update(data)
        return self.f.write(data)


def _stream_member(zf: zipfile.ZipFile, name: str, write: Any, compress: bool,
                   size_hint: int) -> str:
    """Write member ``name`` by ``write(file)`` without holding it whole; its SHA-256."""
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zf.open(info, "w", force_zip64=size_hint > 2**30) as f:
        out = _Hashing(f)
        write(out)
    return out.sha.hexdigest()


def _write_npy(f: Any, array: np.ndarray) -> None:
    """``np.save``'s bytes (format 1.0, as ``write_array`` picks for these headers),
    written from the array's own memory: ``write_array`` copies a file-like target in
    16 MiB chunks, which the weights' peak would include."""
    array = _c_order(np.asarray(array))
    if array.dtype.hasobject:
        raise ValueError("an executable's constants cannot hold Python objects")
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
    f.write(memoryview(array.reshape(-1)).cast("B"))


def _array_writer(array: np.ndarray) -> Any:
    return lambda f: _write_npy(f, array)


def _bytes_writer(data: bytes | bytearray) -> Any:
    return lambda f: f.write(data)


def _write_zip(exe: Executable, fileobj: Any, sign_key: Any = None) -> None:
    """Write the members one at a time (arrays streamed, never a second copy of the
    weights in memory), then the manifest with their digests, then its signatures."""
    const_members = [f"constants/{i}.npy" for i in range(len(exe.constants))]
    lib_members = [f"libs/{i}" for i in range(len(exe.libs))]
    # (member, writer, compress, size hint)
    payloads: list[tuple[str, Any, bool, int]] = []
    for member, array in zip(const_members, exe.constants):
        payloads.append((member, _array_writer(array), False, array.nbytes))
    for member, blob in zip(lib_members, exe.libs.values()):
        payloads.append((member, _bytes_writer(blob), False, len(blob)))
    graph_constants: dict[str, str] = {}
    if exe.graph is not None:
        payloads.append((GRAPH_MEMBER, _bytes_writer(exe.graph.encode("utf-8")), True, 0))
        graph_constants = _graph_constant_members(exe, const_members, payloads)
    external = [_external_to_json(i, m) for i, m in enumerate(exe.external)]
    for entry, m in zip(external, exe.external):
        for ref in entry["members"]:
            blob = m.blobs[ref["name"]]
            payloads.append((ref["member"], _bytes_writer(blob), True, len(blob)))
    with zipfile.ZipFile(fileobj, "w") as zf:
        digests = {member: _stream_member(zf, member, write, compress, size)
                   for member, write, compress, size in payloads}
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "attrs": encode_value(normalize_value(exe.attrs, allow_dict=True)),
            "functions": [_function_to_json(fn) for fn in exe.functions.values()],
            "constants": const_members,
            "libs": [{"name": n, "member": m} for n, m in zip(exe.libs, lib_members)],
            "graph": None if exe.graph is None else GRAPH_MEMBER,
            "members": digests,
        }
        if external:
            manifest["external"] = external
        if graph_constants:
            manifest["graph_constants"] = graph_constants
        text = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
        signed = signatures(text, exe.trust, sign_key)
        _write_member(zf, _MANIFEST, text, compress=True)
        if signed is not None:
            _write_member(zf, SIGNATURES_MEMBER, signed, compress=True)


_REF_BYTES = 4096
"""The smallest constant the text printer keeps by reference
(``plait.ir.printer.CONSTANT_REF_BYTES``; the runtime does not import the compiler):
smaller ones are never a graph constant's match, so they are not hashed."""


def content_key(data: np.ndarray) -> str:
    """The key of an array by content: the SHA-256 of its little-endian bytes (the
    text printer keys the graph's constants the same way,
    :func:`plait.ir.printer.constant_key`)."""
    raw = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    return "sha256:" + hashlib.sha256(memoryview(raw).cast("B")).hexdigest()


def _graph_constant_members(exe: Executable, const_members: list[str],
                            payloads: list[tuple[str, Any, bool, int]]) -> dict[str, str]:
    """The member of each of the graph's constants (``{key: member}``): the member of an
    equal constant of the executable when there is one (the weights a build kept as
    they were), else a member of its own (added to ``payloads``)."""
    if not exe.graph_constants:
        return {}
    by_id = {id(c): m for c, m in zip(exe.constants, const_members)}
    by_key: dict[str, str] | None = None
    out: dict[str, str] = {}
    for key, array in exe.graph_constants.items():
        member = by_id.get(id(array))
        if member is None:
            if by_key is None:  # hash the executable's constants once, when needed
                by_key = {content_key(c): m for c, m in zip(exe.constants, const_members)
                          if c.nbytes >= _REF_BYTES}
            member = by_key.get(key)
        if member is None:
            member = f"graph/constants/{len(out)}.npy"
            payloads.append((member, _array_writer(array), False, np.asarray(array).nbytes))
        out[key] = member
    return out


def _sig_to_json(t: TensorSig) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype}


def _external_to_json(i: int, m: ExternalModule) -> dict[str, Any]:
    return {
        "codegen": m.codegen,
        "format": m.format,
        "functions": [{"name": f.name, "inputs": [_sig_to_json(t) for t in f.inputs],
                       "outputs": [_sig_to_json(t) for t in f.outputs]}
                      for f in m.functions],
        "meta": encode_value(normalize_value(dict(m.meta), allow_dict=True,
                                             where=f"metadata of external module {i}")),
        "members": [{"name": k, "member": f"external/{i}/{k}"} for k in sorted(m.blobs)],
    }


def _sig_from_json(data: Any, where: str) -> TensorSig:
    _expect_keys(data, {"shape", "dtype"}, where)
    _expect(isinstance(data["shape"], list), where, "shape must be a list")
    _expect(isinstance(data["dtype"], str), where, "dtype must be a string")
    return TensorSig(tuple(data["shape"]), data["dtype"])


def _external_from_json(blobs: dict[str, bytes], data: Any, where: str) -> ExternalModule:
    _expect_keys(data, _EXTERNAL_KEYS, where)
    _expect(isinstance(data["functions"], list), where, "functions must be a list")
    _expect(isinstance(data["members"], list), where, "members must be a list")
    functions = []
    for j, f in enumerate(data["functions"]):
        at = f"{where} function {j}"
        _expect_keys(f, _EXTERNAL_FUNCTION_KEYS, at)
        _expect(isinstance(f["inputs"], list) and isinstance(f["outputs"], list), at,
                "inputs and outputs must be lists")
        functions.append(ExternalFunction(
            f["name"], tuple(_sig_from_json(t, f"{at} input") for t in f["inputs"]),
            tuple(_sig_from_json(t, f"{at} output") for t in f["outputs"])))
    members: dict[str, bytes] = {}
    for ref in data["members"]:
        _expect_keys(ref, {"name", "member"}, f"{where} member")
        _expect(isinstance(ref["name"], str) and ref["name"] not in members, where,
                f"member name {_short(ref['name'])} is invalid or duplicated")
        members[ref["name"]] = bytes(_member(blobs, ref["member"], where))
    meta = decode_value(data["meta"], allow_dict=True)
    _expect(isinstance(meta, dict), where, "meta must be an object")
    try:
        return ExternalModule(data["codegen"], data["format"], tuple(functions), members, meta)
    except (TypeError, ValueError) as e:
        raise ExecutableFormatError(f"{where}: {e}") from None


def _expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        _fail(where, message)


def _expect_keys(data: Any, keys: set[str], where: str) -> None:
    _expect(isinstance(data, dict), where, f"expected a JSON object, got {_short(data)}")
    missing, extra = keys - set(data), set(data) - keys
    _expect(not missing, where, f"missing field(s) {', '.join(sorted(missing))}")
    _expect(not extra, where, f"unknown field(s) {', '.join(sorted(map(str, extra)))}")


def _instr_from_json(data: Any, where: str) -> Instr:
    _expect(isinstance(data, dict), where, f"expected a JSON object, got {_short(data)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in INSTRUCTIONS:
        _fail(
            where,
            f"unknown instruction kind {_short(kind)}; known kinds: {', '.join(INSTRUCTIONS)}",
        )
    cls = INSTRUCTIONS[kind]
    _expect_keys(data, {"kind", *cls.schema}, f"{where} ({kind})")
    kw: dict[str, Any] = {}
    try:
        for name, ftype in cls.schema.items():
            value = data[name]
            if ftype == "args":
                _expect(isinstance(value, list), where, f"field {name!r} must be a list")
                value = [_arg_from_json(a) for a in value]
            elif ftype == "kwargs":
                _expect(isinstance(value, dict), where, f"field {name!r} must be an object")
                value = {k: _arg_from_json(v) for k, v in value.items()}
            elif ftype == "shape":
                _expect(isinstance(value, list), where, f"field {name!r} must be a list")
            kw[name] = value
        return cls(**kw)
    except ExecutableFormatError as e:
        msg = str(e)
        raise ExecutableFormatError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    except TypeError as e:
        raise ExecutableFormatError(f"{where}: {e}") from None


def _function_from_json(data: Any, where: str) -> VMFunction:
    _expect_keys(data, _FUNCTION_KEYS, where)
    where = f"{where} ({_short(data['name'])})"
    _expect(isinstance(data["params"], list), where, "params must be a list")
    _expect(isinstance(data["instructions"], list), where, "instructions must be a list")
    params = []
    for i, p in enumerate(data["params"]):
        _expect_keys(p, _PARAM_KEYS, f"{where} parameter {i}")
        shape = p["shape"]
        _expect(
            shape is None or isinstance(shape, list),
            f"{where} parameter {i}",
            "shape must be a list or null",
        )
        params.append(ParamSig(p["name"], p["kind"], shape, p["dtype"]))
    instructions = [
        _instr_from_json(ins, f"{where}, pc {pc}") for pc, ins in enumerate(data["instructions"])
    ]
    return VMFunction(data["name"], params, data["num_registers"], instructions)


class _Budget:
    """What is left of ``max_inflated_bytes`` (:mod:`plait.runtime.limits`) while an archive's
    members are read: a member is never inflated past it, whatever its header says."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.allowed = current_limits().max_inflated_bytes
        self.used = 0
        if self.allowed is not None:   # the declared sizes first: refuse before inflating
            check_limit("max_inflated_bytes", sum(i.file_size for i in zf.infolist()),
                        "the executable's members declare")

    def take(self, name: str, n: int) -> int:
        """Count ``n`` more bytes of member ``name``; the bytes that may still be read."""
        self.used += n
        if self.allowed is None:
            return 1 << 62
        if self.used > self.allowed:
            raise LimitExceeded("max_inflated_bytes", self.used, self.allowed,
                                f"member {name!r}: the executable's members inflate to "
                                "at least")
        return self.allowed - self.used


def _read_member(zf: zipfile.ZipFile, name: Any, budget: _Budget | None = None) -> bytearray:
    """A member's bytes, inflated straight into one buffer of its declared size (an
    array made from it is a view, not a copy); zipfile checks the size and CRC.  The
    declared size is counted against ``budget`` (``max_inflated_bytes``) before the
    buffer is made, and no more than it is ever read."""
    _expect(isinstance(name, str), "manifest", f"member name must be a string, got {_short(name)}")
    try:
        info = zf.getinfo(name)
        if budget is not None:
            budget.take(name, info.file_size)
        buf = bytearray(info.file_size)
        view = memoryview(buf)
        with zf.open(info) as f:
            got = 0
            while got < len(buf):
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            if got != len(buf) or f.read(1):
                raise ExecutableFormatError(f"member {name!r} does not hold the "
                                            f"{info.file_size} bytes its entry declares")
        return buf
    except KeyError:
        raise ExecutableFormatError(f"the archive has no member {name!r}") from None
    except (ExecutableFormatError, LimitExceeded):
        raise
    except Exception as e:  # CRC errors, bad compression, encryption, truncation
        raise ExecutableFormatError(f"cannot read member {name!r}: {e}") from None


def _member(blobs: dict[str, bytes], name: Any, where: str) -> bytes:
    """A member's (verified) bytes, by the name the manifest gives."""
    _expect(isinstance(name, str), where, f"member name must be a string, got {_short(name)}")
    if name not in blobs:
        raise ExecutableFormatError(f"{where}: the archive has no member {name!r}")
    return blobs[name]


def _npy_head(data: bytes | bytearray) -> bytes:
    """The magic string and header of the ``.npy`` bytes ``data`` (all of ``data`` when
    it is too short to say: reading the header then reports what is wrong)."""
    if len(data) >= 12 and data[:6] == b"\x93NUMPY":
        if data[6] == 1:
            return bytes(data[:10 + int.from_bytes(data[8:10], "little")])
        if data[6] in (2, 3):
            return bytes(data[:12 + int.from_bytes(data[8:12], "little")])
    return bytes(data[:4096])


def _read_array(data: bytes | bytearray, member: str, where: str) -> np.ndarray:
    """The ``.npy`` array in ``data``: a view of ``data`` (no copy) when C-ordered."""
    try:
        f = io.BytesIO(_npy_head(data))  # the header only: BytesIO copies what it is given
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except Exception as e:
        raise ExecutableFormatError(
            f"{where}: member {member!r} is not a .npy array without Python objects: {e}"
        ) from None
    if dtype.hasobject or dtype.kind not in _ARRAY_KINDS:
        _fail(where, f"dtype {dtype} is not allowed (numeric and bool only)")
    count = 1
    for d in shape:
        count *= d
    offset = f.tell()
    if len(data) - offset != count * dtype.itemsize:
        _fail(where, f"member {member!r} holds {len(data) - offset} bytes of data, but its "
                     f"header says {shape} {dtype} ({count * dtype.itemsize} bytes)")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    array = array.reshape(shape[::-1]).T if fortran else array.reshape(shape)
    return _c_order(array)


def _check_header(manifest: Any) -> None:
    _expect(isinstance(manifest, dict), _MANIFEST, "expected a JSON object")
    _expect(
        manifest.get("format") == FORMAT_NAME,
        _MANIFEST,
        f"format is {_short(manifest.get('format'))}, expected {FORMAT_NAME!r}",
    )
    if "version" not in manifest:
        _fail(_MANIFEST, "missing format version")
    if manifest["version"] == 1:
        _fail(_MANIFEST, "format version 1 (written by an older plait) records no digests of "
                         "its members, so it cannot be checked; build the model again")
    if manifest["version"] != FORMAT_VERSION:
        _fail(
            _MANIFEST,
            f"unsupported format version {_short(manifest['version'])} "
            f"(this plait reads version {FORMAT_VERSION})",
        )
    _expect_keys({k: v for k, v in manifest.items() if k not in _OPTIONAL_KEYS},
                 _MANIFEST_KEYS, _MANIFEST)
    for key in ("functions", "constants", "libs"):
        _expect(isinstance(manifest[key], list), _MANIFEST, f"{key} must be a list")
    digests = manifest["members"]
    _expect(isinstance(digests, dict), _MANIFEST, "members must be an object")
    for name, digest in digests.items():
        _expect(
            name not in (_MANIFEST, SIGNATURES_MEMBER) and isinstance(digest, str)
            and _DIGEST.fullmatch(digest) is not None,
            f"{_MANIFEST}: members",
            f"entry {_short(name)}: {_short(digest)} is not a SHA-256 in lowercase hex",
        )


def _verified_members(zf: zipfile.ZipFile, digests: dict[str, str],
                      lazy: frozenset[str] = frozenset(),
                      budget: _Budget | None = None) -> dict[str, bytes]:
    """Every member the manifest lists, read once and checked against its digest, but
    those in ``lazy`` (read and checked when used); the archive must hold exactly those
    (and the manifest and signatures)."""
    names = [info.filename for info in zf.infolist()]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ExecutableFormatError(f"the archive holds member {n!r} twice")
        seen.add(n)
    extra = sorted(seen - set(digests) - {_MANIFEST, SIGNATURES_MEMBER})
    if extra:
        raise ExecutableFormatError(
            f"the archive has member(s) the manifest does not list: {', '.join(map(repr, extra))}"
        )
    blobs: dict[str, bytes] = {}
    # one thread hashes each member while this one reads the next (hashlib and zlib let
    # go of the GIL on large buffers): loading costs about the longer of the two, not
    # their sum
    read: list[tuple[str, str, bytearray, Any]] = []
    with ThreadPoolExecutor(max_workers=1) as hasher:
        for name, want in digests.items():
            if name not in seen:
                raise ExecutableFormatError(
                    f"the archive has no member {name!r} (the manifest lists it)"
                )
            if name in lazy:
                continue
            data = _read_member(zf, name, budget)
            read.append((name, want, data, hasher.submit(sha256_hex, data)))
    for name, want, data, hashed in read:
        got = hashed.result()
        if got != want:
            raise ExecutableFormatError(
                f"member {name!r} was altered: its SHA-256 is {got[:16]}..., the manifest "
                f"records {want[:16]}... (the file was corrupted or edited after it was "
                "written; rebuild it or get it again from its source)"
            )
        blobs[name] = data
    return blobs


class _GraphConstants(Mapping[str, np.ndarray]):
    """The graph's constants of a loaded file, read from it when asked for: each time
    (nothing is kept), checked against the digest the manifest recorded; those equal to
    a constant of the executable are that array."""

    def __init__(self, reopen: Any, members: dict[str, str], digests: dict[str, str],
                 loaded: dict[str, np.ndarray]) -> None:
        self._reopen, self._members, self._digests = reopen, members, digests
        self._loaded = loaded

    def __getitem__(self, key: str) -> np.ndarray:
        member = self._members[key]
        if member in self._loaded:
            return self._loaded[member]
        try:
            with self._reopen() as f, zipfile.ZipFile(f) as zf:
                data = _read_member(zf, member)
        except OSError as e:
            raise ExecutableFormatError(f"cannot read the graph's constant {member!r} from "
                                        f"the file: {e}") from None
        except zipfile.BadZipFile:
            data = None
        if data is None or sha256_hex(data) != self._digests[member]:
            raise ExecutableFormatError(
                f"the graph's constant {member!r} differs from what the file held when it "
                "was loaded (the file was changed or replaced since): load it again")
        return _read_array(data, member, f"the graph's constant {key}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def _graph_constants_of(manifest: dict[str, Any], constants: dict[str, np.ndarray],
                        reopen: Any) -> Mapping[str, np.ndarray]:
    table = manifest.get("graph_constants", {})
    _expect(isinstance(table, dict) and all(
        isinstance(k, str) and isinstance(m, str) and m in manifest["members"]
        for k, m in table.items()), _MANIFEST,
        "graph_constants must map keys to members the manifest lists")
    if not table:
        return {}
    return _GraphConstants(reopen, dict(table), manifest["members"], constants)


def _lazy_members(manifest: dict[str, Any]) -> frozenset[str]:
    """The members read only when used: the graph's own constants."""
    table = manifest.get("graph_constants")
    if not isinstance(table, dict):
        return frozenset()
    used = set(manifest["constants"]) if isinstance(manifest.get("constants"), list) else set()
    return frozenset(m for m in table.values() if isinstance(m, str) and m not in used)


def _read_zip(
    fileobj: Any, trusted_keys: Iterable[Any], allow_native: bool, source: str,
    reopen: Any = None,
) -> Executable:
    try:
        zf = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        raise ExecutableFormatError(
            "not a plait executable: the file is not a zip archive"
        ) from None
    except Exception as e:  # NotImplementedError for an unknown zip version, ...
        raise ExecutableFormatError(
            f"not a plait executable: the zip archive is damaged or of an unsupported "
            f"kind ({type(e).__name__}: {e})"
        ) from None
    with zf:
        names = set(zf.namelist())
        if _MANIFEST not in names:
            raise ExecutableFormatError(f"not a plait executable: no {_MANIFEST} in the archive")
        budget = _Budget(zf)
        raw = _read_member(zf, _MANIFEST, budget)
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ExecutableFormatError(f"{_MANIFEST} is not valid JSON: {e}") from None
        _check_header(manifest)
        blobs = _verified_members(zf, manifest["members"], _lazy_members(manifest), budget)
        signed = (_read_member(zf, SIGNATURES_MEMBER, budget) if SIGNATURES_MEMBER in names
                  else None)
    try:
        signer, mismatch = verify(raw, signed, trusted_keys)
    except ValueError as e:
        raise ExecutableFormatError(str(e)) from None
    if mismatch is not None:
        raise SignatureError(mismatch)
    functions: dict[str, VMFunction] = {}
    for i, data in enumerate(manifest["functions"]):
        fn = _function_from_json(data, f"{_MANIFEST}: functions[{i}]")
        _expect(
            isinstance(fn.name, str) and fn.name not in functions,
            _MANIFEST,
            f"function name {_short(fn.name)} is invalid or duplicated",
        )
        functions[fn.name] = fn
    constants = []
    by_member: dict[str, np.ndarray] = {}
    for i, m in enumerate(manifest["constants"]):
        where = f"constant {i}"
        constants.append(_read_array(_member(blobs, m, where), m, where))
        by_member[m] = constants[-1]
    attrs = decode_value(manifest["attrs"], allow_dict=True)
    _expect(isinstance(attrs, dict), _MANIFEST, "attrs must be an object")
    libs: dict[str, bytes] = {}
    lib_digests: dict[str, str] = {}
    for i, entry in enumerate(manifest["libs"]):
        where = f"{_MANIFEST}: libs[{i}]"
        _expect_keys(entry, {"name", "member"}, where)
        _expect(
            isinstance(entry["name"], str) and entry["name"] not in libs,
            where,
            "library name is invalid or duplicated",
        )
        libs[entry["name"]] = bytes(_member(blobs, entry["member"], where))
        lib_digests[entry["name"]] = manifest["members"][entry["member"]]
    graph = None
    if manifest["graph"] is not None:
        data = _member(blobs, manifest["graph"], f"{_MANIFEST}: graph")
        try:
            graph = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ExecutableFormatError(f"the graph member is not UTF-8 text: {e}") from None
    raw_external = manifest.get("external", [])
    _expect(isinstance(raw_external, list), _MANIFEST, "external must be a list")
    external = [_external_from_json(blobs, m, f"{_MANIFEST}: external[{i}]")
                for i, m in enumerate(raw_external)]
    trust = Trust("file", signer, bool(allow_native), source)
    graph_constants = _graph_constants_of(manifest, by_member, reopen) if graph else {}
    return Executable(functions, constants, attrs, libs, graph, trust, lib_digests, external,
                      graph_constants)


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GRAPH_MEMBER",
    "INSTRUCTIONS",
    "PARAM_KINDS",
    "AllocStorage",
    "AllocTensor",
    "Arg",
    "Call",
    "Const",
    "Executable",
    "ExecutableFormatError",
    "Goto",
    "If",
    "Imm",
    "Instr",
    "Move",
    "ParamSig",
    "Reg",
    "Ret",
    "SignatureError",
    "VMFunction",
    "decode_value",
    "encode_value",
    "instr_fields",
    "normalize_value",
]
