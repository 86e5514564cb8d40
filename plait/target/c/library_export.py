"""A built module's entry point as a C library (``plait.export_library``'s c-target half).

:func:`export_built_module` takes a module the ``c`` pipeline has built (so
``c.SingleEntry`` has given its function an entry point) and writes the function's
C library (:mod:`plait.codegen.c.model_library`): the entry program, the constants the
entry point takes (its weights, each 64-byte aligned), the inputs (the function's
parameters) and outputs (what it returns, in order) with their symbolic sizes and the
module's ``dim_ranges``.

A function that has no entry point cannot be exported: :class:`LibraryExportError`
says why (the reason ``c.SingleEntry`` recorded: a call of a packed function run by
Python, control flow, a size only known at run time ...), and so does a function that
returns one of its inputs or a constant unchanged (the library writes every output).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.codegen.c.c_api import WEIGHTS_ALIGN, ApiModel, ApiTensor
from plait.codegen.c.entry import EntryProgram
from plait.codegen.c.model_library import ModelLibrary, write_model_library
from plait.errors import PlaitError
from plait.ir.expr import Call, Constant, ExternFunc, Function, SeqExpr, Tuple, Var
from plait.ir.facts import DIM_RANGES, check_dim_ranges
from plait.ir.module import IRModule

from .build import ENTRIES_ATTR, c_sources, module_kernels, target_options
from .entry import REPORT_KEY, SingleEntry


class LibraryExportError(PlaitError, ValueError):
    """A model that cannot be exported as a C library; the message names the function
    and what stops it."""


def library_name(name: str) -> str:
    """``name`` as a C identifier (the prefix of the API and the library's name)."""
    out = re.sub(r"\W", "_", name.strip())
    if not out or out[0].isdigit():
        out = "m_" + out
    return out


def _entry_call(fn: Function, native: str) -> Call:
    body = fn.body
    if isinstance(body, SeqExpr):
        for block in body.blocks:
            for b in block.bindings:
                v = b.value
                if (isinstance(v, Call) and len(v.args) == 3
                        and isinstance(v.args[0], ExternFunc) and v.args[0].symbol == native):
                    return v
    raise LibraryExportError(f"the entry function has no call of {native!r}")


def _flatten(e: Any) -> list[Any]:
    out: list[Any] = []
    stack = [e]
    while stack:
        v = stack.pop()
        if isinstance(v, Tuple):
            stack.extend(reversed(v.fields))
        else:
            out.append(v)
    return out


def _weights(constants: Sequence[Constant]) -> tuple[bytes, tuple[int, ...]]:
    blob = bytearray()
    offsets = []
    for c in constants:
        blob.extend(bytes(-len(blob) % WEIGHTS_ALIGN))
        offsets.append(len(blob))
        blob.extend(np.ascontiguousarray(c.data).tobytes())
    return bytes(blob), tuple(offsets)


def _report(mod: IRModule, function: str) -> dict[str, Any] | None:
    """``c.SingleEntry``'s report on ``function`` (None: not analyzed)."""
    return ((mod.attrs.get("runtime_attrs") or {}).get(REPORT_KEY) or {}).get(function)


def export_built_module(
    mod: IRModule,
    out_dir: str | os.PathLike[str],
    name: str,
    *,
    function: str = "main",
    weights: str = "embed",
    output_names: Sequence[str] | None = None,
    api_flags: Sequence[str] = (),
) -> ModelLibrary:
    """Write the C library of ``function`` of the built module ``mod`` into ``out_dir``
    (``weights``: ``"embed"`` in the library, or ``"file"``: ``<name>.weights`` beside
    it, mapped at load time; ``api_flags``: compiler flags of the API's C file and the
    link, :func:`~plait.codegen.c.model_library.write_model_library`).  Raises
    :class:`LibraryExportError`."""
    if weights not in ("embed", "file"):
        raise LibraryExportError(f"weights={weights!r}: use 'embed' (inside the library) or "
                                 "'file' (a side file <name>.weights mapped at load time)")
    where = f"function {function!r}"
    report = _report(mod, function)
    if report is not None and "reason" in report:
        # a function of one native call has no entry point on the VM (it saves nothing
        # there); a library runs nothing else
        mod = SingleEntry(min_calls=1)(mod)
        report = _report(mod, function)
    if report is None:
        raise LibraryExportError(
            f"{where}: the module has no such function built for the c target with native "
            "code (export a model built for 'c', whose function makes native calls)")
    if "reason" in report:
        raise LibraryExportError(
            f"{where} cannot be a C library: it does not run as one native entry point "
            f"({report['reason']}); only a function whose calls are all native, without "
            "control flow, can be exported")
    literal = next((p for p in mod.attrs.get(ENTRIES_ATTR) or () if p["name"] ==
                    report["native"]), None)
    if literal is None:
        raise LibraryExportError(f"{where}: its entry program {report['native']!r} is not in "
                                 "the module")
    program = EntryProgram.from_literal(literal)
    call = _entry_call(mod[report["entry"]], program.name)  # type: ignore[arg-type]
    ins, outs = call.args[1], call.args[2]
    assert isinstance(ins, Tuple) and isinstance(outs, Tuple)
    entry_fn = mod[report["entry"]]
    assert isinstance(entry_fn, Function)
    n_in = len(entry_fn.params)
    constants = [c for c in ins.fields[n_in:] if isinstance(c, Constant)]
    if len(constants) != len(ins.fields) - n_in:
        raise LibraryExportError(f"{where}: its entry point takes arguments that are neither "
                                 "inputs nor constants")
    first_out = n_in + len(constants)
    out_params = {o: first_out + j for j, o in enumerate(outs.fields) if isinstance(o, Var)}
    body = entry_fn.body
    assert isinstance(body, SeqExpr)
    returned = _flatten(body.body)
    params: list[int] = []
    for k, r in enumerate(returned):
        if not isinstance(r, Var) or r not in out_params:
            what = "a constant" if isinstance(r, Constant) else "one of its inputs"
            raise LibraryExportError(f"{where}: output {k} is {what}, returned unchanged; the "
                                     "library writes each output (return a copy instead)")
        if out_params[r] in params:
            raise LibraryExportError(f"{where}: output {k} is the same tensor as an earlier "
                                     "output")
        params.append(out_params[r])
    names = list(output_names or ())
    if names and len(names) != len(params):
        raise LibraryExportError(f"{where}: {len(names)} output name(s) given for its "
                                 f"{len(params)} outputs")
    names += [f"output{k}" for k in range(len(names), len(params))]
    blob, offsets = _weights(constants)
    inputs = tuple(ApiTensor(n, s, t) for n, s, t in program.params[:n_in])
    outputs = tuple(ApiTensor(names[k], program.params[p][1], program.params[p][2])
                    for k, p in enumerate(params))
    ranges = check_dim_ranges(mod.attrs.get(DIM_RANGES) or {})
    cname = library_name(name)
    digest = hashlib.sha256(blob)
    digest.update(repr(literal).encode())
    api = ApiModel(cname, program, "", inputs, outputs, tuple(params), offsets, len(blob),
                   weights == "embed", digest.hexdigest()[:16], dict(ranges))
    options = target_options(mod)
    if options.pop("march_native", False):
        raise LibraryExportError("target attribute march_native=True: a library to ship runs "
                                 "on other machines; build without it")
    return write_model_library(module_kernels(mod), c_sources(mod), api, blob, out_dir,
                               api_flags=tuple(api_flags), **options)


__all__ = ["LibraryExportError", "export_built_module", "library_name"]
