"""The call interface of ``plait_kv_attention``: attention of new tokens over the
key/value cache as plait.llm keeps it (sequence-major, read in place)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.ir.symbolic import Dim

from ..wrapper import DESC, Buffer, NativeCall, Ref, emit_call
from .call import DecodeCall


def kv_attention_call(q_shape: Sequence[Dim], past_shape: Sequence[Dim],
                      new_shape: Sequence[Dim], out_shape: Sequence[Dim],
                      scale: float, window: int = 0) -> DecodeCall:
    """The wrapper of ``plait_kv_attention`` (parameters q, past keys, past values, new
    keys, new values, out, then the size arguments): ``q`` (B, KV*G, S, D), the cache
    (P, B, KV, D), the new rows (B, KV, S, D), ``out`` (B, KV, G, S, D).  ``window`` > 0:
    each query row sees only the last ``window`` positions (itself included; Mistral's
    sliding window); 0: every earlier position.
    :class:`~plait.codegen.c.sizes.UnboundSize` when a size is not bound by a parameter."""
    b, kv, g, s, d = out_shape
    names = ("q", "kp", "vp", "kn", "vn")
    shapes = (q_shape, past_shape, past_shape, new_shape, new_shape)
    buffers = tuple(Buffer(n, tuple(sh)) for n, sh in zip(names, shapes)) + (
        Buffer("out", tuple(out_shape), out=True),)
    desc = (("B", b), ("KV", kv), ("G", g), ("S", s), ("P", past_shape[0]), ("D", d),
            ("W", int(window)), *((n, Ref(n)) for n in names), ("scale", float(scale)),
            ("out", Ref("out")))
    symbol, code, fn = emit_call(NativeCall("kv_attention", "plait_kv_attention", buffers,
                                            (DESC,), "plait_kv_attention_desc", desc,
                                            guard=False))
    return DecodeCall(symbol, code, fn)


__all__ = ["kv_attention_call"]
