"""Side-by-side benchmark of plait against onnxruntime and PyTorch eager.

    python benchmarks/run.py                       # everything (a few minutes)
    python benchmarks/run.py --models mlp --runs 30 --out /tmp/bench

Each (model, backend) pair runs in its own process with 2 threads everywhere
(OMP_NUM_THREADS / onnxruntime intra-op threads / torch.set_num_threads), measures
the median of at least 30 runs after warm-up, its compile time (ONNX import, the
pipeline, C compilation, separately) and the process's peak memory.  On shared machines
a whole process can run slow (its minimum as well as its median), so each pair runs in
``--processes`` processes (default 3), the backends taking turns, and the reported
latency is the median of the processes' medians (each is in the JSON).  Before a latency
is reported, the backend's outputs are compared with onnxruntime's on the same inputs;
a model whose outputs disagree is refused (reported as an error, no latency).

Also measured: compile-time scaling of the default pipeline on synthetic modules of
1k, 10k and 100k bindings (time per binding).

Writes ``results.md`` (a Markdown table with the ratio of each plait backend to
onnxruntime) and ``results.json`` (every figure) into ``--out`` (default
``benchmarks/results``), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
THREADS = 2
MODELS = {
    # name: (export name in examples/export_models.py, input shape)
    "mlp": ("mlp", (64, 784)),
    "cnn": ("cnn", (1, 3, 224, 224)),
    "transformer": ("transformer", (1, 128, 256)),
}
BACKENDS = ("onnxruntime", "torch", "plait-numpy", "plait-c")
RTOL, ATOL = 1e-3, 1e-4


# ------------------------------------------------------------------ worker side


def _set_threads() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(THREADS)


def _time_runs(fn: Any, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def _pass_seconds(entries: Any, name: str) -> float:
    """Seconds spent in the passes called ``name`` anywhere in PassTiming's tree (the
    top-level entries are the pipeline's nested Sequentials)."""
    total, stack = 0.0, list(entries)
    while stack:
        e = stack.pop()
        if e.name == name:
            total += e.seconds
        else:
            stack.extend(e.children)
    return total


def _peak_rss_mb() -> float:
    """This process's peak resident set.  ``VmHWM`` belongs to the process image, so
    it starts afresh at ``exec``; ``ru_maxrss`` (the fallback) is carried over from
    the driver that forked the worker, which made every backend report the driver's
    peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(model: str, backend: str, onnx_path: str, input_path: str, runs: int) -> dict:
    """Run one backend on one model; returns the measurements (and the output)."""
    import numpy as np

    x = np.load(input_path)
    result: dict[str, Any] = {"model": model, "backend": backend}
    if backend == "onnxruntime":
        import onnxruntime as ort

        t0 = time.perf_counter()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        result["compile_s"] = {"total": time.perf_counter() - t0}
        name = sess.get_inputs()[0].name

        def fn() -> Any:
            return sess.run(None, {name: x})[0]

    elif backend == "torch":
        import torch

        sys.path.insert(0, str(ROOT / "examples"))
        from export_models import MODELS as TORCH_MODELS  # noqa: PLC0415
        from export_models import _randomize_batch_norm  # noqa: PLC0415

        torch.set_num_threads(THREADS)
        t0 = time.perf_counter()
        torch.manual_seed(0)
        net = TORCH_MODELS[MODELS[model][0]][0]().eval()
        _randomize_batch_norm(net, 0)
        result["compile_s"] = {"total": time.perf_counter() - t0}
        xt = torch.from_numpy(x)

        def fn() -> Any:
            with torch.no_grad():
                return net(xt).numpy()

    else:
        import plait
        from plait.frontend import from_onnx
        from plait.runtime import VirtualMachine
        from plait.transform import PassContext, PassTiming

        target = backend.split("-", 1)[1]
        t0 = time.perf_counter()
        mod = from_onnx(onnx_path, shapes={"input": x.shape})
        t1 = time.perf_counter()
        timing = PassTiming()
        with PassContext(instruments=[timing]):
            exe = plait.build(mod, target)
        t2 = time.perf_counter()
        native = _pass_seconds(timing.entries, "c.CompileKernels")
        result["compile_s"] = {
            "import": t1 - t0,
            "pipeline": t2 - t1 - native,
            "c_compile": native,
            "total": t2 - t0,
        }
        vm = VirtualMachine(exe)
        main = vm["main"]
        result["planned_peak_bytes"] = exe.attrs.get("planned_peak_bytes")

        def fn() -> Any:
            return main(x)

    out = fn()
    if isinstance(out, tuple):
        out = out[0]
    times = _time_runs(fn, runs, warmup=max(3, runs // 10))
    result["median_ms"] = statistics.median(times) * 1e3
    result["p10_ms"] = sorted(times)[len(times) // 10] * 1e3
    result["runs"] = runs
    result["peak_rss_mb"] = _peak_rss_mb()
    np.save(input_path + f".{backend}.out.npy", np.asarray(out))
    return result


# ------------------------------------------------------------------ driver side


def _export(model: str, workdir: Path) -> str:
    sys.path.insert(0, str(ROOT / "examples"))
    from export_models import export  # noqa: PLC0415

    return export(MODELS[model][0], str(workdir), dynamic_batch=False, shape=MODELS[model][1])


def library_objects(seed: Path) -> float:
    """Compile plait_gemm.c (the c target's matrix product: the same source for every
    model) into the object cache ``seed``; returns the seconds it took.  Workers start
    from a copy of these objects: that compile happens once per machine, not per model."""
    from plait.codegen.c import CSource, compile_kernels
    from plait.target.c.gemm import NATIVE_SOURCE_NAME, native_source_text

    t = time.perf_counter()
    compile_kernels({}, c_sources=[CSource(native_source_text(), (), NATIVE_SOURCE_NAME),
                                   CSource("int plait_bench_seed;\n", (), "seed.c")],
                    cache_dir=seed)
    return time.perf_counter() - t


SEED: Path | None = None
"""The object cache every worker's fresh cache starts from (see library_objects)."""


