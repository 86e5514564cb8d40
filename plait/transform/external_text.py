"""External modules in the text format, so a graph that holds them round-trips.

A module attribute ``external_mods`` (compiled external modules: after ``RunCodegen``,
or from the ONNX importer's onnxruntime fallback) prints as::

    external_module(codegen="onnxruntime", format="onnxruntime",
                    functions=(("f", (((2, "n"), "float32"),), (((2, "n"), "float32"),)),),
                    blobs={"f.onnx": const(ref="...", shape=(812,), dtype="uint8")},
                    meta={"graphs": {"f": {"model": "f.onnx", ...}}})

The members are uint8 arrays (so a kept graph stores them among its constants, once);
the metadata's lists print as tuples and come back as lists.  Parsing builds the data
object only: nothing is loaded or run (``ExternalModule`` checks its fields), and a
graph holding external modules is code under the trust policy (``external_mods`` is a
registered code attribute, docs/reliability.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..ir.parser import register_value_constructor
from ..ir.printer import register_value_printer
from ..runtime.external import ExternalFunction, ExternalModule, TensorSig


def _tuples(v: Any) -> Any:
    """JSON-able data with lists as tuples (the text format's sequences)."""
    if isinstance(v, list | tuple):
        return tuple(_tuples(x) for x in v)
    if isinstance(v, Mapping):
        return {str(k): _tuples(x) for k, x in v.items()}
    return v


def _lists(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return [_lists(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _lists(x) for k, x in v.items()}
    return v


def _print(m: ExternalModule, printer: Any) -> str:
    fns = tuple((f.name, tuple((t.shape, t.dtype) for t in f.inputs),
                 tuple((t.shape, t.dtype) for t in f.outputs)) for f in m.functions)
    blobs = {k: np.frombuffer(v, dtype=np.uint8) for k, v in m.blobs.items()}
    return (f"external_module(codegen={printer.value_text(m.codegen)}, "
            f"format={printer.value_text(m.format)}, functions={printer.value_text(fns)}, "
            f"blobs={printer.value_text(blobs)}, meta={printer.value_text(_tuples(m.meta))})")


def _sigs(items: Any, what: str) -> tuple[TensorSig, ...]:
    try:
        return tuple(TensorSig(tuple(shape), str(dtype)) for shape, dtype in items)
    except (TypeError, ValueError):
        raise ValueError(f"external_module: {what} must be ((shape, dtype), ...)") from None


def _build(codegen: str, format: str, functions: Any = (), blobs: Any = None,
           meta: Any = None) -> ExternalModule:
    fns = []
    for f in functions:
        if not isinstance(f, tuple) or len(f) != 3:
            raise ValueError("external_module: each function is (name, inputs, outputs)")
        fns.append(ExternalFunction(f[0], _sigs(f[1], "inputs"), _sigs(f[2], "outputs")))
    members = {}
    for k, v in (blobs or {}).items():
        arr = np.asarray(v)
        if arr.dtype != np.uint8 or arr.ndim != 1:
            raise ValueError(f"external_module: member {k!r} must be a 1-d uint8 array")
        members[k] = arr.tobytes()
    return ExternalModule(codegen, format, tuple(fns), members, _lists(meta or {}))


register_value_printer(ExternalModule, _print)
register_value_constructor("external_module", _build)

__all__: list[str] = []
