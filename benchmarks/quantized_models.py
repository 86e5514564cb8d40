"""The quantized suite of benchmarks/run.py (``--suite quantized``): models quantized by
onnxruntime's own tools, as a user makes them.

* ``mlp``, ``cnn``, ``encoder`` (the models of tests/dialects/qnn/qnn_models.py: an
  MLP, a ResNet-style CNN with a depthwise convolution, a post-norm transformer encoder
  layer), each as ``-qop`` (quantize_static, QOperator), ``-qdq`` (quantize_static,
  QDQ) and ``-dyn`` (quantize_dynamic), uint8 activations and int8 weights;
* ``bert-dyn``: the real suite's BERT (benchmarks/real_models.py: 4 layers of BERT-base,
  sequence 128) through ``quantize_dynamic`` (int8 weights), the usual way transformers
  are quantized for CPUs.

The quantized files are cached next to the real suite's exports
(``$PLAIT_BENCH_CACHE/quantized``, default ``~/.cache/plait/bench-models/quantized``),
keyed by the onnxruntime version that made them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMALL = {f"{m}-{f}": (m, f) for m in ("mlp", "cnn", "encoder") for f in ("qop", "qdq", "dyn")}
MODELS = [*SMALL, "bert-dyn"]
"""The suite's models, in the order they run."""
NOTES = {"bert-dyn": "BERT-base, 4 layers, sequence 128, quantize_dynamic (int8 weights)"}


def _qnn_models() -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dialects" / "qnn"))
    import qnn_models  # noqa: PLC0415

    return qnn_models


def _real_models() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import real_models  # noqa: PLC0415

    return real_models


def cache_dir() -> Path:
    """Where the quantized files are kept (made if missing)."""
    import onnxruntime

    d = _real_models().default_cache() / "quantized" / f"ort-{onnxruntime.__version__}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def quantized_file(name: str) -> str:
    """The ONNX file of model ``name``, quantized now if it is not in the cache."""
    d = cache_dir()
    if name in SMALL:
        model, fmt = SMALL[name]
        return _qnn_models().quantize(model, fmt, str(d))
    if name != "bert-dyn":
        raise ValueError(f"no quantized model {name!r}; the suite has {', '.join(MODELS)}")
    out = d / "bert_dyn.onnx"
    if not out.exists():
        import logging

        from onnxruntime.quantization import QuantType, quantize_dynamic

        src = _real_models().export_cached(["bert"])["bert"]
        logging.getLogger().setLevel(logging.ERROR)
        tmp = d / f"bert_dyn.{os.getpid()}.onnx"
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8)
        tmp.replace(out)
    return str(out)


def make_input(name: str) -> Any:
    """The benchmark input of model ``name`` (seeded)."""
    if name in SMALL:
        return _qnn_models().sample(SMALL[name][0], 0)
    rm = _real_models()
    return rm.make_input(rm.MODELS["bert"])


def input_shapes(name: str, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]] | None:
    """The ``shapes`` to import model ``name`` with (the small models' are static)."""
    return {"input": shape} if name == "bert-dyn" else None
