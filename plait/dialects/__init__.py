"""Dialects: families of ops with their own passes, plugged into the default pipeline.

A dialect registers the passes it contributes at the extension points of the default
pipeline (``ingestion`` canonicalization, ``dispatch`` to a target's kernels for its
ops, ``legalize`` ...).  A hook is a function of the target, so a dialect decides per
target kind what it contributes (``dispatch=lambda t: [ToInt8Kernels()] if t.is_a("c")
else []``).  ``build()`` and the pass manager never name a dialect: they ask this
registry.

    register_dialect("qnn", ingestion=lambda target: [qnn.Canonicalize()],
                     legalize=lambda target: [qnn.Legalize()])
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime.lazy_compiler import LoadingDict, load_compiler

DIALECT_POINTS = ("ingestion", "optimization", "dispatch", "legalize", "lowering")

HookFn = Callable[[Any], list[Any]]


@dataclass
class Dialect:
    """A registered dialect: its name, the passes it contributes per point and the
    modules holding its converters per frontend (``{"onnx": "pkg.onnx_converters"}``)."""

    name: str
    hooks: dict[str, HookFn] = field(default_factory=dict)
    doc: str = ""
    frontends: dict[str, str] = field(default_factory=dict)
    model_attrs: tuple[str, ...] = ()
    """Target attributes this dialect's hooks read that change what a model computes,
    not only how (the qnn dialect's ``weight_quant``): an executable records them
    beside the graph it keeps, and :func:`plait.rebuild` builds that graph with them
    again (:func:`model_target_attrs`)."""

    def hook_passes(self, point: str, target: Any) -> list[Any]:
        hook = self.hooks.get(point)
        return list(hook(target)) if hook is not None else []


DIALECTS: dict[str, Dialect] = LoadingDict()  # loads the compiler on a miss


def register_dialect(
    name: str, *, doc: str = "", frontends: Mapping[str, str] | None = None,
    override: bool = False, model_attrs: tuple[str, ...] = (), **hooks: HookFn,
) -> Dialect:
    """Register a dialect and the passes it contributes (``point=fn(target) -> passes``).

    ``frontends`` maps a frontend (``"onnx"``) to the module that registers the
    dialect's converters into that frontend's registry; the frontend imports it when it
    imports a model (:func:`frontend_modules`), so the dialect's converters load only
    with the frontend and its optional dependencies.  ``model_attrs`` names the target
    attributes its hooks read that change what a model computes (:attr:`Dialect.model_attrs`)."""
    if name in DIALECTS and not override:
        raise ValueError(f"dialect {name!r} is already registered (pass override=True)")
    for point in hooks:
        if point not in DIALECT_POINTS:
            close = difflib.get_close_matches(point, DIALECT_POINTS, n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"dialect {name!r}: unknown extension point {point!r}{hint}; "
                f"dialects contribute to {', '.join(DIALECT_POINTS)}"
            )
    d = Dialect(name, dict(hooks), doc, dict(frontends or {}), tuple(model_attrs))
    DIALECTS[name] = d
    return d


def model_attr_names() -> set[str]:
    """The target attributes some registered dialect declares change what a model
    computes (:attr:`Dialect.model_attrs`)."""
    load_compiler()
    return {a for d in DIALECTS.values() for a in d.model_attrs}


def model_target_attrs(target: Any) -> dict[str, Any]:
    """The attributes of ``target`` that some registered dialect declares change what a
    model computes (``{"weight_quant": "int4-g32"}``): a build records them beside the
    graph it keeps, so that a rebuild of that graph computes the same model."""
    names = model_attr_names()
    return {k: v for k, v in target.attrs.items() if k in names and v not in (None, "")}


def frontend_modules(frontend: str) -> list[str]:
    """The converter modules the registered dialects give for ``frontend``."""
    load_compiler()
    return [DIALECTS[n].frontends[frontend] for n in sorted(DIALECTS)
            if frontend in DIALECTS[n].frontends]


def load_frontend_converters(frontend: str) -> None:
    """Import every registered dialect's converter module for ``frontend`` (each once);
    a frontend calls this before it converts a model."""
    for module in frontend_modules(frontend):
        importlib.import_module(module)


ENTRY_POINT_GROUP = "plait.dialects"
"""Distributions add dialects of their own with an entry point of this group whose
value is the dialect's package (``mydialect = "mypkg.mydialect"``)."""


def load_dialects() -> list[str]:
    """Import every dialect: the packages in ``plait/dialects/`` and those named by
    entry points of :data:`ENTRY_POINT_GROUP`.  Importing a dialect package registers
    its ops, passes and hooks (``import plait`` calls this, so no part of plait names a
    dialect).  Returns the imported package names.  A third-party dialect that fails to
    import is skipped with a warning naming it."""
    names = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if m.ispkg]
    for name in names:
        importlib.import_module(name)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.value)
        except Exception as e:  # a broken plugin must not break plait
            warnings.warn(f"dialect {ep.name!r} ({ep.value}, entry point group "
                          f"{ENTRY_POINT_GROUP!r}) failed to import: {e}", stacklevel=2)
            continue
        names.append(ep.value)
    return names


def dialect_passes(point: str, target: Any) -> list[Any]:
    """The passes every registered dialect contributes at ``point``, by dialect name."""
    load_compiler()
    out: list[Any] = []
    for name in sorted(DIALECTS):
        out.extend(DIALECTS[name].hook_passes(point, target))
    return out
