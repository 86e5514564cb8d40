"""Tests of the executable format: validation, save/load round trip, hostile files."""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile

import numpy as np
import pytest

from plait.runtime import (
    AllocStorage,
    AllocTensor,
    Call,
    Const,
    Executable,
    ExecutableFormatError,
    Goto,
    If,
    Imm,
    Move,
    ParamSig,
    Reg,
    Ret,
    VirtualMachine,
    VMFunction,
    register_func,
)

UNPICKLED: list[str] = []


def _mark_unpickled() -> str:
    UNPICKLED.append("ran")
    return "pwned"


class _Evil:
    """Unpickling this calls ``_mark_unpickled``: a loader that unpickles would run it."""

    def __reduce__(self):
        return (_mark_unpickled, ())


def _affine(x, w, b, out, *, axes=None, scale=1.0):
    assert isinstance(axes, tuple)
    np.add(x @ w * scale, b, out=out)
    return out


register_func("test.exe.affine", _affine, override=True)
register_func("test.exe.flag", lambda x, flags: x if flags["on"] else -x, override=True)


def make_exe() -> Executable:
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    b = np.array([1, -1, 0.5, 0], np.float32)
    main = VMFunction(
        "main",
        [ParamSig("x", "tensor", ("n", 3), "float32")],
        6,
        [
            AllocStorage(1, 256),
            AllocTensor(2, ["n", 4], "float32", storage=None),
            Call(
                "test.exe.affine",
                [Reg(0), Const(0), Const(1), Reg(2)],
                None,
                {"axes": (1, (2, 3)), "scale": 0.5},
            ),
            Call("helper", [Reg(2)], 3),
            Call("vm.builtin.shape_of", [Reg(3)], 4),
            Call("vm.builtin.tuple", [Reg(3), Reg(4), Imm((1, [2, None], "s", True, -2.5))], 5),
            Ret(5),
        ],
    )
    helper = VMFunction(
        "helper",
        [ParamSig("a", "tensor", ("m", 4), "float32")],
        3,
        [
            Call("vm.builtin.check_tensor", [Reg(0), Imm(("m", 4)), Imm("float32"), Imm("a")], 1),
            Call("vm.builtin.reshape_view", [Reg(1), Imm([-1])], 2),
            Ret(2),
        ],
    )
    branchy = VMFunction(
        "branchy",
        [
            ParamSig("c", "prim", None, "bool"),
            ParamSig("s", "shape", ("k", 2), None),
            ParamSig("t", "tuple"),
            ParamSig("o", "object"),
        ],
        7,
        [
            If(0, 3),
            Move(4, 1),
            Goto(4),
            Move(4, 2),
            AllocTensor(5, ["k", 2], "int64"),
            AllocStorage(6, 0),
            Ret(4),
        ],
    )
    attrs = {
        "target": "numpy",
        "planned_peak_bytes": 256,
        "dims": (2, 3),
        "nan": math.nan,
        "inf": -math.inf,
        "nested": {"a": [1, (2,)], "b": None},
    }
    return Executable(
        {"main": main, "helper": helper, "branchy": branchy},
        [w, b, np.array(7, np.int64), np.array([True, False])],
        attrs,
        {"kernels.so": bytes(range(256)), "empty": b""},
    )


def rebuild(data: bytes, edit=None, drop=(), add=(), forge=True) -> bytes:
    """Re-zip an executable, letting ``edit`` change the manifest dict.  With ``forge``
    (as someone crafting a file would) the signatures are dropped and the members'
    digests recomputed, so the checks behind them are reached."""
    src = zipfile.ZipFile(io.BytesIO(data))
    members = {n: src.read(n) for n in src.namelist() if n not in drop}
    members.update(add)
    if forge:
        members.pop("signatures.json", None)
    if "manifest.json" in members and (edit is not None or forge):
        try:
            manifest = json.loads(members["manifest.json"])
        except (ValueError, RecursionError):
            manifest = None
        if isinstance(manifest, dict):
            if forge:
                manifest["members"] = {
                    n: hashlib.sha256(b).hexdigest()
                    for n, b in members.items()
                    if n not in ("manifest.json", "signatures.json")
                }
            if edit is not None:
                edit(manifest)
            members["manifest.json"] = json.dumps(manifest).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name, payload in members.items():
            dst.writestr(name, payload)
    return out.getvalue()


def main_instrs(manifest) -> list:
    return next(f for f in manifest["functions"] if f["name"] == "main")["instructions"]


