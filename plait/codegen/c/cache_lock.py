"""Per-entry locks of the compiled-library cache, shared between processes.

Processes that need the same cache entry (a library, or the object of a source file
shared by many libraries, such as ``plait_gemm.c``) take the entry's lock: the first
compiles, the others wait and then find the entry in the cache.  A lock is an advisory
lock of the operating system on ``<entry>.lock`` (``fcntl.flock`` on POSIX,
``msvcrt.locking`` on Windows), held through an open file: the system releases it when
its process exits or dies, so the lock of a killed process never blocks anyone (no
stale lock to detect or break).  The file records the holder's process id for people
looking at a cache that seems stuck; lock files are never deleted (deleting one that
another process has just opened would let two processes hold "the" lock).

A lock held longer than ``timeout`` (a hung compiler on a network file system...) is
not waited for any further: the waiter warns and compiles the entry itself, which is
safe because every cache file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

POLL_START, POLL_MAX = 0.01, 0.25
"""Seconds between attempts while waiting for a lock (doubling up to the maximum)."""


class EntryLock:
    """The lock of one cache entry (``path``): ``with EntryLock(path): ...`` waits for
    it; :meth:`try_acquire` does not."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 1200.0) -> None:
        self.path = Path(f"{os.fspath(path)}.lock")
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if no other process holds it; True when taken."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            else:  # pragma: no cover - Windows
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            os.close(fd)
            return False
        try:  # who holds it, for people looking at the cache
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        self._fd = fd
        return True

    def acquire(self) -> bool:
        """Wait for the lock (at most ``timeout`` seconds); True when taken, False (with
        a warning) when the holder kept it too long."""
        deadline = time.monotonic() + self.timeout
        pause = POLL_START
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                warnings.warn(
                    f"plait: {self.path} was held for more than {self.timeout:.0f} s "
                    f"(by process {self.holder() or '?'}); building without waiting longer",
                    RuntimeWarning, stacklevel=3)
                return False
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX)
        return True

    def release(self) -> None:
        """Let the next process in (closing the file releases the lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def holder(self) -> int | None:
        """The process id the lock file names (the last holder), when readable."""
        try:
            return int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self) -> EntryLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


__all__ = ["EntryLock"]
