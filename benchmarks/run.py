"""Side-by-side benchmark of plait against onnxruntime, OpenVINO and PyTorch eager.

    python benchmarks/run.py                       # everything (about 10 minutes)
    python benchmarks/run.py --models mlp --runs 30 --out /tmp/bench

Each (model, backend) pair runs in its own processes with 2 threads everywhere
(OMP_NUM_THREADS / onnxruntime intra-op threads / torch.set_num_threads).  Each process
compiles its model (the others wait, idle, so the compile times -- ONNX import, the
pipeline, C compilation, separately -- are not disturbed), then they **take turns**: in
each round every process, in a shuffled order, gets a turn after ``--gap`` seconds of
idle (the previous process's threads stop spinning): untimed calls for ``--warm``
seconds, then a block of ``--block`` timed calls, while the others wait on a pipe.
On shared 2-vCPU machines the speed of the machine drifts over seconds, and a whole
process can run slow; with the backends interleaved block by block, every backend
samples the same phases of the machine.  Each (model, backend) has ``--processes``
processes (default 3) and at least 30 timed calls per process (``--runs``, default 50);
the reported latency is the median of all its timed calls, and the JSON also has each
process's median, each round's block medians and in how many rounds each backend was at
or below onnxruntime.  Before a latency is reported, the backend's outputs are compared
with onnxruntime's on the same inputs; a model whose outputs disagree is refused
(reported as an error, no latency).

Also measured: compile-time scaling of the default pipeline on synthetic modules of
1k, 10k and 100k bindings (``--scaling``; time per binding, wall and CPU, and the peak
resident memory, each size in a process of its own), the same chain made with
BlockBuilder, parsed from text, imported from ONNX and from torch.export
(benchmarks/scaling_sources.py; torch.export exported whole up to 10k bindings, past
that a short export's graph grown to the size, in a process of its own beside a
BlockBuilder chain: ``APART``); ``--scaling-only`` runs only that:

    python benchmarks/run.py --scaling-only --scaling 1000,10000,100000,1000000

Writes ``results.md`` (a Markdown table with the ratio of each plait backend to
onnxruntime) and ``results.json`` (every figure) into ``--out`` (default
``benchmarks/results``), and prints the table.

``--suite real`` runs the real-model suite instead (benchmarks/real_models.py:
architectures from ``transformers`` with random weights, exported once per machine into a
cache by a child process that imports torch; the timing processes never do), by default
onnxruntime, plait-c and from_torch, 1 process per pair and 30 timed calls, no pipeline
scaling.  ``from_torch`` is plait-c built from the ``torch.export`` import of the same
model (``from_exported_program``) instead of its ONNX export: the program is exported and
saved (.pt2) into the cache by a child process, the worker converts it to a plait
executable in a child process of its own (benchmarks/torch_import.py convert: load,
import, pipeline, C compile, timed there) and times the saved executable, so no timing
process imports torch.  It
prints plait-c / onnxruntime per model and their geometric mean; a model whose plait
outputs disagree with onnxruntime's beyond the tolerance (``outputs_disagree``) is
refused: flagged in the table, left out of the geometric mean, and the command exits
with status 1.

    python benchmarks/run.py --suite real
    python benchmarks/run.py --suite real --models bert,llama --before /tmp/before

``--suite quantized`` runs models quantized by onnxruntime's own tools
(benchmarks/quantized_models.py: the MLP, CNN and encoder of the qnn tests as QOperator,
QDQ and dynamic quantization, and the real suite's BERT through quantize_dynamic) on
plait-c against onnxruntime's int8 execution, like the real suite (1 process per pair, 30
timed calls, ratios and their geometric mean; a model whose outputs disagree beyond 1%
of onnxruntime's largest magnitude, the quantized models' bound, is refused).

    python benchmarks/run.py --suite quantized
    python benchmarks/run.py --suite quantized --models mlp-qop,bert-dyn
    python benchmarks/run.py --models mlp --backends onnxruntime,plait-c,plait-c+torch

``--suite broad`` runs the broad suite (benchmarks/broad_models.py: thirty architectures
of every family, issue 30) like the real suite, its plait outputs held to 1e-4 of the
largest magnitude; ``--suite broad-int8`` its CNNs and text encoders quantized by
onnxruntime's tools in QOperator, QDQ and dynamic form (benchmarks/broad_quantized.py),
held to one quantization step (benchmarks/broad_check.py).  ``--check`` (broad suites
only) compiles and compares every model without timing it and lists plait's gaps;
``--write-docs`` writes the summary, with the machine (CPU model, ISA extensions, threads,
date), between the suite's markers in docs/performance.md (``SUITE@avx2``'s when the
kernels run their AVX2 copy: benchmarks/docs_figures.py).

    python benchmarks/run.py --suite broad --check
    python benchmarks/run.py --suite broad --write-docs
    python benchmarks/run.py --suite broad-int8 --models resnet50-qdq,bert-dyn

Backends: ``onnxruntime``, ``openvino`` (OpenVINO's CPU plugin with
``INFERENCE_PRECISION_HINT`` f32, the same threads, ``PERFORMANCE_HINT`` LATENCY and one
stream; on a QDQ model its int8 path; left out with a note when the package is not
installed), ``torch`` (eager), ``plait-numpy``, ``plait-c``,
``plait-c+torch`` (plait-c in a process that has imported torch and run one torch
operation first, as a user of the PyTorch importer has: shows what torch in the process
costs plait), ``plait-c+torch-ops`` (the same, with a small torch operation, untimed,
before every call: torch's OpenMP workers spin for milliseconds after each one;
``onnxruntime+torch-ops`` is onnxruntime in that situation), ``plait-c-1thread`` and
``plait-c-1thread+torch-ops`` (plait-c on one thread, ``PLAIT_NUM_THREADS=1``: what the
thread pool adds, and whether it ever costs) and ``plait-c-vm`` (plait-c
on the VM path, one Python call per kernel, where plait-c runs a model of static shapes
as one native call: its single entry point, docs/targets.md).  ``--before DIR`` adds
``plait-c-before``: plait-c imported from DIR, a checkout of another revision, taking
its turn in every round (and ``plait-c-before+torch``/``+torch-ops`` when those
backends are asked for).
"""

from __future__ import annotations

import argparse
import functools
import inspect
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

# the benchmarks' shared modules sit next to this file: importable when it was loaded
# by path too, as the tests do (a test's order must not decide whether it imports)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
THREADS = int(os.environ.get("PLAIT_BENCH_THREADS", "2"))
"""Threads of every backend (2; another count through PLAIT_BENCH_THREADS, which the
workers inherit)."""
MODELS = {
    # name: (export name in examples/export_models.py, input shape)
    "mlp": ("mlp", (64, 784)),
    "cnn": ("cnn", (1, 3, 224, 224)),
    "transformer": ("transformer", (1, 128, 256)),
    # the MLP's first two products alone, for looking at one layer (not in the default run)
    "mlp-layer1": ("mlp_layer1", (64, 784)),
    "mlp-layer2": ("mlp_layer2", (64, 512)),
}
DEFAULT_MODELS = "mlp,cnn,transformer"
BACKENDS = ("onnxruntime", "openvino", "torch", "plait-numpy", "plait-c", "plait-c+torch",
            "plait-c-vm", "plait-c+torch-ops", "onnxruntime+torch-ops", "plait-c-1thread",
            "plait-c-1thread+torch-ops", "from_torch")
