"""The names of an exported program's outputs."""

from __future__ import annotations

from typing import Any


def output_names(ep: Any) -> list[str]:
    """Names of the exported program's outputs, flattened as plait returns them: where
    each is in the structure the module returns (``logits``, ``0``, ``hidden.1``), else
    its node's name."""
    from torch.utils import _pytree as pytree

    nodes = [str(n) for n in ep.graph_signature.user_outputs]
    try:
        spec = ep.call_spec.out_spec
        tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        paths = [path for path, _ in pytree.tree_flatten_with_path(tree)[0]]
    except Exception:  # noqa: BLE001 (no structure recorded: the node names)
        return nodes
    names = []
    for i, path in enumerate(paths):
        keys = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                for k in path]
        names.append(".".join(keys) if keys else (nodes[i] if i < len(nodes) else f"output{i}"))
    return names


__all__ = ["output_names"]
