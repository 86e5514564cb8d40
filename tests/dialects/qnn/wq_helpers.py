"""The tolerance of weight-only quantized products (the float32 summation bound), and
the module of ``qnn.matmul_nbits`` cases the kernel tests build."""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.dialects.qnn import nbits
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant, Tuple
from plait.op import make_call

U = 2.0**-24
"""The unit roundoff of float32."""


def assert_close(got: np.ndarray, want: np.ndarray, a: np.ndarray, w_nk: np.ndarray,
                 what: str = "") -> None:
    """``got`` equals ``want`` (both ``a @ w_nk.T`` of the same float32 weight summed in
    some order) within ``4 K u (|a| @ |w_nk|^T)`` elementwise."""
    k = w_nk.shape[1]
    a2 = np.asarray(a, np.float64).reshape(-1, k)
    bound = 4 * k * U * (np.abs(a2) @ np.abs(w_nk.astype(np.float64)).T)
    g = np.asarray(got, np.float64).reshape(bound.shape)
    w = np.asarray(want, np.float64).reshape(bound.shape)
    err = np.abs(g - w)
    assert np.all(err <= bound + 1e-30), f"{what}: max error {err.max()}, bound {bound.max()}"


NbitsCase = tuple[int, int, int, int, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]
"""(K, N, bits, block_size, packed weights, scales, zero points, bias or None)."""


def nbits_cases(rng: np.random.Generator,
                configs: list[tuple[int, int, int, int, bool, bool]]) -> list[NbitsCase]:
    """Per ``(K, N, bits, block_size, symmetric, bias)``: a random ``N x K`` weight
    quantized by ``nbits.quantize_blockwise``, then a random bias where asked."""
    cases: list[NbitsCase] = []
    for k, n, bits, bs, sym, has_bias in configs:
        w = rng.standard_normal((n, k)).astype(np.float32)
        b, s, z = nbits.quantize_blockwise(w, bits, bs, symmetric=sym)
        bias = rng.standard_normal(n).astype(np.float32) if has_bias else None
        cases.append((k, n, bits, bs, b, s, z, bias))
    return cases


def nbits_module(cases: list[NbitsCase], accuracy_level: int = 0,
                 shared_input: bool = False) -> Any:
    """One module: each case's ``qnn.matmul_nbits`` (at ``accuracy_level``) on an input
    of its own with symbolic rows ``m`` (``shared_input``: all on one input, the cases
    of one K), the results returned as one tuple."""
    params = [Var(f"x{i}", TensorType(("m", c[0]), "float32")) for i, c in enumerate(cases)]
    if shared_input:
        params = params[:1]
    calls = []
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            inputs = params * len(cases) if shared_input else params
            for x, (k, n, bits, bs, b, s, z, bias) in zip(inputs, cases, strict=True):
                args = [x, Constant(b), Constant(s), Constant(z)] + (
                    [Constant(bias)] if bias is not None else [])
                calls.append(bb.emit(make_call("qnn.matmul_nbits", *args, K=k, N=n,
                                               bits=bits, block_size=bs,
                                               accuracy_level=accuracy_level)))
            out = bb.emit_output(Tuple(tuple(calls)))
        bb.emit_func_output(out)
    return bb.get()
