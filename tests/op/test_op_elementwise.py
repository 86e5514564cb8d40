"""Elementwise operators: type inference, and the numpy implementations checked against
PyTorch (or math / a direct numpy formula where torch has no such op)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plait.ir.types import TensorType as T
from plait.ir.types import TupleType
from plait.op import OpAttrError, OpTypeError, get_op, normalize_attrs
from plait.op.infer import infer_op_type as infer

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

RNG = np.random.default_rng(1)


def run(name, *inputs, **attrs):
    """Call the op's numpy reference the way the compiler does (validated attributes)."""
    opdef = get_op(name)
    return opdef.reference(*inputs, **normalize_attrs(opdef, attrs))


def th(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# ------------------------------------------------------------------ type inference


@pytest.mark.parametrize(
    "a, b, out",
    [
        (("n", 3, 1), (4,), ("n", 3, 4)),
        ((1,), ("n", "m"), ("n", "m")),
        ((), (2, 3), (2, 3)),
        ((5, 1, 2), (7, 1), (5, 7, 2)),
        (None, (2,), None),
    ],
)
def test_binary_broadcasting(a, b, out):
    for name in ("add", "power", "maximum", "floor_divide", "mod"):
        assert infer(name, T(a, "float32"), T(b, "float32")) == T(out, "float32")
    assert infer("less", T(a, "int32"), T(b, "int32")) == T(out, "bool")
    assert infer("logical_xor", T(a, "bool"), T(b, "bool")) == T(out, "bool")
    assert infer("bitwise_and", T(a, "int8"), T(b, "int8")) == T(out, "int8")


def test_binary_errors_name_op_and_argument():
    with pytest.raises(OpTypeError, match=r"subtract: cannot broadcast dimension 4 of argument 1"):
        infer("subtract", T((2, 3), "float32"), T((4,), "float32"))
    with pytest.raises(
        OpTypeError, match=r"add: argument 1 \(y\) has dtype int32, expected float32"
    ):
        infer("add", T((2,), "float32"), T((2,), "int32"))
    with pytest.raises(
        OpTypeError, match=r"logical_and: argument 0 \(x\) must have dtype bool, got int8"
    ):
        infer("logical_and", T((2,), "int8"), T((2,), "int8"))
    with pytest.raises(
        OpTypeError, match=r"bitwise_or: argument 0 \(x\) must have an integer or bool"
    ):
        infer("bitwise_or", T((2,), "float32"), T((2,), "float32"))
    with pytest.raises(OpTypeError, match=r"subtract: argument 0 \(x\) must have a numeric dtype"):
        infer("subtract", T((2,), "bool"), T((2,), "bool"))
    with pytest.raises(
        OpTypeError, match=r"argument 1 \(y\) of add must be a tensor, got Tuple\(\)"
    ):
        infer("add", T((2,), "float32"), TupleType(()))


def test_unary_inference_and_dtype_rules():
    x = T(("n", 3), "float16")
    for name in ("exp", "erf", "sigmoid", "gelu", "round", "rsqrt", "softplus", "leaky_relu"):
        assert infer(name, x) == x
    assert infer("isnan", x) == T(("n", 3), "bool")
    assert infer("abs", T(("n",), "int8")) == T(("n",), "int8")
    assert infer("clip", T(("n",), "int32"), min=0, max=6) == T(("n",), "int32")
    assert infer("cast", T(("n", 2), "float32"), dtype="int64") == T(("n", 2), "int64")
    assert infer("logical_not", T(None, "bool")) == T(None, "bool")
    with pytest.raises(
        OpTypeError, match=r"exp: argument 0 \(x\) must have a floating-point dtype.*got int32"
    ):
        infer("exp", T((2,), "int32"))
    with pytest.raises(OpTypeError, match=r"isnan: argument 0 \(x\) must have a floating-point"):
        infer("isnan", T((2,), "int64"))


def test_where_inference():
    t = infer("where", T(("n", 1), "bool"), T((3,), "float32"), T(("n", 3), "float32"))
    assert t == T(("n", 3), "float32")
    with pytest.raises(OpTypeError, match=r"where: argument 0 \(condition\) must have dtype bool"):
        infer("where", T((3,), "float32"), T((3,), "float32"), T((3,), "float32"))
    with pytest.raises(
        OpTypeError, match=r"where: argument 2 \(y\) has dtype int32, expected float32"
    ):
        infer("where", T((3,), "bool"), T((3,), "float32"), T((3,), "int32"))


def test_attribute_errors():
    with pytest.raises(
        OpAttrError, match=r"op 'gelu' has no attribute 'aproximate'; did you mean approximate\?"
    ):
        infer("gelu", T((2,), "float32"), aproximate="tanh")
    with pytest.raises(
        OpAttrError,
        match=r"attribute 'approximate' of op 'gelu' must be one of 'none', 'tanh', got 'erf'",
    ):
        infer("gelu", T((2,), "float32"), approximate="erf")
    with pytest.raises(
        OpAttrError, match=r"attribute 'alpha' of op 'leaky_relu' must be a number, got 'x'"
    ):
        infer("leaky_relu", T((2,), "float32"), alpha="x")
    with pytest.raises(OpAttrError, match=r"op 'cast' requires attribute 'dtype'"):
        infer("cast", T((2,), "float32"))
    with pytest.raises(
        OpAttrError, match=r"attribute 'dtype' of op 'cast' must be a dtype name, got 'float'"
    ):
        infer("cast", T((2,), "float32"), dtype="float")
    with pytest.raises(
        OpAttrError, match=r"attribute 'fmod' of op 'mod' must be True or False, got 1"
    ):
        infer("mod", T((2,), "int32"), T((2,), "int32"), fmod=1)


# ------------------------------------------------------------- numerics: unary


def _special(dtype):
    x = RNG.standard_normal(2000) * 4
    return np.concatenate(
        [x, [0.0, -0.0, 1e-30, -1e-30, 50.0, -50.0, np.inf, -np.inf, np.nan]]
    ).astype(dtype)


# name: (torch function, input transform, rtol, atol); compared in float32 and float64
UNARY_VS_TORCH = {
    "abs": (torch and torch.abs, None, 0, 0),
    "neg": (torch and torch.neg, None, 0, 0),
    "sign": (torch and torch.sign, lambda x: x[~np.isnan(x)], 0, 0),  # torch: sign(NaN) = 0
    "square": (torch and torch.square, None, 1e-7, 0),
    "relu": (torch and torch.relu, None, 0, 0),
    "exp": (torch and torch.exp, None, 1e-6, 0),
    "expm1": (torch and torch.expm1, None, 1e-6, 0),
    "log": (torch and torch.log, np.abs, 1e-6, 0),
    "log2": (torch and torch.log2, np.abs, 1e-6, 0),
    "log1p": (torch and torch.log1p, np.abs, 1e-6, 0),
    "sqrt": (torch and torch.sqrt, np.abs, 1e-6, 0),
    "rsqrt": (torch and torch.rsqrt, np.abs, 1e-6, 0),
    "reciprocal": (torch and torch.reciprocal, None, 1e-6, 0),
    "sin": (torch and torch.sin, None, 1e-6, 1e-7),
    "cos": (torch and torch.cos, None, 1e-6, 1e-7),
    "tan": (torch and torch.tan, None, 1e-5, 1e-6),
    "asin": (torch and torch.asin, np.tanh, 1e-6, 0),
    "acos": (torch and torch.acos, np.tanh, 1e-6, 0),
    "atan": (torch and torch.atan, None, 1e-6, 0),
    "sinh": (torch and torch.sinh, None, 1e-6, 0),
    "cosh": (torch and torch.cosh, None, 1e-6, 0),
    "tanh": (torch and torch.tanh, None, 1e-6, 1e-7),
    "asinh": (torch and torch.asinh, None, 1e-6, 0),
    "acosh": (torch and torch.acosh, lambda x: np.abs(x) + 1, 1e-6, 0),
    "atanh": (torch and torch.atanh, np.tanh, 1e-6, 1e-7),
    "erf": (torch and torch.erf, None, 2e-7, 0),
    "sigmoid": (torch and torch.sigmoid, None, 1e-6, 1e-7),
    "silu": (torch and F.silu, None, 1e-6, 1e-7),
    "floor": (torch and torch.floor, None, 0, 0),
    "ceil": (torch and torch.ceil, None, 0, 0),
    "trunc": (torch and torch.trunc, None, 0, 0),
    "round": (torch and torch.round, lambda x: np.round(x * 2) / 2, 0, 0),  # many .5 ties
    "isnan": (torch and torch.isnan, None, 0, 0),
    "isinf": (torch and torch.isinf, None, 0, 0),
    "isfinite": (torch and torch.isfinite, None, 0, 0),
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY_VS_TORCH))
def test_unary_matches_torch(name, dtype):
    fn, transform, rtol, atol = UNARY_VS_TORCH[name]
    x = _special(dtype)
    if transform is not None:
        with np.errstate(all="ignore"):
            x = transform(x).astype(dtype)
    got = run(name, x)
    want = fn(th(x)).numpy()
    assert got.dtype == want.dtype
    if dtype == "float64" and rtol:
        rtol = max(rtol * 1e-6, 1e-13)  # float64 implementations agree far more closely
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def test_erf_float64_precision_against_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.46875, -0.46875, 4.0, -4.0, 26.6]])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(run("erf", x), want, rtol=1e-15, atol=0)


