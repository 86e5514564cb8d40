"""``plait.partition``: offload what external codegens support.

    import plait
    mod = plait.partition(mod, "onnxruntime")     # FuseOpsByPattern + PartitionGraph
    exe = plait.build(mod, "c")                   # RunCodegen compiles the regions

See docs/offload.md.
"""

from __future__ import annotations

from typing import Any

from .interp.externs import register_extern_provider
from .ir.module import IRModule
from .pipeline import default_pipeline
from .runtime.external import find_external
from .transform.codegens import get_codegen
from .transform.fuse_by_pattern import fuse_by_pattern
from .transform.partition import partition_graph


def partition(mod: IRModule, *codegens: str, inline_composites: bool = True) -> IRModule:
    """``mod`` partitioned for ``codegens`` (in order: an earlier codegen takes what
    several support): for each, ``FuseOpsByPattern`` with its registered patterns, then
    ``PartitionGraph``.  A module still in the ingestion phase first goes through the
    ingestion stage of the default pipeline for its target (``numpy`` if it has none)."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"partition() takes an IRModule, got {type(mod).__name__}")
    if not codegens:
        raise ValueError("partition(mod, 'name', ...): name at least one codegen")
    for name in codegens:
        get_codegen(name, needed_by="partition")
    if mod.phase == "ingestion":
        mod = default_pipeline(mod.target or "numpy")["ingestion"](mod)
    for name in codegens:
        mod = fuse_by_pattern(mod, get_codegen(name).rules, name)
        mod = partition_graph(mod, name, inline_composites)
    return mod


@register_extern_provider
def external_module_functions(mod: IRModule, name: str) -> Any:
    """The reference interpreter's lookup of a compiled external function (a module of
    ``mod.attrs["external_mods"]``, after RunCodegen), or None."""
    mods = mod.attrs.get("external_mods")
    return find_external(tuple(mods), name) if mods else None


__all__ = ["external_module_functions", "partition"]
