"""The ``c`` target's native kernel families: C files compiled for every instruction set.

Each family is one C file in ``plait/target/c/native`` (products ``plait_gemm.c``,
direct convolutions ``plait_conv.c``, Winograd ``plait_winograd.c``, attention
``plait_attention.c``, pooling ``plait_pool.c``, grouped and depthwise convolutions
``plait_dwconv.c``, 8-bit products ``plait_qgemm.c``)
that plugs into plait's ISA mechanism
(``plait_isa.h``, :mod:`plait.codegen.c.variants`): the model's library holds one copy
per instruction set of the machine's architecture, and the running CPU picks one when
the library is loaded (``PLAIT_ISA`` caps it).  A dispatch pass records the sources of
the families its call wrappers use (:func:`family_sources`, :func:`families_called`) in
the module's ``c_sources``; the files are the same text for every model, so their
objects are compiled once per machine.

A new family (an int8 product, say) is a C file next to these (see docs/kernels.md)
and one :func:`register_family` call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from plait.codegen.c import CFunction, CSource
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas


@dataclass(frozen=True)
class KernelFamily:
    """A native kernel family: ``name`` (as in ``PLAIT_ISA_FAMILY`` and the ISA report),
    its C ``file`` in ``package``, its ``entries`` (the functions its
    ``PLAIT_ISA_DISPATCH`` lines define, which call wrappers use), the ``isas`` it is
    built for and the families it ``needs`` (whose functions its copies call)."""

    name: str
    file: str
    entries: tuple[str, ...]
    isas: tuple[str, ...] = FLOAT_ISAS
    needs: tuple[str, ...] = ()
    package: str = "plait.target.c.native"


FAMILIES: dict[str, KernelFamily] = {}
"""The registered families by name."""


def register_family(family: KernelFamily) -> KernelFamily:
    """Register ``family`` (its name, file and entry points must be new; the families it
    needs must be registered)."""
    if family.name in FAMILIES:
        raise ValueError(f"kernel family {family.name!r} is already registered")
    arch_isas("any", family.isas)   # unknown ISA names fail here
    for other in FAMILIES.values():
        if other.file == family.file:
            raise ValueError(f"kernel family {family.name!r}: {family.file} is already the "
                             f"file of family {other.name!r}")
        same = sorted(set(other.entries) & set(family.entries))
        if same:
            raise ValueError(f"kernel family {family.name!r}: {same[0]} is already an entry "
                             f"point of family {other.name!r}")
    missing = [n for n in family.needs if n not in FAMILIES]
    if missing:
        raise ValueError(f"kernel family {family.name!r} needs {missing}, which are not "
                         "registered; register them first")
    FAMILIES[family.name] = family
    return family


_INCLUDE = re.compile(r'^#include "([^"]+)"\n', re.M)


def _header(name: str, package: str) -> str:
    """The text of a header a family includes: its package's, else the C code
    generator's (``plait_threads.h``, ``plait_isa.h``); ``plait_exp_f32.h`` is the
    generated kernels' ``exp``."""
    from plait.codegen.c.emit import EXP_F32

    if name == "plait_exp_f32.h":
        return EXP_F32 + "\n"
    for pkg in (package, "plait.codegen.c"):
        f = resources.files(pkg).joinpath(name)
        if f.is_file():
            return f.read_text()
    raise FileNotFoundError(f"C header {name!r} is neither in {package} nor in "
                            "plait.codegen.c")


def inline_headers(text: str, package: str = "plait.target.c.native") -> str:
    """``text`` with every ``#include "x.h"`` replaced by the header's text (recursively,
    each header once), so the source is self-contained (a module's ``c_sources``)."""
    seen: set[str] = set()

    def expand(src: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in seen:
                return ""
            seen.add(name)
            return expand(_header(name, package))
        return _INCLUDE.sub(one, src)

    return expand(text)


def header_text(name: str, package: str = "plait.target.c.native") -> str:
    """A family header (``plait_gemm.h``, ``plait_pool.h``) with its includes inlined."""
    return inline_headers(_header(name, package), package)


def family_text(name: str) -> str:
    """The self-contained C text of family ``name`` (its headers inlined)."""
    fam = _family(name)
    return inline_headers(resources.files(fam.package).joinpath(fam.file).read_text(),
                          fam.package)


def _family(name: str) -> KernelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"no kernel family {name!r}; there are "
                       f"{', '.join(sorted(FAMILIES))}") from None


