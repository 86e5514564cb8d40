"""Invoking the system C compiler, with a disk cache of the shared libraries it builds.

* The compiler is ``$CC`` (which may carry arguments, e.g. ``"ccache gcc"``) or ``cc``;
  none found raises :class:`NativeUnavailableError`, which points to ``target="numpy"``.
* Flags: ``-O3 -fPIC -shared -fno-math-errno`` (+ ``-pthread -fopenmp-simd
  -DPLAIT_THREADS`` when the compiler supports them and threads are not turned off:
  the library's own thread pool, ``plait_threads.c``, and the ``omp simd`` hints, with
  no OpenMP runtime to link or ship, + ``-march=native`` only when asked: a
  cached library may be loaded on another machine, so the default code is portable).
* The cache directory is the ``cache_dir`` argument, else ``$PLAIT_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/plait`` or ``~/.cache/plait``; libraries live in its ``c/``
  folder, named by a SHA-256 of the sources, the flags, the compiler's path and version
  (and the CPU model with ``-march=native``).  Every file is written to a temporary
  name and moved into place with ``os.replace``; processes that need the same library
  or object at once take the entry's lock (:mod:`plait.codegen.c.cache_lock`): one
  compiles, the others wait and reuse its result; so does the probe of the compiler's
  thread support.  A compile works in a folder ``build-<key>-*`` made and removed under
  its entry's lock; each compile first removes the folders of compiles killed before
  they could (:func:`remove_stale_builds`).
* A failed compilation raises :class:`CCompileError` with the compiler's message and
  the source lines around the first error.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from plait.codegen.c.cache_lock import EntryLock
from plait.errors import PlaitError
from plait.runtime.native import ABI_VERSION, LIB_SUFFIX
from plait.runtime.trust import cache_root

COMPILE_TIMEOUT = 600.0
"""Seconds a single compiler run may take."""

_STATS = {"compiles": 0, "cache_hits": 0, "object_hits": 0, "thread_probes": 0}
_STATS_LOCK = threading.Lock()


def compile_stats() -> dict[str, int]:
    """Counters of this process: libraries built (``compiles``), libraries found in the
    cache (``cache_hits``), objects of multi-file libraries found in the cache
    (``object_hits``) and probes of the compiler's thread support."""
    with _STATS_LOCK:
        return dict(_STATS)


def _count(key: str) -> None:
    with _STATS_LOCK:
        _STATS[key] += 1


_LISTENERS: contextvars.ContextVar[tuple[Callable[[str, int, int], None], ...]] = \
    contextvars.ContextVar("plait_compile_listeners", default=())


@contextmanager
def compile_events(listener: Callable[[str, int, int], None]) -> Iterator[None]:
    """Call ``listener(step, done, total)`` while the C compiler works in this context:
    ``("objects", k, n)`` as the k-th of the n object files a library needs is
    compiled (``k = 0`` when they start; cached objects count as done at once),
    ``("library", 0, 1)`` before the library is linked (or, from one source file,
    compiled and linked in one run) and ``("library", 1, 1)`` after.
    Nothing is called for a library found in the cache.  (The progress bar of the
    command line moves with these: the C compile is most of a cold build.)"""
    token = _LISTENERS.set((*_LISTENERS.get(), listener))
    try:
        yield
    finally:
        _LISTENERS.reset(token)


def _event(step: str, done: int, total: int) -> None:
    for listener in _LISTENERS.get():
        listener(step, done, total)


class NativeUnavailableError(PlaitError, RuntimeError):
    """No usable C compiler: native code cannot be built here."""


class CCompileError(PlaitError, RuntimeError):
    """The C compiler rejected the generated (or user) source.

    ``stderr`` is the compiler's output, ``file``/``line`` the first error's position,
    ``kernel`` the kernel whose code holds it (when known), ``excerpt`` the numbered
    source lines around it and ``command`` the compiler command line.
    """

    def __init__(self, message: str, *, stderr: str, command: list[str], file: str | None,
                 line: int | None, kernel: str | None, excerpt: str, source_path: str | None):
        super().__init__(message)
        self.stderr, self.command = stderr, command
        self.file, self.line, self.kernel = file, line, kernel
        self.excerpt, self.source_path = excerpt, source_path


@dataclass(frozen=True)
class CompilerInfo:
    """A C compiler: the command (``argv`` prefix), its resolved path and version."""

    argv: tuple[str, ...]
    path: str
    version: str

    @property
    def ident(self) -> str:
        """What identifies the compiler in cache keys."""
        return f"{self.path}\n{self.version}"


