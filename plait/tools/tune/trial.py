"""One trial of the tuner: the model built with a chosen point for each of its calls,
run with the entry point's step timer, each call's time inside the whole model.

A trial never writes the user's database: its points go into a database of its own (a
temporary file holding one record per call, for this machine), which the build reads
like any other (:mod:`plait.target.c.tuning`), so the trial's build is exactly the build
a user gets from the final database.  The executable's ``tuning`` attribute maps each
wrapper symbol to its call; the step timer (``Target("c", step_timing=True)``,
``VirtualMachine.profile_steps``) times each step; a call's time is the median over the
runs of the sum of its steps.

**Paired with the defaults.** Each trial also runs the model built with every call at
its default point (built once per process and model), run for run in turn with the
trial's build: a call's ``default_seconds`` is its default's time in the same moments,
so the ratio of the two is what the point changes, not what the machine's load did
between two trials (:func:`~plait.target.c.tuning.db.pick` compares those ratios).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir.module import IRModule
from ...target.c.tuning import Machine, Record, TuningDB, current_machine


@dataclass(frozen=True)
class ModelRef:
    """A model as a trial receives it: the file's name and bytes (so a worker on another
    machine can load it) and the ``--shape`` values."""

    name: str
    data: bytes
    shapes: tuple[str, ...] = ()

    @staticmethod
    def from_path(path: str, shapes: tuple[str, ...] = ()) -> ModelRef:
        with open(path, "rb") as f:
            return ModelRef(os.path.basename(path), f.read(), shapes)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data + repr(self.shapes).encode()).hexdigest()[:16]


@dataclass
class TrialResult:
    """What a trial measured: each call's seconds (median over the runs), the whole
    step's, the points it ran, the machine and process it ran in; ``error`` when it
    failed."""

    points: dict[str, dict[str, Any]]
    seconds: dict[str, float] = field(default_factory=dict)
    default_seconds: dict[str, float] = field(default_factory=dict)   # paired, same runs
    total: float = 0.0
    default_total: float = 0.0    # the defaults' whole step in the same runs
    machine: Machine | None = None
    pid: int = 0
    host: str = ""
    error: str = ""
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)


_MODULES: dict[str, IRModule] = {}


def load_module(model: ModelRef) -> IRModule:
    """The model's module (loaded once per process)."""
    mod = _MODULES.get(model.digest)
    if mod is None:
        from ..common import load_model

        with tempfile.TemporaryDirectory(prefix="plait-tune-") as d:
            path = os.path.join(d, model.name)
            with open(path, "wb") as f:
                f.write(model.data)
            mod = load_model(path, model.shapes, static=True).module
        _MODULES[model.digest] = mod
    return mod


def sample_inputs(mod: IRModule, seed: int = 0) -> list[np.ndarray]:
    """Inputs of ``main``'s parameter types: uniform in [-1, 1) for floats, zeros for
    integers and booleans (valid indices)."""
    from ...ir.types import TensorType

    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        ty = p.ty
        if not isinstance(ty, TensorType) or any(type(d) is not int for d in ty.shape):
            raise ValueError(f"plait tune: input {p.name_hint!r} of main has type {ty}; the "
                             "tuner needs static shapes (give --shape NAME=D0,D1,...)")
        shape = tuple(int(d) for d in ty.shape)
        if str(ty.dtype).startswith("float"):
            out.append(rng.uniform(-1, 1, shape).astype(str(ty.dtype)))
        else:
            out.append(np.zeros(shape, str(ty.dtype)))
    return out


def build_with_points(mod: IRModule, points: dict[str, dict[str, Any]], machine: Machine,
                      attrs: dict[str, Any] | None = None, *, step_timing: bool = True) -> Any:
    """``mod`` built for ``c`` with ``points`` ({call key: point}; the others at their
    defaults) through a database of its own."""
    import plait

    with tempfile.TemporaryDirectory(prefix="plait-trial-") as d:
        path = os.path.join(d, "trial.db")
        db = TuningDB(path)
        db.add([Record(key, "trial", machine, dict(point), 0.0, 0.0)
                for key, point in points.items()])
        target = plait.Target("c", **{**(attrs or {}), "tuning_db": path,
                                      "step_timing": step_timing})
        return plait.build(mod, target)


