"""Dynamic-shape executables against static ones and onnxruntime (issue 29, item 4).

    python benchmarks/dynamic_shapes.py                        # the whole real-model suite
    python benchmarks/dynamic_shapes.py --models bert,resnet18 --rounds 8

Each model of the real-model suite (benchmarks/real_models.py: ``transformers``
architectures with random weights) is exported twice by ``torch.onnx.export``: with
static sizes (the suite's input) and with dynamic axes (batch and sequence for text
models, batch for vision models, as exporters write them by default).  Three backends
then run the suite's input, each in a process of its own without torch (2 threads):

* ``static``: plait-c built from the static export;
* ``dynamic``: plait-c built **once** from the dynamic export (sizes open), run at the
  suite's sizes;
* ``ort-dynamic``: onnxruntime on the dynamic export.

The processes take turns (``--rounds`` rounds, the order shuffled each round, a block of
``--runs`` timed calls per turn after a warm-up), so all three sample the same phases of
a shared machine; each backend's figure is its best block median.  Before timing, the
dynamic executable's output is compared with onnxruntime's (rtol 1e-4 of the largest
magnitude); a model that disagrees is reported as such.  Printed: the times, dynamic /
static (the goal: within 1.10) and dynamic / onnxruntime, their geometric means, and the
machine (CPU model, instruction sets, threads, date); ``--write-docs`` writes the same
table into docs/performance.md (benchmarks/docs_figures.py).  Exports are cached like
the suite's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import docs_figures  # noqa: E402
import real_models as rm  # noqa: E402  (no torch at import)

DEFAULT_MODELS = ",".join(rm.MODELS)
"""The whole real-model suite: six of its models were the default until the other five
showed what the six did not (Whisper's stem convolutions and EfficientNet's gates left
the native kernels on symbolic sizes)."""
BACKENDS = ("static", "dynamic", "ort-dynamic")
THREADS = 2
FORMAT = 1
"""Bumped when the export below changes what it writes (part of the cache key)."""


def dynamic_axes(spec: rm.RealModel) -> dict[int, str]:
    """The input's open axes: batch and sequence for token ids, the batch for images
    and audio (their spatial sizes stay as the config has them)."""
    return {0: "batch", 1: "seq"} if spec.dtype == "int64" else {0: "batch"}


def export(name: str, out_dir: Path) -> None:
    """Export ``name`` statically and with dynamic axes into ``out_dir`` (imports torch;
    run in a child process)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    spec = rm.MODELS[name]
    model = rm.build(spec)
    x = torch.from_numpy(rm.make_input(spec))
    axes = dynamic_axes(spec)
    out_axes = {0: "batch"} | ({1: "seq"} if spec.dtype == "int64" else {})
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(out_dir / "static.onnx"), input_names=["x"],
                          output_names=["y"], opset_version=rm.OPSET, dynamo=False)
        torch.onnx.export(model, (x,), str(out_dir / "dynamic.onnx"), input_names=["x"],
                          output_names=["y"], opset_version=rm.OPSET, dynamo=False,
                          dynamic_axes={"x": axes, "y": out_axes})


def exported(name: str, cache: Path) -> Path:
    """The directory holding ``name``'s two exports (made by a child process once)."""
    spec = rm.MODELS[name]
    key = rm.cache_key(spec, {**rm.library_versions(), "dynamic_format": str(FORMAT)})
    out = cache / "dynamic" / f"{name}-{key}"
    if not (out / "dynamic.onnx").exists():
        subprocess.run([sys.executable, __file__, "--export", name, str(out)], check=True,
                       cwd=ROOT)
    return out


