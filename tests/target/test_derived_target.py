"""The derived-target example (examples/derived_target.py): ``mycpu`` derives from
``c``; its dispatch pass replaces ``concat`` by a kernel written in the text format and
``gelu`` by a function of user-written C compiled into the executable's library; the
rest is lowered the ``c`` way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import plait
from plait.kernel import Kernel
from plait.runtime import Executable, VirtualMachine
from plait.runtime.native import library_functions
from plait.target.c import c_sources, extern_calls
from plait.transform import PassContext, Sequential, WellFormedCheck

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "derived_target.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    """The example module (importing it registers the mycpu target kind)."""
    spec = importlib.util.spec_from_file_location("plait_example_derived_target", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_mycpu_pipeline_lists_its_dispatch_pass_before_the_c_one(example: ModuleType) -> None:
    stages = {s.name: [p.name for p in s.passes] for s in plait.default_pipeline("mycpu").passes}
    # the dialects' dispatch passes first (qnn's int8 kernels, for kinds derived from c)
    assert stages["dispatch"] == ["qnn.DispatchInt8", "qnn.DispatchWeightQuant", "mycpu.Dispatch",
                                  "RecognizeActivations",
                                  "c.FoldPadIntoConv", "c.DispatchDecode",
                                  "c.DispatchAttention", "c.Conv1dAsConv2d",
                                  "c.SplitConcatConv", "c.DispatchSqueezeExcite",
                                  "c.DispatchGemm",
                                  "c.DispatchDepthwise", "c.DispatchPool", "c.DispatchLibrary"]
    assert stages["build"][0] == "RunCodegen"
    assert stages["build"][-2:] == ["c.SingleEntry", "c.CompileKernels"]
    assert plait.Target("mycpu").is_a("c")


def test_mycpu_lowers_concat_to_the_text_kernel_and_gelu_to_user_c(example: ModuleType) -> None:
    t = plait.Target("mycpu")
    stages = [s for s in plait.default_pipeline(t).passes if s.name != "build"]
    lowered = Sequential(stages)(plait.parse(example.MODEL).with_attrs(target=t))
    kernels = {n for n, f in lowered.items() if isinstance(f, Kernel)}
    assert kernels == {"concat_cols"}  # matmul went to plait_gemm, gelu to the C function
    product, gelu = extern_calls(lowered)
    assert product.startswith("plait_gemm_") and gelu == "mycpu_gelu"
    assert [s.name for s in c_sources(lowered)][:2] == ["mycpu_gelu.c", "plait_gemm.c"]
    assert "select(j < k, a[i, j], b[i, j - k])" in lowered.script()


def test_mycpu_model_matches_numpy_and_runs_after_save_load(example: ModuleType,
                                                            tmp_path: Path) -> None:
    with PassContext(instruments=[WellFormedCheck()]):
        exe = plait.build(plait.parse(example.MODEL), "mycpu")
    assert {"concat_cols", "mycpu_gelu"} <= set(library_functions(exe.libs["c"]))
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((24, 24)) * 0.2).astype(np.float32)
    for n in (1, 4):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        y = rng.standard_normal((n, 8)).astype(np.float32)
        got = VirtualMachine(exe)["main"](x, y, w)
        np.testing.assert_allclose(got, example.reference(x, y, w), rtol=1e-5, atol=1e-6)
    exe.save(tmp_path / "m.plx")
    again = VirtualMachine(Executable.load(tmp_path / "m.plx"))["main"](x, y, w)
    np.testing.assert_array_equal(again, got)


def test_calls_the_mycpu_pass_declines_are_lowered_the_c_way(example: ModuleType) -> None:
    text = """
@module
class Model:
    @function
    def main(x: Tensor((2, 3), "float32"),
             y: Tensor((1, 3), "float32")) -> Tensor((3, 3), "float32"):
        with dataflow():
            z = concat((x, y), axis=0)
            out = gelu(z)
            output(out)
        return out
"""
    exe = plait.build(plait.parse(text), "mycpu")
    funcs = [i.func for i in exe.functions["main"].instructions
             if hasattr(i, "func") and not i.func.startswith("vm.builtin.")]
    # generated kernels of the c target (fused into one), not the mycpu ones
    assert funcs and set(funcs) <= set(library_functions(exe.libs["c"]))
    assert not {"concat_cols", "mycpu_gelu"} & set(funcs)
    x, y = np.ones((2, 3), np.float32), -np.ones((1, 3), np.float32)
    got = VirtualMachine(exe)["main"](x, y)
    from plait.runtime.numpy_ops import gelu

    np.testing.assert_allclose(got, gelu(np.concatenate([x, y])), rtol=1e-6)


def test_example_runs_as_a_script(example: ModuleType, capsys: pytest.CaptureFixture) -> None:
    example.main()
    out = capsys.readouterr().out
    assert "mycpu.Dispatch" in out and "call concat_cols(" in out and "call mycpu_gelu(" in out
    err = float(out.rsplit("=", 1)[1])
    assert err < 1e-5


@pytest.mark.parametrize("attr", ["gemm", "attention", "depthwise", "fuse", "blas"])
def test_a_switch_takes_only_true_or_false(attr: str) -> None:
    """A c target switch given anything but a bool is refused by name (a truthy string
    such as 'no' would otherwise turn the switch on)."""
    with pytest.raises(ValueError, match=f"attribute '{attr}' is a switch"):
        plait.Target("c", **{attr: "no"})
    assert plait.Target("c", **{attr: False}).attrs[attr] is False
