"""Which graphs the c target sends to the decode kernel family (c.DispatchDecode,
plait/target/c/dispatch/decode.py): products of few (or, with decode=True, symbolic)
rows by constant weights
(with the weights kept (N, K), a residual add fused), left alone otherwise; and the
results against numpy (float64 references, rtol = atol = 1e-4).  The attention rule is
exercised by the language models of tests/llm (tests/llm/test_llm_decode_kernels.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
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
    exe = plait.build(mod, plait.Target("c", decode=True, decode_min_weights=0))
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

    exe = plait.build(build_graph({"x": (1, 40)}, body),
                      plait.Target("c", decode_min_weights=0))
    assert any(c.startswith("plait_dlinear_") for c in _calls(exe))
    assert [tuple(c.shape) for c in exe.constants if c.size == w.size] == [(33, 40)]
    x = _rand(1, 40)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x),
                               x.astype(np.float64) @ w.astype(np.float64), rtol=TOL, atol=TOL)


def test_what_stays_with_the_packed_product() -> None:
    """Many static rows; symbolic rows unless decode=True is asked for (a model with an
    open batch keeps its packed weights and epilogues); weights below
    decode_min_weights, even of one row; and everything with decode=False."""
    w = _rand(24, 16)

    def body(bb, p):  # type: ignore[no-untyped-def]
        return _call(bb, "linear", p[0], _c(w))

    cases = [({"x": (8, 16)}, "c"),
             ({"x": ("s", 16)}, plait.Target("c", decode_min_weights=0)),
             ({"x": ("s", 16)}, plait.Target("c", decode=True)),      # 384 < 65536
             ({"x": (1, 16)}, "c"),
             ({"x": (1, 16)}, plait.Target("c", decode=False, decode_min_weights=0))]
    for shapes, target in cases:
        calls = _calls(plait.build(build_graph(shapes, body), target))
        assert any(c.startswith("plait_gemm_") for c in calls), (shapes, target, calls)
        assert not any(c.startswith("plait_dlinear_") for c in calls), calls


def test_a_bad_decode_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="decode must be 'auto'"):
        plait.build(build_graph({"x": (1, 16)}, lambda bb, p: p[0]),
                    plait.Target("c", decode="yes"))
