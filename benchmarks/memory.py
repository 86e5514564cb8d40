"""Where the memory goes: building and serving a model, by owner, against onnxruntime;
and start-up.

    python benchmarks/memory.py                          # the whole real-model suite
    python benchmarks/memory.py --models bert --target c --json out.json
    python benchmarks/memory.py --write-docs             # the tables into docs/performance.md
    python benchmarks/memory.py --from-json out.json --write-docs   # an earlier run's tables

A model whose export, build or run fails is listed under the tables with the reason
(the other models are still measured).

Every measurement runs in a fresh process of its own without torch (the models are the
real-model suite's ``transformers`` exports, benchmarks/real_models.py, made once in a
child process and cached).  Python's bytecode is cached for the children
(``PYTHONPYCACHEPREFIX``, even under ``PYTHONDONTWRITEBYTECODE``), as for an installed
package.  For each model, three tables:

* **build** (plait; after a first build of the model in another process, unless
  ``--cold``, so that kernels changed since the compiled-library cache was filled are
  not compiled in the measured one): the process imports the ONNX file, hands the
  module to ``plait.build`` holding nothing else of it (as ``plait compile`` does) and
  saves a ``.plx``.  Its peak resident memory above the baseline: ``VmHWM`` (reset at
  the baseline) minus ``VmRSS`` after importing the compiler's modules the build loads,
  whose code ``import plait`` defers, and nothing else (the strict reading: in
  particular onnx's table of operator schemas, about 7 MiB made whole at the first
  ``onnx.defs.get_schema``, is in the peak if the build makes it,
  ``onnx_schemas_in_build`` in the JSON and ``+ schemas`` beside the multiple in the
  table; the importer checks nodes against a table of its own and does not;
  ``onnx_schemas_mib`` is what onnx's table costs after the build), as a multiple of
  the weights; the pass that raised the peak most (or code generation, which computes
  the packed weights, or the save, when it raised the peak more than any pass; the
  import when nothing after it did); and the owners at the end of the build measured
  directly: the original weights still held (followed by weak references: those the
  kept graph cannot derive from the packed ones, and those used as they are), the
  executable's constants (and how much of them are buffers of their own, not shared
  with the originals: the packed weights), the kept graph's text, the native libraries;
  the rest of the peak is the IR's Python objects and the transient arrays;
* **serve** (plait): a process loads the ``.plx`` with ``plait.load`` and runs it six
  times: the resident memory after loading and after the first run, the peak, and the
  owners of what loading kept (the constants, the graph's text, the libraries; the
  graph's own constants are read from the file only when the graph is parsed), the
  arenas the memory plan gives the VM (``AllocStorage`` bytes), what the first run added
  beyond the loaded file (the mapped library, arenas: native allocations), and how many
  modules of the compiler the process imported (none: it serves with the runtime).
  Another process gives the Python heap ``plait.load`` leaves (``tracemalloc``; numpy
  reports its array buffers to it), untimed;
* **serve** (onnxruntime): a process creates an ``InferenceSession`` from the ONNX file
  (CPU, same threads) and runs it six times: the same peak above the baseline;
* **start-up**: seconds from process start (the parent's clock before it starts the
  child) to the first result, of which imports (numpy and plait's runtime; numpy and
  onnxruntime); load + first run; and the wall time of ``plait run model.plx``.

Sizes are MiB (2**20 bytes).  ``tracemalloc`` (the standard library) is used rather than a
profiler such as memray because the owners here are few and known: their sizes are read
off the objects, and ``/proc`` gives what the process holds in all.  Peaks are
``VmHWM``, which the kernel keeps per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

def default_models() -> tuple[str, ...]:
    """The real-model suite's models (benchmarks/real_models.py), in its order."""
    from real_models import MODELS

    return tuple(MODELS)

RUNS = 6


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _rss() -> float:
    return _status_mib("VmRSS:")


def _hwm() -> float:
    return _status_mib("VmHWM:")


