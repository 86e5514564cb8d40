"""The registry of the ``c`` target's native kernel families.

A family is a C file (products ``plait_gemm.c``, direct convolutions ``plait_conv.c``,
Winograd ``plait_winograd.c``, attention ``plait_attention.c``, pooling
``plait_pool.c``, grouped and depthwise convolutions ``plait_dwconv.c``, 8-bit products
``plait_qgemm.c``...) in a package of its own under ``plait/target/c/kernels/``, next to
the Python description of its call interface (packing, call records; it names no op).
It plugs into plait's ISA mechanism (``plait_isa.h``, :mod:`plait.codegen.c.variants`):
the model's library holds one copy per instruction set of the machine's architecture,
and the running CPU picks one when the library is loaded (``PLAIT_ISA`` caps it).

Headers resolve from the family's package, then the shared headers of
``plait/target/c/kernels`` (``plait_tile.h``, ``plait_gemm.h``...), then the C code
generator's (``plait_threads.h``, ``plait_isa.h``).  :func:`record_calls` records the
sources of the families a module's call wrappers use in its ``c_sources``; the files
are the same text for every model, so their objects are compiled once per machine.

A new family is a package with its C file and one :func:`register_family` call (see
docs/kernels.md).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass
from importlib import resources
from typing import Any

from plait.codegen.c import CFunction, CSource
from plait.codegen.c.variants import FLOAT_ISAS, arch_isas


@dataclass(frozen=True)
class KernelFamily:
    """A native kernel family: ``name`` (as in ``PLAIT_ISA_FAMILY`` and the ISA report),
    its C ``file`` in ``package``, its ``entries`` (the functions its
    ``PLAIT_ISA_DISPATCH`` lines define, which call wrappers use), the ``isas`` it is
    built for, the families it ``needs`` (whose functions its copies call) and the
    ``header`` that declares its entry points (what call wrappers include)."""

    name: str
    file: str
    entries: tuple[str, ...]
    isas: tuple[str, ...] = FLOAT_ISAS
    needs: tuple[str, ...] = ()
    _: KW_ONLY
    package: str
    header: str


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

SHARED_PACKAGE = "plait.target.c.kernels"
"""The package of the headers several families include (``plait_tile.h``,
``plait_gemm.h``, ``plait_vexp.h``, ``plait_means.h``)."""


def _header(name: str, packages: Sequence[str]) -> str:
    """The text of header ``name``: from the first of ``packages`` that has it, else the
    shared headers, else the C code generator's (``plait_threads.h``, ``plait_isa.h``);
    ``plait_exp_f32.h`` is the generated kernels' ``exp``."""
    from plait.codegen.c.emit import EXP_F32

    if name == "plait_exp_f32.h":
        return EXP_F32 + "\n"
    searched = (*packages, SHARED_PACKAGE, "plait.codegen.c")
    for pkg in searched:
        f = resources.files(pkg).joinpath(name)
        if f.is_file():
            return f.read_text()
    raise FileNotFoundError(f"C header {name!r} is in none of {', '.join(searched)}")


def inline_headers(text: str, packages: Sequence[str] = ()) -> str:
    """``text`` with every ``#include "x.h"`` replaced by the header's text (recursively,
    each header once; resolved as :func:`_header` does), so the source is
    self-contained (a module's ``c_sources``)."""
    seen: set[str] = set()

    def expand(src: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in seen:
                return ""
            seen.add(name)
            return expand(_header(name, packages))
        return _INCLUDE.sub(one, src)

    return expand(text)


def header_text(names: str | Sequence[str], packages: Sequence[str] = ()) -> str:
    """Headers (``"plait_gemm.h"``, or several) with their includes inlined, each once."""
    names = [names] if isinstance(names, str) else list(names)
    return inline_headers("".join(f'#include "{n}"\n' for n in names), packages)


def families_header_text(names: Iterable[str]) -> str:
    """The interface headers of the families ``names`` (what their call wrappers
    include), with their includes inlined, each once."""
    fams = [_family(n) for n in sorted(set(names))]
    headers = list(dict.fromkeys(f.header for f in fams))
    return header_text(headers, list(dict.fromkeys(f.package for f in fams)))


def family_text(name: str) -> str:
    """The self-contained C text of family ``name`` (its headers inlined)."""
    fam = _family(name)
    return inline_headers(resources.files(fam.package).joinpath(fam.file).read_text(),
                          [fam.package])


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


def record_calls(mod: Any, wrappers: dict[str, tuple[str, CFunction]], prefix: str,
                 funcs: dict[str, Any] | None = None) -> Any:
    """``mod`` (with the rewritten functions ``funcs``, when given) with the call
    wrappers ``{symbol: (C code, CFunction)}`` recorded in its ``c_sources`` as one file
    ``<prefix>_<digest>.c`` (after the interface headers of the families they call and
    the helpers of run-time sizes, :data:`.dims.C_PRELUDE`), and the sources of those
    families; ``mod`` itself when there is nothing to record.  Every dispatch pass of
    every family records its calls with this function."""
    from ..build import add_c_source
    from ..dims import C_PRELUDE

    if funcs is not None:
        if not funcs:
            return mod
        mod = mod.with_functions(funcs)
    if not wrappers:
        return mod
    names = sorted(wrappers)
    body = "\n".join(wrappers[n][0] for n in names)
    families = families_called(body)
    code = families_header_text(families) + "\n" + C_PRELUDE + "\n" + body
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    calls = CSource(code, tuple(wrappers[n][1] for n in names), f"{prefix}_{digest}.c")
    for src in family_sources(families):
        mod = add_c_source(mod, src)
    return add_c_source(mod, calls)


def all_family_sources(names: Sequence[str] | None = None) -> list[CSource]:
    """The sources of every registered family (or of ``names``): what a benchmark
    compiles once to seed an object cache."""
    return family_sources(names if names is not None else FAMILIES)


__all__ = ["FAMILIES", "KernelFamily", "all_family_sources", "families_called",
           "families_header_text", "family_sources", "family_text", "header_text",
           "inline_headers", "record_calls", "register_family", "SHARED_PACKAGE"]
