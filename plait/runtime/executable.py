"""The executable: a data-only, serializable VM program.

An :class:`Executable` holds VM functions (register-machine code), constants (numpy
arrays), JSON-able attributes, opaque native libraries and, when it has libraries, the
text of the graph it was built from (to rebuild it on numpy).  It is saved as a zip
file (:mod:`.exe_file`):

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

Loading never executes anything from the file: every member's digest is checked first
(a corrupted or edited member is an error), JSON is parsed, arrays are read with
``allow_pickle=False``, and every field is validated before an ``Executable`` is
returned.  Running native code is another matter: the VM maps a library (which runs its
code) only when the file was signed by this machine or a trusted key, or the caller
allowed it (:class:`plait.runtime.trust.Trust`).  Values in immediates, keyword
arguments and attributes are encoded so that tuples come back as tuples
(``{"tuple": [...]}``), dicts as dicts (``{"dict": {...}}``) and non-finite floats as
floats (``{"float": "nan"}``).

This module is the container; its parts live in modules of one purpose each, whose
names it re-exports: the instruction set (:mod:`.instructions`), the values and the
format error (:mod:`.exe_values`), the checks (:mod:`.exe_check`) and the file format
(:mod:`.exe_file`).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plait.runtime.exe_check import validate_executable
from plait.runtime.exe_file import (
    FORMAT_NAME,
    FORMAT_VERSION,
    GRAPH_MEMBER,
    content_key,
    process_umask,
    read_zip,
)
from plait.runtime.exe_file import REF_BYTES as _REF_BYTES  # noqa: F401  (its old name here)
from plait.runtime.exe_file import write_zip as _write_zip  # called by this name (a test fails it)
from plait.runtime.exe_values import (
    ExecutableFormatError,
    SignatureError,
    decode_value,
    encode_value,
    normalize_value,
)
from plait.runtime.external import ExternalModule
from plait.runtime.instructions import (
    INSTRUCTIONS,
    PARAM_KINDS,
    AllocStorage,
    AllocTensor,
    Arg,
    Call,
    Const,
    Goto,
    If,
    Imm,
    Instr,
    Move,
    ParamSig,
    Reg,
    Ret,
    VMFunction,
    instr_fields,
)
from plait.runtime.trust import BUILT, Trust


@dataclass(eq=False)
class Executable:
    """A VM program: functions, constants, JSON-able attributes, native libraries and
    the text of the graph it was built from (None when not kept).

    ``trust`` says where it came from (built in this process, or read from a file and
    by whom that file is signed) and so whether its native code may run;
    ``lib_digests`` holds the SHA-256 of each library as the file's manifest recorded
    it (the VM refuses to map a library that no longer matches).  Compared by identity
    (constants are arrays); compare ``functions``, ``attrs`` and ``libs`` directly, or
    the bytes of :meth:`to_bytes`."""

    functions: dict[str, VMFunction]
    constants: list[np.ndarray] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    libs: dict[str, bytes] = field(default_factory=dict)
    graph: str | None = None
    trust: Trust = field(default=BUILT, repr=False)
    lib_digests: dict[str, str] = field(default_factory=dict, repr=False)
    external: list[ExternalModule] = field(default_factory=list)
    """The external modules: what external codegens compiled their functions into."""
    graph_constants: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    """The large constants of :attr:`graph`, which refers to them by key
    (``const(ref="sha256:...")``): kept once in the file (shared with :attr:`constants`
    where equal) and, for a loaded file, read from it only when the graph is parsed
    (:func:`plait.graph_module`)."""

    # --------------------------------------------------------------------- checking
    def validate(self) -> None:
        """Check every invariant the VM relies on; raise ``ExecutableFormatError``."""
        validate_executable(self)

    # ---------------------------------------------------------------- serialization
    def to_bytes(self, sign_key: Any = None) -> bytes:
        """The executable as the bytes of its zip file (validating it first), signed by
        this machine when it was built here or came from a trusted file, and by
        ``sign_key`` (see :meth:`save`) when given."""
        self.validate()
        buf = io.BytesIO()
        _write_zip(self, buf, sign_key)
        return buf.getvalue()

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        trusted_keys: Iterable[Any] = (),
        allow_native: bool = False,
        source: str | None = None,
    ) -> Executable:
        """Load an executable from the bytes of its zip file (see :meth:`load`)."""
        try:
            exe = cls(*read_zip(io.BytesIO(data), trusted_keys, allow_native,
                                source or "<bytes>", lambda: io.BytesIO(data)))
        except RecursionError:
            raise ExecutableFormatError("manifest.json is nested too deeply") from None
        exe.validate()
        return exe

    def save(self, path: str | os.PathLike[str], sign_key: Any = None) -> None:
        """Write the executable to ``path`` as a zip file (validating it first).

        Every member's SHA-256 goes into the manifest.  The manifest is signed with
        this machine's key (so loading the file here runs its native code without
        further ado) unless the executable came from an untrusted file, and with
        ``sign_key`` when given: ``bytes`` of at least 16 (an HMAC-SHA256 secret shared
        with whoever loads the file) or a ``cryptography`` ``Ed25519PrivateKey`` (those
        who load it need only the public key)."""
        self.validate()
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".plait-save-", dir=folder)
        try:  # written next to its place, then renamed: never a half-written file
            with os.fdopen(fd, "wb") as f:
                _write_zip(self, f, sign_key)
            os.chmod(tmp, 0o666 & ~process_umask())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        trusted_keys: Iterable[Any] = (),
        allow_native: bool = False,
    ) -> Executable:
        """Read and validate an executable saved by :meth:`save`.

        Never runs code from the file: every member is checked against its SHA-256
        before anything is used, and nothing is mapped or executed.  Raises
        ``ExecutableFormatError`` for anything malformed or altered (not a zip, unknown
        version or instruction, bad indices, a member whose digest differs, ...) and
        :class:`SignatureError` when a signature by a trusted key does not match.

        The result's native code may run (in a ``VirtualMachine``) when the file is
        signed by this machine or by one of ``trusted_keys`` (HMAC secrets as bytes,
        Ed25519 public keys), or when ``allow_native`` is true; otherwise the VM raises
        :class:`~plait.runtime.trust.UntrustedCodeError`, which names the way to run
        the kept graph on numpy instead (``plait.rebuild(exe, "numpy")``)."""
        source = os.fspath(path)
        with open(path, "rb") as f:  # members are read one at a time, never the whole file
            try:
                exe = cls(*read_zip(f, trusted_keys, allow_native, source,
                                    lambda: open(source, "rb")))
            except RecursionError:
                raise ExecutableFormatError("manifest.json is nested too deeply") from None
        exe.validate()
        return exe

    # ------------------------------------------------------------------- inspection
    def stats(self) -> dict[str, Any]:
        """Sizes and counts: per function registers, instructions and callees; constant
        and library bytes; the attributes."""
        funcs = {}
        for name, fn in self.functions.items():
            callees: dict[str, int] = {}
            for ins in fn.instructions:
                if isinstance(ins, Call):
                    callees[ins.func] = callees.get(ins.func, 0) + 1
            funcs[name] = {
                "params": len(fn.params),
                "registers": fn.num_registers,
                "instructions": len(fn.instructions),
                "calls": callees,
            }
        return {
            "functions": funcs,
            "graph_bytes": None if self.graph is None else len(self.graph.encode()),
            "trust": str(self.trust),
            "num_constants": len(self.constants),
            "constant_bytes": int(sum(int(c.nbytes) for c in self.constants)),
            "num_libs": len(self.libs),
            "lib_bytes": int(sum(len(b) for b in self.libs.values())),
            "external": {m.codegen: [f.name for f in m.functions] for m in self.external},
            "attrs": dict(self.attrs),
        }

    def as_text(self) -> str:
        """A readable listing of attributes, constants, functions and instructions."""
        st = self.stats()
        lines = [
            f"executable: {len(self.functions)} function(s), {st['num_constants']} "
            f"constant(s) ({st['constant_bytes']} bytes), {st['num_libs']} lib(s)"
        ]
        for key, value in self.attrs.items():
            lines.append(f"attr {key} = {value!r}")
        for i, c in enumerate(self.constants):
            lines.append(f"const c[{i}]: {c.dtype} {tuple(c.shape)}")
        for name, nbytes in ((n, len(b)) for n, b in self.libs.items()):
            lines.append(f"lib {name!r}: {nbytes} bytes")
        for m in self.external:
            lines.append(f"external {m.format} module of codegen {m.codegen!r}:")
            lines.extend(f"  {f}" for f in m.functions)
        if self.graph is not None:
            lines.append(f"graph: {st['graph_bytes']} bytes of text")
        lines.append(f"from: {self.trust}")
        for fn in self.functions.values():
            params = ", ".join(str(p) for p in fn.params)
            lines.append("")
            lines.append(f"func {fn.name}({params})  # {fn.num_registers} registers")
            width = len(str(max(len(fn.instructions) - 1, 0)))
            for pc, ins in enumerate(fn.instructions):
                lines.append(f"  {pc:>{width}}: {ins}")
        return "\n".join(lines) + "\n"


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GRAPH_MEMBER",
    "INSTRUCTIONS",
    "PARAM_KINDS",
    "AllocStorage",
    "AllocTensor",
    "Arg",
    "Call",
    "Const",
    "Executable",
    "ExecutableFormatError",
    "Goto",
    "If",
    "Imm",
    "Instr",
    "Move",
    "ParamSig",
    "Reg",
    "Ret",
    "SignatureError",
    "VMFunction",
    "content_key",
    "decode_value",
    "encode_value",
    "instr_fields",
    "normalize_value",
]
