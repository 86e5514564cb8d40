"""Compile time of a real-suite model through both importers, side by side; and the
converter the ``from_torch`` backend of ``benchmarks/run.py --suite real`` uses.

    python benchmarks/torch_import.py                       # BERT, target c
    python benchmarks/torch_import.py --models bert,llama --target numpy
    python benchmarks/torch_import.py convert model.pt2 model.plx [--target c]

The comparison takes the same ``transformers`` model (benchmarks/real_models.py, random
weights) along the two paths from PyTorch to a plait executable, each step timed in a
process of its own (with a compiled-library cache of its own, seeded with the c
target's kernel-family objects as run.py's workers are, so the C compile is measured
and not a cache hit):

* ONNX: ``torch.onnx.export`` (TorchScript exporter), then ``from_onnx``, the pipeline,
  the C compile;
* torch.export: ``torch.export.export`` and ``torch.export.save``, then
  ``torch.export.load``, ``from_exported_program`` (which runs the core ATen
  decompositions), the pipeline, the C compile.

Both executables run the benchmark input once, and their outputs are compared with
each other (rtol 1e-3, atol 1e-4 * max |output|: the two graphs differ in op order).
Prints a Markdown table and writes it with every figure (JSON) to ``--out`` (default
``benchmarks/results/torch_import``).

``convert`` loads a saved ExportedProgram, imports and builds it, saves the executable
and prints one JSON line of its timings (seconds: ``load``, ``import``, ``pipeline``,
``c_compile``, ``total``, ``save``; ``total`` is import + pipeline + C compile: it
excludes ``load`` and ``save``, the executable's writing): the run.py worker of the
``from_torch`` backend calls it in a child process, so the timing process never
imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _build_timed(mod: Any, target: str) -> tuple[Any, dict[str, float]]:
    """``plait.build(mod, target)`` with the pipeline and the C compile timed apart."""
    from run import _pass_seconds  # noqa: PLC0415

    import plait
    from plait.transform import PassContext, PassTiming

    timing = PassTiming()
    t = time.perf_counter()
    with PassContext(instruments=[timing]):
        exe = plait.build(mod, target)
    total = time.perf_counter() - t
    native = _pass_seconds(timing.entries, "c.CompileKernels")
    return exe, {"pipeline": total - native, "c_compile": native}


def convert(pt2: str, out: str, target: str = "c") -> dict[str, Any]:
    """Load the ExportedProgram ``pt2``, import it, build it for ``target`` and save the
    executable to ``out``; the timings (seconds) and the number of bindings of the
    imported module."""
    import torch

    from plait.frontend.torch import from_exported_program

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.load(pt2)
        t1 = time.perf_counter()
        mod = from_exported_program(ep)
    t2 = time.perf_counter()
    exe, steps = _build_timed(mod, target)
    t3 = time.perf_counter()
    exe.save(out)
    return {"load": t1 - t0, "import": t2 - t1, **steps, "total": t3 - t1,
            "save": time.perf_counter() - t3, "bindings": _bindings(mod)}


def compile_onnx(onnx_path: str, shape: list[int], out: str,
                 target: str = "c") -> dict[str, Any]:
    """``from_onnx`` and ``build`` of ``onnx_path`` (input ``input`` of ``shape``),
    timed; the executable is saved to ``out``."""
    from plait.frontend import from_onnx

    t1 = time.perf_counter()
    mod = from_onnx(onnx_path, shapes={"input": tuple(shape)})
    t2 = time.perf_counter()
    exe, steps = _build_timed(mod, target)
    t3 = time.perf_counter()
    exe.save(out)
    return {"load": 0.0, "import": t2 - t1, **steps, "total": t3 - t1,
            "save": time.perf_counter() - t3, "bindings": _bindings(mod)}


def _bindings(mod: Any) -> int:
    """Bindings of the imported module's functions (its size)."""
    from plait.ir.expr import Function, SeqExpr

    n = 0
    for fn in mod.functions.values():
        if isinstance(fn, Function) and isinstance(fn.body, SeqExpr):
            n += sum(len(b.bindings) for b in fn.body.blocks)
    return n


def export_timed(name: str, kind: str, path: str) -> dict[str, float]:
    """Build model ``name`` and export it (``kind``: onnx or pt2) to ``path``; the
    seconds of the export alone."""
    import real_models as rm  # noqa: PLC0415

    spec = rm.MODELS[name]
    fn = rm.export_pt2 if kind == "pt2" else rm.export
    # build() once untimed (transformers' first model build imports a lot)
    rm.build(spec)
    t = time.perf_counter()
    fn(spec, Path(path))
    return {"export": time.perf_counter() - t}


