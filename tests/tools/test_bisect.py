"""plait bisect: finds the planted wrong rewrite (the third add of test.FlipAdd) in the
ResNet-style CNN's c pipeline, and a rewrite that crashes the process (a segfault in a
child) in the same way."""

from __future__ import annotations

import os
import sys

import pytest

import plait
from plait import cli

HERE = os.path.dirname(__file__)
PLUGIN = os.path.join(HERE, "flip_add_plugin.py")
sys.path.insert(0, HERE)

pytest.importorskip("onnxruntime")


def _pipeline_with(pass_name: str) -> str:
    text = plait.default_pipeline("c").to_text()
    assert "DeadCodeElimination]" in text
    return text.replace("DeadCodeElimination]", f"DeadCodeElimination,{pass_name}]")


def test_bisect_names_the_pass_and_the_third_site(capsys, cnn_onnx: str) -> None:
    code = cli.main(["bisect", cnn_onnx, "--target", "c", "--plugin", PLUGIN,
                     "--passes", _pipeline_with("test.FlipAdd")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "reference onnxruntime" in out
    assert "every optional pass off: ok" in out
    # its number counts the passes before it (the registered dialects' included)
    number = plait.default_pipeline("c").names().index("DeadCodeElimination") + 2
    # and its position in the optimization stage (the second), right after DCE
    place = plait.default_pipeline("c")[1].names().index("DeadCodeElimination") + 2
    assert f"first bad pass: #{number} test.FlipAdd (pipeline position 2.{place}, phase " \
           "optimization): WRONG output 0: max abs error" in out
    assert "first bad rewrite: site #3 of 15 of test.FlipAdd: add at binding" in out
    assert "{'test.FlipAdd@1': 3}}) is bad, {'test.FlipAdd@1': 2} is good" in out


def test_bisect_survives_a_native_crash_and_finds_it(cnn_onnx: str) -> None:
    from flip_add_plugin import segv_relu

    from plait.frontend import from_onnx
    from plait.interp import random_inputs
    from plait.tools.bisect import bisect_pipeline, make_runner, reference_outputs

    mod = from_onnx(cnn_onnx, shapes={"input": (1, 3, 32, 32)})
    pipe = plait.default_pipeline("c").insert_after("DeadCodeElimination", segv_relu)
    x = random_inputs(mod["main"], 0)
    ref = reference_outputs("numpy", mod, x, None, {})
    result = bisect_pipeline(pipe, mod.phase, make_runner(mod, plait.Target("c"), x, ref,
                                                          1e-4, 1e-5, timeout=300))
    assert result.verdict == "found" and result.pass_name == "test.SegvRelu"
    assert result.outcome is not None and result.outcome.error is not None
    assert "died from signal 11" in result.outcome.error
    assert result.site == 2 and result.site_description.startswith("relu at binding")


@pytest.mark.parametrize("argv, message", [
    (["--passes", "Normalize,,LambdaLift"], "--passes: pipeline text, column 11"),
    (["--target", "gpu"], "--target gpu:"),
    (["--reference", "onnxruntime"], "--reference onnxruntime needs an ONNX model"),
])
def test_bisect_errors_are_one_line(capsys, tmp_path, argv: list[str], message: str) -> None:
    model = tmp_path / "m.plait.py"
    model.write_text('@module\nclass M:\n    @function\n    def main(x: Tensor((2,), '
                     '"float32")) -> Tensor((2,), "float32"):\n        y = relu(x)\n'
                     "        return y\n")
    code = cli.main(["bisect", str(model), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
