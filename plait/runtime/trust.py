"""Trust in executables: who made a file, and whether the native code in it may run.

An executable file is data (JSON, ``.npy`` arrays) plus, for native targets, shared
libraries: mapping such a library runs its code (its constructors run at ``dlopen``).
The policy (docs/reliability.md has the threat model):

* every member of the file is hashed (SHA-256) in the manifest and checked before
  anything is used: a corrupted or edited member is an error, never a crash;
* a file may carry signatures of its manifest (which holds those digests): HMAC-SHA256
  (the standard library) with a shared secret, or Ed25519 (the ``cryptography``
  package, ``pip install plait[sign]``) with a key pair;
* native code from a file runs only when the file is signed by this machine's own key
  (every executable saved by a process of this user on this machine is), by a key the
  caller trusts (``Executable.load(path, trusted_keys=[...])``), or when the caller
  says so (``allow_native=True``).  Otherwise :class:`UntrustedCodeError` says how to
  run the executable's graph on numpy instead.

This machine's key is 32 random bytes in ``<cache>/keys/local.key`` (the cache is
``$PLAIT_CACHE_DIR``, ``$XDG_CACHE_HOME/plait`` or ``~/.cache/plait``), created on first
use, readable by its owner only; it is refused (with a warning) when the file or its
folder belongs to another user or is open to others.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plait.errors import PlaitError

SIGNATURES_MEMBER = "signatures.json"
"""The archive member holding the signatures of ``manifest.json``."""
HMAC_ALG = "hmac-sha256"
ED25519_ALG = "ed25519"
MIN_HMAC_KEY_BYTES = 16
LOCAL_KEY_BYTES = 32
_SIGNED_PREFIX = b"plait.executable signature 1\0"
"""Prepended to the manifest before signing, so a signature made for another purpose
with the same key never verifies as an executable's."""


class UntrustedCodeError(PlaitError, RuntimeError):
    """Native code from a file that is neither signed by a trusted key nor allowed by
    the caller; the message says how to allow it or run on numpy instead."""


# ------------------------------------------------------------------------ provenance


@dataclass(frozen=True)
class Trust:
    """Where an executable came from, and what that allows.

    ``origin`` is ``"built"`` (made in this process: by ``plait.build`` or by the
    caller's own code), ``"file"`` (read by ``Executable.load``/``from_bytes``) or
    ``"rebuilt"`` (built in this process from the graph of a file nobody vouched for:
    its native code is this compiler's, so it runs here, but saving never signs it);
    ``signer`` names the trusted key whose signature verified (``"this machine"`` for
    the local key), None when none did; ``allow_native`` is the caller's explicit
    permission; ``source`` the path or ``"<bytes>"`` the file was read from (for
    ``"rebuilt"``: where the graph came from)."""

    origin: str = "built"
    signer: str | None = None
    allow_native: bool = False
    source: str | None = None

    @property
    def native_allowed(self) -> bool:
        """Whether native code of the executable may be loaded and run: the one trust
        decision every path asks (:func:`require_trusted`)."""
        return (self.origin in ("built", "rebuilt") or self.signer is not None
                or self.allow_native)

    @property
    def vouched(self) -> bool:
        """Built here or signed by a trusted key: saving signs it with the local key.
        (``allow_native`` is a permission for one load; it never vouches for a file.)"""
        return self.origin == "built" or self.signer is not None

    def __str__(self) -> str:
        if self.origin == "built":
            return "built in this process"
        if self.origin == "rebuilt":
            return f"rebuilt in this process from the graph of {self.source or 'a file'}"
        where = self.source or "a file"
        if self.signer is not None:
            return f"{where}, signed by {self.signer}"
        return f"{where}, unsigned" + (" (native code allowed by the caller)"
                                      if self.allow_native else "")


BUILT = Trust()

MODULE_TRUST_ATTR = "trust"
"""The module attribute recording that a module came from the graph of a file nobody
vouched for (``{"source": "<where>", "allow_native": bool}``); ``plait.build`` gives
the executable it makes from such a module the ``"rebuilt"`` origin, which is never
signed by this machine's key."""


def module_trust_attr(trust: Trust) -> dict[str, Any] | None:
    """The :data:`MODULE_TRUST_ATTR` value for a module made from the graph of an
    executable of ``trust``; None when the executable is vouched for (built here, or
    signed by a trusted key)."""
    if trust.vouched:
        return None
    return {"source": str(trust), "allow_native": bool(trust.native_allowed)}


def rebuilt_trust(attr: Any) -> Trust | None:
    """The trust of an executable built from a module whose :data:`MODULE_TRUST_ATTR`
    is ``attr`` (None: no such attribute, the executable is ``built``)."""
    if attr is None:
        return None
    source = attr.get("source") if isinstance(attr, dict) else None
    return Trust("rebuilt", None, False, source if isinstance(source, str) else "a file")


