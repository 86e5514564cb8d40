"""What an inference costs through a single native entry point against the VM path.

    python benchmarks/entry_overhead.py                    # wall clock, interleaved
    python benchmarks/entry_overhead.py --callgrind        # instructions per inference
    python benchmarks/entry_overhead.py --onnx model.onnx  # also an ONNX model (static)

The models: chains of ``N`` layers ``h = relu(h + c_i)`` / ``h = tanh(h + c_i)`` on a
1x64 tensor, each op its own kernel (``Target("c", fuse=False)``: ``2N`` native calls,
``N`` constants), so nearly all of their time is the calls' fixed cost; and any ONNX
models given (imported with their input shapes fixed).  Each is built once for ``c``;
the same executable runs

* ``entry``: ``VirtualMachine(exe)``, one native call per inference (the function's
  single entry point, docs/targets.md);
* ``vm``: ``VirtualMachine(exe, single_entry=False)``, one Python call per kernel.

**Wall clock** (default): the two take turns in blocks of ``--block`` calls after a
warm-up of 20 calls, ``--rounds`` times, in a shuffled order; the figure is the median of
the blocks' per-call times, and the ratio entry/vm is taken per round (then its
median), so both sample the same phases of a shared machine.  No torch is imported.

**Instructions** (``--callgrind``): each (model, path) runs under ``valgrind
--tool=callgrind --collect-atstart=no`` (``PLAIT_NUM_THREADS=1``: no worker threads
spinning): after loading and 5 warm-up inferences, the worker turns collection on
(``CALLGRIND_TOGGLE_COLLECT``, from a tiny C library: it needs valgrind's headers), runs
``--inferences`` inferences and turns it off, so the count is those inferences' alone,
free of the start-up.  Instruction counts do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHAINS = (1, 5, 25, 100)
"""Layers of the synthetic chains (2 native calls each)."""
INFERENCES = 50
"""Inferences counted by callgrind (``--inferences``)."""


def chain_module(layers: int) -> Any:
    """``h = act(h + c_i)`` for ``i < layers``, ``act`` relu then tanh alternately."""
    from plait.ir import BlockBuilder, TensorType, Var, const
    from plait.op import make_call

    rng = np.random.default_rng(layers)
    x = Var("x", TensorType((1, 64), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for i in range(layers):
                c = const(rng.standard_normal((1, 64)).astype(np.float32) * 0.5)
                h = bb.emit(make_call("add", h, c))
                h = bb.emit(make_call("relu" if i % 2 == 0 else "tanh", h))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


def build(model: str) -> tuple[Any, np.ndarray]:
    """The executable of ``model`` (``chain-N`` or an ONNX path) and an input."""
    import plait

    if model.startswith("chain-"):
        exe = plait.build(chain_module(int(model.split("-")[1])), plait.Target("c", fuse=False))
    else:
        import onnx

        from plait.frontend import from_onnx

        graph = onnx.load(model, load_external_data=False).graph
        dims = [d.dim_value or 1 for d in graph.input[0].type.tensor_type.shape.dim]
        exe = plait.build(from_onnx(model, shapes={graph.input[0].name: tuple(dims)}), "c")
    p = exe.functions["main"].params[0]
    x = np.random.default_rng(0).standard_normal(p.shape).astype(p.dtype)
    return exe, x


def wall(models: list[str], rounds: int, block: int) -> list[dict[str, Any]]:
    from plait.runtime import VirtualMachine

    rows = []
    for model in models:
        exe, x = build(model)
        entry = VirtualMachine(exe)
        if entry.entry_point("main") is None:
            print(f"{model}: {entry.execution_path('main')}; skipped")
            continue
        fns = {"entry": entry["main"], "vm": VirtualMachine(exe, single_entry=False)["main"]}
        assert fns["entry"](x).tobytes() == fns["vm"](x).tobytes()
        per_call: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(rounds):
            order = list(fns)
            random.shuffle(order)
            for k in order:
                f = fns[k]
                for _ in range(20):
                    f(x)
                t = time.perf_counter()
                for _ in range(block):
                    f(x)
                per_call[k].append((time.perf_counter() - t) / block)
        ratios = [e / v for e, v in zip(per_call["entry"], per_call["vm"])]
        calls = exe.attrs["single_entry"]["main"]["calls"]
        rows.append({"model": model, "calls": calls,
                     "entry_us": statistics.median(per_call["entry"]) * 1e6,
                     "vm_us": statistics.median(per_call["vm"]) * 1e6,
                     "ratio": statistics.median(ratios)})
    return rows


TOGGLE_SOURCE = r"""
#include <valgrind/callgrind.h>
void plait_bench_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def worker(plx: str, path: str, inferences: int) -> None:
    """Load ``plx``, warm up, then run ``inferences`` inferences on ``path`` (entry or vm)
    with callgrind's collection on (the process that callgrind counts)."""
    import ctypes

    from plait.codegen.c.compiler import compile_shared
    from plait.runtime import Executable, VirtualMachine

    toggle = ctypes.CDLL(str(compile_shared({"plait_bench_toggle.c": TOGGLE_SOURCE})))
    exe = Executable.load(plx)
    vm = VirtualMachine(exe, single_entry=path == "entry")
    p = exe.functions["main"].params[0]
    x = np.random.default_rng(0).standard_normal(p.shape).astype(p.dtype)
    f = vm["main"]
    for _ in range(5):
        f(x)
    toggle.plait_bench_toggle()
    for _ in range(inferences):
        f(x)
    toggle.plait_bench_toggle()


