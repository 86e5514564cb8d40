"""The call interface of ``plait_kv_attention``: attention of new tokens over the
key/value cache as plait.llm keeps it (sequence-major, read in place)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from plait.codegen.c import CFunction
from plait.ir.symbolic import Dim

from ...c_float import c_float
from ...dims import SizeArgs
from .call import DecodeCall


def kv_attention_call(q_shape: Sequence[Dim], past_shape: Sequence[Dim],
                      new_shape: Sequence[Dim], out_shape: Sequence[Dim],
                      scale: float) -> DecodeCall:
    """The wrapper of ``plait_kv_attention`` (parameters q, past keys, past values, new
    keys, new values, out, then the size arguments): ``q`` (B, KV*G, S, D), the cache
    (P, B, KV, D), the new rows (B, KV, S, D), ``out`` (B, KV, G, S, D).
    :class:`~plait.codegen.c.sizes.UnboundSize` when a size is not bound by a parameter."""
    params = [(tuple(q_shape), "float32"), (tuple(past_shape), "float32"),
              (tuple(past_shape), "float32"), (tuple(new_shape), "float32"),
              (tuple(new_shape), "float32"), (tuple(out_shape), "float32")]
    sizes = SizeArgs(params)
    b, kv, g, s, d = (sizes.c(x) for x in out_shape)
    p = sizes.c(past_shape[0])
    args = ["const float* q", "const float* kp", "const float* vp", "const float* kn",
            "const float* vn", "float* out", *sizes.c_params()]
    body = (f"    const plait_kv_attention_desc d = {{{b}, {kv}, {g}, {s}, {p}, {d}, "
            f"q, kp, vp, kn, vn, {c_float(scale)}, out}};\n"
            "    return plait_kv_attention(&d);\n")
    key = repr((sizes.params, c_float(scale)))
    name = f"plait_kv_attention_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    code = f"int {name}({', '.join(args)}) {{\n{body}}}\n"
    return DecodeCall(name, code, CFunction(name, sizes.params, 1, name, "int"))


__all__ = ["kv_attention_call"]