_CODE_ATTRIBUTES: dict[str, str] = {}


def register_code_attribute(name: str, what: str) -> None:
    """Declare that module attribute ``name`` holds code or names files (``what``, e.g.
    ``"C sources"``): a module made from the graph of an untrusted file that carries
    it is not built without the caller's consent.  Targets and codegens register their
    attributes (the core names none)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a code attribute is named by a non-empty string, got {name!r}")
    _CODE_ATTRIBUTES[name] = what


def code_attributes() -> dict[str, str]:
    """The registered code attributes: ``{attribute: what it holds}``."""
    return dict(_CODE_ATTRIBUTES)


def require_trusted(trust: Trust | None, code: str | Callable[[], str],
                    fallback: str | Callable[[], str] = "", allow: str | None = None) -> None:
    """The one trust decision for turning a file's contents into running code or file
    reads: nothing to decide for ``trust`` None (the caller's own objects) or a trust
    that allows native code (:attr:`Trust.native_allowed`); otherwise
    :class:`UntrustedCodeError` naming ``code`` (what would run), why it does not, how
    to allow it (``allow``, else the ways of an executable file), and ``fallback``
    (another way to get the result).  ``code`` and
    ``fallback`` may be callables, called only for the error (the decision itself is
    on every call of a loaded function, and must cost nothing)."""
    if trust is None or trust.native_allowed:
        return
    code = code() if callable(code) else code
    fallback = fallback() if callable(fallback) else fallback
    where = trust.source or "the executable"
    lines = [f"{where} holds {code} and is not signed by this machine or by a key you "
             "trust, so it does not run (compiling, mapping or unpickling it runs it)."]
    problem = local_key_problem()
    if problem:
        lines.append(f"This machine's signing key is not usable: {problem}.")
    lines.append(allow or "If you trust where the file came from: Executable.load(path, "
                 "allow_native=True) (plait run --allow-native), or pass the signer's key "
                 "as trusted_keys=[...].")
    if fallback:
        lines.append(fallback)
    raise UntrustedCodeError("\n".join(lines))


def native_code_description(libs: dict[str, bytes]) -> str:
    """``native code (libraries 'c' (412 KiB), ...)``."""
    sizes = ", ".join(f"{n!r} ({len(b) / 1024:.0f} KiB)" for n, b in libs.items())
    return f"native code (libraries {sizes})"


def rebuild_hint(exe: Any) -> str:
    """How to run executable ``exe`` without its native code: rebuild its graph on
    numpy (any object with ``graph`` and ``attrs``, or without them)."""
    graph_note = (getattr(exe, "attrs", None) or {}).get("graph_not_kept")
    if getattr(exe, "graph", None) is not None:
        return ("Or run its graph on numpy, without native code: "
                "plait.rebuild(exe, \"numpy\") (plait run FILE --target numpy).")
    return ("It keeps no graph to rebuild on numpy" +
            (f" ({graph_note})" if graph_note else "") +
            "; rebuild it from the model with target=\"numpy\".")


# ------------------------------------------------------------------------ local key


def cache_root() -> Path:
    """``$PLAIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/plait``, else ``~/.cache/plait``."""
    env = os.environ.get("PLAIT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "plait"


def local_key_path() -> Path:
    """Where this machine's key is (it may not exist yet)."""
    return cache_root() / "keys" / "local.key"


_KEYS: dict[str, bytes] = {}
_PROBLEMS: dict[str, str] = {}
_KEY_LOCK = threading.Lock()
_POSIX = hasattr(os, "getuid")


def _private_problem(st: os.stat_result, what: str, path: Path) -> str | None:
    """Why ``st`` (of ``path``) is no safe home for a key, or None."""
    if not _POSIX:
        return None
    if st.st_uid != os.getuid():
        return f"{what} {path} belongs to user id {st.st_uid}, not to you ({os.getuid()})"
    if st.st_mode & 0o077:
        return (f"{what} {path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}); "
                f"make it private: chmod {'700' if what == 'folder' else '600'} {path}")
    return None


def _check_folder(d: Path) -> str | None:
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        raise
    except OSError as exc:
        return f"cannot read folder {d}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{d} is not a folder"
    return _private_problem(st, "folder", d)


def _read_key(path: Path) -> bytes:
    """The key at ``path``; raises ``FileNotFoundError`` or ``ValueError`` (why)."""
    problem = _check_folder(path.parent)
    if problem:
        raise ValueError(problem)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        problem = _private_problem(st, "key file", path)
        if problem:
            raise ValueError(problem)
        data = os.read(fd, LOCAL_KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != LOCAL_KEY_BYTES:
        raise ValueError(f"{path} holds {len(data)} bytes, not a key of {LOCAL_KEY_BYTES}; "
                         "delete it (executables this machine signed with it will need "
                         "rebuilding or allow_native=True)")
    return data


def _create_key(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = _check_folder(path.parent)
    if problem:
        raise ValueError(problem)
    fd, tmp = tempfile.mkstemp(prefix=".local-", suffix=".key", dir=path.parent)  # mode 600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(LOCAL_KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces a key another process made
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def local_key(create: bool = False) -> bytes | None:
    """This machine's key (None when there is none, or it is not safe to use: see
    :func:`local_key_problem`); ``create`` makes one when there is none."""
    path = local_key_path()
    key = str(path)
    with _KEY_LOCK:
        if key in _KEYS:
            return _KEYS[key]
        try:
            data = _read_key(path)
        except FileNotFoundError:
            if not create:
                return None
            try:
                _create_key(path)
                data = _read_key(path)
            except (OSError, ValueError) as exc:
                return _refuse(key, f"cannot create it: {exc}")
        except (OSError, ValueError) as exc:
            return _refuse(key, str(exc))
        _PROBLEMS.pop(key, None)
        _KEYS[key] = data
        return data


def _refuse(key: str, problem: str) -> None:
    if _PROBLEMS.get(key) != problem:
        _PROBLEMS[key] = problem
        warnings.warn(f"plait: this machine's executable signing key ({key}) is not used: "
                      f"{problem}. Executables saved now are not signed by this machine, "
                      "and their native code needs allow_native=True to run.",
                      RuntimeWarning, stacklevel=4)
    return None


def local_key_problem() -> str | None:
    """Why this machine's key is not used, when it is not."""
    return _PROBLEMS.get(str(local_key_path()))


def forget_local_keys() -> None:
    """Drop the keys read by this process (a test that changes ``PLAIT_CACHE_DIR`` or
    the key file calls this)."""
    with _KEY_LOCK:
        _KEYS.clear()
        _PROBLEMS.clear()


# -------------------------------------------------------------------- signing keys


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        return None
    return ed25519


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(alg: str, material: bytes) -> str:
    """A short public name of a key: the start of a hash of it (for HMAC, of the secret:
    keys are random, at least 16 bytes, so the name reveals nothing usable)."""
    return hashlib.sha256(alg.encode() + b"\0" + material).hexdigest()[:16]


@dataclass(frozen=True)
class _Verifier:
    alg: str
    kid: str
    name: str
    key: Any  # the HMAC secret or an Ed25519 public key

    def check(self, message: bytes, value: bytes) -> bool:
        if self.alg == HMAC_ALG:
            return hmac.compare_digest(hmac.new(self.key, message, "sha256").digest(), value)
        try:
            self.key.verify(value, message)
            return True
        except Exception:  # cryptography.exceptions.InvalidSignature
            return False


def _hmac_key(key: bytes, what: str) -> bytes:
    key = bytes(key)
    if len(key) < MIN_HMAC_KEY_BYTES:
        raise ValueError(f"{what}: an HMAC key needs at least {MIN_HMAC_KEY_BYTES} bytes "
                         f"(got {len(key)}); make one with secrets.token_bytes(32)")
    return key


def _verifier(key: Any, what: str) -> _Verifier:
    """A trusted key as a verifier: ``bytes`` (an HMAC secret), an Ed25519 public or
    private key (``cryptography``)."""
    if isinstance(key, bytes | bytearray):
        k = _hmac_key(key, what)
        kid = key_id(HMAC_ALG, k)
        return _Verifier(HMAC_ALG, kid, f"HMAC key {kid}", k)
    ed = _ed25519()
    if ed is not None:
        if isinstance(key, ed.Ed25519PrivateKey):
            key = key.public_key()
        if isinstance(key, ed.Ed25519PublicKey):
            kid = key_id(ED25519_ALG, _raw_public(key))
            return _Verifier(ED25519_ALG, kid, f"Ed25519 key {kid}", key)
    raise TypeError(
        f"{what}: a key is bytes (an HMAC-SHA256 secret) or an Ed25519 key of the "
        "cryptography package (pip install plait[sign]); got " + type(key).__name__
    )


def _sign(message: bytes, key: Any) -> dict[str, str]:
    if isinstance(key, bytes | bytearray):
        k = _hmac_key(key, "sign_key")
        value = hmac.new(k, message, "sha256").hexdigest()
        return {"alg": HMAC_ALG, "key": key_id(HMAC_ALG, k), "value": value}
    ed = _ed25519()
    if ed is not None and isinstance(key, ed.Ed25519PrivateKey):
        return {"alg": ED25519_ALG, "key": key_id(ED25519_ALG, _raw_public(key.public_key())),
                "value": key.sign(message).hex()}
    raise TypeError(
        "sign_key is bytes (an HMAC-SHA256 secret of at least 16 bytes) or an "
        "Ed25519PrivateKey of the cryptography package (pip install plait[sign]); got "
        + type(key).__name__
    )


# ----------------------------------------------------------- signing and verifying


def signatures(manifest: bytes, trust: Trust, sign_key: Any = None) -> bytes | None:
    """The ``signatures.json`` member for ``manifest``: this machine's signature when
    the executable is vouched for (built here or signed by a trusted key), and
    ``sign_key``'s when given.  None when there is nothing to sign with."""
    message = _SIGNED_PREFIX + manifest
    entries = []
    if trust.vouched:
        local = local_key(create=True)
        if local is not None:
            entries.append(_sign(message, local))
    if sign_key is not None:
        entries.append(_sign(message, sign_key))
    if not entries:
        return None
    return json.dumps({"signatures": entries}, indent=1).encode()


def _parse_signatures(data: bytes) -> list[dict[str, str]]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{SIGNATURES_MEMBER} is not valid JSON: {exc}") from None
    entries = doc.get("signatures") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and set(e) == {"alg", "key", "value"}
        and all(isinstance(v, str) for v in e.values()) for e in entries
    ):
        raise ValueError(f"{SIGNATURES_MEMBER} must be {{\"signatures\": [{{\"alg\", \"key\", "
                         "\"value\"}, ...]}")
    return entries


def trusted_key_list(trusted_keys: Any) -> list[Any]:
    """``trusted_keys`` as a list: one key (HMAC secret bytes, an Ed25519 public key)
    counts as a list of one; anything else must be an iterable of keys."""
    if trusted_keys is None:
        return []
    if isinstance(trusted_keys, bytes | bytearray | memoryview) or hasattr(
            trusted_keys, "public_bytes"):
        return [trusted_keys]
    if isinstance(trusted_keys, str):
        raise TypeError("trusted_keys must be keys (HMAC secrets as bytes, Ed25519 public "
                        "keys) or a list of them, got a str: pass the secret as bytes, "
                        "e.g. trusted_keys=[bytes.fromhex(text)]")
    try:
        return list(trusted_keys)
    except TypeError:
        raise TypeError("trusted_keys must be a key (HMAC secret bytes, an Ed25519 public "
                        "key) or a list of keys, got "
                        f"{type(trusted_keys).__name__}") from None


def verify(
    manifest: bytes, data: bytes | None, trusted_keys: Iterable[Any] = ()
) -> tuple[str | None, str | None]:
    """``(signer, mismatch)``: the name of the first trusted key (this machine's, or one
    of ``trusted_keys``) whose signature of ``manifest`` is in ``data`` (the signatures
    member), or None; and, when a trusted key's signature does not match (the file
    changed after it was signed), the message saying so.  Signatures by keys nobody
    trusts are ignored.  Raises ``ValueError`` for a malformed member."""
    verifiers: dict[tuple[str, str], _Verifier] = {}
    for i, k in enumerate(trusted_key_list(trusted_keys)):
        v = _verifier(k, f"trusted_keys[{i}]")
        verifiers[(v.alg, v.kid)] = v
    if data is None:
        return None, None
    entries = _parse_signatures(data)
    local = local_key()
    if local is not None:
        kid = key_id(HMAC_ALG, local)
        verifiers[(HMAC_ALG, kid)] = _Verifier(HMAC_ALG, kid, "this machine", local)
    message = _SIGNED_PREFIX + manifest
    signer = None
    for e in entries:
        v = verifiers.get((e["alg"], e["key"]))
        if v is None:
            continue  # a key we do not know: neither trusted nor a reason to refuse
        try:
            value = bytes.fromhex(e["value"])
        except ValueError:
            value = b""
        if not v.check(message, value):
            return None, (
                f"the signature by {v.name} does not match the manifest: the file was "
                "changed after it was signed; do not use it (rebuild it, or get it again "
                "from its source)"
            )
        signer = signer or v.name
    return signer, None


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "BUILT", "ED25519_ALG", "HMAC_ALG", "MODULE_TRUST_ATTR", "SIGNATURES_MEMBER", "Trust",
    "UntrustedCodeError", "cache_root", "code_attributes", "forget_local_keys", "key_id",
    "local_key", "local_key_path", "local_key_problem", "module_trust_attr",
    "native_code_description", "rebuild_hint", "rebuilt_trust", "register_code_attribute",
    "require_trusted", "sha256_hex", "signatures", "trusted_key_list", "verify",
]