def _reset_peak() -> None:
    """Make ``VmHWM`` the resident memory now (Linux: ``clear_refs`` 5), so that a peak
    read later is that of what ran since, not of an import's transients before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:   # not allowed here: the peak since process start is read
        pass


def _inputs(spec_name: str):  # type: ignore[no-untyped-def]
    """The input of a model of the real-model suite, or of ``"2x16:float32"`` (a shape
    and a dtype: a model of one input that is not in the suite)."""
    import numpy as np

    rng = np.random.default_rng(0)
    if ":" in spec_name:
        dims, dtype = spec_name.split(":")
        return rng.standard_normal([int(d) for d in dims.split("x")]).astype(dtype)
    from real_models import MODELS

    spec = MODELS[spec_name]
    if spec.dtype.startswith("int"):
        return rng.integers(0, spec.vocab or 2, size=spec.shape).astype(spec.dtype)
    return rng.standard_normal(spec.shape).astype(spec.dtype)


_COMPILER = ("plait.ir", "plait.kernel", "plait.op", "plait.interp", "plait.transform",
             "plait.codegen", "plait.target", "plait.pipeline", "plait.build", "plait.offload",
             "plait.frontend", "plait.dialects")


def _root_arrays(arrays):  # type: ignore[no-untyped-def]
    """The arrays owning the memory behind ``arrays``, by id."""
    import numpy as np

    seen = {}
    for a in arrays:
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        seen[id(root)] = root
    return seen


def _roots(arrays) -> dict[int, int]:  # type: ignore[no-untyped-def]
    """The buffers behind ``arrays``: id of the array owning the memory -> its bytes."""
    return {k: a.nbytes for k, a in _root_arrays(arrays).items()}


def _array_mib(arrays, besides=()) -> float:  # type: ignore[no-untyped-def]
    """The bytes of distinct buffers among ``arrays`` (views of one buffer count once),
    but those of the buffers behind ``besides``."""
    seen, other = _roots(arrays), _roots(besides)
    return sum(n for k, n in seen.items() if k not in other) / 2**20


def _planned_arena_mib(exe) -> float:  # type: ignore[no-untyped-def]
    """The storage buffers the memory plan gives the executable's functions (the VM's
    arenas), summed."""
    from plait.runtime.executable import AllocStorage

    return sum(ins.nbytes for f in exe.functions.values() for ins in f.instructions
               if isinstance(ins, AllocStorage)) / 2**20


def _compiler_imported() -> None:
    """Import the compiler's modules a build from ONNX loads (``import plait`` loads
    them only when first used), so that the baseline of the build holds their code and
    its peak is what building the model adds.  Nothing else: onnx's table of operator
    schemas, made whole at the first ``onnx.defs.get_schema`` (about 7 MiB), is counted
    in the build's peak if the build makes it (the importer checks nodes against a table
    of its own, plait/frontend/onnx/op_specs.py, and does not)."""
    import onnx  # noqa: F401

    import plait.build  # noqa: F401
    import plait.codegen.vm_codegen  # noqa: F401
    import plait.frontend.onnx  # noqa: F401
    import plait.pipeline  # noqa: F401
    import plait.target.c  # noqa: F401


def _onnx_schemas_mib() -> float:
    """The resident MiB onnx's first schema look-up adds now: its table of operator
    schemas (about 5-7 MiB), or about 0 if something in this process made it before."""
    import onnx

    before = _rss()
    onnx.defs.get_schema("Relu", onnx.defs.onnx_opset_version(), "")
    return _rss() - before


def child_build(onnx_path: str, target: str, out: str) -> dict:
    """Import the ONNX file and build it as ``plait compile`` does: the module goes to
    ``plait.build`` and nothing else holds it (its originals can go once packed); save
    the ``.plx``.  The owners at the end are read off the objects; the originals are
    followed by weak references, not held."""
    import weakref

    base0 = _rss()
    _compiler_imported()
    import plait
    from plait.frontend.onnx import from_onnx
    from plait.ir import Constant
    from plait.ir.visitor import post_order
    from plait.transform import PassContext, PassInstrument

    class PeakPass(PassInstrument):
        """The pass that raised the resident peak most."""

        def __init__(self) -> None:
            self.top = (0.0, "")

        def run_before_pass(self, mod, info) -> None:  # type: ignore[no-untyped-def]
            self.before = _hwm()

        def run_after_pass(self, mod, result, info) -> None:  # type: ignore[no-untyped-def]
            self.after = _hwm()
            if _hwm() - self.before > self.top[0]:
                self.top = (_hwm() - self.before, info.name)

    _reset_peak()
    base, hwm0 = _rss(), _hwm()
    t0 = time.perf_counter()
    mods = [from_onnx(onnx_path)]  # from the path, as `plait compile` does: weights read once
    after_import = _rss() - base
    roots = _root_arrays(n.data for f in mods[0].functions.values() for n in post_order(f)
                         if isinstance(n, Constant))
    originals = [(weakref.ref(a), a.nbytes) for a in roots.values()]
    del roots
    import_raised = _hwm() - hwm0
    peak = PeakPass()
    with PassContext(instruments=[peak]):
        exe = plait.build(mods.pop(), target)
    build_peak = _hwm() - base
    if _hwm() - peak.after > peak.top[0]:   # after the passes: packing the weights
        peak.top = (_hwm() - peak.after, "code generation")
    before_save = _hwm()
    exe.save(out)
    if _hwm() - before_save > peak.top[0]:
        peak.top = (_hwm() - before_save, "save")
    if peak.top[0] == 0:   # nothing after the import raised the peak: it was the import's
        peak.top = (import_raised, "import")
    kept = [a for a in (r() for r, _ in originals) if a is not None]
    row = {"build_s": time.perf_counter() - t0, "import_mib": after_import,
           "compiler_code_mib": base - base0,
           "build_peak_mib": _hwm() - base, "pipeline_peak_mib": build_peak,
           "peak_pass": peak.top[1], "plx_mib": os.path.getsize(out) / 2**20,
           "original_constants_mib": sum(n for _, n in originals) / 2**20,
           "originals_kept_mib": _array_mib(kept),
           "packed_constants_mib": _array_mib(exe.constants),
           "packed_new_mib": _array_mib(exe.constants, besides=kept),
           "graph_text_mib": len(exe.graph or "") / 2**20,
           "libraries_mib": sum(len(b) for b in exe.libs.values()) / 2**20}
    # after the build: onnx's table of schemas, if the build did not make it (if it did,
    # about 0 here, and the table is in the build's peak)
    schemas = _onnx_schemas_mib()
    return {**row, "onnx_schemas_mib": schemas, "onnx_schemas_in_build": schemas < 1}


def child_serve_plait(plx: str, model: str, threads: int) -> dict:
    """Load the ``.plx`` (``plait.load``) and run it six times: resident memory after
    each step, times, and the owners of what loading kept."""
    import numpy as np

    import plait
    import plait.session  # noqa: F401  (the runtime: imports, counted as such)

    x = _inputs(model)
    imported_at = time.time()
    base = _rss()
    t0 = time.perf_counter()
    sess = plait.load(plx)  # the executable and its VirtualMachine
    after_load = _rss() - base
    first = sess(x)
    first_at = time.time()
    first_s = time.perf_counter() - t0
    after_first = _rss() - base
    for _ in range(RUNS - 1):
        sess(x)
    assert np.all(np.isfinite(first if isinstance(first, np.ndarray) else first[0]))
    exe = sess.executable
    return {
        # (the graph's own constants are read from the file when parsed: none here)
        "constants_mib": _array_mib(exe.constants),
        "graph_text_mib": len(exe.graph or "") / 2**20,
        "libraries_mib": sum(len(b) for b in exe.libs.values()) / 2**20,
        "arenas_planned_mib": _planned_arena_mib(exe),
        "load_mib": after_load, "first_run_mib": after_first,
        "serve_peak_mib": _hwm() - base, "load_first_run_s": first_s,
        "imported_at": imported_at, "first_result_at": first_at,
        "compiler_modules": sorted(m for m in sys.modules if m.startswith(_COMPILER)),
        "native_beyond_heap_mib": max(after_first - after_load, 0.0)}


def child_load_heap(plx: str) -> dict:
    """The Python heap ``plait.load`` leaves (``tracemalloc``, which numpy reports its
    array buffers to), in a process of its own: tracing slows loading down, so the
    serving process is not traced."""
    import tracemalloc

    import plait
    import plait.session  # noqa: F401

    tracemalloc.start()
    sess = plait.load(plx)
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del sess
    return {"load_python_heap_mib": heap / 2**20}


def child_serve_ort(onnx_path: str, model: str, threads: int) -> dict:
    import onnxruntime as ort

    x = _inputs(model)
    imported_at = time.time()
    base = _rss()
    t0 = time.perf_counter()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    first_s = time.perf_counter() - t0
    first_at = time.time()
    for _ in range(RUNS - 1):
        sess.run(None, feed)
    return {"serve_peak_mib": _hwm() - base, "load_first_run_s": first_s,
            "imported_at": imported_at, "first_result_at": first_at}


def _child_env() -> dict[str, str]:
    """The children's environment: this checkout first on the path, and Python's
    bytecode cached (in a directory of the temporary directory, ``PYTHONPYCACHEPREFIX``)
    even where ``PYTHONDONTWRITEBYTECODE`` is set, as for an installed package: start-up
    is then not the time to compile plait's sources, which onnxruntime never pays."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "plait-bench-pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run_child(*args: str) -> dict:
    env = _child_env()
    started = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "first_result_at" in out:  # process start (its interpreter and imports included)
        out["start_to_first_s"] = out["first_result_at"] - started
        out["imports_s"] = out["imported_at"] - started
    return out