PEERS = ("onnxruntime", "openvino")
"""The engines plait is measured against: each model's *best peer* is the faster of them
(the ratios ``plait / best peer`` are the ones the project's goals are stated in)."""
OPT_IN = ("plait-c+torch", "plait-c-vm", "plait-c+torch-ops", "onnxruntime+torch-ops",
          "plait-c-1thread", "plait-c-1thread+torch-ops", "from_torch")
REAL_BACKENDS = "onnxruntime,openvino,plait-c,from_torch"
"""The real suite's default backends."""
REAL_ONLY = ("from_torch",)
"""Backends of the real suite only (their models are exported with torch.export)."""
"""Backends run only when named in ``--backends``."""
SUITES = ("default", "real", "quantized", "broad", "broad-int8")
MODEL_SUITES = ("real", "quantized", "broad", "broad-int8")
"""The suites of models from elsewhere (one process per pair, 30 timed calls, a summary
against the peers, no pipeline scaling)."""
RTOL, ATOL = 1e-3, 1e-4
"""Outputs agree with onnxruntime's when ``|out - ref| <= ATOL * max(1, max|ref|) + RTOL *
|ref|`` everywhere (the absolute part scales with the output's largest magnitude:
Winograd's and reordered sums' errors do)."""


def real_models() -> Any:
    """benchmarks/real_models.py (the real suite's specs; imports neither torch nor
    transformers)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import real_models as rm  # noqa: PLC0415

    return rm


QUANTIZED_ATOL = 1e-2
"""The quantized suite's bound: within 1% of onnxruntime's largest magnitude (a dynamic
quantization's scale comes from float values at run time: a last-bit difference before
it moves a whole tensor by up to one quantization step)."""


def quantized_models() -> Any:
    """benchmarks/quantized_models.py (the quantized suite)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import quantized_models as qm  # noqa: PLC0415

    return qm


def broad() -> tuple[Any, Any, Any]:
    """benchmarks/broad_models.py, broad_quantized.py and broad_check.py (the broad
    suite: its float models, their int8 forms and its output checks)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import broad_check  # noqa: PLC0415
    import broad_models  # noqa: PLC0415
    import broad_quantized  # noqa: PLC0415

    return broad_models, broad_quantized, broad_check


def suite_models(suite: str) -> list[str]:
    """The models of ``suite``, in the order they run (the default suite: its default
    models)."""
    if suite == "real":
        return list(real_models().MODELS)
    if suite == "quantized":
        return list(quantized_models().MODELS)
    if suite == "broad":
        return list(broad()[0].MODELS)
    if suite == "broad-int8":
        return list(broad()[1].MODELS)
    return DEFAULT_MODELS.split(",")


def outputs_disagree(out: Any, ref: Any, atol: float = ATOL, rtol: float = RTOL
                     ) -> str | None:
    """Why ``out`` does not match onnxruntime's ``ref`` (shape, or the largest error and
    the tolerance), or None when it does (see RTOL, ATOL)."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return f"outputs disagree with onnxruntime: shape {out.shape}, expected {ref.shape}"
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    err = np.abs(out.astype(np.float64) - ref)
    bound = atol * scale + rtol * np.abs(ref)
    if ref.size and not bool(np.all(err <= bound)):   # NaN in out fails too
        worst = float(np.nanmax(err)) if not np.all(np.isnan(err)) else float("nan")
        return (f"outputs disagree with onnxruntime: max abs error {worst:.2e}, tolerance "
                f"{atol * scale:.1e} + {rtol:g} * |ref|")
    return None


# ------------------------------------------------------------------ worker side


def _set_threads() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(THREADS)


