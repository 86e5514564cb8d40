"""The pooling family ``pool`` (``plait_pool.c``): its call interface.

``plait_max_pool2d`` and ``plait_avg_pool2d`` (a ``plait_pool2d_desc``) and the global
average pooling (a ``plait_mean_desc``), all declared in ``plait_pool.h``, NCHW, threads
over planes.
The AVX-512 copy exists since the separable form, whose loops are all contiguous, so
the wider vectors pay (the tap-by-tap form it replaced was slower in zmm than in ymm:
stride-2 permutes, scalar tails of short rows).
"""

from __future__ import annotations

from plait.ir.symbolic import Dim

from ...dims import Prod
from ..registry import KernelFamily, register_family
from ..wrapper import DESC, Buffer, NativeCall, Ref

POOL2D_FIELDS = ("N", "C", "H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW", "PT",
                 "PL")
"""The fields of ``plait_pool2d_desc``, in order."""


def max_pool2d_call(x: tuple[Dim, ...], out: tuple[Dim, ...], window: tuple[int, ...]
                    ) -> NativeCall:
    """The call of ``plait_max_pool2d`` on an NCHW ``x``: ``window`` is ``(KH, KW, SH,
    SW, DH, DW, PT, PL)``."""
    values = (*x, out[2], out[3], *window)
    return NativeCall("max_pool2d", "plait_max_pool2d",
                      (Buffer("x", x), Buffer("out", out, out=True)),
                      (DESC, Ref("x"), Ref("out")), "plait_pool2d_desc",
                      tuple(zip(POOL2D_FIELDS, values)), guard="x")


def avg_pool2d_call(x: tuple[Dim, ...], out: tuple[Dim, ...], window: tuple[int, ...],
                    after: tuple[int, int], count_pad: bool) -> NativeCall:
    """The call of ``plait_avg_pool2d`` on an NCHW ``x``: ``window`` as for
    :func:`max_pool2d_call`, ``after`` the padding ``(PB, PR)`` below and to the right
    (the divisor counts it with ``count_pad``)."""
    values = (*x, out[2], out[3], *window, *after, int(count_pad))
    return NativeCall("avg_pool2d", "plait_avg_pool2d",
                      (Buffer("x", x), Buffer("out", out, out=True)),
                      (DESC, Ref("x"), Ref("out")), "plait_pool2d_desc",
                      tuple(zip(POOL2D_FIELDS + ("PB", "PR", "count_pad"), values)), guard="x")


def global_avg_pool2d_call(x: tuple[Dim, ...], out: tuple[Dim, ...]) -> NativeCall:
    """The call of ``plait_global_avg_pool2d``: the mean of each plane of an NCHW ``x``."""
    fields = (("planes", Prod.of(*x[:2])), ("HW", Prod.of(*x[2:])))
    return NativeCall("global_avg_pool2d", "plait_global_avg_pool2d",
                      (Buffer("x", x), Buffer("out", out, out=True)),
                      (DESC, Ref("x"), Ref("out")), "plait_mean_desc", fields, guard="x")

register_family(KernelFamily("pool", "plait_pool.c",
                             ("plait_max_pool2d", "plait_avg_pool2d",
                              "plait_global_avg_pool2d"),
                             package=__name__, header="plait_pool.h"))

__all__ = ["POOL2D_FIELDS", "avg_pool2d_call", "global_avg_pool2d_call", "max_pool2d_call"]
