"""A model shipped as a C library (``plait.export_library``, docs/c_api.md), run from C
with no Python in the process.

Three real models — a ResNet-style CNN and a transformer encoder layer
(examples/export_models.py, a symbolic batch with a range) and an int8 MLP quantized by
onnxruntime's tools — are built for ``c`` once; examples/c_api's ``run_model`` (built
with its Makefile) loads each library with ``dlopen``, finds the model through the
query API, reads .npy inputs and writes .npy outputs, which equal the VM's bit for bit
(the same kernels in the same order) and onnxruntime's within the tolerance of
tests/e2e (float models: rtol 1e-4, atol 1e-5).  The same runs with the runner and the
libraries' API compiled with AddressSanitizer and UndefinedBehaviorSanitizer report
nothing.  The tiny MLP (weights in a side file) is the subject of every refusal
(tests/clib/bad_inputs.c, linked against the static library), of 10,000 calls without
growth of resident memory and of a valgrind run; a model that cannot run as one entry
point is refused with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from clib_helpers import (  # noqa: E402
    ROOT,
    SANITIZE,
    assert_clean,
    build_once,
    compile_runner,
    export,
    run,
    sample,
    shared_models,
)

import plait  # noqa: E402
from plait.cli import main as cli_main  # noqa: E402
from plait.codegen.c.c_api import emit_common_header  # noqa: E402
from plait.codegen.c.model_library import API_FUNCTIONS, dlpack_header_text  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.runtime import Executable, VirtualMachine  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs cc and make (the example's Makefile)")

MODELS = ("cnn", "transformer", "int8")
TINY = ROOT / "examples" / "models" / "tiny_mlp.onnx"
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("clib")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each model built once per run (shared by the xdist workers); its plain library
    and one whose API is sanitized; its input as .npy and the VM's outputs."""
    base = tmp_path_factory.getbasetemp()
    return shared_models(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base,
                         SANITIZE)


@pytest.fixture(scope="module")
def runners(work: Path) -> dict[str, Path]:
    """examples/c_api's runner, plain and sanitized (it needs the headers every library
    comes with, plait_c_api.h and dlpack.h, not a model's)."""
    include = work / "include"
    include.mkdir()
    (include / "plait_c_api.h").write_text(emit_common_header())
    (include / "dlpack.h").write_text(dlpack_header_text())
    return {"plain": compile_runner(work / "runner", include),
            "asan": compile_runner(work / "runner-asan", include, SANITIZE)}


def _outputs(d: Path) -> np.ndarray:
    return np.load(d / "output.npy")


