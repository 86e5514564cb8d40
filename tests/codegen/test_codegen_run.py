"""Kernels (from the DSL and written by hand) compiled to C and run against numpy.

Tolerances: elementwise float32 rtol 1e-6, reductions and matmul rtol 1e-5,
transcendental intrinsics rtol 2e-6 against a float64 reference; integer results exact.
"""

import math

import numpy as np
import pytest

from plait.codegen.c import NativeLibrary, compile_kernels, emit_kernel
from plait.kernel import Kernel, dsl, parse_kernels

HAND_WRITTEN = '''
@kernel
def int_ops(
    a: Buffer((n,), "int32"),
    b: Buffer((n,), "int32"),
    q: Buffer((n,), "int32", output=True),
    r: Buffer((n,), "int32", output=True),
    t: Buffer((n,), "int32", output=True),
):
    for i in range(n):
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
        t[i] = a[i] / b[i]

@kernel
def float_ops(
    x: Buffer((n,), "float32"),
    y: Buffer((n,), "float32"),
    fd: Buffer((n,), "float32", output=True),
    fm: Buffer((n,), "float32", output=True),
    mx: Buffer((n,), "float32", output=True),
    mn: Buffer((n,), "float32", output=True),
):
    for i in vectorized(n):
        fd[i] = x[i] // y[i]
        fm[i] = x[i] % y[i]
        mx[i] = max(x[i], y[i])
        mn[i] = min(x[i], y[i])

@kernel
def intrinsics(
    x: Buffer((n,), "float32"),
    out: Buffer((9, n), "float32", output=True),
    flags: Buffer((n,), "bool", output=True),
):
    for i in parallel(n):
        out[0, i] = exp(x[i])
        out[1, i] = log(abs(x[i]) + 1.0)
        out[2, i] = sqrt(abs(x[i]))
        out[3, i] = tanh(x[i])
        out[4, i] = erf(x[i])
        out[5, i] = sigmoid(x[i])
        out[6, i] = round(x[i] * 2.0)
        out[7, i] = pow(abs(x[i]), 1.5)
        out[8, i] = float32(int32(x[i] * 3.0))
        flags[i] = x[i] > 0.0 and not isnan(x[i])

@kernel
def pad1d(x: Buffer((n,), "float64"), y: Buffer((m,), "float64", output=True)):
    for i in range(m):
        y[i] = select(i >= 2 and i - 2 < n, x[i - 2], -1.0)

@kernel
def big_scratch(x: Buffer((5000,), "float32"), y: Buffer((5000,), "float32", output=True)):
    tmp = alloc((5000,), "float32")
    for i in range(5000):
        tmp[4999 - i] = x[i] * 2.0
    for i in range(5000):
        y[i] = tmp[4999 - i] + 1.0

@kernel
def small_types(
    a: Buffer((n,), "uint8"),
    b: Buffer((n,), "int8"),
    s: Buffer((n,), "int16", output=True),
):
    for i in range(n):
        s[i] = int16(a[i]) * int16(b[i]) + abs(int16(b[i]))
'''


def _dsl_kernels() -> dict[str, Kernel]:
    a = dsl.placeholder(("n", 64), "float32", "a")
    b = dsl.placeholder((64,), "float32", "b")
    c = dsl.compute(("n", 64), lambda i, j: a[i, j] + b[j], "c")
    badd = dsl.create_kernel([a, b, c], "badd")

    x = dsl.placeholder(("n", "k"), "float32", "x")
    w = dsl.placeholder(("k", "m"), "float32", "w")
    r = dsl.reduce_axis("k", "r")
    y = dsl.compute(("n", "m"), lambda i, j: dsl.sum(x[i, r] * w[r, j], axis=[r]), "y")
    matmul = dsl.create_kernel([x, w, y], "matmul")

    s = dsl.placeholder(("n", "m"), "float32", "s")
    r1 = dsl.reduce_axis("m", "r1")
    mx = dsl.compute(("n",), lambda i: dsl.max(s[i, r1], axis=[r1]), "mx")
    e = dsl.compute(("n", "m"), lambda i, j: dsl.exp(s[i, j] - mx[i]), "e")
    r2 = dsl.reduce_axis("m", "r2")
    tot = dsl.compute(("n",), lambda i: dsl.sum(e[i, r2], axis=[r2]), "tot")
    sm = dsl.compute(("n", "m"), lambda i, j: e[i, j] / tot[i], "sm")
    softmax = dsl.create_kernel([s, sm], "softmax")

    v = dsl.placeholder(("n", "m"), "int32", "v")
    r3 = dsl.reduce_axis("m", "r3")
    r4 = dsl.reduce_axis("m", "r4")
    vmax = dsl.compute(("n",), lambda i: dsl.max(v[i, r3], axis=[r3]), "vmax")
    vmin = dsl.compute(("n",), lambda i: dsl.min(v[i, r4], axis=[r4]), "vmin")
    minmax = dsl.create_kernel([v, vmax, vmin], "minmax")
    return {"badd": badd, "matmul": matmul, "softmax": softmax, "minmax": minmax}


