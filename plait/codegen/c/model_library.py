"""Writing a model's C library: ``lib<name>.so``, ``lib<name>.a``, ``<name>.h``,
``plait_c_api.h``, ``dlpack.h`` and, when the weights are not embedded, ``<name>.weights``.

:func:`write_model_library` emits the kernels, C sources and entry point as the ``c``
target does (:func:`~plait.codegen.c.emit.emit_library`), adds the C API
(:mod:`.c_api`) and the weights (an assembler file that ``.incbin`` s them, or the side
file), compiles every file to an object (through the object cache: the kernel families
a model shares with its executable's library are not compiled again), and links:

* the objects into one relocatable object (``cc -r``) whose only global symbols are the
  API's (``objcopy --keep-global-symbols``): the kernels, the thread pool and the entry
  point become local, so two models' libraries link into one program;
* that object alone into ``lib<name>.a``;
* that object and a one-function file (``plait_library_name``, which a caller that
  ``dlopen`` s any model's library looks up first) into ``lib<name>.so``.

The compiler is ``$CC`` (a cross compiler gives a library for its machine); the
binutils are the compiler's (``aarch64-linux-gnu-objcopy`` next to
``aarch64-linux-gnu-gcc``), else the system's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from plait.errors import PlaitError
from plait.kernel.ir import Kernel

from .c_api import ApiModel, emit_common_header, emit_header, weights_asm, weights_header
from .c_api_source import emit_source
from .compiler import (
    BuildOptions,
    build_flags,
    compile_objects,
    compiler_arch,
    find_compiler,
    resolve_cache_dir,
)
from .emit import CSource, emit_library

API_FUNCTIONS = ("num_inputs", "num_outputs", "input_info", "output_info", "default_options",
                 "create", "destroy", "output_shapes", "run", "run_alloc", "last_error",
                 "status_name")
"""The C API's functions (each ``<name>_<function>``)."""

NAME_SYMBOL = "plait_library_name"
"""The function of the shared library naming its model (the prefix of its API)."""


class LibraryLinkError(PlaitError, RuntimeError):
    """Linking the model's library failed (``cc -r``, ``objcopy``, ``ar``, ``cc
    -shared``); the message has the command and its output."""


@dataclass(frozen=True)
class ModelLibrary:
    """The files :func:`write_model_library` wrote, and the architecture they are for."""

    shared: Path
    static: Path
    header: Path
    dlpack: Path
    weights: Path | None
    arch: str


def _tool(cc_path: str, name: str) -> str:
    """The binutils program ``name`` that goes with the compiler: its target prefix's
    (``aarch64-linux-gnu-ar`` for ``aarch64-linux-gnu-gcc-12``), else the one on PATH."""
    base = os.path.basename(cc_path)
    m = re.fullmatch(r"(?P<prefix>.+-)(?:gcc|cc|clang)(?:-[\d.]+)?", base)
    if m:
        for candidate in (os.path.join(os.path.dirname(cc_path), m["prefix"] + name),
                          shutil.which(m["prefix"] + name)):
            if candidate and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(name) or (shutil.which("llvm-" + name) if "clang" in base else None)
    if found is None:
        raise LibraryLinkError(f"cannot write a static library: no {name!r} found next to "
                               f"the compiler {cc_path} or on PATH (install binutils)")
    return found


def _run(command: list[str], cwd: str) -> None:
    r = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise LibraryLinkError(f"{' '.join(command)} failed ({r.returncode}):\n"
                               f"{(r.stderr or r.stdout).strip()[:4000]}")


def dlpack_header_text() -> str:
    """The vendored ``dlpack.h`` (Apache-2.0, dmlc/dlpack)."""
    return resources.files("plait.codegen.c").joinpath("dlpack.h").read_text()


