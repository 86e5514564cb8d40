"""Errors of the PyTorch importer.

Every problem is one :class:`TorchImportError` naming the exported program's node (its
fx name and ATen op) and, where PyTorch recorded it, the line of the model's source that
produced the node.  Unsupported ops are all reported together in one
:class:`UnsupportedOpsError` before anything is built.
"""

from __future__ import annotations

from ..common import FrontendImportError


class TorchImportError(FrontendImportError):
    """A ``torch.export`` program that plait cannot import."""


class UnsupportedOpsError(TorchImportError):
    """The program uses ATen ops plait has no converter for.

    Attributes:
        unsupported: for each op (``"aten.foo.default"``), the ``(node name, source
            line)`` pairs of the nodes that call it.
    """

    def __init__(self, unsupported: dict[str, list[tuple[str, str]]]) -> None:
        self.unsupported = dict(unsupported)
        n = len(unsupported)
        lines = [f"cannot import the exported program: {n} unsupported ATen "
                 f"op{'s' * (n != 1)}:"]
        for op, uses in sorted(unsupported.items()):
            shown = uses[:3]
            where = "; ".join(f"node {name!r}" + (f" at {src}" if src else "")
                              for name, src in shown)
            more = f" (and {len(uses) - len(shown)} more)" if len(uses) > len(shown) else ""
            lines.append(f"  - {op}: {where}{more}")
        lines.append(
            "hint: docs/pytorch.md lists the ops plait converts; register a converter with "
            "@plait.frontend.torch.converter(\"<op>\"), or give the model's forward a form "
            "without these ops (or decompose them with ep.run_decompositions(table))"
        )
        super().__init__("\n".join(lines))


def last_frame(stack_trace: str | None) -> str:
    """``file.py:12 (y = x.foo())``: the last frame of a recorded stack trace, or ''."""
    if not stack_trace:
        return ""
    lines = [ln for ln in stack_trace.strip().splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        ln = lines[i].strip()
        if ln.startswith("File "):
            parts = ln.split(",")
            path = parts[0][len("File "):].strip().strip('"')
            lineno = parts[1].strip().removeprefix("line ").strip() if len(parts) > 1 else "?"
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            where = f"{path}:{lineno}"
            return f"{where} ({code})" if code and not code.startswith("File ") else where
    return ""


def describe(name: str, op: str, source: str = "") -> str:
    """``node 'add_3' (aten.add.Tensor) at model.py:12 (y = a + b)``."""
    return f"node {name!r} ({op})" + (f" at {source}" if source else "")


__all__ = ["TorchImportError", "UnsupportedOpsError", "describe", "last_frame"]
