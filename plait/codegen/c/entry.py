"""Entry points: one exported C function that runs a sequence of the library's calls.

An :class:`EntryProgram` describes a whole graph function whose shapes are all static
as straight-line code over the library's own functions (kernels and user C functions):
its parameters (inputs, then outputs, in the uniform ABI of
:mod:`plait.runtime.native`), an optional *workspace* parameter (a ``uint8`` buffer
where the intermediate tensors live at fixed byte offsets), and the calls in order,
each with its arguments (a parameter, or a byte offset in the workspace) and the
values of the callee's size variables (known, since every shape is static).
:func:`emit_entry` turns it into::

    PLAIT_EXPORT int32_t plait_e_main(void* const* plait_args, const int64_t* plait_sizes) {
        char* const plait_ws = (char*)plait_args[6];
        int32_t plait_status;
        {   /* 0: gemm_3f2a */
            void* const a[4] = {plait_args[0], plait_args[1], plait_args[2], plait_ws + 0};
            if ((plait_status = plait_u_gemm_3f2a(a, plait_no_sizes)) != 0) return plait_status;
        }
        ...
        return 0;
    }

The function keeps no state between calls (the caller passes the workspace), so it is
as safe to call from several threads at once as the calls it makes.  It is exported
with its own manifest entry, so the runtime calls it like any other native function.

**Symbolic sizes.**  A function of symbolic shapes (a dynamic batch or sequence) has
an entry point too: its parameters' shapes name the sizes (``("batch", "seq", 768)``),
and the workspace offsets and the callees' sizes are size expressions over them
(:mod:`plait.ir.symbolic`), written as C (:func:`~plait.codegen.c.sizes.c_dim`) over the
values the runtime binds from the arguments (``plait_sizes``, in the order of
:meth:`EntryProgram.size_vars`): the one native call runs every size.  A dimension of
a parameter that is an expression (the workspace's ``batch * 4014080`` bytes) is bound
to a variable of its own, which the runtime checks against the buffer and the entry
point does not need.

A *timed* program (``EntryProgram(..., timed=True)``, from the ``c`` target's
``step_timing`` attribute) also reads the monotonic clock before each call and after
the last one, into a thread-local array that the exported function
``<symbol>_step_times`` returns (``len(steps) + 1`` doubles, seconds: the times of the
calling thread's last call).  The manifest entry names that function
(``"step_times"``) and the steps' callees (``"steps"``), so the runtime can give each
call's time inside the one native call (:meth:`VirtualMachine.profile_steps`), where
the VM path's per-call profile also counts Python between the calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plait.errors import PlaitError
from plait.ir import symbolic as sym

from .sizes import C_PRELUDE, UnboundSize, c_dim

ENTRY_PREFIX = "plait_e_"
"""The prefix of entry points' C symbols."""

STEP_TIMES_SUFFIX = "_step_times"
"""The suffix of the C symbol returning a timed entry point's step times."""


def _dim(d: Any) -> sym.Dim:
    """A size of a program: an int, a name, an expression, or an expression's text
    (how :meth:`EntryProgram.as_literal` writes one)."""
    if type(d) is str and not d.isidentifier():
        return sym.parse_dim(d)
    if isinstance(d, bool) or not sym.is_dim(d):
        return int(d)
    return d


def _lit(d: sym.Dim) -> int | str:
    return d if type(d) is int or type(d) is str else str(d)


@dataclass(frozen=True)
class EntryStep:
    """One call of an entry point: ``callee`` (a function of the library) with ``args``
    — ``("param", i)`` for parameter ``i`` of the entry point, ``("workspace", offset)``
    for the workspace's bytes from ``offset`` (an int, or a size expression) — and the
    values of the callee's size variables (ints, or size expressions)."""

    callee: str
    args: tuple[tuple[str, Any], ...]
    sizes: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(
            (str(k), int(v) if k == "param" else _dim(v)) for k, v in self.args))
        object.__setattr__(self, "sizes", tuple(_dim(s) for s in self.sizes))


