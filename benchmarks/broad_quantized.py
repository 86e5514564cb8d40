"""The broad suite's int8 models (``benchmarks/run.py --suite broad-int8``): every CNN
and text encoder of broad_models.py (its ``INT8`` list) quantized by onnxruntime's own
tools, as a user quantizes a model for a CPU:

* ``-qop``: ``quantize_static`` in QOperator form (QLinearConv, QLinearMatMul, ...),
* ``-qdq``: ``quantize_static`` in QDQ form (QuantizeLinear/DequantizeLinear pairs
  around float operators),
* ``-dyn``: ``quantize_dynamic`` (int8 weights, activations quantized at run time),

uint8 activations and int8 weights, calibrated on 8 inputs drawn like the benchmark's
(other seeds).  Where the quantizer refuses the export as it is (a convolution whose bias
the export computes from a constant rather than stores), the model goes through
onnxruntime's own pre-processing first (``quant_pre_process``: shape inference and graph
optimization, which folds such constants); a quantized file onnxruntime cannot load is a
failure of the tool, recorded as such.  The model names are ``<model>-<form>`` (``resnet50-qdq``).

The quantized files are cached beside the exports (``$PLAIT_BENCH_CACHE/quantized``,
default ``~/.cache/plait/bench-models/quantized``), under the onnxruntime version and the
float export's own cache key, so a changed spec or tool is quantized afresh.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import broad_models
import real_models

FORMS = ("qop", "qdq", "dyn")
"""The three forms onnxruntime's tools write."""
MODELS = [f"{m}-{f}" for m in broad_models.INT8 for f in FORMS]
"""The int8 suite's models, in the order they run."""
CALIBRATION = 8
"""Calibration inputs of the static forms."""


def split(name: str) -> tuple[str, str]:
    """``resnet50-qdq`` -> (``resnet50``, ``qdq``); ValueError for another name."""
    model, _, form = name.rpartition("-")
    if form not in FORMS or model not in broad_models.MODELS or not broad_models.MODELS[
            model].int8:
        raise ValueError(f"no int8 model {name!r}: the names are <model>-<form> with the "
                         f"model one of {', '.join(broad_models.INT8)} and the form one of "
                         f"{', '.join(FORMS)}")
    return model, form


def calibration_inputs(spec: real_models.RealModel, count: int = CALIBRATION) -> list[Any]:
    """``count`` inputs drawn like ``spec``'s benchmark input, from other seeds."""
    import numpy as np

    out = []
    for i in range(count):
        rng = np.random.default_rng(1000 + i)
        if spec.dtype == "int64":
            out.append(rng.integers(0, spec.vocab, spec.shape).astype(np.int64))
        else:
            out.append(rng.standard_normal(spec.shape).astype(spec.dtype))
    return out


def quantize(src: Path, spec: real_models.RealModel, form: str, out: Path) -> None:
    """Quantize the float model ``src`` (of ``spec``) in ``form`` into ``out``."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        """The calibration inputs, one feed at a time."""

        def __init__(self) -> None:
            self.data = iter([{"input": x} for x in calibration_inputs(spec)])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.data, None)

    import onnxruntime
    from onnxruntime.quantization.shape_inference import quant_pre_process

    logging.getLogger().setLevel(logging.ERROR)
    tmp = out.with_name(f"{out.stem}.{os.getpid()}.onnx")
    pre = out.with_name(f"{out.stem}.{os.getpid()}.pre.onnx")
    try:
        try:
            _quantize(src, form, tmp, Reader())
        except Exception:  # noqa: BLE001 (retried on the pre-processed model)
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            _quantize(pre, form, tmp, Reader())
        onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    finally:
        pre.unlink(missing_ok=True)
    tmp.replace(out)   # a reader never sees half a file


def _quantize(src: Path, form: str, out: Path, reader: Any) -> None:
    """onnxruntime's quantization of ``src`` in ``form`` into ``out``."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if form == "dyn":
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    else:
        quantize_static(str(src), str(out), reader,
                        quant_format=QuantFormat.QOperator if form == "qop" else
                        QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def quantized_files(names: list[str], suite: str = "broad", cache: Path | None = None
                    ) -> tuple[dict[str, Path], dict[str, str]]:
    """The quantized ONNX file of each ``<model>-<form>`` in ``names``, from the float
    exports of spec table ``suite`` (``broad`` or ``broad-tiny``), quantized now when not
    cached; and, by name, why onnxruntime's tools could not quantize a model (then it has
    no file).  Failures are remembered beside the files (``.failed``) until a new tool
    version or spec."""
    import onnxruntime

    cache = cache or real_models.default_cache()
    parts = {n: split(n) for n in names}
    floats = real_models.export_cached(sorted({m for m, _ in parts.values()}), cache,
                                       suite=suite)
    d = cache / "quantized" / f"ort-{onnxruntime.__version__}"
    d.mkdir(parents=True, exist_ok=True)
    specs = real_models.suite_specs(suite)
    out, failed = {}, {}
    for n, (model, form) in parts.items():
        path = d / f"{floats[model].stem}-{form}.onnx"
        note = path.with_suffix(".failed")
        if not path.exists() and not note.exists():
            try:
                quantize(floats[model], specs[model], form, path)
            except Exception as err:  # noqa: BLE001 (the tool's failure is the result)
                note.write_text(f"onnxruntime.quantization: {type(err).__name__}: "
                                f"{str(err)[:300]}")
        if note.exists():
            failed[n] = note.read_text()
        else:
            out[n] = path
    return out, failed


def make_input(name: str, suite: str = "broad") -> Any:
    """The benchmark input of ``<model>-<form>`` (the float model's)."""
    return real_models.make_input(real_models.suite_specs(suite)[split(name)[0]])