def worker(backend: str, onnx_path: str, input_path: str) -> None:
    """Build/load one backend, then serve ``run N`` (N timed calls: print their median)
    and ``save PATH`` (write the output) on stdin until EOF."""
    import numpy as np

    x = np.load(input_path)
    if backend == "ort-dynamic":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])

        def call() -> Any:
            return sess.run(None, {"x": x})[0]
    else:
        import plait

        s = plait.load(onnx_path, target="c")

        def call() -> Any:
            return s(x)
    call()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, arg = line.split(maxsplit=1)
        if cmd == "save":
            np.save(arg.strip(), np.asarray(call()))
            print("saved", flush=True)
            continue
        n = int(arg)
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:   # warm: caches and the threads awake
            call()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        print(sorted(times)[len(times) // 2], flush=True)


class Player:
    """A backend's worker process."""

    def __init__(self, backend: str, onnx_path: Path, input_path: Path) -> None:
        env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS))
        self.backend = backend
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", backend, str(onnx_path), str(input_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.expect("ready")
        self.best = math.inf

    def expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.backend}: the worker died (see its stderr above)")
        if word and line.strip() != word:
            raise RuntimeError(f"{self.backend}: expected {word!r}, got {line.strip()!r}")
        return line

    def send(self, text: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.expect("")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(name: str, cache: Path, rounds: int, runs: int) -> dict[str, Any]:
    import numpy as np

    spec = rm.MODELS[name]
    d = exported(name, cache)
    inp = d / "input.npy"
    np.save(inp, rm.make_input(spec))
    players = [Player(b, d / ("static.onnx" if b == "static" else "dynamic.onnx"), inp)
               for b in BACKENDS]
    try:
        got = {}
        for p in players:
            p.send(f"save {d / (p.backend + '.npy')}")
            got[p.backend] = np.load(d / (p.backend + ".npy"))
        ref = got["ort-dynamic"]
        err = float(np.abs(got["dynamic"] - ref).max() / max(np.abs(ref).max(), 1e-30))
        for _ in range(rounds):
            random.shuffle(players)
            for p in players:
                time.sleep(0.2)   # the previous process's threads stop spinning
                p.best = min(p.best, float(p.send(f"run {runs}")))
    finally:
        for p in players:
            p.close()
    out = {p.backend: p.best * 1e3 for p in players}
    out["rel_err"] = err
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    """The figures as docs/performance.md shows them: ms per backend, the two ratios,
    their geometric means over the models whose outputs agree."""
    lines = ["| model | static ms | dynamic ms | dynamic / static | onnxruntime (dynamic "
             "file) ms | dynamic / onnxruntime |", "|---|---|---|---|---|---|"]
    ok = []
    for name, r in results.items():
        if r["rel_err"] > 1e-4:
            lines.append(f"| {name} | | | **outputs disagree** ({r['rel_err']:.1e}) | | |")
            continue
        ok.append(r)
        lines.append(f"| {name} | {r['static']:.2f} | {r['dynamic']:.2f} | "
                     f"{r['dynamic'] / r['static']:.2f} | {r['ort-dynamic']:.2f} | "
                     f"{r['dynamic'] / r['ort-dynamic']:.2f} |")
    lines.append(f"| geomean | | | {geomean([r['dynamic'] / r['static'] for r in ok]):.2f} "
                 f"| | {geomean([r['dynamic'] / r['ort-dynamic'] for r in ok]):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS,
                   help=f"comma-separated, of {', '.join(rm.MODELS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=15, help="timed calls per turn")
    p.add_argument("--cache", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--write-docs", action="store_true",
                   help="write the table, with the machine, into docs/performance.md")
    p.add_argument("--export", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--worker", nargs=3, metavar=("BACKEND", "ONNX", "INPUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.export:
        export(args.export[0], Path(args.export[1]))
        return 0
    if args.worker:
        worker(*args.worker)
        return 0
    if args.write_docs:
        try:
            docs_figures.require_block(docs_figures.DOCS, "dynamic-shapes")
        except ValueError as e:
            p.error(f"--write-docs: {e}")
    names = args.models.split(",")
    unknown = [n for n in names if n not in rm.MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(rm.MODELS)}")
    cache = args.cache or rm.default_cache()
    print(f"on {docs_figures.machine(THREADS)}")
    print(f"{'model':16s} {'static':>9s} {'dynamic':>9s} {'dyn/static':>10s} "
          f"{'ort-dyn':>9s} {'dyn/ort':>8s}  (ms, best block median)")
    results, bad = {}, []
    for name in names:
        r = measure(name, cache, args.rounds, args.runs)
        results[name] = r
        flag = "" if r["rel_err"] <= 1e-4 else f"  OUTPUTS DISAGREE ({r['rel_err']:.1e})"
        if flag:
            bad.append(name)
        print(f"{name:16s} {r['static']:9.2f} {r['dynamic']:9.2f} "
              f"{r['dynamic'] / r['static']:10.3f} {r['ort-dynamic']:9.2f} "
              f"{r['dynamic'] / r['ort-dynamic']:8.3f}{flag}", flush=True)
    ok = [r for n, r in results.items() if n not in bad]
    print(f"{'geomean':16s} {'':9s} {'':9s} "
          f"{geomean([r['dynamic'] / r['static'] for r in ok]):10.3f} {'':9s} "
          f"{geomean([r['dynamic'] / r['ort-dynamic'] for r in ok]):8.3f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": docs_figures.machine(THREADS),
                                         "results": results}, indent=1))
    if args.write_docs:
        print(docs_figures.write_figures(docs_figures.DOCS, "dynamic-shapes",
                                         markdown_table(results),
                                         docs_figures.command("dynamic_shapes.py", argv),
                                         THREADS))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
