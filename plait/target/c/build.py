"""The ``c`` target's link hook: compile the module's kernels into one native library.

:class:`CompileKernels` (``c.CompileKernels``, the last pass of the build stage, after
``PlanMemory`` and ``c.SingleEntry``) collects every kernel of the module, the user C
sources recorded in the module attribute ``c_sources`` (:func:`add_c_source`) and the
entry points recorded in ``native_entries`` (:mod:`.entry`), compiles them with one
compiler run into one shared library (or takes it from the disk cache), and stores the
library's bytes in the module attribute ``native_libs`` under :data:`LIBRARY_NAME`.
The VM code generator embeds ``native_libs`` in the executable, whose calls of kernels
(and of the user C functions) then run the library's functions — on any machine,
compiler or not.
In the text format the library is referenced by its digest
(:mod:`plait.target.c.library_blob`).

The library is for the architecture the compiler builds for: with a cross compiler as
``$CC`` (``CC=aarch64-linux-gnu-gcc``) it is an aarch64 library, not loaded here, and
the executable runs on aarch64 machines (tests/target/test_native_aarch64.py runs one
under qemu); on this machine loading it says so.

Compiler options come from the target's attributes: ``opt_level`` (default 3),
``threads`` (None: when the compiler supports them), ``march_native`` (default False),
``out_of_range_indices`` ("raise", the default: a kernel's ``checked_index`` out of
range fails the call, as numpy and onnxruntime do; "clamp": clamped into the axis,
no check).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from plait.codegen.c import CFunction, CSource, EntryProgram, build_library
from plait.codegen.c.emit import CodegenError
from plait.codegen.c.variants import host_arch
from plait.ir.module import IRModule
from plait.kernel.ir import Kernel, Var
from plait.runtime.native import load_library
from plait.runtime.trust import register_code_attribute
from plait.transform.pass_base import module_pass

from .isas import build_isas
from .library_blob import LibraryBlob, store_library

_LOG = logging.getLogger("plait.target.c")

LIBRARY_NAME = "c"
"""The key of the compiled library in ``mod.attrs["native_libs"]``."""

C_SOURCES_ATTR = "c_sources"
"""The module attribute holding user C sources (as literal dicts, so the module
still prints and parses)."""

ENTRIES_ATTR = "native_entries"
"""The module attribute holding the entry points to compile into the library
(:class:`~plait.codegen.c.EntryProgram` s as literal dicts; ``c.SingleEntry`` adds
them)."""


register_code_attribute(C_SOURCES_ATTR, "C sources")
register_code_attribute(ENTRIES_ATTR, "native entry points")
register_code_attribute("native_libs", "compiled native libraries")


def _function_literal(f: CFunction) -> dict[str, Any]:
    params = tuple(
        (tuple(d.name_hint if isinstance(d, Var) else int(d) for d in b.shape), b.dtype)
        for b in f.params
    )
    return {"name": f.name, "params": params, "num_outputs": f.num_outputs,
            "symbol": f.c_symbol, "returns": f.returns, "abi": f.abi}


def source_literal(src: CSource) -> dict[str, Any]:
    """A user C source as a literal dict (what :data:`C_SOURCES_ATTR` holds)."""
    lit = {"name": src.name, "code": src.code,
           "functions": tuple(_function_literal(f) for f in src.functions)}
    if src.isas:
        lit["isas"] = src.isas
    return lit


_SOURCE_KEYS = ("name", "code", "functions")
_FUNCTION_KEYS = ("name", "params", "num_outputs", "symbol", "returns", "abi")


def source_from_literal(lit: Mapping[str, Any]) -> CSource:
    """The :class:`CSource` of a literal dict made by :func:`source_literal`.  A literal
    that is not one (a module attribute edited by hand, or by whoever changed a file's
    kept graph) raises :class:`~plait.codegen.c.emit.CodegenError` saying what lacks."""
    where = f"module attribute {C_SOURCES_ATTR!r}"
    if not isinstance(lit, Mapping) or any(k not in lit for k in _SOURCE_KEYS):
        raise CodegenError(f"{where}: a C source must be a dict with keys "
                           f"{', '.join(_SOURCE_KEYS)}, got {str(lit)[:80]}")
    if not isinstance(lit["functions"], Sequence) or isinstance(lit["functions"], str):
        raise CodegenError(f"{where}: source {lit['name']!r}: 'functions' must be a list")
    funcs = []
    for f in lit["functions"]:
        missing = [k for k in _FUNCTION_KEYS if not isinstance(f, Mapping) or k not in f]
        if missing:
            raise CodegenError(f"{where}: source {lit['name']!r}: a function lacks "
                               f"{', '.join(map(repr, missing))} (make sources with "
                               "add_c_source)")
        try:
            funcs.append(CFunction(f["name"], tuple((tuple(s), d) for s, d in f["params"]),
                                   f["num_outputs"], f["symbol"], f["returns"], f["abi"]))
        except (TypeError, ValueError) as e:
            raise CodegenError(f"{where}: source {lit['name']!r}: function "
                               f"{str(f.get('name'))[:40]!r}: {e}") from None
    try:
        return CSource(lit["code"], tuple(funcs), lit["name"], tuple(lit.get("isas") or ()))
    except (TypeError, ValueError) as e:
        raise CodegenError(f"{where}: source {str(lit['name'])[:40]!r}: {e}") from None


def add_c_source(mod: IRModule, src: CSource) -> IRModule:
    """``mod`` with the user C source ``src`` recorded for the native library (a source
    of the same name and text is recorded once).  Its :class:`CFunction` s are called
    from graph functions with ``call_extern(extern("<name>"), ...)``."""
    lit = source_literal(src)
    current = tuple(mod.attrs.get(C_SOURCES_ATTR) or ())
    for old in current:
        if old["name"] == lit["name"]:
            if (old["code"] == lit["code"] and tuple(old["functions"]) == lit["functions"]
                    and tuple(old.get("isas") or ()) == tuple(lit.get("isas") or ())):
                return mod
            raise ValueError(f"the module already has a different C source named {src.name!r}")
    return mod.with_attrs(**{C_SOURCES_ATTR: (*current, lit)})


def c_sources(mod: IRModule) -> list[CSource]:
    """The user C sources recorded in ``mod``."""
    return [source_from_literal(lit) for lit in mod.attrs.get(C_SOURCES_ATTR) or ()]


def entry_programs(mod: IRModule) -> list[EntryProgram]:
    """The entry points recorded in ``mod`` (:data:`ENTRIES_ATTR`)."""
    return [EntryProgram.from_literal(lit) for lit in mod.attrs.get(ENTRIES_ATTR) or ()]


def module_kernels(mod: IRModule) -> dict[str, Kernel]:
    """The kernels of ``mod`` by name."""
    return {name: f for name, f in mod.items() if isinstance(f, Kernel)}


def target_options(mod: IRModule) -> dict[str, Any]:
    target = mod.target
    attrs: Mapping[str, Any] = getattr(target, "attrs", {}) or {}
    opts: dict[str, Any] = {}
    if attrs.get("opt_level") is not None:
        opts["opt_level"] = int(attrs["opt_level"])
    if "openmp" in attrs:
        raise ValueError("target attribute 'openmp' is now 'threads' (the c target's "
                         "libraries use their own thread pool, not OpenMP): use "
                         f"Target('c', threads={attrs['openmp']!r})")
    if attrs.get("threads") is not None:
        opts["threads"] = bool(attrs["threads"])
    if attrs.get("march_native"):
        opts["march_native"] = True
    isas = build_isas(attrs.get("isas"))
    if isas is not None:
        opts["isas"] = isas
    if out_of_range_indices(attrs) == "clamp":
        opts["clamp_indices"] = True
    return opts


def out_of_range_indices(attrs: Mapping[str, Any]) -> str:
    """The target attribute ``out_of_range_indices``: "raise" (default) or "clamp"."""
    mode = attrs.get("out_of_range_indices", "raise")
    if mode not in ("raise", "clamp"):
        raise ValueError(f"target attribute out_of_range_indices={mode!r}: use 'raise' (the "
                         "default: an index out of range fails the call) or 'clamp'")
    return str(mode)


@module_pass(name="c.CompileKernels", phases=("lowering", "build"), essential=True)
class CompileKernels:
    """Compile the kernels, C sources and entry points into one native library."""

    def __init__(self, extra_flags: Sequence[str] = ()) -> None:
        super().__init__()
        self.extra_flags = tuple(extra_flags)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        kernels = module_kernels(mod)
        sources = c_sources(mod)
        if not kernels and not sources:
            return mod
        path, _, arch = build_library(kernels, c_sources=sources,
                                      extra_flags=self.extra_flags,
                                      entries=entry_programs(mod), **target_options(mod))
        if arch == host_arch():
            load_library(path)   # a library that cannot load here fails the build
        else:
            _LOG.info("c.CompileKernels: the library is built for %s (by $CC), not for this "
                      "%s machine: the executable runs on %s machines", arch, host_arch(),
                      arch)
        blob = LibraryBlob(path.read_bytes())
        libs = dict(mod.attrs.get("native_libs") or {})
        try:  # so the module's text (which names the library by digest) parses later
            store_library(blob, path)
        except OSError as e:
            _LOG.warning("c.CompileKernels: cannot store the library in the content "
                         "store (%s); the module's text will not find its bytes", e)
        libs[LIBRARY_NAME] = blob
        return mod.with_attrs(native_libs=libs)
