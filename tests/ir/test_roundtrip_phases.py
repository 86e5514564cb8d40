"""The text format at every phase of real models' c pipelines: the module before the
first pass and after every pass (the CNN: after every pass that moves it to another
phase, and the last) prints and parses back to a structurally equal module — the build
phase included, where the compiled library is named by its digest."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import plait
from plait.ir.structural import structural_equal
from plait.runtime import VirtualMachine
from plait.transform import PassContext, PassInstrument

pytest.importorskip("onnx")


class _RoundTrip(PassInstrument):
    def __init__(self, every_pass: bool) -> None:
        self.every_pass = every_pass
        self.phases: list[str] = []

    def _check(self, mod: plait.IRModule, where: str) -> None:
        text = mod.script()
        assert "opaque(" not in text, where
        again = plait.parse(text)
        assert structural_equal(again, mod), where
        self.phases.append(mod.phase)

    def run_before_pass(self, mod: plait.IRModule, info) -> None:  # type: ignore[no-untyped-def]
        if not self.phases:
            self._check(mod, f"the input of {info.name}")

    def run_after_pass(self, mod, result, info) -> None:  # type: ignore[no-untyped-def]
        last = info.name == "default"
        if info.kind != "sequential" and (self.every_pass or result.phase != mod.phase) or last:
            self._check(result, f"after {info.name}")


@pytest.mark.parametrize("model", ["tiny_mlp", "cnn"])
def test_every_phase_round_trips(model: str, request: pytest.FixtureRequest) -> None:
    from plait.frontend import from_onnx

    if model == "cnn":
        path, shapes = request.getfixturevalue("cnn_onnx"), {"input": (1, 3, 32, 32)}
    else:
        import os

        path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models",
                            "tiny_mlp.onnx")
        shapes = {"input": (2, 64)}
    rt = _RoundTrip(every_pass=model == "tiny_mlp")
    with PassContext(instruments=[rt]):
        plait.build(from_onnx(path, shapes=shapes), "c")
    assert rt.phases[0] == "ingestion" and rt.phases[-1] == "build"
    assert {"optimization", "lowering"} <= set(rt.phases)
    assert len(rt.phases) >= (18 if model == "tiny_mlp" else 5)


def test_a_parsed_build_phase_module_runs_in_another_process(mlp_onnx: str, tmp_path) -> None:
    """The library is found again by its digest in the cache's content store."""
    from plait.codegen.vm_codegen import vm_codegen
    from plait.frontend import from_onnx

    mod = from_onnx(mlp_onnx, shapes={"input": (2, 784)})
    built = plait.default_pipeline("c")(mod.with_attrs(target=plait.Target("c")))
    text = built.script()
    assert 'native_library(sha256="' in text
    path = tmp_path / "mlp_build.plait.py"
    path.write_text(text)
    x = np.random.default_rng(0).standard_normal((2, 784)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = VirtualMachine(vm_codegen(built))["main"](x)
    code = textwrap.dedent(f"""
        import numpy as np, plait
        from plait.codegen.vm_codegen import vm_codegen
        from plait.runtime import VirtualMachine
        mod = plait.parse(open({str(path)!r}).read())
        out = VirtualMachine(vm_codegen(mod))["main"](np.load({str(tmp_path / 'x.npy')!r}))
        np.save({str(tmp_path / 'out.npy')!r}, out)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want)


def test_a_library_whose_bytes_are_gone_says_how_to_get_them_back(tmp_path,
                                                                  monkeypatch) -> None:
    from plait.target.c.library_blob import MissingLibraryError

    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    mod = plait.parse(textwrap.dedent(f'''
        @module(attrs={{"phase": "build", "native_libs": {{"c": native_library(
            sha256="{'ab' * 32}", size=12)}}}})
        class M:
            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                return x
    '''))
    blob = mod.attrs["native_libs"]["c"]
    assert len(blob) == 12 and plait.parse(mod.script()).attrs["native_libs"]["c"] == blob
    with pytest.raises(MissingLibraryError, match=r"not in this process and not in the "
                                                  r"content store .*c/by-sha256; rebuild it"):
        bytes(blob)
    with pytest.raises(plait.ir.parser.ParseError, match="64 lowercase hex digits"):
        plait.parse(mod.script().replace("ab" * 32, "abc"))
