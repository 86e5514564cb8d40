"""DLPack in and out of the VM: ``vm["main"](tensor)`` takes any array with
``__dlpack__`` (torch tensors here) over the same memory where its dtype and layout
allow, and its outputs go to ``torch.from_dlpack`` without a copy; on the numpy target,
and on the c target both through the single native entry point (a static and a symbolic
batch) and on the VM path (``single_entry=False``).  The reference is numpy on the same
values (exact for integers and booleans, rtol 1e-5 for float32).  torch here is the CPU
build: no CUDA."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.runtime import VirtualMachine, VMInputError

torch = pytest.importorskip("torch")

MODEL = """
@module
class M:
    @function
    def main(x: Tensor((B, 8), "float32"), w: Tensor((8, 8), "float32"),
             k: Tensor((B, 8), "int32"), m: Tensor((B, 8), "bool")) -> Tuple(
            Tensor((B, 8), "float32"), Tensor((B, 8), "int32"), Tensor((B, 8), "bool"),
            Tensor((B, 8), "float32")):
        with dataflow():
            y = relu(add(matmul(x, w), x))
            j = multiply(add(k, k), k)
            big = greater(k, const(3, "int32"))
            n = logical_and(logical_not(m), big)
            output(y, j, n)
        return (y, j, n, x)
"""

TARGETS = [("numpy", "4"), ("c", "4"), ("c", "n"), ("c-vm", "n")]
"""(target, batch): the c target runs main's single entry point (with a static or a
symbolic batch), ``c-vm`` the same kernels one call at a time on the VM path."""


@pytest.fixture(scope="module", params=TARGETS, ids=lambda t: f"{t[0]}-batch-{t[1]}")
def vm(request: pytest.FixtureRequest) -> VirtualMachine:
    target, batch = request.param
    t = plait.Target("c", single_entry=False) if target == "c-vm" else target
    exe = plait.build(plait.parse(MODEL.replace("B", batch)), t)
    machine = VirtualMachine(exe)
    if target.startswith("c"):
        assert (machine.entry_point("main") is not None) == (target == "c")
    return machine


def _inputs(seed: int, batch: int = 4) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 8, generator=g)
    w = torch.randn(8, 8, generator=g) * 0.3
    k = torch.randint(-5, 10, (batch, 8), generator=g, dtype=torch.int32)
    m = torch.rand(batch, 8, generator=g) < 0.5
    return x, w, k, m


def _reference(x, w, k, m) -> list[np.ndarray]:
    xn, wn, kn, mn = (t.detach().numpy() for t in (x, w, k, m))
    return [np.maximum(xn @ wn + xn, 0), (kn + kn) * kn, ~mn & (kn > 3), xn]


def _check(got: tuple, want: list[np.ndarray]) -> None:
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_torch_inputs_are_read_without_a_copy(vm: VirtualMachine) -> None:
    x, w, k, m = _inputs(0)
    got = vm["main"](x, w, k, m)
    _check(got, _reference(x, w, k, m))
    # main returns its input x: the array the VM read is the tensor's memory
    assert got[3].ctypes.data == x.data_ptr()
    assert got[1].dtype == np.int32 and got[2].dtype == np.bool_


def test_outputs_go_to_torch_without_a_copy(vm: VirtualMachine) -> None:
    x, w, k, m = _inputs(1)
    got = vm["main"](x, w, k, m)
    for a in got:
        t = torch.from_dlpack(a)
        assert t.data_ptr() == a.ctypes.data
        np.testing.assert_array_equal(t.numpy(), a)
    assert torch.from_dlpack(got[2]).dtype == torch.bool
    assert torch.from_dlpack(got[1]).dtype == torch.int32


def test_an_output_is_not_reused_by_a_later_call(vm: VirtualMachine) -> None:
    """Outputs are fresh arrays owned by the caller: the storage pool never gives the
    memory of a returned value to a later call (tests/runtime/test_vm.py tests the rule
    on hand-written code)."""
    first_in = _inputs(2)
    first = [torch.from_dlpack(a) for a in vm["main"](*first_in)]
    kept = [t.clone() for t in first]
    for seed in (3, 4):
        later = vm["main"](*_inputs(seed))
        assert not any(np.shares_memory(a, t.numpy()) for a in later[:3] for t in first)
    for t, c in zip(first, kept):
        assert torch.equal(t, c)


def test_mixed_torch_and_numpy_and_keyword_arguments(vm: VirtualMachine) -> None:
    x, w, k, m = _inputs(5)
    got = vm["main"](x.numpy(), w=w, k=k.numpy(), m=m)
    _check(got, _reference(x, w, k, m))


def test_non_contiguous_and_requires_grad_tensors(vm: VirtualMachine) -> None:
    x, w, k, m = _inputs(6)
    xt = x.T.contiguous().T            # the same values, column-major
    assert not xt.is_contiguous()
    wg = w.clone().requires_grad_(True)
    got = vm["main"](xt, wg, k, m)
    _check(got, _reference(x, w, k, m))
    assert got[3].flags.c_contiguous and got[3].ctypes.data != xt.data_ptr()  # copied


def test_symbolic_batch_at_two_sizes() -> None:
    exe = plait.build(plait.parse(MODEL.replace("B", "n")), "numpy")
    vm = VirtualMachine(exe)
    for batch in (1, 7):
        ins = _inputs(7, batch)
        _check(vm["main"](*ins), _reference(*ins))


class _OnDevice:
    """An array that says it lives in CUDA memory (as a CUDA tensor would)."""

    def __dlpack__(self, **kwargs: object) -> object:
        raise AssertionError("must not be read")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


def test_errors_name_the_parameter_and_the_fix(vm: VirtualMachine) -> None:
    x, w, k, m = _inputs(8)
    with pytest.raises(VMInputError, match=r"parameter 'x': the _OnDevice is in CUDA memory "
                                           r"\(device 0\); .*\(tensor.cpu\(\)\)"):
        vm["main"](_OnDevice(), w, k, m)
    with pytest.raises(VMInputError, match=r"parameter 'w': cannot read the Tensor through "
                                           r"DLPack .*tensor.float\(\).numpy\(\)"):
        vm["main"](x, w.to(torch.bfloat16), k, m)
    with pytest.raises(VMInputError, match="parameter 'k': expected dtype int32, got int64"):
        vm["main"](x, w, k.long(), m)


def test_tuple_parameters_convert_their_leaves() -> None:
    from plait.runtime.executable import ParamSig, VMFunction
    from plait.runtime.vm import _Binder

    binder = _Binder(VMFunction("f", [ParamSig("t", "tuple", None, None)], 1, []))
    a, b = torch.arange(3), torch.ones(2)
    regs, _ = binder.bind([(a, [b, (a,)], 5)])
    (got,) = regs
    assert isinstance(got, tuple) and isinstance(got[1], list) and isinstance(got[1][1], tuple)
    assert got[0].ctypes.data == a.data_ptr() and got[1][0].ctypes.data == b.data_ptr()
    assert got[1][1][0].ctypes.data == a.data_ptr() and got[2] == 5
