"""External modules: data in the executable (saved, loaded, validated), called by the VM
and from plain Python."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from plait.runtime import (
    Executable,
    ExecutableFormatError,
    ExternalFunction,
    ExternalModule,
    ExternalModuleError,
    TensorSig,
    VirtualMachine,
    external_functions,
    register_external_loader,
)
from plait.runtime.executable import AllocTensor, Call, ParamSig, Reg, Ret, VMFunction

F32 = "float32"


def _double(m: ExternalModule) -> dict:
    scale = float(m.meta["scale"])
    return {"scaled": lambda x: (x * np.float32(scale)).astype(np.float32)}


register_external_loader("test.scale", _double, override=True)


def _module(scale: float = 2.0, fmt: str = "test.scale") -> ExternalModule:
    sig = ExternalFunction("scaled", (TensorSig(("n", 3), F32),), (TensorSig(("n", 3), F32),))
    return ExternalModule("scaler", fmt, (sig,), {"weights.bin": b"\x00\x01"},
                          {"scale": scale, "note": ("a", 1)})


def _exe(ext: list[ExternalModule]) -> Executable:
    main = VMFunction("main", [ParamSig("x", "tensor", ("n", 3), F32)], 2, [
        AllocTensor(1, ["n", 3], F32),
        Call("scaled", [Reg(0), Reg(1)], None),
        Ret(1),
    ])
    return Executable({"main": main}, [], {}, {}, external=ext)


def test_the_vm_calls_an_external_function_in_destination_passing_style() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(VirtualMachine(_exe([_module()]))["main"](x), x * 2)
    fns = external_functions([_module(3.0)])
    np.testing.assert_array_equal(fns["scaled"](x), x * 3)
    with pytest.raises(ExternalModuleError, match=r"external function 'scaled' \(codegen "
                                                  r"'scaler'\): input 0 is \(2, 4\) float32, "
                                                  r"expected \(n, 3\) float32"):
        fns["scaled"](np.zeros((2, 4), np.float32))


def test_executables_save_and_load_external_modules_as_data() -> None:
    exe = _exe([_module()])
    data = exe.to_bytes()
    again = Executable.from_bytes(data)
    assert again.external == exe.external and again.external[0].blobs == {"weights.bin":
                                                                          b"\x00\x01"}
    assert again.external[0].meta == {"scale": 2.0, "note": ("a", 1)}
    assert again.to_bytes() == data  # the same program, the same bytes
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert zf.read("external/0/weights.bin") == b"\x00\x01"
    assert manifest["external"][0]["functions"][0]["name"] == "scaled"
    # an executable without external modules writes no such entry
    with zipfile.ZipFile(io.BytesIO(_exe([]).to_bytes())) as zf:
        assert "external" not in json.loads(zf.read("manifest.json"))
    assert "external onnxruntime" not in exe.as_text() and "scaled((n, 3) float32)" in \
        exe.as_text()


def _rewrite_manifest(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename == "signatures.json":  # an edited manifest is unsigned
                continue
            body = src.read(info.filename)
            if info.filename == "manifest.json":
                m = json.loads(body)
                edit(m)
                body = json.dumps(m).encode()
            dst.writestr(info, body)
    return out.getvalue()


def test_malformed_external_entries_are_refused_at_load() -> None:
    data = _exe([_module()]).to_bytes()

    def drop_member(m):  # type: ignore[no-untyped-def]
        m["external"][0]["members"][0]["member"] = "external/0/missing"

    with pytest.raises(ExecutableFormatError, match="no member 'external/0/missing'"):
        Executable.from_bytes(_rewrite_manifest(data, drop_member))

    def bad_dtype(m):  # type: ignore[no-untyped-def]
        m["external"][0]["functions"][0]["inputs"][0]["dtype"] = "object"

    with pytest.raises(ExecutableFormatError, match=r"external\[0\]: .*dtype 'object' is not "
                                                    r"numeric or bool"):
        Executable.from_bytes(_rewrite_manifest(data, bad_dtype))

    def extra_field(m):  # type: ignore[no-untyped-def]
        m["external"][0]["code"] = "import os"

    with pytest.raises(ExecutableFormatError, match=r"unknown field\(s\) code"):
        Executable.from_bytes(_rewrite_manifest(data, extra_field))


def test_bad_modules_and_missing_loaders_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="provides no function"):
        ExternalModule("c", "native", ())
    with pytest.raises(ValueError, match="member name 'a/b' must be a non-empty string without"):
        ExternalModule("c", "native", _module().functions, {"a/b": b""})
    clash = _exe([_module()])
    clash.functions["scaled"] = VMFunction("scaled", [], 1, [Ret(0)])
    with pytest.raises(ExecutableFormatError, match="function 'scaled' is also a VM function"):
        clash.validate()
    with pytest.raises(ExternalModuleError, match=r"no runtime loader for external modules of "
                                                  r"format 'test.scal' \(did you mean "
                                                  r"'test.scale'\?\).*codegen 'scaler'"):
        VirtualMachine(_exe([_module(fmt="test.scal")]))