@needs_torch
def test_erf_float32_within_one_ulp_of_torch():
    x = np.linspace(-6, 6, 100001, dtype=np.float32)
    got, want = run("erf", x), torch.erf(th(x)).numpy()
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1


def test_sign_of_nan_is_nan():
    np.testing.assert_array_equal(run("sign", np.array([np.nan, -2.0, 0.0])), [np.nan, -1, 0])


@needs_torch
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    x = np.concatenate([RNG.standard_normal(1000) * 4, [-30.0, -8.0, 0.0, 8.0]]).astype(np.float32)
    want = F.gelu(th(x), approximate=approximate).numpy()
    # torch's float32 gelu loses absolute accuracy in the negative tail: ~3e-7 with its
    # AVX2 kernel, up to ~9e-7 with its AVX-512 kernel (AMD EPYC Zen 4); see the float64
    # test for plait's own accuracy against math.erfc
    got = run("gelu", x, approximate=approximate)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1.5e-6)


def test_gelu_exact_against_math_erfc_in_float64():
    x = np.linspace(-12, 12, 4001)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(run("gelu", x), want, rtol=1e-14, atol=1e-300)


@needs_torch
def test_activations_with_attributes_match_torch():
    x = _special("float32")
    np.testing.assert_allclose(
        run("leaky_relu", x, alpha=0.3), F.leaky_relu(th(x), 0.3).numpy(), rtol=1e-7, equal_nan=True
    )
    np.testing.assert_allclose(
        run("softplus", x, beta=2.0, threshold=5.0),
        F.softplus(th(x), beta=2.0, threshold=5.0).numpy(),
        rtol=1e-6, atol=1e-7, equal_nan=True,
    )  # fmt: skip
    # torch's hardsigmoid is relu6(x + 3) / 6: alpha 1/6, beta 0.5
    np.testing.assert_allclose(
        run("hard_sigmoid", x, alpha=1 / 6, beta=0.5), F.hardsigmoid(th(x)).numpy(),
        rtol=1e-6, atol=1e-7, equal_nan=True,
    )  # fmt: skip


