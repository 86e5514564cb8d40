"""Compiled native libraries in module attributes, and their place in the text format.

:class:`LibraryBlob` holds the bytes of a library that ``c.CompileKernels`` built (in
``mod.attrs["native_libs"]``).  In the text format it prints as a reference by
content, not as a megabyte of bytes::

    "native_libs": {"c": native_library(sha256="0e6848c2...", size=479040)}

and the parser turns that back into a blob with the same digest, so a module prints
and parses at every phase, the build phase included.  The bytes are found by digest:
first among the libraries this process has seen, then in the content store of the
plait cache (``<cache>/c/by-sha256/<digest>``, filled when a library is built or
stored with :func:`store_library`).  A reference whose bytes are nowhere still parses
(printing, comparing and running passes that do not need the bytes work); asking for
its bytes (``bytes(blob)``, which the VM code generator does) raises
:class:`MissingLibraryError` saying how to get them back.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from plait.codegen.c.compiler import atomic_write, resolve_cache_dir
from plait.errors import PlaitError

STORE_FOLDER = "by-sha256"
"""The folder of the content store inside the cache's ``c`` folder."""


class MissingLibraryError(PlaitError, RuntimeError):
    """The bytes of a library referenced by digest are neither in this process nor in
    the content store."""


class LibraryBlob:
    """The bytes of a compiled library held in ``mod.attrs["native_libs"]``: compares
    and hashes by content (its SHA-256), prints as ``native_library(sha256=...,
    size=...)`` and ``bytes(blob)`` gives the data (what the VM code generator
    embeds)."""

    __slots__ = ("_data", "_digest", "size", "__weakref__")

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = bytes(data)
        self._digest = hashlib.sha256(self._data).hexdigest()
        self.size = len(self._data)
        _remember(self)

    @classmethod
    def from_digest(cls, sha256: str, size: int) -> LibraryBlob:
        """The blob with this digest: its bytes come from this process or the content
        store, or are fetched (and checked) when first needed."""
        if not isinstance(sha256, str) or len(sha256) != 64 or any(
                c not in "0123456789abcdef" for c in sha256):
            raise ValueError(f"native_library(sha256=...) needs the 64 lowercase hex digits "
                             f"of a SHA-256, got {sha256!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"native_library(size=...) must be a byte count, got {size!r}")
        known = _KNOWN.get(sha256)
        if known is not None:
            return known
        blob = cls.__new__(cls)
        blob._data = None
        blob._digest = sha256
        blob.size = size
        return blob

    @property
    def sha256(self) -> str:
        """The hex SHA-256 of the bytes."""
        return self._digest

    @property
    def data(self) -> bytes:
        """The bytes (read from the content store the first time, for a blob parsed
        from the text format)."""
        if self._data is None:
            self._data = _load(self._digest, self.size)
            _remember(self)
        return self._data

    def __bytes__(self) -> bytes:
        return self.data

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LibraryBlob) and other._digest == self._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    def __repr__(self) -> str:
        return f"<native library {self.size} bytes sha256:{self._digest[:12]}>"


_KNOWN: weakref.WeakValueDictionary[str, LibraryBlob] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def _remember(blob: LibraryBlob) -> None:
    with _LOCK:
        _KNOWN.setdefault(blob.sha256, blob)


def store_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The content store: ``<cache>/c/by-sha256``."""
    return resolve_cache_dir(cache_dir) / STORE_FOLDER


def store_library(blob: LibraryBlob, source: str | os.PathLike[str] | None = None,
                  cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Put ``blob`` into the content store (a hard link to ``source``, the cached file
    it was loaded from, when possible; else a copy); return its path there."""
    d = store_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / blob.sha256
    if path.is_file() and path.stat().st_size == blob.size:
        return path
    if source is not None:
        try:
            tmp = d / f".{blob.sha256}.{os.getpid()}.{threading.get_ident()}.link"
            os.link(source, tmp)
            os.replace(tmp, path)
            return path
        except OSError:
            pass
    atomic_write(path, blob.data)
    return path


def _load(sha256: str, size: int) -> bytes:
    path = store_dir() / sha256
    try:
        data = path.read_bytes()
    except OSError:
        raise MissingLibraryError(
            f"the native library sha256:{sha256} ({size} bytes) that the module refers to "
            f"is not in this process and not in the content store {path.parent}; rebuild "
            "it: run the pipeline from the lowering phase again (c.CompileKernels compiles "
            "and stores it), or point $PLAIT_CACHE_DIR at the cache that built it"
        ) from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise MissingLibraryError(
            f"the content store's file {path} does not hold the library sha256:{sha256} "
            f"({size} bytes) its name promises; delete it and rebuild the library")
    return data


def _blob_text(blob: LibraryBlob, printer: Any) -> str:
    return f'native_library(sha256="{blob.sha256}", size={blob.size})'


def _register_text_format() -> None:
    from plait.ir.parser import register_value_constructor
    from plait.ir.printer import register_value_printer

    register_value_printer(LibraryBlob, _blob_text)
    register_value_constructor("native_library", LibraryBlob.from_digest)


_register_text_format()


__all__ = ["LibraryBlob", "MissingLibraryError", "store_dir", "store_library"]
