"""NCHW against NHWC on the c target: the CNN built as exported, and with ConvertLayout.

    python benchmarks/layout.py                   # the ResNet-style CNN, batch 1
    python benchmarks/layout.py --batch 8 --runs 300

Both variants are built in one child process that does not import torch (the model is
exported by this one) and their calls alternate, so load on the machine hits both
alike.  Prints the p10/p50/p90 latency (ms) of each, the ratio of the medians, and how
each variant's convolutions run (plait's own product for NCHW; for NHWC, which
``c.DispatchGemm`` does not take, the BLAS-backed library function).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "nchw": None,
    "nhwc": "ConvertLayout(desired={'conv2d': 'NHWC'}),FoldConstant,DeadCodeElimination",
}


def cpu_name() -> str:
    """The CPU model and its vector instruction sets (for the record beside figures)."""
    name, flags = platform.processor() or "?", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name in ("?", "x86_64", ""):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    have = set(line.split(":", 1)[1].split())
                    flags = " ".join(x for x in ("avx2", "fma", "avx512f", "avx512bw",
                                                 "avx512vl", "avx512_vnni", "avx512_bf16",
                                                 "amx_tile") if x in have)
    except OSError:
        pass
    return f"{name} ({os.cpu_count()} CPUs; {flags or 'no AVX flags found'})"


def worker(onnx_path: str, batch: int, runs: int) -> str:
    import numpy as np

    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine

    x = np.random.default_rng(0).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    calls, how = {}, {}
    for name, passes in VARIANTS.items():
        pipe = plait.default_pipeline("c")
        if passes:
            pipe = pipe.insert_after("optimization/DeadCodeElimination", passes)
        exe = plait.build(from_onnx(onnx_path, shapes={"input": x.shape}), "c", pipeline=pipe)
        funcs = [i.func for fn in exe.functions.values() for i in fn.instructions
                 if hasattr(i, "func")]
        how[name] = (f"convolutions: {sum(f.startswith('plait_conv2d') for f in funcs)} "
                     f"calls of plait's product, {sum(f.startswith('blas.conv2d') for f in funcs)}"
                     " of blas.conv2d")
        calls[name] = VirtualMachine(exe)["main"]
    ref = calls["nchw"](x)
    np.testing.assert_allclose(calls["nhwc"](x), ref, rtol=1e-4, atol=1e-5)
    times: dict[str, list[float]] = {n: [] for n in calls}
    for i in range(runs + 10):
        for n, fn in calls.items():
            t = time.perf_counter()
            fn(x)
            if i >= 10:
                times[n].append(time.perf_counter() - t)
    lines = []
    med = {}
    for n, ts in times.items():
        ts.sort()
        q = [ts[int(p / 100 * (len(ts) - 1))] * 1e3 for p in (10, 50, 90)]
        med[n] = q[1]
        lines.append(f"cnn b{batch:<3d} {n:5s}  p10/p50/p90 {q[0]:.3f} / {q[1]:.3f} / "
                     f"{q[2]:.3f} ms   ({how[n]})")
    lines.append(f"nhwc / nchw median: {med['nhwc'] / med['nchw']:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--worker", nargs=3, metavar=("ONNX", "BATCH", "RUNS"))
    args = p.parse_args(argv)
    if args.worker:
        print(worker(args.worker[0], int(args.worker[1]), int(args.worker[2])))
        return 0
    sys.path.insert(0, str(ROOT / "examples"))
    from export_models import export  # noqa: PLC0415  (imports torch: this process only)

    with tempfile.TemporaryDirectory() as work:
        path = export("cnn", work, dynamic_batch=False, shape=(args.batch, 3, 32, 32))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, __file__, "--worker", path, str(args.batch),
                              str(args.runs)], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.stderr.write(out.stderr)
        return out.returncode
    print(f"CPU: {cpu_name()}")
    print(out.stdout, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
