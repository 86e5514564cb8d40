"""A model as a C library (docs/c_api.md) against the same model on the Python VM.

    python benchmarks/c_library.py                  # the three models of tests/clib
    python benchmarks/c_library.py --calls 2000 --rounds 5

The models are those of tests/clib/test_c_library.py: the ResNet-style CNN (batch 2,
3 x 32 x 32) and the transformer encoder layer (batch 2, 16 x 256) of
examples/export_models.py, the int8 MLP (4 x 64) quantized by onnxruntime's tools
(tests/dialects/qnn/qnn_models.py), and the tiny MLP of examples/models (batch 3, the
fixed costs alone).  Each is built for ``c`` once; then

* ``vm``: ``VirtualMachine(exe)["main"](x)`` (the single entry point from Python: the
  argument checks, the workspace and output allocation, ctypes) — the median of
  ``--rounds`` blocks of ``--calls`` calls;
* ``c``: examples/c_api's ``run_model --repeat CALLS`` on the exported library (a
  process without Python; half the calls into library-allocated outputs, half into
  the caller's, each compared with the first call's bytes) — the median of the
  rounds' per-call times;
* the overhead per call is ``vm - c`` (both run the same kernels in the same order);
* the same three in CPU time (``time.process_time`` for the VM; the runner's user +
  system time from ``getrusage(RUSAGE_CHILDREN)``, a run of one call subtracted from
  the run of ``--calls`` so that loading is not counted): on a shared machine the CPU
  figures hold where the wall times swing with the other processes' load;
* the library's files (``.so``, ``.a``) and its load time in the runner (``dlopen`` and
  ``<name>_create``; medians over the rounds) against ``Executable.load`` of the
  ``.plx`` plus ``VirtualMachine(exe)`` in this process.

``PLAIT_NUM_THREADS`` is 1 for both (``--threads``), so the figures do not depend on
how busy the machine's other CPU is.  The load average is printed with the table: on a
shared machine read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
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


def models(d: Path) -> dict[str, tuple[str, dict[str, Any], tuple[int, ...]]]:
    """name -> (ONNX path, importer options, input shape)."""
    sys.path.insert(0, str(ROOT / "examples"))
    sys.path.insert(0, str(ROOT / "tests" / "dialects" / "qnn"))
    from export_models import export
    from qnn_models import quantize

    (d / "q").mkdir(parents=True, exist_ok=True)
    return {
        "tiny_mlp": (str(ROOT / "examples" / "models" / "tiny_mlp.onnx"), {}, (3, 64)),
        "cnn": (export("cnn", str(d), shape=(1, 3, 32, 32)), {}, (2, 3, 32, 32)),
        "transformer": (export("transformer", str(d), shape=(1, 16, 256)), {},
                        (2, 16, 256)),
        "int8": (quantize("mlp", "qop", str(d / "q")), {}, (4, 64)),
    }


def runner(d: Path, include: Path) -> Path:
    out = d / "runner"
    out.mkdir(exist_ok=True)
    for f in ("main.c", "npy.c", "npy.h", "Makefile"):
        shutil.copy(ROOT / "examples" / "c_api" / f, out / f)
    subprocess.run(["make", "-s", f"PLAIT_INCLUDE={include}"], cwd=out, check=True)
    return out / "run_model"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run_c(run_model: Path, lib: Path, x: Path, calls: int, env: dict[str, str],
           out: Path) -> tuple[str, float]:
    """The runner's output and its CPU seconds (user + system)."""
    before = _children_cpu()
    r = subprocess.run([str(run_model), str(lib), str(x), "-o", str(out), "--repeat",
                        str(calls)], capture_output=True, text=True, env=env, check=True)
    return r.stdout, _children_cpu() - before


