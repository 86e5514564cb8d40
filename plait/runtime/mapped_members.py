"""Constants mapped from the executable's file instead of copied (issue 31, item 5).

An executable's constants are stored uncompressed in its zip file.  :func:`align_extra`
pads each stored member's local header (a zip extra field, as Android's ``zipalign``
does) so that its data, and so the ``.npy`` array after its 64-byte header block,
starts on a 64-byte boundary of the file.  :class:`FileMap` maps the file
once per load (private, copy-on-write: the arrays stay writeable, and a write changes
this process's copy of a page, never the file) and hands out each stored member's bytes
as a view of the mapping: the weights are then the page cache's pages (shared by every
process that loads the file, dropped and read again by the kernel under memory
pressure), not a private copy on the heap.  Every member is still hashed (SHA-256
against the manifest) before use, from the file (:meth:`FileMap.sha256`: ``pread``
into a small buffer), not through the mapping: the pages a process has touched through
its mapping count in its resident memory, so hashing through it made every constant
resident at load, also those a model reads only a few rows of (the float embedding
table of a model whose other weights are quantized: 545 MiB at 0.5B).  A constant's
pages are now resident once the kernels read them.

A mapped file must not be changed in place while loaded (``Executable.save`` writes a
new file and renames it over the old one, which is safe: the mapping keeps the old
file).  ``PLAIT_MAP_CONSTANTS=0`` reads the constants into memory instead."""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import struct
import zipfile
from typing import Any

ALIGN = 64
"""The alignment of a stored member's data in the file (a cache line; AVX-512 loads)."""

_PAD_ID = 0xD935   # the extra-field id Android's zipalign uses for padding
_LOCAL_HEADER = 30
_HASH_CHUNK = 1 << 20   # bytes FileMap.sha256 reads at a time


def align_extra(header_offset: int, name: str, zip64: bool) -> bytes:
    """The extra field that puts the data of member ``name``, whose local header starts
    at ``header_offset``, on an :data:`ALIGN` boundary (``zipfile`` adds a 20-byte
    zip64 field after it when ``zip64``)."""
    start = header_offset + _LOCAL_HEADER + len(name.encode("utf-8")) + (20 if zip64 else 0)
    pad = -start % ALIGN
    if 0 < pad < 4:
        pad += ALIGN
    if pad == 0:
        return b""
    return struct.pack("<HH", _PAD_ID, pad - 4) + bytes(pad - 4)


def mapping_enabled() -> bool:
    """Whether loading maps constants (``PLAIT_MAP_CONSTANTS`` is not ``0``)."""
    return os.environ.get("PLAIT_MAP_CONSTANTS", "1").strip() != "0"


class FileMap:
    """A private (copy-on-write) mapping of an open zip file, or nothing where it cannot
    be made (not a regular file, an empty one, mapping refused)."""

    def __init__(self, fileobj: Any) -> None:
        self.map: mmap.mmap | None = None
        self._fileobj = fileobj
        self.spans: dict[str, tuple[int, int]] = {}   # member -> (file offset, size)
        if not mapping_enabled():
            return
        try:
            self.map = mmap.mmap(fileobj.fileno(), 0, access=mmap.ACCESS_COPY)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            self.map = None

    def member(self, info: zipfile.ZipInfo) -> memoryview | None:
        """The bytes of a stored (uncompressed) member as a view of the mapping, or None
        (compressed, encrypted, no mapping, or its header does not fit the file)."""
        m = self.map
        if m is None or info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return None
        off = info.header_offset
        if off < 0 or off + _LOCAL_HEADER > len(m) or m[off:off + 4] != b"PK\x03\x04":
            return None
        name_len, extra_len = struct.unpack("<HH", m[off + 26:off + 30])
        start = off + _LOCAL_HEADER + name_len + extra_len
        if start + info.file_size > len(m):
            return None
        self.spans[info.filename] = (start, info.file_size)
        return memoryview(m)[start:start + info.file_size]

    def sha256(self, name: str) -> str:
        """The SHA-256 (hex) of member ``name``, which :meth:`member` returned as a view,
        read from the file with ``pread`` rather than through the mapping, so that
        hashing leaves its pages out of this process's resident memory (the page cache
        holds them; the mapping's pages become resident when a kernel reads them).
        While the file is loaded it is not changed in place (the module's docstring),
        so the two hold the same bytes."""
        start, size = self.spans[name]
        h = hashlib.sha256()
        fd = self._fileobj.fileno()
        pos, end = start, start + size
        while pos < end:
            chunk = os.pread(fd, min(_HASH_CHUNK, end - pos), pos)
            if not chunk:
                raise OSError(f"the file ends at byte {pos}, inside member {name!r}")
            h.update(chunk)
            pos += len(chunk)
        return h.hexdigest()


def is_mapped(array: Any) -> bool:
    """Whether ``array``'s memory is a view of a file mapping (not the heap)."""
    base = array
    while True:
        if isinstance(base, mmap.mmap):
            return True
        if isinstance(base, memoryview):
            base = base.obj
        elif getattr(base, "base", None) is not None:
            base = base.base
        else:
            return False


__all__ = ["ALIGN", "FileMap", "align_extra", "is_mapped", "mapping_enabled"]