_VERSIONS: dict[tuple[str, float], str] = {}


def find_compiler() -> CompilerInfo:
    """The C compiler to use: ``$CC`` or ``cc`` on ``PATH``.

    Raises :class:`NativeUnavailableError` saying what was looked for and what to do.
    """
    env_cc = os.environ.get("CC", "").strip()
    argv = shlex.split(env_cc) if env_cc else ["cc"]
    path = shutil.which(argv[0]) if argv else None
    if path is None:
        if env_cc:
            why = f"$CC is {env_cc!r}, but {argv[0]!r} is not an executable on PATH"
        else:
            why = "$CC is not set and no `cc` is on PATH"
        raise NativeUnavailableError(
            f"cannot build native code: no C compiler found ({why}). Install a C compiler "
            "(gcc or clang) or point $CC at one, or build for target=\"numpy\", which needs "
            "no compiler. A model built for \"c\" elsewhere still runs here: its executable "
            "embeds the compiled library."
        )
    try:
        key = (path, os.path.getmtime(path))
    except OSError:
        key = (path, 0.0)
    version = _VERSIONS.get(key)
    if version is None:
        try:
            out = subprocess.run([*argv, "--version"], capture_output=True, text=True,
                                 timeout=60)
            version = (out.stdout or out.stderr).strip().splitlines()[0] if (
                out.stdout or out.stderr).strip() else "unknown"
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeUnavailableError(
                f"cannot build native code: the C compiler {path} does not run ({exc}); "
                "fix it or set $CC, or build for target=\"numpy\""
            ) from None
        _VERSIONS[key] = version
    return CompilerInfo(tuple([path, *argv[1:]]), path, version)


_ARCHS: dict[str, str] = {}


def compiler_arch(cc: CompilerInfo) -> str:
    """The architecture ``cc`` compiles for (``x86_64``, ``aarch64``, ...: the first part
    of ``cc -dumpmachine``; this machine's when the compiler does not say)."""
    from .variants import host_arch, normalize_arch

    arch = _ARCHS.get(cc.ident)
    if arch is None:
        try:
            out = subprocess.run([*cc.argv, "-dumpmachine"], capture_output=True, text=True,
                                 timeout=60)
            triple = out.stdout.strip() if out.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            triple = ""
        arch = _ARCHS[cc.ident] = normalize_arch(triple) if triple else host_arch()
    return arch


def default_cache_dir() -> Path:
    """``$PLAIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/plait``, else ``~/.cache/plait``."""
    return cache_root()


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding compiled libraries (``<cache>/c``), created if needed.
    Falls back to a per-user temporary directory (with a warning) when the configured
    one cannot be created."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    d = root / "c"
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError as exc:
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
        fallback = Path(tempfile.gettempdir()) / f"plait-cache-{user}" / "c"
        warnings.warn(f"plait cache directory {d} is not usable ({exc}); using {fallback}",
                      stacklevel=2)
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


@dataclass(frozen=True)
class BuildOptions:
    """How to compile: optimization level, threads (``None`` = when the compiler
    supports them), ``-march=native`` and extra flags."""

    opt_level: int = 3
    threads: bool | None = None
    march_native: bool = False
    extra_flags: tuple[str, ...] = field(default_factory=tuple)


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


STALE_AGE = 3600.0
"""Seconds after which a temporary file of the cache (``.<name>.*.tmp``) or a build
folder whose owner cannot be told (made by an older plait) counts as left behind."""
_BUILD_DIR = re.compile(r"(build|probe)-([0-9a-f]{32}|[0-9a-f]{16})-")


def _owner_lock(d: Path, name: str) -> Path | None:
    """The cache entry whose lock a build folder ``name`` was made under: the library
    (``build-<key>-*``) or the thread probe's marker (``probe-<ident>-*``)."""
    m = _BUILD_DIR.match(name)
    if m is None:
        return None
    if m.group(1) == "build" and len(m.group(2)) == 32:
        return d / f"lib-{m.group(2)}{LIB_SUFFIX}"
    if m.group(1) == "probe" and len(m.group(2)) == 16:
        return d / f"threads-{m.group(2)}.txt"
    return None


