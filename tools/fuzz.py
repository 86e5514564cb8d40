"""Long fuzzing runs: mutated text modules, ONNX models, executables, VM arguments and
attack files (executables carrying code or naming files).

    python tools/fuzz.py --minutes 30                 # all five targets, taking turns
    python tools/fuzz.py --minutes 5 --targets onnx,exe --seed 7
    python tools/fuzz.py --replay tests/fuzz/corpus   # judge kept cases again

Each target's cases run in a child process of their own (niced, with its address
space limited to ``--memory-gb``), so that a case that kills its process (a signal:
SIGSEGV, SIGBUS...) is a *crash* and a case that runs longer than ``--hang-seconds`` is
a *hang*; the parent records the case, starts a new child and goes on.  The other
outcomes (ok, clean error, raw exception, mismatch with the reference, and for the
``trust`` target *breach*: foreign code ran or a file was read without the caller's
consent, tests/fuzz/trustlib.py) are judged in the child by tests/fuzz/fuzzlib.py.  The
children set plait's limits (``plait.runtime.limits``) below their memory cap
(``max_tensor_bytes``: an eighth of it) and below the deflated bomb the executable
mutations plant (``max_inflated_bytes``: half of ``fuzzlib.BOMB_BYTES``): a huge count
or size must be refused by a limit before the work, so there a ``MemoryError`` is a
*raw* finding, an executable that loads past the budget too, and a count that hangs a
*hang*.  Cases that are not ok or clean are written to ``--findings`` (default
``fuzz-findings/``), one file per case with a JSON note; reproduce one with ``--replay
FILE``.  Keep a fixed finding as a regression case in ``tests/fuzz/corpus/<target>/``.
The summary (counts per target and outcome, and the distinct findings) is printed and
written as JSON next to the findings.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fuzz")]

KINDS = ("ok", "clean", "raw", "mismatch", "breach", "hang", "crash")
COLUMNS = ("ok", "clean", "located", "raw", "mismatch", "breach", "hang", "crash")
"""``located``: of the clean errors, those the VM located (a function refused the
arguments an instruction gave it)."""


def worker(target: str, seed: int, current: Path, memory_gb: float) -> None:
    """The child: run cases of ``target`` from ``seed`` on, one JSON line per case;
    the case in flight is in ``current`` (for the parent, should this process die)."""
    try:
        import resource

        limit = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash writes no core file
    except (ImportError, ValueError, OSError):
        pass
    import fuzzlib

    # plait's limits below the memory cap (and below the deflated bomb of mutate_exe):
    # a huge count or size must be refused by a limit, so a MemoryError is raw
    os.environ["PLAIT_MAX_TENSOR_BYTES"] = str(int(memory_gb * 2**30) // 8)
    os.environ["PLAIT_MAX_INFLATED_BYTES"] = str(fuzzlib.BOMB_BYTES // 2)
    fuzzlib.MEMORY_ERRORS_ARE_CLEAN = False
    # the bases are built before the first case is timed
    if target in ("vm", "exe"):
        fuzzlib.exe_bases()
    elif target in ("onnx", "text"):
        getattr(fuzzlib, f"{target}_bases")()
    elif target == "trust":
        import trustlib

        trustlib.trust_bases()
    while True:
        data = fuzzlib.mutate(target, fuzzlib.RandomChooser(seed))
        tmp = current.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, current)
        print(json.dumps({"start": seed}), flush=True)
        outcome = fuzzlib.run_case(target, data)
        print(json.dumps({"seed": seed, "kind": outcome.kind, "detail": outcome.detail}),
              flush=True)
        seed += 1


class Child:
    """A worker process for one target, and what it is doing."""

    def __init__(self, target: str, seed: int, state: Path, memory_gb: float,
                 nice: int = 10) -> None:
        self.target, self.seed = target, seed
        self.current = state / f"current-{target}.bin"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", target, str(seed), str(self.current),
             str(memory_gb)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
            preexec_fn=(lambda: os.nice(nice)) if nice and hasattr(os, "nice") else None,
            env=dict(os.environ, PYTHONPATH=str(ROOT), PLAIT_NUM_THREADS="1",
                     OMP_NUM_THREADS="1"))
        self.started: float | None = None  # when the case in flight started
        self.in_flight: int | None = None
        self.pending = b""

    def lines(self) -> list[str] | None:
        """The complete lines the child has written since the last call (it is ready to
        read); None when it closed its output (it exited)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.pending += chunk
        *done, self.pending = self.pending.split(b"\n")
        return [line.decode() for line in done]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _save(findings: Path, target: str, seed: int, kind: str, detail: str,
          data: bytes) -> None:
    d = findings / target
    d.mkdir(parents=True, exist_ok=True)
    ext = {"text": ".plait", "onnx": ".onnx", "exe": ".plx", "vm": ".npz",
           "trust": ".plx"}.get(target, ".bin")
    (d / f"{kind}-{seed}{ext}").write_bytes(data)
    (d / f"{kind}-{seed}.json").write_text(json.dumps(
        {"target": target, "seed": seed, "kind": kind, "detail": detail}, indent=1))


