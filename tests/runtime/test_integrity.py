"""Integrity and trust of executable files: every member is hashed and checked, native
code from a file runs only when this machine or a trusted key signed it (or the caller
allows it), and a truncated or replaced library is an error, never a signal."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import plait
from plait.codegen.c import compile_shared
from plait.runtime import Executable, ExecutableFormatError, VirtualMachine
from plait.runtime.executable import SignatureError
from plait.runtime.native import NativeLoadError
from plait.runtime.trust import UntrustedCodeError, forget_local_keys, local_key_path

MODEL = """
@module
class M:
    @function
    def main(x: Tensor((n, 4), "float32"),
             w: Tensor((4, 3), "float32")) -> Tensor((n, 3), "float32"):
        with dataflow():
            y = relu(matmul(x, w))
            output(y)
        return y
"""
RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 4)).astype(np.float32)
W = RNG.standard_normal((4, 3)).astype(np.float32)
WANT = np.maximum(X.astype(np.float64) @ W, 0)  # numpy reference, float64

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void plait_evil(void) {
    const char* path = getenv("PLAIT_TEST_EVIL_MARKER");
    if (path) { FILE* f = fopen(path, "w"); if (f) { fputs("ran", f); fclose(f); } }
}
const char* plait_manifest(void) { return "{\"abi\": 1, \"functions\": []}"; }
"""


def check(y: np.ndarray) -> None:
    np.testing.assert_allclose(y, WANT, rtol=1e-5, atol=1e-6)  # float32 products of 4 terms