@dataclass(frozen=True)
class EntryProgram:
    """A straight-line program of library calls, exported as the library function
    ``name``.  ``params`` are ``(name, shape, dtype)`` (inputs first, then the
    ``num_outputs`` outputs); ``workspace`` is the index of the ``uint8`` parameter the
    ``("workspace", offset)`` arguments point into (None when there is none)."""

    name: str
    params: tuple[tuple[str, tuple[Any, ...], str], ...]
    num_outputs: int
    steps: tuple[EntryStep, ...]
    workspace: int | None = None
    doc: str = ""
    timed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(
            (str(n), tuple(_dim(d) for d in s), str(t)) for n, s, t in self.params))
        object.__setattr__(self, "steps", tuple(self.steps))

    def size_vars(self) -> tuple[list[str], dict[Any, str]]:
        """The names the parameters' shapes bind (in order of first appearance: the
        entry point's ``plait_sizes``), and a variable name for every dimension that
        is an expression (``plait_ex<i>``, bound after them, checked by the runtime
        but not used)."""
        names: list[str] = []
        exprs: dict[Any, str] = {}
        for _, shape, _ in self.params:
            for d in shape:
                if type(d) is str and d not in names:
                    names.append(d)
        for _, shape, _ in self.params:
            for d in shape:
                if type(d) is sym.SymExpr and d not in exprs:
                    exprs[d] = f"plait_ex{len(exprs)}"
        return names, exprs

    def as_literal(self) -> dict[str, Any]:
        """The program as a literal dict (tuples, ints and strings only, a size
        expression as its text; ``timed`` only when set)."""
        params = tuple((n, tuple(_lit(d) for d in s), t) for n, s, t in self.params)
        steps = tuple((s.callee, tuple((k, v if k == "param" else _lit(v)) for k, v in s.args),
                       tuple(_lit(z) for z in s.sizes)) for s in self.steps)
        out = {"name": self.name, "params": params, "num_outputs": self.num_outputs,
               "workspace": self.workspace, "doc": self.doc, "steps": steps}
        if self.timed:
            out["timed"] = True
        return out

    @classmethod
    def from_literal(cls, lit: Mapping[str, Any]) -> EntryProgram:
        """The program of a dict made by :meth:`as_literal`."""
        steps = tuple(EntryStep(c, tuple(a), tuple(z)) for c, a, z in lit["steps"])
        return cls(lit["name"], tuple(lit["params"]), int(lit["num_outputs"]), steps,
                   lit.get("workspace"), lit.get("doc", ""), bool(lit.get("timed", False)))

    def manifest_entry(self, symbol: str) -> dict[str, Any]:
        """The entry point's description in the library manifest."""
        names, exprs = self.size_vars()
        out: dict[str, Any] = {
            "name": self.name, "symbol": symbol, "num_outputs": self.num_outputs,
            "params": [{"name": n, "shape": [exprs.get(d, d) for d in s], "dtype": t}
                       for n, s, t in self.params],
            "size_vars": [*names, *exprs.values()]}
        if self.timed:
            out["step_times"] = symbol + STEP_TIMES_SUFFIX
            out["steps"] = [s.callee for s in self.steps]
        return out


class EntryError(PlaitError, ValueError):
    """An entry program that cannot be emitted (it calls a function the library does
    not have, or an argument is out of range); the message names the step."""


def _check(program: EntryProgram, symbols: Mapping[str, str]) -> None:
    n = len(program.params)
    where = f"entry point {program.name!r}"
    if not 0 <= program.num_outputs <= n:
        raise EntryError(f"{where}: num_outputs {program.num_outputs} out of range")
    ws = program.workspace
    if ws is not None and not (0 <= ws < n and program.params[ws][2] == "uint8"
                               and len(program.params[ws][1]) == 1):
        raise EntryError(f"{where}: the workspace must be a 1-D uint8 parameter")
    ws_bytes = program.params[ws][1][0] if ws is not None else 0
    for i, step in enumerate(program.steps):
        at = f"{where}, step {i} ({step.callee})"
        if step.callee not in symbols:
            raise EntryError(f"{at}: the library has no function {step.callee!r}")
        for kind, v in step.args:
            if kind == "param" and not 0 <= v < n:
                raise EntryError(f"{at}: parameter {v} out of range (0..{n - 1})")
            if kind == "workspace" and (ws is None or (
                    type(v) is int and type(ws_bytes) is int and not 0 <= v <= ws_bytes)):
                raise EntryError(f"{at}: workspace offset {v} out of range")
            if kind not in ("param", "workspace"):
                raise EntryError(f"{at}: unknown argument kind {kind!r}")