def c_times(run_model: Path, lib: Path, x: Path, calls: int, env: dict[str, str],
            out: Path) -> tuple[float, float, float, float]:
    """(us per call, CPU us per call, dlopen us, create us) of one run of the runner (CPU:
    less a run of one call, so that start-up and loading are not counted)."""
    stdout, cpu = _run_c(run_model, lib, x, calls, env, out)
    _, cpu_one = _run_c(run_model, lib, x, 1, env, out)
    per_call = float(re.search(r"([\d.]+) us per call", stdout)[1])
    load = re.search(r"dlopen ([\d.]+) us, create ([\d.]+) us", stdout)
    return (per_call, 1e6 * (cpu - cpu_one) / max(1, calls - 1), float(load[1]),
            float(load[2]))


def vm_time(vm: Any, x: np.ndarray, calls: int) -> tuple[float, float]:
    """(us per call, CPU us per call) of ``calls`` calls of ``vm["main"](x)``."""
    fn = vm["main"]
    t, c = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn(x)
    return (1e6 * (time.perf_counter() - t) / calls,
            1e6 * (time.process_time() - c) / calls)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=500, help="calls per block")
    p.add_argument("--rounds", type=int, default=5, help="blocks per path (medians)")
    p.add_argument("--threads", default="1", help="PLAIT_NUM_THREADS of both paths")
    p.add_argument("--only", default=None, help="comma-separated model names")
    args = p.parse_args(argv)
    os.environ["PLAIT_NUM_THREADS"] = args.threads
    env = dict(os.environ)
    from plait.codegen.vm_codegen import vm_codegen
    from plait.frontend import from_onnx
    from plait.pipeline import build_pipeline
    from plait.runtime import Executable, VirtualMachine
    from plait.target import Target
    from plait.target.c.library_export import export_built_module

    d = Path(tempfile.mkdtemp(prefix="plait-bench-clib-"))
    rows = []
    run_model = None
    try:
        chosen = models(d / "onnx")
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        for name, (path, options, shape) in chosen.items():
            mod = from_onnx(path, **options)
            t = Target("c")
            built = build_pipeline(t, mod.phase)(mod.with_attrs(target=t))
            exe = vm_codegen(built)
            lib = export_built_module(built, d / name, name)
            if run_model is None:
                run_model = runner(d, lib.header.parent)
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            np.save(d / f"{name}.npy", x)
            plx = d / f"{name}.plx"
            exe.save(plx)
            res = d / f"{name}-res"
            res.mkdir()
            vm = VirtualMachine(exe)
            vm_time(vm, x, 20)
            vm_us, c_us, vm_cpu, c_cpu, opens, creates, loads = [], [], [], [], [], [], []
            for _ in range(args.rounds):   # the two paths take turns
                wall, cpu = vm_time(vm, x, args.calls)
                vm_us.append(wall)
                vm_cpu.append(cpu)
                per_call, cpu, opened, created = c_times(
                    run_model, lib.shared, d / f"{name}.npy", args.calls, env, res)
                c_us.append(per_call)
                c_cpu.append(cpu)
                opens.append(opened)
                creates.append(created)
                t0 = time.perf_counter()
                VirtualMachine(Executable.load(plx))
                loads.append(1e6 * (time.perf_counter() - t0))
            med = statistics.median
            rows.append((name, med(vm_us), med(c_us), med(vm_cpu), med(c_cpu),
                         lib.shared.stat().st_size, lib.static.stat().st_size, med(opens),
                         med(creates), med(loads)))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    load = os.getloadavg()
    print(f"PLAIT_NUM_THREADS={args.threads}, {args.rounds} rounds of {args.calls} calls; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} CPUs)")
    print("| model | VM us/call | C us/call | overhead us/call | VM / C | VM CPU us/call "
          "| C CPU us/call | CPU overhead us/call | .so KiB | .a KiB | dlopen us "
          "| create us | .plx load + VM us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, vm_us, c_us, vm_cpu, c_cpu, so, a, opened, created, loaded in rows:
        print(f"| {name} | {vm_us:.1f} | {c_us:.1f} | {vm_us - c_us:.1f} | "
              f"{vm_us / c_us:.2f} | {vm_cpu:.1f} | {c_cpu:.1f} | {vm_cpu - c_cpu:.1f} | "
              f"{so / 1024:.0f} | {a / 1024:.0f} | {opened:.0f} | {created:.1f} | "
              f"{loaded:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
