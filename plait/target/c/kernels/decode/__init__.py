"""The ``decode`` kernel family: what batch-1 decoding of a language model needs on the
``c`` target (issue 31, item 3; docs/llm.md).

* ``plait_gemv`` (``plait_decode.c``): the product of a few rows (at most
  :data:`GEMV_MAX_ROWS`) by a weight matrix kept as the model stores it, ``(N, K)``
  row-major, streaming the weights once over the pool's threads;
* ``plait_kv_attention``: attention of the new tokens over the key/value cache in the
  layout :mod:`plait.llm` keeps it (sequence-major, read in place), grouped-query heads
  sharing each key and value row, causal over the new tokens (decode: one query row per
  head; prefill: the prompt).

* ``plait_dlinear``: a ``linear`` (``x @ w.T + bias``, residual added) of run-time rows:
  few rows go to ``plait_gemv``, more (a prefill) to ``plait_gemm`` reading the same
  weights in place (``PLAIT_B_STRIDED``), so the weights are stored once.

:func:`linear_call` describes a call of ``plait_dlinear`` (a
:class:`~plait.target.c.kernels.wrapper.NativeCall`).
"""

from __future__ import annotations

from ..registry import KernelFamily, register_family
from .attention import kv_attention_call
from .call import DecodeCall
from .linear import GEMV_MAX_ROWS, linear_call

FAMILY = register_family(KernelFamily("decode", "plait_decode.c",
                                      ("plait_gemv", "plait_dlinear", "plait_kv_attention"),
                                      needs=("gemm",), package=__name__,
                                      header="plait_decode.h"))

__all__ = ["FAMILY", "GEMV_MAX_ROWS", "DecodeCall", "kv_attention_call", "linear_call"]
