"""Throughput of the graph IR: bindings per second for parse, print, visit and
structural equality on a chain of 1k, 10k and 100k bindings.

    python benchmarks/ir_throughput.py            # the table with the goals
    python benchmarks/ir_throughput.py --sizes 1000 10000

The chain is one function whose dataflow block alternates ``add(prev, x)`` and
``relu(prev)`` on a tensor with a symbolic dimension, the shape of a long,
straight-line model.  Each measurement is the best of a few runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plait  # noqa: E402,F401  (registers the ops)
from plait.ir import BlockBuilder, IRModule, TensorType, Var, structural_equal  # noqa: E402
from plait.ir.expr import Call, Op  # noqa: E402
from plait.ir.parser import parse  # noqa: E402
from plait.ir.visitor import ExprVisitor  # noqa: E402

GOALS = {"parse": 20_000, "print": 100_000, "visit": 500_000, "structural_equal": None}
"""Bindings per second each operation must reach (None: no absolute goal)."""

FLAT_RATIO = 2.0
"""Per-binding cost at the largest size may be at most this many times the cost at
the smallest size for the cost to count as flat."""


def chain_module(n: int) -> IRModule:
    """A function whose body is a chain of ``n`` bindings."""
    bb = BlockBuilder()
    x = Var("x", TensorType((1, "n"), "float32"))
    add, relu = Op.get("add"), Op.get("relu")
    with bb.function("main", [x]):
        with bb.dataflow():
            v: Var = x
            for i in range(n - 1):
                v = bb.emit(Call(add, (v, x)) if i % 2 else Call(relu, (v,)), "lv")
            out = bb.emit_output(Call(relu, (v,)), "out")
        bb.emit_func_output(out)
    return bb.get()


class _CountCalls(ExprVisitor):
    def __init__(self) -> None:
        self.calls = 0

    def visit_call(self, node: Call) -> None:
        self.calls += 1


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(n: int, repeat: int = 3) -> dict[str, float]:
    """Seconds for each operation on an ``n``-binding chain (best of ``repeat``)."""
    mod = chain_module(n)
    text = mod.script()
    parsed = parse(text)
    if not structural_equal(mod, parsed):
        raise SystemExit("the parsed chain differs from the built one")

    def visit() -> None:
        v = _CountCalls()
        v.visit(mod)
        assert v.calls == n

    return {
        "parse": _best(lambda: parse(text), repeat),
        "print": _best(mod.script, repeat),
        "visit": _best(visit, repeat),
        "structural_equal": _best(lambda: structural_equal(mod, parsed), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = sorted(args.sizes)
    results = {
        n: measure(n, args.repeat if n < 100_000 else max(1, args.repeat - 1)) for n in sizes
    }

    head = f"{'operation':<18}" + "".join(f"{f'{n:,} b/s':>14}" for n in sizes)
    head += f"{'goal':>10}{'cost ratio':>12}  met"
    print(head)
    print("-" * len(head))
    all_met = True
    for op, goal in GOALS.items():
        rates = [n / results[n][op] for n in sizes]
        per_binding = [results[n][op] / n for n in sizes]
        ratio = per_binding[-1] / per_binding[0]
        flat = ratio <= FLAT_RATIO
        fast = goal is None or min(rates) >= goal
        met = flat and fast
        all_met &= met
        notes = [] if fast else ["below goal"]
        if not flat:
            notes.append("cost not flat")
        goal_text = f"{goal:,}" if goal else "-"
        row = f"{op:<18}" + "".join(f"{r:>14,.0f}" for r in rates)
        row += f"{goal_text:>10}{ratio:>12.2f}  {'yes' if met else 'NO (' + ', '.join(notes) + ')'}"
        print(row)
    print()
    print(
        "b/s = bindings per second (best of runs); cost ratio = per-binding time at "
        f"{sizes[-1]:,} / at {sizes[0]:,} (flat if <= {FLAT_RATIO})"
    )
    return 0 if all_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