def _instructions(plx: str, path: str, inferences: int) -> float:
    """Instructions per inference of ``path`` on ``plx``, counted by callgrind."""
    env = dict(os.environ, PLAIT_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
           "--callgrind-out-file=/dev/null", sys.executable, __file__, "--worker", plx, path,
           str(inferences)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"valgrind failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1)) / inferences


def callgrind(models: list[str], inferences: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            exe, _ = build(model)
            if "entry" not in str(exe.attrs.get("single_entry", {}).get("main", {})):
                print(f"{model}: no single entry point; skipped")
                continue
            plx = str(Path(tmp) / "model.plx")
            exe.save(plx)
            row: dict[str, Any] = {"model": model,
                                   "calls": exe.attrs["single_entry"]["main"]["calls"]}
            for path in ("entry", "vm"):
                row[f"{path}_instr"] = _instructions(plx, path, inferences)
                print(f"{model} {path}: {row[f'{path}_instr']:,.0f} instructions per "
                      "inference", flush=True)
            row["ratio"] = row["entry_instr"] / row["vm_instr"]
            row["saved_per_call"] = (row["vm_instr"] - row["entry_instr"]) / row["calls"]
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--callgrind", action="store_true", help="count instructions instead")
    p.add_argument("--onnx", action="append", default=[], help="also this ONNX model")
    p.add_argument("--chains", default=",".join(map(str, CHAINS)),
                   help="layers of the synthetic chains (comma-separated; '' for none)")
    p.add_argument("--inferences", type=int, default=INFERENCES,
                   help="inferences that callgrind counts")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--block", type=int, default=200)
    p.add_argument("--worker", nargs=3, metavar=("PLX", "PATH", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
        return 0
    models = [f"chain-{n}" for n in args.chains.split(",") if n] + args.onnx
    if args.callgrind:
        if args.inferences < 1:
            print("--inferences must be at least 1")
            return 2
        rows = callgrind(models, args.inferences)
        print("\n| model | native calls | entry instructions | VM path instructions | "
              "entry / VM | saved per call |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} | {r['calls']} | {r['entry_instr']:,.0f} | "
                  f"{r['vm_instr']:,.0f} | {r['ratio']:.3f} | {r['saved_per_call']:,.0f} |")
        return 0
    rows = wall(models, args.rounds, args.block)
    print("\n| model | native calls | entry µs | VM path µs | entry / VM (median of rounds) |"
          "\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['calls']} | {r['entry_us']:.1f} | {r['vm_us']:.1f} | "
              f"{r['ratio']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
