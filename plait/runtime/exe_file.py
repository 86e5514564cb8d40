"""The executable's file: a zip archive.

* ``manifest.json`` — format name and version, attributes, functions with their
  instructions (JSON objects tagged with their ``kind``), the constant, library and
  graph members, and the SHA-256 of every other member (``members``);
* ``constants/<i>.npy`` — one ``.npy`` member per constant (never pickled);
* ``libs/<i>`` — each native library, verbatim;
* ``graph/module.plait.py`` — the graph in the text format (parsed, never executed);
* ``external/<i>/<member>`` — the binary members of each external module (what an
  external codegen compiled its functions into, :mod:`plait.runtime.external`),
  described in the manifest's ``external`` list (present only when there are some);
* ``signatures.json`` — signatures of ``manifest.json`` (see :mod:`plait.runtime.trust`).

Reading never executes anything from the file: every member's digest is checked first
(a corrupted or edited member is an error), JSON is parsed, arrays are read with
``allow_pickle=False``, and every field is checked; :func:`read_zip` returns the fields
of an :class:`~plait.runtime.executable.Executable`, which validates them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from plait.runtime.exe_values import (
    ARRAY_KINDS,
    ExecutableFormatError,
    SignatureError,
    decode_value,
    encode_value,
    fail,
    normalize_value,
    short_repr,
)
from plait.runtime.external import ExternalFunction, ExternalModule, TensorSig
from plait.runtime.instructions import (
    INSTRUCTIONS,
    Const,
    Imm,
    Instr,
    ParamSig,
    Reg,
    VMFunction,
    arg_from_json,
    arg_to_json,
    instr_fields,
)
from plait.runtime.limits import LimitExceeded, check_limit, current_limits
from plait.runtime.mapped_members import FileMap, align_extra
from plait.runtime.trust import SIGNATURES_MEMBER, Trust, sha256_hex, signatures, verify

FORMAT_NAME = "plait.executable"
FORMAT_VERSION = 2
"""2: the manifest holds every member's SHA-256, the graph, and signatures may follow."""
GRAPH_MEMBER = "graph/module.plait.py"
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: same program, same bytes


# --------------------------------------------------------------------- serialization

MANIFEST = "manifest.json"
_MANIFEST_KEYS = {
    "format", "version", "attrs", "functions", "constants", "libs", "graph", "members"
}
_OPTIONAL_KEYS = {"external", "graph_constants"}
_EXTERNAL_KEYS = {"codegen", "format", "functions", "meta", "members"}
_EXTERNAL_FUNCTION_KEYS = {"name", "inputs", "outputs"}
_DIGEST = re.compile(r"[0-9a-f]{64}")
_FUNCTION_KEYS = {"name", "params", "num_registers", "instructions"}
_PARAM_KEYS = {"name", "kind", "shape", "dtype"}


def _instr_to_json(ins: Instr) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": ins.kind}
    for name, ftype, value in instr_fields(ins):
        if ftype == "args":
            value = [arg_to_json(a) for a in value]
        elif ftype == "kwargs":
            value = {
                k: arg_to_json(v if isinstance(v, Reg | Const) else Imm(v))
                for k, v in value.items()
            }
        elif ftype == "shape":
            value = list(value)
        out[name] = value
    return out


def _function_to_json(fn: VMFunction) -> dict[str, Any]:
    return {
        "name": fn.name,
        "params": [
            {
                "name": p.name,
                "kind": p.kind,
                "shape": None if p.shape is None else list(p.shape),
                "dtype": p.dtype,
            }
            for p in fn.params
        ],
        "num_registers": fn.num_registers,
        "instructions": [_instr_to_json(ins) for ins in fn.instructions],
    }