def _run_worker(args: list[str]) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(THREADS)
    with tempfile.TemporaryDirectory(prefix="plait-bench-cache-") as cache:
        # a fresh compiled-library cache, so the C compile time is measured, not a
        # cache hit; only the shared library objects (plait_gemm.c) are carried over
        if SEED is not None:
            for obj in SEED.glob("c/obj-*.o"):
                (Path(cache) / "c").mkdir(exist_ok=True)
                shutil.copy2(obj, Path(cache) / "c" / obj.name)
        env["PLAIT_CACHE_DIR"] = cache
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pipeline_scaling(sizes: tuple[int, ...]) -> list[dict]:
    """Seconds per binding of the default pipeline (numpy target) on chains of
    elementwise ops."""
    import plait
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call

    rows = []
    for n in sizes:
        x = Var("x", TensorType((4, 4), "float32"))
        bb = BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                v = x
                for i in range(n):
                    v = bb.emit(make_call("add" if i % 2 else "multiply", v, x))
                out = bb.emit_output(v)
            bb.emit_func_output(out)
        mod = bb.get()
        t, c = time.perf_counter(), time.process_time()
        plait.build(mod, "numpy")
        dt, dc = time.perf_counter() - t, time.process_time() - c
        # CPU time too: on a shared machine the wall time also measures the neighbours
        rows.append({"bindings": n, "seconds": dt, "us_per_binding": dt / n * 1e6,
                     "cpu_us_per_binding": dc / n * 1e6})
    return rows


