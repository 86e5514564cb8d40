"""The C code generator: kernels to C99, compiled by the system C compiler into a shared
library (cached on disk), loaded with ctypes.  See ``docs/kernels.md``.

Importing it registers the runtime's native loader (:mod:`plait.runtime.native`), so
executables whose ``libs`` hold these libraries run their functions.
"""

from .compiler import (
    BuildOptions,
    CCompileError,
    CompilerInfo,
    NativeUnavailableError,
    compile_shared,
    compile_stats,
    default_cache_dir,
    find_compiler,
    resolve_cache_dir,
    threads_available,
)
from .emit import CFunction, CodegenError, CSource, EmittedLibrary, emit_kernel, emit_library
from .entry import EntryError, EntryProgram, EntryStep, emit_entry
from .library import NativeLibrary, build_library, compile_c_source, compile_kernels

__all__ = [
    "BuildOptions", "CCompileError", "CompilerInfo", "NativeUnavailableError",
    "compile_shared", "compile_stats", "default_cache_dir", "find_compiler",
    "threads_available", "resolve_cache_dir", "CFunction", "CodegenError", "CSource",
    "EmittedLibrary", "emit_kernel", "emit_library", "NativeLibrary", "build_library",
    "compile_c_source",
    "compile_kernels", "EntryError", "EntryProgram", "EntryStep", "emit_entry",
]
