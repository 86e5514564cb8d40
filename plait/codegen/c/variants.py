"""Kernel families compiled once per instruction set (ISA), one copy chosen at load time.

A C source that plugs into plait's ISA mechanism (``plait_isa.h``: its entry points are
``PLAIT_ISA_FN(name)``, and it ends with ``PLAIT_ISA_FAMILY`` and one
``PLAIT_ISA_DISPATCH`` per entry point) is given as a :class:`~plait.codegen.c.CSource`
with ``isas``; :func:`isa_copies` turns it into one file per ISA of the compiler's
architecture, each the source preceded by the defines naming its ISA and every copy
built, and by ``plait_isa.h``.  The copies are separate translation units, so the
compiler driver builds (and caches) them as separate objects, concurrently.  When the
library is loaded, ``plait_isa.c`` picks each family's copy from the running CPU, capped
by ``PLAIT_ISA`` (see docs/kernels.md).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import resources

ISAS: dict[str, tuple[str | None, str]] = {
    "avx512vnni": ("x86_64", "AVX-512 F/BW/DQ/VL + AVX512-VNNI"),
    "avx512": ("x86_64", "AVX-512 F/BW/DQ/VL (+ AVX2, FMA)"),
    "avxvnni": ("x86_64", "AVX2 + FMA + AVX-VNNI"),
    "avx2": ("x86_64", "AVX2 + FMA"),
    "neon": ("aarch64", "Advanced SIMD"),
    "baseline": (None, "the architecture's base (x86-64: SSE2; aarch64: no Advanced SIMD)"),
}
"""Every ISA plait knows, best first: name -> (its architecture, None for all; what it
is).  A family runs the first of its copies that the CPU and ``PLAIT_ISA`` allow."""

NEEDS: dict[str, frozenset[str]] = {
    "avx512vnni": frozenset({"avx2_fma", "avx512", "avx512vnni"}),
    "avx512": frozenset({"avx2_fma", "avx512"}),
    "avxvnni": frozenset({"avx2_fma", "avxvnni"}),
    "avx2": frozenset({"avx2_fma"}),
    "neon": frozenset({"neon"}),
    "baseline": frozenset(),
}
"""What each ISA needs from the CPU (the feature names of ``plait_isa_report``'s
``cpu``), as in plait_isa.c: a cap ``PLAIT_ISA=x`` allows the ISAs whose needs are a
part of ``x``'s."""


def allowed_by(cap: str) -> tuple[str, ...]:
    """The ISAs ``PLAIT_ISA=cap`` allows, best first (those of its architecture whose
    needs are a part of the cap's)."""
    arch = ISAS[cap][0]
    return tuple(i for i in ISAS if ISAS[i][0] in (None, arch) and NEEDS[i] <= NEEDS[cap])


def chosen_copy(built: Sequence[str], cap: str) -> str:
    """The copy a family built for ``built`` runs under ``PLAIT_ISA=cap`` on a CPU that
    has everything the cap needs (plait_isa.c's rule: its best copy the cap allows)."""
    allowed = allowed_by(cap)
    return next((i for i in ISAS if i in built and i in allowed), "baseline")


FLOAT_ISAS: tuple[str, ...] = ("avx512", "avx2", "neon", "baseline")
"""The ISAs of plait's float32 families and of the generated kernels."""

ENV_VAR = "PLAIT_ISA"
"""The environment variable that caps every family at one ISA (tests)."""

_ARCH_ALIASES = {"amd64": "x86_64", "x86_64": "x86_64", "x64": "x86_64",
                 "arm64": "aarch64", "aarch64": "aarch64"}


def normalize_arch(name: str) -> str:
    """``x86_64``, ``aarch64`` or the name itself (``uname -m`` or a GNU triple's first
    part: ``x86_64-linux-gnu`` -> ``x86_64``)."""
    first = name.strip().split("-")[0].lower()
    return _ARCH_ALIASES.get(first, first)


def host_arch() -> str:
    """The architecture of this machine (``x86_64``, ``aarch64``, ...)."""
    return normalize_arch(platform.machine() or "unknown")


def arch_isas(arch: str, isas: Sequence[str] = FLOAT_ISAS) -> tuple[str, ...]:
    """The ISAs of ``isas`` that ``arch`` has, in :data:`ISAS` order (the baseline always,
    last)."""
    unknown = [i for i in isas if i not in ISAS]
    if unknown:
        raise ValueError(f"unknown instruction set(s) {unknown}; plait knows "
                         f"{', '.join(ISAS)}")
    arch = normalize_arch(arch)
    return tuple(i for i in ISAS if (i in isas or i == "baseline")
                 and ISAS[i][0] in (None, arch))


def isa_header_text() -> str:
    """``plait_isa.h``, the mechanism's header."""
    return resources.files("plait.codegen.c").joinpath("plait_isa.h").read_text()


def isa_source_text() -> str:
    """``plait_isa.c`` (the choice of each family's copy), its header inlined."""
    text = resources.files("plait.codegen.c").joinpath(ISA_FILE).read_text()
    return text.replace('#include "plait_isa.h"\n', isa_header_text())


ISA_FILE = "plait_isa.c"
"""The file of ``plait_isa.c`` in every library."""


def copy_name(file_name: str, isa: str) -> str:
    """The file of ``isa``'s copy of ``file_name``: the baseline copy keeps the name (it
    holds the family's entry points), the others get ``__<isa>`` before ``.c``."""
    if isa == "baseline":
        return file_name
    stem = file_name[:-2] if file_name.endswith(".c") else file_name
    return f"{stem}__{isa}.c"


def isa_copies(file_name: str, text: str, isas: Sequence[str], arch: str) -> dict[str, str]:
    """One C file per ISA of ``isas`` that ``arch`` has (:func:`arch_isas`): file name
    -> text.  Each is ``text`` after the defines of its ISA and of every copy built and
    after ``plait_isa.h``, and before ``PLAIT_ISA_END``."""
    built = arch_isas(arch, isas)
    defines = "".join(f"#define PLAIT_BUILT_{i.upper()} 1\n" for i in built)
    header = isa_header_text()
    out: dict[str, str] = {}
    for isa in sorted(built, key=lambda i: i != "baseline"):   # the entry points first
        out[copy_name(file_name, isa)] = (
            f"/* plait: the {isa} copy of {file_name} (plait/codegen/c/variants.py) */\n"
            f"#define PLAIT_ISA_{isa.upper()} 1\n{defines}{header}\n{text}\nPLAIT_ISA_END\n")
    return out


__all__ = ["ENV_VAR", "FLOAT_ISAS", "ISAS", "ISA_FILE", "NEEDS", "allowed_by", "arch_isas",
           "chosen_copy", "copy_name",
           "host_arch", "isa_copies", "isa_header_text", "isa_source_text",
           "normalize_arch"]
