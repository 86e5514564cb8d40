"""Compiling kernels (and user C) into a native library, and loading libraries.

::

    lib = compile_kernels({"add": add_kernel})
    out = lib.get("add")(a, b)          # allocates the output; or pass it: f(a, b, out)
    blob = lib.data                     # the shared library's bytes, for an executable
    same = NativeLibrary.from_bytes(blob)   # no compiler needed
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plait.kernel.ir import Kernel
from plait.kernel.verify import KernelVerifyError, verify_kernel
from plait.runtime.native import (
    NativeFunction,
    NativeModule,
    load_library,
    load_library_bytes,
)

from .compiler import (
    BuildOptions,
    build_flags,
    compile_shared,
    compiler_arch,
    find_compiler,
    resolve_cache_dir,
)
from .emit import CFunction, CSource, emit_library
from .entry import EntryProgram
from .variants import host_arch


class NativeLibrary:
    """A compiled (or loaded) native library: functions by name, and its bytes.

    ``get(name)`` returns a :class:`~plait.runtime.native.NativeFunction` (callable on
    numpy arrays); ``data`` the library file's bytes (what an executable embeds);
    ``sources`` the C sources it was built from (when compiled here).
    """

    def __init__(self, module: NativeModule, path: Path | None = None, data: bytes | None = None,
                 sources: dict[str, str] | None = None) -> None:
        self.module = module
        self.path = path
        self._data = data
        self.sources = dict(sources or {})

    @property
    def names(self) -> list[str]:
        """The exported function names."""
        return self.module.names

    @property
    def manifest(self) -> dict[str, Any]:
        """The library's ABI description (data only)."""
        return self.module.manifest

    def __contains__(self, name: object) -> bool:
        return name in self.module

    def get(self, name: str) -> NativeFunction:
        """The function ``name``; a ``KeyError`` lists the functions there are."""
        return self.module.get(name)

    @property
    def data(self) -> bytes:
        """The shared library's bytes."""
        if self._data is None:
            if self.path is None:
                raise ValueError("this native library has neither bytes nor a path")
            self._data = Path(self.path).read_bytes()
        return self._data

    @classmethod
    def from_bytes(cls, data: bytes) -> NativeLibrary:
        """Load a library from its bytes (no compiler needed)."""
        return cls(load_library_bytes(data), None, bytes(data))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NativeLibrary:
        """Load the library file at ``path``."""
        return cls(load_library(path), Path(path))

    def __repr__(self) -> str:
        where = f" {self.path}" if self.path else ""
        return f"<NativeLibrary{where} functions={self.names}>"


def build_library(
    kernels: Mapping[str, Kernel],
    *,
    c_sources: Sequence[CSource] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    threads: bool | None = None,
    opt_level: int = 3,
    march_native: bool = False,
    extra_flags: Sequence[str] = (),
    verify: bool = True,
    entries: Sequence[EntryProgram] = (),
    clamp_indices: bool = False,
    isas: Sequence[str] | None = None,
) -> tuple[Path, dict[str, str], str]:
    """Compile what :func:`compile_kernels` compiles into a shared library (or take it
    from the disk cache) without loading it: ``(path, sources, arch)``, ``arch`` being
    the architecture the compiler (``$CC``) builds for, which may be another machine's
    (``CC=aarch64-linux-gnu-gcc``: a cross build, whose library runs there).  Raises as
    :func:`compile_kernels` does; ``march_native`` with a cross compiler is a
    ``ValueError``.  ``clamp_indices``: out-of-range indices of ``checked_index``
    are clamped instead of failing the call (the ``c`` target's
    ``out_of_range_indices="clamp"``).  ``isas``: the ISA copies built
    (:func:`~plait.codegen.c.emit.emit_library`; None: every copy of ``arch``)."""
    if verify:
        errors = [m for name, k in kernels.items() for m in verify_kernel(k, name)]
        if errors:
            raise KernelVerifyError(errors)
    cc = find_compiler()
    arch = compiler_arch(cc)
    if march_native and arch != host_arch():
        raise ValueError(f"march_native=True asks for this {host_arch()} CPU's instructions, "
                         f"but the compiler {cc.path} builds for {arch}: drop march_native "
                         "or unset $CC")
    d = resolve_cache_dir(cache_dir)
    options = BuildOptions(opt_level, threads, march_native, tuple(extra_flags))
    flags, use_threads = build_flags(cc, options, d)
    # with -march=native the library is for this machine only: every family once
    emitted = emit_library(kernels, c_sources, threads=use_threads, entries=entries,
                           arch=arch, isas=("baseline",) if march_native else isas,
                           clamp_indices=clamp_indices)
    path = compile_shared(emitted.files, options, cache_dir, flags=(flags, use_threads))
    return path, emitted.files, arch


def compile_kernels(
    kernels: Mapping[str, Kernel],
    *,
    c_sources: Sequence[CSource] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    threads: bool | None = None,
    opt_level: int = 3,
    march_native: bool = False,
    extra_flags: Sequence[str] = (),
    verify: bool = True,
    entries: Sequence[EntryProgram] = (),
    isas: Sequence[str] | None = None,
) -> NativeLibrary:
    """Compile ``kernels`` (name -> kernel), the user ``c_sources`` and the entry
    points ``entries`` (:mod:`plait.codegen.c.entry`) into one shared library, or take
    it from the disk cache, and load it.

    Kernels are verified first (``verify=False`` skips it); ``isas`` limits the ISA
    copies built (:func:`build_library`).  Raises
    :class:`~plait.kernel.verify.KernelVerifyError`,
    :class:`~plait.codegen.c.compiler.NativeUnavailableError` (no compiler),
    :class:`~plait.codegen.c.emit.CodegenError` or
    :class:`~plait.codegen.c.compiler.CCompileError`; a library of another architecture
    (a cross compiler as ``$CC``) cannot be loaded here: build it with
    :func:`build_library`.
    """
    path, files, _ = build_library(
        kernels, c_sources=c_sources, cache_dir=cache_dir, threads=threads,
        opt_level=opt_level, march_native=march_native, extra_flags=extra_flags,
        verify=verify, entries=entries, isas=isas)
    return NativeLibrary(load_library(path), path, sources=files)


def compile_c_source(
    code: str,
    functions: Sequence[CFunction],
    *,
    name: str = "user.c",
    **options: Any,
) -> NativeLibrary:
    """Compile user-written C ``code`` exporting ``functions`` into a library (the
    keyword options are those of :func:`compile_kernels`)."""
    return compile_kernels({}, c_sources=[CSource(code, tuple(functions), name)], **options)
