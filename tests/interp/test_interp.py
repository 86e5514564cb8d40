"""The reference interpreter (plait.interp): build-phase memory is real memory (an
overlapping plan changes the result, as it would in the VM), and what it cannot run is
an error naming the function, the binding and the fix."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import plait
from plait.interp import InterpreterError, compare_outputs, random_inputs, run
from plait.runtime import VirtualMachine

PLANNED = """
@module(attrs={"phase": "build"})
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        storage = builtin.alloc_storage(nbytes=64)
        a = builtin.tensor_from_storage(storage, offset=0, shape=(4,), dtype="float32")
        _ = builtin.call_dps(extern("numpy.exp"), (x,), (a,))
        b = builtin.tensor_from_storage(storage, offset=OFFSET, shape=(4,), dtype="float32")
        _1 = builtin.call_dps(extern("numpy.neg"), (x,), (b,))
        c = builtin.alloc_tensor(shape=(4,), dtype="float32")
        _2 = builtin.call_dps(extern("numpy.add"), (a, b), (c,))
        return c
"""


def test_tensors_placed_in_storage_share_its_bytes() -> None:
    x = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    good = plait.parse(textwrap.dedent(PLANNED).replace("OFFSET", "16"))
    bad = plait.parse(textwrap.dedent(PLANNED).replace("OFFSET", "0"))  # b overwrites a
    np.testing.assert_allclose(run(good, x), np.exp(x) - x, rtol=1e-6)
    np.testing.assert_allclose(run(bad, x), -2 * x, rtol=1e-6)
    from plait.codegen.vm_codegen import vm_codegen

    np.testing.assert_allclose(VirtualMachine(vm_codegen(bad))["main"](x), run(bad, x))


def test_compare_outputs_reports_the_worst_element() -> None:
    want = np.array([[1.0, 2.0], [3.0, np.nan]], np.float32)
    got = want.copy()
    got[1, 0] = 3.5
    (d,) = compare_outputs(got, want, rtol=1e-4, atol=1e-5)
    assert not d.ok and d.where == (1, 0) and d.max_abs == pytest.approx(0.5)
    assert str(d) == "output 0: max abs error 0.5 at index (1, 0) (got 3.5, expected 3)"
    assert compare_outputs(want, want, 0, 0)[0].ok  # NaN equals NaN
    (s,) = compare_outputs(got[:1], want, 1e-4, 1e-5)
    assert not s.ok and str(s) == "output 0: shape (1, 2) instead of (2, 2)"


def test_an_unknown_extern_is_named_with_its_binding() -> None:
    mod = plait.parse(textwrap.dedent("""
        @module(attrs={"phase": "lowering"})
        class M:
            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                y = call_extern(extern("numpy.exq"), (x,), out=Tensor((2,), "float32"))
                return y
    """))
    with pytest.raises(InterpreterError, match=r"^function 'main', binding 'y': no extern "
                                               r"function 'numpy.exq': .* did you mean "
                                               r"'numpy.exp'"):
        run(mod, np.zeros(2, np.float32))


def test_inputs_that_do_not_fit_the_parameters_are_refused() -> None:
    mod = plait.parse(textwrap.dedent("""
        @module
        class M:
            @function
            def main(x: Tensor(("n", 3), "float32"), y: Tensor(("n", 3), "float32")):
                z = add(x, y)
                return z
    """))
    with pytest.raises(InterpreterError, match=r"parameter 'y' has type .* with n=2 bound "
                                               r"already, the value has shape \(4, 3\)"):
        run(mod, np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(InterpreterError, match=r"takes 2 argument\(s\) \(x, y\), got 1"):
        run(mod, np.zeros((2, 3), np.float32))
    xs = random_inputs(mod["main"], seed=1, sizes={"n": 5})
    assert [a.shape for a in xs] == [(5, 3), (5, 3)]
    np.testing.assert_array_equal(run(mod, *xs), xs[0] + xs[1])
