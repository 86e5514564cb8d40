"""The decode kernel family (plait/target/c/kernels/decode, issue 31 item 3) against
numpy, on every instruction-set copy this CPU runs: ``plait_gemv`` (few rows times a
weight kept ``(N, K)`` as stored, with bias and residual; more rows go to
``plait_gemm`` reading the same weights) and ``plait_kv_attention`` (attention over the
sequence-major cache: decode with one query row per head, prefill causal, grouped-query
heads sharing keys).  The wrappers are compiled straight from their call interface
(no graph), on odd sizes (tails of the 16-lane vectors and of the 4-row blocks, head
size 7, three grouped heads) and sizes that split over the pool's threads.  References
in float64; tolerance rtol = atol = 1e-4 (float32 sums of up to 1029 products).  The
recognition rules are tested in tests/target/test_decode_rules.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from plait.codegen.c import CSource, compile_kernels
from plait.codegen.c.variants import FLOAT_ISAS
from plait.target.c import cpu_features, use_isa
from plait.target.c.dims import C_PRELUDE
from plait.target.c.kernels.decode import DecodeCall, kv_attention_call, linear_call
from plait.target.c.kernels.registry import families_header_text, family_sources

TOL = 1e-4
RNG = np.random.default_rng(31)


def _rand(*shape: Any) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _compile(calls: list[DecodeCall]) -> Any:
    code = (families_header_text(["decode", "gemm"]) + C_PRELUDE
            + "\n".join(c.code for c in calls))
    src = CSource(code, tuple(c.function for c in calls), "test_decode_calls.c")
    return compile_kernels({}, c_sources=[*family_sources(["decode", "gemm"]), src])


@pytest.fixture(params=[i for i in FLOAT_ISAS if i != "neon"])
def isa(request: pytest.FixtureRequest) -> str:
    supported = cpu_features()["supported"]
    if request.param not in supported:
        pytest.skip(f"this CPU does not run {request.param} (it runs {', '.join(supported)})")
    return str(request.param)


LINEARS = [   # (x shape, N, K, bias, residual)
    ((1, 45), 37, 45, False, False),
    ((3, 45), 37, 45, True, True),
    (("s", 1029), 300, 1029, True, False),          # split over threads
    (("b", "s", 64), 129, 64, False, True),
]


@pytest.fixture(scope="module")
def linear_lib() -> tuple[Any, list[DecodeCall]]:
    calls = [linear_call(xs, n, k, bias=b, res_shape=xs[:-1] + (n,) if r else None)
             for xs, n, k, b, r in LINEARS]
    return _compile(calls), calls


@pytest.mark.parametrize("case", range(len(LINEARS)))
def test_gemv_matches_numpy(linear_lib: Any, case: int, isa: str) -> None:
    lib, calls = linear_lib
    xs, n, k, bias, res = LINEARS[case]
    w = _rand(n, k)
    b = _rand(n)
    with use_isa(isa):
        f = lib.get(calls[case].symbol)
        for rows in ((1, 3, 4, 5, 9) if not all(type(d) is int for d in xs) else (None,)):
            shape = tuple(d if type(d) is int else 1 for d in xs[:-2]) + (
                (xs[-2] if rows is None else rows), k)
            x = _rand(*shape)
            want = x.astype(np.float64) @ w.T.astype(np.float64)
            args = [x, w]
            if bias:
                args.append(b)
                want = want + b
            if res:
                r = _rand(*want.shape)
                args.append(r)
                want = want + r
            np.testing.assert_allclose(f(*args), want, rtol=TOL, atol=TOL)


def kv_attention_reference(q: np.ndarray, kp: np.ndarray, vp: np.ndarray, kn: np.ndarray,
                           vn: np.ndarray, scale: float, window: int = 0) -> np.ndarray:
    """Causal attention of the new rows over the cache and themselves, in float64:
    (B, KV, G, S, D) from q (B, KV*G, S, D), kp/vp (P, B, KV, D), kn/vn (B, KV, S, D);
    with ``window`` > 0 row i (position P + i) sees only positions > P + i - window."""
    b_, h, s_, d = q.shape
    p_, kv = kp.shape[0], kn.shape[1]
    g_ = h // kv
    out = np.zeros((b_, kv, g_, s_, d))
    for b in range(b_):
        for k in range(kv):
            keys = np.concatenate([kp[:, b, k], kn[b, k]]).astype(np.float64)
            vals = np.concatenate([vp[:, b, k], vn[b, k]]).astype(np.float64)
            for g in range(g_):
                for i in range(s_):
                    lo = max(0, p_ + i + 1 - window) if window else 0
                    sc = scale * keys[lo:p_ + i + 1] @ q[b, k * g_ + g, i].astype(np.float64)
                    pr = np.exp(sc - sc.max())
                    out[b, k, g, i] = (pr / pr.sum()) @ vals[lo:p_ + i + 1]
    return out


ATTENTIONS = [   # (B, KV, G, S, P, D)
    (1, 2, 3, 1, 29, 7),      # decode: one query row per head, three heads per key head
    (2, 2, 3, 13, 0, 7),      # prefill: causal over the prompt
    (2, 1, 2, 21, 9, 16),     # a prompt after cached rows (16-key blocks across both)
    (1, 4, 4, 1, 300, 64),    # decode over a long cache, on the pool's threads
    (1, 2, 2, 37, 0, 33),     # prefill in several row blocks
]


@pytest.fixture(scope="module")
def attention_lib() -> tuple[Any, DecodeCall]:
    call = kv_attention_call(("b", "h", "s", "d"), ("p", "b", "kv", "d"),
                             ("b", "kv", "s", "d"), ("b", "kv", "g", "s", "d"), 0.3)
    return _compile([call]), call


@pytest.mark.parametrize("case", ATTENTIONS)
def test_kv_attention_matches_numpy(attention_lib: Any, case: tuple[int, ...],
                                    isa: str) -> None:
    lib, call = attention_lib
    _check_kv_attention(lib, call, *case, window=0, isa=isa)


def _check_kv_attention(lib: Any, call: DecodeCall, b: int, kv: int, g: int, s: int,
                        p: int, d: int, *, window: int, isa: str) -> None:
    """Run ``call`` on random operands of the given sizes and compare with numpy."""
    q = _rand(b, kv * g, s, d)
    kp, vp = _rand(p, b, kv, d), _rand(p, b, kv, d)
    kn, vn = _rand(b, kv, s, d), _rand(b, kv, s, d)
    out = np.zeros((b, kv, g, s, d), np.float32)
    with use_isa(isa):
        lib.get(call.symbol)(q, kp, vp, kn, vn, out)
    np.testing.assert_allclose(out, kv_attention_reference(q, kp, vp, kn, vn, 0.3, window),
                               rtol=TOL, atol=TOL)


WINDOWED = [   # (B, KV, G, S, P, D, W)
    (1, 2, 2, 1, 29, 8, 6),    # decode: the window inside the cache
    (2, 2, 3, 13, 0, 7, 4),    # prefill: the window cuts into the prompt's rows
    (1, 1, 2, 37, 5, 16, 9),   # a prompt after cached rows, several row blocks
    (1, 2, 1, 3, 2, 8, 40),    # a window longer than everything: plain causal
]


@pytest.fixture(scope="module")
def windowed_libs() -> dict[int, tuple[Any, DecodeCall]]:
    calls = {w: kv_attention_call(("b", "h", "s", "d"), ("p", "b", "kv", "d"),
                                  ("b", "kv", "s", "d"), ("b", "kv", "g", "s", "d"), 0.3, w)
             for w in sorted({c[-1] for c in WINDOWED})}
    lib = _compile(list(calls.values()))
    return {w: (lib, call) for w, call in calls.items()}


@pytest.mark.parametrize("case", WINDOWED)
def test_kv_attention_with_a_sliding_window_matches_numpy(windowed_libs: Any,
                                                          case: tuple[int, ...],
                                                          isa: str) -> None:
    *sizes, w = case
    lib, call = windowed_libs[w]
    _check_kv_attention(lib, call, *sizes, window=w, isa=isa)
