"""benchmarks/spread.py's summary across rounds (the figures are made up here; the
expected values are worked out by hand)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import spread  # noqa: E402


def test_summary_is_the_median_over_rounds_and_counts_the_rounds_won() -> None:
    table = spread.summary({
        ("mlp", "onnxruntime"): [1.0, 2.0, 0.5, 0.8],
        ("mlp", "plait-c"): [0.9, 2.5, 0.5, 1.2],
        ("cnn", "onnxruntime"): [10.0],
    })
    rows = [r for r in table.splitlines() if r.startswith("| mlp")]
    # medians 0.9 and 1.05 (even counts average the middle two); wins: 0.9<=1.0, 0.5<=0.5
    assert rows == ["| mlp | 4 | 0.900 | 1.050 | 1.17 | 2 of 4 |"]
    assert "| cnn" not in table   # no plait-c rounds: no row


def test_summary_compares_the_trees_when_there_are_before_rounds() -> None:
    table = spread.summary({
        ("mlp", "onnxruntime"): [1.0, 1.0, 1.0],
        ("mlp", "plait-c"): [0.8, 0.9, 1.1],
        ("mlp", "plait-c-before"): [1.0, 0.8, 1.2],
    })
    assert "| mlp | 3 | 1.000 | 0.900 | 0.90 | 2 of 3 |" in table
    # before: median 1.0; after 0.9; after <= before in rounds 1 and 3
    assert "| mlp | 3 | 1.000 | 0.900 | 0.90 | 2 of 3 |" in table.split("after / before")[1]
