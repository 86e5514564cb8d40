"""The checks of an executable: every invariant the VM relies on (indices in range,
known instructions and dtypes, bound symbolic sizes, keyword arguments the called
function takes, ...), raised as :class:`~plait.runtime.exe_values.ExecutableFormatError`
naming the function, the instruction and the field."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from plait.runtime.call_schema import keyword_problem
from plait.runtime.exe_values import (
    ARRAY_KINDS,
    ExecutableFormatError,
    fail,
    normalize_value,
    short_repr,
)
from plait.runtime.external import ExternalModule
from plait.runtime.instructions import (
    INSTRUCTIONS,
    PARAM_KINDS,
    Call,
    Const,
    Goto,
    Imm,
    ParamSig,
    Reg,
    Ret,
    VMFunction,
    instr_fields,
)
from plait.runtime.sizes import SizeExprError, compile_size
from plait.runtime.trust import Trust

_MAX_SIZE = 2**63 - 1  # sizes are int64
_SPARE_REGISTERS = 1024


_HERE = "\x00here\x00"
"""A placeholder for the location of an instruction in a validation error, replaced by
the location when one is raised."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dtype(dtype: Any, where: str) -> None:
    if not isinstance(dtype, str):
        fail(where, f"dtype must be a string, got {short_repr(dtype)}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        fail(where, f"unknown dtype {dtype!r}")
    if dt.kind not in ARRAY_KINDS:
        fail(where, f"dtype {dtype!r} is not a numeric or bool dtype")


def _check_shape(shape: Any, where: str, symbols: list[str] | None = None) -> None:
    if not isinstance(shape, tuple | list):
        fail(where, f"shape must be a list of ints and names, got {short_repr(shape)}")
    for d in shape:
        if isinstance(d, str):
            if d.isidentifier():
                names: tuple[str, ...] = (d,)
            else:
                try:
                    names = compile_size(d)[0]
                except SizeExprError as e:
                    fail(where, str(e))
            for name in names:
                if symbols is not None and name not in symbols:
                    bound = ", ".join(symbols) or "none"
                    fail(where, f"symbolic size {name!r} is not bound by any parameter "
                          f"(bound: {bound})")
        elif not _is_int(d) or not 0 <= d <= _MAX_SIZE:
            fail(where, f"shape entry {short_repr(d)} is neither an int in [0, 2**63-1] nor a name")


def _check_param(p: Any, where: str) -> None:
    if not isinstance(p, ParamSig):
        fail(where, f"parameter must be a ParamSig, got {type(p).__name__}")
    if not isinstance(p.name, str) or not p.name:
        fail(where, f"parameter name must be a non-empty string, got {short_repr(p.name)}")
    where = f"{where} {p.name!r}"
    if p.kind not in PARAM_KINDS:
        fail(
            where,
            f"unknown parameter kind {short_repr(p.kind)}; expected one of "
            f"{', '.join(PARAM_KINDS)}",
        )
    if p.shape is not None:
        if p.kind not in ("tensor", "shape"):
            fail(where, f"a {p.kind} parameter has no shape")
        _check_shape(p.shape, where)
    if p.dtype is not None:
        if p.kind not in ("tensor", "prim"):
            fail(where, f"a {p.kind} parameter has no dtype")
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
            fail(where, str(e))
    else:
        fail(where, f"argument must be Reg, Const or Imm, got {type(arg).__name__}")


def _check_index(value: Any, limit: int, where: str, what: str, plural: str) -> None:
    if not _is_int(value):
        fail(where, f"{what} index must be an int, got {short_repr(value)}")
    if not 0 <= value < limit:
        owner = "function" if what == "register" else "executable"
        fail(where, f"{what} {value} out of range ({owner} has {limit} {plural})")


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
            fail(where, f"field {name!r} must be an int >= 0, got {short_repr(value)}")
    elif ftype == "func":
        if not isinstance(value, str) or not value:
            fail(where, f"field {name!r} must be a non-empty string, got {short_repr(value)}")
    elif ftype == "args":
        if not isinstance(value, list | tuple):
            fail(where, f"field {name!r} must be a list of arguments")
        for i, a in enumerate(value):
            _check_arg(a, f"{where} argument {i}", nreg, nconst)
    elif ftype == "kwargs":
        if not isinstance(value, dict):
            fail(where, f"field {name!r} must be a dict")
        for k, v in value.items():
            if not isinstance(k, str) or not k.isidentifier():
                fail(where, f"keyword {short_repr(k)} is not an identifier")
            if isinstance(v, Reg | Const):
                _check_arg(v, f"{where} keyword {k!r}", nreg, nconst)
            else:
                _check_kwarg(v, where, k)
    elif ftype == "shape":
        _check_shape(value, where, symbols)
    elif ftype == "size":
        if not isinstance(value, str | int) or isinstance(value, bool) or (
                isinstance(value, int) and value < 0):
            fail(where, f"field {name!r} must be an int >= 0 or a size expression, "
                  f"got {short_repr(value)}")
        _check_shape([value], f"{where} field {name!r}", symbols)
    elif ftype == "dtype":
        _check_dtype(value, where)


def _check_kwarg(value: Any, where: str, key: str) -> None:
    try:
        normalize_value(value, where=f"keyword argument {key!r}")
    except TypeError as e:
        fail(where, str(e))


def _describe(ins: Any) -> str:
    try:
        return str(ins)
    except Exception:  # a malformed field must not hide the real error
        return type(ins).__name__


def _check_function(fn: VMFunction, nconst: int, vm_functions: Collection[str] = ()) -> None:
    where = f"function {fn.name!r}"
    if not isinstance(fn.params, list | tuple):
        fail(where, "params must be a list of ParamSig")
    for p in fn.params:
        _check_param(p, f"{where} parameter")
    names = [p.name for p in fn.params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        fail(where, f"duplicate parameter name(s) {', '.join(map(repr, dup))}")
    most = len(fn.params) + len(fn.instructions) + _SPARE_REGISTERS
    if not _is_int(fn.num_registers) or not len(fn.params) <= fn.num_registers <= most:
        fail(
            where,
            f"num_registers must be an int >= the number of parameters "
            f"({len(fn.params)}) and at most {most} (each instruction defines at most one "
            f"register), got {short_repr(fn.num_registers)}",
        )
    if not isinstance(fn.instructions, list | tuple) or not fn.instructions:
        fail(where, "instructions must be a non-empty list")
    symbols = fn.symbols()
    for p in fn.params:   # a size expression of a parameter uses names others bind
        if p.shape is not None:
            _check_shape(p.shape, f"{where} parameter {p.name!r}", symbols)
    known = tuple(INSTRUCTIONS.values())
    for pc, ins in enumerate(fn.instructions):
        if type(ins) not in known:
            fail(f"{where}, pc {pc}", f"unknown instruction {type(ins).__name__}")
        # the location (which prints the instruction) is written only for an error: a
        # function of 65,535 instructions is checked in a fraction of the time
        try:
            for fname, ftype, value in instr_fields(ins):
                _check_field(ftype, fname, value, _HERE, fn, nconst, symbols)
            if isinstance(ins, Call) and ins.kwargs and ins.func not in vm_functions:
                problem = keyword_problem(ins.func, ins.kwargs)   # by the function's schema
                if problem:
                    fail(_HERE, problem)
        except ExecutableFormatError as e:
            at = f"{where}, pc {pc} (`{_describe(ins)}`)"
            raise ExecutableFormatError(str(e).replace(_HERE, at, 1)) from None
    if not isinstance(fn.instructions[-1], Ret | Goto):
        fail(where, "the last instruction must be ret or goto (execution would run off the end)")


def validate_executable(exe: Any) -> None:
    """Check every invariant of :class:`~plait.runtime.executable.Executable` ``exe``
    that the VM relies on; raise ``ExecutableFormatError`` naming the first broken one."""
    if not isinstance(exe.functions, dict):
        fail("executable", "functions must be a dict of name -> VMFunction")
    if not isinstance(exe.constants, list | tuple):
        fail("executable", "constants must be a list of numpy arrays")
    for i, c in enumerate(exe.constants):
        if not isinstance(c, np.ndarray):
            fail(f"constant {i}", f"must be a numpy array, got {type(c).__name__}")
        if c.dtype.hasobject or c.dtype.kind not in ARRAY_KINDS:
            fail(f"constant {i}", f"dtype {c.dtype} is not allowed (numeric and bool only)")
    for key, fn in exe.functions.items():
        if not isinstance(fn, VMFunction):
            fail(f"function {key!r}", f"must be a VMFunction, got {type(fn).__name__}")
        if fn.name != key:
            fail(
                f"function {key!r}",
                f"is stored under the name {key!r} but is named {short_repr(fn.name)}",
            )
        _check_function(fn, len(exe.constants), exe.functions)
    if not isinstance(exe.attrs, dict) or not all(isinstance(k, str) for k in exe.attrs):
        fail("executable", "attrs must be a dict with string keys")
    try:
        normalize_value(exe.attrs, allow_dict=True, where="attrs")
    except TypeError as e:
        fail("executable", str(e))
    if not isinstance(exe.libs, dict):
        fail("executable", "libs must be a dict of name -> bytes")
    for name, blob in exe.libs.items():
        if not isinstance(name, str) or not name:
            fail("executable", f"library name must be a non-empty string, got {short_repr(name)}")
        if not isinstance(blob, bytes | bytearray):
            fail(f"library {name!r}", f"must be bytes, got {type(blob).__name__}")
    if exe.graph is not None and not isinstance(exe.graph, str):
        fail("executable", f"graph must be text or None, got {type(exe.graph).__name__}")
    if not isinstance(exe.graph_constants, Mapping):
        fail("executable", "graph_constants must be a mapping of key -> numpy array, got "
                            f"{type(exe.graph_constants).__name__}")
    if not isinstance(exe.trust, Trust):
        fail("executable", f"trust must be a Trust, got {type(exe.trust).__name__}")
    _validate_external(exe)


def _validate_external(exe: Any) -> None:
    if not isinstance(exe.external, list | tuple):
        fail("executable", "external must be a list of ExternalModule")
    seen: dict[str, str] = {}
    for i, m in enumerate(exe.external):
        if not isinstance(m, ExternalModule):
            fail(f"external module {i}", f"must be an ExternalModule, got {type(m).__name__}")
        for f in m.functions:
            if f.name in exe.functions or f.name in seen:
                other = "a VM function" if f.name in exe.functions else \
                    f"the module of codegen {seen[f.name]!r}"
                fail(f"external module {i} (codegen {m.codegen!r})",
                      f"function {f.name!r} is also {other}")
            seen[f.name] = m.codegen


__all__ = ["validate_executable"]
