"""The call interface of ``plait_gemv``: the C wrapper of one ``linear`` of given
shapes, ``y = x @ w.T (+ bias) (+ res)`` with ``w`` of ``(N, K)`` as stored."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from plait.codegen.c import CFunction
from plait.ir.symbolic import Dim

from ...dims import Prod, SizeArgs
from .call import DecodeCall

GEMV_MAX_ROWS = 4
"""The most rows ``plait_gemv`` takes (``PLAIT_GEMV_MAX_ROWS``); a call with more rows
is a matrix product (``plait_gemm``)."""

def linear_call(x_shape: Sequence[Dim], n: int, k: int, *, bias: bool = False,
                res_shape: Sequence[Dim] | None = None,
                out_shape: Sequence[Dim] | None = None) -> DecodeCall:
    """The wrapper (parameters: x, w[, bias][, res], out, then the size arguments) of
    ``out = x @ w.T (+ bias) (+ res)``: ``x`` of ``x_shape`` (its last
    axis ``k``, the rows the product of the others, possibly symbolic), ``w`` ``(n, k)``
    row-major, ``bias`` ``(n,)``, ``res`` holding the output's elements in its order
    (``res_shape``), ``out`` of ``out_shape`` (default: ``x_shape`` with ``n`` last).
    :class:`~plait.codegen.c.sizes.UnboundSize` when a size is not bound by a parameter."""
    x_shape = tuple(x_shape)
    out_shape = tuple(out_shape) if out_shape is not None else x_shape[:-1] + (n,)
    params: list[tuple[tuple[Dim, ...], str]] = [(x_shape, "float32"), ((n, k), "float32")]
    if bias:
        params.append(((n,), "float32"))
    if res_shape is not None:
        params.append((tuple(res_shape), "float32"))
    params.append((out_shape, "float32"))
    sizes = SizeArgs(params)
    rows = sizes.c(Prod.of(*x_shape[:-1]))
    args = ["const float* x", "const float* w"]
    if bias:
        args.append("const float* bias")
    if res_shape is not None:
        args.append("const float* res")
    args.append("float* out")
    args.extend(sizes.c_params())
    b = "bias" if bias else "NULL"
    r = "res" if res_shape is not None else "NULL"
    body = (
        f"    const int64_t M = {rows};\n"
        "    if (M == 0) return 0;\n"
        "    if (M <= PLAIT_GEMV_MAX_ROWS) {\n"
        f"        const plait_gemv_problem g = {{M, {n}, {k}, x, {k}, w, {b}, {r}, out}};\n"
        "        return plait_gemv(&g);\n"
        "    }\n"
        "    plait_gemm_problem p;\n    memset(&p, 0, sizeof p);\n"
        f"    p.M = M; p.N = {n}; p.K = {k};\n"
        f"    p.a_kind = PLAIT_A_STRIDED; p.a = x; p.lda_r = {k}; p.lda_c = 1;\n"
        f"    p.b_kind = PLAIT_B_STRIDED; p.b = w; p.ldb_r = 1; p.ldb_c = {k};\n"
        f"    p.c = out; p.ldc = {n};\n"
        f"    p.bias_kind = {'PLAIT_BIAS_COL' if bias else 'PLAIT_BIAS_NONE'}; "
        f"p.bias = {b}; p.res = {r};\n"
        "    p.batch = 1;\n"
        "    return plait_gemm(&p);\n")
    key = repr((sizes.params, n, k, bias, res_shape is not None))
    name = f"plait_dlinear_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    code = f"int {name}({', '.join(args)}) {{\n{body}}}\n"
    return DecodeCall(name, code, CFunction(name, sizes.params, 1, name, "int"))


__all__ = ["GEMV_MAX_ROWS", "linear_call"]