def process_umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, briefly,
    for every thread); 0o022 where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _c_order(array: np.ndarray) -> np.ndarray:
    """``array`` if C-contiguous, else a C-ordered copy (keeps 0-d arrays 0-d, unlike
    ``np.ascontiguousarray``)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _write_member(zf: zipfile.ZipFile, name: str, data: bytes, compress: bool) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    zf.writestr(info, data)


class _Hashing:
    """A write-only file that hashes what goes through it (SHA-256)."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha.update(data)
        return self.f.write(data)


def _stream_member(zf: zipfile.ZipFile, name: str, write: Any, compress: bool,
                   size_hint: int) -> str:
    """Write member ``name`` by ``write(file)`` without holding it whole; its SHA-256."""
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    zip64 = size_hint > 2**30
    if not compress and zf.fp is not None and zf.fp.seekable():
        info.extra = align_extra(zf.fp.tell(), name, zip64)   # mapped on load, aligned
    with zf.open(info, "w", force_zip64=zip64) as f:
        out = _Hashing(f)
        write(out)
    return out.sha.hexdigest()


def _write_npy(f: Any, array: np.ndarray) -> None:
    """``np.save``'s bytes (format 1.0, as ``write_array`` picks for these headers),
    written from the array's own memory: ``write_array`` copies a file-like target in
    16 MiB chunks, which the weights' peak would include."""
    array = _c_order(np.asarray(array))
    if array.dtype.hasobject:
        raise ValueError("an executable's constants cannot hold Python objects")
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
    f.write(memoryview(array.reshape(-1)).cast("B"))


def _array_writer(array: np.ndarray) -> Any:
    return lambda f: _write_npy(f, array)


def _bytes_writer(data: bytes | bytearray) -> Any:
    return lambda f: f.write(data)


def write_zip(exe: Any, fileobj: Any, sign_key: Any = None) -> None:
    """Write the members one at a time (arrays streamed, never a second copy of the
    weights in memory), then the manifest with their digests, then its signatures."""
    const_members = [f"constants/{i}.npy" for i in range(len(exe.constants))]
    lib_members = [f"libs/{i}" for i in range(len(exe.libs))]
    # (member, writer, compress, size hint)
    payloads: list[tuple[str, Any, bool, int]] = []
    for member, array in zip(const_members, exe.constants):
        payloads.append((member, _array_writer(array), False, array.nbytes))
    for member, blob in zip(lib_members, exe.libs.values()):
        payloads.append((member, _bytes_writer(blob), False, len(blob)))
    graph_constants: dict[str, str] = {}
    if exe.graph is not None:
        payloads.append((GRAPH_MEMBER, _bytes_writer(exe.graph.encode("utf-8")), True, 0))
        graph_constants = _graph_constant_members(exe, const_members, payloads)
    external = [_external_to_json(i, m) for i, m in enumerate(exe.external)]
    for entry, m in zip(external, exe.external):
        for ref in entry["members"]:
            blob = m.blobs[ref["name"]]
            payloads.append((ref["member"], _bytes_writer(blob), True, len(blob)))
    with zipfile.ZipFile(fileobj, "w") as zf:
        digests = {member: _stream_member(zf, member, write, compress, size)
                   for member, write, compress, size in payloads}
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "attrs": encode_value(normalize_value(exe.attrs, allow_dict=True)),
            "functions": [_function_to_json(fn) for fn in exe.functions.values()],
            "constants": const_members,
            "libs": [{"name": n, "member": m} for n, m in zip(exe.libs, lib_members)],
            "graph": None if exe.graph is None else GRAPH_MEMBER,
            "members": digests,
        }
        if external:
            manifest["external"] = external
        if graph_constants:
            manifest["graph_constants"] = graph_constants
        text = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
        signed = signatures(text, exe.trust, sign_key)
        _write_member(zf, MANIFEST, text, compress=True)
        if signed is not None:
            _write_member(zf, SIGNATURES_MEMBER, signed, compress=True)


REF_BYTES = 4096
"""The smallest constant the text printer keeps by reference
(``plait.ir.printer.CONSTANT_REF_BYTES``; the runtime does not import the compiler):
smaller ones are never a graph constant's match, so they are not hashed."""


