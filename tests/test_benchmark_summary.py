"""benchmarks/spread.py's summary across rounds (the figures are made up here; the
expected values are worked out by hand)."""

import sys
from pathlib import Path

import pytest

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


def test_summary_sets_the_kernel_loop_against_the_call_and_onnxruntime() -> None:
    table = spread.summary({
        ("mlp-layer1", "onnxruntime"): [0.70, 0.68, 0.75],
        ("mlp-layer1", "plait-c"): [0.76, 0.74, 0.80],
        ("mlp-layer1", "plait-c-kernel"): [0.72, 0.70, 0.69],
    })
    kernel_vs_call, kernel_vs_ort = table.split("kernel / call")[1].split("| ratio |")
    # medians 0.76 (call) and 0.70 (kernel); the kernel is lower in all three rounds
    assert "| mlp-layer1 | 3 | 0.760 | 0.700 | 0.92 | 3 of 3 |" in kernel_vs_call
    # against onnxruntime's 0.70: equal medians; at or below in rounds 3 only (0.69<=0.75)
    assert "| mlp-layer1 | 3 | 0.700 | 0.700 | 1.00 | 1 of 3 |" in kernel_vs_ort


def test_run_combines_interleaved_processes() -> None:
    """benchmarks/run.py: the latency is the median of all timed calls of a backend's
    processes; a round's figure is the median of the processes' block medians."""
    from types import SimpleNamespace

    import run

    ours = [SimpleNamespace(times=[1.0, 2.0, 3.0], blocks=[2.0, 1.0]),
            SimpleNamespace(times=[4.0, 5.0, 6.0], blocks=[5.0, 1.0])]
    ort = [SimpleNamespace(times=[3.0], blocks=[3.0, 0.5])]
    results = [{"model": "mlp", "backend": "plait-c", "median_ms": 2000.0, "peak_rss_mb": 60},
               {"model": "mlp", "backend": "plait-c", "median_ms": 5000.0, "peak_rss_mb": 70}]
    r = run.combine(ours, results, ort)
    assert r["median_ms"] == 3500.0          # median of 1..6 s, in ms
    assert r["runs"] == 6 and r["peak_rss_mb"] == 70
    assert r["process_medians_ms"] == [2000.0, 5000.0]
    assert r["round_medians_ms"] == [3500.0, 1000.0]   # medians of (2, 5) and (1, 1)
    assert r["rounds_at_or_below_onnxruntime"] == 0 and r["rounds"] == 2  # 3.5>3, 1>0.5
    assert "rounds at or below onnxruntime" in run.report([r], [])
    failed = run.combine(ours, [results[0], {"model": "mlp", "backend": "plait-c",
                                             "error": "boom"}], ort)
    assert failed["error"] == "boom"


def test_run_rejects_unknown_backends_and_models(capsys) -> None:  # type: ignore[no-untyped-def]
    import run

    assert run.main(["--backends", "onnxruntime,plait-c-kernel"]) == 2
    out = capsys.readouterr().out
    assert "unknown plait-c-kernel" in out and "spread.py --kernel-loop" in out
    assert run.main(["--models", "mlp,resnet9"]) == 2
    assert "--models: unknown resnet9; choose from mlp" in capsys.readouterr().out