def test_hard_sigmoid_onnx_defaults():
    onnx_ref = pytest.importorskip("onnx.reference")
    from onnx import helper

    node = helper.make_node("HardSigmoid", ["x"], ["y"])  # alpha 0.2, beta 0.5
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, [None])],
        [helper.make_tensor_value_info("y", 1, [None])],
    )  # fmt: skip
    x = RNG.standard_normal(100).astype(np.float32) * 5
    (want,) = onnx_ref.ReferenceEvaluator(helper.make_model(graph)).run(None, {"x": x})
    np.testing.assert_allclose(run("hard_sigmoid", x), want, rtol=1e-6, atol=1e-7)


@needs_torch
def test_clip_matches_torch_clamp():
    x = _special("float32")
    np.testing.assert_array_equal(
        run("clip", x, min=-1.5, max=2), torch.clamp(th(x), -1.5, 2).numpy()
    )
    np.testing.assert_array_equal(run("clip", x, min=0.25), torch.clamp(th(x), min=0.25).numpy())
    np.testing.assert_array_equal(run("clip", x), x)
    xi = np.arange(-10, 10, dtype=np.int8)
    # integer tensors: bounds rounded inward (ceil of min, floor of max), saturated
    np.testing.assert_array_equal(run("clip", xi, min=-2.5, max=3.7), np.clip(xi, -2, 3))
    np.testing.assert_array_equal(run("clip", xi, min=-1000.0, max=1000.0), xi)


@needs_torch
def test_cast_matches_torch():
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 300.0], np.float32)
    np.testing.assert_array_equal(run("cast", x, dtype="int32"), th(x).to(torch.int32).numpy())
    np.testing.assert_array_equal(run("cast", x, dtype="bool"), th(x).to(torch.bool).numpy())
    np.testing.assert_array_equal(run("cast", x, dtype="float16"), th(x).to(torch.float16).numpy())


# ------------------------------------------------------------ numerics: binary


def _pair(dtype, shape_a=(40, 30), shape_b=(30,), nonzero=False, positive=False):
    if np.dtype(dtype).kind == "f":
        a = RNG.standard_normal(shape_a) * 5
        b = RNG.standard_normal(shape_b) * 3
    else:
        a = RNG.integers(-50, 50, shape_a)
        b = RNG.integers(-7, 8, shape_b)
    if positive:
        a, b = np.abs(a) + 0.5, np.abs(b) * 0 + RNG.integers(0, 4, shape_b)
    if nonzero:
        b = np.where(b == 0, 3, b)
    return a.astype(dtype), b.astype(dtype)