def content_key(data: np.ndarray) -> str:
    """The key of an array by content: the SHA-256 of its little-endian bytes (the
    text printer keys the graph's constants the same way,
    :func:`plait.ir.printer.constant_key`)."""
    raw = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    return "sha256:" + hashlib.sha256(memoryview(raw).cast("B")).hexdigest()


def _graph_constant_members(exe: Any, const_members: list[str],
                            payloads: list[tuple[str, Any, bool, int]]) -> dict[str, str]:
    """The member of each of the graph's constants (``{key: member}``): the member of an
    equal constant of the executable when there is one (the weights a build kept as
    they were), else a member of its own (added to ``payloads``)."""
    if not exe.graph_constants:
        return {}
    by_id = {id(c): m for c, m in zip(exe.constants, const_members)}
    by_key: dict[str, str] | None = None
    out: dict[str, str] = {}
    table = exe.graph_constants
    derived = getattr(table, "is_derived", None)
    for key in table:
        size = None
        member = None
        if derived is None or not derived(key):
            array = table[key]   # (one at a time: a file-backed table reads it)
            member, size = by_id.get(id(array)), np.asarray(array).nbytes
            del array
        # a derived array is computed afresh when read, never one of the executable's:
        # it is computed once, when its member is written
        if member is None:
            if by_key is None:  # hash the executable's constants once, when needed
                by_key = {content_key(c): m for c, m in zip(exe.constants, const_members)
                          if c.nbytes >= REF_BYTES}
            member = by_key.get(key)
        if member is None:
            member = f"graph/constants/{len(out)}.npy"
            if size is None and hasattr(table, "nbytes"):
                size = table.nbytes(key)
            if size is None:
                size = np.asarray(table[key]).nbytes
            payloads.append((member, _table_writer(table, key), False, size))
        out[key] = member
    return out


def _table_writer(table: Mapping[str, np.ndarray], key: str) -> Any:
    """Writes ``table[key]``, read when written: the members are written one at a time,
    so a table that computes its arrays (the graph's constants unpacked from the
    executable's, or read from a file) never holds them all."""
    return lambda f: _write_npy(f, table[key])


def _sig_to_json(t: TensorSig) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype}


def _external_to_json(i: int, m: ExternalModule) -> dict[str, Any]:
    return {
        "codegen": m.codegen,
        "format": m.format,
        "functions": [{"name": f.name, "inputs": [_sig_to_json(t) for t in f.inputs],
                       "outputs": [_sig_to_json(t) for t in f.outputs]}
                      for f in m.functions],
        "meta": encode_value(normalize_value(dict(m.meta), allow_dict=True,
                                             where=f"metadata of external module {i}")),
        "members": [{"name": k, "member": f"external/{i}/{k}"} for k in sorted(m.blobs)],
    }


def _sig_from_json(data: Any, where: str) -> TensorSig:
    _expect_keys(data, {"shape", "dtype"}, where)
    _expect(isinstance(data["shape"], list), where, "shape must be a list")
    _expect(isinstance(data["dtype"], str), where, "dtype must be a string")
    return TensorSig(tuple(data["shape"]), data["dtype"])


