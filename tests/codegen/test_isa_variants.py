"""plait's ISA mechanism (plait_isa.h, plait_isa.c, plait.codegen.c.variants): a C source
compiled once per instruction set, the copy chosen when the library is loaded, the
PLAIT_ISA cap, its errors, and the report.

The family under test is written here: its entry point returns the id of the copy that
ran (PLAIT_ISA_ID), so the tests see which copy a call really reaches.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from plait.codegen.c import CFunction, CSource, compile_kernels
from plait.codegen.c.emit import CodegenError, emit_library
from plait.codegen.c.variants import (
    FLOAT_ISAS,
    allowed_by,
    arch_isas,
    chosen_copy,
    copy_name,
    host_arch,
    isa_copies,
)
from plait.runtime.native import NativeLoadError
from plait.target.c import cpu_features

IDS = {"baseline": 0, "avx2": 1, "avxvnni": 2, "avx512": 3, "avx512vnni": 4, "neon": 5}
"""The ids of plait_isa.h's enum."""

WHICH = """\
#include <stdint.h>
PLAIT_ISA_HIDDEN int32_t PLAIT_ISA_FN(which_isa)(void* const* args, const int64_t* sizes) {
    (void)sizes;
    ((float*)args[0])[0] = (float)PLAIT_ISA_ID;
    return 0;
}
PLAIT_ISA_FAMILY("which")
__attribute__((visibility("default"))) int32_t which_isa(void* const*, const int64_t*);
PLAIT_ISA_DISPATCH(int32_t, which_isa, (void* const* args, const int64_t* sizes),
                   (args, sizes))
"""
_SERIAL = itertools.count()


def _which(isas: tuple[str, ...] = FLOAT_ISAS) -> Any:
    """A fresh library (its own text, so loaded anew: its families read PLAIT_ISA) with
    the family "which"; returns (library, function)."""
    code = f"/* {next(_SERIAL)} {id(object())} */\n" + WHICH
    fn = CFunction("which", (((1,), "float32"),), 1, "which_isa", abi="plait")
    lib = compile_kernels({}, c_sources=[CSource(code, (fn,), "which.c", isas=isas)])
    return lib, lib.get("which")


def _ran(f: Any) -> str:
    ran = int(f()[0])
    return next(name for name, i in IDS.items() if i == ran)


def _chosen(lib: Any) -> str:
    report = lib.module.isa_report()
    return next(f["chosen"] for f in report["families"] if f["name"] == "which")


def test_copies_per_architecture() -> None:
    assert arch_isas("x86_64") == ("avx512", "avx2", "baseline")
    assert arch_isas("aarch64-linux-gnu") == ("neon", "baseline")
    assert arch_isas("riscv64") == ("baseline",)
    assert arch_isas("x86_64", ("avx512vnni", "avx2")) == ("avx512vnni", "avx2", "baseline")
    files = isa_copies("f.c", "int x;\n", FLOAT_ISAS, "x86_64")
    assert list(files) == ["f.c", "f__avx512.c", "f__avx2.c"]   # the entry points first
    assert "#define PLAIT_ISA_AVX2 1\n" in files["f__avx2.c"]
    assert all("#define PLAIT_BUILT_AVX512 1\n#define PLAIT_BUILT_AVX2 1\n"
               "#define PLAIT_BUILT_BASELINE 1\n" in t for t in files.values())
    assert all(t.rstrip().endswith("int x;\n\nPLAIT_ISA_END") for t in files.values())
    assert copy_name("plait_gemm.c", "neon") == "plait_gemm__neon.c"


def test_unknown_instruction_sets_and_clashing_copies_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown instruction set\(s\) \['sse9'\]; plait "
                                         r"knows avx512vnni, avx512"):
        CSource("int x;", (), "f.c", isas=("sse9",))
    clash = [CSource("int y;", (), "f__avx2.c"), CSource("int x;", (), "f.c", isas=("avx2",))]
    with pytest.raises(CodegenError, match="f__avx2.c clashes with the copy of another one"):
        emit_library({}, clash, arch="x86_64")


def test_the_best_copy_runs_and_each_one_can_be_forced() -> None:
    lib, f = _which()
    supported = lib.module.isa_report()["supported"]
    built = arch_isas(host_arch())
    best = next(i for i in built if i in supported)
    assert _ran(f) == best and _chosen(lib) == best
    try:
        for isa in (i for i in built if i in supported):
            lib.module.force_isa(isa)
            assert _ran(f) == isa and _chosen(lib) == isa
        # a cap with no copy of its own: the best copy below it (avx512vnni -> avx512)
        if "avx512vnni" in supported:
            lib.module.force_isa("avx512vnni")
            assert _ran(f) == "avx512"
    finally:
        lib.module.force_isa(None)
    assert _ran(f) == best


