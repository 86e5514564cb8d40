"""Which ISA copies a ``c`` build compiles (the target attribute ``isas`` and
``PLAIT_BUILD_ISAS``), and the CPU probe every library runs (what this machine runs).

Apart from :mod:`.cpu` (which reports the registered kernel families) so that the build
(:mod:`.build`) reads the choice without importing the families.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from plait.codegen.c.variants import ISAS, host_arch


def probe_report() -> dict[str, Any]:
    """The report of a library holding only ``plait_isa.c`` (built once per machine;
    its CPU probe is the one every library runs)."""
    from plait.codegen.c import compile_shared, emit_library, find_compiler
    from plait.codegen.c.compiler import compiler_arch
    from plait.runtime.native import load_library

    emitted = emit_library({}, arch=compiler_arch(find_compiler()))
    probe = load_library(compile_shared(emitted.files), check_isa=False)
    probe.force_isa(None)   # PLAIT_ISA as it is now (the probe may have been loaded before)
    report = probe.isa_report()
    assert report is not None
    return report


BUILD_ENV_VAR = "PLAIT_BUILD_ISAS"
"""The environment variable giving the ``c`` target's attribute ``isas`` when a target
does not set it (``host`` in the test suite)."""

@functools.cache
def _host_supported() -> tuple[str, ...]:
    """The ISAs this CPU runs (probed once per process)."""
    return tuple(probe_report()["supported"])


def isas_choice(spec: Any = None) -> str | tuple[str, ...]:
    """The value of the ``c`` target's attribute ``isas`` (``spec``; None:
    ``PLAIT_BUILD_ISAS``, else ``"all"``) checked, without probing the CPU: ``"all"``,
    ``"host"`` or the ISAs named, best first, the baseline added.  ``ValueError``
    naming the choices for anything else."""
    where = "target attribute isas"
    if spec is None:
        spec = os.environ.get(BUILD_ENV_VAR) or "all"
        where = BUILD_ENV_VAR
    if isinstance(spec, str):
        word = spec.strip().lower()
        if word in ("all", "host"):
            return word
        names = tuple(n.strip().lower() for n in spec.split(",") if n.strip())
    elif isinstance(spec, list | tuple):
        names = tuple(str(n).lower() for n in spec)
    else:
        raise ValueError(f"{where}={spec!r}: use 'all', 'host' or ISA names "
                         f"({', '.join(ISAS)})")
    unknown = [n for n in names if n not in ISAS]
    if unknown or not names:
        raise ValueError(f"{where}={spec!r}: unknown instruction set(s) {unknown}; use "
                         f"'all', 'host' or names of {', '.join(ISAS)}")
    return tuple(i for i in ISAS if i in names or i == "baseline")


def build_isas(spec: Any = None) -> tuple[str, ...] | None:
    """The ISA copies a ``c`` build compiles, from the target attribute ``isas``
    (``spec``; None: ``PLAIT_BUILD_ISAS``, else ``"all"``): None for ``"all"`` (every
    copy of the compiler's architecture: the library runs its best copy on any CPU),
    this CPU's ISAs for ``"host"`` (the copies it can run: a library that is quicker to
    compile and as fast here, slower on a CPU with more, correct on every CPU since the
    baseline copy is always built), or the ISAs named (a sequence or a comma-separated
    string; the baseline is added).  ``ValueError`` naming the choices for an unknown
    value (:func:`isas_choice`), and for the attribute ``"host"`` when ``$CC`` builds
    for another architecture (a cross build; ``PLAIT_BUILD_ISAS=host`` then builds
    every copy: the variable speaks for builds that run here)."""
    choice = isas_choice(spec)
    if choice == "all":
        return None
    if choice != "host":
        return tuple(choice)
    from plait.codegen.c import find_compiler
    from plait.codegen.c.compiler import compiler_arch

    arch = compiler_arch(find_compiler())
    if arch == host_arch():
        return _host_supported()
    if spec is None:
        return None   # a cross build is for another machine: all its copies
    raise ValueError(f"target attribute isas='host' builds the copies this {host_arch()} "
                     f"CPU runs, but the compiler ($CC) builds for {arch}: use 'all' or "
                     "name that machine's ISAs")


__all__ = ["BUILD_ENV_VAR", "build_isas", "isas_choice", "probe_report"]
