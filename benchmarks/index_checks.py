"""What checking indices costs on the ``c`` target: each ``take``/``gather_elements``
index is checked at run time (``checked_index``: an index out of range fails the call,
as numpy and onnxruntime do); ``Target("c", out_of_range_indices="clamp")`` clamps
instead, with no check.  This times the two builds of the same model, interleaved.

    python benchmarks/index_checks.py             # BERT's word-embedding lookup
    python benchmarks/index_checks.py --bert      # also the whole BERT of the real suite

The lookup: an ONNX ``Gather`` of token ids from a table of BERT-base's shape (30,522 x
768, float32), for ``--batch`` sequences of 128 tokens (ids drawn from the vocabulary).
``--bert`` also times the real suite's BERT (benchmarks/real_models.py, 4 layers,
sequence 128; exported once with torch and transformers, then cached), whose embedding
lookups are three such gathers.  Each figure is the median of ``--rounds`` blocks of
``--block`` calls, the two builds taking turns; the ratio is checked/clamped per round,
then its median.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import plait  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402


def embedding_model(batch: int, vocab: int = 30522, width: int = 768) -> Any:
    """An ONNX model of one Gather: BERT-base's word embeddings."""
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(0).standard_normal((vocab, width)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gather", ["word_embeddings", "input_ids"], ["emb"], axis=0)],
        "bert_embedding",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, 128])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [batch, 128, width])],
        [numpy_helper.from_array(table, "word_embeddings")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def time_pair(model: Any, x: np.ndarray, rounds: int, block: int) -> tuple[float, float, float]:
    """Median seconds per call of the checked and the clamped build, and the median of
    the per-round ratios checked/clamped."""
    from plait.frontend import from_onnx

    mod = from_onnx(model)
    vms = {mode: VirtualMachine(plait.build(mod, target=plait.Target(
        "c", out_of_range_indices=mode)))["main"] for mode in ("raise", "clamp")}
    want = vms["clamp"](x)
    np.testing.assert_array_equal(vms["raise"](x), want)   # in range: the same result
    times: dict[str, list[float]] = {m: [] for m in vms}
    ratios = []
    for r in range(rounds):
        order = ["raise", "clamp"] if r % 2 == 0 else ["clamp", "raise"]
        got = {}
        for mode in order:
            f = vms[mode]
            for _ in range(3):
                f(x)
            start = time.perf_counter()
            for _ in range(block):
                f(x)
            got[mode] = (time.perf_counter() - start) / block
            times[mode].append(got[mode])
        ratios.append(got["raise"] / got["clamp"])
    return (statistics.median(times["raise"]), statistics.median(times["clamp"]),
            statistics.median(ratios))


def report(name: str, figures: tuple[float, float, float]) -> None:
    checked, clamped, ratio = figures
    print(f"{name:<34} checked {checked * 1e6:10.1f} us   clamped {clamped * 1e6:10.1f} us"
          f"   checked/clamped {ratio:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--bert", action="store_true", help="also the real suite's BERT")
    args = ap.parse_args(argv)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"PLAIT_NUM_THREADS={os.environ.get('PLAIT_NUM_THREADS', 'default')}")
    rng = np.random.default_rng(1)
    for batch in args.batch:
        ids = rng.integers(0, 30522, (batch, 128))
        report(f"BERT word embedding, {batch}x128", time_pair(embedding_model(batch), ids,
                                                              args.rounds, args.block))
    if args.bert:
        import onnx
        import real_models

        path = real_models.export_cached(["bert"])["bert"]
        spec = real_models.MODELS["bert"]
        ids = rng.integers(0, spec.vocab, spec.shape)
        report("BERT (4 layers, 1x128), whole", time_pair(
            onnx.load(str(path)), ids, max(5, args.rounds // 3), max(5, args.block // 20)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
