"""Building native libraries: the disk cache, concurrent builds, compiler errors, a
missing compiler, loading from bytes, user-written C, and running through the VM."""

import multiprocessing
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import plait.codegen.c.compiler as compiler_mod
import plait.runtime.native as native_mod
from plait.codegen.c import (
    CCompileError,
    CFunction,
    CSource,
    NativeLibrary,
    NativeUnavailableError,
    compile_c_source,
    compile_kernels,
    compile_stats,
)
from plait.codegen.c.variants import arch_isas, copy_name, host_arch
from plait.kernel import Kernel, KernelVerifyError, parse_kernel_source, parse_kernels
from plait.runtime import (
    AllocTensor,
    Call,
    Executable,
    ParamSig,
    Reg,
    Ret,
    VirtualMachine,
    VMFunction,
)
from plait.runtime.native import NativeLoadError, load_library_bytes

SCALE = '''
@kernel
def scale(a: Buffer((n,), "float32"), out: Buffer((n,), "float32", output=True)):
    for i in parallel(n):
        out[i] = a[i] * 3.0 + 1.0
'''


def _scale(tag: float = 3.0) -> dict[str, Kernel]:
    return {"scale": parse_kernel_source(SCALE.replace("3.0", repr(tag)))}


def _no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")


def test_second_compile_is_a_cache_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = _scale(5.5)
    before = compile_stats()
    lib1 = compile_kernels(kernels)
    mid = compile_stats()
    assert mid["compiles"] == before["compiles"] + 1
    runs: list[list[str]] = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        runs.append(list(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(compiler_mod.subprocess, "run", spy)
    lib2 = compile_kernels(_scale(5.5))  # a structurally equal kernel, built anew
    after = compile_stats()
    assert after["compiles"] == mid["compiles"] and after["cache_hits"] == mid["cache_hits"] + 1
    assert not [c for c in runs if "-shared" in c]  # the compiler never ran
    assert lib1.path == lib2.path and lib1.path.parent.parent == Path(os.environ["PLAIT_CACHE_DIR"])
    np.testing.assert_allclose(lib2.get("scale")(np.ones(3, np.float32)), 6.5)


def test_a_source_shared_by_two_libraries_is_compiled_once(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file of a multi-file library is an object cached by its text: a second
    library with the same user source recompiles only the generated kernels (the user's
    files, the thread pool plait_threads.c and plait_isa.c come from the cache)."""
    shared = CSource("float twice(float x) { return 2.0f * x; }\n", (), "shared.c")
    user = CSource("float twice(float x);\n"
                   "void dbl(const float* a, float* o) { for (int i = 0; i < 4; ++i) "
                   "o[i] = twice(a[i]); }\n",
                   (CFunction("dbl", (((4,), "float32"), ((4,), "float32"))),), "user.c")
    commands: list[list[str]] = []
    real_popen = subprocess.Popen

    def spy(cmd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "-c" in cmd:
            commands.append(list(cmd))
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(compiler_mod.subprocess, "Popen", spy)
    before = compile_stats()
    lib1 = compile_kernels(_scale(7.0), c_sources=[shared, user], cache_dir=tmp_path)
    first = [c[-1] for c in commands]
    # the kernels once per instruction set of this machine (plait_isa.h)
    kernels = sorted(copy_name("plait_kernels.c", i) for i in arch_isas(host_arch()))
    assert sorted(first) == sorted([*kernels, "plait_isa.c", "plait_threads.c", "shared.c",
                                    "user.c"])
    commands.clear()
    lib2 = compile_kernels(_scale(8.0), c_sources=[shared, user], cache_dir=tmp_path)
    assert sorted(c[-1] for c in commands) == kernels   # only the new kernels
    assert compile_stats()["object_hits"] == before["object_hits"] + 4
    assert lib1.path != lib2.path
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(lib2.get("dbl")(x), 2 * x)
    np.testing.assert_allclose(lib2.get("scale")(x), x * 8.0 + 1.0)


def test_cache_dir_argument_and_atomic_files(tmp_path: Path) -> None:
    lib = compile_kernels(_scale(7.0), cache_dir=tmp_path)
    files = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert lib.path.parent == tmp_path / "c"
    assert any(f.startswith("lib-") and f.endswith(".so") for f in files)
    assert any(f.startswith("lib-") and f.endswith(".c") for f in files)  # kept source
    assert not [f for f in files if f.startswith((".", "build-"))]  # no temporaries left


def _build_in_subprocess(cache_dir: str) -> tuple[str, list[float]]:
    os.environ["PLAIT_CACHE_DIR"] = cache_dir
    from plait.codegen.c import compile_kernels as ck
    from plait.kernel import parse_kernel_source as pk

    lib = ck({"scale": pk(SCALE.replace("3.0", "9.0"))})
    out = lib.get("scale")(np.arange(3, dtype=np.float32))
    return str(lib.path), out.tolist()


def test_concurrent_builds_produce_one_valid_library(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.map(_build_in_subprocess, [str(tmp_path)] * 3)
    paths = {p for p, _ in results}
    assert len(paths) == 1
    for _, out in results:
        assert out == [1.0, 10.0, 19.0]
    libs = list((tmp_path / "c").glob("lib-*.so"))
    assert len(libs) == 1
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith((".", "build-"))]
    # the file is a complete library
    assert NativeLibrary.from_bytes(libs[0].read_bytes()).get("scale") is not None


def test_compile_error_shows_source_lines() -> None:
    bad = CSource("int helper(void) {\n    return 1\n}\n",
                  (CFunction("helper_fn", (((4,), "float32"),), symbol="helper"),), "mine.c")
    with pytest.raises(CCompileError) as info:
        compile_kernels(_scale(), c_sources=[bad])
    err = info.value
    text = str(err)
    assert err.file == "mine.c" and err.line in (2, 3)
    assert "C compilation failed" in text and "error:" in text
    assert "source around mine.c line" in text
    assert "|     return 1" in text
    assert "command: " in text


def test_compile_error_in_generated_code_names_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import plait.codegen.c.emit as emit

    monkeypatch.setitem(emit._MATH, "sin", "no_such_function")
    k = parse_kernel_source('''
@kernel
def uses_sin(a: Buffer((4,), "float32"), out: Buffer((4,), "float32", output=True)):
    for i in range(4):
        out[i] = sin(a[i])
''')
    with pytest.raises(CCompileError) as info:
        compile_kernels({"uses_sin": k}, extra_flags=["-Werror=implicit-function-declaration"])
    err = info.value
    assert err.kernel == "uses_sin"
    assert "in kernel 'uses_sin'" in str(err)
    assert "no_such_functionf" in err.excerpt
    assert f"> {err.line} |" in err.excerpt.replace("  ", " ")


def test_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_compiler(monkeypatch)
    with pytest.raises(NativeUnavailableError, match=r"no `cc` is on PATH.*target=\"numpy\""):
        compile_kernels(_scale(11.0))
    monkeypatch.setenv("CC", "definitely-not-a-compiler")
    with pytest.raises(NativeUnavailableError, match="definitely-not-a-compiler"):
        compile_kernels(_scale(11.0))


def test_verifier_runs_before_compiling() -> None:
    k = parse_kernel_source(SCALE.replace("a[i] * 3.0", "a[i + 1] * 3.0"))
    with pytest.raises(KernelVerifyError, match="kernel 'scale'.*out of bounds"):
        compile_kernels({"scale": k})


def test_loading_from_bytes_without_a_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    data = compile_kernels(_scale(2.0)).data
    _no_compiler(monkeypatch)
    lib = NativeLibrary.from_bytes(data)
    np.testing.assert_allclose(lib.get("scale")(np.array([1, 2], np.float32)), [3.0, 5.0])
    assert lib.data == data
    with pytest.raises(NativeLoadError, match="not a shared library"):
        load_library_bytes(b"not a library")


def test_user_c_source_linked_with_kernels() -> None:
    code = r'''
#include <stdint.h>
void my_axpy(const float* x, const float* y, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i] + y[i];
}
int checked_copy(const double* x, double* y, int64_t n) {
    if (n > 100) return 7;
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    return 0;
}
int32_t raw_abi(void* const* args, const int64_t* sizes) {
    const int32_t* a = (const int32_t*)args[0];
    int32_t* b = (int32_t*)args[1];
    b[0] = a[0] + a[1] + (int32_t)sizes[0];
    return 0;
}
'''
    src = CSource(code, (
        CFunction("axpy", ((("n",), "float32"), (("n",), "float32"), (("n",), "float32")),
                  symbol="my_axpy"),
        CFunction("checked_copy", ((("n",), "float64"), (("n",), "float64")), returns="int"),
        CFunction("raw", ((("k",), "int32"), ((1,), "int32")), symbol="raw_abi", abi="plait"),
    ), "user_ops.c")
    lib = compile_kernels(_scale(), c_sources=[src])
    assert set(lib.names) == {"scale", "axpy", "checked_copy", "raw"}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(lib.get("axpy")(x, x), 3 * x)
    np.testing.assert_array_equal(lib.get("checked_copy")(np.arange(3.0)), np.arange(3.0))
    with pytest.raises(RuntimeError, match="failed with status 7"):
        lib.get("checked_copy")(np.zeros(101))
    assert lib.get("raw")(np.array([1, 2, 3], np.int32)).tolist() == [6]
    only_c = compile_c_source(code, [CFunction("axpy", ((("n",), "float32"),) * 3,
                                               symbol="my_axpy")])
    np.testing.assert_allclose(only_c.get("axpy")(x, x), 3 * x)


def _exe_with(lib_data: bytes) -> Executable:
    fn = VMFunction(
        "main",
        [ParamSig("x", "tensor", ("n",), "float32")],
        2,
        [AllocTensor(1, ["n"], "float32"), Call("scale", [Reg(0), Reg(1)], None), Ret(1)],
    )
    return Executable({"main": fn}, [], {}, {"c": lib_data})


def test_vm_runs_native_kernel_from_saved_executable(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = parse_kernels(SCALE.replace("3.0", "4.0"))
    exe = _exe_with(compile_kernels(kernels).data)
    exe.save(tmp_path / "model.plx")
    _no_compiler(monkeypatch)
    loaded = Executable.load(tmp_path / "model.plx")
    vm = VirtualMachine(loaded)
    out = vm["main"](np.array([1.0, 2.0], np.float32))
    np.testing.assert_allclose(out, [5.0, 9.0])


def test_fixed_arguments_are_bound_once_and_errors_read_the_same() -> None:
    """``with_fixed`` (what the VM uses for calls with constant arguments) computes the
    same thing as a plain call; a wrong argument falls back to the plain call's checks
    (the error names the argument) and a failing status raises the same error."""
    code = r'''
#include <stdint.h>
int affine(const float* x, const float* w, const float* b, float* out) {
    if (x[0] < -1000.0f) return 5;
    for (int i = 0; i < 3; ++i) out[i] = w[i] * x[i] + b[i];
    return 0;
}
'''
    shape = ((3,), "float32")
    src = CSource(code, (CFunction("affine", (shape,) * 4, returns="int"),), "affine.c")
    f = compile_c_source(code, list(src.functions)).get("affine")
    w, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, 0.5, 0.5], np.float32)
    w.flags.writeable = False   # as the VM's constants are
    fast = f.with_fixed({1: w, 2: b})
    assert fast is not f
    x, out = np.array([1.0, 1.0, 2.0], np.float32), np.zeros(3, np.float32)
    assert fast(x, out) is None
    np.testing.assert_allclose(out, w * x + b)
    with pytest.raises(ValueError, match=r"argument 0 \('p0'.*dimension 0 is 4, expected 3"):
        fast(np.zeros(4, np.float32), out)
    with pytest.raises(TypeError, match=r"argument 3 .*dtype is float64"):
        fast(x, np.zeros(3))
    with pytest.raises(RuntimeError, match="'affine' failed with status 5"):
        fast(np.full(3, -2000.0, np.float32), out)
    # a fixed argument that would need a conversion keeps the plain call
    assert f.with_fixed({1: w.astype(np.float64)}) is f
    with pytest.raises(ValueError, match=r"affine\(.*only inputs can be fixed, positions 0 "
                                         r"to 2; got \[3\]"):
        f.with_fixed({3: out})


def test_fixed_arguments_of_a_function_with_size_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A function with size variables (a model's entry point with a symbolic batch) has
    its constants bound once too: each call takes the addresses of the other arguments
    only and binds the sizes from their shapes; a disagreement falls back to the plain
    call's error."""
    code = r'''
#include <stdint.h>
void affine(const float* x, const float* w, const float* b, float* out, int64_t n) {
    for (int64_t r = 0; r < n; ++r)
        for (int i = 0; i < 3; ++i) out[r * 3 + i] = w[i] * x[r * 3 + i] + b[i];
}
'''
    rows, vec = (("n", 3), "float32"), ((3,), "float32")
    src = CSource(code, (CFunction("affine", (rows, vec, vec, rows)),), "affine_n.c")
    f = compile_c_source(code, list(src.functions)).get("affine")
    w, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, -1.0, 0.25], np.float32)
    w.flags.writeable = b.flags.writeable = False   # as the VM's constants are
    fast = f.with_fixed({1: w, 2: b})
    assert fast is not f
    taken: list[int] = []
    real = native_mod._data_pointer
    monkeypatch.setattr(native_mod, "_data_pointer", lambda a: taken.append(1) or real(a))
    for n in (2, 5):   # the size variable bound per call
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        out = np.zeros((n, 3), np.float32)
        assert fast(x, out) is None
        np.testing.assert_allclose(out, w * x + b, rtol=1e-6)   # numpy reference
    assert len(taken) == 4   # x and out per call, never the constants
    with pytest.raises(ValueError, match=r"argument 3 \('p3'.*dimension 0 is 4, but n = 2"):
        fast(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"argument 0 \('p0'.*rank is 1"):
        fast(np.zeros(3, np.float32), np.zeros((1, 3), np.float32))
