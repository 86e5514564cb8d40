"""Run PyTorch's OpInfo samples of the ops the PyTorch importer claims and record the
results (``tests/frontend/torch/opinfo_results.json``, shown in docs/pytorch.md).

    python tools/torch_opinfo.py                    # every OpInfo of the list, both targets
    python tools/torch_opinfo.py --ops add,mul -v   # some of them, printing each sample
    python tools/torch_opinfo.py --targets numpy    # without the c target

Then ``python tools/gen_torch_docs.py`` updates docs/pytorch.md.  See
plait/frontend/torch/opinfo.py for what passes, skips and fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "tests", "frontend", "torch", "opinfo_results.json")
MAX_SAMPLES = 8
"""Samples per OpInfo and dtype (the first ones of the OpInfo's generator)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated OpInfo names (default: all of OPINFOS)")
    ap.add_argument("--targets", default="numpy,c")
    ap.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    ap.add_argument("--chunk", type=int, default=8,
                    help="OpInfos whose samples are built together")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print, do not record")
    args = ap.parse_args()
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from plait.frontend.torch import opinfo as oi

    names = args.ops.split(",") if args.ops else list(oi.OPINFOS)
    targets = args.targets.split(",")
    old = {}
    if os.path.exists(RESULTS) and args.ops:
        with open(RESULTS, encoding="utf-8") as f:
            old = json.load(f)["ops"]
    ops = dict(old)
    failures: dict[str, str] = {}
    start = time.time()
    for at in range(0, len(names), args.chunk):
        chunk = names[at:at + args.chunk]
        infos = [oi.find_opinfo(n) for n in chunk]
        by_op = oi.run_ops(infos, targets=targets, limit=args.max_samples,
                           log=print if args.verbose else None)
        for name in chunk:
            entry = {"pass": 0, "skip": 0, "fail": 0, "samples": {}, "skips": Counter()}
            for (dtype, index), r in by_op[name].items():
                entry[r.status] += 1
                if r.status == "pass":
                    entry["samples"].setdefault(dtype, []).append(index)
                elif r.status == "skip":
                    entry["skips"][r.reason] += 1
                else:
                    failures.setdefault(name, f"{dtype} sample {index}: {r.reason}")
                if args.verbose or r.status == "fail":
                    print(f"{name} {dtype} #{index}: {r.status} {r.reason}")
            entry["skips"] = dict(entry["skips"])
            ops[name] = entry
            print(f"{name}: {entry['pass']} pass, {entry['skip']} skip, {entry['fail']} "
                  f"fail ({time.time() - start:.0f} s)", flush=True)
    reasons: Counter = Counter()
    for e in ops.values():
        reasons.update(e.get("skips", {}))
    old_fail = {}
    if os.path.exists(RESULTS) and args.ops:
        with open(RESULTS, encoding="utf-8") as f:
            old_fail = {k: v for k, v in json.load(f).get("failures", {}).items()
                        if k not in names}
    data = {
        "torch": torch.__version__.split("+")[0],
        "rtol": oi.RTOL,
        "atol": oi.ATOL,
        "dtypes": list(oi.DTYPES),
        "targets": targets,
        "max_samples": args.max_samples,
        "ops": {k: ops[k] for k in sorted(ops)},
        "skip_reasons": dict(sorted(_general(reasons).items())),
        "failures": dict(sorted({**old_fail, **failures}.items())),
    }
    if not args.no_write:
        with open(RESULTS, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
    return 0


def _general(reasons: Counter) -> Counter:
    """Skip reasons grouped (the op names kept, the details of values dropped)."""
    out: Counter = Counter()
    for why, n in reasons.items():
        out[why.split(" (")[0] if why.startswith("needs ") else why] += n
    return out


if __name__ == "__main__":
    sys.exit(main())
