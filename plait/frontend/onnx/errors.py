"""Errors of the ONNX importer.

Every problem the importer finds is reported as one :class:`OnnxImportError` whose
message names the model, and for each problem the ONNX node (name and op type), the
attribute or input concerned and the opset.  Problems found before anything is built
(unsupported operators, malformed graphs, bad attribute values) are collected and
reported together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..common import FrontendImportError


class OnnxImportError(FrontendImportError):
    """An ONNX model that plait cannot import.

    Attributes:
        problems: one line per problem found.
        source: the model path or graph name.
        unsupported: for each unsupported op type (``"domain::Op"`` for other domains
            than the default one), the names of the nodes that use it.
        opset: the model's default-domain opset, when known.
        needs_constants: graph inputs whose *values* plait needs at compile time
            (they decide a shape, an axis or a count); pass them to
            ``from_onnx(..., constants={name: array})``.
        hint: what would make the model importable, printed after the problems.
    """

    def __init__(
        self,
        problems: str | Sequence[str],
        *,
        source: str = "",
        unsupported: dict[str, list[str]] | None = None,
        opset: int | None = None,
        needs_constants: Iterable[str] = (),
        headline: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        self.unsupported = dict(unsupported or {})
        self.opset = opset
        self.needs_constants = tuple(sorted(set(needs_constants)))
        self.headline = headline
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = (
            f"cannot import ONNX model {self.source!r}"
            if self.source
            else ("cannot import ONNX model")
        )
        hint = f"\n{self.hint}" if self.hint else ""
        if len(self.problems) == 1 and self.headline is None:
            return f"{where}: {self.problems[0]}{hint}"
        head = self.headline or f"{len(self.problems)} problems"
        return f"{where}: {head}:\n" + "\n".join(f"  - {p}" for p in self.problems) + hint


class NeedsConstantError(OnnxImportError):
    """A value that plait needs at compile time (a shape, axes, a count) is computed at
    run time.  ``needs_constants`` lists the graph inputs it is computed from; freezing
    them with ``from_onnx(..., constants=...)`` makes the model importable."""


def describe_node(name: str, op_type: str, opset: int | None = None, domain: str = "") -> str:
    """``node 'conv1' (Conv, opset 13)``: how every message names a node."""
    op = f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type
    ver = f", opset {opset}" if opset is not None else ""
    shown = repr(name) if name else "<unnamed>"
    return f"node {shown} ({op}{ver})"
