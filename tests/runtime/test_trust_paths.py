"""The trust decision on every path that turns a file's contents into code or file
reads: rebuilding a kept graph (any target, the Python API and ``plait run``), the
graph handed to the interpreter, external modules (a model of the ``onnxruntime``
format naming external data), and the executables rebuilt from untrusted files, which
are never signed by this machine.  Each attack file is made here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from test_integrity import MODEL, W, X, check, forge, members  # same directory

import plait
from plait.codegen.c import CFunction, CSource
from plait.runtime import (
    Executable,
    ExternalFunction,
    ExternalModule,
    ExternalModuleError,
    TensorSig,
    VirtualMachine,
)
from plait.runtime.executable import AllocTensor, Call, ParamSig, Reg, Ret, VMFunction
from plait.runtime.onnx_wire import OnnxWireError, external_data_tensors
from plait.runtime.trust import MODULE_TRUST_ATTR, UntrustedCodeError
from plait.target.c import add_c_source

# A user C source whose constructor writes $PLAIT_TEST_EVIL_MARKER when its library is
# mapped: what a forged graph carries to run code on a machine that rebuilds it.
EVIL_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void plait_evil_ctor(void) {
    const char* path = getenv("PLAIT_TEST_EVIL_MARKER");
    if (path) { FILE* f = fopen(path, "w"); if (f) { fputs("ran", f); fclose(f); } }
}
void plait_evil_double(const float* x, float* y) { for (int i = 0; i < 4; i++) y[i] = 2 * x[i]; }
"""


@pytest.fixture(scope="module")
def forged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `c` executable whose kept graph was edited to carry EVIL_SOURCE, digests
    recomputed and the signature dropped: what anyone can make."""
    exe = plait.build(plait.parse(MODEL), "c")
    graph = add_c_source(plait.parse(exe.graph), CSource(EVIL_SOURCE, (
        CFunction("evil_double", (((4,), "float32"),), 1, "plait_evil_double"),), "evil.c"))
    path = tmp_path_factory.mktemp("forged") / "forged.plx"
    path.write_bytes(forge(exe.to_bytes(), **{"graph__module.plait.py": graph.script().encode()}))
    return path


# ------------------------------------------------------------------ rebuilds


@pytest.mark.parametrize("target", ["c", "numpy"])
def test_a_graph_carrying_c_sources_is_not_rebuilt_without_consent(forged: Path, marker: Path,
                                                                    target: str):
    exe = Executable.load(forged)
    assert not exe.trust.native_allowed
    with pytest.raises(UntrustedCodeError, match=r"(?s)forged.plx holds a graph "
                       r"that carries code of its own \(C sources \(module attribute "
                       r"'c_sources'\)\).*allow_native=True"):
        plait.rebuild(exe, target)
    # the interpreter gets the graph through the same decision
    with pytest.raises(UntrustedCodeError, match="C sources"):
        plait.graph_module(exe)
    assert not marker.exists()


def test_plait_run_does_not_compile_a_forged_graph(forged: Path, marker: Path):
    run = subprocess.run([sys.executable, "-m", "plait.cli", "run", str(forged), "--target",
                          "c"], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "carries code of its own" in run.stderr and "--allow-native" in run.stderr
    assert "internal error" not in run.stderr
    assert not marker.exists()


def test_consent_builds_a_carried_source_and_the_result_is_never_signed(
        forged: Path, marker: Path, tmp_path: Path):
    exe = Executable.load(forged)
    rebuilt = plait.rebuild(exe, "c", allow_native=True)
    assert marker.read_text() == "ran"  # the caller allowed it: its library was mapped
    assert rebuilt.trust.origin == "rebuilt" and not rebuilt.trust.vouched
    check(VirtualMachine(rebuilt)["main"](X, W))
    rebuilt.save(tmp_path / "again.plx")
    assert "signatures.json" not in members((tmp_path / "again.plx").read_bytes())
    again = Executable.load(tmp_path / "again.plx")
    assert again.trust.signer is None and not again.trust.native_allowed
    # the same consent given at load time
    loaded = Executable.load(forged, allow_native=True)
    assert plait.rebuild(loaded, "numpy").trust.origin == "rebuilt"


def test_a_plain_graph_from_an_untrusted_file_rebuilds_but_is_never_signed(
        tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch,
        seeded_cache: Callable[[Path], Path]):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(seeded_cache(tmp_path / "builder")))
    path = tmp_path / "model.plx"
    plait.build(plait.parse(MODEL), "c").save(path)
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(elsewhere))
    exe = Executable.load(path)
    assert exe.trust.signer is None
    mod = plait.graph_module(exe)
    assert mod.attrs[MODULE_TRUST_ATTR] == {"source": f"{path}, unsigned",
                                            "allow_native": False}
    for target in ("c", "numpy"):  # only ops: the native code is this compiler's
        rebuilt = plait.rebuild(exe, target)
        assert rebuilt.trust.origin == "rebuilt"
        check(VirtualMachine(rebuilt)["main"](X, W))
        out = tmp_path / f"rebuilt-{target}.plx"
        rebuilt.save(out)
        assert "signatures.json" not in members(out.read_bytes())
    # a forged "trust" attribute in the text does not help: the file's trust replaces it
    graph = plait.parse(exe.graph).with_attrs(trust={"source": "me", "allow_native": True})
    graph = add_c_source(graph, CSource("int plait_x(void) { return 1; }", (), "x.c"))
    forged = forge(path.read_bytes(), **{"graph__module.plait.py": graph.script().encode()})
    with pytest.raises(UntrustedCodeError, match="C sources"):
        plait.rebuild(Executable.from_bytes(forged), "c")


def test_a_file_signed_here_rebuilds_as_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              seeded_cache: Callable[[Path], Path]):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    path = tmp_path / "model.plx"
    plait.build(plait.parse(MODEL), "c").save(path)
    exe = Executable.load(path)
    assert exe.trust.signer == "this machine"
    assert MODULE_TRUST_ATTR not in plait.graph_module(exe).attrs
    assert plait.rebuild(exe, "numpy").trust.origin == "built"


# ------------------------------------------------------------------ keys


def test_one_trusted_key_may_be_given_without_a_list(tmp_path: Path, elsewhere: Path):
    key = b"k" * 32
    data = plait.build(plait.parse(MODEL), "numpy").to_bytes(sign_key=key)
    assert Executable.from_bytes(data, trusted_keys=key).trust.signer is not None
    assert Executable.from_bytes(data, trusted_keys=[key]).trust.signer is not None
    with pytest.raises(TypeError, match=r"got a str: pass the secret as bytes"):
        Executable.from_bytes(data, trusted_keys="k" * 32)
    with pytest.raises(TypeError, match="a key .* or a list of keys, got int"):
        Executable.from_bytes(data, trusted_keys=7)


# ------------------------------------------------------------------ external modules


def _identity_of_initializer(location: str | None, n: int = 4) -> bytes:
    """An ONNX model whose output adds its input to an initializer ``w``; with
    ``location``, ``w``'s data is in that file (external data)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, (n,), np.zeros(n, np.float32))
    if location is not None:
        w.ClearField("float_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", str(4 * n))):
            e = w.external_data.add()
            e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (n,))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (n,))], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _ort_exe(model: bytes) -> Executable:
    sig = ExternalFunction("f", (TensorSig((4,), "float32"),), (TensorSig((4,), "float32"),))
    ext = ExternalModule("onnxruntime", "onnxruntime", (sig,), {"f.onnx": model},
                         {"graphs": {"f": {"model": "f.onnx", "inputs": ["x"],
                                           "outputs": ["y"]}}})
    main = VMFunction("main", [ParamSig("x", "tensor", (4,), "float32")], 2, [
        AllocTensor(1, [4], "float32"), Call("f", [Reg(0), Reg(1)], None), Ret(1)])
    return Executable({"main": main}, [], {}, {}, external=[ext])


