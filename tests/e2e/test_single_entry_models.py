"""The project's models (examples/export_models.py: the MLP, the ResNet-style CNN, the
transformer encoder layer; small inputs) built for ``c`` with static shapes run as one
native call: the result equals the VM path's bitwise (the same kernels, in the same
order) and matches onnxruntime (rtol 1e-4, atol 1e-5), with the kernel families capped
at each instruction set this CPU runs (``use_isa``; the families the models call run
that copy, as their libraries report).  ISAs the CPU lacks are skipped with the
reason."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import plait  # noqa: E402
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas, chosen_copy, host_arch  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402
from plait.target.c import cpu_features, library_isas, use_isa  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {"mlp": (2, 784), "cnn": (1, 3, 32, 32), "transformer": (1, 16, 256)}
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from export_models import export

    out = str(tmp_path_factory.mktemp("entry_models"))
    return {name: export(name, out, dynamic_batch=False, shape=shape)
            for name, shape in SHAPES.items()}


@pytest.fixture(scope="module")
def executables(models: dict[str, str]) -> dict[str, Any]:
    """Each model built for c once."""
    return {name: plait.build(from_onnx(path), "c") for name, path in models.items()}


@pytest.mark.parametrize("isa", arch_isas(host_arch(), FLOAT_ISAS))
@pytest.mark.parametrize("name", list(SHAPES))
def test_single_entry_equals_the_vm_path_and_onnxruntime(
        models: dict[str, str], executables: dict[str, Any], name: str, isa: str) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    exe = executables[name]
    vm = VirtualMachine(exe)
    assert vm.entry_point("main") == "main__entry", vm.execution_path("main")
    x = np.random.default_rng(1).standard_normal(SHAPES[name]).astype(np.float32)
    with use_isa(isa):
        got = vm["main"](x)
        vm_path = VirtualMachine(exe, single_entry=False)["main"](x)
        families = library_isas(exe)
    assert families and all(f["chosen"] == chosen_copy(f["built"], isa)
                            for f in families.values()), families
    assert got.dtype == vm_path.dtype and got.shape == vm_path.shape
    assert got.tobytes() == vm_path.tobytes()
    sess = ort.InferenceSession(models[name], providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"input": x})[0], rtol=RTOL, atol=ATOL)