def run(targets: list[str], minutes: float, seed: int, hang_seconds: float,
        memory_gb: float, findings: Path, first_case_grace: float = 30.0,
        max_cases: int | None = None, nice: int = 10) -> dict:
    """Fuzz ``targets`` for ``minutes`` (or until ``max_cases`` cases are judged); the
    summary.  The first case of each child gets ``first_case_grace`` more seconds (it
    imports what the cases use); children run at niceness ``nice``."""
    findings.mkdir(parents=True, exist_ok=True)
    counts = {t: Counter() for t in targets}
    distinct: dict[tuple[str, str, str], int] = {}
    children = {t: Child(t, seed, findings, memory_gb, nice) for t in targets}
    end = time.monotonic() + minutes * 60

    def record(t: str, s: int, kind: str, detail: str, data: bytes | None) -> None:
        counts[t][kind] += 1
        if kind == "clean" and detail.startswith("located"):
            counts[t]["located"] += 1
        if kind not in ("ok", "clean"):
            key = (t, kind, detail)
            distinct[key] = distinct.get(key, 0) + 1
            if distinct[key] <= 3 and data is not None:
                _save(findings, t, s, kind, detail, data)

    def restart(t: str, after: int) -> None:
        children[t].stop()
        children[t] = Child(t, after + 1, findings, memory_gb, nice)

    try:
        while time.monotonic() < end and (
                max_cases is None or sum(c[k] for c in counts.values() for k in KINDS) < max_cases):
            streams = {c.proc.stdout.fileno(): t for t, c in children.items()}
            ready, _, _ = select.select(list(streams), [], [], 0.2)
            for fd in ready:
                t = streams[fd]
                c = children[t]
                lines = c.lines()
                if lines is None:  # the child died
                    code = c.proc.wait()
                    s = c.in_flight if c.in_flight is not None else c.seed
                    data = c.current.read_bytes() if c.current.exists() else None
                    record(t, s, "crash", f"exit status {code}", data)
                    restart(t, s)
                    continue
                for line in lines:
                    msg = json.loads(line)
                    if "start" in msg:
                        c.in_flight, c.started = msg["start"], time.monotonic()
                    else:
                        data = c.current.read_bytes() \
                            if msg["kind"] not in ("ok", "clean") else None
                        record(t, msg["seed"], msg["kind"], msg["detail"], data)
                        c.in_flight = c.started = None
            now = time.monotonic()
            for t, c in list(children.items()):
                limit = hang_seconds + (first_case_grace if c.in_flight == c.seed else 0.0)
                if c.started is not None and now - c.started > limit:
                    data = c.current.read_bytes() if c.current.exists() else None
                    record(t, c.in_flight, "hang", f"over {hang_seconds:.0f} s", data)
                    restart(t, c.in_flight)
    finally:
        for c in children.values():
            c.stop()
    summary = {
        "minutes": minutes, "seed": seed, "hang_seconds": hang_seconds,
        "counts": {t: {k: counts[t][k] for k in COLUMNS} for t in targets},
        "findings": [{"target": t, "kind": k, "detail": d, "cases": n}
                     for (t, k, d), n in sorted(distinct.items())],
    }
    (findings / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def report(summary: dict) -> str:
    lines = ["| target | cases | " + " | ".join(COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    total: Counter[str] = Counter()
    for t, c in summary["counts"].items():
        total.update(c)
        cases = sum(c[k] for k in KINDS)
        lines.append(f"| {t} | {cases} | " + " | ".join(str(c[k]) for k in COLUMNS) + " |")
    lines.append(f"| all | {sum(total[k] for k in KINDS)} | "
                 + " | ".join(str(total[k]) for k in COLUMNS) + " |")
    for f in summary["findings"]:
        lines.append(f"- {f['target']} {f['kind']} x{f['cases']}: {f['detail']}")
    return "\n".join(lines)


def replay(paths: list[Path]) -> int:
    """Judge kept cases again (in this process); non-zero when one is not ok/clean."""
    import fuzzlib

    files = []
    for p in paths:
        files += sorted(q for q in p.rglob("*") if q.is_file() and q.suffix not in (
            ".json", ".tmp", ".md") and not q.name.startswith("current-")) \
            if p.is_dir() else [p]
    bad = 0
    for f in files:
        target = next((t for t in fuzzlib.TARGETS if t in f.parts), None)
        if target is None:
            target = {".onnx": "onnx", ".plx": "exe", ".npz": "vm"}.get(f.suffix, "text")
        outcome = fuzzlib.run_case(target, f.read_bytes())
        bad += outcome.kind not in ("ok", "clean")
        print(f"{outcome.kind:8s} {target:5s} {f}  {outcome.detail}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--targets", default="text,onnx,exe,vm,trust")
    p.add_argument("--seed", type=int, default=None, help="first seed (default: from time)")
    p.add_argument("--hang-seconds", type=float, default=60.0)
    p.add_argument("--memory-gb", type=float, default=4.0)
    p.add_argument("--findings", default=str(ROOT / "fuzz-findings"))
    p.add_argument("--replay", nargs="+", default=None, help="files or folders of cases")
    p.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        target, seed, current, memory = args.worker
        worker(target, int(seed), Path(current), float(memory))
        return 0
    if args.replay:
        return replay([Path(x) for x in args.replay])
    import fuzzlib

    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in (*fuzzlib.TARGETS, "selftest")]
    if unknown:
        print(f"--targets: unknown {', '.join(unknown)}; choose from "
              f"{', '.join(fuzzlib.TARGETS)}")
        return 2
    seed = args.seed if args.seed is not None else int(time.time()) % 10**6 * 1000
    print(f"fuzzing {', '.join(targets)} for {args.minutes} min from seed {seed}", flush=True)
    summary = run(targets, args.minutes, seed, args.hang_seconds, args.memory_gb,
                  Path(args.findings))
    print(report(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