@pytest.mark.parametrize("name", MODELS)
def test_library_outputs_equal_the_vm_bit_for_bit(models: dict[str, dict[str, Any]],
                                                  runners: dict[str, Path], name: str,
                                                  tmp_path: Path) -> None:
    m = models[name]
    res = tmp_path
    r = run([runners["plain"], m["lib"].shared, m["dir"] / "x.npy", "-o", res])
    assert r.returncode == 0, r.stderr
    got, want = _outputs(res), m["vm"][0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    sess = ort.InferenceSession(m["path"], providers=["CPUExecutionProvider"])
    ref = sess.run(None, {sess.get_inputs()[0].name: m["x"]})[0]
    if name == "int8":   # a dequantized integer result (tests/dialects/qnn's bound)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
    else:
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_num_threads_caps_the_pool(models: dict[str, dict[str, Any]],
                                   runners: dict[str, Path], tmp_path: Path) -> None:
    """The CNN's products run on the pool: with the option num_threads 1 the process
    never starts a worker (one thread), by default (PLAIT_NUM_THREADS=2) it does; the
    bytes are the same."""
    m = models["cnn"]
    threads = {}
    for option in ("1", "0"):
        res = tmp_path / f"res-threads{option}"
        res.mkdir()
        r = run([runners["plain"], m["lib"].shared, m["dir"] / "x.npy", "-o", res,
                 "--threads", option, "--repeat", "4"])
        assert r.returncode == 0, r.stderr
        threads[option] = int(re.search(r"threads (\d+)", r.stdout)[1])
        assert _outputs(res).tobytes() == m["vm"][0].tobytes()
    assert threads == {"1": 1, "0": 2}, threads


@pytest.mark.parametrize("name", MODELS)
def test_sanitizers_report_nothing(models: dict[str, dict[str, Any]], runners: dict[str, Path],
                                   name: str, tmp_path: Path) -> None:
    m = models[name]
    res = tmp_path
    r = run([runners["asan"], m["asan"].shared, m["dir"] / "x.npy", "-o", res, "--repeat",
             "3"], sanitized=True)
    assert_clean(r)
    assert _outputs(res).tobytes() == m["vm"][0].tobytes()


@pytest.fixture(scope="module")
def tiny(work: Path) -> dict[str, Any]:
    """The tiny MLP (batch in [1, 8]) with its weights in a side file: the library made
    by the command line (plain API), and one with a sanitized API."""
    d = work / "tiny"
    d.mkdir()
    here = os.getcwd()
    os.chdir(d)
    try:   # (-o relative to the working directory)
        assert cli_main(["compile", str(TINY), "--emit", "library", "-o", "cli", "--name",
                         "tiny", "--weights", "file"]) == 0
    finally:
        os.chdir(here)
    _, built = build_once(str(TINY), {"dim_ranges": {"batch": (1, 8)}})
    return {"dir": d, "cli": d / "cli",
            "asan": export(built, d / "asan", "tiny", weights="file", output_names=["output"],
                           api_flags=SANITIZE)}


def _cases(stdout: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in stdout.splitlines():
        got = re.fullmatch(r"CASE (\S+) (\S+) \| (.*)", line)
        if got:
            out[got[1]] = (got[2], got[3])
    return out


EXPECTED = {   # case: (status, a part of the message)
    "create_null_model": ("PLAIT_ERR_NULL_POINTER", "model is NULL"),
    "create_struct_size": ("PLAIT_ERR_OPTIONS", "struct_size is 0"),
    "create_threads": ("PLAIT_ERR_OPTIONS", "num_threads is -1"),
    "create_missing_weights": ("PLAIT_ERR_WEIGHTS", "cannot open the weights file "
                                                    "/nonexistent/tiny.weights"),
    "create_wrong_weights": ("PLAIT_ERR_WEIGHTS", "the weights file bad_inputs.c has"),
    "create_no_error_buffer": ("PLAIT_ERR_WEIGHTS", "null"),
    "create_ok": ("PLAIT_OK", ""),
    "run_null_model": ("PLAIT_ERR_NULL_POINTER", ""),
    "run_null_inputs": ("PLAIT_ERR_NULL_POINTER", "inputs is NULL"),
    "run_input_count": ("PLAIT_ERR_ARGUMENT_COUNT", "2 input(s) given, the model takes 1"),
    "input_null_data": ("PLAIT_ERR_NULL_POINTER", "input 'input': its data is NULL"),
    "input_null_shape": ("PLAIT_ERR_NULL_POINTER", "input 'input': its shape is NULL"),
    "input_dtype": ("PLAIT_ERR_DTYPE", "(code 2, bits 64, lanes 1), the model takes (code 2, "
                                       "bits 32"),
    "input_dtype_code": ("PLAIT_ERR_DTYPE", "(code 0, bits 32"),
    "input_lanes": ("PLAIT_ERR_DTYPE", "lanes 4"),
    "input_rank": ("PLAIT_ERR_RANK", "input 'input' has 1 dimension(s), the model takes 2"),
    "input_shape": ("PLAIT_ERR_SHAPE", "input 'input' dimension 1 is 63, the model takes 64"),
    "input_above_range": ("PLAIT_ERR_SIZE_RANGE", "dimension 0 is 9, outside the range [1, 8] "
                                                  "of the symbolic size 'batch'"),
    "input_below_range": ("PLAIT_ERR_SIZE_RANGE", "dimension 0 is 0, outside the range [1, 8]"),
    "input_device": ("PLAIT_ERR_DEVICE", "input 'input' is on device type 2"),
    "input_strides": ("PLAIT_ERR_LAYOUT", "stride 3 of dimension 1 is not compact"),
    "input_misaligned": ("PLAIT_ERR_LAYOUT", "not aligned to its 4-byte elements"),
    "run_null_outputs": ("PLAIT_ERR_NULL_POINTER", "outputs is NULL"),
    "run_output_count": ("PLAIT_ERR_ARGUMENT_COUNT", "0 output(s) given, the model has 1"),
    "output_too_small": ("PLAIT_ERR_OUTPUT_TOO_SMALL", "output 'output' holds 20 element(s), "
                                                       "the result has 30"),
    "output_shape": ("PLAIT_ERR_SHAPE", "output 'output' dimension 0 is 4, the result's is 3"),
    "output_null_data": ("PLAIT_ERR_NULL_POINTER", "output 'output': its data is NULL"),
    "output_dtype": ("PLAIT_ERR_DTYPE", "output 'output' has DLPack dtype (code 2, bits 16"),
    "output_rank": ("PLAIT_ERR_RANK", "output 'output' has 3 dimension(s)"),
    "run_alloc_null_outputs": ("PLAIT_ERR_NULL_POINTER", "outputs is NULL"),
    "run_alloc_bad_input": ("PLAIT_ERR_SIZE_RANGE", "outside the range [1, 8]"),
    "run_alloc_bad_input_outputs_null": ("PLAIT_OK", ""),
    "output_shapes": ("PLAIT_OK", "3 10"),
    "status_name_unknown": ("PLAIT_OK", "unknown status"),
    "info_out_of_range": ("PLAIT_OK", ""),
    "input_info": ("PLAIT_OK", "input 2 batch 1 8 64"),
    "run_ok": ("PLAIT_OK", ""),
    "run_alloc_ok": ("PLAIT_OK", ""),
}


def test_every_bad_input_returns_its_code_and_message(tiny: dict[str, Any], work: Path
                                                      ) -> None:
    """bad_inputs.c, statically linked with the library (sanitized API), under ASan and
    UBSan: each refusal's status and message; two threads on one instance: each call
    succeeds or is refused as busy; two instances in two threads: every call succeeds
    with the same bytes."""
    lib = tiny["asan"]
    d = work / "bad"
    d.mkdir()
    shutil.copy(Path(__file__).with_name("bad_inputs.c"), d / "bad_inputs.c")
    r = run(["cc", "-O1", "-g", *SANITIZE, f"-I{lib.header.parent}", "bad_inputs.c",
             lib.static, "-lm", "-pthread", "-ldl", "-o", "bad_inputs"], cwd=d)
    assert r.returncode == 0, r.stderr
    r = run(["./bad_inputs", lib.weights], cwd=d, sanitized=True)
    assert_clean(r)
    cases = _cases(r.stdout)
    for case, (status, part) in EXPECTED.items():
        assert case in cases, (case, r.stdout)
        assert cases[case][0] == status and part in cases[case][1], (case, cases[case])
    shared = dict(re.findall(r"(\w+) (\d+)", cases["shared_instance"][1]))
    assert int(shared["ok"]) + int(shared["busy"]) == 6000 and shared["other"] == "0"
    assert shared["differs"] == "0" and int(shared["ok"]) > 0
    both = dict(re.findall(r"(\w+) (\d+)", cases["two_instances"][1]))
    assert both == {"ok": "4000", "busy": "0", "other": "0", "differs": "0"}


def test_ten_thousand_calls_keep_resident_memory(tiny: dict[str, Any], runners: dict[str, Path],
                                                 work: Path) -> None:
    """The library the command line wrote (weights next to it, found without an option):
    10,000 calls (half into library-allocated outputs, half into the caller's), each
    with the first call's bytes; VmRSS after 10,000 calls within 64 KiB of that after
    1,000 (a leak of one 120-byte output per call would add 1 MB)."""
    x = sample((3, 64), 2)
    np.save(work / "tiny-x.npy", x)
    res = work / "tiny-res"
    res.mkdir()
    lib = tiny["cli"] / "libtiny.so"
    r = run([runners["plain"], lib, work / "tiny-x.npy", "-o", res, "--repeat", "10000"])
    assert r.returncode == 0, r.stderr
    got = re.search(r"rss_kb after 1000 calls (\d+), after 10000 calls (\d+)", r.stdout)
    assert got, r.stdout
    assert int(got[2]) - int(got[1]) <= 64, r.stdout
    want = VirtualMachine(plait.build(from_onnx(TINY), "c"))["main"](x)
    assert np.load(res / "output.npy").tobytes() == want.tobytes()


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_valgrind_reports_no_error(tiny: dict[str, Any], runners: dict[str, Path],
                                   work: Path) -> None:
    np.save(work / "vg-x.npy", sample((2, 64), 3))
    res = work / "vg-res"
    res.mkdir()
    r = run(["valgrind", "--error-exitcode=9", "--errors-for-leak-kinds=definite",
             "--leak-check=full", runners["plain"], tiny["cli"] / "libtiny.so",
             work / "vg-x.npy", "-o", res, "--repeat", "4"], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR SUMMARY: 0 errors" in r.stderr


def test_an_executable_exports_from_the_graph_it_keeps(runners: dict[str, Path], work: Path
                                                       ) -> None:
    """``export_library(exe, ...)`` builds the graph the executable keeps again: the
    library's outputs are the executable's, bit for bit."""
    exe = plait.build(from_onnx(TINY), "c")
    lib = plait.export_library(exe, work / "from-exe", name="tiny_exe")
    assert lib.weights is None and lib.shared.name == "libtiny_exe.so"
    x = sample((2, 64), 4)
    np.save(work / "exe-x.npy", x)
    res = work / "exe-res"
    res.mkdir()
    r = run([runners["plain"], lib.shared, work / "exe-x.npy", "-o", res])
    assert r.returncode == 0, r.stderr
    want = VirtualMachine(exe)["main"](x)
    assert np.load(res / "output0.npy").tobytes() == want.tobytes()


def _two_outputs_model(path: Path) -> None:
    """x float32[n, 8], k int64[n, 5] -> (int64(x @ W) + k, relu(x @ W))."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper

    w = numpy_helper.from_array(sample((8, 5), 5), "W")
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Relu", ["m"], ["b_out"]),
         h.make_node("Cast", ["m"], ["c"], to=TP.INT64), h.make_node("Add", ["c", "k"],
                                                                     ["a_out"])],
        "two", [h.make_tensor_value_info("x", TP.FLOAT, ["n", 8]),
                h.make_tensor_value_info("k", TP.INT64, ["n", 5])],
        [h.make_tensor_value_info("a_out", TP.INT64, ["n", 5]),
         h.make_tensor_value_info("b_out", TP.FLOAT, ["n", 5])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, path)


def test_two_inputs_and_two_outputs_of_two_dtypes(runners: dict[str, Path], work: Path
                                                   ) -> None:
    """Inputs and outputs keep their order, names and dtypes (int64 among them); two
    inputs that disagree on their symbolic size are refused, naming both."""
    d = work / "two"
    d.mkdir()
    _two_outputs_model(d / "two.onnx")
    exe = plait.build(from_onnx(d / "two.onnx"), "c")
    lib = plait.export_library(from_onnx(d / "two.onnx"), d / "out", name="two",
                               output_names=["a_out", "b_out"])
    x, k = sample((3, 8), 6), np.arange(15, dtype=np.int64).reshape(3, 5)
    np.save(d / "x.npy", x)
    np.save(d / "k.npy", k)
    np.save(d / "k2.npy", k[:2])
    r = run([runners["plain"], lib.shared, d / "x.npy", d / "k.npy", "-o", d])
    assert r.returncode == 0, r.stderr
    a, b = VirtualMachine(exe)["main"](x, k)
    assert np.load(d / "a_out.npy").dtype == np.int64
    assert np.load(d / "a_out.npy").tobytes() == a.tobytes()
    assert np.load(d / "b_out.npy").tobytes() == b.tobytes()
    r = run([runners["plain"], lib.shared, d / "x.npy", d / "k2.npy", "-o", d])
    assert r.returncode == 1
    assert ("run: PLAIT_ERR_SHAPE: input 'k' dimension 0 is 2 but the symbolic size 'n' is 3 "
            "(input 'x' dimension 0)") in r.stderr


def test_the_library_needs_nothing_but_the_c_library(models: dict[str, dict[str, Any]]
                                                     ) -> None:
    """No Python inside: the shared library's NEEDED entries are the C library's alone
    (libc and the dynamic loader; libm, libpthread, libdl on old glibc), and it exports
    only the API."""
    lib = models["cnn"]["lib"].shared
    r = run(["readelf", "-d", "--dyn-syms", "-W", lib])
    assert r.returncode == 0, r.stderr
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout))
    assert needed and all(re.fullmatch(r"(lib(c|m|pthread|dl)|ld-linux[-\w]*)\.so\.\d+", n)
                          for n in needed), needed
    exported = {line.split()[-1] for line in r.stdout.splitlines()
                if " GLOBAL " in line and " DEFAULT " in line and " UND " not in line}
    assert exported == {f"cnn_{f}" for f in API_FUNCTIONS} | {"plait_library_name"}, exported


def _gather_model(path: Path) -> None:
    """i int64[n] -> relu(take(W, i, axis=0)) with W of 10 rows."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper

    w = numpy_helper.from_array(sample((10, 4), 7), "W")
    g = h.make_graph([h.make_node("Gather", ["W", "i"], ["g"], axis=0),
                      h.make_node("Relu", ["g"], ["out"])], "gather",
                     [h.make_tensor_value_info("i", TP.INT64, ["n"])],
                     [h.make_tensor_value_info("out", TP.FLOAT, ["n", 4])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, path)


def test_an_index_out_of_range_is_a_kernel_error(runners: dict[str, Path], work: Path
                                                 ) -> None:
    """A gather index out of range fails the kernel (the c target's
    out_of_range_indices="raise"): PLAIT_ERR_KERNEL with the kernel's status; the
    indices in range give numpy's rows."""
    d = work / "gather"
    d.mkdir()
    _gather_model(d / "gather.onnx")
    lib = plait.export_library(from_onnx(d / "gather.onnx"), d / "out", name="gather",
                               output_names=["out"])
    np.save(d / "ok.npy", np.array([9, 0, 3], np.int64))
    np.save(d / "bad.npy", np.array([1, 10], np.int64))
    r = run([runners["plain"], lib.shared, d / "ok.npy", "-o", d])
    assert r.returncode == 0, r.stderr
    import onnx
    from onnx import numpy_helper

    w = numpy_helper.to_array(onnx.load(d / "gather.onnx").graph.initializer[0])
    np.testing.assert_array_equal(np.load(d / "out.npy"), np.maximum(w[[9, 0, 3]], 0))
    r = run([runners["plain"], lib.shared, d / "bad.npy", "-o", d])
    assert r.returncode == 1
    assert "run: PLAIT_ERR_KERNEL: the model's kernels failed with status 2" in r.stderr


def test_a_saved_executable_becomes_a_library_on_the_command_line(
        runners: dict[str, Path], work: Path) -> None:
    """``plait compile m.plx --emit library`` builds the graph the file keeps: the
    outputs are the file's own, named as the file records them."""
    d = work / "plx"
    d.mkdir()
    assert cli_main(["compile", str(TINY), "-o", str(d / "tiny.plx")]) == 0
    assert cli_main(["compile", str(d / "tiny.plx"), "--emit", "library", "-o",
                     str(d / "out")]) == 0
    x = sample((4, 64), 8)
    np.save(d / "x.npy", x)
    r = run([runners["plain"], d / "out" / "libtiny.so", d / "x.npy", "-o", d])
    assert r.returncode == 0, r.stderr
    want = VirtualMachine(Executable.load(d / "tiny.plx"))["main"](x)
    assert np.load(d / "output.npy").tobytes() == want.tobytes()


def test_threads_that_call_once_and_exit_leave_no_memory(models: dict[str, dict[str, Any]],
                                                         work: Path) -> None:
    """200 application threads each make one call of the CNN and exit: resident memory
    grows by at most 1 MiB (each thread's scratch, about 350 KiB of packed panels, is
    freed when it exits; before, 200 threads kept 70 MB)."""
    lib = models["cnn"]["lib"]
    d = work / "thread-exit"
    d.mkdir()
    shutil.copy(Path(__file__).with_name("thread_exit.c"), d / "thread_exit.c")
    r = run(["cc", "-O1", f"-I{lib.header.parent}", "thread_exit.c", lib.static, "-lm",
             "-pthread", "-ldl", "-o", "thread_exit"], cwd=d)
    assert r.returncode == 0, r.stderr
    r = run(["./thread_exit", "200"], cwd=d)
    assert r.returncode == 0, r.stderr
    growth = int(re.search(r"rss growth (-?\d+) kB", r.stdout)[1])
    assert growth <= 1024, r.stdout