BINARY_VS_TORCH = {
    "add": lambda a, b: torch.add(a, b),
    "subtract": lambda a, b: torch.sub(a, b),
    "multiply": lambda a, b: torch.mul(a, b),
    "maximum": lambda a, b: torch.maximum(a, b),
    "minimum": lambda a, b: torch.minimum(a, b),
    "equal": lambda a, b: torch.eq(a, b),
    "not_equal": lambda a, b: torch.ne(a, b),
    "less": lambda a, b: torch.lt(a, b),
    "less_equal": lambda a, b: torch.le(a, b),
    "greater": lambda a, b: torch.gt(a, b),
    "greater_equal": lambda a, b: torch.ge(a, b),
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("name", sorted(BINARY_VS_TORCH))
def test_binary_matches_torch(name, dtype):
    a, b = _pair(dtype)
    want = BINARY_VS_TORCH[name](th(a), th(b)).numpy()
    got = run(name, a, b)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64"])
def test_division_family_matches_torch(dtype):
    a, b = _pair(dtype, nonzero=True)
    ta, tb = th(a), th(b)
    if dtype.startswith("int"):
        want_div = torch.div(ta, tb, rounding_mode="trunc")  # plait: ints truncate
    else:
        want_div = torch.div(ta, tb)
    np.testing.assert_allclose(run("divide", a, b), want_div.numpy(), rtol=1e-7)
    want_floor = torch.div(ta, tb, rounding_mode="floor")
    np.testing.assert_allclose(run("floor_divide", a, b), want_floor.numpy(), rtol=1e-6)
    np.testing.assert_allclose(
        run("mod", a, b), torch.remainder(ta, tb).numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        run("mod", a, b, fmod=True), torch.fmod(ta, tb).numpy(), rtol=1e-5, atol=1e-5
    )


def test_integer_divide_is_exact_for_large_int64():
    a = np.array([2**62 + 1, -(2**62) - 1, 7, -7], np.int64)
    b = np.array([3, 3, -2, -2], np.int64)
    # exact truncating division with Python integers: |x| // |y| with the sign of x * y
    want = [
        (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
        for x, y in zip(a.tolist(), b.tolist())
    ]
    assert want[0] == 1537228672809129301
    np.testing.assert_array_equal(run("divide", a, b), want)


@needs_torch
def test_power_matches_torch():
    a = RNG.uniform(0.1, 3, (20, 5)).astype(np.float32)
    b = RNG.uniform(-2, 2, (5,)).astype(np.float32)
    np.testing.assert_allclose(run("power", a, b), torch.pow(th(a), th(b)).numpy(), rtol=1e-6)
    ai, bi = RNG.integers(-5, 5, (10,)), RNG.integers(0, 5, (10,))
    np.testing.assert_array_equal(run("power", ai, bi), torch.pow(th(ai), th(bi)).numpy())


@needs_torch
def test_nan_propagates_through_maximum_minimum_like_torch():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    for name, fn in (("maximum", torch.maximum), ("minimum", torch.minimum)):
        np.testing.assert_array_equal(run(name, a, b), fn(th(a), th(b)).numpy())


@needs_torch
def test_logical_and_bitwise_match_torch():
    p, q = RNG.integers(0, 2, (4, 8)).astype(bool), RNG.integers(0, 2, (8,)).astype(bool)
    for name, fn in (
        ("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
        ("logical_xor", torch.logical_xor),
    ):  # fmt: skip
        np.testing.assert_array_equal(run(name, p, q), fn(th(p), th(q)).numpy())
    np.testing.assert_array_equal(run("logical_not", p), torch.logical_not(th(p)).numpy())
    m, n = (
        RNG.integers(-99, 99, (4, 8)).astype(np.int32),
        RNG.integers(-99, 99, (8,)).astype(np.int32),
    )
    for name, fn in (
        ("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or),
        ("bitwise_xor", torch.bitwise_xor),
    ):  # fmt: skip
        np.testing.assert_array_equal(run(name, m, n), fn(th(m), th(n)).numpy())
    np.testing.assert_array_equal(run("bitwise_not", m), torch.bitwise_not(th(m)).numpy())


@needs_torch
def test_where_matches_torch():
    c = RNG.integers(0, 2, (3, 1, 4)).astype(bool)
    x, y = (
        RNG.standard_normal((5, 4)).astype(np.float32),
        RNG.standard_normal((4,)).astype(np.float32),
    )
    np.testing.assert_array_equal(run("where", c, x, y), torch.where(th(c), th(x), th(y)).numpy())


def test_float16_stays_float16():
    x = RNG.standard_normal(10).astype(np.float16)
    for name in ("erf", "gelu", "sigmoid", "silu", "softplus", "exp", "rsqrt", "leaky_relu"):
        assert run(name, np.abs(x) if name == "rsqrt" else x).dtype == np.float16, name
