"""The benchmarks' figures in docs/performance.md, written by the benchmarks themselves.

Each benchmark with a ``--write-docs`` flag puts its summary between the markers
``<!-- figures:KEY:begin -->`` and ``<!-- figures:KEY:end -->`` of the page, under one
line naming the command and the machine it ran on (CPU model, vCPUs, the instruction-set
extensions that matter to the kernels, threads per backend, ``PLAIT_ISA`` when set, and
the date in UTC).  tests/test_docs_figures.py checks that nothing else is inside the
markers, so a figure is never edited by hand.

Figures of the kernels depend on the copy of them the CPU runs, so a run on a machine
whose kernels run a copy other than AVX-512 (an AVX2-only CPU, ``PLAIT_ISA=avx2``, Arm)
writes the block ``KEY@ISA`` (``broad@avx2``) instead of ``KEY``: the page keeps one
block per ISA and a run on one machine never overwrites another's.  Figures that do not
depend on the kernels (the pipeline's compile time) pass ``by_isa=False``.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "performance.md"
"""Where ``--write-docs`` writes the current figures."""
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
             "avx512_bf16", "amx_tile", "amx_int8", "asimd", "asimddp")
"""The /proc/cpuinfo flags that decide which copy of a kernel family runs."""


def machine(threads: int) -> str:
    """The machine a run measured: CPU model, vCPUs, the ISA extensions that matter to
    the kernels (from /proc/cpuinfo's flags), the threads of every backend, PLAIT_ISA
    when set, and the date (UTC)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = (", ".join(f for f in ISA_FLAGS if f in flags)
           or "none of " + "/".join(ISA_FLAGS[:3]))
    cap = os.environ.get("PLAIT_ISA")
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{model}, {os.cpu_count()} vCPUs (ISA: {isa}), {threads} threads per backend"
            + (f", PLAIT_ISA={cap}" if cap else "") + f", {date}")


def kernel_isa() -> str:
    """The copy of the kernels this process runs: ``avx512``, ``avx2``, ``neon`` or
    ``baseline`` (the best the CPU supports that ``PLAIT_ISA`` allows; plait's own probe
    decides, so the block a run writes is named by what its kernels really ran)."""
    from plait.target.c.cpu import cpu_features

    allowed = cpu_features()["allowed"]
    return allowed[0] if allowed else "baseline"


def block_key(key: str, by_isa: bool = True, isa: str | None = None) -> str:
    """The block a run of ``key`` writes: ``key`` itself on AVX-512 (and for figures
    that do not depend on the kernels), ``key@ISA`` on any other copy."""
    if not by_isa:
        return key
    isa = kernel_isa() if isa is None else isa
    return key if isa == "avx512" else f"{key}@{isa}"


def _markers(path: Path, key: str) -> tuple[str, str, str]:
    """``path``'s text and the begin and end markers of block ``key``; ValueError when
    the page lacks them."""
    text = path.read_text()
    begin, end = f"<!-- figures:{key}:begin -->", f"<!-- figures:{key}:end -->"
    if begin not in text or end not in text:
        raise ValueError(f"{path}: no {begin} ... {end} markers to write the {key} "
                         "figures between; add them where the figures belong (a run "
                         "whose kernels run another ISA copy writes a block of its own)")
    return text, begin, end


def require_block(path: Path, key: str, by_isa: bool = True) -> None:
    """Raise ValueError, before a run measures anything, when ``path`` has no markers
    for the block this machine's run of ``key`` would write (:func:`block_key`)."""
    _markers(path, block_key(key, by_isa))


def command(script: str, argv: list[str] | None) -> str:
    """The command line that ran ``script`` (``argv``: its arguments; None: this
    process's)."""
    return f"python benchmarks/{script} " + " ".join(sys.argv[1:] if argv is None else argv)


def write_figures(path: Path, key: str, summary: str, cmd: str, threads: int,
                  by_isa: bool = True, isa: str | None = None) -> str:
    """Put ``summary`` under the line naming ``cmd`` and the machine between the
    markers of ``key`` in ``path`` (of ``key@ISA`` when the kernels run a copy other
    than AVX-512 and ``by_isa``: :func:`block_key`; ``isa`` overrides the probe);
    returns what it did.  ValueError when the markers are missing."""
    key = block_key(key, by_isa, isa)
    text, begin, end = _markers(path, key)
    body = (f"{begin}\n*Written by `{cmd.strip()}` on {machine(threads)}.*\n\n"
            f"{summary.strip()}\n{end}")
    head, rest = text.split(begin, 1)
    path.write_text(head + body + rest.split(end, 1)[1])
    return f"wrote the {key} figures into {path}"
