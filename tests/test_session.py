"""plait.load and Session: one line from a model file to something to call, with the
model's input and output names (kept in a saved .plx), dict feeds and named outputs,
checked against onnxruntime and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.runtime.trust import UntrustedCodeError
from plait.session import SessionError, default_target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)
W = RNG.standard_normal((4, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``logits = (x.1 * mask) @ W`` and ``scaled = x.1 * mask``, batch open."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x.1", "mask"], ["scaled"]),
         helper.make_node("MatMul", ["scaled", "W"], ["logits"])],
        "g",
        [helper.make_tensor_value_info("x.1", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(W, "W")],
    )
    path = tmp_path_factory.mktemp("session") / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    str(path))
    return str(path)


def _feeds(batch: int) -> dict[str, np.ndarray]:
    return {"x.1": RNG.standard_normal((batch, 4)).astype(np.float32),
            "mask": RNG.integers(0, 2, (batch, 4)).astype(np.float32)}


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_an_onnx_model_runs_with_its_names(two_outputs: str, target: str, tmp_path) -> None:
    sess = plait.load(two_outputs, target=target)
    assert sess.input_names == ["x.1", "mask"] and sess.output_names == ["logits", "scaled"]
    assert sess.inputs[0].shape == ("batch", 4) and sess.inputs[0].dtype == "float32"
    assert sess.outputs[0].shape == ("batch", 3)
    ref = ort.InferenceSession(two_outputs, providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        feeds = _feeds(batch)
        got = sess.run(feeds)
        want = dict(zip(["logits", "scaled"], ref.run(None, feeds)))
        assert list(got) == ["logits", "scaled"]
        for k in want:  # float32 dot products of 4 terms
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
        only = sess.run(feeds, ["scaled"])
        assert list(only) == ["scaled"]
        np.testing.assert_allclose(sess(feeds["x.1"], feeds["mask"])[0], want["logits"],
                                   rtol=1e-5, atol=1e-6)
    # saved and loaded: the same names and results
    sess.save(tmp_path / "m.plx")
    again = plait.load(tmp_path / "m.plx")
    assert again.inputs == sess.inputs and again.outputs == sess.outputs
    feeds = _feeds(2)
    np.testing.assert_array_equal(again.run(feeds)["logits"], sess.run(feeds)["logits"])


def test_feeds_that_do_not_match_are_named(two_outputs: str) -> None:
    sess = plait.load(two_outputs, target="numpy")
    feeds = _feeds(1)
    with pytest.raises(SessionError, match=r"missing input\(s\) 'mask'.*inputs are 'x.1', "
                                           r"'mask'"):
        sess.run({"x.1": feeds["x.1"]})
    with pytest.raises(SessionError, match=r"unknown input\(s\) 'x'"):
        sess.run({**feeds, "x": feeds["x.1"]})
    with pytest.raises(SessionError, match=r"unknown output\(s\) 'probs'.*'logits', 'scaled'"):
        sess.run(feeds, ["probs"])
    with pytest.raises(SessionError, match="takes a dict"):
        sess.run([feeds["x.1"], feeds["mask"]])  # type: ignore[arg-type]


def test_the_default_target_is_native_where_a_compiler_is(two_outputs: str,
                                                          monkeypatch) -> None:
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    assert default_target() == "c"
    assert plait.load(two_outputs).executable.libs  # native code
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert default_target() == "numpy"


def test_modules_and_text_files_load_with_their_parameter_names(tmp_path) -> None:
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call

    bb = BlockBuilder()
    params = [Var(n, TensorType((2, 3), "float32")) for n in ("a", "b")]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(make_call("add", *params))
        bb.emit_func_output(out)
    mod = bb.get()
    path = tmp_path / "m.plait.py"
    path.write_text(mod.script())
    a, b = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    for model in (mod, str(path)):
        sess = plait.load(model, target="numpy")
        assert sess.input_names == ["a", "b"] and sess.output_names == ["output0"]
        np.testing.assert_array_equal(sess.run({"a": a, "b": b})["output0"], a + b)


def test_what_cannot_be_loaded_says_what_can(tmp_path) -> None:
    with pytest.raises(SessionError, match="no such file"):
        plait.load(tmp_path / "missing.onnx")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(SessionError, match="unknown file kind"):
        plait.load(tmp_path / "m.txt")
    with pytest.raises(SessionError, match="takes a path"):
        plait.load(42)


def test_an_exported_program_needs_consent_and_keeps_its_output_names(tmp_path) -> None:
    torch = pytest.importorskip("torch")

    class Two(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return {"doubled": x * 2, "summed": x.sum(dim=1)}

    x = torch.randn(3, 5)
    path = tmp_path / "two.pt2"
    torch.export.save(torch.export.export(Two(), (x,)), str(path))
    with pytest.raises(UntrustedCodeError, match="allow_native=True"):
        plait.load(path, target="numpy")
    sess = plait.load(path, target="numpy", allow_native=True)
    assert sess.output_names == ["doubled", "summed"]
    got = sess.run({sess.input_names[0]: x.numpy()})
    np.testing.assert_allclose(got["doubled"], (x * 2).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["summed"], x.sum(dim=1).numpy(), rtol=1e-5, atol=1e-6)
