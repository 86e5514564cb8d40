"""Which graphs the c target sends to the decode kernel family (c.DispatchDecode,
plait/target/c/rules_decode.py): products of few or symbolic rows by constant weights
(with the weights kept (N, K), a residual add fused), left alone otherwise; and the
results against numpy (float64 references, rtol = atol = 1e-4).  The attention rule is
exercised by the language models of tests/llm (tests/llm/test_llm_decode_kernels.py)."""

from __future__ import annotations

import re

import numpy as np
from graph_helpers import build_graph  # tests/target
from graph_helpers import const as _c
from graph_helpers import emit as _call

import plait
from plait.runtime import VirtualMachine

RNG = np.random.default_rng(31)
TOL = 1e-4


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _calls(exe: plait.Executable) -> list[str]:
    return re.findall(r"call ([\w.]+)\(", exe.as_text())


def test_linear_with_residual_of_symbolic_rows_is_one_decode_call() -> None:
    w = _rand(96, 64)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "add", _call(bb, "linear", p[0], _c(w)), p[1])

    mod = build_graph({"x": ("b", "s", 64), "r": ("b", "s", 96)}, body)
    exe = plait.build(mod, plait.Target("c", decode_min_weights=0))
    calls = _calls(exe)
    assert [c for c in calls if not c.startswith("alloc")] == [
        c for c in calls if c.startswith("plait_dlinear_")], calls
    vm = VirtualMachine(exe)
    for b, s in ((1, 1), (1, 3), (2, 7)):
        x, r = _rand(b, s, 64), _rand(b, s, 96)
        want = x.astype(np.float64) @ w.T.astype(np.float64) + r
        np.testing.assert_allclose(vm["main"](x, r), want, rtol=TOL, atol=TOL)


def test_a_folded_transpose_is_read_back_as_stored() -> None:
    """matmul by a constant (K, N) (torch's linear after FoldConstant) is taken too: the
    weight is transposed back to (N, K) at compile time, once."""
    w = _rand(40, 33)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "matmul", p[0], _c(w))

    exe = plait.build(build_graph({"x": (1, 40)}, body), "c")
    assert any(c.startswith("plait_dlinear_") for c in _calls(exe))
    assert [tuple(c.shape) for c in exe.constants if c.size == w.size] == [(33, 40)]
    x = _rand(1, 40)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x),
                               x.astype(np.float64) @ w.astype(np.float64), rtol=TOL, atol=TOL)


def test_many_static_rows_and_small_weights_stay_with_the_packed_product() -> None:
    w = _rand(24, 16)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "linear", p[0], _c(w))

    static = plait.build(build_graph({"x": (8, 16)}, body), "c")
    small = plait.build(build_graph({"x": ("s", 16)}, body), "c")   # 384 < min weights
    off = plait.build(build_graph({"x": (1, 16)}, body), plait.Target("c", decode=False))
    for exe in (static, small, off):
        calls = _calls(exe)
        assert any(c.startswith("plait_gemm_") for c in calls), calls
        assert not any(c.startswith("plait_dlinear_") for c in calls), calls
