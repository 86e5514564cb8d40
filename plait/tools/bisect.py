"""Bisection: the first pass, and the first rewrite site in it, that breaks a model.

:func:`bisect_pipeline` treats the pipeline's leaf passes as a list.  Configuration
``k`` runs the first ``k`` passes and turns the others *off*: a pass the pipeline can
do without is skipped; one it cannot (a transition, a pass another requires, a pass
declared ``essential``) runs with its debug counter at 0, so it rewrites no site it
could leave (``LegalizeOps`` then lowers every op to its numpy library call).  Each
configuration is built into an executable and run on fixed inputs — in a child
process, so a crash (a Python error, a native segfault, a hang past the timeout) is an
outcome, not the end of the search — and its outputs are compared with the reference
(onnxruntime, or the numpy target).  A binary search finds the smallest ``k`` whose
outputs are bad; then, inside that pass, a second binary search over the debug
counter (:mod:`plait.transform.debug_counter`) finds the first site whose rewrite makes
them bad.  Like LLVM's ``-opt-bisect-limit``, it assumes a pass that breaks the model
keeps it broken when more passes run after it.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.module import IRModule
from ..transform.context import PassContext
from ..transform.debug_counter import DebugCounter
from ..transform.pass_base import Pass
from ..transform.sequential import Sequential

DEFAULT_TIMEOUT = 600.0


@dataclass
class Outcome:
    """What one configuration gave: ``outputs`` (or None), ``error`` (a crash or a build
    failure), the largest error against the reference, whether it is ``bad``, and
    the sites the passes asked about (pass name, run) -> descriptions."""

    bad: bool
    error: str | None = None
    max_abs: float = 0.0
    detail: str = ""
    sites: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        if self.error is not None:
            return f"CRASH {self.error}"
        if self.bad:
            return f"WRONG {self.detail}"
        return f"ok (max abs error {self.max_abs:.3g})"


@dataclass
class Step:
    """One configuration tried: its description and outcome."""

    what: str
    outcome: Outcome


@dataclass
class BisectResult:
    """The culprit: ``pass_name`` at ``position`` (1-based among the leaf passes, and
    its place in the pipeline such as ``"2.5"``), the phase it ran in, the outcome it
    caused, its number of sites and the first bad one (1-based, with its description),
    every step tried.  ``verdict`` is ``"found"``, ``"clean"`` (the full pipeline
    matches) or ``"baseline"`` (even with every optional pass off the model is bad)."""

    verdict: str
    steps: list[Step]
    pass_name: str | None = None
    position: int | None = None
    pipeline_position: str | None = None
    phase: str | None = None
    outcome: Outcome | None = None
    sites: int = 0
    site: int | None = None
    site_description: str | None = None
    counter_key: str | None = None

    def report(self) -> str:
        """The result in a few lines."""
        if self.verdict == "clean":
            return "the full pipeline matches the reference: nothing to bisect"
        if self.verdict == "baseline":
            out = self.steps[0].outcome.summary() if self.steps else "?"
            return ("even with every optional pass off (essential passes with no rewrite "
                    f"sites allowed) the model is bad: {out}; the problem is in the "
                    "passes that always run, the runtime or the reference")
        assert self.outcome is not None
        lines = [f"first bad pass: #{self.position} {self.pass_name} (pipeline position "
                 f"{self.pipeline_position}, phase {self.phase}): "
                 f"{self.outcome.summary()}"]
        if self.site is not None:
            lines.append(f"first bad rewrite: site #{self.site} of {self.sites} of "
                         f"{self.pass_name}: {self.site_description}")
            good = {self.counter_key: self.site - 1}
            bad = {self.counter_key: self.site}
            lines.append(f"  reproduce: PassContext(config={{'debug_counter': {bad!r}}}) "
                         f"is bad, {good!r} is good")
        elif self.sites == 0:
            lines.append(f"  {self.pass_name} reports no rewrite sites (it does not use the "
                         "debug counter), so the search stops at the pass")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Leaf:
    pass_: Pass
    position: str
    essential: bool


def _leaves(pipeline: Sequential, phase: str) -> list[_Leaf]:
    steps = pipeline.flatten(None)
    passes = [s.pass_ for s in steps]
    out = []
    for i, st in enumerate(steps):
        info = st.pass_.info
        essential = info.essential or info.transition is not None
        if not essential:
            try:
                Sequential(passes[:i] + passes[i + 1:]).validate(phase, PassContext(
                    inherit=False))
            except Exception:
                essential = True  # the pipeline is not valid without it
        out.append(_Leaf(st.pass_, st.position, essential))
    return out


def configuration(leaves: Sequence[_Leaf], on: int, limit: int | None = None
                  ) -> tuple[Sequential, dict[str, Any]]:
    """The pipeline and debug counter of configuration ``on`` (the first ``on`` leaves
    on; with ``limit``, leaf ``on`` too, limited to its first ``limit`` sites)."""
    passes: list[Pass] = []
    spec: dict[str, Any] = {"*": None}
    runs: dict[str, int] = {}
    for i, leaf in enumerate(leaves):
        name = leaf.pass_.info.name
        included = i < on or (limit is not None and i == on) or leaf.essential
        if not included:
            continue
        runs[name] = runs.get(name, 0) + 1
        key = f"{name}@{runs[name]}"
        if limit is not None and i == on:
            spec[key] = limit
        elif i >= on:
            spec[key] = 0
        passes.append(leaf.pass_)
    return Sequential(passes, name="bisect"), spec


Runner = Callable[[Sequential, dict[str, Any]], Outcome]


def _build(mod: IRModule, target: Any, pipeline: Sequential, spec: dict[str, Any]
           ) -> tuple[Any, dict[tuple[str, int], list[str]]]:
    """The executable of a configuration and the sites its passes asked about."""
    from ..codegen.vm_codegen import vm_codegen

    counter = DebugCounter(spec)
    with PassContext(config={"debug_counter": counter}):
        built = pipeline(mod.with_attrs(target=target))
    sites: dict[tuple[str, int], list[str]] = {}
    for s in counter.sites:
        sites.setdefault((s.pass_name, s.run), []).append(s.description)
    return vm_codegen(built), sites


def _execute(exe: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from ..interp import flatten_outputs
    from ..runtime import VirtualMachine

    out = VirtualMachine(exe)["main"](*inputs)
    return [np.asarray(a) for a in flatten_outputs(out)]


def _child(conn: Any, job: tuple) -> None:
    import faulthandler

    faulthandler.disable()  # a crash is an outcome here, not something to dump
    try:
        mod, target, pipeline, spec, inputs = job
        exe, sites = _build(mod, target, pipeline, spec)
        conn.send(("built", sites))  # before running: a crash keeps the sites
        conn.send(("ok", _execute(exe, inputs)))
    except BaseException as e:  # report everything, the parent decides
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        conn.send(("error", f"{type(e).__name__}: {_one_line(e)}{where}"))
    finally:
        conn.close()


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return "; ".join(lines[:4]) if lines else type(e).__name__


def make_runner(mod: IRModule, target: Any, inputs: list[np.ndarray],
                reference: list[np.ndarray], rtol: float, atol: float,
                timeout: float = DEFAULT_TIMEOUT, isolate: bool = True) -> Runner:
    """A runner of configurations: builds and runs each in a forked child process
    (in this process when ``isolate`` is False or fork is not available)."""
    from ..interp import compare_outputs

    can_fork = isolate and "fork" in multiprocessing.get_all_start_methods()

    def judge(status: str, payload: Any, sites: dict, seconds: float) -> Outcome:
        if status != "ok":
            return Outcome(True, error=payload, sites=sites, seconds=seconds)
        outputs = payload
        diffs = compare_outputs(outputs, reference, rtol, atol)
        worst = max(diffs, key=lambda d: d.max_abs)
        bad = [d for d in diffs if not d.ok]
        return Outcome(bool(bad), max_abs=worst.max_abs, detail=str(bad[0]) if bad else "",
                       sites=sites, seconds=seconds)

    def run(pipeline: Sequential, spec: dict[str, Any]) -> Outcome:
        t0 = time.perf_counter()
        job = (mod, target, pipeline, spec, inputs)
        sites: dict = {}
        if not can_fork:
            try:
                exe, sites = _build(mod, target, pipeline, spec)
                return judge("ok", _execute(exe, inputs), sites, time.perf_counter() - t0)
            except Exception as e:
                return judge("error", f"{type(e).__name__}: {_one_line(e)}", sites,
                             time.perf_counter() - t0)
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, job), daemon=True)
        proc.start()
        child.close()
        status, payload = "error", None
        deadline = t0 + timeout
        try:
            while True:
                if not parent.poll(max(deadline - time.perf_counter(), 0.0)):
                    payload = f"timeout: no result after {timeout:g} s"
                    break
                status, payload = parent.recv()
                if status != "built":
                    break
                sites, status, payload = payload, "error", None
        except EOFError:  # the child died before sending its result
            pass
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if payload is None:
            code = proc.exitcode
            payload = (f"the process died from signal {-code}" if code is not None and code < 0
                       else f"the process exited with status {code}")
        return judge(status, payload, sites, time.perf_counter() - t0)

    return run


def bisect_pipeline(pipeline: Sequential, phase: str, runner: Runner,
                    log: Callable[[str], None] | None = None) -> BisectResult:
    """Find the first bad pass of ``pipeline`` (for a module starting in ``phase``) and
    the first bad site in it; see the module docstring."""
    say = log or (lambda text: None)
    leaves = _leaves(pipeline, phase)
    n = len(leaves)
    steps: list[Step] = []
    cache: dict[tuple[int, int | None], Outcome] = {}

    def outcome(on: int, limit: int | None = None) -> Outcome:
        key = (on, limit)
        if key not in cache:
            pipe, spec = configuration(leaves, on, limit)
            what = (f"passes 1-{on} on" if limit is None else
                    f"passes 1-{on} on, #{on + 1} {leaves[on].pass_.info.name} with its "
                    f"first {limit} site(s)")
            if limit is None and on == 0:
                what = "every optional pass off"
            cache[key] = runner(pipe, spec)
            steps.append(Step(what, cache[key]))
            say(f"  {what}: {cache[key].summary()}  [{cache[key].seconds:.1f} s]")
        return cache[key]

    if outcome(0).bad:
        return BisectResult("baseline", steps)
    if not outcome(n).bad:
        return BisectResult("clean", steps)
    lo, hi = 0, n  # outcome(lo) good, outcome(hi) bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if outcome(mid).bad:
            hi = mid
        else:
            lo = mid
    culprit = leaves[hi - 1]
    bad = outcome(hi)
    name = culprit.pass_.info.name
    run_no = sum(1 for lf in leaves[:hi - 1] if lf.pass_.info.name == name) + 1
    sites = bad.sites.get((name, run_no), [])
    result = BisectResult("found", steps, name, hi, culprit.position, None, bad,
                          len(sites), counter_key=f"{name}@{run_no}")
    result.phase = _phase_of(pipeline, phase, hi - 1)
    if sites:
        lo_s, hi_s = 0, len(sites)
        while hi_s - lo_s > 1:
            mid = (lo_s + hi_s) // 2
            if outcome(hi - 1, mid).bad:
                hi_s = mid
            else:
                lo_s = mid
        # the first hi_s sites are those of the full run (a limit changes only the
        # sites after it), and allowing all of them is configuration hi: bad
        result.site = hi_s
        result.site_description = sites[hi_s - 1]
    return result


def _phase_of(pipeline: Sequential, phase: str, index: int) -> str | None:
    try:
        plan = pipeline.validate(phase, PassContext(inherit=False))
    except Exception:
        return None
    return plan[index].phase if index < len(plan) else None


def reference_outputs(kind: str, mod: IRModule, inputs: list[np.ndarray],
                      onnx_path: str | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs to compare with: onnxruntime on the ONNX model, or the model built
    for the numpy target (in this process; neither loads native code here)."""
    from ..interp import flatten_outputs

    if kind == "onnxruntime":
        import onnxruntime as ort

        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        return [np.asarray(r) for r in sess.run(None, {k: v for k, v in feeds.items()
                                                       if k in wanted})]
    from ..build import build
    from ..runtime import VirtualMachine

    exe = build(mod, target="numpy")
    return [np.asarray(a) for a in flatten_outputs(VirtualMachine(exe)["main"](*inputs))]


__all__ = [
    "BisectResult",
    "Outcome",
    "Step",
    "bisect_pipeline",
    "configuration",
    "make_runner",
    "reference_outputs",
]

