"""Reading a model's weights once: each large initializer straight from its file into
the array the importer keeps.

A model file holds its weights inside the protobuf (``raw_data``) or in other files next
to it (external data).  Parsing the whole file with ``onnx`` and then converting every
initializer to an array holds each weight twice (the protobuf's bytes and the array)
until the protobuf is dropped; loading external data through ``onnx`` does the same.
For a model loaded from its path, :func:`open_model` instead parses the model with its
large initializers turned into external-data references to where their bytes already
are (:func:`plait.runtime.onnx_wire.externalize_initializers`: the model's own file),
and :func:`read_initializers` reads each one, main graph only, into a fresh array: the
peak while importing is the weights once plus the graph's structure.

By default a large weight whose offset in its file is a multiple of its element size
is a view of a private, copy-on-write mapping of its bytes (as onnxruntime and
llama.cpp map theirs): importing reads nothing, the weights are the page cache's pages
(shared with every process mapping the file, dropped and read again by the kernel
under memory pressure), and a pass that writes to one changes this process's copy of a
page, never the file.  Each weight has a mapping of its own, which goes with the last
array viewing it: a weight packed for a kernel leaves memory once packed, as a read
one would.  Other weights are read (``readinto`` a fresh buffer): those of
:data:`MIN_MAP_BYTES` or less, and those at an offset C code could not read as
aligned elements (inside the model's own file the protobuf's field header usually
puts them so; external data files written by ``onnx`` keep float32 weights aligned).

The caveat of any mapping: a file rewritten in place while mapped (``onnx.save`` and
``torch.onnx`` truncate and rewrite the same file) makes every later access of a weight
not yet copied a ``SIGBUS`` (or silently the new bytes).  Write a new file and rename it
over the old one (the mapping keeps the old file), or import with
``from_onnx(path, mmap=False)``: every weight is then read and the file is free as soon
as the import returns.

A location must name a file inside the model's folder: absolute paths, ``..`` and
symbolic links that lead out of the folder are refused, as ``onnx`` refuses them.
"""

from __future__ import annotations

import mmap
import os
from pathlib import PurePath
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto

from plait.runtime.onnx_wire import OnnxWireError, externalize_initializers

from .errors import OnnxImportError

MIN_READ_BYTES = 1 << 14
"""Initializers at least this large are read from the file by plait (smaller ones stay
in the protobuf, where they cost nothing worth a system call)."""

_RAW_DTYPES: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype("<f4"),
    TensorProto.DOUBLE: np.dtype("<f8"),
    TensorProto.FLOAT16: np.dtype("<f2"),
    TensorProto.INT8: np.dtype("i1"),
    TensorProto.UINT8: np.dtype("u1"),
    TensorProto.INT16: np.dtype("<i2"),
    TensorProto.UINT16: np.dtype("<u2"),
    TensorProto.INT32: np.dtype("<i4"),
    TensorProto.UINT32: np.dtype("<u4"),
    TensorProto.INT64: np.dtype("<i8"),
    TensorProto.UINT64: np.dtype("<u8"),
    TensorProto.BOOL: np.dtype("?"),
}
"""The element types whose ``raw_data`` is the array's bytes (little-endian); others
(bfloat16, float8, 4-bit, strings) are converted by ``onnx``."""


