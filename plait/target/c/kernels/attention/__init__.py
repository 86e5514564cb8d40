"""The fused attention family ``attention`` (``plait_attention.c``): its call interface.

``plait_attention(const plait_attention_desc*, q, k, v, mask, out)`` (``plait_gemm.h``)
computes ``softmax(scale * q @ k^T [+ mask]) @ v`` per batch and head, a block of query
rows at a time on ``plait_gemm.c``'s register tile, the scores never stored whole.  Each
operand is read through strides (its offset and the strides of batch, head, sequence
and feature), so the views and head transposes around attention cost nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.ir.symbolic import Dim

from ..registry import KernelFamily, register_family
from ..wrapper import DESC, NULL, Buffer, NativeCall, Ref

ATTENTION_FIELDS = ("B", "H", "SQ", "SK", "D", "DV",
                    "q_off", "q_sb", "q_sh", "q_ss", "q_sd",
                    "k_off", "k_sb", "k_sh", "k_ss", "k_sd",
                    "v_off", "v_sb", "v_sh", "v_ss", "v_sd",
                    "o_sb", "o_sh", "o_ss", "scale",
                    "m_off", "m_sb", "m_sh", "m_si", "m_sj", "mask_scale",
                    "zero_masked_rows")
"""The fields of ``plait_attention_desc``, in order."""


def attention_call(q: tuple[Dim, ...], k: tuple[Dim, ...], v: tuple[Dim, ...],
                   mask: tuple[Dim, ...] | None, out: tuple[Dim, ...],
                   desc: Mapping[str, Any]) -> NativeCall:
    """The call of ``plait_attention`` on buffers of the shapes ``q``, ``k``, ``v``,
    ``mask`` (None: no mask) and ``out``, read through the offsets and strides of
    ``desc`` (the :data:`ATTENTION_FIELDS`; the scales float32)."""
    fields = tuple((f, float(desc[f]) if "scale" in f else desc[f]) for f in ATTENTION_FIELDS)
    buffers = [Buffer("q", q), Buffer("k", k), Buffer("v", v)]
    if mask is not None:
        buffers.append(Buffer("m", mask))
    buffers.append(Buffer("out", out, out=True))
    args = (DESC, Ref("q"), Ref("k"), Ref("v"), Ref("m") if mask is not None else NULL,
            Ref("out"))
    return NativeCall("attention", "plait_attention", tuple(buffers), args,
                      "plait_attention_desc", fields)

register_family(KernelFamily("attention", "plait_attention.c", ("plait_attention",),
                             package=__name__, header="plait_gemm.h"))

__all__ = ["ATTENTION_FIELDS", "attention_call"]
