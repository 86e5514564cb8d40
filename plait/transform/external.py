"""External functions: graph functions owned by an external codegen (``compiler="x"``).

Function-level passes skip them unless enabled for their codegen, in one of three ways
(all are combined):

* the pass instance: ``MyPass(codegens=["x"])`` (or ``my_pass.with_params(codegens=["x"])``);
* the pass context: ``config={"transform.external_passes": {"x": ["MyPass"]}}``
  (``"*"`` enables every function pass);
* the codegen's registration: ``register_external_passes("x", ["MyPass"])``.

When a codegen runs, :func:`extract_external` takes its functions out into an
IRModule of their own, without the attribute, so any ordinary pass runs on them there;
:func:`merge_external` puts the result back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..ir.expr import BaseFunc
from ..ir.module import IRModule

if TYPE_CHECKING:
    from .context import PassContext
    from .pass_base import Pass

COMPILER_ATTR = "compiler"

_REGISTERED: dict[str, set[str]] = {}
"""codegen -> pass names enabled for its functions by the codegen's registration."""


def register_external_passes(codegen: str, pass_names: Iterable[str]) -> None:
    """Enable function passes ``pass_names`` (or ``"*"``) on functions of ``codegen``
    by default (a codegen calls this when it registers)."""
    if isinstance(pass_names, str):
        pass_names = [pass_names]
    _REGISTERED.setdefault(codegen, set()).update(pass_names)


def unregister_external_passes(codegen: str) -> None:
    """Forget the defaults registered for ``codegen``."""
    _REGISTERED.pop(codegen, None)


def enabled_codegens(pass_: Pass, ctx: PassContext) -> frozenset[str]:
    """The codegens whose functions ``pass_`` transforms under ``ctx``."""
    name = pass_.info.name
    out = set(getattr(pass_, "codegens", ()))
    for codegen, names in ctx.get_config("transform.external_passes").items():
        if name in names or "*" in names:
            out.add(codegen)
    for codegen, names in _REGISTERED.items():
        if name in names or "*" in names:
            out.add(codegen)
    return frozenset(out)


def skips_external(pass_: Pass, ctx: PassContext) -> Callable[[BaseFunc], bool]:
    """The predicate a module pass gives its function walk: true for a function that
    belongs to an external codegen (``compiler=``) that ``pass_`` is not enabled for
    under ``ctx`` (:func:`enabled_codegens`)."""
    enabled = enabled_codegens(pass_, ctx)

    def skip(f: BaseFunc) -> bool:
        compiler = f.attrs.get(COMPILER_ATTR)
        return bool(compiler) and compiler not in enabled

    return skip


def external_codegens(mod: IRModule) -> list[str]:
    """The codegens that own functions of ``mod``, sorted."""
    return sorted({
        f.attrs[COMPILER_ATTR] for _, f in mod.items() if COMPILER_ATTR in f.attrs
    })


def extract_external(mod: IRModule, codegen: str) -> IRModule:
    """The functions of ``mod`` owned by ``codegen``, without their ``compiler``
    attribute, in a module with ``mod``'s attributes (target, ...).  Its phase is the
    phase of those functions: ``mod``'s, but never past ``optimization`` — the host's
    lowering leaves external functions in their graph form."""
    funcs: dict[str, BaseFunc] = {}
    for name, f in mod.items():
        if f.attrs.get(COMPILER_ATTR) == codegen:
            funcs[name] = f.with_attrs(**{COMPILER_ATTR: None})
    attrs = mod.attrs
    if mod.phase in ("lowering", "build"):
        attrs = attrs.set(phase="optimization")
    return IRModule(funcs, attrs)


def merge_external(mod: IRModule, ext_mod: IRModule, codegen: str) -> IRModule:
    """``mod`` with the functions of ``codegen`` replaced by those of ``ext_mod``
    (each given ``compiler=codegen`` again).  Functions of ``codegen`` that ``ext_mod``
    no longer has are removed; new ones are added.  A name ``ext_mod`` shares with a
    function of ``mod`` that belongs to no (or another) codegen is an error."""
    for name in ext_mod:
        if name in mod and mod[name].attrs.get(COMPILER_ATTR) != codegen:
            owner = mod[name].attrs.get(COMPILER_ATTR)
            whose = f"codegen {owner!r}" if owner else "the host module"
            raise ValueError(
                f"merge_external({codegen!r}): function {name!r} of the external module "
                f"clashes with a function of {whose}; rename it in the external module"
            )
    funcs: dict[str, BaseFunc] = {}
    for name, f in mod.items():  # keep the module's order
        if f.attrs.get(COMPILER_ATTR) != codegen:
            funcs[name] = f
        elif name in ext_mod:
            funcs[name] = ext_mod[name].with_attrs(**{COMPILER_ATTR: codegen})
    for name, f in ext_mod.items():
        if name not in funcs:
            funcs[name] = f.with_attrs(**{COMPILER_ATTR: codegen})
    return IRModule(funcs, mod.attrs)


__all__ = [
    "COMPILER_ATTR",
    "enabled_codegens",
    "external_codegens",
    "extract_external",
    "merge_external",
    "register_external_passes",
    "unregister_external_passes",
]