# ------------------------------------------------------------------ the comparison


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run this script with ``args`` in a child process; its last stdout line (JSON)."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True,
                          text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(name: str, target: str, work: Path, seed: Path | None) -> list[dict[str, Any]]:
    """The two rows (ONNX, torch.export) of model ``name``."""
    import shutil

    import numpy as np
    import real_models as rm  # noqa: PLC0415

    from plait.runtime import Executable, VirtualMachine

    spec = rm.MODELS[name]
    rows, outs = [], []
    for kind, importer in (("onnx", "from_onnx"), ("pt2", "from_exported_program")):
        model = str(work / f"{name}.{kind}")
        plx = str(work / f"{name}.{kind}.plx")
        cache = work / f"cache-{name}-{kind}"
        if seed is not None:
            shutil.copytree(seed, cache, dirs_exist_ok=True)
        env = {**os.environ, "PLAIT_CACHE_DIR": str(cache)}
        row: dict[str, Any] = {"model": name, "importer": importer, "target": target}
        row.update(_child(["export", name, kind, model], env))
        if kind == "pt2":
            row.update(_child(["convert", model, plx, "--target", target], env))
        else:
            row.update(_child(["onnx", model, plx, "--target", target,
                               "--shape", ",".join(map(str, spec.shape))], env))
        # built by our own child, signed with the key of its own cache directory
        vm = VirtualMachine(Executable.load(plx, allow_native=True))
        out = vm["main"](rm.make_input(spec))
        outs.append(np.asarray(out[0] if isinstance(out, tuple) else out))
        rows.append(row)
    a, b = outs
    scale = max(1.0, float(np.max(np.abs(a))))
    agree = a.shape == b.shape and bool(np.allclose(b, a, rtol=1e-3, atol=1e-4 * scale))
    for r in rows:
        r["outputs_agree"] = agree
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | importer | bindings | export s | load s | import s | pipeline s | "
             "C compile s | import to executable s | outputs agree |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['importer']} | {r['bindings']} | {r['export']:.2f} | "
            f"{r['load']:.2f} | {r['import']:.2f} | {r['pipeline']:.2f} | "
            f"{r['c_compile']:.2f} | {r['total']:.2f} | "
            f"{'yes' if r['outputs_agree'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("convert", "onnx", "export"):
        return _subcommand(argv)
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert", help="comma-separated real-suite models "
                                                    "(default bert)")
    p.add_argument("--target", default="c", choices=("c", "numpy"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "torch_import"))
    args = p.parse_args(argv)
    import real_models as rm  # noqa: PLC0415

    unknown = [m for m in args.models.split(",") if m not in rm.MODELS]
    if unknown:
        print(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(rm.MODELS)}")
        return 2
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="plait-torch-import-") as tmp:
        work = Path(tmp)
        seed = None
        if args.target == "c":
            from run import library_objects  # noqa: PLC0415

            seed = work / "seed-cache"
            library_objects(seed)
        for name in args.models.split(","):
            try:
                rows += compare(name, args.target, work, seed)
            except RuntimeError as err:
                print(f"{name}: {err}")
                return 1
    text = table(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    print(text)
    return 0 if all(r["outputs_agree"] for r in rows) else 1


def _subcommand(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="torch_import.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="a saved ExportedProgram to a plait executable")
    c.add_argument("pt2")
    c.add_argument("out")
    c.add_argument("--target", default="c")
    o = sub.add_parser("onnx", help="(internal) an ONNX model to a plait executable")
    o.add_argument("onnx")
    o.add_argument("out")
    o.add_argument("--target", default="c")
    o.add_argument("--shape", required=True)
    e = sub.add_parser("export", help="(internal) export a real-suite model, timed")
    e.add_argument("name")
    e.add_argument("kind", choices=("onnx", "pt2"))
    e.add_argument("path")
    a = p.parse_args(argv)
    if a.cmd == "convert":
        result = convert(a.pt2, a.out, a.target)
    elif a.cmd == "onnx":
        result = compile_onnx(a.onnx, [int(d) for d in a.shape.split(",")], a.out, a.target)
    else:
        result = export_timed(a.name, a.kind, a.path)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