def weight_mib(onnx_path: Path) -> float:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        total += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total / 2**20


def plait_run_s(plx: Path) -> float:
    """Wall seconds of ``plait run model.plx`` (``python -m plait.cli``): process start,
    imports, load, one run, the printed result, exit."""
    env = _child_env()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "plait.cli", "run", str(plx)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"plait run {plx} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def measure(model: str, onnx_path: Path, target: str, threads: int, work: Path,
            warm: bool = True) -> dict:
    """One model's row.  With ``warm``, a first build (in a child of its own, not
    measured) compiles the kernel families the model needs into the cache, so the
    measured build is the model's, not the one-time compilation of changed kernels
    (which loaded BERT's build by 28 MiB after a kernel source changed)."""
    plx = work / f"{model}-{target}.plx"
    row: dict = {"model": model, "weights_mib": weight_mib(onnx_path)}
    if warm:
        _run_child("build", str(onnx_path), target, str(plx))
    row["build"] = _run_child("build", str(onnx_path), target, str(plx))
    row["plait"] = _run_child("serve_plait", str(plx), model, str(threads))
    row["plait"]["plait_run_s"] = plait_run_s(plx)
    row["plait"].update(_run_child("load_heap", str(plx)))
    row["onnxruntime"] = _run_child("serve_ort", str(onnx_path), model, str(threads))
    return row


