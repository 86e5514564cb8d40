"""The fused attention family ``attention`` (``plait_attention.c``): its call interface.

``plait_attention(const plait_attention_desc*, q, k, v, mask, out)`` (``plait_gemm.h``)
computes ``softmax(scale * q @ k^T [+ mask]) @ v`` per batch and head, a block of query
rows at a time on ``plait_gemm.c``'s register tile, the scores never stored whole.  Each
operand is read through strides (its offset and the strides of batch, head, sequence
and feature), so the views and head transposes around attention cost nothing.
"""

from __future__ import annotations

from ..registry import KernelFamily, register_family

register_family(KernelFamily("attention", "plait_attention.c", ("plait_attention",),
                             package=__name__, header="plait_gemm.h"))