def test_an_onnxruntime_module_naming_external_data_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    secret = tmp_path / "secret.key"
    secret.write_bytes(np.array([1.5, -2.0, 3.25, 7.0], np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    model = _identity_of_initializer("secret.key")
    # the attack is real: onnxruntime, given the bytes, reads the file named in them
    # (where no graph optimization touches the tensor first)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    leaked = ort.InferenceSession(model, opts).run(None, {"x": np.zeros(4, np.float32)})[0]
    np.testing.assert_array_equal(leaked, [1.5, -2.0, 3.25, 7.0])
    data = _ort_exe(model).to_bytes()
    x = np.ones(4, np.float32)
    for exe in (Executable.from_bytes(data), Executable.from_bytes(data, allow_native=True),
                _ort_exe(model)):
        with pytest.raises(ExternalModuleError, match=r"external function 'f' of codegen "
                           r"'onnxruntime': its ONNX model keeps tensor data in other files "
                           r"\('w' \(location 'secret.key'\)\)"):
            VirtualMachine(exe)["main"](x)
    # the same module holding its own data runs (checked against numpy: 0 + x)
    np.testing.assert_array_equal(VirtualMachine(Executable.from_bytes(
        _ort_exe(_identity_of_initializer(None)).to_bytes()))["main"](x), x)


def test_the_wire_walk_finds_external_data_wherever_onnx_allows_it():
    def ext(name: str, loc: str) -> onnx.TensorProto:
        t = helper.make_tensor(name, TensorProto.FLOAT, (1,), [0.0])
        t.ClearField("float_data")
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", loc
        return t

    inner = helper.make_graph([helper.make_node("Constant", [], ["c"], value=ext("k", "b"))],
                              "then", [], [helper.make_tensor_value_info("c", 1, (1,))])
    sparse = helper.make_sparse_tensor(ext("sv", "c"), helper.make_tensor(
        "si", TensorProto.INT64, (1,), [0]), (4,))
    node_if = helper.make_node("If", ["cond"], ["o"], then_branch=inner, else_branch=inner)
    g = helper.make_graph([node_if], "g", [helper.make_tensor_value_info("cond", 9, ())],
                          [helper.make_tensor_value_info("o", 1, (1,))],
                          [ext("w", "a")], sparse_initializer=[sparse])
    fn = onnx.FunctionProto(name="fn", domain="d", node=[helper.make_node(
        "Constant", [], ["z"], value=ext("fz", "d"))], output=["z"])
    model = helper.make_model(g, functions=[fn])
    got = external_data_tensors(model.SerializeToString())
    assert sorted(got) == ["'fz' (location 'd')", "'k' (location 'b')",
                           "'k' (location 'b')", "'sv' (location 'c')", "'w' (location 'a')"]
    # onnx's own walk (every tensor but the sparse ones) agrees
    onnx_view = sorted(t.name for t in onnx.external_data_helper._get_all_tensors(model)
                       if onnx.external_data_helper.uses_external_data(t))
    assert onnx_view == ["fz", "k", "k", "w"]
    assert external_data_tensors(_identity_of_initializer(None)) == []
    for bad in (b"\x0a\xff", b"\x3a\x05ab", b"\x0f"):
        with pytest.raises(OnnxWireError):
            external_data_tensors(bad)

