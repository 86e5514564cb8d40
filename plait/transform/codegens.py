"""The registry of external codegens.

An external codegen compiles whole subgraphs that the host pipeline leaves to it::

    register_codegen(
        "mydnn",
        patterns=[("mydnn.conv2d_relu", conv_relu), ("mydnn.dense", dense)],
        compile=compile_mydnn,                 # IRModule -> ExternalModule(s)
        passes=["FoldConstant"],               # run on its functions before compile
    )

* ``patterns``: the rules (:class:`~plait.transform.pattern_rewrite.Rule`, or
  ``(name, pattern[, check])``) that say what it supports; ``FuseOpsByPattern``
  outlines each match as a composite function, ``PartitionGraph`` merges adjacent ones
  into one function per region (``compiler="mydnn"``, a ``global_symbol``);
* ``compile(mod)``: gets the codegen's functions together, as one IRModule in the
  optimization phase (after ``passes`` and the user's passes for it), and returns the
  :class:`~plait.runtime.external.ExternalModule` (or several) providing every
  function that has a ``global_symbol``;
* ``passes``: pass instances, names or pipeline text, run on exactly those functions.

Registering a codegen also registers the configuration key ``codegen.<name>.passes``:
passes (pipeline text, or a list of passes or names) that ``RunCodegen`` runs on the
codegen's functions after its own.  The core pipeline names no codegen: it asks this
registry for the codegens a target lists (``Target(..., offload=("mydnn",))``).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..runtime.lazy_compiler import LoadingDict, load_compiler
from .context import register_config
from .errors import TransformError
from .pattern_rewrite import Rule, as_rules

if TYPE_CHECKING:
    from ..ir.module import IRModule
    from .sequential import Sequential

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""Codegen names: identifiers (they become parts of function names and config keys)."""

CompileFn = Callable[["IRModule"], Any]


class CodegenError(TransformError, ValueError):
    """An unknown codegen, a bad registration, or a codegen that failed; the message
    names the codegen and what to do."""


@dataclass(frozen=True)
class Codegen:
    """A registered external codegen: its name, rules, compile function and passes."""

    name: str
    rules: tuple[Rule, ...]
    compile: CompileFn
    passes: tuple[Any, ...]
    doc: str = ""

    @property
    def config_key(self) -> str:
        """The configuration key of the user's passes for this codegen."""
        return f"codegen.{self.name}.passes"

    def pipeline(self) -> Sequential:
        """The codegen's own passes as a pipeline named ``codegen.<name>``."""
        from .sequential import Sequential

        return Sequential(list(self.passes), name=f"codegen.{self.name}")


_CODEGENS: dict[str, Codegen] = LoadingDict()  # loads the compiler on a miss


def as_pipeline_items(value: Any, where: str) -> tuple[Any, ...]:
    from .pass_base import Pass
    from .sequential import parse_pipeline

    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(parse_pipeline(value).passes)
    if isinstance(value, Pass):
        return (value,)
    out: list[Any] = []
    for p in value:
        if isinstance(p, str):
            out.extend(parse_pipeline(p).passes)
        elif isinstance(p, Pass):
            out.append(p)
        else:
            raise CodegenError(f"{where}: {p!r} is not a pass, a pass name or pipeline text")
    return tuple(out)


def _check_user_passes(value: Any) -> Any:
    from .sequential import Sequential

    return Sequential(list(as_pipeline_items(value, "codegen passes")), name="user")


def register_codegen(
    name: str,
    *,
    compile: CompileFn,
    patterns: Iterable[Rule | tuple[Any, ...]] = (),
    passes: Sequence[Any] | str = (),
    doc: str = "",
    override: bool = False,
) -> Codegen:
    """Register the external codegen ``name`` (see the module docstring)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise CodegenError(f"invalid codegen name {name!r}: use letters, digits and _ "
                           "(it becomes part of function names and config keys)")
    if name in _CODEGENS and not override:
        raise CodegenError(f"codegen {name!r} is already registered (pass override=True to "
                           "replace it)")
    if not callable(compile):
        raise CodegenError(f"codegen {name!r}: compile must be a function IRModule -> "
                           f"ExternalModule(s), got {compile!r}")
    rules = as_rules(patterns, f"codegen {name!r} patterns")
    items = as_pipeline_items(passes, f"codegen {name!r} passes")
    cg = Codegen(name, rules, compile, items, doc)
    register_config(cg.config_key, (str, list, tuple, type(None), _pass_type()), None,
                    f"passes RunCodegen runs on the functions of codegen {name!r} after its "
                    "own (pipeline text or a list of passes)", check=_check_user_passes,
                    module=sys._getframe(1).f_globals.get("__name__", ""))
    _CODEGENS[name] = cg
    return cg


def _pass_type() -> type:
    from .pass_base import Pass

    return Pass


OFFLOAD_ATTR = "offload"
"""The target attribute listing the codegens the default pipeline partitions for."""


def offload_passes(target: Any) -> list[Any]:
    """The partitioning passes for the codegens ``target`` lists in its ``offload``
    attribute (in order): ``FuseOpsByPattern`` and ``PartitionGraph`` for each."""
    from .fuse_by_pattern import FuseOpsByPattern
    from .partition import PartitionGraph

    names = target.attrs.get(OFFLOAD_ATTR) or ()
    if isinstance(names, str):
        names = (names,)
    out: list[Any] = []
    for n in names:
        get_codegen(n, needed_by=f"target {target!r} (attribute offload)")
        out += [FuseOpsByPattern(codegen=n), PartitionGraph(n)]
    return out


def unregister_codegen(name: str) -> None:
    """Forget codegen ``name`` (no-op when unknown)."""
    _CODEGENS.pop(name, None)


def registered_codegen(name: str) -> Codegen | None:
    """The codegen registered under ``name``, or None (:func:`get_codegen` raises,
    naming close names, instead)."""
    return _CODEGENS.get(name)


def list_codegens() -> list[Codegen]:
    """The registered codegens, by name."""
    load_compiler()
    return [_CODEGENS[k] for k in sorted(_CODEGENS)]


def get_codegen(name: str, *, needed_by: str = "") -> Codegen:
    """The codegen ``name``; an unknown name is a :class:`CodegenError` with close
    names and the registered ones (``needed_by`` says who asked)."""
    cg = _CODEGENS.get(name)
    if cg is not None:
        return cg
    close = difflib.get_close_matches(str(name), list(_CODEGENS), n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    who = f"{needed_by}: " if needed_by else ""
    known = ", ".join(sorted(_CODEGENS)) or "none"
    raise CodegenError(f"{who}no external codegen {name!r} is registered{hint} (registered: "
                       f"{known}; codegens register with plait.transform.register_codegen, "
                       "the shipped ones when their package is imported)")


__all__ = [
    "OFFLOAD_ATTR",
    "Codegen",
    "CodegenError",
    "get_codegen",
    "list_codegens",
    "offload_passes",
    "register_codegen",
    "registered_codegen",
    "unregister_codegen",
]
