"""An ``onnx.backend`` backend that runs models with plait (import, build for numpy, run
on the virtual machine), used to run ONNX's backend test suite.

Graph inputs that plait needs at compile time (a Reshape target, Slice bounds, the
axes of a reduction, ...) are specialized: the first run imports the model with their
values as constants (``from_onnx(..., constants=...)``) and the compiled executable is
reused while those values stay the same, the way shape-specializing compilers work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .errors import NeedsConstantError

MAX_SPECIALIZATIONS = 8
"""How many executables one prepared model keeps for different constant inputs."""


class PlaitRep(BackendRep):
    """A prepared model: the executable (or executables, one per value of the inputs
    that are compile-time constants)."""

    def __init__(self, model: onnx.ModelProto, target: str = "numpy") -> None:
        self.model = model
        self.target = target
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_is_sequence = [
            o.type.WhichOneof("value") == "sequence_type" for o in model.graph.output
        ]
        self.sequence_inputs = {
            i.name for i in model.graph.input if i.type.WhichOneof("value") == "sequence_type"
        }
        self.frozen: set[str] = set()
        self._cache: dict[bytes, Any] = {}
        self._default: Any = None
        if not self.sequence_inputs:
            try:
                self._default = self._compile({}, {})
            except NeedsConstantError as e:
                self.frozen = set(e.needs_constants)

    @property
    def specialized(self) -> bool:
        """True if the executable depends on input values or sequence lengths (one
        executable per value)."""
        return self._default is None

    def _compile(self, constants: dict[str, np.ndarray], shapes: dict[str, Any]) -> Any:
        from ...build import build
        from ...runtime import VirtualMachine
        from .importer import from_onnx

        mod = from_onnx(self.model, shapes=shapes, constants=constants)
        return VirtualMachine(build(mod, target=self.target))

    def _key(self, values: dict[str, Any]) -> bytes:
        parts = []
        for n in sorted(self.frozen):
            v = values[n]
            parts.append(n.encode() + v.dtype.str.encode() + str(v.shape).encode() + v.tobytes())
        for n in sorted(self.sequence_inputs):
            parts.append(n.encode() + str([(a.dtype.str, a.shape) for a in values[n]]).encode())
        return b"\0".join(parts)

    def _vm_for(self, values: dict[str, Any]) -> Any:
        if self._default is not None:
            return self._default
        while True:
            missing = [n for n in self.frozen | self.sequence_inputs if n not in values]
            if missing:
                raise ValueError(f"no value given for the input(s) {missing}")
            key = self._key(values)
            vm = self._cache.get(key)
            if vm is not None:
                return vm
            shapes = {n: [tuple(a.shape) for a in values[n]] for n in self.sequence_inputs}
            try:
                vm = self._compile({n: values[n] for n in self.frozen}, shapes)
            except NeedsConstantError as e:
                new = set(e.needs_constants) - self.frozen
                if not new:
                    raise
                self.frozen |= new
                continue
            if len(self._cache) >= MAX_SPECIALIZATIONS:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = vm
            return vm

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run on ``inputs`` (a list in graph-input order, or a dict by name; a sequence
        input is a list of arrays)."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        pairs = inputs.items() if isinstance(inputs, dict) else zip(self.input_names, inputs)
        values: dict[str, Any] = {}
        for n, v in pairs:
            if n in self.sequence_inputs:
                values[n] = tuple(np.asarray(a) for a in v)
            else:
                values[n] = np.asarray(v)
        vm = self._vm_for(values)
        frozen = self.frozen if self._default is None else set()
        args = [values[n] for n in self.input_names if n not in frozen]
        result = vm["main"](*args)
        outs = list(result) if len(self.output_is_sequence) > 1 else [result]
        return tuple(
            list(o) if seq else np.asarray(o) for o, seq in zip(outs, self.output_is_sequence)
        )


class PlaitBackend(Backend):
    """``onnx.backend`` entry points for plait (CPU only, numpy target)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> PlaitRep:
        return PlaitRep(model)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
        outputs_info: Sequence[Any] | None = None, **kwargs: Any,
    ) -> tuple[Any, ...]:  # fmt: skip
        raise NotImplementedError("plait runs whole models; use run_model")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


prepare = PlaitBackend.prepare
run_model = PlaitBackend.run_model
supports_device = PlaitBackend.supports_device
