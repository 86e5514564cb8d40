"""The VM's instruction set: arguments (:class:`Reg`, :class:`Const`, :class:`Imm`),
instructions (:class:`Call`, :class:`Ret`, :class:`Goto`, :class:`If`,
:class:`AllocStorage`, :class:`AllocTensor`, :class:`Move`; each with the field types of
its ``schema``), and the functions made of them (:class:`VMFunction`, its parameters'
:class:`ParamSig`).  Checked by :mod:`.exe_check`, written and read by :mod:`.exe_file`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from plait.runtime.exe_values import (
    ExecutableFormatError,
    decode_value,
    encode_value,
    normalize_value,
    short_repr,
)
from plait.runtime.sizes import is_name

PARAM_KINDS = ("tensor", "tuple", "prim", "shape", "object")


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


def arg_to_json(arg: Arg) -> dict[str, Any]:
    """The JSON form of an argument: ``{"reg": i}``, ``{"const": i}`` or ``{"imm": v}``."""
    if isinstance(arg, Reg):
        return {"reg": arg.index}
    if isinstance(arg, Const):
        return {"const": arg.index}
    return {"imm": encode_value(arg.value)}


def arg_from_json(data: Any) -> Arg:
    """The argument of a JSON form (:func:`arg_to_json`); raises
    :class:`ExecutableFormatError` on anything else."""
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
        f"malformed argument {short_repr(data)}; expected {{'reg': i}}, {{'const': i}} or "
        "{'imm': v}"
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


def instr_fields(ins: Instr) -> list[tuple[str, str, Any]]:
    """``(field name, field type, value)`` for each field of an instruction."""
    return [(f.name, ins.schema[f.name], getattr(ins, f.name)) for f in fields(ins)]


__all__ = ["INSTRUCTIONS", "PARAM_KINDS", "AllocStorage", "AllocTensor", "Arg", "Call", "Const",
           "Goto", "If", "Imm", "Instr", "Move", "ParamSig", "Reg", "Ret", "VMFunction",
           "arg_from_json", "arg_to_json", "instr_fields"]
