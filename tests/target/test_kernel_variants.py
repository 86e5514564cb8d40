"""Every copy of every native kernel family, on the instruction sets this CPU runs.

Each case is a small model built once for the ``c`` target (its library holds one copy of
each family per instruction set of the architecture); each test runs it with the
families capped at one ISA (``plait.target.c.use_isa``), checks that the library really
runs the copy the cap allows (its ISA report: that ISA's, or for a family without a copy
of it, such as pooling without AVX-512, the best one below) and compares the output with
numpy in float64 — rtol and atol 1e-4 (float32 sums of up to 400 products of values in
[-1, 1]), Winograd 5e-5 of the largest output (its error scales with the outputs),
pooling exact.  Shapes hit the edges: rows and columns that are not multiples of the 6 x
16 tile, K not a multiple of the 4-step unroll and beyond one 384-deep block, channel
counts that are not multiples of the vector width, stride 2, dilation, padding, 1x1
convolutions read in place, the fused pooling, Winograd F(2x2) and F(4x4) with odd image
sizes, attention with odd lengths, and generated elementwise and reduction kernels (that
they give the same bits in every copy: tests/codegen/test_codegen_run.py). ISAs the CPU
lacks are skipped with the reason; grouped convolutions have no native kernel yet (they
go to BLAS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from graph_helpers import (  # tests/target
    build_graph,
    const,
    conv2d_reference,
    emit,
    max_pool_reference,
)

import plait
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas, chosen_copy, host_arch
from plait.runtime import VirtualMachine
from plait.target.c import cpu_features, library_isas, use_isa
from plait.target.c.families import FAMILIES

RNG = np.random.default_rng(5)
ISAS = arch_isas(host_arch(), FLOAT_ISAS)


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


Case = tuple[dict[str, tuple[int, ...]], Callable[..., Any], list[np.ndarray], np.ndarray,
             float, str, dict[str, Any]]


def _matmul() -> Case:
    a, b = _rand(2, 37, 400), _rand(2, 400, 45)
    return ({"a": a.shape, "b": b.shape}, lambda bb, p: emit(bb, "matmul", p[0], p[1]),
            [a, b], np.matmul(a.astype(np.float64), b), 1e-4, "gemm", {})


def _linear() -> Case:
    x, w, bias, r = _rand(5, 13), _rand(17, 13), _rand(17), _rand(5, 17)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "linear", p[0], const(w), const(bias))
        return emit(bb, "relu", emit(bb, "add", y, p[1]))

    ref = np.maximum(x.astype(np.float64) @ w.T + bias + r, 0)
    return {"x": x.shape, "r": r.shape}, body, [x, r], ref, 1e-4, "gemm", {}


def _conv(xshape: tuple[int, ...], wshape: tuple[int, ...], strides: tuple[int, int],
          padding: tuple[int, int, int, int], dilation: tuple[int, int],
          family: str = "conv", epilogue: bool = True, winograd: int = 4) -> Callable[[], Case]:
    def case() -> Case:
        x, w = _rand(*xshape), _rand(*wshape)
        ref = conv2d_reference(x, w, strides, padding, dilation)
        b, r = _rand(wshape[0]), _rand(*ref.shape)

        def body(bb: Any, p: Any) -> Any:
            y = emit(bb, "conv2d", p[0], const(w), strides=strides, padding=padding,
                     dilation=dilation)
            if epilogue:
                y = emit(bb, "add", y, const(b.reshape(-1, 1, 1)))
                y = emit(bb, "relu", emit(bb, "add", y, p[1]))
            return y

        if epilogue:
            ref = np.maximum(ref + b.reshape(1, -1, 1, 1) + r, 0)
        tol = 5e-5 * float(np.abs(ref).max()) if family == "winograd" else 1e-4
        return ({"x": x.shape, "r": r.shape}, body, [x, r], ref, tol, family,
                {"winograd": winograd})
    return case


def _conv_pool() -> Case:
    x, w, b = _rand(1, 3, 6, 16), _rand(7, 3, 3, 3), _rand(7)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1, 1, 1))
        y = emit(bb, "relu", emit(bb, "add", y, const(b.reshape(7, 1, 1))))
        return emit(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2))

    conv = np.maximum(conv2d_reference(x, w, padding=(1, 1, 1, 1)) + b.reshape(1, 7, 1, 1), 0)
    ref = max_pool_reference(conv, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0))
    return {"x": x.shape}, body, [x], ref, 1e-4, "conv", {}


def _attention() -> Case:
    q, k, v = _rand(2, 3, 9, 8), _rand(2, 3, 21, 8), _rand(2, 3, 21, 24)

    def body(bb: Any, p: Any) -> Any:
        kt = emit(bb, "permute_dims", p[1], axes=(0, 1, 3, 2))
        s = emit(bb, "divide", emit(bb, "matmul", p[0], kt),
                 const(np.array([np.sqrt(8.0)], np.float32)))
        return emit(bb, "matmul", emit(bb, "softmax", s, axis=-1), p[2])

    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(8.0)
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True) @ v
    return {"q": q.shape, "k": k.shape, "v": v.shape}, body, [q, k, v], ref, 1e-4, \
        "attention", {}


def _pool(shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
          p: tuple[int, int, int, int]) -> Callable[[], Case]:
    def case() -> Case:
        x = _rand(*shape)
        x.reshape(-1)[::37] = np.nan

        def body(bb: Any, prm: Any) -> Any:
            return emit(bb, "max_pool2d", prm[0], pool_size=k, strides=s, dilation=d,
                        padding=p)

        return ({"x": shape}, body, [x], max_pool_reference(x, k, s, d, p), 0.0, "pool",
                {})
    return case


def _generated() -> Case:
    """softmax and an elementwise chain: generated (fused) kernels, no library call."""
    x = _rand(7, 45)

    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "softmax", p[0], axis=-1)
        return emit(bb, "multiply", emit(bb, "add", y, p[0]), p[0])

    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True) + x64) * x64
    return {"x": x.shape}, body, [x], ref, 1e-5, "kernels", {"gemm": False}


CASES: dict[str, Callable[[], Case]] = {
    "matmul batched, K in two blocks": _matmul,
    "linear + bias + residual + relu, K 13": _linear,
    "conv 5 -> 7 channels, stride 2, padding": _conv(
        (2, 5, 11, 13), (7, 5, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "conv dilation 2, asymmetric padding": _conv(
        (1, 3, 12, 10), (10, 3, 3, 3), (1, 1), (2, 1, 2, 3), (2, 2)),
    "conv 1x1 stride 2, read in place": _conv(
        (1, 6, 7, 9), (5, 6, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    "conv 1x1 pointwise": _conv((1, 7, 5, 6), (9, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "conv + relu + 2x2 max pool on the tile": _conv_pool,
    "winograd F(4x4), odd image": _conv(
        (1, 17, 11, 13), (18, 17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd"),
    "winograd F(2x2), odd image": _conv(
        (1, 17, 9, 15), (19, 17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "winograd", winograd=2),
    "attention, odd lengths": _attention,
    "max pool 3x3 stride 2 padding": _pool((2, 3, 17, 13), (3, 3), (2, 2), (1, 1),
                                          (1, 1, 1, 1)),
    "max pool dilation 2": _pool((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2)),
    "generated softmax and elementwise kernels": _generated,
}


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[Any, list[np.ndarray], np.ndarray, float, str]]:
    """Every case's executable (one library each, holding every copy), inputs, reference,
    tolerance and family, built once."""
    out = {}
    for name, make in CASES.items():
        shapes, body, inputs, ref, tol, family, attrs = make()
        exe = plait.build(build_graph(shapes, body), plait.Target("c", **attrs))
        out[name] = (exe, inputs, ref, tol, family)
    return out


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest) -> str:
    """An instruction set of this architecture (skipped when the CPU lacks it)."""
    supported = cpu_features()["supported"]
    if request.param not in supported:
        pytest.skip(f"this CPU does not run {request.param} (it runs {', '.join(supported)})")
    return str(request.param)


@pytest.mark.parametrize("case", list(CASES))
def test_each_family_matches_numpy_on_every_instruction_set(
        built: dict[str, Any], case: str, isa: str) -> None:
    exe, inputs, ref, tol, family = built[case]
    with use_isa(isa):
        got = VirtualMachine(exe)["main"](*inputs)
        families = library_isas(exe)
    built = arch_isas(host_arch(), FAMILIES[family].isas if family in FAMILIES else FLOAT_ISAS)
    assert families[family]["built"] == list(built)
    assert families[family]["chosen"] == chosen_copy(built, isa)
    if tol == 0.0:
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