def remove_stale_builds(d: Path, held: Path | None = None) -> list[str]:
    """Remove the build folders a killed compile left in the cache folder ``d`` (and
    stale temporary files); the names removed.

    A folder is made and removed under its entry's lock (:mod:`.cache_lock`), which the
    system releases when its process dies: a folder whose lock nobody holds belongs to
    no running compile, nor does one of the entry ``held`` (whose lock the caller
    holds, before it makes its own folder).  Folders of an older plait (no entry in the
    name) and temporary files go after :data:`STALE_AGE`."""
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(d))
    except OSError:
        return removed
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False) and e.name.startswith(("build-", "probe-")):
                owner = _owner_lock(d, e.name)
                if owner is None:
                    if now - e.stat(follow_symlinks=False).st_mtime > STALE_AGE:
                        shutil.rmtree(e.path, ignore_errors=True)
                        removed.append(e.name)
                    continue
                if owner == held:
                    shutil.rmtree(e.path, ignore_errors=True)
                    removed.append(e.name)
                    continue
                lock = EntryLock(owner)
                if lock.try_acquire():   # nobody builds that entry: left by a dead process
                    try:
                        shutil.rmtree(e.path, ignore_errors=True)
                        removed.append(e.name)
                    finally:
                        lock.release()
            elif (e.name.startswith(".") and e.name.endswith(".tmp") and e.is_file()
                  and now - e.stat(follow_symlinks=False).st_mtime > STALE_AGE):
                os.unlink(e.path)
                removed.append(e.name)
        except OSError:
            continue
    return removed


_THREADS: dict[str, bool] = {}
THREAD_FLAGS = ("-pthread", "-fopenmp-simd", "-DPLAIT_THREADS")
"""Flags of a library built with threads: POSIX threads for the pool of plait_threads.c
and OpenMP's ``simd`` pragmas (compile-time only: no OpenMP runtime is linked)."""
_PROBE = """\
#include <pthread.h>
static void* plait_probe_run(void* p) { return p; }
int plait_threads_probe(float* x, int n) {
    pthread_t t;
    if (pthread_create(&t, 0, plait_probe_run, 0)) return 1;
#pragma omp simd
    for (int i = 0; i < n; ++i) x[i] += 1.0f;
    return pthread_join(t, 0);
}
"""


def threads_available(cc: CompilerInfo, cache_dir: Path | None = None) -> bool:
    """True when ``cc`` builds a shared library with :data:`THREAD_FLAGS` (probed once
    per compiler and remembered in the cache directory)."""
    got = _THREADS.get(cc.ident)
    if got is not None:
        return got
    d = cache_dir or resolve_cache_dir()
    ident = hashlib.sha256(cc.ident.encode()).hexdigest()[:16]
    marker = d / f"threads-{ident}.txt"
    got = _read_marker(marker)
    if got is None:
        with EntryLock(marker) as lock:   # like every compile: one probes, others wait
            got = _read_marker(marker)
            if got is None:
                got = _probe_threads(cc, d, ident, marker if lock.held else None)
                atomic_write(marker, b"1" if got else b"0")
    _THREADS[cc.ident] = got
    return got


def _read_marker(marker: Path) -> bool | None:
    try:
        return marker.read_text().strip() == "1"
    except OSError:
        return None


def _probe_threads(cc: CompilerInfo, d: Path, ident: str, held: Path | None) -> bool:
    """Whether ``cc`` builds :data:`_PROBE` with :data:`THREAD_FLAGS` (under the lock
    of the marker ``held``, unless its holder kept it too long)."""
    _count("thread_probes")
    remove_stale_builds(d, held)
    tmp = tempfile.mkdtemp(prefix=f"probe-{ident}-", dir=d)
    try:
        src = Path(tmp) / "probe.c"
        src.write_text(_PROBE)
        r = subprocess.run([*cc.argv, *THREAD_FLAGS, "-fPIC", "-shared", "-o",
                            str(Path(tmp) / f"probe{LIB_SUFFIX}"), str(src)],
                           capture_output=True, timeout=COMPILE_TIMEOUT)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cpu_ident() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def build_flags(cc: CompilerInfo, options: BuildOptions, cache_dir: Path) -> tuple[list[str], bool]:
    """The compiler flags for ``options`` and whether threads are on."""
    flags = [f"-O{options.opt_level}", "-fPIC", "-shared", "-fno-math-errno"]
    threads = options.threads
    if threads is None:
        threads = threads_available(cc, cache_dir)
    if threads:
        flags += THREAD_FLAGS
    if options.march_native:
        flags.append("-march=native")
    flags += list(options.extra_flags)
    return flags, bool(threads)


def cache_key(files: dict[str, str], cc: CompilerInfo, flags: list[str]) -> str:
    """The SHA-256 naming a library built from ``files`` with ``flags`` by ``cc``."""
    h = hashlib.sha256()
    h.update(f"plait-c-abi-{ABI_VERSION}\0{cc.ident}\0{' '.join(flags)}\0".encode())
    if "-march=native" in flags:
        h.update(_cpu_ident().encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


_ERROR_RE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error:",
                       re.M)


