"""What the ``c`` target's native kernels run on this CPU, and forcing a variant.

Every kernel family of a library (:mod:`plait.target.c.kernels`, and the generated
kernels) holds one copy per instruction set (ISA) of the architecture; the library picks
one per family when it is loaded: the best copy the CPU runs, capped by ``PLAIT_ISA``
(``plait_isa.c``).

* :func:`cpu_features` — the CPU's ISAs and the copy each family would run, and why;
* :func:`library_isas` — the copies the libraries of an executable actually run;
* :func:`use_isa` — run every loaded (and later loaded) library with its copies capped at
  one ISA (tests; ``PLAIT_ISA`` does the same for a whole process);
* the copies a build compiles (the target attribute ``isas``, else ``PLAIT_BUILD_ISAS``):
  :func:`plait.target.c.isas.build_isas`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from plait.codegen.c.emit import KERNELS_FAMILY
from plait.codegen.c.variants import ENV_VAR, FLOAT_ISAS, arch_isas

from .isas import probe_report
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
    report = probe_report()
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
        report = probe_report()
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


__all__ = ["cpu_features", "describe", "library_isas", "use_isa"]