@pytest.fixture(scope="module")
def lib() -> NativeLibrary:
    kernels = {**_dsl_kernels(), **parse_kernels(HAND_WRITTEN)}
    return compile_kernels(kernels)


def test_dsl_broadcast_add(lib: NativeLibrary) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 64), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    np.testing.assert_allclose(lib.get("badd")(a, b), a + b, rtol=1e-6)


def test_dsl_matmul_symbolic(lib: NativeLibrary) -> None:
    rng = np.random.default_rng(1)
    for n, k, m in [(1, 1, 1), (5, 17, 3), (64, 33, 20)]:
        x = rng.standard_normal((n, k), dtype=np.float32)
        w = rng.standard_normal((k, m), dtype=np.float32)
        out = np.empty((n, m), np.float32)
        assert lib.get("matmul")(x, w, out) is None
        np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-5)


def test_dsl_softmax(lib: NativeLibrary) -> None:
    rng = np.random.default_rng(2)
    s = rng.standard_normal((300, 50), dtype=np.float32) * 10
    ref = np.exp(s - s.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(lib.get("softmax")(s), ref, rtol=1e-5, atol=1e-7)


def test_dsl_int_min_max(lib: NativeLibrary) -> None:
    v = np.random.default_rng(3).integers(-1000, 1000, (7, 9)).astype(np.int32)
    vmax, vmin = lib.get("minmax")(v)
    np.testing.assert_array_equal(vmax, v.max(1))
    np.testing.assert_array_equal(vmin, v.min(1))


def test_integer_division_semantics(lib: NativeLibrary) -> None:
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, -5], np.int32)
    q, r, t = lib.get("int_ops")(a, b)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_array_equal(t, np.trunc(a / b).astype(np.int32))


def test_float_floor_ops_and_nan_propagation(lib: NativeLibrary) -> None:
    x = np.array([7.5, -7.5, 7.5, -7.5, np.nan, 1.0, 3.0], np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0, 1.0, np.nan, 0.5], np.float32)
    fd, fm, mx, mn = lib.get("float_ops")(x, y)
    np.testing.assert_array_equal(fd, np.floor_divide(x, y))
    np.testing.assert_array_equal(fm, np.mod(x, y))
    np.testing.assert_array_equal(mx, np.maximum(x, y))
    np.testing.assert_array_equal(mn, np.minimum(x, y))


def test_intrinsics(lib: NativeLibrary) -> None:
    x = np.linspace(-4, 4, 101, dtype=np.float32)
    x[50] = 0.25
    out, flags = lib.get("intrinsics")(x)
    xd = x.astype(np.float64)
    refs = [
        np.exp(xd), np.log(np.abs(xd) + 1), np.sqrt(np.abs(xd)), np.tanh(xd),
        np.array([math.erf(v) for v in xd]), 1 / (1 + np.exp(-xd)), np.round(xd * 2),
        np.abs(xd) ** 1.5, np.trunc(x * np.float32(3)).astype(np.float64),
    ]
    for row, ref in zip(out, refs):
        np.testing.assert_allclose(row, ref, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(flags, x > 0)


def test_select_padding_float64(lib: NativeLibrary) -> None:
    x = np.arange(5, dtype=np.float64)
    y = np.empty(9)
    lib.get("pad1d")(x, y)
    np.testing.assert_array_equal(y, np.pad(x, 2, constant_values=-1.0))


def test_heap_scratch_buffer(lib: NativeLibrary) -> None:
    x = np.random.default_rng(4).standard_normal(5000).astype(np.float32)
    np.testing.assert_allclose(lib.get("big_scratch")(x), x * 2 + 1, rtol=1e-6)
    assert "malloc(" in lib.sources["plait_kernels.c"]


def test_small_integer_types(lib: NativeLibrary) -> None:
    a = np.array([0, 1, 200, 255], np.uint8)
    b = np.array([-128, -1, 2, 127], np.int8)
    ref = a.astype(np.int16) * b.astype(np.int16) + np.abs(b.astype(np.int16))
    np.testing.assert_array_equal(lib.get("small_types")(a, b), ref)


def test_argument_checks_name_the_parameter(lib: NativeLibrary) -> None:
    f = lib.get("badd")
    a = np.zeros((3, 64), np.float32)
    with pytest.raises(TypeError, match=r"argument 1 \('b', \(64,\) float32\): dtype is float64"):
        f(a, np.zeros(64))
    with pytest.raises(ValueError, match="dimension 0 is 63, expected 64"):
        f(a, np.zeros(63, np.float32))
    with pytest.raises(ValueError, match="rank is 1"):
        f(np.zeros(64, np.float32), np.zeros(64, np.float32))
    with pytest.raises(ValueError, match=r"dimension 0 is 4, but n = 3 from an earlier argument"):
        f(a, np.zeros(64, np.float32), np.zeros((4, 64), np.float32))
    with pytest.raises(ValueError, match="an output must be C-contiguous"):
        f(a, np.zeros(64, np.float32), np.zeros((64, 3), np.float32).T)
    with pytest.raises(TypeError, match="takes 2 input"):
        f(a)
    # non-contiguous inputs are copied
    big = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
    np.testing.assert_array_equal(f(big[:, ::2], big[0, ::2]), big[:, ::2] + big[0, ::2])
    assert "badd(a: (n, 64) float32, b: (64,) float32) -> (c: (n, 64) float32)" == f.signature


def test_big_endian_inputs_are_converted_and_outputs_refused(lib: NativeLibrary) -> None:
    f = lib.get("badd")
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 64)).astype(">f4"), rng.standard_normal(64).astype(">f4")
    want = a.astype(np.float32) + b.astype(np.float32)  # numpy, in native byte order
    np.testing.assert_array_equal(f(a, b), want)
    with pytest.raises(TypeError, match=r"dtype is float32 \(big-endian\), expected float32"):
        f(a, b, np.zeros((3, 64), ">f4"))  # an output is written in place: never converted
    with pytest.raises(TypeError, match=r"dtype is float64 \(big-endian\), expected float32"):
        f(a, b.astype(">f8"))