def write_model_library(
    kernels: Mapping[str, Kernel],
    c_sources: Sequence[CSource],
    api: ApiModel,
    weights: bytes,
    out_dir: str | os.PathLike[str],
    *,
    threads: bool | None = None,
    opt_level: int = 3,
    clamp_indices: bool = False,
    extra_flags: Sequence[str] = (),
    api_flags: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    isas: Sequence[str] | None = None,
) -> ModelLibrary:
    """Compile and write the library of ``api`` (its ``entry_symbol`` is filled in
    here) into ``out_dir``; ``weights`` are the constants' bytes at ``api.constants``'
    offsets.  ``extra_flags`` are compiler flags of every file; ``api_flags`` of the
    API's file and the link only (``-fsanitize=address,undefined``: the API checked by
    the sanitizers, the kernels as they ship).  ``isas``: the ISA copies built (None:
    every copy of the compiler's architecture).  Raises
    :class:`~plait.codegen.c.compiler.CCompileError` or :class:`LibraryLinkError`."""
    cc = find_compiler()
    arch = compiler_arch(cc)
    d = resolve_cache_dir(cache_dir)
    flags, use_threads = build_flags(cc, BuildOptions(opt_level, threads, False,
                                                      tuple(extra_flags)), d)
    emitted = emit_library(kernels, c_sources, threads=use_threads, entries=[api.program],
                           arch=arch, clamp_indices=clamp_indices, isas=isas)
    api = replace(api, entry_symbol=emitted.symbols[api.program.name])
    n = api.name
    header, source = emit_header(api), emit_source(api)
    out = Path(out_dir).resolve()   # (the tools run in a folder of their own)
    out.mkdir(parents=True, exist_ok=True)
    files = dict(emitted.files)
    files[f"{n}_api.c"] = source
    weights_file = f"{n}.weights.bin"
    tmp = tempfile.mkdtemp(prefix=f"plait-export-{n}-", dir=d)
    try:
        for fname, text in files.items():
            Path(tmp, fname).write_text(text)
        Path(tmp, f"{n}.h").write_text(header)
        Path(tmp, "dlpack.h").write_text(dlpack_header_text())
        Path(tmp, "plait_c_api.h").write_text(emit_common_header())
        Path(tmp, weights_file).write_bytes(weights)
        Path(tmp, "plait_name.c").write_text(
            f'__attribute__((visibility("default"))) const char* {NAME_SYMBOL}(void) '
            f'{{ return "{n}"; }}\n')
        # (the API includes <name>.h and dlpack.h from its own directory)
        api_file = f"{n}_api.c"
        objects = compile_objects({k: v for k, v in files.items() if k != api_file}, flags,
                                  tmp, cache_dir)
        objects += compile_objects({api_file: files[api_file]}, [*flags, *api_flags], tmp,
                                   cache_dir)
        name_obj = compile_objects({"plait_name.c": Path(tmp, "plait_name.c").read_text()},
                                   flags, tmp, cache_dir)
        if api.embedded:   # not through the object cache: the object holds the weights
            Path(tmp, f"{n}_weights.S").write_text(weights_asm(n, weights_file))
            _run([*cc.argv, "-c", "-o", f"{n}_weights.o", f"{n}_weights.S"], tmp)
            objects.append(os.path.join(tmp, f"{n}_weights.o"))
        combined = os.path.join(tmp, f"{n}.o")
        _run([*cc.argv, "-r", "-nostdlib", "-o", combined, *objects], tmp)
        keep = os.path.join(tmp, "keep.txt")
        Path(keep).write_text("".join(f"{n}_{f}\n" for f in API_FUNCTIONS))
        _run([_tool(cc.path, "objcopy"), f"--keep-global-symbols={keep}", combined], tmp)
        static = out / f"lib{n}.a"
        static.unlink(missing_ok=True)
        _run([_tool(cc.path, "ar"), "rcs", str(static), combined], tmp)
        shared = out / f"lib{n}.so"
        link = [f for f in flags if f.startswith(("-pthread", "-O"))] + list(api_flags)
        tmp_so = os.path.join(tmp, f"lib{n}.so")
        _run([*cc.argv, "-shared", *link, f"-Wl,-soname,lib{n}.so", "-Wl,-z,defs",
              "-Wl,-z,nodelete", "-o",
              tmp_so, combined, *name_obj, "-lm", "-ldl"], tmp)
        shutil.move(tmp_so, shared)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out / f"{n}.h").write_text(header)
    (out / "dlpack.h").write_text(dlpack_header_text())
    (out / "plait_c_api.h").write_text(emit_common_header())
    side = None
    if not api.embedded:
        side = out / f"{n}.weights"
        side.write_bytes(weights_header(len(weights), api.model_id) + weights)
    return ModelLibrary(shared, static, out / f"{n}.h", out / "dlpack.h", side, arch)


__all__ = ["API_FUNCTIONS", "LibraryLinkError", "ModelLibrary", "NAME_SYMBOL",
           "dlpack_header_text", "write_model_library"]