def family_sources(names: Iterable[str]) -> list[CSource]:
    """The C sources of the families ``names`` and of those they need, for a module's
    ``c_sources`` (each a multi-ISA source named by the family's file)."""
    order: list[str] = []
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in order:
            continue
        order.append(n)
        todo.extend(_family(n).needs)
    return [CSource(family_text(n), (), _family(n).file, isas=_family(n).isas)
            for n in sorted(order)]


def families_called(code: str) -> list[str]:
    """The families whose entry points the C ``code`` (call wrappers) calls."""
    return sorted(f.name for f in FAMILIES.values()
                  if any(re.search(rf"\b{e}\s*\(", code) for e in f.entries))


def record_wrappers(mod: Any, wrappers: dict[str, tuple[str, CFunction]], header: str,
                    families: Sequence[str], prefix: str) -> Any:
    """``mod`` with the call wrappers ``{symbol: (C code, CFunction)}`` recorded in its
    ``c_sources`` as one file ``<prefix>_<digest>.c`` (after the family header
    ``header``, e.g. ``plait_pool.h``, and the helpers of run-time sizes,
    :data:`.dims.C_PRELUDE`), and the sources of ``families``."""
    import hashlib

    from .build import add_c_source
    from .dims import C_PRELUDE

    if not wrappers:
        return mod
    names = sorted(wrappers)
    code = (header_text(header) + "\n" + C_PRELUDE + "\n"
            + "\n".join(wrappers[n][0] for n in names))
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    calls = CSource(code, tuple(wrappers[n][1] for n in names), f"{prefix}_{digest}.c")
    for src in family_sources(families):
        mod = add_c_source(mod, src)
    return add_c_source(mod, calls)


def fused_span(graph: Any, members: Sequence[int], root: Any) -> Any:
    """The span of a native call replacing the bindings ``members`` of ``graph`` (the
    product and its epilogue...): ``root``'s place, noting every member's model node, so
    a profile names all the nodes the call computes."""
    from plait.transform.fuse_ops import joined_span

    return joined_span([graph.bindings[i].value.span for i in members], root.value.span)


def all_family_sources(names: Sequence[str] | None = None) -> list[CSource]:
    """The sources of every registered family (or of ``names``): what a benchmark
    compiles once to seed an object cache."""
    return family_sources(names if names is not None else FAMILIES)


register_family(KernelFamily("gemm", "plait_gemm.c", ("plait_gemm",)))
register_family(KernelFamily("conv", "plait_conv.c", ("plait_conv2d", "plait_conv2d_pool",
                                                      "plait_conv2d_pixel_rows"),
                             needs=("gemm",)))
register_family(KernelFamily("winograd", "plait_winograd.c",
                             ("plait_conv2d_winograd", "plait_conv2d_winograd4")))
register_family(KernelFamily("attention", "plait_attention.c", ("plait_attention",)))
# an AVX-512 copy since the separable form, whose loops are all contiguous, so the wider
# vectors pay; the tap-by-tap form it replaced was slower in zmm than in ymm (stride-2
# permutes, scalar tails of short rows), which had kept AVX-512 machines on the AVX2 copy
register_family(KernelFamily("pool", "plait_pool.c", ("plait_max_pool2d",)))
# grouped and depthwise convolutions (:mod:`.depthwise`), squeeze-and-excite
# (:mod:`.squeeze_excite`)
register_family(KernelFamily("dwconv", "plait_dwconv.c", ("plait_dwconv2d", "plait_se_scale")))
# 8-bit products (:mod:`.qgemm`): dot-product instructions where the CPU has them;
# AVX-512 without VNNI widens to int16 (vpmaddwd on zmm)
register_family(KernelFamily("qgemm", "plait_qgemm.c",
                             ("plait_qgemm", "plait_qconv2d", "plait_qconv2d_depthwise",
                              "plait_qadd", "plait_quantize", "plait_dequantize",
                              "plait_dynamic_quantize", "plait_qmul"),
                             isas=("avx512vnni", "avx512", "avxvnni", "avx2", "baseline")))

__all__ = ["FAMILIES", "KernelFamily", "all_family_sources", "families_called",
           "family_sources", "family_text", "header_text", "inline_headers",
           "fused_span", "record_wrappers", "register_family"]
