"""What the ``c`` target's dispatch rules share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fused_span(graph: Any, members: Sequence[int], root: Any) -> Any:
    """The span of a native call replacing the bindings ``members`` of ``graph`` (the
    product and its epilogue...): ``root``'s place, noting every member's model node, so
    a profile names all the nodes the call computes."""
    from plait.transform.fuse_ops import joined_span

    return joined_span([graph.bindings[i].value.span for i in members], root.value.span)


__all__ = ["fused_span"]
