"""qnn.Legalize: every qnn op as core ops, bit-exact with the reference on the numpy
target and on the c target's generated kernels."""

from __future__ import annotations

import numpy as np
import pytest
from qnn_helpers import assert_same, op_cases, run_cases

import plait
from plait.ir import assert_structural_equal
from plait.transform import PassError, Sequential, make_pass


def _opt(text: str) -> plait.IRModule:
    return Sequential([make_pass("Normalize"), make_pass("LambdaLift")])(plait.parse(text))


def test_dequantize_becomes_integer_subtract_and_one_float32_multiply() -> None:
    before = """
@module
class M:
    @function
    def main(x: Tensor((2, 3), "uint8")) -> Tensor((2, 3), "float32"):
        with dataflow():
            y = qnn.dequantize(x, const(0.5, "float32"), const(3, "uint8"))
            output(y)
        return y
"""
    after = """
@module(attrs={"phase": "optimization"})
class M:
    @function
    def main(x: Tensor((2, 3), "uint8")) -> Tensor((2, 3), "float32"):
        with dataflow():
            a = cast(x, dtype="int32")
            b = subtract(a, const(3, "int32"))
            c = cast(b, dtype="float32")
            d = cast(c, dtype="float64")
            e = multiply(d, const(0.5, "float64"))
            y = cast(e, dtype="float32")
            output(y)
        return y
"""
    got = make_pass("qnn.Legalize")(_opt(before))
    assert_structural_equal(got, plait.parse(after))


@pytest.mark.parametrize("target", ["numpy", "c"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_every_op_lowers_bit_exactly(target: str, dtype: str) -> None:
    """Every qnn op (odd shapes, per-channel parameters, NaN and infinities into
    quantize) built through the default pipeline — qnn.Legalize, then the target's own
    lowering — equals the reference bit for bit."""
    cases = op_cases(dtype, seed=3)
    for c, got in zip(cases, run_cases(cases, target)):
        assert_same(got, c.expected(), f"{c.name} on {target}")


def test_a_table_op_with_computed_scales_is_refused_with_the_reason() -> None:
    text = """
@module
class M:
    @function
    def main(x: Tensor((4,), "uint8"), s: Tensor((), "float32")) -> Tensor((4,), "uint8"):
        with dataflow():
            y = qnn.sigmoid(x, s, const(0, "uint8"), const(0.01, "float32"), const(0, "uint8"))
            output(y)
        return y
"""
    with pytest.raises(PassError, match=r"qnn.sigmoid: a scale or zero point \(argument 1\) "
                                        "must be a constant"):
        plait.build(plait.parse(text), "numpy")


def test_computed_scales_lower_for_quantize() -> None:
    """Scales and zero points computed at run time (dynamic quantization) are ops too."""
    text = """
@module
class M:
    @function
    def main(x: Tensor((3, 5), "float32"), s: Tensor((5,), "float32"),
             z: Tensor((5,), "int8")) -> Tensor((3, 5), "int8"):
        with dataflow():
            y = qnn.quantize(x, s, z, axis=1)
            output(y)
        return y
"""
    from plait.dialects.qnn import reference as R
    from plait.runtime.vm import VirtualMachine

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    s = rng.uniform(0.01, 0.1, 5).astype(np.float32)
    z = rng.integers(-20, 20, 5).astype(np.int8)
    for target in ("numpy", "c"):
        got = VirtualMachine(plait.build(plait.parse(text), target))["main"](x, s, z)
        np.testing.assert_array_equal(got, R.quantize(x, s, z, axis=1, out_dtype="int8"))


def test_a_function_without_qnn_calls_is_kept_and_a_branch_is_looked_into() -> None:
    """qnn.Legalize finds a qnn call inside an If branch and lowers it; a function
    that calls no qnn op (the result) it returns as it is, with no walk."""
    branch = _opt("""
@module
class M:
    @function
    def main(c: Tensor((), "bool"), x: Tensor((2, 3), "uint8")) -> Tensor((2, 3), "float32"):
        if c:
            y = qnn.dequantize(x, const(0.5, "float32"), const(3, "uint8"))
            r = y
        else:
            r = cast(x, dtype="float32")
        return r
""")
    legalize = make_pass("qnn.Legalize")
    got = legalize(branch)
    assert "qnn." in branch.script() and "qnn." not in got.script()
    assert "multiply" in got.script()
    assert legalize(got) is got
