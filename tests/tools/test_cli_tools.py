"""plait passes / pipeline / opt: listing, the pipeline text, running passes on a text
module, and the errors for bad input (one line, exit code 2)."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

import plait
from plait import cli
from plait.ir.structural import structural_equal

PLUGIN = os.path.join(os.path.dirname(__file__), "flip_add_plugin.py")

MODULE = textwrap.dedent("""
    @module
    class Model:
        @function
        def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                a = add(const([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32"),
                        const([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], "float32"))
                b = add(x, a)
                c = relu(b)
                output(c)
            return c
""")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def module_file(tmp_path) -> str:
    path = tmp_path / "m.plait.py"
    path.write_text(MODULE)
    return str(path)


def test_passes_lists_every_pass_with_phases_and_options(capsys) -> None:
    code, out, _ = _run(capsys, "passes")
    assert code == 0
    assert "LegalizeOps" in out and "[optimization] -> lowering" in out
    assert "options: max_size: int | None = None" in out
    code, out, _ = _run(capsys, "passes", "--json")
    records = {r["name"]: r for r in json.loads(out)}
    assert records["PlanMemory"]["requires"] == ["ExplicitMemory"]
    assert records["c.DispatchGemm"]["phases"] == ["optimization"]
    code, out, _ = _run(capsys, "passes", "FoldConstant")
    assert code == 0 and out.startswith("FoldConstant: [optimization]")
    code, out, _ = _run(capsys, "passes", "--config")
    assert "debug_counter:" in out and "transform.reproducer_dir:" in out


def test_passes_loads_plugins_and_suggests_names(capsys) -> None:
    code, out, _ = _run(capsys, "passes", "test.FlipAdd", "--plugin", PLUGIN)
    assert code == 0 and "Commute every add" in out
    code, _, err = _run(capsys, "passes", "Fold")
    assert code == 2
    assert err.strip() == ("plait: error: no pass named 'Fold' is registered; did you mean "
                           "'FoldBatchNorm', 'FoldConstant', 'c.FoldPadIntoConv'? (import the "
                           "module that defines it first; plait.transform.list_passes() shows "
                           "what is registered)")
    code, _, err = _run(capsys, "passes", "--plugin", "/no/such/plugin.py")
    assert code == 2 and "--plugin /no/such/plugin.py: no such file" in err


def test_pipeline_prints_the_text_that_opt_accepts(capsys) -> None:
    code, out, _ = _run(capsys, "pipeline", "--target", "c")
    assert code == 0
    assert out.strip() == plait.default_pipeline("c").to_text()
    assert plait.transform.Sequential.parse(out.strip()).names() == \
        plait.default_pipeline("c").names()
    code, out, _ = _run(capsys, "pipeline", "--target", "numpy", "--describe")
    assert out.startswith("pipeline 'default':") and "LegalizeOps" in out
    code, _, err = _run(capsys, "pipeline", "--target", "gpu")
    assert code == 2 and "cannot assemble the pipeline for target 'gpu'" in err


def test_opt_runs_passes_and_writes_the_text_format(capsys, module_file, tmp_path) -> None:
    out_path = str(tmp_path / "out.plait.py")
    code, _, err = _run(capsys, "opt", module_file, "--passes",
                        "Normalize,LambdaLift,FoldConstant", "--print-after-change",
                        "--verify-each", "-o", out_path)
    assert code == 0, err
    assert "# IR after pass 'FoldConstant' changed it (phase optimization)" in err
    assert "# IR after pass 'Normalize'" not in err  # Normalize changed nothing
    want = plait.parse(textwrap.dedent("""
        @module(attrs={"phase": "optimization"})
        class Model:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                with dataflow():
                    a = const([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], "float32")
                    b = add(x, const([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], "float32"))
                    c = relu(b)
                    output(c)
                return c
    """))
    assert structural_equal(plait.parse(open(out_path).read()), want)
    # the output is itself a module opt reads: lower it the rest of the way
    code, out, err = _run(capsys, "opt", out_path, "--target", "numpy", "--passes",
                          "LegalizeOps,ToNonDataflow,ExplicitMemory,PlanMemory", "--timing")
    assert code == 0, err
    assert '@module(attrs={"phase": "build"' in out and "pass timing:" in err


def test_opt_prints_large_constants_as_references(capsys, tmp_path) -> None:
    """On stdout a 64 KiB weight is a reference line (its digest, shape and dtype), not
    base64; ``--print-constants`` prints it; ``-o`` writes a file that reads back."""
    import numpy as np

    w = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    from plait.ir import BlockBuilder, TensorType, Var, const
    from plait.op import make_call

    bb = BlockBuilder()
    x = Var("x", TensorType((2, 128), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make_call("matmul", x, const(w)))
        bb.emit_func_output(out)
    path = tmp_path / "big.plait.py"
    path.write_text(bb.get().script())
    code, out, err = _run(capsys, "opt", str(path), "--passes", "Normalize")
    assert code == 0, err
    assert 'const(ref="sha256:' in out and "shape=(128, 128)" in out and "base64" not in out
    assert "1 large constant(s) printed as const(ref=...)" in err
    code, out, err = _run(capsys, "opt", str(path), "--passes", "Normalize",
                          "--print-constants")
    assert code == 0 and "base64" in out and "ref=" not in out
    written = tmp_path / "out.plait.py"
    assert _run(capsys, "opt", str(path), "--passes", "Normalize", "-o", str(written))[0] == 0
    back = plait.parse(written.read_text())
    np.testing.assert_array_equal(back["main"].body.blocks[0].bindings[0].value.args[1].data, w)


@pytest.mark.parametrize("passes, message", [
    ("Normalize,,FoldConstant", "--passes: pipeline text, column 11: expected a pass name "
                                "(in 'Normalize,,FoldConstant')"),
    ("Normalize,FoldConstnt", "column 11: no pass named 'FoldConstnt' is registered; did you "
                              "mean 'FoldConstant'?"),
    ("Normalize[LambdaLift", "missing ']'"),
    ("FoldConstant(max_siz=3)", "cannot create pass 'FoldConstant' with parameters "
                                "{'max_siz': 3}"),
    ("FoldConstant(3)", "parameters of pass 'FoldConstant' must be written key=value"),
    (" ", "--passes is empty"),
    ("FoldConstant", "pass 'FoldConstant' (#1 of pipeline 'sequential') would run in phase "
                     "ingestion but accepts only optimization; run 'Normalize, LambdaLift'"),
])
def test_opt_rejects_bad_pipelines_in_one_line(capsys, module_file, passes: str,
                                               message: str) -> None:
    code, out, err = _run(capsys, "opt", module_file, "--passes", passes)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("plait: error: ")
    assert message in err


def test_opt_names_a_missing_or_malformed_module(capsys, tmp_path) -> None:
    code, _, err = _run(capsys, "opt", str(tmp_path / "none.plait.py"), "--passes", "Normalize")
    assert code == 2 and "no such file" in err
    bad = tmp_path / "bad.plait.py"
    bad.write_text("@module\nclass M:\n    @function\n    def main(x: Tensor((2,), 'f')):\n"
                   "        return y\n")
    code, _, err = _run(capsys, "opt", str(bad), "--passes", "Normalize")
    assert code == 2 and str(bad) in err


class _Terminal(__import__("io").StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_the_progress_bar_draws_only_on_a_terminal(tty: bool) -> None:
    pytest.importorskip("tqdm")
    from plait.tools.progress import ProgressBar
    from plait.transform import PassContext, Sequential

    out = _Terminal(tty)
    bar = ProgressBar(3, file=out, delay=0.0)
    with PassContext(instruments=[bar]):
        Sequential("Normalize,LambdaLift,FoldConstant")(plait.parse(MODULE))
    assert bar.steps == 3
    assert ("compile" in out.getvalue() and "/3" in out.getvalue()) == tty


def test_the_bar_moves_with_the_c_compiler() -> None:
    """The C compiler's events (object files, the library) reach the bar's description
    during the one long pass, and nothing is drawn for a library from the cache."""
    pytest.importorskip("tqdm")
    from plait.codegen.c.compiler import _event
    from plait.tools.progress import ProgressBar
    from plait.transform import PassContext

    out = _Terminal(True)
    bar = ProgressBar(1, file=out, delay=0.0)
    with PassContext(instruments=[bar]):
        bar.run_before_pass(plait.parse(MODULE), _info("c.CompileKernels"))
        for k in range(3):
            _event("objects", k, 2)
        _event("library", 0, 1)
        _event("library", 1, 1)
    assert bar.compile_steps[0] == ("objects", 0, 2) and bar.compile_steps[-1] == \
        ("library", 1, 1)
    text = out.getvalue()
    assert "c.CompileKernels, C compiler: object files 2/2" in text
    assert "C compiler: the library" in text
    _event("objects", 0, 1)  # outside the context: nobody listens
    assert len(bar.compile_steps) == 5


def _info(name: str):  # type: ignore[no-untyped-def]
    from plait.transform.pass_base import PassInfo

    return PassInfo(name=name, opt_level=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a pty")
def test_a_cold_c_compile_shows_the_bar_on_a_terminal(tmp_path) -> None:
    """``plait run --target c`` with an empty cache, its stderr a pseudo-terminal: the
    bar appears and names the C compiler's work (a cold compile takes seconds)."""
    pytest.importorskip("tqdm")
    import pty
    import shutil
    import subprocess

    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    import fcntl
    import struct
    import termios

    main_fd, child_fd = pty.openpty()
    # a terminal of 24 rows and 160 columns (a new pty has none: tqdm would draw nothing)
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    # this CPU's copies named (PLAIT_BUILD_ISAS=host would also compile the CPU probe's
    # library in the empty cache: a second library)
    from plait.target.c import cpu_features

    env = {**os.environ, "PLAIT_CACHE_DIR": str(tmp_path / "cold"),
           "PLAIT_BUILD_ISAS": ",".join(cpu_features()["supported"])}
    tiny = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models",
                        "tiny_mlp.onnx")
    proc = subprocess.Popen([sys.executable, "-m", "plait.cli", "run", tiny, "--target", "c"],
                            stdout=subprocess.PIPE, stderr=child_fd, env=env)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out, _ = proc.communicate(timeout=600)
    os.close(main_fd)
    terminal = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "native code: compiled 1 library" in out.decode()
    assert "C compiler:" in terminal and "c.CompileKernels" in terminal