def open_model(path: str) -> bytes:
    """The bytes to parse for the model file at ``path``: the file with its large
    main-graph initializers turned into references to their own bytes in it (only the
    structure is read), or the whole file when there is nothing to turn or the walk
    does not understand it (the protobuf parser then reports what is wrong)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            try:
                stripped = externalize_initializers(view, os.path.basename(path),
                                                    MIN_READ_BYTES)
            except OnnxWireError:
                stripped = None
            return stripped if stripped is not None else view[:]


def _location_path(base_dir: str, location: str, tensor: str, source: str) -> str:
    parts = PurePath(location).parts
    if not location or os.path.isabs(location) or ".." in parts:
        raise OnnxImportError(
            f"initializer {tensor!r} keeps its data at {location!r}, which is not a file "
            "inside the model's folder; save the model with its data beside it",
            source=source,
        )
    full = os.path.join(base_dir, location)
    real, base = os.path.realpath(full), os.path.realpath(base_dir)
    if os.path.commonpath([real, base]) != base:
        raise OnnxImportError(
            f"initializer {tensor!r} keeps its data at {location!r}, a link that leads "
            f"out of the model's folder ({real}); copy the data file beside the model",
            source=source,
        )
    return full


def _external_info(t: TensorProto, source: str) -> tuple[str, int, int | None]:
    entries = {e.key: e.value for e in t.external_data}
    try:
        offset = int(entries.get("offset", 0) or 0)
        length = int(entries["length"]) if entries.get("length") else None
    except ValueError:
        raise OnnxImportError(
            f"initializer {t.name!r}: the external data's offset or length is not an "
            f"integer ({entries.get('offset')!r}, {entries.get('length')!r})",
            source=source,
        ) from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxImportError(f"initializer {t.name!r}: a negative external data offset or "
                              "length", source=source)
    return entries.get("location", ""), offset, length


MIN_MAP_BYTES = 1 << 16
"""Weights larger than this are mapped (the rest are read: a mapping costs a system
call and at least a page)."""


class FileMaps:
    """The data files of one import, each opened once; :meth:`view` maps one weight."""

    def __init__(self) -> None:
        self._files: dict[str, Any] = {}

    def view(self, path: str, dtype: np.dtype, count: int, offset: int) -> np.ndarray | None:
        """``count`` elements of ``dtype`` at ``offset`` of ``path`` as a view of a
        private mapping of their own pages, or None: too small, not aligned to the
        element size, bytes past the file's end, or a file that cannot be mapped (the
        weight is then read)."""
        nbytes = count * dtype.itemsize
        if nbytes <= MIN_MAP_BYTES or offset % dtype.itemsize:
            return None
        try:
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = open(path, "rb")  # noqa: SIM115 (closed by close())
            if offset + nbytes > os.fstat(f.fileno()).st_size:
                return None
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            m = mmap.mmap(f.fileno(), offset + nbytes - start, access=mmap.ACCESS_COPY,
                          offset=start)
        except (OSError, ValueError):
            return None
        return np.frombuffer(m, dtype, count, offset - start)

    def close(self) -> None:
        """Close the files (the mappings stay: each holds its own handle)."""
        for f in self._files.values():
            f.close()
        self._files.clear()


def _read_one(t: TensorProto, dtype: np.dtype, base_dir: str, source: str,
              maps: FileMaps | None = None) -> np.ndarray:
    location, offset, length = _external_info(t, source)
    shape = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in shape):
        raise OnnxImportError(f"initializer {t.name!r} has a negative dimension {shape}",
                              source=source)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    expected = count * dtype.itemsize
    if length is not None and length != expected:
        raise OnnxImportError(
            f"initializer {t.name!r} of shape {shape} and element type {dtype} needs "
            f"{expected} bytes, but its external data is {length} bytes long",
            source=source,
        )
    path = _location_path(base_dir, location, t.name, source)
    view = maps.view(path, dtype, count, offset) if maps is not None else None
    if view is not None:
        return view.reshape(shape)
    arr = np.empty(count, dtype)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset + expected > size:
                raise OnnxImportError(
                    f"initializer {t.name!r} needs bytes {offset} to {offset + expected} "
                    f"of its external data file {location!r}, which has {size}: the file is "
                    "truncated",
                    source=source,
                )
            f.seek(offset)
            got = f.readinto(memoryview(arr).cast("B")) if expected else 0
    except OSError as e:
        raise OnnxImportError(
            f"cannot read the external data of initializer {t.name!r} from {location!r} "
            f"in the model's folder {base_dir!r}: {e.strerror or e}; keep the data file "
            "beside the model", source=source,
        ) from None
    if got != expected:
        raise OnnxImportError(f"initializer {t.name!r}: read {got} of {expected} bytes from "
                              f"{location!r}", source=source)
    return arr.reshape(shape)


def read_initializers(model: ModelProto, base_dir: str, source: str, *,
                      mmap: bool = True) -> dict[str, np.ndarray]:
    """Every main-graph initializer of ``model`` whose data is external (in a file of
    ``base_dir``) and whose element type is plain bytes, each a view of a private
    mapping of its bytes (``mmap``, for large aligned ones: see the module's docstring)
    or read into its own array; the tensor in ``model`` is left with its type and
    dimensions but no data (the importer takes the array instead).  Returns the arrays
    by initializer name."""
    maps = FileMaps() if mmap else None
    arrays: dict[str, np.ndarray] = {}
    try:
        for t in model.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL or t.name in arrays:
                continue
            dtype = _RAW_DTYPES.get(t.data_type)
            if dtype is None or not t.name:
                continue
            arrays[t.name] = _read_one(t, dtype, base_dir, source, maps)
            del t.external_data[:]
            t.ClearField("data_location")
    finally:
        if maps is not None:
            maps.close()
    return arrays


__all__ = ["MIN_MAP_BYTES", "MIN_READ_BYTES", "FileMaps", "open_model", "read_initializers"]
