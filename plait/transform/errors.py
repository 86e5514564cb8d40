"""Errors of the pass infrastructure.

Every error says where it happened (pass, phase, function, binding) and what to do.

* :class:`TransformError` is the base of everything raised by the pass manager.
* :class:`PassError` wraps an exception raised *inside* a pass; the original is chained
  (``err.__cause__``).
* :class:`PipelineError` and its subclass :class:`PhaseError` reject a pipeline (or a
  direct pass call) before anything runs.
* :class:`ConfigError` is a bad :class:`~plait.transform.PassContext` configuration.
* :class:`PassCheckError` is raised by a check made after a pass (well-formedness,
  immutability); it names the pass that broke the invariant.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.errors import PlaitError

from ..ir.well_formed import Violation, WellFormedError


class TransformError(PlaitError):
    """Base of every error raised by the pass infrastructure."""


class PipelineError(TransformError, ValueError):
    """A pipeline is malformed: unknown pass names, bad text, misordered passes."""


class PhaseError(PipelineError):
    """A pass would run in a phase it does not accept, or before a pass it requires."""


class ConfigError(TransformError, ValueError):
    """An unknown configuration key, or a value of the wrong type."""


class InstrumentError(TransformError):
    """An instrument hook raised an exception (a bug in the instrument)."""


class ReplayError(TransformError):
    """A reproducer could not be loaded."""


class PassError(TransformError):
    """An exception raised inside a pass, with the place it happened.

    Attributes: ``pass_name``, ``phase``, ``function`` and ``binding`` (None when
    unknown), ``reproducer`` (path of the reproducer written for it, or None).  The
    original exception is ``__cause__``.
    """

    def __init__(
        self,
        pass_name: str,
        phase: str,
        original: BaseException | str,
        *,
        function: str | None = None,
        binding: str | None = None,
        reproducer: str | None = None,
        note: str | None = None,
    ) -> None:
        self.pass_name = pass_name
        self.phase = phase
        self.function = function
        self.binding = binding
        self.reproducer = reproducer
        self.note = note
        self.original = original
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"pass {self.pass_name!r} failed in phase {self.phase}"
        if self.function is not None:
            where += f" while transforming function {self.function!r}"
        if self.binding is not None:
            where += f", binding {self.binding!r}"
        orig = self.original
        detail = orig if isinstance(orig, str) else f"{type(orig).__name__}: {orig}"
        lines = [f"{where}: {detail}"]
        if self.note:
            lines.append(f"  note: {self.note}")
        if self.reproducer:
            lines.append(
                f"  a reproducer was written to {self.reproducer}; "
                f"rerun it with plait.transform.replay({self.reproducer!r})"
            )
        return "\n".join(lines)


class PassCheckError(TransformError):
    """A check made around a pass failed; ``pass_name`` names the pass to blame."""

    def __init__(self, pass_name: str, phase: str, message: str) -> None:
        self.pass_name = pass_name
        self.phase = phase
        self.reproducer: str | None = None
        Exception.__init__(self, message)  # not super(): WellFormedError is a sibling base


class ImmutabilityError(PassCheckError):
    """A pass modified the module it was given instead of building a new one.
    ``input_text`` is the module as the pass received it, when it was kept."""

    input_text: str | None = None


class PassWellFormedError(PassCheckError, WellFormedError):
    """The module produced (or received) by a pass violates its phase's invariants."""

    def __init__(
        self, pass_name: str, phase: str, violations: Sequence[Violation], when: str
    ) -> None:
        self.violations = list(violations)
        self.when = when
        head = f"{when}: the module is not well formed for phase {phase}"
        body = WellFormedError.format_violations(self.violations)
        PassCheckError.__init__(self, pass_name, phase, f"{head}\n{body}")


__all__ = [
    "ConfigError",
    "ImmutabilityError",
    "InstrumentError",
    "PassCheckError",
    "PassError",
    "PassWellFormedError",
    "PhaseError",
    "PipelineError",
    "ReplayError",
    "TransformError",
]