def test_a_family_without_a_copy_of_the_cap_runs_the_best_copy_below_it() -> None:
    """A family built without an AVX-512 copy (pooling) runs its AVX2 copy under
    PLAIT_ISA=avx512; the Python rule (variants.chosen_copy) says what plait_isa.c does."""
    assert allowed_by("avx512") == ("avx512", "avx2", "baseline")
    assert allowed_by("avx512vnni") == ("avx512vnni", "avx512", "avx2", "baseline")
    assert allowed_by("avxvnni") == ("avxvnni", "avx2", "baseline")
    assert allowed_by("neon") == ("neon", "baseline")
    assert chosen_copy(("avx2", "baseline"), "avx512") == "avx2"
    assert chosen_copy(("avx512", "avx2", "baseline"), "avxvnni") == "avx2"
    lib, f = _which(("avx2", "neon", "baseline"))
    supported = lib.module.isa_report()["supported"]
    built = arch_isas(host_arch(), ("avx2", "neon", "baseline"))
    try:
        for cap in supported:
            lib.module.force_isa(cap)
            assert _ran(f) == chosen_copy(built, cap) == _chosen(lib)
    finally:
        lib.module.force_isa(None)


def test_forcing_an_unknown_or_foreign_instruction_set_names_the_choices() -> None:
    lib, f = _which()
    here = ", ".join(arch_isas(host_arch(), tuple(IDS)))   # best first
    with pytest.raises(ValueError, match=f"PLAIT_ISA=sse9 names no instruction set; use one "
                                         f"of {here}"):
        lib.module.force_isa("sse9")
    foreign = "neon" if host_arch() != "aarch64" else "avx2"
    with pytest.raises(ValueError, match=f"PLAIT_ISA={foreign} is an instruction set of "):
        lib.module.force_isa(foreign)
    lacking = [i for i in arch_isas(host_arch(), tuple(IDS))
               if i not in lib.module.isa_report()["supported"]]
    if lacking:   # this CPU lacks one of its architecture's instruction sets
        with pytest.raises(ValueError, match=f"PLAIT_ISA={lacking[0]} forces {lacking[0]}, "
                                             "which this CPU lacks"):
            lib.module.force_isa(lacking[0])
    assert _ran(f) == _chosen(lib)   # nothing changed


def test_the_environment_caps_every_library_loaded_under_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAIT_ISA", "baseline")
    lib, f = _which()
    assert _ran(f) == "baseline"
    report = lib.module.isa_report()
    assert report["cap"] == "baseline" and report["source"] == "PLAIT_ISA"
    assert report["allowed"] == ["baseline"]
    # the variable of older plait still works when PLAIT_ISA is not set
    monkeypatch.delenv("PLAIT_ISA")
    monkeypatch.setenv("PLAIT_GEMM_ISA", "baseline")
    lib, f = _which()
    assert _ran(f) == "baseline"
    assert lib.module.isa_report()["source"] == "PLAIT_GEMM_ISA"


def test_a_refused_environment_fails_the_load_and_runs_nothing_unsupported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAIT_ISA", "sse9")
    with pytest.raises(NativeLoadError, match="PLAIT_ISA=sse9 names no instruction set; "
                                              "use one of"):
        _which()
    lacking = [i for i in arch_isas(host_arch(), tuple(IDS))
               if i not in cpu_features()["supported"]]
    if not lacking:
        pytest.skip("this CPU runs every instruction set of its architecture")
    monkeypatch.setenv("PLAIT_ISA", lacking[0])
    with pytest.raises(NativeLoadError, match=f"forces {lacking[0]}, which this CPU lacks "
                                              r"\(it needs .*\); this CPU runs"):
        _which()


def test_cpu_features_agree_with_a_library(monkeypatch: pytest.MonkeyPatch) -> None:
    feats = cpu_features()
    lib, f = _which()
    report = lib.module.isa_report()
    assert feats["arch"] == report["arch"] == host_arch()
    assert feats["supported"] == report["supported"] and feats["supported"][-1] == "baseline"
    assert feats["families"]["kernels"]["chosen"] == _ran(f)
    assert feats["families"]["gemm"]["built"] == list(arch_isas(host_arch()))
    assert feats["cap"] is None and feats["error"] is None
    monkeypatch.setenv("PLAIT_ISA", "baseline")
    capped = cpu_features()
    assert capped["cap"] == "baseline" and capped["allowed"] == ["baseline"]
    assert {f["chosen"] for f in capped["families"].values()} == {"baseline"}
    assert capped["families"]["gemm"]["why"] == "the best copy allowed by PLAIT_ISA=baseline"
