"""Native library handles, unmapped once nothing uses them.

A library loaded by :mod:`plait.runtime.native` (``dlopen`` of a sealed memory file on
Linux, else of a private temporary file or of a path) is owned by a
:class:`LibraryHandle`: its :class:`~plait.runtime.native.NativeModule` holds it, every
:class:`~plait.runtime.native.NativeFunction` holds its module, and a VM holds the
functions its instructions call.  Function pointers are made from the symbols'
addresses (``dlsym``), not through ``ctypes.CDLL``, whose function objects refer to
themselves and would leave every library to the cycle collector.  When the last user is
gone (the last VM, function or module of that library), the handle's finalizer

1. calls the library's ``plait_release`` (``plait_threads.c``): its thread pool's
   workers are stopped and joined, so no thread is left running code about to be
   unmapped, and every thread's scratch buffers are freed;
2. ``dlclose`` s it: the loader runs its destructors and unmaps it;
3. closes its memory file, once the loader no longer knows the library (a descriptor
   closed while the library stays loaded could be reused by the next library, whose
   path ``/proc/self/fd/<n>`` the loader would then take for this one).

A library without ``plait_release`` (built by an older plait: its pool's workers are
detached and could be inside it) is never unmapped, as before, and counted as *kept*.
:func:`library_stats` counts what happened.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

try:
    from _ctypes import dlclose as _dlclose
    from _ctypes import dlopen as _dlopen_raw
    from _ctypes import dlsym as _dlsym
except ImportError:  # pragma: no cover - Windows: libraries stay loaded
    _dlclose = _dlopen_raw = _dlsym = None

RELEASE_SYMBOL = "plait_release"
"""The function a library exports to stop its thread pool and free its scratch before
it is unloaded (``plait_threads.c``)."""

_STATS = {"mapped": 0, "released": 0, "kept": 0}
_STATS_LOCK = threading.Lock()
_RELEASE_TYPE = ctypes.CFUNCTYPE(None)


def _count(key: str, delta: int = 1) -> None:
    with _STATS_LOCK:
        _STATS[key] += delta


def library_stats() -> dict[str, int]:
    """Counts of this process: ``mapped`` (native libraries mapped now), ``released``
    (unmapped since the process started, their memory files closed) and ``kept``
    (libraries that could not be unmapped: built by an older plait without
    ``plait_release``, or still known to the loader after ``dlclose``)."""
    with _STATS_LOCK:
        return dict(_STATS)


def _still_loaded(path: str) -> bool:
    """True when the dynamic loader still has the library at ``path`` mapped."""
    if _dlopen_raw is None:
        return True
    try:
        handle = _dlopen_raw(path, os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    _dlclose(handle)
    return True


def _release(raw: int, path: str, fd: int | None, release: int | None) -> None:
    """The finalizer of a library handle (no Python object refers to the library any
    more): release its threads and scratch, unload it, close its memory file."""
    _count("mapped", -1)
    if release is None:
        _count("kept")   # its memory file stays open with it: the path keeps its meaning
        return
    _RELEASE_TYPE(release)()
    _dlclose(raw)
    if fd is not None:
        if _still_loaded(path):
            _count("kept")
            return
        os.close(fd)
    _count("released")


class LibraryHandle:
    """An open native library: ``dlopen`` of ``path`` (``fd``: the memory file behind it,
    closed after the library is unloaded).  Its symbols' addresses and C functions made
    from them; unmapped once this object is garbage (not at interpreter exit, while
    threads may still run its code)."""

    def __init__(self, path: str, fd: int | None = None) -> None:
        """``dlopen(path)``: ``OSError`` with the loader's message when it fails."""
        self.path = path
        if _dlopen_raw is None:  # pragma: no cover - Windows: kept loaded
            self._cdll: ctypes.CDLL | None = ctypes.CDLL(path)
            self.raw = self._cdll._handle
            _count("mapped")
            _count("kept")
            return
        self._cdll = None
        self.raw = _dlopen_raw(path, ctypes.DEFAULT_MODE)
        finalizer = weakref.finalize(self, _release, self.raw, path, fd,
                                     self.address(RELEASE_SYMBOL))
        finalizer.atexit = False
        _count("mapped")

    def address(self, symbol: str) -> int | None:
        """The address of ``symbol``, or None when the library does not export it."""
        if self._cdll is not None:  # pragma: no cover - Windows
            try:
                return ctypes.cast(self._cdll[symbol], ctypes.c_void_p).value
            except AttributeError:
                return None
        try:
            return int(_dlsym(self.raw, symbol))
        except OSError:
            return None

    def function(self, symbol: str, restype: Any, *argtypes: Any) -> Any:
        """The C function ``symbol`` as a ctypes function (``restype(*argtypes)``), or
        None when it is not exported.  It does not keep the library mapped: hold this
        handle (or the module) while it may be called."""
        addr = self.address(symbol)
        if addr is None:
            return None
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr)

    def __repr__(self) -> str:
        return f"<LibraryHandle {self.path}>"


__all__ = ["RELEASE_SYMBOL", "LibraryHandle", "library_stats"]
