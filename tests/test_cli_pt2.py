"""``plait run``/``plait compile`` on programs saved with ``torch.export.save`` (.pt2),
and ``--compare torch`` (the exported program's module run by eager PyTorch; the
tolerance is the command's, rtol 1e-4 and atol 1e-5).  ``torch.export.load`` unpickles
parts of a .pt2, so the commands load one only with ``--allow-native``."""

from __future__ import annotations

import os

import numpy as np
import pytest

from plait import cli

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_ONNX = os.path.join(ROOT, "examples", "models", "tiny_mlp.onnx")


class TwoHeads(torch.nn.Module):
    """Float and integer inputs sharing a dynamic batch; a dict of two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": torch.relu(self.linear(x)), "n": (ids * 2).sum(1)}


@pytest.fixture(scope="module")
def pt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=2, max=32)
    example = (torch.randn(3, 8), torch.randint(0, 5, (3, 6)))
    ep = torch.export.export(TwoHeads().eval(), example,
                             dynamic_shapes=({0: batch}, {0: batch}))
    path = str(tmp_path_factory.mktemp("pt2") / "two_heads.pt2")
    torch.export.save(ep, path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_run_pt2_and_compare_with_torch(capsys: pytest.CaptureFixture[str], pt2: str,
                                        target: str) -> None:
    code, out, err = _run(capsys, "run", pt2, "--allow-native", "--target", target,
                          "--compare", "torch")
    assert code == 0, err
    assert err == ""                                  # torch's warnings are not shown
    assert f"target {target}, 2 inputs, 2 outputs" in out
    # the batch of random inputs is the example's (3), both inputs share it
    assert "input  x: float32 (3, 8)" in out and "input  ids: int64 (3, 6)" in out
    assert "output y: float32 (3, 4)" in out and "output n: int64 (3,)" in out
    assert "compare with torch:" in out
    assert "  y: PASS  max abs error" in out and "  n: PASS  max abs error 0" in out
    assert out.rstrip().endswith("PASS")


def test_shape_sets_a_shared_dynamic_size(capsys: pytest.CaptureFixture[str],
                                          pt2: str) -> None:
    code, out, err = _run(capsys, "run", pt2, "--allow-native", "--shape", "x=5,8",
                          "--compare", "torch")
    assert code == 0, err
    assert "input  ids: int64 (5, 6)" in out and out.rstrip().endswith("PASS")


def test_given_inputs_are_used(capsys: pytest.CaptureFixture[str], pt2: str,
                               tmp_path) -> None:
    ids = np.arange(24, dtype=np.int64).reshape(4, 6)
    np.save(tmp_path / "ids.npy", ids)
    code, out, err = _run(capsys, "run", pt2, "--allow-native", "--input",
                          f"ids={tmp_path / 'ids.npy'}", "--compare", "torch")
    assert code == 0, err
    sums = (ids * 2).sum(1)
    assert f"min {sums.min()}  max {sums.max()}" in out and "input  x: float32 (4, 8)" in out


def test_a_size_outside_the_exported_range_is_one_line(capsys: pytest.CaptureFixture[str],
                                                       pt2: str) -> None:
    code, _, err = _run(capsys, "run", pt2, "--allow-native", "--shape", "x=40,8")
    assert code == 2 and err.count("\n") == 1
    assert "outside the range [2, 32]" in err


def test_compare_failure_exits_1(capsys: pytest.CaptureFixture[str], pt2: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = cli._run_torch
    monkeypatch.setattr(cli, "_run_torch",
                        lambda path, ep, inputs: [r + 1 for r in real(path, ep, inputs)])
    code, out, _ = _run(capsys, "run", pt2, "--allow-native", "--compare", "torch")
    assert code == 1
    assert "  y: FAIL  max abs error 1" in out and out.rstrip().endswith("FAIL")


def test_compile_pt2_keeps_the_dynamic_batch(capsys: pytest.CaptureFixture[str], pt2: str,
                                             tmp_path) -> None:
    exe = str(tmp_path / "two_heads.plx")
    code, out, err = _run(capsys, "compile", pt2, "--allow-native", "-o", exe)
    assert code == 0 and f"into {exe}" in out, err
    code, out, err = _run(capsys, "run", exe, "--shape", "x=7,8")
    assert code == 0, err
    assert "input  ids: int64 (7, 6)" in out and "output n: int64 (7,)" in out  # its key
    code, out, err = _run(capsys, "run", exe)   # the smallest batch of the range
    assert code == 0 and "input  x: float32 (2, 8)" in out, err


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], pt2: str,
                             tmp_path) -> None:
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip file")
    code, _, err = _run(capsys, "run", str(bad), "--allow-native")
    assert code == 2 and err.count("\n") == 1
    assert "not a readable torch.export file (save one with torch.export.save)" in err
    code, _, err = _run(capsys, "run", TINY_ONNX, "--compare", "torch")
    assert code == 2 and "--compare torch needs an exported program (.pt2" in err
    code, _, err = _run(capsys, "run", pt2, "--allow-native", "--compare", "onnxruntime")
    assert code == 2 and "--compare onnxruntime needs an ONNX model" in err


def test_unsupported_ops_are_listed_in_one_line(capsys: pytest.CaptureFixture[str],
                                                tmp_path) -> None:
    class Fft(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x).abs()

    path = str(tmp_path / "fft.pt2")
    torch.export.save(torch.export.export(Fft(), (torch.randn(2, 8),)), path)
    code, _, err = _run(capsys, "run", path, "--allow-native")
    assert code == 2 and err.count("\n") == 1
    assert "fft" in err and path in err


def test_a_pt2_is_loaded_only_with_consent(capsys: pytest.CaptureFixture[str], pt2: str,
                                           tmp_path) -> None:
    """A .pt2 whose weight is marked as pickled runs code when torch.export.load reads
    it (PyTorch: never load one from an untrusted source): without --allow-native the
    commands refuse every .pt2 before torch sees it."""
    import io
    import json
    import zipfile

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple:
            return (exec, (f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')",))

    buf = io.BytesIO()
    torch.save(Payload(), buf)
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(pt2) as src:
        parts = {name: src.read(name) for name in src.namelist()}
    config_name = next(n for n in parts if n.endswith("weights/model_weights_config.json"))
    config = json.loads(parts[config_name])
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True  # torch.load(..., weights_only=False) reads it
    parts[config_name] = json.dumps(config).encode()
    parts[config_name.replace("model_weights_config.json", first["path_name"])] = buf.getvalue()
    with zipfile.ZipFile(evil, "w") as out:
        for name, data in parts.items():
            out.writestr(name, data)
    for argv in (("run", str(evil)), ("compile", str(evil), "-o", str(tmp_path / "x.plx")),
                 ("run", pt2)):
        code, _, err = _run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1, err
        assert (f"{argv[1]} holds a PyTorch exported program, which torch.export.load "
                "unpickles" in err)
        assert "If you made the file or trust where it came from: --allow-native." in err
        assert "internal error" not in err
    assert not marker.exists()
    # the attack is real: with consent, loading the file ran its code
    _run(capsys, "run", str(evil), "--allow-native")
    assert marker.read_text() == "ran"


def test_profile_names_the_pytorch_nodes_and_source_lines(
        capsys: pytest.CaptureFixture[str], pt2: str) -> None:
    """Each profiled call says what it computes: the exported program's nodes and the
    line of forward() they come from (a fused kernel names all its nodes)."""
    import inspect

    src, first = inspect.getsourcelines(TwoHeads.forward)
    line = first + next(i for i, s in enumerate(src) if "torch.relu" in s)
    code, out, err = _run(capsys, "run", pt2, "--allow-native", "--profile", "--target",
                          "numpy")
    assert code == 0, err
    assert "call numpy.relu(" in out
    assert f"[relu (aten.relu.default) at test_cli_pt2.py:{line}]" in out
    code, out, err = _run(capsys, "run", pt2, "--allow-native", "--profile", "--target", "c")
    assert code == 0, err
    assert (f"[addmm (aten.addmm.default), relu (aten.relu.default) at "
            f"test_cli_pt2.py:{line}]") in out
