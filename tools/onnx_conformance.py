"""Run ONNX's node test suite against plait and print the conformance count.

    python tools/onnx_conformance.py                    # the counts (all cases, and without
                                                        # float16/bfloat16/float8/int4 types)
    python tools/onnx_conformance.py -j 4 --failures    # list every failing case and why
    python tools/onnx_conformance.py --compare-onnxruntime
    python tools/onnx_conformance.py --update-expected  # rewrite the expected-failures file

Each case is imported with ``plait.frontend.from_onnx``, built for the numpy target, run
on the virtual machine and compared with the case's outputs using its rtol/atol.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from multiprocessing import Pool
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = os.path.join(ROOT, "tests", "frontend", "onnx_expected_failures.txt")


TARGET = "numpy"


def _run(case: Any) -> Any:
    from plait.frontend.onnx.conformance import run_case

    return run_case(case, TARGET)


def _run_ort(case: Any) -> bool:
    import numpy as np
    import onnxruntime as ort
    from onnx.backend.test.runner import Runner, _normalize_tensor

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opts = ort.SessionOptions()
            opts.log_severity_level = 4
            sess = ort.InferenceSession(
                case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            for inputs, outputs in case.data_sets:
                feeds = {i.name: _normalize_tensor(a) for i, a in zip(sess.get_inputs(), inputs)}
                got = sess.run(None, feeds)
                Runner.assert_similar_outputs(
                    [_normalize_tensor(o) for o in outputs],
                    [g if isinstance(g, list) else np.asarray(g) for g in got],
                    case.rtol, case.atol,
                )  # fmt: skip
    except Exception:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument(
        "-k", "--filter", default=None, help="only the cases whose name matches this regex"
    )
    p.add_argument("--failures", action="store_true", help="list the failing cases and why")
    p.add_argument("--target", default="numpy", help="the target to build for (numpy or c)")
    p.add_argument(
        "--compare-onnxruntime", action="store_true",
        help="also run the cases with onnxruntime and print its count on the same cases",
    )  # fmt: skip
    p.add_argument(
        "--update-expected", action="store_true",
        help=f"rewrite {os.path.relpath(EXPECTED, ROOT)} with the failing cases",
    )  # fmt: skip
    args = p.parse_args(argv)
    global TARGET
    TARGET = args.target
    if args.update_expected and TARGET != "numpy":
        print("--update-expected records the numpy target's failures", file=sys.stderr)
        return 2

    import onnx

    from plait.frontend.onnx.conformance import (
        load_node_cases,
        uses_exotic_types,
        write_expected_failures,
    )

    t0 = time.time()
    cases = load_node_cases()
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            results = pool.map(_run, cases, chunksize=8)
    else:
        results = [_run(c) for c in cases]
    elapsed = time.time() - t0

    common = [not uses_exotic_types(c.model) for c in cases]
    n_pass = sum(r.passed for r in results)
    n_common = sum(common)
    n_common_pass = sum(r.passed for r, k in zip(results, common) if k)
    n_special = sum(r.passed and r.specialized for r in results)
    n_common_special = sum(r.passed and r.specialized for r, k in zip(results, common) if k)
    print(f"onnx {onnx.__version__} node test suite: {len(cases)} cases ({elapsed:.0f} s)")
    print(f"plait ({TARGET} target) passes {n_pass} of {len(cases)}")
    print(f"plait passes {n_common_pass} of {n_common} without float16/bfloat16/float8/4-bit types")
    print(
        f"compile-time inputs: {n_special} (resp. {n_common_special}) of those passing cases "
        "read some graph inputs at compile time (a Reshape target, Slice bounds, reduction "
        "axes, ...); plait compiles one executable per value of those inputs"
    )
    if args.compare_onnxruntime:
        import onnxruntime

        if args.jobs > 1:
            with Pool(args.jobs) as pool:
                ort_ok = pool.map(_run_ort, cases, chunksize=8)
        else:
            ort_ok = [_run_ort(c) for c in cases]
        n_ort = sum(ort_ok)
        n_ort_common = sum(ok for ok, k in zip(ort_ok, common) if k)
        print(
            f"onnxruntime {onnxruntime.__version__} passes {n_ort} of {len(cases)}, and "
            f"{n_ort_common} of {n_common} without those types (same harness)"
        )
    if args.failures:
        for r in results:
            if not r.passed:
                print(f"  {r.name}: {r.reason}")
    if args.update_expected:
        if args.filter:
            print("--update-expected needs the whole suite (no --filter)", file=sys.stderr)
            return 2
        header = (
            f"ONNX node test cases plait is expected to fail (onnx {onnx.__version__}), with why.\n"
            "One case per line: `name: reason`.  Regenerate with\n"
            "    python tools/onnx_conformance.py --update-expected\n"
            "tests/frontend/test_onnx_conformance.py fails if a case not listed here fails, "
            "or if a listed case passes."
        )
        write_expected_failures(EXPECTED, results, header)
        print(f"wrote {os.path.relpath(EXPECTED, ROOT)} ({len(cases) - n_pass} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