def _time_runs(fn: Any, runs: int, warmup: int) -> list[float]:
    """Seconds of each of ``runs`` calls of ``fn`` after ``warmup`` untimed ones; a
    ``fn.between`` (set by the ``+torch-ops`` backends) runs untimed before each call."""
    between = getattr(fn, "between", None)
    for _ in range(warmup):
        if between:
            between()
        fn()
    times = []
    for _ in range(runs):
        if between:
            between()
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
    peak = _proc_status_mb("VmHWM:")
    if peak is not None:
        return peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _proc_status_mb(key: str) -> float | None:
    """A size in /proc/self/status (``key`` with its colon), in MB; None without it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def prepare(model: str, backend: str, onnx_path: str, input_path: str) -> tuple[dict, Any]:
    """Load (compile) one backend for one model; its first result (compile times) and
    the function that runs one inference."""
    import numpy as np

    x = np.load(input_path)
    result: dict[str, Any] = {"model": model, "backend": backend}
    between = None
    base, _, extra = backend.partition("+")
    if extra in ("torch", "torch-ops"):
        # torch imported and its thread pool started, as for a user of the PyTorch
        # importer; with torch-ops, one small torch operation before every call too
        # (untimed), as when torch prepares the inputs: its OpenMP workers then spin
        # for several milliseconds after each operation
        import torch

        torch.set_num_threads(THREADS)
        a = torch.ones(128, 128)
        float((a @ a).sum())
        if extra == "torch-ops":
            def between() -> None:
                float((a @ a).sum())
        backend = base
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

    elif backend == "openvino":
        # OpenVINO's CPU plugin configured like for like: f32 inference (no silent bf16
        # on CPUs that have it), the same threads, latency mode; an input size the file
        # leaves open is fixed to the input's before compiling (as plait's import does)
        import openvino as ov

        t0 = time.perf_counter()
        core = ov.Core()
        net = core.read_model(onnx_path)
        if net.inputs[0].get_partial_shape().is_dynamic:
            net.reshape({net.inputs[0]: ov.PartialShape(list(x.shape))})
        compiled = core.compile_model(net, "CPU", {
            "INFERENCE_NUM_THREADS": THREADS, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1})
        request = compiled.create_infer_request()
        port = compiled.output(0)
        result["compile_s"] = {"total": time.perf_counter() - t0}
        result["precision"] = str(compiled.get_property("INFERENCE_PRECISION_HINT"))

        def fn() -> Any:
            return request.infer({0: x})[port]

    elif backend == "from_torch":
        # onnx_path is the model's saved ExportedProgram (.pt2): a child process (which
        # imports torch) converts it; this process only loads the executable
        from plait.runtime import Executable, VirtualMachine

        plx = f"{input_path}.{os.getpid()}.plx"
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "torch_import.py"),
                               "convert", onnx_path, plx, "--target", "c"],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise RuntimeError(f"converting {Path(onnx_path).name} failed: "
                               f"{lines[-1] if lines else proc.returncode}")
        times = json.loads(proc.stdout.strip().splitlines()[-1])
        result["compile_s"] = {k: times[k] for k in ("load", "import", "pipeline",
                                                     "c_compile", "total")}
        vm = VirtualMachine(Executable.load(plx))
        main = vm["main"]
        result["planned_peak_bytes"] = vm.executable.attrs.get("planned_peak_bytes")
        result["execution"] = vm.execution_path("main")

        def fn() -> Any:
            return main(x)

    elif backend == "torch":
        import torch

        sys.path.insert(0, str(ROOT / "examples"))
        from export_models import MODELS as TORCH_MODELS  # noqa: PLC0415
        from export_models import _randomize_batch_norm  # noqa: PLC0415

        torch.set_num_threads(THREADS)
        t0 = time.perf_counter()
        if model in MODELS:
            torch.manual_seed(0)
            net = TORCH_MODELS[MODELS[model][0]][0]().eval()
            _randomize_batch_norm(net, 0)
        elif model in real_models().MODELS:   # a real-suite model: the exported module
            rm = real_models()
            net = rm.build(rm.MODELS[model])
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

        plait.build  # noqa: B018  (loads the compiler: import plait is lazy; not compile time)
        target = backend.split("-")[1]
        t0 = time.perf_counter()
        shapes: Any = {"input": x.shape}
        if model in quantized_models().MODELS:
            shapes = quantized_models().input_shapes(model, x.shape)
        mod = from_onnx(onnx_path, shapes=shapes)
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
        # a checkout from before single entry points (--before) has neither the option
        # nor execution_path: it runs on its VM path
        if "single_entry" in inspect.signature(VirtualMachine).parameters:
            vm = VirtualMachine(exe, single_entry=backend != "plait-c-vm")
        else:
            vm = VirtualMachine(exe)
        main = vm["main"]
        result["planned_peak_bytes"] = exe.attrs.get("planned_peak_bytes")
        if hasattr(vm, "execution_path"):
            result["execution"] = vm.execution_path("main")

        def fn() -> Any:
            return main(x)

        if backend == "plait-c-kernel":
            # the model's most expensive native call alone, in a C loop (spread.py
            # --kernel-loop); serve() asks it for its own timings
            from kernel_loop import KernelLoop, heaviest_call  # noqa: PLC0415

            fn = KernelLoop(exe, heaviest_call(vm, x))
            result["kernel"] = fn.name

    if between is not None:
        fn.between = between  # type: ignore[attr-defined]
    return result, fn


def serve(model: str, backend: str, onnx_path: str, input_path: str, out_path: str) -> None:
    """A worker process: compile, warm up and save the output to ``out_path``, print a
    JSON line (compile times), then follow the driver's commands on stdin, one per line:
    ``run K W`` (untimed calls for W seconds, at least one, then K timed: prints their
    seconds as a JSON list) and ``done`` (prints the peak memory and returns)."""
    import numpy as np

    result, fn = prepare(model, backend, onnx_path, input_path)
    out = fn()
    if isinstance(out, tuple):
        out = out[0]
    np.save(out_path, np.asarray(out))
    _time_runs(fn, 0, warmup=3)
    print(json.dumps(result), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd and cmd[0] == "run":
            timed = getattr(fn, "timed", None)
            if timed is not None:   # times itself (kernel_loop.KernelLoop)
                print(json.dumps(timed(int(cmd[1]), float(cmd[2]))), flush=True)
                continue
            # warm up for `cmd[2]` seconds (at least one call): after the pause, caches,
            # idle threads and the vCPUs themselves take a while to come back
            end = time.perf_counter() + float(cmd[2])
            _time_runs(fn, 0, warmup=1)
            while time.perf_counter() < end:
                _time_runs(fn, 0, warmup=1)
            print(json.dumps(_time_runs(fn, int(cmd[1]), warmup=0)), flush=True)
        elif cmd == ["done"]:
            print(json.dumps({"peak_rss_mb": _peak_rss_mb()}), flush=True)
            return


# ------------------------------------------------------------------ driver side


def unknown_models(models: str, suite: str = "default") -> str | None:
    """The error for the names in comma-separated ``models`` that are not models of
    ``suite``, or None when all are."""
    known = MODELS if suite == "default" else suite_models(suite)
    unknown = [m for m in models.split(",") if m not in known]
    if not unknown:
        return None
    return f"--models: unknown {', '.join(unknown)}; choose from {', '.join(known)}"


def _export(model: str, workdir: Path) -> str:
    sys.path.insert(0, str(ROOT / "examples"))
    from export_models import export  # noqa: PLC0415

    return export(MODELS[model][0], str(workdir), dynamic_batch=False, shape=MODELS[model][1])


def model_files(suite: str, models: list[str], work: Path,
                pt2: bool = False) -> dict[str, tuple[str, str]]:
    """Each model's ONNX file and input (a ``.npy`` in ``work``).  The default suite's
    models are exported here (this process imports torch for it); the real suite's come
    from its cache, exported by a child process when missing (with ``pt2``, their
    ``torch.export`` programs too: :func:`pt2_files`)."""
    import numpy as np

    files = {}
    if suite in ("broad", "broad-int8"):
        bm, bq, _ = broad()
        if suite == "broad":
            paths = real_models().export_cached(models, suite="broad")
        else:
            paths, failed = bq.quantized_files(models, "broad")
            QUANTIZE_FAILED.update(failed)
        for m in models:
            inp = str(work / f"{m}.input.npy")
            spec = bm.FULL[m if suite == "broad" else bq.split(m)[0]]
            np.save(inp, real_models().make_input(spec))
            files[m] = (str(paths.get(m, "")), inp)
        return files
    if suite == "quantized":
        qm = quantized_models()
        for m in models:
            inp = str(work / f"{m}.input.npy")
            np.save(inp, qm.make_input(m))
            files[m] = (qm.quantized_file(m), inp)
        return files
    if suite == "real":
        rm = real_models()
        paths = rm.export_cached(models)
        if pt2:
            rm.export_cached(models, kind="pt2")
        for m in models:
            inp = str(work / f"{m}.input.npy")
            np.save(inp, rm.make_input(rm.MODELS[m]))
            files[m] = (str(paths[m]), inp)
        return files
    for m in models:
        inp = str(work / f"{m}.input.npy")
        data = np.random.default_rng(0).standard_normal(MODELS[m][1])
        np.save(inp, data.astype("float32"))
        files[m] = (_export(m, work), inp)
    return files


QUANTIZE_FAILED: dict[str, str] = {}
"""The broad int8 models onnxruntime's quantizer could not make, with its error (set by
:func:`model_files`; every backend reports the error for them)."""


def pt2_file(model: str) -> str:
    """The cached ``torch.export`` program (.pt2) of real-suite ``model`` (exported by
    :func:`model_files` with ``pt2=True``)."""
    rm = real_models()
    return str(rm.cached_path(model, rm.default_cache(), rm.library_versions(), "pt2"))


def before_env(before: str) -> dict[str, str]:
    """The environment that makes a worker import plait from the checkout ``before``;
    ValueError when there is no plait package there."""
    path = Path(before).resolve()
    if not (path / "plait" / "__init__.py").is_file():
        raise ValueError(f"--before {before}: no plait package there (expected a checkout of "
                         "the repository, e.g. made with `git worktree add`)")
    pp = os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": pp.rstrip(os.pathsep)}


def library_objects(seed: Path) -> float:
    """Compile the c target's kernel families (plait_gemm.c, plait_conv.c...: the same
    sources for every model, each for every instruction set) into the object cache
    ``seed``; returns the seconds it took.  Workers start from a copy of these objects:
    that compile happens once per machine, not per model."""
    from plait.codegen.c import CSource, compile_kernels
    from plait.target.c.kernels import all_family_sources

    t = time.perf_counter()
    compile_kernels({}, c_sources=[*all_family_sources(),
                                   CSource("int plait_bench_seed;\n", (), "seed.c")],
                    cache_dir=seed)
    return time.perf_counter() - t


SEED: Path | None = None
"""The object cache every worker's fresh cache starts from (see library_objects)."""


