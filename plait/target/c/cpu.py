"""What the ``c`` target's native kernels run on this CPU, and forcing a variant.

Every kernel family of a library (:mod:`plait.target.c.kernels`, and the generated
kernels) holds one copy per instruction set (ISA) of the architecture; the library picks
one per family when it is loaded: the best copy the CPU runs, capped by ``PLAIT_ISA``
(``plait_isa.c``).

* :func:`cpu_features` — the CPU's ISAs and the copy each family would run, and why;
* :func:`library_isas` — the copies the libraries of an executable actually run;
* :func:`use_isa` — run every loaded (and later loaded) library with its copies capped at
  one ISA (tests; ``PLAIT_ISA`` does the same for a whole process);
* :func:`build_isas` — the copies a build compiles (the target attribute ``isas``, else
  ``PLAIT_BUILD_ISAS``): every copy of the architecture, or only those this CPU runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from plait.codegen.c.emit import KERNELS_FAMILY
from plait.codegen.c.variants import ENV_VAR, FLOAT_ISAS, ISAS, arch_isas, host_arch

from .kernels import FAMILIES


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _why(report: dict[str, Any]) -> str:
    if report.get("cap") and not report.get("error"):
        return f"the best copy allowed by {report['source']}={report['cap']}"
    return "the best copy this CPU runs"


def _probe_report() -> dict[str, Any]:
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


def cpu_features() -> dict[str, Any]:
    """The running CPU's instruction sets and the copy each kernel family runs here.

    Keys: ``cpu`` (its name), ``arch``, ``features`` (``avx2_fma``, ``avx512`` (F, BW,
    DQ, VL), ``avx512vnni``, ``avxvnni``, ``neon``: bools), ``supported`` (the ISAs the
    CPU runs, best first), ``allowed`` (those ``PLAIT_ISA`` leaves), ``cap``/``source``
    (the cap in force and the variable that set it, or None), ``error`` (why the cap was
    refused, or None: then loading a model raises it) and ``families``: for each family
    (the registered ones and the generated ``kernels``) ``built`` (its copies here),
    ``chosen`` and ``why``.  The copies a model's library really runs:
    :func:`library_isas`.  Needs a C compiler the first time (the probe library is
    cached)."""
    report = _probe_report()
    allowed = report["allowed"]
    families: dict[str, dict[str, Any]] = {}
    lists = {name: fam.isas for name, fam in FAMILIES.items()}
    lists[KERNELS_FAMILY] = FLOAT_ISAS
    for name, isas in sorted(lists.items()):
        built = list(arch_isas(report["arch"], isas))
        chosen = next((i for i in built if i in allowed), "baseline")
        families[name] = {"built": built, "chosen": chosen, "why": _why(report)}
    return {"cpu": _cpu_name(), "arch": report["arch"],
            "features": {k: bool(v) for k, v in report["cpu"].items()},
            "supported": report["supported"], "allowed": allowed, "cap": report["cap"],
            "source": report["source"], "error": report["error"], "families": families}


def library_isas(exe: Any) -> dict[str, dict[str, Any]]:
    """The kernel families of the native libraries of executable ``exe`` (loading them):
    ``{family: {"built", "chosen", "why"}}`` — the copy each runs now."""
    from plait.runtime.native import is_plait_library, load_bytes_without_isa_check

    out: dict[str, dict[str, Any]] = {}
    for blob in exe.libs.values():
        if not isinstance(blob, bytes | bytearray) or not is_plait_library(bytes(blob)):
            continue
        report = load_bytes_without_isa_check(bytes(blob)).isa_report()
        if report is None:
            continue
        for fam in report["families"]:
            out[fam["name"]] = {"built": fam["built"], "chosen": fam["chosen"],
                                "why": _why(report)}
    return out


def describe(features: dict[str, Any], actual: dict[str, dict[str, Any]] | None = None
             ) -> list[str]:
    """Lines describing :func:`cpu_features` (and, if given, a model's
    :func:`library_isas`) for people: what ``plait run --verbose`` prints."""
    have = [k for k, v in features["features"].items() if v]
    lines = [f"cpu: {features['cpu']} ({features['arch']}; "
             f"{', '.join(have) or 'no SIMD extensions'})",
             f"instruction sets: {', '.join(features['supported'])}"]
    if features["error"]:
        lines.append(f"PLAIT_ISA refused: {features['error']}")
    elif features["cap"]:
        lines.append(f"capped by {features['source']}={features['cap']}: "
                     f"{', '.join(features['allowed'])}")
    if actual is not None and not actual:
        lines.append("kernel families of the model: none (it runs no native kernels)")
        return lines
    fams = actual if actual is not None else features["families"]
    label = "kernel families of the model" if actual is not None else "kernel families"
    lines.append(f"{label}: " + ", ".join(
        f"{n} {f['chosen']}" for n, f in sorted(fams.items())))
    return lines


BUILD_ENV_VAR = "PLAIT_BUILD_ISAS"
"""The environment variable giving the ``c`` target's attribute ``isas`` when a target
does not set it (``host`` in the test suite)."""

_HOST_SUPPORTED: list[tuple[str, ...]] = []


def _host_supported() -> tuple[str, ...]:
    if not _HOST_SUPPORTED:
        _HOST_SUPPORTED.append(tuple(_probe_report()["supported"]))
    return _HOST_SUPPORTED[0]


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


@contextmanager
def use_isa(isa: str | None) -> Iterator[None]:
    """Run the ``c`` target's kernels capped at instruction set ``isa`` inside the block:
    every loaded native library re-chooses its families' copies, and ``PLAIT_ISA`` is set
    for the libraries loaded meanwhile (None: the CPU's best).  ``ValueError`` naming the
    choices when the CPU lacks ``isa`` or it is unknown.  Not while another thread runs
    native code."""
    from plait.runtime.native import loaded_libraries

    old = os.environ.get(ENV_VAR)
    if isa is not None:
        report = _probe_report()
        if isa not in report["supported"]:
            raise ValueError(f"cannot run the kernels as {isa!r}: this CPU "
                             f"({report['arch']}) runs {', '.join(report['supported'])}")
        os.environ[ENV_VAR] = isa
    else:
        os.environ.pop(ENV_VAR, None)
    try:
        for lib in loaded_libraries():
            if lib.isa_report() is not None:
                lib.force_isa(None)   # as the environment now says
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old
        for lib in loaded_libraries():
            if lib.isa_report() is not None:
                lib.force_isa(None)


__all__ = ["BUILD_ENV_VAR", "build_isas", "cpu_features", "describe", "isas_choice",
           "library_isas", "use_isa"]
