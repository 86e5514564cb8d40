"""The float32 matrix product family ``gemm`` (``plait_gemm.c``): its call interface.

``plait_gemm(const plait_gemm_problem*)`` (``plait_gemm.h``) computes a (batched)
product ``C = A @ B`` after BLIS: panels of :data:`MR` rows of A and :data:`NR`
columns of B stream through a 6x16 register tile (``plait_tile.h``), threads from the
library's pool; A strided, B strided or packed at compile time (:func:`pack_b`), and
an epilogue applied to each tile as it is stored: a bias per row or column, a residual,
relu, then one activation (:data:`ACT_CLIP`, :data:`ACT_SILU`, :data:`ACT_GELU`,
:data:`ACT_GELU_TANH`).  The convolution families (``conv``, ``winograd``) and
attention run on the same tile.  This package knows no op: the dispatch rules
(:mod:`plait.target.c.dispatch.gemm`) decide which calls it computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.ir.deferred import deferred_constant
from plait.ir.symbolic import Dim

from ..registry import KernelFamily, register_family
from ..wrapper import DESC, NULL, Buffer, NativeCall, Ref

ACT_NONE, ACT_CLIP, ACT_SILU, ACT_GELU, ACT_GELU_TANH = 0, 1, 2, 3, 4
"""The activations of the native epilogue (``PLAIT_ACT_*`` of ``plait_gemm.h``)."""


MR, NR = 6, 16
"""The register tile of ``plait_gemm.c`` (rows of A per panel, columns of B per panel)."""


def pack_a(w: np.ndarray) -> np.ndarray:
    """The ``M x K`` matrix ``w`` in panels of :data:`MR` rows, ``[ceil(M/MR)][K][MR]``,
    zero-padded (what ``PLAIT_A_PACKED`` reads)."""
    m, k = w.shape
    whole, rest = divmod(m, MR)
    out = np.empty((whole + (rest > 0), k, MR), np.float32)   # written once, no copy
    out[:whole] = w[:whole * MR].reshape(whole, MR, k).transpose(0, 2, 1)
    if rest:
        out[whole, :, :rest] = w[whole * MR:].T
        out[whole, :, rest:] = 0
    return out


def pack_b(b: np.ndarray) -> np.ndarray:
    """The ``K x N`` matrix ``b`` in panels of :data:`NR` columns, ``[ceil(N/NR)][K][NR]``,
    zero-padded (what ``PLAIT_B_PACKED`` reads)."""
    k, n = b.shape
    whole, rest = divmod(n, NR)
    out = np.empty((whole + (rest > 0), k, NR), np.float32)   # written once, no copy
    out[:whole] = b[:, :whole * NR].reshape(k, whole, NR).transpose(1, 0, 2)
    if rest:
        out[whole, :, :rest] = b[:, whole * NR:]
        out[whole, :, rest:] = 0
    return out


def unpack_a(p: np.ndarray, m: int) -> np.ndarray:
    """The ``M x K`` matrix :func:`pack_a` packed into ``p``, bit for bit (padding
    dropped), C-contiguous: one copy.  Also the ``N x K`` matrix whose transpose
    :func:`pack_b` packed (its panels are laid out alike)."""
    g, k, r = p.shape
    return p.transpose(0, 2, 1).reshape(g * r, k)[:m]


def unpack_b(p: np.ndarray, n: int) -> np.ndarray:
    """The ``K x N`` matrix :func:`pack_b` packed into ``p``, bit for bit (padding
    dropped), C-contiguous: one copy."""
    g, k, nr = p.shape
    out = np.empty((k, n), p.dtype)
    for j in range(g):
        cols = min(nr, n - j * nr)
        out[:, j * nr:j * nr + cols] = p[j, :, :cols]
    return out


def _exact(w: np.ndarray) -> bool:
    """Whether packing keeps ``w``'s elements as they are (float32: no rounding), so
    that the original can be unpacked from the panels bit for bit."""
    return w.dtype == np.float32


def _grouped(pack: Any, unpack: Any, m: int, k: int, groups: int) -> tuple[Any, Any]:
    """``pack`` (an ``M x K`` matrix -> panels) and ``unpack`` (panels, rows -> the
    matrix) applied group by group: the ``M / groups`` rows of each group packed on
    their own, the groups' panels one after the other (a grouped convolution's
    weights, ``plait_conv2d_desc.G``)."""
    if groups == 1:
        return (lambda w: pack(w)), (lambda p: unpack(p, m))
    rows = m // groups

    def make(w: np.ndarray) -> np.ndarray:
        out = None   # the groups' panels written into one array, not concatenated: a
        for g in range(groups):   # concatenation would hold them all twice
            panels = pack(w[g * rows:(g + 1) * rows])
            if out is None:
                out = np.empty((groups * len(panels), *panels.shape[1:]), panels.dtype)
            out[g * len(panels):(g + 1) * len(panels)] = panels
        return out

    def inverse(p: np.ndarray) -> np.ndarray:
        per = p.shape[0] // groups
        return np.ascontiguousarray(   # (numpy keeps the parts' order: F for views)
            np.concatenate([unpack(p[g * per:(g + 1) * per], rows) for g in range(groups)]))

    return make, inverse


def packed_a_constant(w: np.ndarray, *, groups: int = 1) -> Any:
    """A constant of :func:`pack_a` of ``w`` seen as ``M x K`` (``M = w.shape[0]``),
    computed when code generation first reads it (:mod:`plait.ir.deferred`): the
    pipeline holds the original only, and the original's memory goes once it is packed
    and nothing else holds it.  Unpacking restores ``w`` exactly (float32).  With
    ``groups`` the ``M / groups`` rows of each group are packed on their own, group
    after group (a grouped convolution's weights: ``[groups][ceil(M/groups/MR)][K][MR]``)."""
    shape = w.shape
    m = int(shape[0])
    k = int(w.size) // m if m else 0
    if groups < 1 or m % groups:
        raise ValueError(f"packed_a_constant: {m} rows do not split into {groups} groups")
    pack, unpack = _grouped(pack_a, unpack_a, m, k, groups)

    def make(src: np.ndarray) -> np.ndarray:
        return pack(np.asarray(src, np.float32).reshape(m, k))

    def inverse(p: np.ndarray) -> np.ndarray:
        return unpack(p).reshape(shape)

    return deferred_constant(w, make, (groups * -(-(m // groups) // MR), k, MR), np.float32,
                             inverse=inverse if _exact(w) else None)


def packed_b_constant(w: np.ndarray, *, transposed: bool = False, groups: int = 1) -> Any:
    """A constant of :func:`pack_b` of ``w`` (``K x N``), or with ``transposed`` of
    ``w`` seen as ``N x K`` (``N = w.shape[0]``: linear's and a convolution's weights)
    and transposed; computed when first read, as :func:`packed_a_constant`.  ``groups``
    (``transposed`` only): each group's ``N / groups`` columns packed on their own,
    group after group (``[groups][ceil(N/groups/NR)][K][NR]``)."""
    shape = w.shape
    if transposed:
        n = int(shape[0])
        k = int(w.size) // n if n else 0
    else:
        k, n = (int(d) for d in shape)
    if groups < 1 or n % groups or (groups > 1 and not transposed):
        raise ValueError(f"packed_b_constant: {n} columns do not split into {groups} "
                         "groups (groups need transposed=True and N a multiple of groups)")
    if transposed:
        pack, unpack = _grouped(lambda rows: pack_b(rows.T), unpack_a, n, k, groups)
    else:
        pack, unpack = (lambda f: pack_b(f)), (lambda p: unpack_b(p, n))

    def make(src: np.ndarray) -> np.ndarray:
        f = np.asarray(src, np.float32)
        return pack(f.reshape(n, k) if transposed else f)

    def inverse(p: np.ndarray) -> np.ndarray:
        return unpack(p).reshape(shape)

    return deferred_constant(w, make, (groups * -(-(n // groups) // NR), k, NR), np.float32,
                             inverse=inverse if _exact(w) else None)


@dataclass(frozen=True)
class Epilogue:
    """What a product (or convolution) does to each tile as it stores it, in order: add
    the ``bias`` (a buffer of that shape: one value per row or column), add the
    residual ``res`` (a buffer of that shape, read as the output), ``relu``, then the
    activation ``act`` (``ACT_CLIP`` to ``[act_lo, act_hi]``, ``ACT_SILU``,
    ``ACT_GELU``, ``ACT_GELU_TANH``)."""

    bias: tuple[Dim, ...] | None = None
    res: tuple[Dim, ...] | None = None
    relu: bool = False
    act: int = ACT_NONE
    act_lo: float = -math.inf
    act_hi: float = math.inf

    def buffers(self) -> list[Buffer]:
        """The epilogue's buffers, in the wrappers' order (bias, then residual)."""
        out = []
        if self.bias is not None:
            out.append(Buffer("bias", self.bias))
        if self.res is not None:
            out.append(Buffer("res", self.res))
        return out

    def bias_ref(self) -> Ref:
        return Ref("bias") if self.bias is not None else NULL

    def res_ref(self) -> Ref:
        return Ref("res") if self.res is not None else NULL

    def act_fields(self) -> tuple[tuple[str, Any], ...]:
        """The activation's descriptor fields (none without one)."""
        if not self.act:
            return ()
        return (("act", self.act), ("act_lo", float(self.act_lo)),
                ("act_hi", float(self.act_hi)))


def gemm_call(a: tuple[Dim, ...], b: tuple[Dim, ...], out: tuple[Dim, ...], *, M: Any, N: Any,
              K: Any, lda_r: Any, lda_c: Any, b_packed: bool, ldb_r: Any, ldb_c: Any,
              batch: Any, a_bs: Any, b_bs: Any, c_bs: Any, epilogue: Epilogue,
              max_threads: int = 0, split: int = 0, kc: int = 0, mc: int = 0,
              nc: int = 0) -> NativeCall:
    """The call of ``plait_gemm``: ``batch`` products ``out = epilogue(A @ B)`` of ``M x
    K`` by ``K x N`` (A read at ``a[i * lda_r + k * lda_c]``, B packed by
    :func:`pack_b` or at ``b[k * ldb_r + j * ldb_c]``; matrix ``i`` of the batch at
    ``a + i * a_bs``, ``b + i * b_bs``, ``out + i * c_bs``), the bias per column;
    ``a``, ``b`` and ``out`` the buffers' shapes; sizes may be symbolic; ``max_threads``
    caps the threads (0: the pool's count) and ``split`` (``PLAIT_SPLIT_*``: 0 the
    kernel's rule) chooses how they share the work, ``kc``, ``mc`` and ``nc`` the block
    sizes of the sum, the rows and the columns (0: the kernel's; ``kc`` at most 384,
    ``mc`` a multiple of :data:`MR`, ``nc`` of :data:`NR`) — a tuned point's,
    :mod:`plait.target.c.tuning`."""
    ep = epilogue
    desc = (("M", M), ("N", N), ("K", K), ("a_kind", Ref("PLAIT_A_STRIDED")), ("a", Ref("in0")),
            ("lda_r", lda_r), ("lda_c", lda_c),
            ("b_kind", Ref("PLAIT_B_PACKED" if b_packed else "PLAIT_B_STRIDED")),
            ("b", Ref("in1")), ("ldb_r", ldb_r), ("ldb_c", ldb_c), ("c", Ref("out")),
            ("ldc", N), ("bias_kind", Ref("PLAIT_BIAS_COL" if ep.bias is not None
                                          else "PLAIT_BIAS_NONE")),
            ("bias", ep.bias_ref()), ("res", ep.res_ref()), ("relu", ep.relu),
            *ep.act_fields(), ("batch", batch), ("a_bs", a_bs), ("b_bs", b_bs),
            ("c_bs", c_bs), *((("max_threads", int(max_threads)),) if max_threads else ()),
            *((("split", int(split)),) if split else ()),
            *((k, int(v)) for k, v in (("kc", kc), ("mc", mc), ("nc", nc)) if v))
    buffers = (Buffer("in0", a), Buffer("in1", b), *ep.buffers(), Buffer("out", out, out=True))
    return NativeCall("gemm", "plait_gemm", buffers, (DESC,), "plait_gemm_problem", desc)


register_family(KernelFamily("gemm", "plait_gemm.c", ("plait_gemm",), package=__name__,
                             header="plait_gemm.h"))

__all__ = ["ACT_CLIP", "ACT_GELU", "ACT_GELU_TANH", "ACT_NONE", "ACT_SILU", "MR", "NR",
           "Epilogue", "gemm_call", "pack_a", "pack_b", "packed_a_constant",
           "packed_b_constant", "unpack_a", "unpack_b"]