def emit_entry(program: EntryProgram, symbol: str, symbols: Mapping[str, str]) -> str:
    """The C function ``symbol`` running ``program``; ``symbols`` maps the library's
    function names to their C symbols (all with the uniform ABI)."""
    _check(program, symbols)
    doc = re.sub(r"\*/", "* /", program.doc or f"entry point {program.name}")
    n = len(program.steps)
    clock = f"{symbol}_clock"
    lines = []
    if program.timed:   # the clock before each step and after the last (thread-local)
        lines += ["#include <time.h>",
                  f"static _Thread_local double {clock}[{n + 1}];",
                  f"PLAIT_EXPORT const double* {symbol}{STEP_TIMES_SUFFIX}(void) "
                  f"{{ return {clock}; }}",
                  f"static inline double {clock}_now(void) {{",
                  "    struct timespec t;",
                  "    clock_gettime(CLOCK_MONOTONIC, &t);",
                  "    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;",
                  "}"]
    names, _ = program.size_vars()
    cnames = {d: f"plait_s{k}" for k, d in enumerate(names)}
    if names:
        lines.append(C_PRELUDE)
    lines += [f"/* {doc} */",
             f"PLAIT_EXPORT int32_t {symbol}(void* const* plait_args, "
             "const int64_t* plait_sizes) {",
             "    static const int64_t plait_no_sizes[1] = {0};",
             "    int32_t plait_status;",
             "    (void)plait_sizes; (void)plait_no_sizes; (void)plait_status;"]
    for k, d in enumerate(names):
        lines.append(f"    const int64_t {cnames[d]} = plait_sizes[{k}];   /* {_comment(d)} */")

    def c(d: sym.Dim, what: str) -> str:
        try:
            return c_dim(d, cnames)
        except UnboundSize as e:
            raise EntryError(f"entry point {program.name!r}: {what} names the size {e}, which "
                             "no parameter's shape binds") from None

    if program.workspace is not None:
        lines.append(f"    char* const plait_ws = (char*)plait_args[{program.workspace}];")
    for i, step in enumerate(program.steps):
        args = [f"plait_args[{v}]" if kind == "param"
                else f"(void*)(plait_ws + {c(v, f'step {i}: a workspace offset')})"
                for kind, v in step.args]
        if program.timed:
            lines.append(f"    {clock}[{i}] = {clock}_now();")
        lines.append(f"    {{   /* {i}: {re.sub(r'[*]/', '* /', step.callee)} */")
        argv = "a"
        if args:
            lines.append(f"        void* const a[{len(args)}] = {{{', '.join(args)}}};")
        else:
            argv = "(void* const*)0"
        sizes = "plait_no_sizes"
        if step.sizes and all(type(z) is int for z in step.sizes):
            lines.append(f"        static const int64_t z[{len(step.sizes)}] = "
                         f"{{{', '.join(f'INT64_C({s})' for s in step.sizes)}}};")
            sizes = "z"
        elif step.sizes:
            values = ", ".join(c(z, f"step {i}: a size") for z in step.sizes)
            lines.append(f"        const int64_t z[{len(step.sizes)}] = {{{values}}};")
            sizes = "z"
        lines.append(f"        if ((plait_status = {symbols[step.callee]}({argv}, {sizes})) "
                     "!= 0) return plait_status;")
        lines.append("    }")
    if program.timed:
        lines.append(f"    {clock}[{n}] = {clock}_now();")
    lines += ["    return 0;", "}"]
    return "\n".join(lines)


def _comment(d: str) -> str:
    return re.sub(r"[*]/", "* /", d)


__all__ = ["ENTRY_PREFIX", "STEP_TIMES_SUFFIX", "EntryError", "EntryProgram", "EntryStep",
           "emit_entry"]