def test_round_trip_preserves_everything(tmp_path):
    exe = make_exe()
    path = tmp_path / "model.plx"
    exe.save(path)
    back = Executable.load(path)
    assert back.functions == exe.functions  # dataclass equality: tuples stay tuples
    kw = back.functions["main"].instructions[2].kwargs
    assert kw["axes"] == (1, (2, 3)) and isinstance(kw["axes"][1], tuple)
    imm = back.functions["main"].instructions[5].args[2].value
    assert imm == (1, [2, None], "s", True, -2.5) and isinstance(imm[1], list)
    assert len(back.constants) == len(exe.constants)
    for a, b in zip(exe.constants, back.constants):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert back.libs == exe.libs
    assert back.attrs["dims"] == (2, 3) and back.attrs["nested"] == {"a": [1, (2,)], "b": None}
    assert math.isnan(back.attrs["nan"]) and back.attrs["inf"] == -math.inf
    assert back.to_bytes() == exe.to_bytes()  # deterministic bytes

    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    got, want = VirtualMachine(back)["main"](x), VirtualMachine(exe)["main"](x)
    assert np.array_equal(got[0], want[0]) and got[1:] == want[1:] == ((20,), got[2])
    np.testing.assert_allclose(
        got[0], ((x @ exe.constants[0] * 0.5) + exe.constants[1]).ravel(), rtol=1e-6
    )

    vm = VirtualMachine(back)
    assert vm["branchy"](True, (3, 2), (1,), "x") == (3, 2)
    assert vm["branchy"](np.bool_(False), [4, 2], [7], None) == (7,)


def test_listing_and_stats():
    exe = make_exe()
    text = exe.as_text()
    assert "func main(x: tensor(n, 3) float32)" in text
    assert "%2 = alloc_tensor (n, 4) float32" in text
    assert "call test.exe.affine(%0, c[0], c[1], %2, axes=(1, (2, 3)), scale=0.5)" in text
    assert "if %0 else goto 3" in text and "goto 4" in text and "ret %4" in text
    assert "%1 = alloc_storage 256" in text and "%4 = move %1" in text
    stats = exe.stats()
    assert stats["functions"]["main"]["instructions"] == 7
    assert stats["functions"]["main"]["calls"]["test.exe.affine"] == 1
    assert stats["num_constants"] == 4 and stats["lib_bytes"] == 256


def test_imm_values_are_checked_and_normalized():
    assert Imm(np.float32(0.5)).value == 0.5 and type(Imm(np.int64(3)).value) is int
    assert Imm([np.int32(1), (np.bool_(True),)]).value == [1, (True,)]
    with pytest.raises(TypeError, match="not serializable"):
        Imm(object())
    with pytest.raises(TypeError, match="not serializable"):
        Imm({"a": 1})
    with pytest.raises(TypeError, match="keyword argument 'f'"):
        Call("x", [], None, {"f": np.zeros(2)})
    assert Call("x", [], None, {"a": Imm((1,))}).kwargs == {"a": (1,)}


@pytest.mark.parametrize(
    "data, message",
    [
        (np.random.default_rng(7).bytes(64), "not a zip archive"),
        (b"PK\x03\x04" + b"\0" * 40, "not a zip archive"),
        (b"", "not a zip archive"),
    ],
    ids=["random-bytes", "zip-magic-only", "empty"],
)
def test_garbage_is_rejected(data, message):
    with pytest.raises(ExecutableFormatError, match=message):
        Executable.from_bytes(data)