def _external_from_json(blobs: dict[str, bytes], data: Any, where: str) -> ExternalModule:
    _expect_keys(data, _EXTERNAL_KEYS, where)
    _expect(isinstance(data["functions"], list), where, "functions must be a list")
    _expect(isinstance(data["members"], list), where, "members must be a list")
    functions = []
    for j, f in enumerate(data["functions"]):
        at = f"{where} function {j}"
        _expect_keys(f, _EXTERNAL_FUNCTION_KEYS, at)
        _expect(isinstance(f["inputs"], list) and isinstance(f["outputs"], list), at,
                "inputs and outputs must be lists")
        functions.append(ExternalFunction(
            f["name"], tuple(_sig_from_json(t, f"{at} input") for t in f["inputs"]),
            tuple(_sig_from_json(t, f"{at} output") for t in f["outputs"])))
    members: dict[str, bytes] = {}
    for ref in data["members"]:
        _expect_keys(ref, {"name", "member"}, f"{where} member")
        _expect(isinstance(ref["name"], str) and ref["name"] not in members, where,
                f"member name {short_repr(ref['name'])} is invalid or duplicated")
        members[ref["name"]] = bytes(_member(blobs, ref["member"], where))
    meta = decode_value(data["meta"], allow_dict=True)
    _expect(isinstance(meta, dict), where, "meta must be an object")
    try:
        return ExternalModule(data["codegen"], data["format"], tuple(functions), members, meta)
    except (TypeError, ValueError) as e:
        raise ExecutableFormatError(f"{where}: {e}") from None


def _expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        fail(where, message)


def _expect_keys(data: Any, keys: set[str], where: str) -> None:
    _expect(isinstance(data, dict), where, f"expected a JSON object, got {short_repr(data)}")
    missing, extra = keys - set(data), set(data) - keys
    _expect(not missing, where, f"missing field(s) {', '.join(sorted(missing))}")
    _expect(not extra, where, f"unknown field(s) {', '.join(sorted(map(str, extra)))}")


