"""plait report: one self-contained HTML page for the ResNet-style CNN, opened in
headless Chromium (a screenshot, no console error, one graph node per binding)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import plait
from plait import cli
from plait.ir.expr import Function, SeqExpr

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def report(cnn_onnx: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("report") / "report.html")
    assert cli.main(["report", cnn_onnx, "--target", "c", "-o", path, "--numeric"]) == 0
    return path


def _bindings(mod: plait.IRModule) -> int:
    main = mod["main"]
    assert isinstance(main, Function) and isinstance(main.body, SeqExpr)
    return sum(len(b.bindings) for b in main.body.blocks)


def _modules(cnn_onnx: str) -> tuple[plait.IRModule, plait.IRModule]:
    """main entering optimization and in lowering, by the default pipeline."""
    from plait.frontend import from_onnx

    mod = from_onnx(cnn_onnx, shapes={"input": (1, 3, 32, 32)}).with_attrs(
        target=plait.Target("c"))
    pipe = plait.default_pipeline("c")
    names = pipe.names()
    leaves = [s.pass_ for s in pipe.flatten(None)]
    opt = plait.transform.Sequential(leaves[: names.index("LambdaLift") + 1])(mod)
    low = plait.transform.Sequential(leaves[names.index("LambdaLift") + 1:
                                            names.index("LegalizeOps") + 1])(opt)
    return opt, low


def test_the_report_is_one_self_contained_page(report: str, cnn_onnx: str) -> None:
    page = open(report, encoding="utf-8").read()
    assert "<link" not in page and "src=" not in page and "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls  # the SVG namespace, not a fetch
    for section in ("Pipeline", "Graph of main", "Memory plan", "Kernels and native code",
                    "What each pass changed"):
        assert f"<h2>{section}</h2>" in page
    assert page.count('<table class="diff"') >= 5  # the passes that changed the module
    # the native families' C sources (the CNN's global average, once its last generated
    # kernel, runs on the pooling family: a generated kernel's IR and C are checked below)
    assert "peak planned bytes: <b>" in page and "C source <code>" in page
    assert 'class="num ok"' in page and 'class="num bad"' not in page  # --numeric column
    # resident memory after every pass, and the pipeline's peak (Linux /proc)
    if os.path.exists("/proc/self/status"):
        assert len(re.findall(r'<td class="num">[+-][0-9]+\.[0-9] MiB</td>', page)) >= 10
        assert re.search(r"peak resident memory while the pipeline ran: [0-9]+\.[0-9] MiB "
                         r"above its start, [0-9.]+x the module's constants \([0-9.]+ MiB\)",
                         page) or "peak resident memory: not measured here" in page
    opt, low = _modules(cnn_onnx)
    svgs = re.findall(r'<svg class="graph".*?</svg>', page, flags=re.S)
    assert len(svgs) == 2
    for svg, mod in zip(svgs, (opt, low)):
        assert svg.count('<g class="node') == _bindings(mod)
    assert '<g class="node library">' in svgs[1]
    # a generated kernel's node where lowering left one (the CNN may have none)
    assert ('<g class="node kernel">' in svgs[1]) == ("call_kernel(" in str(low))


def test_the_report_opens_in_headless_chromium(report: str, tmp_path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; "
                    ".ci/run installs it)")
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    shot = tmp_path / "report.png"
    run = subprocess.run([*base, "--window-size=1400,2400", f"--screenshot={shot}",
                          f"file://{report}"], capture_output=True, text=True, timeout=180)
    assert shot.is_file() and shot.stat().st_size > 20_000, run.stderr[-2000:]
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    dom = subprocess.run([*base, "--dump-dom", f"file://{report}"], capture_output=True,
                         text=True, timeout=180)
    nodes = len(re.findall(r'<g class="node', dom.stdout))
    assert nodes > 0 and f'data-ready="{nodes}"' in dom.stdout  # the page's script ran
    console = [ln for ln in (run.stderr + dom.stderr).splitlines() if ":CONSOLE" in ln]
    assert console and all(f'"plait-report ready: {nodes} graph nodes"' in ln
                           for ln in console), console
    if os.environ.get("PLAIT_REPORT_SCREENSHOT"):  # refresh docs/report_cnn.png
        shutil.copy(shot, os.environ["PLAIT_REPORT_SCREENSHOT"])


def test_report_errors_are_one_line(capsys, tmp_path) -> None:
    code = cli.main(["report", str(tmp_path / "no.onnx"), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("plait: error: no such file")


def test_a_generated_kernel_shows_its_ir_and_c() -> None:
    """The kernels section shows a generated kernel's IR and its C (an exp, which no
    native family takes, lowered by the default pipeline for c)."""
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call
    from plait.tools.report import _kernels

    x = Var("x", TensorType((4, 5), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(make_call("exp", x))
        bb.emit_func_output(y)
    pipe = plait.default_pipeline("c")
    leaves = [s.pass_ for s in pipe.flatten(None)]
    low = plait.transform.Sequential(leaves[: pipe.names().index("LegalizeOps") + 1])(
        bb.get().with_attrs(target=plait.Target("c")))
    html = _kernels(low)
    assert "<h4>kernel IR</h4>" in html and "<h4>C</h4>" in html
    assert "plait_exp_f32" in html   # the generated exp, in the kernel's C


def test_pass_diffs_show_long_attributes_as_digests_and_fit_the_page() -> None:
    from plait.tools.report import _diff, display_text

    text = "@function\ndef main(x: Tensor((2,), \"float32\")):\n    return x\n"
    blob = "int plait_f(void) { return 1; }\n" * 200
    before = plait.parse(text).with_attrs(c_sources=(blob,), small=3)
    after = before.with_attrs(c_sources=(blob + "// changed\n",))
    shown = display_text(before)
    assert "# module attribute 'small': 3" in shown and "plait_f" not in shown
    digest = re.search(r"# module attribute 'c_sources': <tuple of (\d+) chars sha1:(\w{10})>",
                       shown)
    assert digest and int(digest.group(1)) > len(blob)
    assert shown.splitlines()[2] == "@module"
    other = display_text(after)
    assert other != shown and digest.group(2) not in other  # the change still shows
    table = _diff(shown, other, "before", "after")
    assert "nowrap" not in table and table.count('class="dtext"') >= 2
    assert '<col class="dt">' in table
