"""The ``c`` target's weight-only quantized products (``plait_wquant.c``): the kernel family
``wquant`` and its call wrappers.

``plait_wq_matmul`` computes ``a @ W.T (+ bias)`` with ``W`` (``N x K``) in onnxruntime's
``MatMulNBits`` layout (4 or 8 bits in blocks of ``block_size`` along K, a float scale
and a packed uint8 zero point per block; docs/dialects.md), dequantizing in registers:
a matrix-vector product streaming the packed weights for up to 4 rows (decode), a
tiled product over a dequantized panel of the weights for more (prefill).  Copies for
every float ISA of the machine (AVX-512, AVX2 + FMA, NEON, baseline), one chosen at
load time.

This module knows no op: a dispatch pass (a dialect's) describes each call with
:class:`WQCall` and records the wrappers with :func:`record_calls`.  The rows of ``a``
(the product of its leading dimensions) may be symbolic: prefill and decode run from
one wrapper, which takes them at run time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from plait.codegen.c import CFunction
from plait.ir.expr import Expr
from plait.ir.module import IRModule
from plait.ir.symbolic import Dim

from ...dims import C_PRELUDE, SizeArgs
from ...families import KernelFamily, family_sources, header_text, register_family

PACKAGE = __name__
FAMILY = register_family(KernelFamily("wquant", "plait_wquant.c", ("plait_wq_matmul",),
                                      package=PACKAGE))
"""The family (copies for :data:`plait.codegen.c.variants.FLOAT_ISAS`)."""

_C_TYPES = {"float32": "float", "uint8": "uint8_t"}


@dataclass
class WQCall:
    """A call of ``plait_wq_matmul``: float32 ``a`` of shape ``(..., K)`` (its leading
    sizes may be symbolic), the packed ``b``, ``scales``, ``zero_points`` (and
    ``bias``) of an ``N x K`` weight of ``bits`` in blocks of ``block_size``; the
    output ``(..., N)``."""

    a: Expr
    b: Expr
    scales: Expr
    zero_points: Expr
    bias: Expr | None
    a_shape: tuple[Dim, ...]
    K: int
    N: int
    bits: int
    block_size: int

    def args(self) -> list[Expr]:
        """The call's tensor arguments, in the wrapper's order."""
        return [self.a, self.b, self.scales, self.zero_points] + (
            [self.bias] if self.bias is not None else [])

    def wrapper(self) -> tuple[str, str, CFunction]:
        """(symbol, C code, CFunction); :class:`~plait.codegen.c.sizes.UnboundSize` when a
        size of ``a`` cannot be written from the parameters."""
        names = ["a", "b", "scales", "zp"] + (["bias"] if self.bias is not None else [])
        shapes = [tuple(e.ty.shape) for e in self.args()]  # type: ignore[union-attr]
        dtypes = [e.ty.dtype for e in self.args()]  # type: ignore[union-attr]
        out_shape = tuple(self.a_shape[:-1]) + (self.N,)
        sizes = SizeArgs([*zip(shapes, dtypes), (out_shape, "float32")])
        rows = sizes.prod(self.a_shape[:-1])
        desc = f"{{{rows}, {self.N}, {self.K}, {self.bits}, {self.block_size}}}"
        storage = "static const " if sizes.static else "const "
        params = [f"const {_C_TYPES[t]}* {n}" for n, t in zip(names, dtypes)]
        params += ["float* out", *sizes.c_params()]
        body = (f"{sizes.empty_guard(self.a_shape)}"
                f"    {storage}plait_wq_desc d = {desc};\n"
                f"    return plait_wq_matmul(&d, a, b, scales, zp, "
                f"{'bias' if self.bias is not None else 'NULL'}, out);\n")
        key = repr((body, sizes.params))
        name = f"plait_wq_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        code = f"int {name}({', '.join(params)}) {{\n{body}}}\n"
        return name, code, CFunction(name, sizes.params, 1, name, "int")


def record_calls(mod: IRModule, wrappers: dict[str, tuple[str, CFunction]]) -> IRModule:
    """``mod`` with the call wrappers ``{symbol: (C code, CFunction)}`` recorded in its
    ``c_sources`` as one file (after ``plait_wquant.h`` and the helpers of run-time
    sizes) and the family's source."""
    from plait.codegen.c import CSource

    from ...build import add_c_source

    if not wrappers:
        return mod
    names = sorted(wrappers)
    code = (header_text("plait_wquant.h", PACKAGE) + "\n" + C_PRELUDE + "\n"
            + "\n".join(wrappers[n][0] for n in names))
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    for src in family_sources(["wquant"]):
        mod = add_c_source(mod, src)
    return add_c_source(mod, CSource(code, tuple(wrappers[n][1] for n in names),
                                     f"plait_wquant_calls_{digest}.c"))


__all__ = ["FAMILY", "PACKAGE", "WQCall", "record_calls"]