def error_line(stderr: str, code: int | None) -> str:
    """What a failed worker's stderr says: the first line of its last exception's
    message (``VMError: ...``: the lines after it list arguments), else its last
    line."""
    import re

    lines = stderr.strip().splitlines()
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Failure)\b", line):
            return line
    return lines[-1] if lines else f"exit code {code}"


class Player:
    """One worker process of a (model, backend) pair, driven over its stdin/stdout."""

    def __init__(self, model: str, backend: str, index: int, onnx_path: str, inp: str,
                 work: Path, *, label: str | None = None, env: dict[str, str] | None = None,
                 fresh_cache: bool = True) -> None:
        """``backend`` is what the worker runs; ``label`` names it in the results
        (default: ``backend``); ``env`` adds environment variables (e.g. a PYTHONPATH
        to another checkout); ``fresh_cache=False`` uses the usual compiled-library
        cache instead of a fresh one (then compile times are cache hits)."""
        self.model, self.index = model, index
        self.backend = label or backend
        self.out_path = str(work / f"{model}.{self.backend}.{index}.out.npy")
        self.times: list[float] = []
        self.blocks: list[float] = []   # each round's block median (seconds)
        self.error: str | None = None
        env = {**os.environ, **(env or {})}
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(THREADS)
        # a fresh compiled-library cache, so the C compile time is measured, not a cache
        # hit; only the shared library objects (plait_gemm.c) are carried over
        self._cache = tempfile.TemporaryDirectory(prefix="plait-bench-cache-")
        if fresh_cache:
            if SEED is not None:
                (Path(self._cache.name) / "c").mkdir(exist_ok=True)
                for obj in SEED.glob("c/obj-*.o"):
                    shutil.copy2(obj, Path(self._cache.name) / "c" / obj.name)
            env["PLAIT_CACHE_DIR"] = self._cache.name
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", model, backend, onnx_path, inp,
             self.out_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env=env, cwd=ROOT)
        self.result: dict[str, Any] = self._read() or {}

    def _read(self) -> Any:
        """The worker's next JSON line (lines a library printed are skipped); None, with
        ``error`` set to the last line of its stderr, when it has exited."""
        while True:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line:
                self.proc.wait()
                self._stderr.seek(0)
                self.error = error_line(self._stderr.read(), self.proc.returncode)
                return None
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue

    def play(self, runs: int, warm: float) -> None:
        """One block: untimed calls for ``warm`` seconds (at least one), then ``runs``
        timed ones."""
        if self.error:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {runs} {warm}\n")
        self.proc.stdin.flush()
        ts = self._read()
        if ts is not None:
            self.times += ts
            self.blocks.append(statistics.median(ts))

    def finish(self) -> dict:
        """Stop the process; its result (compile times, latency, peak memory)."""
        if not self.error and self.proc.stdin is not None:
            self.proc.stdin.write("done\n")
            self.proc.stdin.flush()
            end = self._read()
            if end is not None:
                self.result.update(end)
            self.proc.stdin.close()
            self.proc.wait()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cache.cleanup()
        self._stderr.close()
        # the label, not the worker's own backend name (plait-c-before runs plait-c)
        r = {**self.result, "model": self.model, "backend": self.backend}
        if self.error:
            return {"model": self.model, "backend": self.backend, "error": self.error}
        r["median_ms"] = statistics.median(self.times) * 1e3
        r["runs"] = len(self.times)
        return r


def take_turns(players: list[Player], rounds: int, block: int, gap: float, warm: float,
               log: Any = None) -> None:
    """``rounds`` rounds in which every player, in an order shuffled per round (seeded,
    so a run is reproducible), plays one block after a pause of ``gap`` seconds (idle
    threads of the previous player stop spinning)."""
    import random

    for k in range(rounds):
        order = list(players)
        random.Random(k).shuffle(order)
        for pl in order:
            time.sleep(gap)
            pl.play(block, warm)
        if log:
            log(k)


def scaling_module(n: int) -> Any:
    """The scaling benchmark's module: one function whose dataflow block is a chain of
    ``n`` elementwise bindings (multiply and add, each of the previous value and the
    parameter), made with BlockBuilder (benchmarks/scaling_sources.py makes it from the
    other sources)."""
    return _scaling_sources().from_builder(n)


def _scaling_sources() -> Any:
    """benchmarks/scaling_sources.py, next to this file (importable when this file was
    loaded by path, as the tests do)."""
    import scaling_sources  # noqa: PLC0415

    return scaling_sources


SCALING_SOURCES = ("text", "onnx", "torch")
"""The sources the scaling benchmark builds the chain from besides BlockBuilder."""


def _sources(text: str) -> tuple[str, ...]:
    """``--scaling-sources``: the named sources, each one of :data:`SCALING_SOURCES`."""
    names = tuple(x for x in text.split(",") if x)
    bad = [x for x in names if x not in SCALING_SOURCES]
    if bad:
        raise SystemExit(f"--scaling-sources: unknown source(s) {', '.join(bad)}; the "
                         f"sources are {', '.join(SCALING_SOURCES)}")
    return names


def _timed_build(mod: Any) -> tuple[float, float]:
    """Seconds (wall, CPU) of ``plait.build(mod, "numpy")``."""
    import plait

    t, c = time.perf_counter(), time.process_time()
    plait.build(mod, "numpy")
    return time.perf_counter() - t, time.process_time() - c


def _source_modules(n: int, sources: tuple[str, ...] = SCALING_SOURCES) -> tuple[dict, dict]:
    """The chain from each of ``sources`` (left out where its library is missing), and
    microseconds per binding of importing each (text: parsing; torch: plait's importer,
    after PyTorch's export and decomposition, or past ``TORCH_MAX_BINDINGS`` the growth
    of a short export's graph: :func:`scaling_sources.grown_program`)."""
    import gc

    src = _scaling_sources()
    mods: dict = {}
    imports: dict = {}
    for name in sources:
        if name == "onnx" and not _has("onnx") or name == "torch" and not _has("torch"):
            continue
        program = src.torch_program(n) if name == "torch" else None
        t = time.perf_counter()
        mods[name] = (src.from_text(n) if name == "text" else src.from_onnx(n)
                      if name == "onnx" else src.from_torch_export(program))
        imports[name] = (time.perf_counter() - t) / n * 1e6
        del program
        gc.collect()
    return mods, imports