def test_truncated_file_is_rejected():
    data = make_exe().to_bytes()
    with pytest.raises(ExecutableFormatError):
        Executable.from_bytes(data[: len(data) // 2])


def _set(path_fn, value):
    def edit(m):
        container, key = path_fn(m)
        container[key] = value

    return edit


def _delete(path_fn):
    def edit(m):
        container, key = path_fn(m)
        del container[key]

    return edit


def _main_ins(pc):
    return lambda m: main_instrs(m)[pc]


@pytest.mark.parametrize(
    "edit, message",
    [
        (_delete(lambda m: (m, "version")), "missing format version"),
        (_set(lambda m: (m, "version"), 99), "unsupported format version 99"),
        (_set(lambda m: (m, "format"), "onnx"), "format is 'onnx'"),
        (_set(lambda m: (m, "extra"), 1), "unknown field"),
        (_set(lambda m: (_main_ins(0)(m), "kind"), "exec"), "unknown instruction kind 'exec'"),
        (_set(lambda m: (_main_ins(6)(m), "src"), 6), "register 6 out of range"),
        (_set(lambda m: (_main_ins(6)(m), "src"), -1), "register -1 out of range"),
        (_set(lambda m: (_main_ins(6)(m), "src"), "1"), "register index must be an int"),
        (_set(lambda m: (_main_ins(6)(m), "src"), True), "register index must be an int"),
        (_set(lambda m: (_main_ins(2)(m)["args"], 1), {"const": 9}), "constant 9 out of range"),
        (_set(lambda m: (_main_ins(2)(m)["args"], 1), {"code": "x"}), "malformed argument"),
        (_set(lambda m: (_main_ins(2)(m), "args"), "abc"), "'args' must be a list"),
        (
            _set(lambda m: (_main_ins(2)(m)["kwargs"], "axes"), {"imm": {"pickle": "x"}}),
            "malformed encoded value",
        ),
        (_set(lambda m: (_main_ins(2)(m), "func"), ""), "non-empty string"),
        (_set(lambda m: (_main_ins(1)(m), "dtype"), "object"), "not a numeric or bool dtype"),
        (_set(lambda m: (_main_ins(1)(m), "dtype"), "float99"), "unknown dtype"),
        (_set(lambda m: (_main_ins(1)(m), "shape"), ["q", 4]), "symbolic size 'q' is not bound"),
        (_set(lambda m: (_main_ins(1)(m), "shape"), ["n ** 2"]), r"'n \*\* 2' is not allowed"),
        (_set(lambda m: (_main_ins(1)(m), "shape"), ["n * q"]), "symbolic size 'q' is not bound"),
        (_set(lambda m: (_main_ins(1)(m), "shape"), ["n +"]), "does not parse"),
        (_set(lambda m: (_main_ins(0)(m), "nbytes"), -5), "must be an int >= 0"),
        (_delete(lambda m: (_main_ins(0)(m), "nbytes")), "missing field"),
        (_set(lambda m: (_main_ins(0)(m), "bogus"), 1), "unknown field"),
        (
            _set(lambda m: (m["functions"][2]["instructions"][0], "else_target"), 70),
            "jump target 70 out of range",
        ),
        (
            _set(lambda m: (m["functions"][0], "num_registers"), 2),
            "register 2 out of range \\(function has 2 registers\\)",
        ),
        (
            _set(lambda m: (m["functions"][0]["params"][0], "kind"), "blob"),
            "unknown parameter kind 'blob'",
        ),
        (_set(lambda m: (m["functions"][0], "instructions"), []), "non-empty list"),
        (lambda m: main_instrs(m).pop(), "last instruction must be ret or goto"),
        (_set(lambda m: (m, "functions"), {"main": 1}), "functions must be a list"),
        (_set(lambda m: (m["constants"], 0), "manifest.json"), "has no member 'manifest.json'"),
        (_set(lambda m: (m["constants"], 0), "constants/77.npy"), "no member 'constants/77.npy'"),
        (_set(lambda m: (m["libs"][0], "member"), "libs/9"), "no member 'libs/9'"),
        (_set(lambda m: (m, "attrs"), [1]), "attrs must be an object"),
        (_set(lambda m: (m["functions"][0], "num_registers"), 2**62), "and at most"),
        (_set(lambda m: (_main_ins(0)(m), "kind"), {"a": 1}), "unknown instruction kind"),
        (_set(lambda m: (_main_ins(1)(m), "shape"), [2**63]), r"int in \[0, 2\*\*63-1\]"),
    ],
)
def test_malformed_manifest_is_rejected(edit, message):
    data = rebuild(make_exe().to_bytes(), edit)
    with pytest.raises(ExecutableFormatError, match=message):
        Executable.from_bytes(data)


def test_missing_or_invalid_manifest():
    data = make_exe().to_bytes()
    with pytest.raises(ExecutableFormatError, match="no manifest.json"):
        Executable.from_bytes(rebuild(data, drop=("manifest.json",)))
    bad = rebuild(data, drop=("manifest.json",), add=(("manifest.json", b"{not json"),))
    with pytest.raises(ExecutableFormatError, match="not valid JSON"):
        Executable.from_bytes(bad)
    deep = b"[" * 100_000 + b"]" * 100_000
    bad = rebuild(data, drop=("manifest.json",), add=(("manifest.json", deep),))
    with pytest.raises(ExecutableFormatError):
        Executable.from_bytes(bad)


def test_pickled_object_array_is_rejected_without_running_it():
    buf = io.BytesIO()
    np.save(buf, np.array([_Evil()], dtype=object), allow_pickle=True)
    data = rebuild(
        make_exe().to_bytes(), drop=("constants/0.npy",), add=(("constants/0.npy", buf.getvalue()),)
    )
    with pytest.raises(ExecutableFormatError, match="constant 0"):
        Executable.from_bytes(data)
    assert UNPICKLED == []


def test_structured_and_npz_constants_are_rejected():
    buf = io.BytesIO()
    np.save(buf, np.zeros(2, dtype=[("a", "i4")]))
    data = rebuild(
        make_exe().to_bytes(), drop=("constants/1.npy",), add=(("constants/1.npy", buf.getvalue()),)
    )
    with pytest.raises(ExecutableFormatError, match="constant 1: dtype .* not allowed"):
        Executable.from_bytes(data)
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(2))
    data = rebuild(
        make_exe().to_bytes(), drop=("constants/1.npy",), add=(("constants/1.npy", buf.getvalue()),)
    )
    with pytest.raises(ExecutableFormatError, match="constant 1"):
        Executable.from_bytes(data)


def test_invalid_executables_cannot_be_saved():
    exe = make_exe()
    exe.constants.append(np.array([object()], dtype=object))
    with pytest.raises(ExecutableFormatError, match="constant 4: dtype object is not allowed"):
        exe.to_bytes()
    exe = make_exe()
    exe.attrs["fn"] = print
    with pytest.raises(ExecutableFormatError, match="not serializable"):
        exe.to_bytes()
    exe = make_exe()
    exe.functions["main"].instructions.insert(0, "ret 0")
    with pytest.raises(ExecutableFormatError, match="unknown instruction str"):
        exe.validate()
    exe = make_exe()
    exe.functions["alias"] = exe.functions["main"]
    with pytest.raises(ExecutableFormatError, match="stored under the name 'alias'"):
        exe.validate()