def table(rows: list[dict], target: str) -> str:
    """Three tables: the build's peak by owner, serving's peak by owner against
    onnxruntime, and start-up."""
    build = ["| model | weights | build peak (x weights) | raised most by "
             "| originals still held | executable's constants (not shared with originals) "
             "| kept graph text | libraries | the rest (IR, transients) |",
             "|---|---|---|---|---|---|---|---|---|"]
    serve = [f"| model | serve peak plait-{target} | onnxruntime | ratio | after load "
             "| constants | graph text | libraries | arenas (planned) "
             "| native beyond heap | Python heap of load | compiler modules imported |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    start = ["| model | start to first result plait / onnxruntime | of which imports "
             "| load + first run plait / onnxruntime | `plait run m.plx` |",
             "|---|---|---|---|---|"]
    for r in rows:
        p, o, b, w = r["plait"], r["onnxruntime"], r["build"], r["weights_mib"]
        owned = (b["originals_kept_mib"] + b["packed_new_mib"]
                 + b["graph_text_mib"] + b["libraries_mib"])
        build.append(
            f"| {r['model']} | {w:.0f} | {b['build_peak_mib']:.0f} "
            f"({b['build_peak_mib'] / w:.2f}x{' + schemas' * _schemas_in(b)}) | "
            f"{b['peak_pass']} | "
            f"{b['originals_kept_mib']:.0f} | {b['packed_constants_mib']:.0f} "
            f"({b['packed_new_mib']:.0f}) | "
            f"{b['graph_text_mib']:.1f} | {b['libraries_mib']:.1f} | "
            f"{b['build_peak_mib'] - owned:.0f} |")
        serve.append(
            f"| {r['model']} | {p['serve_peak_mib']:.0f} | {o['serve_peak_mib']:.0f} | "
            f"{p['serve_peak_mib'] / o['serve_peak_mib']:.2f} | {p['load_mib']:.0f} | "
            f"{p['constants_mib']:.0f} | {p['graph_text_mib']:.1f} | "
            f"{p['libraries_mib']:.1f} | {p['arenas_planned_mib']:.1f} | "
            f"{p['native_beyond_heap_mib']:.0f} | {p['load_python_heap_mib']:.0f} | "
            f"{len(p['compiler_modules'])} |")
        start.append(
            f"| {r['model']} | {p['start_to_first_s']:.2f} / {o['start_to_first_s']:.2f} s | "
            f"{p['imports_s']:.2f} / {o['imports_s']:.2f} s | "
            f"{p['load_first_run_s']:.2f} / {o['load_first_run_s']:.2f} s | "
            f"{p['plait_run_s']:.2f} s |")
    return "\n".join([*build, "", *serve, "", *start])


