"""Cost of the well-formedness check: CPU microseconds per binding of the scaling chain
(``run.py --scaling``'s module) for ``well_formed`` of the module the default pipeline
(numpy) holds after each transition it checks (optimization, lowering, build), and
their sum (what ``transform.check_transitions`` adds to a build).  Each figure is the
best of ``--repeat`` runs, in CPU time (less moved by other processes than wall time).

    python benchmarks/well_formed.py [--bindings 10000] [--repeat 15]

To compare two trees, run it with each on ``PYTHONPATH`` in turn, alternating.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("optimization", "lowering", "build")


def phase_modules(n: int) -> dict[str, Any]:
    """The module the pipeline holds after each transition, building the chain of
    ``n`` bindings for numpy."""
    from run import scaling_module

    import plait
    from plait.transform import PassContext, PassInstrument

    class Keep(PassInstrument):
        def __init__(self) -> None:
            self.mods: dict[str, Any] = {}

        def run_after_pass(self, mod: Any, result: Any, info: Any) -> None:
            if info.kind != "sequential":
                self.mods[result.phase] = result

    keep = Keep()
    with PassContext(instruments=[keep]):
        plait.build(scaling_module(n), "numpy")
    return keep.mods


def best_cpu(fn: Callable[[], object], repeat: int) -> float:
    """The least CPU seconds of ``repeat`` calls of ``fn``."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bindings", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    from plait.ir.well_formed import well_formed

    mods = phase_modules(args.bindings)
    total = 0.0
    for phase in PHASES:
        mod = mods[phase]
        assert well_formed(mod) == [], phase
        t = best_cpu(lambda mod=mod: well_formed(mod), args.repeat)
        total += t
        print(f"{phase:13s} {t / args.bindings * 1e6:6.2f} us/binding")
    print(f"{'sum':13s} {total / args.bindings * 1e6:6.2f} us/binding")


if __name__ == "__main__":
    main()