def _instr_from_json(data: Any, where: str) -> Instr:
    _expect(isinstance(data, dict), where, f"expected a JSON object, got {short_repr(data)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in INSTRUCTIONS:
        fail(
            where,
            f"unknown instruction kind {short_repr(kind)}; known kinds: {', '.join(INSTRUCTIONS)}",
        )
    cls = INSTRUCTIONS[kind]
    _expect_keys(data, {"kind", *cls.schema}, f"{where} ({kind})")
    kw: dict[str, Any] = {}
    try:
        for name, ftype in cls.schema.items():
            value = data[name]
            if ftype == "args":
                _expect(isinstance(value, list), where, f"field {name!r} must be a list")
                value = [arg_from_json(a) for a in value]
            elif ftype == "kwargs":
                _expect(isinstance(value, dict), where, f"field {name!r} must be an object")
                value = {k: arg_from_json(v) for k, v in value.items()}
            elif ftype == "shape":
                _expect(isinstance(value, list), where, f"field {name!r} must be a list")
            kw[name] = value
        return cls(**kw)
    except ExecutableFormatError as e:
        msg = str(e)
        raise ExecutableFormatError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    except TypeError as e:
        raise ExecutableFormatError(f"{where}: {e}") from None


def _function_from_json(data: Any, where: str) -> VMFunction:
    _expect_keys(data, _FUNCTION_KEYS, where)
    where = f"{where} ({short_repr(data['name'])})"
    _expect(isinstance(data["params"], list), where, "params must be a list")
    _expect(isinstance(data["instructions"], list), where, "instructions must be a list")
    params = []
    for i, p in enumerate(data["params"]):
        _expect_keys(p, _PARAM_KEYS, f"{where} parameter {i}")
        shape = p["shape"]
        _expect(
            shape is None or isinstance(shape, list),
            f"{where} parameter {i}",
            "shape must be a list or null",
        )
        params.append(ParamSig(p["name"], p["kind"], shape, p["dtype"]))
    instructions = [
        _instr_from_json(ins, f"{where}, pc {pc}") for pc, ins in enumerate(data["instructions"])
    ]
    return VMFunction(data["name"], params, data["num_registers"], instructions)


class _Budget:
    """What is left of ``max_inflated_bytes`` (:mod:`plait.runtime.limits`) while an archive's
    members are read: a member is never inflated past it, whatever its header says.

    Only compressed members count: a stored member's bytes are the file's own (its
    size on disk is its size in memory, a view of the file's mapping where it can be),
    so a file cannot ask through them for more than it is.  A stored member must
    declare as many bytes as it stores, else the archive is refused: that is what
    keeps a 5 GB model's weights loadable and a few-MB file from asking for 5 GB."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.allowed = current_limits().max_inflated_bytes
        self.used = 0
        stored = 0
        for i in zf.infolist():
            if i.compress_type == zipfile.ZIP_STORED and i.file_size != i.compress_size:
                raise ExecutableFormatError(
                    f"member {i.filename!r} is stored uncompressed but declares "
                    f"{i.file_size:,} bytes for the {i.compress_size:,} it stores: the "
                    "archive is damaged or forged")
            if not _inflates(i):
                stored += i.file_size
        fp = zf.fp
        if fp is not None:
            at = fp.tell()
            length = fp.seek(0, 2)
            fp.seek(at)
            if stored > length:
                raise ExecutableFormatError(
                    f"the archive's uncompressed members declare {stored:,} bytes, more "
                    f"than its {length:,} bytes hold: it is truncated or forged")
        if self.allowed is not None:   # the declared sizes first: refuse before inflating
            check_limit("max_inflated_bytes",
                        sum(i.file_size for i in zf.infolist() if _inflates(i)),
                        "the executable's compressed members declare")

    def take(self, info: zipfile.ZipInfo) -> int:
        """Count member ``info``'s declared bytes (when compressed); the bytes that
        may still be inflated."""
        if not _inflates(info):
            return 1 << 62
        name = info.filename
        self.used += info.file_size
        if self.allowed is None:
            return 1 << 62
        if self.used > self.allowed:
            raise LimitExceeded("max_inflated_bytes", self.used, self.allowed,
                                f"member {name!r}: the executable's members inflate to "
                                "at least")
        return self.allowed - self.used


def _inflates(info: zipfile.ZipInfo) -> bool:
    """Whether reading member ``info`` makes more bytes than the file holds for it (a
    compressed member), which :class:`_Budget` counts."""
    return info.compress_type != zipfile.ZIP_STORED


def _read_member(zf: zipfile.ZipFile, name: Any, budget: _Budget | None = None,
                 mapped: FileMap | None = None) -> bytearray | memoryview:
    """A member's bytes, inflated straight into one buffer of its declared size (an
    array made from it is a view, not a copy); zipfile checks the size and CRC.  The
    declared size is counted against ``budget`` (``max_inflated_bytes``) before the
    buffer is made, and no more than it is ever read.  With ``mapped`` (the file's
    mapping), a stored member is a view of the mapping instead (its SHA-256, checked by
    the caller, stands for the CRC)."""
    _expect(isinstance(name, str), "manifest",
            f"member name must be a string, got {short_repr(name)}")
    try:
        info = zf.getinfo(name)
        if budget is not None:
            budget.take(info)
        view = mapped.member(info) if mapped is not None else None
        if view is not None:
            return view
        buf = bytearray(info.file_size)
        view = memoryview(buf)
        with zf.open(info) as f:
            got = 0
            while got < len(buf):
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            if got != len(buf) or f.read(1):
                raise ExecutableFormatError(f"member {name!r} does not hold the "
                                            f"{info.file_size} bytes its entry declares")
        return buf
    except KeyError:
        raise ExecutableFormatError(f"the archive has no member {name!r}") from None
    except (ExecutableFormatError, LimitExceeded):
        raise
    except Exception as e:  # CRC errors, bad compression, encryption, truncation
        raise ExecutableFormatError(f"cannot read member {name!r}: {e}") from None


def _member(blobs: dict[str, bytes], name: Any, where: str) -> bytes:
    """A member's (verified) bytes, by the name the manifest gives."""
    _expect(isinstance(name, str), where, f"member name must be a string, got {short_repr(name)}")
    if name not in blobs:
        raise ExecutableFormatError(f"{where}: the archive has no member {name!r}")
    return blobs[name]


