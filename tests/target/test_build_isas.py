"""The ``c`` target's attribute ``isas`` (and ``PLAIT_BUILD_ISAS``): which ISA copies of
the kernel families and of the generated kernels a build compiles.  A small model (a
matrix product on plait_gemm.c and a fused elementwise kernel) built with every copy,
with this CPU's copies and with the baseline alone reports the copies it holds
(``library_isas``) and gives numpy's answer (float64 reference, rtol 1e-5, atol 1e-5:
sums of 24 products of values in [-1, 1]); the copy it runs is the same in the first
two, so their outputs are the same bits.  The copies of every kernel family that this
CPU does not run (and that a test run, building only this CPU's, never compiles
otherwise) compile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graph_helpers import build_graph, const, emit  # tests/target

import plait
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas, host_arch
from plait.runtime import VirtualMachine
from plait.target.c import build_isas, cpu_features, library_isas

RNG = np.random.default_rng(11)
X = RNG.uniform(-1, 1, (5, 24)).astype(np.float32)
W = RNG.uniform(-1, 1, (24, 7)).astype(np.float32)
REF = np.maximum(X.astype(np.float64) @ W.astype(np.float64), 0) * X[:, :7]


def _model() -> plait.IRModule:
    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "relu", emit(bb, "matmul", p[0], const(W)))
        return emit(bb, "multiply", y, emit(bb, "strided_slice", p[0], axes=[1], begin=[0],
                                            end=[7]))
    return build_graph({"x": X.shape}, body)


def _built(**attrs: Any) -> tuple[dict[str, dict[str, Any]], np.ndarray]:
    exe = plait.build(_model(), plait.Target("c", **attrs))
    return library_isas(exe), VirtualMachine(exe)["main"](X)


@pytest.fixture(scope="module")
def every_copy() -> tuple[dict[str, dict[str, Any]], np.ndarray]:
    return _built(isas="all")


def test_all_builds_every_copy_of_the_architecture(every_copy: Any) -> None:
    families, got = every_copy
    assert {"gemm", "kernels"} <= set(families)
    assert families["kernels"]["built"] == list(arch_isas(host_arch(), FLOAT_ISAS))
    assert families["gemm"]["built"] == list(arch_isas(host_arch(), FLOAT_ISAS))
    np.testing.assert_allclose(got, REF, rtol=1e-5, atol=1e-5)


def test_host_builds_only_the_copies_this_cpu_runs(every_copy: Any) -> None:
    supported = cpu_features()["supported"]
    families, got = _built(isas="host")
    for name in ("gemm", "kernels"):
        assert families[name]["built"] == [i for i in arch_isas(host_arch(), FLOAT_ISAS)
                                           if i in supported]
        assert families[name]["chosen"] == every_copy[0][name]["chosen"]
    assert got.tobytes() == every_copy[1].tobytes()


def test_the_baseline_alone_runs_everywhere() -> None:
    families, got = _built(isas="baseline")
    assert all(f["built"] == ["baseline"] and f["chosen"] == "baseline"
               for f in families.values())
    np.testing.assert_allclose(got, REF, rtol=1e-5, atol=1e-5)


def test_the_variable_is_the_default_and_the_attribute_wins(monkeypatch: Any) -> None:
    monkeypatch.setenv("PLAIT_BUILD_ISAS", "baseline")
    assert build_isas() == ("baseline",)
    assert build_isas("all") is None
    monkeypatch.setenv("PLAIT_BUILD_ISAS", "all")
    assert build_isas() is None
    assert build_isas(["avx512"]) == ("avx512", "baseline")
    assert build_isas("AVX2, baseline") == ("avx2", "baseline")
    monkeypatch.delenv("PLAIT_BUILD_ISAS")
    assert build_isas() is None   # unset: every copy


@pytest.mark.parametrize("bad", ["sse9", "", 3, "avx2,fast"])
def test_an_unknown_value_names_the_choices(bad: Any) -> None:
    with pytest.raises(ValueError, match="target attribute isas=.*'all', 'host'.*avx2"):
        build_isas(bad)
    with pytest.raises(ValueError, match="isas"):
        plait.build(_model(), plait.Target("c", isas=bad))


def test_host_with_a_cross_compiler(monkeypatch: Any) -> None:
    """The attribute ``host`` with ``$CC`` building for another architecture is refused
    with the reason; the variable then builds every copy (it speaks for this machine)."""
    import plait.codegen.c.compiler as compiler

    other = "aarch64" if host_arch() != "aarch64" else "x86_64"
    monkeypatch.setattr(compiler, "compiler_arch", lambda cc: other)
    with pytest.raises(ValueError, match=f"compiler .* builds for {other}: use 'all'"):
        build_isas("host")
    monkeypatch.setenv("PLAIT_BUILD_ISAS", "host")
    assert build_isas() is None


def test_the_copies_this_cpu_does_not_run_compile(tmp_path: Any) -> None:
    """Every registered family's copies for the ISAs this CPU lacks (AVX-512, the VNNI
    ones on an AVX2 machine) compile with plait's flags at -O0: the compiler's checks of
    types, intrinsics and each copy's target pragma, in a second where -O3 takes
    minutes.  (Their code is compiled at -O3 and run by tests/target/test_kernel_variants.py
    on a CPU that has them; the NEON copies by test_native_aarch64.py.)"""
    import subprocess

    from plait.codegen.c import find_compiler
    from plait.codegen.c.compiler import BuildOptions, build_flags, compiler_arch
    from plait.codegen.c.variants import copy_name, isa_copies
    from plait.target.c.kernels.registry import all_family_sources

    cc = find_compiler()
    if compiler_arch(cc) != host_arch():
        pytest.skip("$CC builds for another architecture")
    runs = set(cpu_features()["supported"])
    flags, _ = build_flags(cc, BuildOptions(opt_level=0), tmp_path)
    flags = [f for f in flags if f != "-shared"]
    checked = []
    for src in all_family_sources():
        for isa in arch_isas(host_arch(), src.isas):
            if isa in runs:
                continue
            name = copy_name(src.name, isa)
            (tmp_path / name).write_text(isa_copies(src.name, src.code, src.isas,
                                                    host_arch())[name])
            r = subprocess.run([*cc.argv, *flags, "-c", name, "-o", f"{name}.o"],
                               cwd=tmp_path, capture_output=True, text=True)
            assert r.returncode == 0, f"{name} does not compile:\n{r.stderr[-3000:]}"
            checked.append(name)
    if not checked:
        pytest.skip(f"this CPU runs every copy ({', '.join(sorted(runs))}): the run "
                    "compiles them all at -O3")
