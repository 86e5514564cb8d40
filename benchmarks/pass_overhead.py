"""Overhead of the pass manager itself.

A pipeline of 100 trivial function passes runs over a module with one function of
10,000 bindings, once through ``Sequential`` (context lookup, skip decisions, phase
validation, error wrapping, external-function checks; no instruments) and once by
calling each pass's ``transform_function`` directly.  The difference is the manager's
overhead; the goal is under 5% of the passes' own time.

Two trivial passes are measured: ``VisitBindings`` (walks every binding, rewrites
nothing -- the cheapest pass that looks at the whole function) and ``NoOpMutator``
(an ExprMutator that rebuilds nothing -- the cheapest rewriting pass).  The overhead
is also measured directly with a pipeline of passes that return at once.

    python benchmarks/pass_overhead.py [--bindings 10000] [--passes 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from plait.ir import BlockBuilder, Function, IRModule, TensorType, Var
from plait.ir.visitor import ExprMutator
from plait.ir.walk import iter_bindings
from plait.op import make_call
from plait.transform import PassContext, Sequential, function_pass


def make_module(n: int) -> IRModule:
    """One function ``main`` with a dataflow chain of ``n`` bindings (relu/add)."""
    bb = BlockBuilder()
    x = Var("x", TensorType((4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(n - 1):
                v = bb.emit(make_call("relu", v) if i % 2 else make_call("add", v, x))
            out = bb.emit_output(make_call("relu", v))
        bb.emit_func_output(out)
    return bb.get().with_phase("optimization")


@function_pass(name="bench.VisitBindings", register=False)
def visit_bindings(func: Function) -> Function:
    """Walk every binding; rewrite nothing."""
    n = 0
    for b, _ in iter_bindings(func):
        if b.var.ty is not None:
            n += 1
    return func


@function_pass(name="bench.NoOpMutator", register=False)
def noop_mutator(func: Function) -> Function:
    """Rebuild the function with an ExprMutator that changes nothing."""
    return ExprMutator().visit_function(func)


@function_pass(name="bench.Empty", register=False)
def empty(func: Function) -> Function:
    """Return at once: what is left is the manager's own time."""
    return func


def interleaved_best(repeat: int, *fns: Callable[[], object]) -> list[float]:
    """Best time of each of ``fns`` over ``repeat`` rounds, run alternately so that
    load from other processes hits them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def measure(mod: IRModule, pass_: object, n_passes: int, repeat: int) -> tuple[float, float]:
    """(seconds through Sequential, seconds calling transform_function directly)."""
    pipeline = Sequential([pass_] * n_passes, name="bench")  # type: ignore[list-item]
    ctx = PassContext.current()
    funcs = list(mod.graph_functions())

    def direct() -> None:
        for _ in range(n_passes):
            for _name, f in funcs:
                pass_.transform_function(f, mod, ctx)  # type: ignore[attr-defined]

    def managed() -> None:
        pipeline(mod)

    t_managed, t_direct = interleaved_best(repeat, managed, direct)
    return t_managed, t_direct


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bindings", type=int, default=10_000)
    ap.add_argument("--passes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    mod = make_module(args.bindings)
    print(f"module: 1 function, {args.bindings} bindings; pipeline: {args.passes} passes; "
          f"best of {args.repeat}")
    t_empty, _ = measure(mod, empty, args.passes, args.repeat)
    per_pass = t_empty / args.passes
    print(f"manager cost per pass (empty pass through Sequential): {per_pass * 1e6:.1f} us")
    print(f"{'pass':<18}{'direct (ms)':>14}{'Sequential (ms)':>18}{'overhead':>10}"
          f"{'empty/direct':>14}")
    worst = 0.0
    for p in (visit_bindings, noop_mutator):
        t_managed, t_direct = measure(mod, p, args.passes, args.repeat)
        overhead = (t_managed - t_direct) / t_direct
        ratio = t_empty / t_direct
        worst = max(worst, ratio)
        print(f"{p.info.name:<18}{t_direct * 1e3:>14.1f}{t_managed * 1e3:>18.1f}"
              f"{overhead * 100:>9.2f}%{ratio * 100:>13.3f}%")
    verdict = "meets" if worst < 0.05 else "MISSES"
    print(f"pass-manager overhead ratio (empty pipeline / cheapest passes' own time): "
          f"{worst * 100:.3f}% -- {verdict} the < 5% goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