@pytest.fixture(scope="module")
def c_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model built for ``c`` and saved (signed by this machine)."""
    path = tmp_path_factory.mktemp("exe") / "model.plx"
    plait.build(plait.parse(MODEL), "c").save(path)
    return path


@pytest.fixture(scope="module")
def evil_lib() -> bytes:
    """A shared library whose constructor writes the file $PLAIT_TEST_EVIL_MARKER."""
    return compile_shared({"evil.c": EVIL_C}).read_bytes()


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def rezip(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, payload in parts.items():
            zf.writestr(name, payload)
    return out.getvalue()


def forge(data: bytes, **replace: bytes) -> bytes:
    """What anyone can make: members replaced, digests recomputed, no signature."""
    parts = members(data)
    parts.pop("signatures.json", None)
    parts.update({k.replace("__", "/"): v for k, v in replace.items()})
    manifest = json.loads(parts["manifest.json"])
    manifest["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in parts.items()
                           if n != "manifest.json"}
    parts["manifest.json"] = json.dumps(manifest).encode()
    return rezip(parts)


# ------------------------------------------------------------------------ integrity


def test_every_member_is_hashed_in_the_manifest(c_file: Path):
    parts = members(c_file.read_bytes())
    manifest = json.loads(parts["manifest.json"])
    assert set(parts) == {"manifest.json", "signatures.json", *manifest["members"]}
    assert {"libs/0", "graph/module.plait.py"} <= set(manifest["members"])
    for name, digest in manifest["members"].items():
        assert hashlib.sha256(parts[name]).hexdigest() == digest


def test_an_edited_constant_is_refused():
    exe = plait.build(plait.parse(MODEL), "numpy")
    exe.constants.append(np.ones(3, np.float32))
    parts = members(exe.to_bytes())
    edited = io.BytesIO()
    np.save(edited, np.full(3, 7, np.float32))  # a valid .npy, other values
    parts["constants/0.npy"] = edited.getvalue()
    with pytest.raises(ExecutableFormatError,
                       match=r"member 'constants/0.npy' was altered: its SHA-256 is"):
        Executable.from_bytes(rezip(parts))


@pytest.mark.parametrize("change", ["truncate", "flip", "extra", "missing", "twice"])
def test_any_change_to_the_members_is_refused(c_file: Path, change: str):
    parts = members(c_file.read_bytes())
    lib = parts["libs/0"]
    if change == "truncate":
        parts["libs/0"] = lib[: len(lib) // 2]
        message = "member 'libs/0' was altered"
    elif change == "flip":
        parts["libs/0"] = lib[:100] + bytes([lib[100] ^ 1]) + lib[101:]
        message = "member 'libs/0' was altered"
    elif change == "extra":
        parts["libs/1"] = lib
        message = "member\\(s\\) the manifest does not list: 'libs/1'"
    elif change == "missing":
        del parts["graph/module.plait.py"]
        message = "no member 'graph/module.plait.py' \\(the manifest lists it\\)"
    else:
        data = rezip(parts)
        with zipfile.ZipFile(buf := io.BytesIO(data), "a") as zf, pytest.warns(UserWarning):
            zf.writestr("libs/0", lib)  # a second member of the same name
        with pytest.raises(ExecutableFormatError, match="holds member 'libs/0' twice"):
            Executable.from_bytes(buf.getvalue())
        return
    with pytest.raises(ExecutableFormatError, match=message):
        Executable.from_bytes(rezip(parts))


def test_format_version_1_is_refused(c_file: Path):
    parts = members(c_file.read_bytes())
    manifest = json.loads(parts["manifest.json"])
    manifest["version"] = 1
    parts["manifest.json"] = json.dumps(manifest).encode()
    with pytest.raises(ExecutableFormatError, match="version 1 .* records no digests"):
        Executable.from_bytes(rezip(parts))


# -------------------------------------------------------------------- native policy


def test_built_here_runs_without_flags(c_file: Path):
    exe = Executable.load(c_file)
    assert exe.trust.signer == "this machine" and exe.trust.native_allowed
    check(VirtualMachine(exe)["main"](X, W))


def test_a_file_from_elsewhere_runs_native_code_only_when_allowed(c_file: Path, elsewhere):
    exe = Executable.load(c_file)
    assert exe.trust.signer is None and not exe.trust.native_allowed
    with pytest.raises(UntrustedCodeError, match=r"(?s)model.plx holds native code .*"
                       r"allow_native=True.*plait.rebuild\(exe, \"numpy\"\)"):
        VirtualMachine(exe)
    check(VirtualMachine(Executable.load(c_file, allow_native=True))["main"](X, W))
    fallback = plait.rebuild(exe, "numpy")
    assert not fallback.libs and fallback.attrs["target"] == "numpy"
    check(VirtualMachine(fallback)["main"](X, W))


def test_a_replaced_library_with_a_constructor_never_runs(c_file: Path, evil_lib: bytes,
                                                          marker: Path, elsewhere):
    data = c_file.read_bytes()
    # the library swapped in the archive: the digest check refuses the file
    parts = members(data)
    parts["libs/0"] = evil_lib
    with pytest.raises(ExecutableFormatError, match="member 'libs/0' was altered"):
        Executable.from_bytes(rezip(parts))
    # a forged file (digests recomputed, unsigned): loads as data, its code does not run
    exe = Executable.from_bytes(forge(data, libs__0=evil_lib))
    with pytest.raises(UntrustedCodeError):
        VirtualMachine(exe)
    assert not marker.exists()
    # the control: allowed, the same file does run the constructor
    allowed = Executable.from_bytes(forge(data, libs__0=evil_lib), allow_native=True)
    with pytest.raises(Exception, match="compute\\(|relu|matmul|no function|unknown function"):
        VirtualMachine(allowed)
    assert marker.read_text() == "ran"


def test_the_vm_refuses_a_library_whose_digest_differs(c_file: Path, evil_lib: bytes,
                                                        marker: Path):
    exe = Executable.load(c_file)
    (name,) = exe.libs
    exe.libs[name] = evil_lib  # changed in memory after the file was checked
    with pytest.raises(NativeLoadError, match=f"native library '{name}': refusing to map it: "
                       "its SHA-256 is .* the executable's manifest records"):
        VirtualMachine(exe)
    assert not marker.exists()


def test_a_truncated_library_is_an_error_never_a_signal(tmp_path: Path):
    exe = plait.build(plait.parse(MODEL.replace("n, ", "7, ")), "c")
    (name,) = exe.libs
    truncated = exe.libs[name][: len(exe.libs[name]) // 2]
    exe.libs[name] = truncated  # an executable made in memory: no manifest digest
    with pytest.raises(NativeLoadError, match="refusing to map it: it is truncated: segment"):
        VirtualMachine(exe)
    if sys.platform.startswith("linux"):  # the control: mapped anyway, it kills the process
        lib = tmp_path / "truncated.so"
        lib.write_bytes(truncated)
        r = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(lib)!r})"],
                           capture_output=True)
        assert r.returncode == -7  # SIGBUS


# ----------------------------------------------------------------------- signatures


@pytest.mark.parametrize("kind", ["hmac", "ed25519"])
def test_signed_by_a_trusted_key(c_file: Path, kind: str, elsewhere):
    exe = Executable.load(c_file, allow_native=True)
    if kind == "hmac":
        sign, trusted, wrong = b"k" * 32, b"k" * 32, b"j" * 32
    else:
        sign = Ed25519PrivateKey.generate()
        trusted, wrong = sign.public_key(), Ed25519PrivateKey.generate().public_key()
    data = exe.to_bytes(sign_key=sign)
    got = Executable.from_bytes(data, trusted_keys=[trusted])
    assert got.trust.signer is not None and got.trust.signer.startswith(
        "HMAC key" if kind == "hmac" else "Ed25519 key")
    check(VirtualMachine(got)["main"](X, W))
    assert Executable.from_bytes(data, trusted_keys=[wrong]).trust.signer is None
    # the manifest changed after signing: refused, not merely untrusted
    parts = members(data)
    manifest = json.loads(parts["manifest.json"])
    manifest["attrs"]["dict"]["planned_peak_bytes"] = 1
    parts["manifest.json"] = json.dumps(manifest).encode()
    with pytest.raises(SignatureError, match="does not match the manifest"):
        Executable.from_bytes(rezip(parts), trusted_keys=[trusted])


def test_keys_are_checked():
    exe = plait.build(plait.parse(MODEL), "numpy")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        exe.to_bytes(sign_key=b"short")
    with pytest.raises(TypeError, match="sign_key is bytes"):
        exe.to_bytes(sign_key="a password")
    with pytest.raises(TypeError, match=r"trusted_keys\[0\]: a key is bytes"):
        Executable.from_bytes(exe.to_bytes(), trusted_keys=["a password"])


def test_an_untrusted_file_saved_again_is_not_signed_by_this_machine(c_file: Path, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "a"))
    foreign = Executable.load(c_file, allow_native=True)
    foreign.save(tmp_path / "again.plx")  # allow_native permits running, never vouches
    assert Executable.load(tmp_path / "again.plx").trust.signer is None
    assert "signatures.json" not in members((tmp_path / "again.plx").read_bytes())


def test_a_key_open_to_others_is_not_used(tmp_path: Path, monkeypatch, seeded_cache):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    forget_local_keys()
    exe = plait.build(plait.parse(MODEL), "c")
    exe.save(tmp_path / "a.plx")
    key = local_key_path()
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.parent.stat().st_mode & 0o777 == 0o700
    assert Executable.load(tmp_path / "a.plx").trust.signer == "this machine"
    os.chmod(key, 0o644)
    forget_local_keys()
    with pytest.warns(RuntimeWarning, match=r"is open to other users \(mode 644\)"):
        exe.save(tmp_path / "b.plx")
    assert Executable.load(tmp_path / "b.plx").trust.signer is None
    with pytest.raises(UntrustedCodeError, match="signing key is not usable"):
        VirtualMachine(Executable.load(tmp_path / "a.plx"))
    if hasattr(os, "getuid") and os.getuid() == 0:  # root can give the key away
        os.chmod(key, 0o600)
        os.chown(key, 12345, 12345)
        forget_local_keys()
        with pytest.warns(RuntimeWarning, match="belongs to user id 12345, not to you"):
            exe.save(tmp_path / "c.plx")
    forget_local_keys()


def test_libraries_loaded_one_after_another_stay_apart():
    """Each library is mapped from a memory file of its own: a second library is never
    mistaken for the first (the loader knows libraries by path, /proc/self/fd/<n>)."""
    from plait.runtime.native import load_library_bytes

    names = []
    for op in ("sigmoid", "tanh", "exp"):
        exe = plait.build(plait.parse(MODEL.replace("relu", op)), "c")
        lib = load_library_bytes(next(iter(exe.libs.values())))
        names.append([n for n in lib.names   # (matmul's product, main's entry point)
                      if not n.startswith("plait_gemm_") and not n.endswith("@entry")])
    assert names == [["sigmoid"], ["tanh"], ["exp"]]