def _npy_head(data: bytes | bytearray) -> bytes:
    """The magic string and header of the ``.npy`` bytes ``data`` (all of ``data`` when
    it is too short to say: reading the header then reports what is wrong)."""
    if len(data) >= 12 and data[:6] == b"\x93NUMPY":
        if data[6] == 1:
            return bytes(data[:10 + int.from_bytes(data[8:10], "little")])
        if data[6] in (2, 3):
            return bytes(data[:12 + int.from_bytes(data[8:12], "little")])
    return bytes(data[:4096])


def _read_array(data: bytes | bytearray, member: str, where: str) -> np.ndarray:
    """The ``.npy`` array in ``data``: a view of ``data`` (no copy) when C-ordered."""
    try:
        f = io.BytesIO(_npy_head(data))  # the header only: BytesIO copies what it is given
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except Exception as e:
        raise ExecutableFormatError(
            f"{where}: member {member!r} is not a .npy array without Python objects: {e}"
        ) from None
    if dtype.hasobject or dtype.kind not in ARRAY_KINDS:
        fail(where, f"dtype {dtype} is not allowed (numeric and bool only)")
    count = 1
    for d in shape:
        count *= d
    offset = f.tell()
    if len(data) - offset != count * dtype.itemsize:
        fail(where, f"member {member!r} holds {len(data) - offset} bytes of data, but its "
                     f"header says {shape} {dtype} ({count * dtype.itemsize} bytes)")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    array = array.reshape(shape[::-1]).T if fortran else array.reshape(shape)
    return _c_order(array)


def _check_header(manifest: Any) -> None:
    _expect(isinstance(manifest, dict), MANIFEST, "expected a JSON object")
    _expect(
        manifest.get("format") == FORMAT_NAME,
        MANIFEST,
        f"format is {short_repr(manifest.get('format'))}, expected {FORMAT_NAME!r}",
    )
    if "version" not in manifest:
        fail(MANIFEST, "missing format version")
    if manifest["version"] == 1:
        fail(MANIFEST, "format version 1 (written by an older plait) records no digests of "
                         "its members, so it cannot be checked; build the model again")
    if manifest["version"] != FORMAT_VERSION:
        fail(
            MANIFEST,
            f"unsupported format version {short_repr(manifest['version'])} "
            f"(this plait reads version {FORMAT_VERSION})",
        )
    _expect_keys({k: v for k, v in manifest.items() if k not in _OPTIONAL_KEYS},
                 _MANIFEST_KEYS, MANIFEST)
    for key in ("functions", "constants", "libs"):
        _expect(isinstance(manifest[key], list), MANIFEST, f"{key} must be a list")
    digests = manifest["members"]
    _expect(isinstance(digests, dict), MANIFEST, "members must be an object")
    for name, digest in digests.items():
        _expect(
            name not in (MANIFEST, SIGNATURES_MEMBER) and isinstance(digest, str)
            and _DIGEST.fullmatch(digest) is not None,
            f"{MANIFEST}: members",
            f"entry {short_repr(name)}: {short_repr(digest)} is not a SHA-256 in lowercase hex",
        )