def _schemas_in(build: dict) -> bool:
    """Whether the build made onnx's table of operator schemas (in its peak); runs
    before the key existed had made it before the baseline."""
    return bool(build.get("onnx_schemas_in_build", False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None,
                    help="comma-separated names (default: the whole real-model suite)")
    ap.add_argument("--target", default="c")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--cold", action="store_true",
                    help="measure each model's first build (no warm-up build before it: "
                         "kernels changed since the cache was filled compile in it)")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the tables, with the machine, into docs/performance.md")
    ap.add_argument("--from-json", metavar="FILE",
                    help="measure nothing: print (and with --write-docs, write) the tables "
                         "of an earlier run's --json file")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "build":
            out = child_build(*rest)
        elif kind == "serve_plait":
            out = child_serve_plait(rest[0], rest[1], int(rest[2]))
        elif kind == "load_heap":
            out = child_load_heap(rest[0])
        else:
            out = child_serve_ort(rest[0], rest[1], int(rest[2]))
        print(json.dumps(out))
        return 0
    if args.write_docs:
        import docs_figures

        docs_figures.require_block(docs_figures.DOCS, "memory")
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        rows, failed = saved["rows"], saved["failed"]
    else:
        rows, failed = _measure_all(args)
    text = table(rows, args.target) + notes(failed)
    print(text)
    if args.json and not args.from_json:
        Path(args.json).write_text(json.dumps({"rows": rows, "failed": failed}, indent=1))
    if args.write_docs:
        import docs_figures

        print(docs_figures.write_figures(docs_figures.DOCS, "memory", text,
                                         docs_figures.command("memory.py", argv),
                                         args.threads))
    return 0 if rows else 1


def _measure_all(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every model's rows (and the reason of each that failed)."""
    names = [n for n in (args.models or ",".join(default_models())).split(",") if n]
    paths, failed = _exports(names)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name in failed:
                continue
            try:
                rows.append(measure(name, paths[name], args.target, args.threads, Path(tmp),
                                    warm=not args.cold))
            except RuntimeError as e:   # a child failed: say why, measure the others
                failed[name] = _reason(e)
            print(f"{name}: {'failed' if name in failed else 'done'}", file=sys.stderr,
                  flush=True)
    return rows, failed


def _exports(names: list[str]) -> tuple[dict[str, Path], dict[str, str]]:
    """The ONNX file of each model (exported once, cached), and the reason of each
    model whose export failed."""
    from real_models import export_cached

    try:
        return export_cached(names), {}
    except RuntimeError:   # one failed: each alone, to keep the others
        paths, failed = {}, {}
        for name in names:
            try:
                paths.update(export_cached([name]))
            except RuntimeError as e:
                failed[name] = _reason(e)
        return paths, failed


def _reason(e: Exception) -> str:
    """The last line of a child's error, for the notes under the tables."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__).replace("|", "/")[:200]


def notes(failed: dict[str, str]) -> str:
    """The models not measured, with the reason, under the tables."""
    if not failed:
        return ""
    return "\n\nNot measured: " + "; ".join(f"{m} ({why})" for m, why in failed.items()) + "."


if __name__ == "__main__":
    sys.exit(main())
