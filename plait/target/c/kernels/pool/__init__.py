"""The pooling family ``pool`` (``plait_pool.c``): its call interface.

``plait_max_pool2d`` (a ``plait_pool2d_desc``) and the global average pooling (a
``plait_mean_desc``), both declared in ``plait_pool.h``, NCHW, threads over planes.
The AVX-512 copy exists since the separable form, whose loops are all contiguous, so
the wider vectors pay (the tap-by-tap form it replaced was slower in zmm than in ymm:
stride-2 permutes, scalar tails of short rows).
"""

from __future__ import annotations

from ..registry import KernelFamily, register_family

register_family(KernelFamily("pool", "plait_pool.c",
                             ("plait_max_pool2d", "plait_global_avg_pool2d"),
                             package=__name__, header="plait_pool.h"))