def combine(rs: list[dict]) -> dict:
    """One (model, backend)'s processes as one result: the median of their median
    latencies (each process's median is in ``process_medians_ms``), the first process's
    compile times and the largest peak memory.  Any process's error is the result."""
    errors = [r for r in rs if "error" in r]
    if errors:
        return errors[0]
    out = dict(rs[0])
    medians = [r["median_ms"] for r in rs]
    out["process_medians_ms"] = medians
    out["median_ms"] = statistics.median(medians)
    out["p10_ms"] = statistics.median(r["p10_ms"] for r in rs)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
    return out


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def report(results: list[dict], scaling: list[dict]) -> str:
    lines = ["| model | backend | median ms | ratio to onnxruntime | compile s (import / "
             "pipeline / C) | peak RSS MB |", "|---|---|---|---|---|---|"]
    base = {r["model"]: r.get("median_ms") for r in results if r["backend"] == "onnxruntime"}
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['backend']} | error: {r['error']} | | | |")
            continue
        ratio = r["median_ms"] / base[r["model"]] if base.get(r["model"]) else None
        c = r.get("compile_s", {})
        comp = (
            f"{_fmt(c.get('import'))} / {_fmt(c.get('pipeline'))} / {_fmt(c.get('c_compile'))}"
            if "import" in c
            else _fmt(c.get("total"))
        )
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['median_ms']:.3f} | {_fmt(ratio)} | "
            f"{comp} | {r['peak_rss_mb']:.0f} |"
        )
    lines += ["", "| bindings | pipeline seconds | µs per binding | CPU µs per binding |",
              "|---|---|---|---|"]
    for s in scaling:
        lines.append(f"| {s['bindings']} | {s['seconds']:.2f} | {s['us_per_binding']:.1f} | "
                     f"{_fmt(s.get('cpu_us_per_binding'), '.1f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--processes", type=int, default=3,
                   help="processes per (model, backend), taking turns; the reported "
                        "latency is the median of their medians")
    p.add_argument("--scaling", default="1000,10000,100000")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--worker", nargs=5, metavar=("MODEL", "BACKEND", "ONNX", "INPUT", "RUNS"))
    args = p.parse_args(argv)
    if args.worker:
        model, backend, onnx_path, input_path, runs = args.worker
        _set_threads()
        print(json.dumps(worker(model, backend, onnx_path, input_path, int(runs))))
        return 0
    if args.runs < 30:
        print("--runs must be at least 30 (the median of 30 runs is the reported figure)")
        return 2
    if args.processes < 1:
        print("--processes must be at least 1")
        return 2
    import numpy as np

    global SEED
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        library_s = None
        if any(b == "plait-c" for b in args.backends.split(",")):
            SEED = work / "seed-cache"
            library_s = library_objects(SEED)
            print(f"plait_gemm.c object (compiled once per machine): {library_s:.2f} s",
                  flush=True)
        for model in args.models.split(","):
            onnx_path = _export(model, work)
            inp = str(work / f"{model}.input.npy")
            data = np.random.default_rng(0).standard_normal(MODELS[model][1])
            np.save(inp, data.astype("float32"))
            ref = None
            runs: dict[str, list[dict]] = {}
            for rep in range(args.processes):
                # the backends take turns, so each sees the machine in the same phases
                for backend in args.backends.split(","):
                    r = _run_worker([model, backend, onnx_path, inp, str(args.runs)])
                    r.setdefault("model", model)
                    r.setdefault("backend", backend)
                    out_file = Path(inp + f".{backend}.out.npy")
                    if "error" not in r and out_file.exists():
                        out = np.load(out_file)
                        if backend == "onnxruntime":
                            ref = out
                        elif ref is not None and not np.allclose(out, ref, rtol=RTOL,
                                                                 atol=ATOL):
                            err = float(np.max(np.abs(out - ref)))
                            r = {"model": model, "backend": backend, "error":
                                 f"outputs disagree with onnxruntime (max abs {err:.2e})"}
                    runs.setdefault(backend, []).append(r)
                    print(f"{model:12s} {backend:12s} process {rep + 1}: "
                          + (r["error"] if "error" in r else f"{r['median_ms']:.3f} ms"),
                          flush=True)
            results.extend(combine(rs) for rs in runs.values())
    scaling = pipeline_scaling(tuple(int(s) for s in args.scaling.split(",") if s))
    table = report(results, scaling)
    if library_s is not None:
        table += (f"\n\nC compile times exclude plait_gemm.c, the c target's matrix product "
                  f"library, whose object is compiled once per machine ({library_s:.2f} s "
                  "here) and cached.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({"results": results, "scaling": scaling,
                                                  "library_object_s": library_s}, indent=2))
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
