"""NumericCheck runs the module after every pass that changes it (the numpy reference
path) and names the first pass that changes the results; its reproducer replays."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import plait
from plait.transform import (
    NumericCheck,
    NumericMismatchError,
    PassContext,
    replay,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
from flip_add_plugin import flip_add  # noqa: E402

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def cnn(cnn_onnx: str) -> plait.IRModule:
    from plait.frontend import from_onnx

    return from_onnx(cnn_onnx, shapes={"input": (1, 3, 32, 32)})


def test_names_the_planted_wrong_rewrite_and_its_reproducer_replays(cnn, tmp_path) -> None:
    pipe = plait.default_pipeline("c").insert_after("DeadCodeElimination", flip_add)
    check = NumericCheck(reproducer_dir=str(tmp_path))
    with pytest.raises(NumericMismatchError) as info, PassContext(instruments=[check]):
        pipe(cnn.with_attrs(target=plait.Target("c")))
    err = info.value
    assert err.pass_name == "test.FlipAdd" and err.phase == "optimization"
    assert err.output == 0 and err.max_abs > 1e-3
    assert "pass 'test.FlipAdd' (phase optimization -> optimization) changed the results of " \
           "function 'main': output 0: max abs error" in str(err)
    # every pass before it ran and matched the reference
    assert [r.pass_name for r in check.records][-1] == "test.FlipAdd"
    assert all(r.ok for r in check.records[:-1])
    assert err.reproducer and os.path.isfile(os.path.join(err.reproducer, "numeric.npz"))
    with pytest.raises(NumericMismatchError, match="pass 'test.FlipAdd'") as again:
        replay(err.reproducer)
    assert again.value.max_abs == pytest.approx(err.max_abs)


def test_a_clean_c_build_matches_onnxruntime_at_every_phase(cnn, cnn_onnx) -> None:
    """The reference outputs (the interpreter on the imported module) agree with
    onnxruntime, and every changed module of the c pipeline stays within rtol 1e-4,
    atol 1e-5 of them (the check records each pass)."""
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    check = NumericCheck([x], stop=False)
    with PassContext(instruments=[check]):
        plait.build(cnn, "c")
    want = ort.InferenceSession(cnn_onnx, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    np.testing.assert_allclose(check.reference[0], want, rtol=1e-4, atol=1e-5)
    names = [r.pass_name for r in check.records]
    assert names[-1] == "c.CompileKernels" and "PlanMemory" in names
    assert all(r.ok for r in check.records), [r for r in check.records if not r.ok]
    changed = {r.pass_name for r in check.records if r.changed}  # those that ran the module
    assert {"c.DispatchGemm", "LegalizeOps", "ExplicitMemory", "PlanMemory"} <= changed


def test_a_module_that_cannot_run_is_blamed_on_the_pass_that_made_it() -> None:
    from plait.transform import function_pass

    @function_pass(name="test.DropKernel", register=False)
    def drop(func, mod):  # type: ignore[no-untyped-def]
        return func

    mod = plait.parse('''
@module(attrs={"phase": "lowering"})
class M:
    @function
    def main(x: Tensor((3,), "float32")) -> Tensor((3,), "float32"):
        with dataflow():
            y = call_extern(extern("numpy.relu"), (x,), out=Tensor((3,), "float32"))
            output(y)
        return y
''')
    broken = mod.with_function("main", plait.parse(mod.script().replace(
        "numpy.relu", "numpy.no_such_op"))["main"])

    @function_pass(name="test.Break", phases="lowering", register=False)
    def brk(func, mod):  # type: ignore[no-untyped-def]
        return broken["main"]

    with pytest.raises(NumericMismatchError, match=r"after pass 'test.Break' .* cannot be run "
                                                   r".*no extern function 'numpy.no_such_op'"):
        with PassContext(instruments=[NumericCheck()]):
            brk(mod)