def _exp_kernel(dtype: str = "float32") -> Kernel:
    x = dsl.placeholder(("n",), dtype, "x")
    y = dsl.compute(("n",), lambda i: dsl.exp(x[i]), "y")
    return dsl.create_kernel([x, y], "vexp")


def test_float32_exp_is_within_one_ulp_and_handles_special_values() -> None:
    """float32 ``exp`` is plait's own vectorizable expf (``emit.EXP_F32``): within 1 ulp
    of the exact value over every 997th float of its range, inf/0 beyond it, NaN kept,
    subnormal results within one subnormal step."""
    f = compile_kernels({"vexp": _exp_kernel()}).get("vexp")
    bits = np.arange(0, 2**32, 997, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < 110)]
    got = f(x).astype(np.float64)
    exact = np.exp(x.astype(np.float64))
    normal = (exact >= np.finfo(np.float32).tiny) & (exact <= np.finfo(np.float32).max)
    ulp = np.spacing(exact[normal].astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[normal] - exact[normal]) / ulp) <= 1.0
    sub = (exact > 0) & (exact < np.finfo(np.float32).tiny)
    assert np.max(np.abs(got[sub] - exact[sub])) <= 2.0**-149
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72283, 88.7229, -103.98, -200.0,
                        1e-30, 1.0], np.float32)
    with np.errstate(over="ignore"):
        want = np.exp(special.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(f(special)[:-1], want[:-1])
    assert abs(float(f(special)[-1]) - math.e) <= 2.4e-7


def test_float32_erf_is_within_two_ulp_and_handles_special_values() -> None:
    """float32 ``erf`` is plait's own vectorizable erff (``emit.ERF_F32``): against
    float64 ``math.erf`` over every 997th float with |x| < 6 (both branches, the
    switch at 1 and the clamp at 4), within 2.5 ulp (the worst, 2.42, is just below 1)
    or 1e-7 absolute; odd; exact at the special values."""
    x = dsl.placeholder(("n",), "float32", "x")
    y = dsl.compute(("n",), lambda i: dsl.erf(x[i]), "y")
    k = dsl.create_kernel([x, y], "verf")
    assert "plait_erf_f32(" in emit_kernel("verf", k)
    f = compile_kernels({"verf": k}).get("verf")
    bits = np.arange(0, 2**32, 997, dtype=np.uint64).astype(np.uint32)
    xs = bits.view(np.float32)
    xs = np.concatenate([xs[np.isfinite(xs) & (np.abs(xs) < 6)],
                         np.float32([1.0, np.nextafter(np.float32(1), 2), 3.999, 4.0])])
    got = f(xs).astype(np.float64)
    exact = np.array([math.erf(v) for v in xs.astype(np.float64)])
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    err = np.abs(got - exact)
    assert np.all((err <= 2.5 * ulp) | (err <= 1e-7)), float(np.max(err / ulp))
    np.testing.assert_array_equal(f(-xs), -f(xs))
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, 10.0], np.float32)
    got = f(special)
    np.testing.assert_array_equal(got[[0, 1, 3, 4, 6]], np.float32([1, -1, 0, -0.0, 1]))
    assert np.isnan(got[2]) and np.signbit(got[4])
    assert got[5] == np.float32(math.erf(float(np.float32(1e-30))))   # x * 2/sqrt(pi)


