"""Every core op, built through the default pipeline for the numpy target and run on
the VM, agrees with its numpy reference implementation (whose correctness the other
op tests establish against PyTorch / ONNX's reference evaluator / direct formulas).

Each op runs on its sample with static shapes, and again with a symbolic leading
dimension ``n`` (on every input that shares the first input's leading size and rank),
which exercises symbolic type inference, allocation with symbolic shapes and the
run-time-shape path (``call_alloc``) where a shape is not expressible."""

from __future__ import annotations

import numpy as np
import pytest
from test_op_consistency import SAMPLES  # same directory (pytest's rootdir import mode)

import plait
from plait.ir import BlockBuilder, TensorType, Tuple, Var
from plait.op import make_call
from plait.runtime import VirtualMachine, numpy_ops


def _build_and_run(name: str, inputs: list, attrs: dict, symbolic: bool):
    params: list[Var] = []
    args = []
    lead = None
    if inputs and not isinstance(inputs[0], tuple) and inputs[0].ndim >= 1:
        lead = (inputs[0].shape[0], inputs[0].ndim)
    flat: list[np.ndarray] = []

    def param(a: np.ndarray, pname: str) -> Var:
        shape = list(a.shape)
        if symbolic and lead is not None and a.ndim == lead[1] and a.shape[0] == lead[0]:
            shape[0] = "n"
        v = Var(pname, TensorType(tuple(shape), a.dtype.name))
        params.append(v)
        flat.append(a)
        return v

    for i, a in enumerate(inputs):
        if isinstance(a, tuple):
            args.append(Tuple(tuple(param(t, f"t{i}_{j}") for j, t in enumerate(a))))
        else:
            args.append(param(a, f"a{i}"))
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(make_call(name, *args, **attrs), "out")
        bb.emit_func_output(out)
    exe = plait.build(bb.get(), "numpy")
    return VirtualMachine(exe)["main"](*flat)


def _compare(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _compare(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_op_built_for_numpy_matches_reference(name: str, symbolic: bool) -> None:
    inputs, attrs = SAMPLES[name]
    want = numpy_ops.IMPLS[name](*inputs, **attrs)
    got = _build_and_run(name, inputs, attrs, symbolic)
    _compare(got, want)