_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads hashing the members of a file being loaded."""


def _verified_members(zf: zipfile.ZipFile, digests: dict[str, str],
                      lazy: frozenset[str] = frozenset(),
                      budget: _Budget | None = None,
                      mapped: FileMap | None = None) -> dict[str, bytes]:
    """Every member the manifest lists, read once and checked against its digest, but
    those in ``lazy`` (read and checked when used); the archive must hold exactly those
    (and the manifest and signatures).  The constants are views of ``mapped`` (the
    file's mapping) where it has them (:mod:`plait.runtime.mapped_members`)."""
    names = [info.filename for info in zf.infolist()]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ExecutableFormatError(f"the archive holds member {n!r} twice")
        seen.add(n)
    extra = sorted(seen - set(digests) - {MANIFEST, SIGNATURES_MEMBER})
    if extra:
        raise ExecutableFormatError(
            f"the archive has member(s) the manifest does not list: {', '.join(map(repr, extra))}"
        )
    blobs: dict[str, bytes] = {}
    # threads hash the members while this one reads the next (hashlib and zlib let go
    # of the GIL on large buffers): loading costs about the longer of the two, not their
    # sum.  Mapped constants cost no reading, so the hashing is all of it: one thread
    # per core (up to 4), each hashing whole members
    read: list[tuple[str, str, bytearray, Any]] = []
    with ThreadPoolExecutor(max_workers=_HASH_THREADS) as hasher:
        for name, want in digests.items():
            if name not in seen:
                raise ExecutableFormatError(
                    f"the archive has no member {name!r} (the manifest lists it)"
                )
            if name in lazy:
                continue
            data = _read_member(zf, name, budget,
                                mapped if name.startswith("constants/") else None)
            # a mapped member is hashed from the file, not through its mapping (which
            # would make all its pages resident: FileMap.sha256)
            on_map = mapped is not None and name in mapped.spans
            read.append((name, want, data, hasher.submit(mapped.sha256, name) if on_map
                         else hasher.submit(sha256_hex, data)))
    for name, want, data, hashed in read:
        got = hashed.result()
        if got != want:
            raise ExecutableFormatError(
                f"member {name!r} was altered: its SHA-256 is {got[:16]}..., the manifest "
                f"records {want[:16]}... (the file was corrupted or edited after it was "
                "written; rebuild it or get it again from its source)"
            )
        blobs[name] = data
    return blobs


class _GraphConstants(Mapping[str, np.ndarray]):
    """The graph's constants of a loaded file, read from it when asked for: each time
    (nothing is kept), checked against the digest the manifest recorded; those equal to
    a constant of the executable are that array."""

    def __init__(self, reopen: Any, members: dict[str, str], digests: dict[str, str],
                 loaded: dict[str, np.ndarray]) -> None:
        self._reopen, self._members, self._digests = reopen, members, digests
        self._loaded = loaded

    def __getitem__(self, key: str) -> np.ndarray:
        member = self._members[key]
        if member in self._loaded:
            return self._loaded[member]
        try:
            with self._reopen() as f, zipfile.ZipFile(f) as zf:
                data = _read_member(zf, member)
        except OSError as e:
            raise ExecutableFormatError(f"cannot read the graph's constant {member!r} from "
                                        f"the file: {e}") from None
        except zipfile.BadZipFile:
            data = None
        if data is None or sha256_hex(data) != self._digests[member]:
            raise ExecutableFormatError(
                f"the graph's constant {member!r} differs from what the file held when it "
                "was loaded (the file was changed or replaced since): load it again")
        return _read_array(data, member, f"the graph's constant {key}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def _graph_constants_of(manifest: dict[str, Any], constants: dict[str, np.ndarray],
                        reopen: Any) -> Mapping[str, np.ndarray]:
    table = manifest.get("graph_constants", {})
    _expect(isinstance(table, dict) and all(
        isinstance(k, str) and isinstance(m, str) and m in manifest["members"]
        for k, m in table.items()), MANIFEST,
        "graph_constants must map keys to members the manifest lists")
    if not table:
        return {}
    return _GraphConstants(reopen, dict(table), manifest["members"], constants)


def _lazy_members(manifest: dict[str, Any]) -> frozenset[str]:
    """The members read only when used: the graph's own constants."""
    table = manifest.get("graph_constants")
    if not isinstance(table, dict):
        return frozenset()
    used = set(manifest["constants"]) if isinstance(manifest.get("constants"), list) else set()
    return frozenset(m for m in table.values() if isinstance(m, str) and m not in used)


class ExecutableFields(NamedTuple):
    """What :func:`read_zip` read: the fields of an
    :class:`~plait.runtime.executable.Executable`, in its constructor's order."""

    functions: dict[str, VMFunction]
    constants: list[np.ndarray]
    attrs: dict[str, Any]
    libs: dict[str, bytes]
    graph: str | None
    trust: Trust
    lib_digests: dict[str, str]
    external: list[ExternalModule]
    graph_constants: Mapping[str, np.ndarray]


def read_zip(
    fileobj: Any, trusted_keys: Iterable[Any], allow_native: bool, source: str,
    reopen: Any = None,
) -> ExecutableFields:
    """Read an executable's zip file from ``fileobj`` (checking every member's digest
    and the signatures by ``trusted_keys``); ``reopen()`` opens it again for the graph's
    constants, read when the graph is parsed."""
    try:
        zf = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        raise ExecutableFormatError(
            "not a plait executable: the file is not a zip archive"
        ) from None
    except Exception as e:  # NotImplementedError for an unknown zip version, ...
        raise ExecutableFormatError(
            f"not a plait executable: the zip archive is damaged or of an unsupported "
            f"kind ({type(e).__name__}: {e})"
        ) from None
    with zf:
        names = set(zf.namelist())
        if MANIFEST not in names:
            raise ExecutableFormatError(f"not a plait executable: no {MANIFEST} in the archive")
        budget = _Budget(zf)
        raw = _read_member(zf, MANIFEST, budget)
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ExecutableFormatError(f"{MANIFEST} is not valid JSON: {e}") from None
        _check_header(manifest)
        blobs = _verified_members(zf, manifest["members"], _lazy_members(manifest), budget,
                                  FileMap(fileobj))
        signed = (_read_member(zf, SIGNATURES_MEMBER, budget) if SIGNATURES_MEMBER in names
                  else None)
    try:
        signer, mismatch = verify(raw, signed, trusted_keys)
    except ValueError as e:
        raise ExecutableFormatError(str(e)) from None
    if mismatch is not None:
        raise SignatureError(mismatch)
    functions: dict[str, VMFunction] = {}
    for i, data in enumerate(manifest["functions"]):
        fn = _function_from_json(data, f"{MANIFEST}: functions[{i}]")
        _expect(
            isinstance(fn.name, str) and fn.name not in functions,
            MANIFEST,
            f"function name {short_repr(fn.name)} is invalid or duplicated",
        )
        functions[fn.name] = fn
    constants = []
    by_member: dict[str, np.ndarray] = {}
    for i, m in enumerate(manifest["constants"]):
        where = f"constant {i}"
        constants.append(_read_array(_member(blobs, m, where), m, where))
        by_member[m] = constants[-1]
    attrs = decode_value(manifest["attrs"], allow_dict=True)
    _expect(isinstance(attrs, dict), MANIFEST, "attrs must be an object")
    libs: dict[str, bytes] = {}
    lib_digests: dict[str, str] = {}
    for i, entry in enumerate(manifest["libs"]):
        where = f"{MANIFEST}: libs[{i}]"
        _expect_keys(entry, {"name", "member"}, where)
        _expect(
            isinstance(entry["name"], str) and entry["name"] not in libs,
            where,
            "library name is invalid or duplicated",
        )
        libs[entry["name"]] = bytes(_member(blobs, entry["member"], where))
        lib_digests[entry["name"]] = manifest["members"][entry["member"]]
    graph = None
    if manifest["graph"] is not None:
        data = _member(blobs, manifest["graph"], f"{MANIFEST}: graph")
        try:
            graph = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ExecutableFormatError(f"the graph member is not UTF-8 text: {e}") from None
    raw_external = manifest.get("external", [])
    _expect(isinstance(raw_external, list), MANIFEST, "external must be a list")
    external = [_external_from_json(blobs, m, f"{MANIFEST}: external[{i}]")
                for i, m in enumerate(raw_external)]
    trust = Trust("file", signer, bool(allow_native), source)
    graph_constants = _graph_constants_of(manifest, by_member, reopen) if graph else {}
    return ExecutableFields(functions, constants, attrs, libs, graph, trust, lib_digests,
                            external, graph_constants)


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "GRAPH_MEMBER", "MANIFEST", "REF_BYTES",
           "ExecutableFields", "content_key", "process_umask", "read_zip", "write_zip"]