def _interleaved_builds(mods: dict, rounds: int) -> dict:
    """The best (wall, CPU) seconds of building each module over ``rounds`` rounds, the
    modules taking turns (in reverse order every other round), so that the machine's load
    weighs on every source alike."""
    import gc

    best = {name: (float("inf"), float("inf")) for name in mods}
    for k in range(rounds):
        for name in (list(mods) if k % 2 == 0 else list(mods)[::-1]):
            gc.collect()
            dt, dc = _timed_build(mods[name])
            best[name] = (min(best[name][0], dt), min(best[name][1], dc))
    return best


def scaling_child(n: int, rounds: int = 1,
                  sources: tuple[str, ...] = SCALING_SOURCES) -> dict:
    """One size of the scaling benchmark, in this (fresh) process: seconds (wall and
    CPU) of ``plait.build(module, "numpy")`` on a chain of ``n`` bindings made with
    BlockBuilder, and memory: the resident set after the imports, after building the
    input module, and its peak (``VmHWM``, which the pipeline sets: it holds the input
    and output of a pass at once); then the same chain from ``sources`` (text, ONNX,
    torch.export: :func:`_source_modules`) and the BlockBuilder chain again, all built
    in ``rounds`` interleaved rounds (the best of each one's builds; the BlockBuilder
    chain's figures are the best of all its builds, its best of the rounds alone is
    ``builder_turn_cpu_us_per_binding``): a module builds at the same cost per binding
    wherever it came from.  The load average (1 minute) at the end says how loaded the
    machine was."""
    import gc

    import plait

    plait.build  # noqa: B018  (loads the compiler: import plait is lazy; not build time)
    base = _rss_mb()
    mod = scaling_module(n)
    gc.collect()
    module = _rss_mb()
    t, c = time.perf_counter(), time.process_time()
    exe = plait.build(mod, "numpy")
    dt, dc = time.perf_counter() - t, time.process_time() - c
    assert len(exe.functions["main"].instructions) > n  # the whole chain was compiled
    peak = _peak_rss_mb()
    del exe
    gc.collect()
    mods, imports = _source_modules(n, sources)
    best = _interleaved_builds({"builder": mod, **mods}, rounds)
    del mod, mods
    gc.collect()
    turn = best["builder"][1]
    dt, dc = min(dt, best["builder"][0]), min(dc, turn)
    row = {"bindings": n, "rounds": rounds, "seconds": dt, "us_per_binding": dt / n * 1e6,
           "cpu_us_per_binding": dc / n * 1e6, "builder_turn_cpu_us_per_binding": turn / n * 1e6,
           "base_rss_mb": base, "module_rss_mb": module - base, "peak_rss_mb": peak,
           "peak_bytes_per_binding": (peak - base) * 2**20 / n}
    for name in SCALING_SOURCES:
        wall, cpu = best.get(name, (None, None))
        row[f"{name}_us_per_binding"] = None if wall is None else wall / n * 1e6
        row[f"{name}_cpu_us_per_binding"] = None if cpu is None else cpu / n * 1e6
        row[f"{name}_import_us_per_binding"] = imports.get(name)
    row["load"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return row


def _rss_mb() -> float:
    """This process's resident set now (``VmRSS``; 0 where /proc is missing)."""
    return _proc_status_mb("VmRSS:") or 0.0


APART = ("torch",)
"""The sources measured in a process of their own: the state a torch.export leaves in
its process (PyTorch keeps the exported graph's generated code, fx nodes and fake
tensors alive) slows every later build there, the BlockBuilder chain's too (22.4 to
25.7 us per binding), so the text and ONNX chains are not built after it, and the
torch.export chain is compared with the BlockBuilder chain built in turn with it in its
process (``torch_builder_cpu_us_per_binding``)."""


def _scaling_worker(n: int, rounds: int, sources: tuple[str, ...]) -> dict:
    """:func:`scaling_child` in a fresh process."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--scaling-worker", str(n),
         "--scaling-rounds", str(rounds), "--scaling-sources", ",".join(sources)],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)})
    if proc.returncode != 0:
        raise RuntimeError(f"the scaling run of {n} bindings failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pipeline_scaling(sizes: tuple[int, ...], log: Any = None, rounds: int = 1,
                     sources: tuple[str, ...] = SCALING_SOURCES) -> list[dict]:
    """Seconds per binding and peak memory of the default pipeline (numpy target) on
    chains of elementwise ops: each size in a process of its own (so that each peak is
    its own), one after the other, and each of :data:`APART` in another; each source's
    best of ``rounds`` interleaved builds (:func:`scaling_child`)."""
    rows = []
    together = tuple(x for x in sources if x not in APART)
    for n in sizes:
        row = _scaling_worker(n, rounds, together)
        for name in sources:
            if name in APART and (name != "torch" or _has("torch")):
                apart = _scaling_worker(n, rounds, (name,))
                for key in ("us_per_binding", "cpu_us_per_binding", "import_us_per_binding"):
                    row[f"{name}_{key}"] = apart[f"{name}_{key}"]
                row[f"{name}_builder_cpu_us_per_binding"] = apart[
                    "builder_turn_cpu_us_per_binding"]
        rows.append(row)
        if log:
            log(row)
    return rows


def round_log(model: str, rounds: int, players: dict[str, list[Player]], k: int) -> None:
    """Print round ``k``'s block median of each backend (median over its processes)."""
    cells = [f"{b} {statistics.median(pl.blocks[-1] for pl in ps) * 1e3:.3f}"
             for b, ps in players.items() if all(pl.blocks and not pl.error for pl in ps)]
    print(f"{model:12s} round {k + 1:2d}/{rounds}: " + ", ".join(cells), flush=True)


def combine(players: list[Player], results: list[dict], ref: list[Player]) -> dict:
    """One (model, backend)'s processes as one result: the median of all their timed
    calls, each process's median, each round's block median (the median over the
    processes), in how many rounds that was at or below onnxruntime's (``ref``), the
    first process's compile times and the largest peak memory.  Any process's error is
    the result."""
    errors = [r for r in results if "error" in r]
    if errors:
        return errors[0]
    times = sorted(t for p in players for t in p.times)
    out = dict(results[0])
    out["median_ms"] = statistics.median(times) * 1e3
    out["p10_ms"] = times[len(times) // 10] * 1e3
    out["runs"] = len(times)
    out["process_medians_ms"] = [r["median_ms"] for r in results]
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
    rounds = [statistics.median(bs) * 1e3 for bs in zip(*(p.blocks for p in players))]
    out["round_medians_ms"] = rounds
    ref_rounds = [statistics.median(bs) * 1e3 for bs in zip(*(p.blocks for p in ref))]
    if ref_rounds and rounds:
        out["rounds_at_or_below_onnxruntime"] = sum(
            a <= b for a, b in zip(rounds, ref_rounds))
        out["rounds"] = min(len(rounds), len(ref_rounds))
    return out


def source_ratios(row: dict) -> list[float | None]:
    """A scaling row's CPU time per binding of the chain parsed from text, imported from
    ONNX and from torch.export over the BlockBuilder chain's (for one built in a process
    of its own, :data:`APART`, over the BlockBuilder chain's built in turn with it there;
    None for a source not built): 1.0 is the goal, one speed for every source."""
    out: list[float | None] = []
    for k in SCALING_SOURCES:
        # (a source built in a process of its own, APART, over the BlockBuilder chain
        # built in turn with it there)
        base = row.get(f"{k}_builder_cpu_us_per_binding") or row.get("cpu_us_per_binding")
        cpu = row.get(f"{k}_cpu_us_per_binding")
        out.append(None if not base or cpu is None else cpu / base)
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
    turns = [r for r in results if "rounds" in r]
    if turns:
        lines += ["", "| model | backend | rounds at or below onnxruntime (block medians) |",
                  "|---|---|---|"]
        lines += [f"| {r['model']} | {r['backend']} | {r['rounds_at_or_below_onnxruntime']} "
                  f"of {r['rounds']} |" for r in turns]
    if not results:
        lines = []
    if scaling:
        lines += ["", "| bindings | pipeline seconds | µs per binding | parsed from text, µs "
                  "per binding | from ONNX, µs per binding | from torch.export, µs per "
                  "binding | CPU µs per binding (builder / text / ONNX / torch.export) | "
                  "CPU ratio to builder (text / ONNX / torch.export) | "
                  "builder in torch.export's process, CPU µs per binding | "
                  "peak RSS MB | of which after imports MB | input module MB | peak above "
                  "imports, bytes per binding | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in scaling:
        cpu = " / ".join(_fmt(s.get(k), ".1f") for k in (
            "cpu_us_per_binding", "text_cpu_us_per_binding", "onnx_cpu_us_per_binding",
            "torch_cpu_us_per_binding"))
        lines.append(f"| {s['bindings']} | {s['seconds']:.2f} | {s['us_per_binding']:.1f} | "
                     f"{_fmt(s.get('text_us_per_binding'), '.1f')} | "
                     f"{_fmt(s.get('onnx_us_per_binding'), '.1f')} | "
                     f"{_fmt(s.get('torch_us_per_binding'), '.1f')} | {cpu} | "
                     f"{' / '.join(_fmt(x, '.2f') for x in source_ratios(s))} | "
                     f"{_fmt(s.get('torch_builder_cpu_us_per_binding'), '.1f')} | "
                     f"{_fmt(s.get('peak_rss_mb'), '.0f')} | {_fmt(s.get('base_rss_mb'), '.0f')} | "
                     f"{_fmt(s.get('module_rss_mb'), '.0f')} | "
                     f"{_fmt(s.get('peak_bytes_per_binding'), '.0f')} | "
                     f"{_fmt(s.get('load'), '.1f')} |")
    return "\n".join(lines).strip("\n")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def geomean(values: list[float]) -> float:
    """The geometric mean of positive ``values``."""
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


TOOL_FAILURE = "onnxruntime.quantization:"
"""How the error of a broad int8 model the quantizer could not make begins."""


def check_output(suite: str, model: str, backend: str, onnx_path: str, out: Any,
                 ref: Any) -> str | None:
    """Why ``backend``'s output of ``model`` does not match onnxruntime's ``ref``, or
    None: the broad suites hold plait to broad_check.py's bounds (1e-4 of the largest
    magnitude; int8: one quantization step), peers to the suites' usual bounds; the
    quantized suite to 1% of the largest magnitude; the others to
    :func:`outputs_disagree`."""
    ours = backend not in PEERS
    if suite == "quantized" or (suite == "broad-int8" and not ours):
        return outputs_disagree(out, ref, QUANTIZED_ATOL, 0.0)
    if suite == "broad" and ours:
        return broad()[2].float_disagree(out, ref)
    if suite == "broad-int8":
        _, bq, bc = broad()
        return bc.int8_disagree(out, ref, onnx_path, bq.split(model)[1])
    return outputs_disagree(out, ref)


def check_report(results: list[dict], suite: str) -> tuple[str, list[str]]:
    """``--check``'s table (each model's result per backend) and the problems (plait's
    failures and disagreements; a model the quantizer could not make is listed, not a
    problem)."""
    lines = [f"| model | {' | '.join(dict.fromkeys(r['backend'] for r in results))} |"]
    lines.append("|---|" + "---|" * (lines[0].count("|") - 2))
    by_model: dict[str, list[dict]] = {}
    for r in results:
        by_model.setdefault(r["model"], []).append(r)
    problems = []
    for m, rs in by_model.items():
        lines.append(f"| {m} | " + " | ".join(r["check"] for r in rs) + " |")
        problems += [f"{m} on {r['backend']}: {r['check']}" for r in rs
                     if r["check"] != "ok" and r["backend"] not in PEERS
                     and not r["check"].startswith(TOOL_FAILURE)]
    ok = sum(all(r["check"] == "ok" for r in rs) for rs in by_model.values())
    lines += ["", f"{suite}: {ok} of {len(by_model)} models match onnxruntime on every "
                  "backend"]
    if problems:
        lines += ["", "plait's gaps:", *[f"  {p}" for p in problems]]
    return "\n".join(lines), problems


DOCS = docs_figures.DOCS
"""Where ``--write-docs`` writes the current figures."""


def machine() -> str:
    """The machine a run measured (docs_figures.machine with this run's threads)."""
    return docs_figures.machine(THREADS)


def write_docs(path: Path, suite: str, summary: str, argv: list[str] | None,
               by_isa: bool = True) -> str:
    """Put ``summary`` (suite_report's table) with the machine and the command between
    the markers ``<!-- figures:SUITE:begin -->`` and ``<!-- figures:SUITE:end -->`` of
    ``path``; returns what it did.  ValueError when the markers are missing."""
    return docs_figures.write_figures(path, suite, summary,
                                      docs_figures.command("run.py", argv), THREADS,
                                      by_isa=by_isa)


def suite_report(results: list[dict]) -> tuple[str, list[str]]:
    """The real suite's table: per model, onnxruntime's median and each other backend's
    median and ratio to it; then each backend's geometric mean of the ratios over the
    models it ran correctly.  A backend that failed on a model or whose outputs disagreed
    (refused) gets the reason instead of a figure and is left out of that mean.  Returns
    the table and the problems (one line per failed or refused model and backend)."""
    models = list(dict.fromkeys(r["model"] for r in results))
    backends = [b for b in dict.fromkeys(r["backend"] for r in results) if b != "onnxruntime"]
    by = {(r["model"], r["backend"]): r for r in results}
    peers = [p for p in PEERS if any(r["backend"] == p for r in results)]
    ours = [b for b in backends if b not in PEERS]
    with_best = len(peers) > 1
    head = "| model | onnxruntime ms | " + ("best peer | " if with_best else "") + " | ".join(
        f"{b} ms | {b} / onnxruntime" for b in backends) + " |"
    lines = [head, "|---|---|" + ("---|" if with_best else "") + "---|---|" * len(backends)]
    ratios: dict[str, list[float]] = {b: [] for b in backends}
    best_ratios: dict[str, list[float]] = {b: [] for b in ours}
    left_out: dict[str, list[str]] = {b: [] for b in backends}
    problems = []
    for m in models:
        ref = by.get((m, "onnxruntime"), {})
        base = ref.get("median_ms")
        cells = [m, f"{base:.3f}" if base else f"error: {ref.get('error', 'not run')}"]
        ran = {p: by[(m, p)]["median_ms"] for p in peers
               if (m, p) in by and "error" not in by[(m, p)]}
        best = min(ran.items(), key=lambda kv: kv[1]) if ran else None
        if with_best:
            cells.append(f"{best[0]} {best[1]:.3f}" if best else "—")
        for b in ours:
            r = by.get((m, b))
            if best is not None and r is not None and "error" not in r:
                best_ratios[b].append(r["median_ms"] / best[1])
        for b in backends:
            r = by.get((m, b))
            if r is None:
                cells += ["—", "—"]
                continue
            if "error" in r:
                what = "REFUSED" if r["error"].startswith("outputs disagree") else "FAILED"
                cells += [f"**{what}**: {r['error']}", "—"]
                left_out[b].append(m)
                if b not in PEERS and not r["error"].startswith(TOOL_FAILURE):
                    # a peer that cannot run a model, or a model onnxruntime's quantizer
                    # could not make, is not plait's failure
                    problems.append(f"{m} on {b}: {what.lower()}: {r['error']}")
                continue
            if not base:
                cells += [f"{r['median_ms']:.3f}", "—"]
                left_out[b].append(m)
                continue
            ratio = r["median_ms"] / base
            ratios[b].append(ratio)
            cells += [f"{r['median_ms']:.3f}", f"{ratio:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for b in backends:
        if ratios[b]:
            out = (f"geomean {b} / onnxruntime over {len(ratios[b])} models: "
                   f"{geomean(ratios[b]):.2f}")
        else:
            out = f"geomean {b} / onnxruntime: no model ran"
        if left_out[b]:
            out += f" (left out: {', '.join(left_out[b])})"
        lines.append(out)
    if with_best:
        for b in ours:
            if best_ratios[b]:
                worst = max(best_ratios[b])
                lines.append(f"geomean {b} / best peer (the faster of {' and '.join(peers)} "
                             f"per model) over {len(best_ratios[b])} models: "
                             f"{geomean(best_ratios[b]):.2f} (largest {worst:.2f})")
    return "\n".join(lines), problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--suite", choices=SUITES, default="default",
                   help="the project's models (default), the real-model suite or the "
                        "quantized suite")
    p.add_argument("--models", default=None,
                   help=f"comma-separated, of {', '.join(MODELS)} (default "
                        f"{DEFAULT_MODELS}); with --suite real, of its models (default all)")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated, of {', '.join(BACKENDS)} (default all but "
                        f"{', '.join(OPT_IN)}; with --suite real, {REAL_BACKENDS}; with "
                        "--suite quantized, onnxruntime,plait-c)")
    p.add_argument("--before", default=None, metavar="DIR",
                   help="also run plait-c from this checkout (another revision)")
    p.add_argument("--runs", type=int, default=None,
                   help="timed calls per process (at least 30; default 50, 30 with "
                        "--suite real), in blocks of --block")
    p.add_argument("--block", type=int, default=5,
                   help="timed calls per turn (after one untimed call)")
    p.add_argument("--gap", type=float, default=0.2,
                   help="seconds of idle before each turn (the previous process's idle "
                        "threads stop spinning)")
    p.add_argument("--warm", type=float, default=0.05,
                   help="seconds of untimed calls (at least one) at the start of each turn")
    p.add_argument("--processes", type=int, default=None,
                   help="processes per (model, backend); all of them take turns (default 3, "
                        "1 with --suite real)")
    p.add_argument("--scaling", default=None,
                   help="pipeline scaling sizes (default 1000,10000,100000; none with "
                        "--suite real)")
    p.add_argument("--scaling-only", action="store_true",
                   help="run only the pipeline scaling (sizes from --scaling), no models")
    p.add_argument("--scaling-rounds", type=int, default=1,
                   help="rounds of the scaling builds: each source's best of this many "
                        "builds, the sources taking turns (default 1)")
    p.add_argument("--scaling-sources", default=",".join(SCALING_SOURCES),
                   help="the sources besides BlockBuilder the scaling benchmark builds the "
                        "chain from (default text,onnx,torch)")
    p.add_argument("--scaling-worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--check", action="store_true",
                   help="with --suite broad or broad-int8: only check every model's "
                        "outputs against onnxruntime's (no timing; default backends "
                        "onnxruntime,plait-c)")
    p.add_argument("--write-docs", action="store_true",
                   help="write the run's summary, with the machine, into "
                        "docs/performance.md's current figures (with --scaling-only: the "
                        "scaling table)")
    p.add_argument("--worker", nargs=5, metavar=("MODEL", "BACKEND", "ONNX", "INPUT", "OUT"))
    args = p.parse_args(argv)
    if args.worker:
        _set_threads()
        serve(*args.worker)
        return 0
    if args.scaling_worker is not None:
        print(json.dumps(scaling_child(
            args.scaling_worker, args.scaling_rounds, _sources(args.scaling_sources))), flush=True)
        return 0
    if args.scaling_only:
        if args.write_docs:
            try:
                docs_figures.require_block(DOCS, "scaling", by_isa=False)
            except ValueError as e:
                print(f"--write-docs: {e}")
                return 2
        sizes = tuple(int(x) for x in (args.scaling or "1000,10000,100000").split(",") if x)
        rows = pipeline_scaling(sizes, log=lambda r: print(
            f"{r['bindings']} bindings: {r['seconds']:.2f} s, {r['us_per_binding']:.1f} us "
            f"per binding (CPU {r['cpu_us_per_binding']:.1f}), peak RSS "
            f"{r['peak_rss_mb']:.0f} MB; from text / ONNX / torch.export: CPU " + " / ".join(
                _fmt(r.get(f"{k}_cpu_us_per_binding"), ".1f") for k in SCALING_SOURCES)
            + " us per binding, " + " / ".join(_fmt(x) for x in source_ratios(r))
            + " of the builder's (torch.export's: of the builder's in its process, CPU "
            + _fmt(r.get("torch_builder_cpu_us_per_binding"), ".1f")
            + f"; load {_fmt(r.get('load'), '.1f')})", flush=True),
            rounds=args.scaling_rounds, sources=_sources(args.scaling_sources))
        table = report([], rows)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "scaling.md").write_text(table + "\n")
        (out / "scaling.json").write_text(json.dumps({"scaling": rows}, indent=2))
        print()
        print(table)
        if args.write_docs:
            print(f"\n{write_docs(DOCS, 'scaling', table, argv, by_isa=False)}")
        return 0
    real = args.suite in MODEL_SUITES
    if args.models is None:
        args.models = ",".join(suite_models(args.suite))
    explicit = args.backends is not None
    if args.check and args.suite not in ("broad", "broad-int8"):
        print("--check runs with --suite broad or broad-int8")
        return 2
    if args.write_docs and (args.check or args.suite not in MODEL_SUITES):
        print("--write-docs writes the figures of a timed run of --suite real, quantized, "
              "broad or broad-int8")
        return 2
    if args.write_docs:
        try:
            docs_figures.require_block(DOCS, args.suite)
        except ValueError as e:
            print(f"--write-docs: {e}")
            return 2
    if args.backends is None:
        args.backends = ("onnxruntime,plait-c" if args.check else
                         REAL_BACKENDS if args.suite == "real" else
                         "onnxruntime,openvino,plait-c" if real else
                         ",".join(b for b in BACKENDS if b not in OPT_IN))
    if "openvino" in args.backends.split(",") and not _has("openvino"):
        if explicit:
            print("--backends: openvino is not installed (pip install openvino, or the "
                  "benchmark extra: pip install -e '.[bench]')")
            return 2
        args.backends = ",".join(b for b in args.backends.split(",") if b != "openvino")
        print("openvino is not installed: its column is left out (pip install openvino)",
              flush=True)
    args.runs = args.runs if args.runs is not None else (30 if real else 50)
    args.processes = args.processes if args.processes is not None else (1 if real else 3)
    if args.scaling is None:
        args.scaling = "" if real else "1000,10000,100000"
    if args.runs < 30:
        print("--runs must be at least 30 (the median of 30 runs is the reported figure)")
        return 2
    if args.processes < 1 or args.block < 1:
        print("--processes and --block must be at least 1")
        return 2
    unknown = [b for b in args.backends.split(",") if b not in BACKENDS]
    if unknown:
        print(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(BACKENDS)}"
              + (" (plait-c-kernel times one kernel, not the model: use spread.py "
                 "--kernel-loop)" if "plait-c-kernel" in unknown else ""))
        return 2
    only_real = [b for b in args.backends.split(",") if b in REAL_ONLY]
    if only_real and args.suite != "real":
        print(f"--backends: {', '.join(only_real)} runs in --suite real only")
        return 2
    problem = unknown_models(args.models, args.suite)
    if problem:
        print(problem)
        return 2
    # (label, backend the worker runs, extra environment)
    runs: list[tuple[str, str, dict[str, str]]] = [
        (b, b, {"PLAIT_NUM_THREADS": "1"} if "-1thread" in b else {})
        for b in args.backends.split(",")]
    if args.before:
        try:
            env = before_env(args.before)
        except ValueError as err:
            print(err)
            return 2
        runs.append(("plait-c-before", "plait-c", env))
        # the before tree in torch's company too, when plait-c is asked for there
        runs += [(b.replace("plait-c", "plait-c-before", 1), b, env)
                 for b in args.backends.split(",") if b in ("plait-c+torch", "plait-c+torch-ops")]
    import numpy as np

    global SEED
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        library_s = None
        if any(b.startswith("plait-c") or b == "from_torch" for _, b, _ in runs):
            SEED = work / "seed-cache"
            library_s = library_objects(SEED)
            print(f"plait_gemm.c object (compiled once per machine): {library_s:.2f} s",
                  flush=True)
        try:
            files = model_files(args.suite, args.models.split(","), work,
                                pt2=any(b == "from_torch" for _, b, _ in runs))
        except RuntimeError as err:
            print(f"--suite {args.suite}: {err}")
            return 2
        for model, (onnx_path, inp) in files.items():
            if model in QUANTIZE_FAILED:   # the quantizer's failure: no file to run
                results += [{"model": model, "backend": label, "error": QUANTIZE_FAILED[model],
                             "check": QUANTIZE_FAILED[model]} for label, _, _ in runs]
                continue
            # one process at a time compiles (the others wait idle); onnxruntime first,
            # its output is the reference
            order = sorted(runs, key=lambda r: r[0] != "onnxruntime")
            players = {label: [Player(model, b, i,
                                      pt2_file(model) if b == "from_torch" else onnx_path,
                                      inp, work, label=label, env=env)
                               for i in range(args.processes)] for label, b, env in order}
            ref = exact = None
            if args.suite == "broad-int8" and any(b not in PEERS for _, b, _ in runs):
                # where onnxruntime saturates uint8 x int8 products, plait is held to
                # its exact run of the same model (broad_check.exact_reference)
                exact = broad()[2].exact_reference(onnx_path, np.load(inp))
            for label, _, _ in order:
                for pl in players[label]:
                    if pl.error or not Path(pl.out_path).exists():
                        continue
                    out = np.load(pl.out_path)
                    if label == "onnxruntime":
                        ref = out if ref is None else ref
                    elif ref is not None:
                        mine = exact if exact is not None and label not in PEERS else ref
                        pl.error = check_output(args.suite, model, label, onnx_path, out, mine)
                        if pl.error and mine is exact:
                            pl.error += f" ({broad()[2].SATURATION_NOTE})"
            if args.check:
                results += [{"model": model, "backend": label, "check": pl.error or "ok"}
                            for label, _, _ in order for pl in players[label][:1]]
                for ps in players.values():
                    for pl in ps:
                        pl.error = pl.error or "checked only"
                        pl.finish()
                continue
            live = [pl for ps in players.values() for pl in ps if not pl.error]
            rounds = -(-args.runs // args.block)
            take_turns(live, rounds, args.block, args.gap, args.warm,
                       functools.partial(round_log, model, rounds, players))
            ort = players.get("onnxruntime", [])
            for label, _, _ in order:
                rs = [pl.finish() for pl in players[label]]
                results.append(combine(players[label], rs,
                                       ort if label != "onnxruntime" else []))
    if args.check:
        table, problems = check_report(results, args.suite)
        print()
        print(table)
        return 1 if problems else 0
    scaling = pipeline_scaling(tuple(int(s) for s in args.scaling.split(",") if s),
                               rounds=args.scaling_rounds,
                               sources=_sources(args.scaling_sources))
    table = report(results, scaling)
    problems: list[str] = []
    summary = ""
    if real:
        summary, problems = suite_report(results)
        table = summary + "\n\n" + table
    if any(r["backend"] == "from_torch" for r in results):
        table += ("\n\nfrom_torch: plait-c built from the model's torch.export program "
                  "(from_exported_program) instead of its ONNX export; the conversion ran "
                  "in a child process (its compile seconds: import / pipeline / C, "
                  "torch.export.load excluded) and the timing process, which loaded the "
                  "saved executable, never imported torch.")
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
    if args.write_docs:
        print(f"\n{write_docs(DOCS, args.suite, summary, argv)}")
    if problems:
        print("\nrefused or failed (left out of the geometric means):\n  "
              + "\n  ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
