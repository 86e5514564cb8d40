"""NumericCheck: find the first pass that changes what a module computes.

    with PassContext(instruments=[NumericCheck()]):
        mod = pipeline(mod)

The instrument runs the module on fixed inputs through the numpy reference path
(:mod:`plait.interp`: graph functions, op references, kernels through the kernel
interpreter, extern and library calls) once before the first pass — those results
are the reference — and again after every pass that changed the module.  The first
pass after which an output differs from the reference by more than the tolerance
(``|got - want| <= atol + rtol * |want|``, NaN equal to NaN) raises
:class:`NumericMismatchError` naming the pass, its phase, the output, the largest
error and where it is.  A pass after which the module cannot be run at all raises it
too, with the interpreter's error.

With a reproducer directory (``reproducer_dir=`` or the context's
``transform.reproducer_dir``) the failure writes a reproducer — the module before the
pass, the pass, and ``numeric.npz`` with the inputs and the reference outputs — that
``plait.transform.replay(path)`` reruns: it raises the same error while the bug is
there.

``stop=False`` records instead of raising (:attr:`NumericCheck.records`, one per pass
run, with its largest error): the pipeline report uses this.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir.module import IRModule
from ..ir.structural import structural_equal
from .errors import PassCheckError
from .instruments import PassInstrument

if TYPE_CHECKING:
    from .pass_base import PassInfo

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


class NumericMismatchError(PassCheckError):
    """A pass changed the results of the module beyond the tolerance (or left a module
    the reference interpreter cannot run).  ``pass_name``, ``phase``, ``output`` (index,
    or None when the module could not run), ``max_abs``, ``reproducer``."""

    check = "numeric"

    def __init__(self, pass_name: str, phase: str, message: str, *, output: int | None,
                 max_abs: float, inputs: list[np.ndarray], reference: list[np.ndarray],
                 settings: dict[str, Any], reproducer_dir: str | None) -> None:
        super().__init__(pass_name, phase, message)
        self.output = output
        self.max_abs = max_abs
        self.inputs = inputs
        self.reference = reference
        self.settings = settings
        self.reproducer_dir = reproducer_dir

    def add_reproducer_files(self, path: str) -> None:
        """Save the inputs, the reference outputs and the settings with the reproducer."""
        arrays = {f"input_{i}": a for i, a in enumerate(self.inputs)}
        arrays.update({f"reference_{i}": a for i, a in enumerate(self.reference)})
        np.savez(Path(path) / "numeric.npz", **arrays)
        (Path(path) / "numeric.json").write_text(json.dumps(
            {**self.settings, "inputs": len(self.inputs), "outputs": len(self.reference)},
            indent=2) + "\n")


@dataclass
class NumericRecord:
    """The check after one pass: whether it ran the module (``changed``), the largest
    error against the reference, whether it is within tolerance, how long it took."""

    pass_name: str
    phase: str
    changed: bool
    max_abs: float
    ok: bool
    seconds: float
    note: str = ""


class NumericCheck(PassInstrument):
    """Runs the module after every pass that changes it and compares with the results
    before the pipeline (see the module docstring).

    ``inputs``: the arguments of ``function`` (a list, or a dict by parameter name);
    default: seeded random tensors of the parameter types (``seed``, symbolic sizes 1
    or from ``sizes``).  ``reference``: the expected outputs (default: the module's
    own results before the first pass).  ``native_kernels``: run kernels from the
    module's compiled library once it has one (this checks the C code generator too).
    """

    def __init__(
        self,
        inputs: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        function: str = "main",
        rtol: float = DEFAULT_RTOL,
        atol: float = DEFAULT_ATOL,
        seed: int = 0,
        sizes: Mapping[str, int] | None = None,
        reference: Sequence[np.ndarray] | None = None,
        reproducer_dir: str | Path | None = None,
        native_kernels: bool = False,
        stop: bool = True,
    ) -> None:
        self.given = inputs
        self.function = function
        self.rtol = float(rtol)
        self.atol = float(atol)
        self.seed = seed
        self.sizes = dict(sizes or {})
        self.reference = [np.asarray(r) for r in reference] if reference is not None else None
        self.reproducer_dir = str(reproducer_dir) if reproducer_dir is not None else None
        self.native_kernels = native_kernels
        self.stop = stop
        self.inputs: list[np.ndarray] | None = None
        self.records: list[NumericRecord] = []
        self._known: IRModule | None = None  # the last module whose results matched
        self._known_error = 0.0

    # ------------------------------------------------------------------ running
    def _inputs_for(self, mod: IRModule) -> list[np.ndarray]:
        from ..interp import random_inputs

        func = mod.functions.get(self.function)
        if func is None:
            raise ValueError(f"NumericCheck: the module has no function {self.function!r}")
        if self.given is None:
            return random_inputs(func, self.seed, self.sizes)  # type: ignore[arg-type]
        if isinstance(self.given, Mapping):
            names = [p.name_hint for p in func.params]  # type: ignore[attr-defined]
            missing = [n for n in names if n not in self.given]
            if missing:
                raise ValueError(f"NumericCheck: no input for parameter(s) {missing} of "
                                 f"{self.function!r}")
            return [np.asarray(self.given[n]) for n in names]
        return [np.asarray(a) for a in self.given]

    def _run(self, mod: IRModule) -> list[np.ndarray]:
        from ..interp import Interpreter, flatten_outputs

        assert self.inputs is not None
        out = Interpreter(mod, native_kernels=self.native_kernels).run(
            self.function, *[a.copy() for a in self.inputs])
        return [np.array(a, copy=True) for a in flatten_outputs(out)]

    def _settings(self) -> dict[str, Any]:
        return {"function": self.function, "rtol": self.rtol, "atol": self.atol,
                "native_kernels": self.native_kernels}

    def _fail(self, info: PassInfo, phase: str, message: str, output: int | None,
              max_abs: float) -> NumericMismatchError:
        assert self.inputs is not None and self.reference is not None
        return NumericMismatchError(
            info.name, phase, message, output=output, max_abs=max_abs, inputs=self.inputs,
            reference=self.reference, settings=self._settings(),
            reproducer_dir=self.reproducer_dir)

    # ------------------------------------------------------------------ hooks
    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.inputs is not None:
            return  # the reference is known: this is not the first pass
        self.inputs = self._inputs_for(mod)
        if self.reference is None:
            try:
                self.reference = self._run(mod)
            except Exception as e:
                raise ValueError(
                    f"NumericCheck: the module given to pass {info.name!r} (phase "
                    f"{mod.phase}) cannot be run by the reference interpreter, so there is "
                    f"nothing to compare with: {type(e).__name__}: {e}") from e
            self._known = mod

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if info.kind == "sequential":
            return
        t0 = time.perf_counter()
        if result is self._known or (result is mod and mod is self._known):
            self.records.append(NumericRecord(info.name, result.phase, False,
                                              self._known_error, True, 0.0))
            return
        if mod is self._known and structural_equal(mod, result):
            self._known = result
            self.records.append(NumericRecord(info.name, result.phase, False,
                                              self._known_error, True,
                                              time.perf_counter() - t0))
            return
        from ..interp import compare_outputs

        try:
            got = self._run(result)
        except Exception as e:
            msg = (f"NumericCheck: after pass {info.name!r} (phase {mod.phase} -> "
                   f"{result.phase}) the module cannot be run by the reference interpreter: "
                   f"{type(e).__name__}: {e}")
            self.records.append(NumericRecord(info.name, result.phase, True, float("inf"),
                                              False, time.perf_counter() - t0, str(e)))
            if self.stop:
                raise self._fail(info, result.phase, msg, None, float("inf")) from e
            return
        diffs = compare_outputs(got, self.reference, self.rtol, self.atol)
        worst = max(diffs, key=lambda d: d.max_abs)
        bad = [d for d in diffs if not d.ok]
        self.records.append(NumericRecord(info.name, result.phase, True, worst.max_abs,
                                          not bad, time.perf_counter() - t0,
                                          str(bad[0]) if bad else ""))
        if not bad:
            self._known, self._known_error = result, worst.max_abs
            return
        if not self.stop:
            return
        d = bad[0]
        msg = (f"NumericCheck: pass {info.name!r} (phase {mod.phase} -> {result.phase}) "
               f"changed the results of function {self.function!r}: {d} — beyond rtol "
               f"{self.rtol:g}, atol {self.atol:g} (before the pass the largest error was "
               f"{self._known_error:.3g})")
        if len(bad) > 1:
            msg += f"; {len(bad) - 1} more output(s) differ"
        raise self._fail(info, result.phase, msg, d.index, d.max_abs)

    # ------------------------------------------------------------------ reproducers
    @classmethod
    def from_reproducer(cls, path: str | Path) -> NumericCheck:
        """The check a numeric reproducer at ``path`` was written with (its inputs, its
        reference outputs and tolerance)."""
        p = Path(path)
        if p.suffix == ".json":
            p = p.parent
        settings = json.loads((p / "numeric.json").read_text())
        with np.load(p / "numeric.npz", allow_pickle=False) as data:
            inputs = [data[f"input_{i}"] for i in range(settings["inputs"])]
            reference = [data[f"reference_{i}"] for i in range(settings["outputs"])]
        return cls(inputs, function=settings["function"], rtol=settings["rtol"],
                   atol=settings["atol"], reference=reference,
                   native_kernels=settings.get("native_kernels", False))


__all__ = ["NumericCheck", "NumericMismatchError", "NumericRecord"]
