"""Trials as Ray tasks (``plait tune ... --ray auto|local|ADDRESS``).

Each trial is a Ray task that builds the model and measures it on its node
(:func:`~.trial.run_trial`; the model travels as its file's bytes).  The nodes are
grouped by machine — a probe task pinned to each node reports its CPU model, ISA copy
and thread count — and each group is tuned on its own nodes (trials pinned to them in
turn, as many at once as their CPUs allow at ``cpus_per_trial`` each), its records
keyed by that machine.  A task whose worker dies (killed, out of memory) is retried by
Ray (``max_retries``); one that still fails comes back as a failed trial, which the
search records as such and goes on.  The results merge into the one database the
driver writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ...target.c.tuning import Machine
from .trial import ModelRef, TrialResult, discover, run_trial


def _probe(threads: int | None) -> tuple[Machine, int]:
    if threads:
        os.environ["PLAIT_NUM_THREADS"] = str(threads)
    from ...target.c.tuning import current_machine

    return current_machine(), os.getpid()


def _discover(model: ModelRef, threads: int | None,
              attrs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if threads:
        os.environ["PLAIT_NUM_THREADS"] = str(threads)
    return discover(model, attrs)[0]


@dataclass
class RayGroup:
    """The nodes of one machine: their ids and CPUs, the threads a trial runs."""

    machine: Machine
    nodes: list[tuple[str, int]]
    threads: int


@dataclass
class RayExecutor:
    """Runs trials as Ray tasks (see the module docstring).  ``address``: ``"auto"``
    (the cluster of ``RAY_ADDRESS`` or of ``ray start`` on this machine; one already
    initialized in this process is used as it is), ``"local"`` (a Ray started in this
    process) or a cluster's address."""

    address: str = "auto"
    runs: int = 5
    cpus_per_trial: int = 1
    threads: int | None = None
    max_retries: int = 2
    attrs: dict[str, Any] = field(default_factory=dict)
    _next: int = 0

    def __post_init__(self) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError("plait tune --ray needs Ray: pip install 'plait[tune]' "
                               "(or pip install ray)") from None
        if not ray.is_initialized():
            if self.address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        self.ray = ray

    def _pinned(self, fn: Any, node: str, cpus: float = 0.0, retries: int = 0) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return self.ray.remote(fn).options(
            num_cpus=cpus, max_retries=retries, retry_exceptions=False,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))

    def groups(self, model: ModelRef) -> list[tuple[Machine, Any]]:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        refs = []
        for n in nodes:
            cpus = int(n.get("Resources", {}).get("CPU", 1))
            threads = self.threads or cpus
            refs.append((n["NodeID"], cpus, threads,
                         self._pinned(_probe, n["NodeID"], retries=self.max_retries)
                         .remote(threads)))
        by_machine: dict[Machine, RayGroup] = {}
        for node, cpus, threads, ref in refs:
            machine, _ = self.ray.get(ref)
            g = by_machine.setdefault(machine, RayGroup(machine, [], threads))
            g.nodes.append((node, cpus))
        return [(m, g) for m, g in by_machine.items()]

    def discover(self, group: RayGroup, model: ModelRef) -> dict[str, dict[str, Any]]:
        node = group.nodes[0][0]
        return self.ray.get(self._pinned(_discover, node, retries=self.max_retries)
                            .remote(model, group.threads, self.attrs))

    def width(self, group: RayGroup) -> int:
        return max(1, sum(max(1, cpus // self.cpus_per_trial) for _, cpus in group.nodes))

    def run(self, group: RayGroup, model: ModelRef,
            trials: list[dict[str, dict[str, Any]]]) -> list[TrialResult]:
        model_ref = self.ray.put(model)
        refs = []
        for t in trials:
            node = group.nodes[self._next % len(group.nodes)][0]
            self._next += 1
            refs.append(self._pinned(run_trial, node, self.cpus_per_trial, self.max_retries)
                        .remote(model_ref, t, self.runs, group.threads, self.attrs))
        out = []
        for t, ref in zip(trials, refs):
            try:
                out.append(self.ray.get(ref))
            except Exception as e:  # the worker died on every try: a failed trial
                first = (str(e).splitlines() or [""])[0]
                out.append(TrialResult(dict(t), error=f"{type(e).__name__}: {first}"))
        return out


__all__ = ["RayExecutor", "RayGroup"]