def _excerpt(source: str, line: int, context: int = 4) -> str:
    lines = source.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    out = []
    for n in range(lo, hi + 1):
        mark = ">" if n == line else " "
        out.append(f"  {mark} {n:>{width}} | {lines[n - 1]}")
    return "\n".join(out)


def _kernel_at(source: str, line: int) -> str | None:
    lines = source.splitlines()
    for n in range(min(line, len(lines)) - 1, -1, -1):
        m = re.match(r"/\* kernel: (.*) \*/$", lines[n])
        if m:
            return m.group(1)
        m = re.match(r"/\* (\S+): \S+ from ", lines[n])
        if m:
            return m.group(1)
    return None


def _compile_error(stderr: str, files: dict[str, str], command: list[str], returncode: int,
                   failed_path: str | None) -> CCompileError:
    m = _ERROR_RE.search(stderr)
    file = line = kernel = None
    excerpt = ""
    if m:
        file = os.path.basename(m.group("file"))
        line = int(m.group("line"))
        if file in files:
            excerpt = _excerpt(files[file], line)
            generated = re.fullmatch(r"plait_kernels(__\w+)?\.c", file)
            kernel = _kernel_at(files[file], line) if generated else None
    where = f" in kernel {kernel!r}" if kernel else ""
    msg_lines = [line_ for line_ in stderr.strip().splitlines() if line_.strip()][:25]
    parts = [f"C compilation failed{where} (exit status {returncode}):"]
    parts += ["  " + ln for ln in msg_lines]
    if excerpt:
        parts.append(f"source around {file} line {line}:")
        parts.append(excerpt)
    parts.append("command: " + " ".join(shlex.quote(c) for c in command))
    if failed_path:
        parts.append(f"full generated source: {failed_path}")
    return CCompileError("\n".join(parts), stderr=stderr, command=command, file=file,
                         line=line, kernel=kernel, excerpt=excerpt, source_path=failed_path)


