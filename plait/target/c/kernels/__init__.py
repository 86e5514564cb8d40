"""The ``c`` target's native kernel families, one package each.

Every family package holds its C file(s) and the Python description of its call
interface (weight packing, call records, the entry points it defines); it names no op.
Which op calls a family computes is decided by the dispatch rules
(:mod:`plait.target.c.dispatch`).  The registry (:mod:`.registry`) compiles each family
for every instruction set of the machine and records the sources a module's calls use.

Families: ``gemm`` (float32 products), ``conv`` (direct convolutions), ``winograd``,
``attention``, ``pool``, ``dwconv`` (grouped and depthwise convolutions,
squeeze-and-excite), ``qgemm``, ``qconv``, ``qelementwise`` (8-bit products, convolutions and
elementwise ops; package ``int8``), ``wquant`` (weight-only int4/int8 products).
Shared headers (``plait_tile.h``, ``plait_gemm.h``, ``plait_vexp.h``,
``plait_means.h``) sit in this package.
"""

from __future__ import annotations

from . import attention, conv, decode, dwconv, gemm, int8, pool, winograd, wquant  # noqa: F401
from .registry import (
    FAMILIES,
    SHARED_PACKAGE,
    KernelFamily,
    all_family_sources,
    families_called,
    families_header_text,
    family_sources,
    family_text,
    header_text,
    inline_headers,
    record_calls,
    register_family,
)

__all__ = ["FAMILIES", "KernelFamily", "SHARED_PACKAGE", "all_family_sources",
           "families_called", "families_header_text", "family_sources", "family_text",
           "header_text", "inline_headers", "record_calls", "register_family"]
