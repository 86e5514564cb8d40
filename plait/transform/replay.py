"""Reproducers: a failing pass's input, written so the failure can be rerun alone.

With ``config={"transform.reproducer_dir": "some/dir"}``, a pass that raises (or whose
result fails a check made right after it) writes a directory
``some/dir/NNN_<pass>/`` holding

* ``module.py`` -- the module the pass received, in the text format (loadable with
  ``plait.parse``);
* ``reproducer.json`` -- the pass in the pipeline text format, the context it ran
  under (opt_level, required, disabled, JSON-serializable config), the check that
  failed if any, the enclosing pipeline and the error;
* for a numeric check (:class:`~plait.transform.NumericCheck`), ``numeric.npz`` and
  ``numeric.json``: the inputs, the reference outputs and the tolerance.

``plait.transform.replay(path)`` loads both and reruns the pass, which raises the same
error; once the bug is fixed it returns the resulting module.  A pass that is not
registered under its name is found again through the Python path recorded with it
(``module:qualname``) among the modules already imported, so define passes at module
level, and import their module before replaying.

A reproducer from elsewhere is data, but replaying it runs the recorded pass on the
recorded module: replay never imports a module the reproducer names, never makes
anything but a pass, and reads only the reproducer's own files; the module then goes
through the pass as any module you parse yourself would (docs/reliability.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..ir.module import IRModule
from .errors import ReplayError

if TYPE_CHECKING:
    from .context import PassContext
    from .pass_base import Pass

FORMAT = "plait-reproducer"
VERSION = 1
_SKIPPED_CONFIG = ("transform.reproducer_dir",)


def module_text(mod: IRModule) -> str:
    """``mod`` in the text format."""
    return mod.script()


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _python_path(p: Pass) -> str:
    cls = type(p)
    return f"{cls.__module__}:{cls.__qualname__}"


def write_reproducer(
    directory: str | Path,
    pass_: Pass,
    mod: IRModule,
    ctx: PassContext,
    error: BaseException,
    *,
    function: str | None = None,
    check: str | None = None,
    text: str | None = None,
) -> Path:
    """Write a reproducer of ``pass_`` failing on ``mod`` under ``ctx``; return its
    directory.  ``check`` names the check that failed after the pass, if any
    (``well_formed``, ``transition`` or ``immutability``); ``text`` is the module's
    text saved before the pass ran (a pass that mutated ``mod`` changed what it shows)."""
    from .sequential import running_pipelines

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pass_.info.name)
    n = len([d for d in root.iterdir() if re.match(r"\d{3}_", d.name)])
    while True:
        path = root / f"{n:03d}_{safe}"
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
    (path / "module.py").write_text((text if text is not None else module_text(mod)) + "\n")
    config = {}
    skipped = []
    for k, v in ctx.config.items():
        if k in _SKIPPED_CONFIG:
            continue
        (config.__setitem__(k, v) if _jsonable(v) else skipped.append(k))
    pipelines = running_pipelines()
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "pass": pass_.to_text(),
        "python": _python_path(pass_),
        "phase": mod.phase,
        "function": function,
        "check": check,
        "context": {
            "opt_level": ctx.opt_level,
            "required": sorted(ctx.required),
            "disabled": sorted(set(ctx.disabled) - {pass_.info.name}),
            "config": config,
            "config_not_saved": skipped,
        },
        "pipeline": pipelines[0].to_text() if pipelines else None,
        "module_file": "module.py",
        "error": {
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error),
        },
        "replay": f"python -c \"import plait; plait.transform.replay({str(path)!r})\"",
    }
    (path / "reproducer.json").write_text(json.dumps(meta, indent=2) + "\n")
    return path


def load_reproducer(path: str | Path) -> tuple[IRModule, Pass, dict[str, Any]]:
    """The module, the pass and the metadata of the reproducer at ``path`` (its
    directory or its ``reproducer.json``)."""
    p = Path(path)
    meta_path = p if p.suffix == ".json" else p / "reproducer.json"
    if not meta_path.is_file():
        raise ReplayError(f"no reproducer at {path}: {meta_path} does not exist")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise ReplayError(f"{meta_path} is not valid JSON: {e}") from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ReplayError(f"{meta_path} is not a plait reproducer (version {VERSION})")
    from ..ir.parser import parse

    name = meta.get("module_file")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise ReplayError(f"{meta_path}: module_file must name a file of the reproducer's "
                          f"directory (like 'module.py'), got {name!r}")
    text = (meta_path.parent / name).read_text()
    mod = parse(text)
    if mod.phase != meta["phase"]:
        mod = mod.with_phase(meta["phase"])
    return mod, _load_pass(meta), meta


def _load_pass(meta: dict[str, Any]) -> Pass:
    from .registry import get_pass_class, is_registered
    from .sequential import split_pass_text

    name, params = split_pass_text(meta["pass"])
    if is_registered(name):
        cls: Any = get_pass_class(name)
    else:
        cls = _unregistered_pass(name, str(meta.get("python", "")))
    return cls(**params)


def _unregistered_pass(name: str, python: str) -> type:
    """The class of the unregistered pass ``name`` recorded at ``python``
    (``module:qualname``), looked up among the modules this process has imported: a
    reproducer is data, so replaying one never imports a module it names (that would
    run code from wherever the import finds it, the working directory included) and
    never instantiates anything but a pass."""
    import sys

    from .pass_base import Pass

    module, _, qualname = python.partition(":")
    if "<locals>" in qualname or not module:
        raise ReplayError(
            f"pass {name!r} is not registered and was defined inside a function "
            f"({module}:{qualname}); define it at module level (or register it) and "
            "import its module before replay"
        )
    obj: Any = sys.modules.get(module)
    if obj is None:
        raise ReplayError(f"pass {name!r} is not registered and its module {module!r} is "
                          f"not imported; import {module} (or register the pass) before "
                          "replay: a reproducer never imports the modules it names")
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    cls = obj if isinstance(obj, type) else type(obj)
    if obj is None or not issubclass(cls, Pass):
        raise ReplayError(f"cannot find pass {name!r} at {module}:{qualname}: "
                          + ("nothing there" if obj is None else
                             f"it is a {cls.__name__}, not a pass"))
    return cls


def replay(path: str | Path, *, instruments: list[Any] | None = None) -> IRModule:
    """Rerun the reproducer at ``path``: the recorded pass on the recorded module,
    under the recorded context (plus ``instruments``).  Raises the error the pass
    raises -- the original one while the bug is there -- or returns the result."""
    from .context import PassContext
    from .instruments import ImmutabilityCheck, WellFormedCheck

    mod, pass_, meta = load_reproducer(path)
    c = meta["context"]
    insts = list(instruments or [])
    if meta.get("check") == "well_formed":
        insts.append(WellFormedCheck())
    elif meta.get("check") == "immutability":
        insts.append(ImmutabilityCheck())
    elif meta.get("check") == "numeric":
        from .numeric_check import NumericCheck

        insts.append(NumericCheck.from_reproducer(Path(path)))
    ctx = PassContext(
        opt_level=c["opt_level"],
        required=c["required"],
        disabled=c["disabled"],
        config=c["config"],
        instruments=insts,
        inherit=False,
    )
    with ctx:
        return pass_(mod)


__all__ = ["load_reproducer", "module_text", "replay", "write_reproducer"]