def _run_compiler(command: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CCompileError(
            f"C compilation timed out after {COMPILE_TIMEOUT:.0f}s: {' '.join(command)}",
            stderr="", command=command, file=None, line=None, kernel=None, excerpt="",
            source_path=None) from None


def _failure(r: subprocess.CompletedProcess[str], files: dict[str, str], command: list[str],
             d: Path, key: str, main: str | None = None) -> CCompileError:
    """The error of a failed compiler run; the failing (or first) source is kept in the
    cache directory for inspection."""
    failed = None
    main = main or next(iter(files))
    try:
        failed_path = d / f"failed-{key[:32]}-{main}"
        atomic_write(failed_path, files[main].encode())
        failed = str(failed_path)
    except OSError:
        pass
    return _compile_error(r.stderr or r.stdout, files, command, r.returncode, failed)


def _compile_objects(cc: CompilerInfo, flag_list: list[str], files: dict[str, str],
                     tmpdir: str, d: Path, key: str) -> list[str]:
    """Compile every file to an object (``-c``), taking objects from the cache (named
    by the file's name, text, the flags and the compiler) and compiling the missing
    ones concurrently.  Each object is compiled under its cache entry's lock: an object
    another process is compiling is waited for and reused.  Returns the objects'
    paths."""
    cflags = [f for f in flag_list if f != "-shared"]
    paths: list[str] = []
    pending: list[tuple[str, Path, list[str], subprocess.Popen[str], EntryLock]] = []
    waiting: list[tuple[str, Path]] = []
    try:
        for name, text in files.items():
            okey = cache_key({name: text}, cc, cflags)
            obj = d / f"obj-{okey[:32]}.o"
            paths.append(str(obj))
            if obj.exists():
                _count("object_hits")
                continue
            lock = EntryLock(obj)
            if not lock.try_acquire():
                waiting.append((name, obj))  # another process compiles it: wait below
                continue
            if obj.exists():
                lock.release()
                _count("object_hits")
                continue
            pending.append((name, obj, *_start_object(cc, cflags, name, tmpdir), lock))
        total = len(files)
        _event("objects", total - len(pending) - len(waiting), total)
        error = _finish_objects(pending, files, d, key, tmpdir,
                                done=total - len(pending) - len(waiting), total=total)
        for name, obj in waiting:
            with EntryLock(obj):
                if obj.exists():
                    _count("object_hits")
                    continue
                job = [(name, obj, *_start_object(cc, cflags, name, tmpdir), EntryLock(obj))]
                error = _finish_objects(job, files, d, key, tmpdir) or error
    finally:
        for *_, lock in pending:
            lock.release()
    if error is not None:
        raise error
    return paths


def compile_objects(files: dict[str, str], flag_list: list[str], tmpdir: str,
                    cache_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Compile each of ``files`` (already written into ``tmpdir``, the compiler's working
    directory) to an object with ``flag_list`` (``-shared`` dropped), through the object
    cache of :func:`compile_shared` (a file of the same name, text, flags and compiler
    is compiled once); returns the objects' paths, in the order of ``files``.  Raises
    :class:`CCompileError`."""
    cc = find_compiler()
    d = resolve_cache_dir(cache_dir)
    return _compile_objects(cc, flag_list, files, tmpdir, d, cache_key(files, cc, flag_list))


def _start_object(cc: CompilerInfo, cflags: list[str], name: str,
                  tmpdir: str) -> tuple[list[str], subprocess.Popen[str]]:
    command = [*cc.argv, *cflags, "-c", "-o", f"{name}.o", name]
    return command, subprocess.Popen(command, cwd=tmpdir, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)


def _finish_objects(jobs: list[tuple[str, Path, list[str], subprocess.Popen[str], EntryLock]],
                    files: dict[str, str], d: Path, key: str,
                    tmpdir: str, done: int = 0, total: int = 0) -> CCompileError | None:
    """Wait for the compiler runs of ``jobs``, move each object into the cache and let
    its lock go; the first failure's error (or None).  ``done`` of ``total`` objects
    were ready before: each one finished here is reported (:func:`compile_events`)."""
    error = None
    for k, (name, obj, command, proc, lock) in enumerate(jobs, 1):
        if total:
            _event("objects", done + k - 1, total)
        try:
            try:
                out, err = proc.communicate(timeout=COMPILE_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise CCompileError(
                    f"C compilation timed out after {COMPILE_TIMEOUT:.0f}s: {' '.join(command)}",
                    stderr="", command=command, file=None, line=None, kernel=None, excerpt="",
                    source_path=None) from None
            tmp_obj = Path(tmpdir, f"{name}.o")
            if proc.returncode != 0 or not tmp_obj.exists():
                if error is None:
                    r = subprocess.CompletedProcess(command, proc.returncode, out, err)
                    error = _failure(r, files, command, d, key, main=name)
                continue
            os.replace(tmp_obj, obj)
        finally:
            lock.release()
    if total and jobs:
        _event("objects", done + len(jobs), total)
    return error


def compile_shared(
    files: dict[str, str],
    options: BuildOptions | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    flags: tuple[list[str], bool] | None = None,
) -> Path:
    """Compile the C ``files`` (name -> source) into a shared library and return its
    path in the cache, running the compiler only when the cache does not have it yet."""
    cc = find_compiler()
    d = resolve_cache_dir(cache_dir)
    flag_list, _ = flags if flags is not None else build_flags(cc, options or BuildOptions(), d)
    key = cache_key(files, cc, flag_list)
    final = d / f"lib-{key[:32]}{LIB_SUFFIX}"
    if final.exists():
        _count("cache_hits")
        return final
    with EntryLock(final) as lock:  # concurrent builds of the same library: one compiles
        if final.exists():  # another process built it while this one waited
            _count("cache_hits")
            return final
        _count("compiles")
        remove_stale_builds(d, final if lock.held else None)
        tmpdir = tempfile.mkdtemp(prefix=f"build-{key[:32]}-", dir=d)
        try:
            for name, text in files.items():
                Path(tmpdir, name).write_text(text)
            out = Path(tmpdir, f"out{LIB_SUFFIX}")
            if len(files) > 1:
                # each file becomes an object of its own, cached by its text: a library
                # source shared by many models (plait_gemm.c) is compiled once, and only
                # the model's generated kernels are compiled again
                objects = _compile_objects(cc, flag_list, files, tmpdir, d, key)
                command = [*cc.argv, *flag_list, "-o", out.name, *objects, "-lm"]
            else:
                command = [*cc.argv, *flag_list, "-o", out.name, *files.keys(), "-lm"]
            _event("library", 0, 1)
            r = _run_compiler(command, tmpdir)
            if r.returncode != 0 or not out.exists():
                raise _failure(r, files, command, d, key)
            _event("library", 1, 1)
            atomic_write(d / f"lib-{key[:32]}.c", "\n".join(
                f"/* ==== {n} ==== */\n{t}" for n, t in files.items()).encode())
            os.replace(out, final)
            return final
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
