"""The ``plait`` command: run, compile, check; errors are one line and exit code 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from plait import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "examples", "models", "tiny_mlp.onnx")

onnx = pytest.importorskip("onnx")


@pytest.fixture()
def reshape_model(tmp_path) -> str:
    """y = Reshape(x, shape) + 1 with the target shape a graph input (a compile-time
    input), x with a symbolic batch size."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Add", ["r", "one"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(1, np.float32), "one")],
    )  # fmt: skip
    path = str(tmp_path / "reshape.onnx")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # onnxruntime reads IR versions up to 13
    onnx.save(m, path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_onnx_with_random_inputs_and_compare(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "run", TINY, "--compare", "onnxruntime", "--seed", "3")
    assert code == 0, err
    assert "input  input: float32 (1, 64)" in out
    assert "output output: float32 (1, 10)" in out
    assert "time: compile" in out
    assert "output: PASS  max abs error" in out and out.rstrip().endswith("PASS")


def test_run_with_shape_and_input_file(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, _ = _run(
        capsys, "run", TINY, "--input", f"input={tmp_path / 'x.npy'}", "--compare", "onnxruntime"
    )
    assert code == 0 and "output output: float32 (3, 10)" in out
    code, out, _ = _run(capsys, "run", TINY, "--shape", "input=5,64")
    assert code == 0 and "output output: float32 (5, 10)" in out


def test_compile_then_run_the_executable(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    plx = str(tmp_path / "tiny.plx")
    code, out, err = _run(capsys, "compile", TINY, "-o", plx)
    assert code == 0, err
    assert os.path.getsize(plx) > 0 and "compiled" in out
    # native code by default where a compiler is, and it says which target it chose
    if shutil.which(os.environ.get("CC", "cc")):
        assert "for target c (a C compiler was found)" in out
    code, out, err = _run(capsys, "run", plx, "--shape", "input=2,64")
    assert code == 0, err
    assert "output output: float32 (2, 10)" in out  # the model's output name, kept


def test_a_shape_that_contradicts_an_input_is_an_error(capsys: pytest.CaptureFixture[str],
                                                      tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((3, 64), np.float32))
    code, _, err = _run(capsys, "run", TINY, "--shape", "input=2,64",
                        "--input", f"input={tmp_path / 'x.npy'}")
    assert code == 2 and err.count("\n") == 1
    assert ("--shape input=2,64 contradicts --input input, whose array has shape (3, 64)"
            in err)
    code, out, err = _run(capsys, "run", TINY, "--shape", "input=3x64",   # agreeing: fine
                          "--input", f"input={tmp_path / 'x.npy'}")
    assert code == 0 and "input  input: float32 (3, 64)" in out, err


def test_a_plx_is_compared_with_the_model_it_came_from(capsys: pytest.CaptureFixture[str],
                                                      tmp_path) -> None:
    plx = str(tmp_path / "tiny.plx")
    assert _run(capsys, "compile", TINY, "--target", "c", "-o", plx)[0] == 0
    code, out, err = _run(capsys, "run", plx, "--compare", "onnxruntime", "--model", TINY)
    assert code == 0 and "PASS" in out, err
    code, _, err = _run(capsys, "run", plx, "--compare", "onnxruntime")
    assert code == 2 and "needs the model it came from: --model model.onnx" in err
    code, _, err = _run(capsys, "run", TINY, "--compare", "onnxruntime", "--model", TINY)
    assert code == 2 and "--model names the ONNX model a .plx was compiled from" in err


def test_a_parse_error_keeps_its_file_line_and_caret(capsys: pytest.CaptureFixture[str],
                                                    tmp_path) -> None:
    bad = tmp_path / "bad.plait.py"
    bad.write_text('@module\nclass M:\n    @function\n    def main(x: Tensor((2,), '
                   '"float32")):\n        y = relu(x, 3)\n        return y\n')
    code, _, err = _run(capsys, "check", str(bad))
    lines = err.rstrip("\n").splitlines()
    assert code == 2 and len(lines) == 3
    assert lines[0].startswith(f"plait: error: {bad}:5:21: a bare int is not a value")
    assert lines[1].strip() == "y = relu(x, 3)"
    assert lines[2].index("^") == lines[1].index("3")  # under the 3


def test_a_numpy_executable_runs_with_target_numpy(capsys: pytest.CaptureFixture[str],
                                                   tmp_path) -> None:
    plx = str(tmp_path / "np.plx")
    assert _run(capsys, "compile", TINY, "--target", "numpy", "-o", plx)[0] == 0
    code, out, err = _run(capsys, "run", plx, "--target", "numpy", "--compare", "onnxruntime",
                          "--model", TINY)
    assert code == 0 and "target numpy" in out and "PASS" in out, err


def test_run_says_which_open_sizes_it_chose(capsys: pytest.CaptureFixture[str],
                                            tmp_path) -> None:
    """A model with a symbolic batch run without --shape: the sizes chosen are named,
    with the option that sets them; given --shape, nothing is said."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = str(tmp_path / "open.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, out, err = _run(capsys, "run", path)
    assert code == 0, err
    assert ("input 'x' has open sizes (batch, seq, 8): running with 1x1x8; set them with "
            "--shape x=1x1x8") in out
    code, out, err = _run(capsys, "run", path, "--shape", "x=2x5x8")
    assert code == 0 and "open sizes" not in out and "input  x: float32 (2, 5, 8)" in out
    # a dynamo export's ranges (Dim("seq", min=3)): the least size its range allows
    m = onnx.load(path)
    helper.set_metadata_props(m.graph, {  # type: ignore[attr-defined]
        "pkg.torch.export.ExportedProgram.range_constraints": "{s1: VR[1, 8], s2: VR[3, 64]}"})
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "s1"
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "s2"
    onnx.save_model(m, path)
    code, out, err = _run(capsys, "run", path)
    assert code == 0, err
    assert "input 'x' has open sizes (s1, s2, 8): running with 1x3x8" in out


def test_no_graph_leaves_the_weights_copy_out(capsys: pytest.CaptureFixture[str],
                                              tmp_path) -> None:
    """``--no-graph``: the executable without its kept graph (the model's weights a
    second time): smaller, still runs, and says why it cannot be rebuilt."""
    full, bare = str(tmp_path / "full.plx"), str(tmp_path / "bare.plx")
    assert _run(capsys, "compile", TINY, "--target", "c", "-o", full)[0] == 0
    assert _run(capsys, "compile", TINY, "--target", "c", "--no-graph", "-o", bare)[0] == 0
    assert os.path.getsize(bare) < os.path.getsize(full)
    code, out, err = _run(capsys, "run", bare, "--seed", "1")
    assert code == 0 and "output output: float32" in out, err
    code, _, err = _run(capsys, "run", bare, "--target", "numpy")
    assert code == 2 and "keep_graph=False" in err


def test_version_and_repeat_statistics(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("plait ")
    code, out, err = _run(capsys, "run", TINY, "--repeat", "5")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("time:"))
    assert "run min" in line and "median" in line and "p90" in line and "(5 runs)" in line


def test_compile_time_inputs_come_from_input_files(
    capsys: pytest.CaptureFixture[str], tmp_path, reshape_model: str
) -> None:
    np.save(tmp_path / "shape.npy", np.array([3, 4], np.int64))
    code, out, err = _run(
        capsys, "run", reshape_model, "--shape", "x=2,6",
        "--input", f"shape={tmp_path / 'shape.npy'}", "--compare", "onnxruntime",
    )  # fmt: skip
    assert code == 0, err
    assert "float32 (3, 4)" in out and "PASS" in out
    code, _, err = _run(capsys, "run", reshape_model)
    assert code == 2
    assert "must be known at compile time" in err and "--input" in err


def test_compare_failure_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cli, "_run_onnxruntime", lambda path, feeds: [np.ones((1, 10), np.float32) * 100]
    )
    code, out, _ = _run(capsys, "run", TINY, "--compare", "onnxruntime")
    assert code == 1
    assert "output: FAIL" in out and out.rstrip().endswith("FAIL")


MODULE = textwrap.dedent(
    """
    @module
    class Module:
        @function
        def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                y = relu(x)
                z = add(y, x)
                output(z)
            return z
    """
)


def test_check_and_run_a_text_module(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    path = tmp_path / "m.plait.py"
    path.write_text(MODULE)
    code, out, err = _run(capsys, "check", str(path))
    assert code == 0, err
    assert 'def main(x: Tensor((2, 3), "float32"))' in out and "well-formed" in err
    code, out, err = _run(capsys, "run", str(path))
    assert code == 0, err
    assert "output0: float32 (2, 3)" in out


def test_check_reports_ill_formed_modules(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    path = tmp_path / "bad.plait.py"
    path.write_text(MODULE.replace('-> Tensor((2, 3), "float32")', '-> Tensor((2, 4), "float32")'))
    code, _, err = _run(capsys, "check", str(path))
    assert code in (1, 2)
    assert err.strip() and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "missing.onnx"], "no such file: missing.onnx"),
        (["run", TINY, "--shape", "input"], "--shape expects name=d0,d1,..."),
        (["run", TINY, "--shape", "input=a,b"], "the sizes must be integers"),
        (["run", TINY, "--input", "input=/nonexistent.npy"], "no such file"),
        (["run", TINY, "--input", "nothing=/dev/null"], "cannot read"),
        (["run", TINY, "--target", "tpu"], "cannot build for target 'tpu'"),
        (["compile", TINY, "-o", "/nonexistent/dir/x.plx"], "cannot write"),
        (["run", __file__.replace(".py", ".txt")], "no such file"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plait: error:"), err
    assert message in lines[0]


def test_unsupported_model_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )  # fmt: skip
    path = str(tmp_path / "det.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = _run(capsys, "run", path)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unsupported operator Det (opset 17): nodes 'det'" in err


def test_truncated_model_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    path = tmp_path / "cut.onnx"
    with open(TINY, "rb") as f:
        path.write_bytes(f.read()[:300])
    code, _, err = _run(capsys, "run", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_installed_command(tmp_path) -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "plait")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "plait.cli"]
    done = subprocess.run(
        cmd + ["run", TINY, "--compare", "onnxruntime"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout
    done = subprocess.run(
        cmd + ["run", str(tmp_path / "nope.onnx")], capture_output=True, text=True
    )
    assert (
        done.returncode == 2
        and done.stderr.strip() == f"plait: error: no such file: {tmp_path / 'nope.onnx'}"
    )


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler"
)
def test_run_with_the_c_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "run", TINY, "--target", "c", "--compare", "onnxruntime")
    assert code == 0, err
    assert "target c" in out and out.rstrip().endswith("PASS")


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler"
)
def test_run_verbose_says_how_main_runs_and_profile_times_its_calls(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    code, out, err = _run(capsys, "run", TINY, "--target", "c", "--verbose", "--profile")
    assert code == 0, err
    assert "execution: main: single native entry point 'main@entry' (2 native calls" in out
    assert "profile: 2 calls" in out and "(inside main's single entry point" in out
    assert out.count("main@entry[") == 2   # the two calls, each with its step
    assert "step 0: plait_gemm_" in out and "step 1: plait_gemm_" in out
    code, out, err = _run(capsys, "run", TINY, "--verbose", "--profile")
    assert code == 0, err
    assert "execution: main: VM path (the executable records no single entry point" in out
    assert "profile: " in out and "on the VM path" not in out
    plx = str(tmp_path / "tiny-c.plx")   # built without step timing: the VM path, and why
    assert _run(capsys, "compile", TINY, "--target", "c", "--shape", "input=1,64",
                "-o", plx)[0] == 0
    code, out, err = _run(capsys, "run", plx, "--profile")
    assert code == 0, err
    assert ("profile: 2 calls" in out and "(on the VM path, one call at a time: this "
            "executable's single entry point does not time its calls" in out)
    assert out.count("main[") == 2   # the two calls, each with its VM location


def test_a_c_executable_from_elsewhere_needs_a_flag_or_runs_on_numpy(
    capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plx = str(tmp_path / "tiny-c.plx")
    assert _run(capsys, "compile", TINY, "--target", "c", "-o", plx)[0] == 0
    code, here, err = _run(capsys, "run", plx, "--seed", "4")  # this machine built it
    assert code == 0, err
    assert "target c" in here
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "another-machine"))
    code, out, err = _run(capsys, "run", plx, "--seed", "4")
    assert code == 2 and "holds native code" in err and "--allow-native" in err
    assert "--target numpy" in err and len(err.strip().splitlines()) == 1
    code, allowed, err = _run(capsys, "run", plx, "--seed", "4", "--allow-native")
    assert code == 0, err
    code, numpy_out, err = _run(capsys, "run", plx, "--seed", "4", "--target", "numpy")
    assert code == 0, err
    assert "target numpy" in numpy_out

    def outputs(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("  output "))

    assert outputs(here) == outputs(allowed)
    np.testing.assert_allclose(  # the printed summaries: numpy and c agree to 4 digits
        [float(v) for v in outputs(numpy_out).split("[")[1].strip(" .]").split(",")[:4]],
        [float(v) for v in outputs(here).split("[")[1].strip(" .]").split(",")[:4]],
        rtol=1e-3)


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler"
)
def test_run_verbose_prints_the_instruction_sets_and_kernel_variants(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`plait run --verbose` names the CPU's instruction sets and the copy each kernel
    family of the model runs: the best one here, and under each cap the CPU allows the
    copy cpu_features() predicts (the variants' numbers: tests/target)."""
    from plait.codegen.c.variants import chosen_copy
    from plait.target.c import cpu_features, use_isa

    code, out, err = _run(capsys, "run", TINY, "--target", "c", "--verbose")
    assert code == 0, err
    feats = cpu_features()
    assert f"instruction sets: {', '.join(feats['supported'])}" in out
    assert f"kernel families of the model: gemm {feats['families']['gemm']['chosen']}" in out
    for isa in feats["supported"]:
        with use_isa(isa):
            code, out, err = _run(capsys, "run", TINY, "--target", "c", "--verbose")
            capped = cpu_features()
        assert code == 0, err
        allowed = ", ".join(capped["allowed"])
        assert f"capped by PLAIT_ISA={isa}: {allowed}" in out
        assert capped["families"]["gemm"]["why"] == f"the best copy allowed by PLAIT_ISA={isa}"
        assert (f"kernel families of the model: gemm {capped['families']['gemm']['chosen']}"
                in out)
        gemm = capped["families"]["gemm"]
        assert gemm["chosen"] == chosen_copy(gemm["built"], isa)   # avx512vnni: avx512
    assert "kernel families of the model: gemm baseline" in out   # the last: baseline


def test_offload_to_onnxruntime_compiles_runs_and_names_unknown_codegens(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    code, out, _ = _run(capsys, "run", TINY, "--offload", "onnxruntime", "--compare",
                        "onnxruntime")
    assert code == 0 and "PASS" in out
    exe = str(tmp_path / "m.plx")
    assert _run(capsys, "compile", TINY, "-o", exe, "--offload", "onnxruntime")[0] == 0
    code, out, _ = _run(capsys, "run", exe)
    assert code == 0 and "output" in out
    code, _, err = _run(capsys, "run", TINY, "--offload", "onnxrt")
    assert code == 2 and "no external codegen 'onnxrt' is registered; did you mean " \
        "'onnxruntime'?" in err and err.count("\n") == 1


def test_check_reads_onnx_models_executables_and_names_what_it_reads(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """`plait check model.onnx` imports the model (it used to fail reading it as text with
    an internal UnicodeDecodeError); a .plx is loaded and printed; a binary file named
    like a module is a clean refusal saying what check reads."""
    code, out, err = _run(capsys, "check", TINY)
    assert code == 0, err
    assert "def main(" in out and "well-formed" in err
    plx = str(tmp_path / "tiny.plx")
    assert _run(capsys, "compile", TINY, "-o", plx)[0] == 0
    code, out, err = _run(capsys, "check", plx)
    assert code == 0, err
    assert "main(" in out and "a valid executable" in err
    binary = tmp_path / "model.plait.py"
    with open(TINY, "rb") as f:
        binary.write_bytes(f.read())
    code, _, err = _run(capsys, "check", str(binary))
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    assert "not UTF-8 text" in err and ".onnx model" in err


def _saved_with(tmp_path, target: str, change) -> str:
    """MODULE built for ``target``, changed by ``change(exe)``, saved (signed by this
    machine, so it is trusted); its path."""
    import plait

    exe = plait.build(plait.parse(MODULE), target)
    change(exe)
    path = str(tmp_path / f"changed-{target}.plx")
    exe.save(path)
    return path


def test_refusals_of_the_vm_and_the_native_loader_are_one_clean_line(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """A VMError (an instruction calling an unknown function) and a NativeLoadError (a
    truncated library) used to print as internal errors to report."""
    from plait.runtime.executable import Call

    def unknown_function(exe) -> None:
        fn = exe.functions["main"]
        at = next(i for i, ins in enumerate(fn.instructions) if isinstance(ins, Call))
        fn.instructions[at] = Call("no.such.function", fn.instructions[at].args,
                                   fn.instructions[at].dst)

    code, _, err = _run(capsys, "run", _saved_with(tmp_path, "numpy", unknown_function))
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("plait: error:") and "unknown function 'no.such.function'" in err
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        return

    def truncated_library(exe) -> None:
        exe.libs["c"] = exe.libs["c"][: len(exe.libs["c"]) // 2]
        exe.lib_digests.clear()

    code, _, err = _run(capsys, "run", _saved_with(tmp_path, "c", truncated_library))
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("plait: error:") and "refusing to map it" in err


def test_profile_names_the_onnx_nodes_beside_each_call(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """``--profile`` labels every call with the ONNX nodes it computes, on the VM path
    and inside the c target's entry point, and a fused kernel names all its nodes."""
    from onnx import TensorProto, helper

    names = {f"{n.name} ({n.op_type})" for n in onnx.load(TINY).graph.node}
    for target in ("numpy", "c"):
        code, out, err = _run(capsys, "run", TINY, "--profile", "--target", target)
        assert code == 0, err
        rows = out[out.index("profile:"):].splitlines()[1:]
        assert rows and all(r.endswith("]") for r in rows), out
        labels = {r[r.rindex("[") + 1:-1] for r in rows}
        named = {n for label in labels for n in label.split(", ")}
        assert named <= names and "/2/Gemm (Gemm)" in named, (labels, names)
        if target == "c":   # the product and its relu epilogue: one call, both nodes
            assert "/0/Gemm (Gemm), /1/Relu (Relu)" in labels, labels
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "x"], ["y"], name="mul")]
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in "xy")
    g = helper.make_graph(nodes, "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "chain.onnx")
    onnx.save(m, path)
    code, out, err = _run(capsys, "run", path, "--profile", "--target", "c")
    assert code == 0, err
    assert "[add (Add), relu (Relu), mul (Mul)]" in out