def test_spread_rejects_unknown_models(capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    with pytest.raises(SystemExit) as e:
        spread.main(["--models", "mlp,resnet9"])
    assert e.value.code == 2
    assert "--models: unknown resnet9; choose from mlp" in capsys.readouterr().err


def test_time_runs_calls_between_untimed_before_every_call() -> None:
    """The +torch-ops backends: ``fn.between`` (a torch operation) runs before each call,
    outside the timed region."""
    import time

    import run

    log: list[str] = []

    def fn() -> None:
        log.append("call")

    def between() -> None:
        log.append("between")
        time.sleep(0.02)   # would show in every timing if it were timed

    fn.between = between  # type: ignore[attr-defined]
    times = run._time_runs(fn, 3, warmup=1)
    assert log == ["between", "call"] * 4
    assert len(times) == 3 and max(times) < 0.02


def test_a_player_reports_under_its_label() -> None:
    """plait-c-before runs the worker backend plait-c; its results must carry the label,
    or the suite's table files the before tree's figures under plait-c."""
    from types import SimpleNamespace

    import run

    pl = SimpleNamespace(model="bert", backend="plait-c-before", error=None, proc=None,
                         result={"model": "bert", "backend": "plait-c", "peak_rss_mb": 1},
                         times=[0.002, 0.004], _cache=SimpleNamespace(cleanup=lambda: None),
                         _stderr=SimpleNamespace(close=lambda: None))
    pl.proc = SimpleNamespace(stdin=None, poll=lambda: 0)
    r = run.Player.finish(pl)
    assert r["backend"] == "plait-c-before" and r["median_ms"] == 3.0


def test_scaling_runs_each_size_in_a_process_and_reports_its_peak_memory() -> None:
    """benchmarks/run.py --scaling: each size is built in a process of its own, which
    reports its times and memory (peak and after the imports, from /proc); the table
    has a row per size with the peak."""
    import importlib.util

    import run

    rows = run.pipeline_scaling((200, 400))
    # the chain from every source built too: parsed from text, imported from ONNX and
    # from torch.export (each where its library is installed)
    sources = ["text"] + [name for name in ("onnx", "torch")
                          if importlib.util.find_spec(name) is not None]
    for r in rows:
        for name in sources:
            assert r[f"{name}_us_per_binding"] > 0 and r[f"{name}_cpu_us_per_binding"] > 0
            assert r[f"{name}_import_us_per_binding"] > 0
        assert r["builder_turn_cpu_us_per_binding"] > 0
        # torch.export's chain in a process of its own, beside a BlockBuilder chain
        assert ("torch" not in sources) == (r.get("torch_builder_cpu_us_per_binding") is None)
    assert [r["bindings"] for r in rows] == [200, 400]
    for r in rows:
        assert r["seconds"] > 0 and r["cpu_us_per_binding"] > 0
        assert r["peak_rss_mb"] >= r["base_rss_mb"] > 0  # Linux: /proc/self/status
        assert r["peak_bytes_per_binding"] >= 0
    table = run.report([], rows)
    assert table.startswith("| bindings |") and "peak RSS MB" in table
    assert "from ONNX, µs per binding" in table and "from torch.export" in table
    assert "| 200 |" in table and "| 400 |" in table
    assert "CPU ratio to builder (text / ONNX / torch.export)" in table
    # each source's CPU time over the BlockBuilder chain's (made-up figures)
    row = {"cpu_us_per_binding": 20.0, "text_cpu_us_per_binding": 25.0,
           "onnx_cpu_us_per_binding": 30.0, "torch_cpu_us_per_binding": None}
    assert run.source_ratios(row) == [1.25, 1.5, None]
    # torch.export's chain, built in a process of its own, over the BlockBuilder chain
    # built in turn with it there
    row.update(torch_cpu_us_per_binding=33.0, torch_builder_cpu_us_per_binding=30.0)
    assert run.source_ratios(row) == [1.25, 1.5, 1.1]


def test_scaling_torch_chain_past_the_export_limit_is_the_exported_one_grown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/scaling_sources.py: a torch.export chain longer than
    TORCH_MAX_BINDINGS is a short export's graph grown to the size; plait imports it as
    the module it imports from the export of the whole chain (names, spans, types)."""
    pytest.importorskip("torch")
    import scaling_sources

    exported = scaling_sources.from_torch_export(scaling_sources.torch_program(7))
    monkeypatch.setattr(scaling_sources, "TORCH_MAX_BINDINGS", 4)
    program = scaling_sources.torch_program(7)
    assert sum(n.op == "call_function" for n in program.graph.nodes) == 7
    grown = scaling_sources.from_torch_export(program)
    assert grown.script() == exported.script()
    assert "mul_3 = multiply(add_2, x)" in grown.script()


def test_llm_decode_table_sets_decode_against_the_triad() -> None:
    """benchmarks/llm_decode.py: the best of the rounds and the table (figures made up:
    weights 1e9 bytes read at 4 tokens/s are 4 GB/s, 40% of a 10 GB/s triad)."""
    import llm_decode

    run = {"end": {"VmHWM": 100.0}, "tokens": [1, 2, 3, 4]}
    best = llm_decode.best([{**run, "prefill_s": 3.0, "step_s": 0.25},
                            {"error": "killed"},
                            {**run, "prefill_s": 2.0, "step_s": 0.3, "end": {"VmHWM": 90.0}}])
    assert (best["prefill_s"], best["step_s"], best["peak_mib"], best["rounds"]) == \
        (2.0, 0.25, 100.0, 2)
    assert llm_decode.best([{"error": "boom"}]) == {"error": "boom"}
    results = {
        ("f32", "plait-c"): best,
        ("f32", "onnxruntime-genai"): {"prefill_s": 4.0, "step_s": 0.5, "peak_mib": 200.0,
                                       "tokens": [1, 2, 9, 4]},
        ("int4", "plait-c"): {"prefill_s": 1.0, "step_s": 0.1, "peak_mib": 50.0,
                              "tokens": [5, 6, 7, 8]},
        ("int4", "llama.cpp"): {"error": "llama_cpp is not installed"},
    }
    weights = {("f32", "plait-c"): 10**9, ("f32", "onnxruntime-genai"): 10**9,
               ("int4", "plait-c"): 25 * 10**7}
    table = llm_decode.summary(results, weights, 10e9, 512, 4, [1, 2, 3, 4]).splitlines()
    assert table[2] == ("| f32 | plait-c | 256.0 | 4.00 | 954 | 4.00 | 40% | 100 | "
                        "4 of 4 equal transformers' |")
    assert table[3] == ("| f32 | onnxruntime-genai | 128.0 | 2.00 | 954 | 2.00 | 20% | 200 | "
                        "2 of 4 equal transformers' |")
    assert table[4] == "| int4 | plait-c | 512.0 | 10.00 | 238 | 2.50 | 25% | 50 | reference |"
    assert table[5].startswith("| int4 | llama.cpp | not run: llama_cpp is not installed |")
    assert table[-1] == "| STREAM triad (stream_triad.c, cc -fopenmp) | 10.00 |"


def test_llm_decode_counts_each_engines_format() -> None:
    """benchmarks/llm_decode.py format_bytes: a 64 x 64 weight, an untied 100 x 64
    embedding (one row read) and a 64-vector norm, counted by hand per format."""
    from types import SimpleNamespace

    import llm_decode
    import torch

    emb, w, norm = (torch.nn.Parameter(torch.zeros(s)) for s in ((100, 64), (64, 64), (64,)))
    model = SimpleNamespace(config=SimpleNamespace(tie_word_embeddings=False),
                            get_input_embeddings=lambda: SimpleNamespace(weight=emb),
                            parameters=lambda: [emb, w, norm])
    rest = 64 * 4 + 64 * 4                                  # the embedding's row, the norm
    assert llm_decode.format_bytes(model, "onnxruntime-genai", None) == rest + 64 * 64 * 4
    # Q4_0: 64 rows x 2 blocks x (16 bytes + a float16 scale)
    assert llm_decode.format_bytes(model, "llama.cpp", "int4-g32-sym") == rest + 64 * 2 * 18
    # MatMulNBits int8, blocks of 32, asymmetric: 32 bytes + float32 scale + zero point
    assert llm_decode.format_bytes(model, "onnxruntime", "int8-g32") == rest + 64 * 2 * 37
    # plait's format keeps the zero points when symmetric too (4-bit: half a byte a block)
    assert llm_decode.format_bytes(model, "plait-c", "int4-g32-sym") == rest + 64 * 2 * 20.5