class _Timer:
    """Runs of one executable with the step timer, each call's time summed by call key."""

    def __init__(self, exe: Any, inputs: list[np.ndarray]) -> None:
        from ...runtime import VirtualMachine

        self.calls = exe.attrs.get("tuning") or {}
        self.vm = VirtualMachine(exe)
        self.inputs = inputs
        self.per_call: dict[str, list[float]] = {}
        self.totals: list[float] = []

    def run(self, record: bool = True) -> None:
        _, entries = self.vm.profile_steps("main", *self.inputs)
        if not record:
            return
        sums: dict[str, float] = {}
        for e in entries:
            info = self.calls.get(e.callee)
            if info is not None:
                sums[info["call"]] = sums.get(info["call"], 0.0) + e.seconds
        for k, v in sums.items():
            self.per_call.setdefault(k, []).append(v)
        self.totals.append(sum(e.seconds for e in entries))

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.per_call.items()}


def measure(exe: Any, inputs: list[np.ndarray], runs: int) -> tuple[dict[str, float], float]:
    """Each call's median seconds over ``runs`` timed runs (after one warm-up) of the
    single entry point, by call key, and the median whole step."""
    t = _Timer(exe, inputs)
    t.run(record=False)   # warm-up: pages, caches, the thread pool
    for _ in range(max(1, runs)):
        t.run()
    return t.medians(), statistics.median(t.totals)


def measure_paired(exe: Any, default_exe: Any, inputs: list[np.ndarray], runs: int
                   ) -> tuple[dict[str, float], dict[str, float], float, float]:
    """:func:`measure` of ``exe`` with ``default_exe`` run in turn with it (which first
    alternates each run): each call's median seconds in both, and both median whole
    steps."""
    a, b = _Timer(exe, inputs), _Timer(default_exe, inputs)
    a.run(record=False)
    b.run(record=False)
    for i in range(max(1, runs)):
        for t in ((a, b) if i % 2 == 0 else (b, a)):
            t.run()
    return a.medians(), b.medians(), statistics.median(a.totals), statistics.median(b.totals)


_DEFAULT_EXES: dict[tuple[str, str, str], Any] = {}


def default_build(model: ModelRef, mod: IRModule, machine: Machine,
                  attrs: dict[str, Any] | None) -> Any:
    """``model`` built with every call at its default point and the step timer, once per
    process, model, target attributes and machine (thread count)."""
    key = (model.digest, repr(sorted((attrs or {}).items())), repr(machine))
    if key not in _DEFAULT_EXES:
        _DEFAULT_EXES.clear()   # one model at a time: the last one's library goes
        _DEFAULT_EXES[key] = build_with_points(mod, {}, machine, attrs)
    return _DEFAULT_EXES[key]


def run_trial(model: ModelRef, points: dict[str, dict[str, Any]], runs: int = 5,
              threads: int | None = None, attrs: dict[str, Any] | None = None) -> TrialResult:
    """Build ``model`` with ``points`` and measure it (see the module docstring); with
    ``threads``, the native libraries run that many (``PLAIT_NUM_THREADS``).  A failure
    is returned in ``error`` (the trial is recorded as failed)."""
    if threads:
        os.environ["PLAIT_NUM_THREADS"] = str(int(threads))
    result = TrialResult(dict(points), pid=os.getpid(), host=os.uname().nodename)
    try:
        result.machine = current_machine()
        mod = load_module(model)
        exe = build_with_points(mod, points, result.machine, attrs)
        result.calls = {k: dict(v) for k, v in (exe.attrs.get("tuning") or {}).items()}
        base = default_build(model, mod, result.machine, attrs)
        (result.seconds, result.default_seconds, result.total,
         result.default_total) = measure_paired(exe, base, sample_inputs(mod), runs)
    except Exception as e:  # a trial that fails is recorded as failed, the tuning goes on
        result.error = f"{type(e).__name__}: {e}"
    return result


def discover(model: ModelRef, attrs: dict[str, Any] | None = None
             ) -> tuple[dict[str, dict[str, Any]], Machine]:
    """The distinct calls of ``model`` that have a search space: {call key: {"op",
    "space"}} (from a build with an empty database), and this machine."""
    machine = current_machine()
    exe = build_with_points(load_module(model), {}, machine, attrs, step_timing=False)
    out: dict[str, dict[str, Any]] = {}
    for info in (exe.attrs.get("tuning") or {}).values():
        out.setdefault(info["call"], {"op": info["op"], "space": info["space"]})
    return out, machine


__all__ = ["ModelRef", "TrialResult", "build_with_points", "default_build", "discover",
           "load_module", "measure", "measure_paired", "run_trial", "sample_inputs"]