def test_float32_tanh_is_within_three_ulp_and_handles_special_values() -> None:
    """float32 ``tanh`` is plait's own vectorizable tanhf (``emit.TANH_F32``): against
    float64 numpy over every 997th float with |x| < 12 (the switch at 0.625, the clamp
    at 10), within 3 ulp; odd; exact at the special values."""
    x = dsl.placeholder(("n",), "float32", "x")
    y = dsl.compute(("n",), lambda i: dsl.tanh(x[i]), "y")
    k = dsl.create_kernel([x, y], "vtanh")
    assert "plait_tanh_f32(" in emit_kernel("vtanh", k)
    f = compile_kernels({"vtanh": k}).get("vtanh")
    bits = np.arange(0, 2**32, 997, dtype=np.uint64).astype(np.uint32)
    xs = bits.view(np.float32)
    xs = np.concatenate([xs[np.isfinite(xs) & (np.abs(xs) < 12)],
                         np.float32([0.625, np.nextafter(np.float32(0.625), 0), 9.0, 10.0])])
    got = f(xs).astype(np.float64)
    exact = np.tanh(xs.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - exact) <= 3 * ulp), float(np.max(np.abs(got - exact) / ulp))
    np.testing.assert_array_equal(f(-xs), -f(xs))
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30], np.float32)
    got = f(special)
    np.testing.assert_array_equal(got[[0, 1, 3, 4, 5]], np.float32([1, -1, 0, -0.0, 1e-30]))
    assert np.isnan(got[2]) and np.signbit(got[4])


def test_kernel_copies_compute_the_same_bits() -> None:
    """The library holds one copy of the kernels per instruction set of the machine
    (plait_isa.h); without contraction into FMAs, and with reductions in a fixed lane
    order, every copy the CPU runs gives bit-identical results (checked against numpy)."""
    x = dsl.placeholder(("m", "n"), "float32", "x")
    r = dsl.reduce_axis("n", "r")
    mx = dsl.compute(("m",), lambda i: dsl.max(x[i, r], axis=[r]), "mx")
    e = dsl.compute(("m", "n"), lambda i, j: dsl.exp(x[i, j] - mx[i]), "e")
    r2 = dsl.reduce_axis("n", "r2")
    s = dsl.compute(("m",), lambda i: dsl.sum(e[i, r2] * x[i, r2] + 0.5, axis=[r2]), "s")
    k = dsl.create_kernel([x, s], "k")
    lib = compile_kernels({"k": k})
    report = lib.module.isa_report()
    assert report is not None
    runs = [i for i in report["families"][0]["built"] if i in report["supported"]]
    assert len(runs) >= 1 and runs[-1] == "baseline"
    data = np.random.default_rng(3).standard_normal((37, 1001)).astype(np.float32)
    outs = []
    try:
        for isa in runs:
            lib.module.force_isa(isa)
            assert lib.module.isa_report()["families"][0]["chosen"] == isa
            outs.append(lib.get("k")(data))
    finally:
        lib.module.force_isa(None)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
    ref = (np.exp(data - data.max(1, keepdims=True)) * data + 0.5).sum(1)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 31, 32, 33, 1000])
def test_lane_reductions_of_any_length(n: int) -> None:
    x = dsl.placeholder(("m", "n"), "float32", "x")
    r = dsl.reduce_axis("n", "r")
    s = dsl.compute(("m",), lambda i: dsl.sum(x[i, r], axis=[r]), "s")
    mx = dsl.compute(("m",), lambda i: dsl.max(x[i, r], axis=[r]), "mx")
    mn = dsl.compute(("m",), lambda i: dsl.min(x[i, r], axis=[r]), "mn")
    f = compile_kernels({"k": dsl.create_kernel([x, s, mx, mn], "k")}).get("k")
    data = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    s, mx, mn = f(data)
    np.testing.assert_allclose(s, data.sum(1), rtol=1e-5, atol=1e-5)
    if n:
        np.testing.assert_array_equal(mx, data.max(1))
        np.testing.assert_array_equal(mn, data.min(1))
        data[1, n // 2] = np.nan
        s, mx, mn = f(data)
        assert np.isnan(s[1]) and np.isnan(mx[1]) and np.isnan(mn[1])
        assert not np.isnan(mx[0])
    else:
        assert np.all(mx == -np.inf) and np.all(mn == np.inf) and np.all(s == 0)
