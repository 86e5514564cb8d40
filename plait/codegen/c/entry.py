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

ENTRY_PREFIX = "plait_e_"
"""The prefix of entry points' C symbols."""

STEP_TIMES_SUFFIX = "_step_times"
"""The suffix of the C symbol returning a timed entry point's step times."""


@dataclass(frozen=True)
class EntryStep:
    """One call of an entry point: ``callee`` (a function of the library) with ``args``
    — ``("param", i)`` for parameter ``i`` of the entry point, ``("workspace", offset)``
    for the workspace's bytes from ``offset`` — and the callee's size variables."""

    callee: str
    args: tuple[tuple[str, int], ...]
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple((str(k), int(v)) for k, v in self.args))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))


@dataclass(frozen=True)
class EntryProgram:
    """A straight-line program of library calls, exported as the library function
    ``name``.  ``params`` are ``(name, shape, dtype)`` (inputs first, then the
    ``num_outputs`` outputs); ``workspace`` is the index of the ``uint8`` parameter the
    ``("workspace", offset)`` arguments point into (None when there is none)."""

    name: str
    params: tuple[tuple[str, tuple[int, ...], str], ...]
    num_outputs: int
    steps: tuple[EntryStep, ...]
    workspace: int | None = None
    doc: str = ""
    timed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(
            (str(n), tuple(int(d) for d in s), str(t)) for n, s, t in self.params))
        object.__setattr__(self, "steps", tuple(self.steps))

    def as_literal(self) -> dict[str, Any]:
        """The program as a literal dict (tuples, ints and strings only; ``timed`` only
        when set)."""
        out = {"name": self.name, "params": self.params, "num_outputs": self.num_outputs,
               "workspace": self.workspace, "doc": self.doc,
               "steps": tuple((s.callee, s.args, s.sizes) for s in self.steps)}
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
        out: dict[str, Any] = {
            "name": self.name, "symbol": symbol, "num_outputs": self.num_outputs,
            "params": [{"name": n, "shape": list(s), "dtype": t} for n, s, t in self.params],
            "size_vars": []}
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
            if kind == "workspace" and (ws is None or not 0 <= v <= ws_bytes):
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
    lines += [f"/* {doc} */",
             f"PLAIT_EXPORT int32_t {symbol}(void* const* plait_args, "
             "const int64_t* plait_sizes) {",
             "    static const int64_t plait_no_sizes[1] = {0};",
             "    int32_t plait_status;",
             "    (void)plait_sizes; (void)plait_no_sizes; (void)plait_status;"]
    if program.workspace is not None:
        lines.append(f"    char* const plait_ws = (char*)plait_args[{program.workspace}];")
    for i, step in enumerate(program.steps):
        args = [f"plait_args[{v}]" if kind == "param" else f"(void*)(plait_ws + {v})"
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
        if step.sizes:
            lines.append(f"        static const int64_t z[{len(step.sizes)}] = "
                         f"{{{', '.join(f'INT64_C({s})' for s in step.sizes)}}};")
            sizes = "z"
        lines.append(f"        if ((plait_status = {symbols[step.callee]}({argv}, {sizes})) "
                     "!= 0) return plait_status;")
        lines.append("    }")
    if program.timed:
        lines.append(f"    {clock}[{n}] = {clock}_now();")
    lines += ["    return 0;", "}"]
    return "\n".join(lines)


__all__ = ["ENTRY_PREFIX", "STEP_TIMES_SUFFIX", "EntryError", "EntryProgram", "EntryStep",
           "emit_entry"]
