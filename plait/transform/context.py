"""PassContext: the settings every pass runs under, and the configuration registry.

    with PassContext(opt_level=3, disabled=["FoldConstant"],
                     config={"transform.reproducer_dir": "/tmp/repro"},
                     instruments=[PassTiming()]):
        mod = pipeline(mod)

* ``opt_level``: a pass runs only if its ``opt_level`` is at most this (default 2),
  unless it is ``required``.
* ``required`` / ``disabled``: pass names forced on / off.  A disabled pass is skipped
  whether it runs inside a :class:`~plait.transform.Sequential` or is called directly;
  the skip is logged (logger ``plait.transform``) and reported to instruments
  (``run_skipped_pass``), so it is never a silent surprise.
* ``config``: keys registered with :func:`register_config` (type, default, doc).  An
  unknown key is an error listing the close matches; a value of the wrong type is an
  error naming the expected type.
* ``instruments``: :class:`~plait.transform.PassInstrument` objects called around
  every pass.

Contexts nest and are thread-local: ``PassContext.current()`` is the innermost context
entered on this thread (a default context when none is).  A nested context *refines*
the enclosing one unless created with ``inherit=False``: unset fields (``None``) are
inherited, config keys are merged (inner wins), instruments are appended to the outer
ones, and names are added to ``disabled``/``required`` (a name the inner context
requires is no longer disabled, and the other way round).
"""

from __future__ import annotations

import difflib
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .instruments import PassInstrument
    from .pass_base import PassInfo

DEFAULT_OPT_LEVEL = 2


@dataclass(frozen=True)
class ConfigOption:
    """A registered configuration key."""

    key: str
    type: type | tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[Any], Any] | None = None
    module: str = ""
    """The module that registered the key (docs list plait's own keys)."""

    @property
    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return " | ".join("None" if t is type(None) else t.__name__ for t in types)

    def validate(self, value: Any) -> Any:
        """``value`` checked (and normalized by ``check``) or a :class:`ConfigError`."""
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        ok = isinstance(value, types)
        if isinstance(value, bool) and bool not in types:
            ok = False  # True is an int in Python, but not an int option
        if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ConfigError(
                f"config {self.key!r} must be {self.type_name}, got {type(value).__name__} "
                f"{value!r} ({self.doc})"
            )
        if self.check is not None:
            try:
                value = self.check(value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"config {self.key!r}: {e}") from None
        return value


_CONFIG: dict[str, ConfigOption] = {}


def register_config(
    key: str,
    type: type | tuple[type, ...],
    default: Any,
    doc: str,
    *,
    check: Callable[[Any], Any] | None = None,
    module: str | None = None,
) -> ConfigOption:
    """Register configuration key ``key`` (namespaced, e.g. ``"fold.max_size"``) with
    its type (or tuple of types), default and one line of documentation.  ``check``
    may validate deeper and return a normalized value.  ``module`` is who registers it
    (default: the caller's module).  Re-registering a key with the same type and
    default is harmless; anything else is an error."""
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__", "")
    opt = ConfigOption(key, type, default, doc, check, module)
    old = _CONFIG.get(key)
    if old is not None and (old.type != opt.type or old.default != opt.default):
        raise ValueError(f"config key {key!r} is already registered as {old.type_name} "
                         f"with default {old.default!r}")
    if default is not None:
        opt.validate(default)
    _CONFIG[key] = opt
    return opt


def config_options() -> list[ConfigOption]:
    """Every registered configuration key, sorted."""
    return [_CONFIG[k] for k in sorted(_CONFIG)]


def _option(key: str) -> ConfigOption:
    opt = _CONFIG.get(key)
    if opt is None:
        close = difflib.get_close_matches(key, list(_CONFIG), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        known = ", ".join(sorted(_CONFIG)) or "none"
        raise ConfigError(
            f"unknown config key {key!r}{hint} (registered keys: {known}; "
            "new keys are added with plait.transform.register_config)"
        )
    return opt


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[PassContext] = []
        self.default: PassContext | None = None


_STATE = _State()


class PassContext:
    """The settings passes run under; see the module docstring."""

    def __init__(
        self,
        opt_level: int | None = None,
        required: Iterable[str] | None = None,
        disabled: Iterable[str] | None = None,
        config: Mapping[str, Any] | None = None,
        instruments: Iterable[PassInstrument] | None = None,
        *,
        inherit: bool = True,
    ) -> None:
        if opt_level is not None and (not isinstance(opt_level, int) or isinstance(
                opt_level, bool) or not 0 <= opt_level <= 4):
            raise ConfigError(f"opt_level must be an int from 0 to 4, got {opt_level!r}")
        self._own_opt_level = opt_level
        self._own_required = _names(required, "required")
        self._own_disabled = _names(disabled, "disabled")
        both = self._own_required & self._own_disabled
        if both:
            raise ConfigError(
                f"pass(es) {', '.join(sorted(both))} are both required and disabled; "
                "keep each name in one list"
            )
        self._own_config = {k: _option(k).validate(v) for k, v in (config or {}).items()}
        self._own_instruments = tuple(instruments or ())
        for inst in self._own_instruments:
            if not hasattr(inst, "run_before_pass"):
                raise ConfigError(f"{inst!r} is not a PassInstrument")
        self.inherit = inherit
        self._entered = False
        self._resolve(None)

    # -------------------------------------------------------------- resolution
    def _resolve(self, parent: PassContext | None) -> None:
        if parent is None:
            self.opt_level = (self._own_opt_level if self._own_opt_level is not None
                              else DEFAULT_OPT_LEVEL)
            self.required = self._own_required
            self.disabled = self._own_disabled
            config = dict(self._own_config)
            self.instruments = self._own_instruments
        else:
            self.opt_level = (self._own_opt_level if self._own_opt_level is not None
                              else parent.opt_level)
            self.required = (parent.required - self._own_disabled) | self._own_required
            self.disabled = (parent.disabled - self._own_required) | self._own_disabled
            config = {**parent._config, **self._own_config}
            self.instruments = parent.instruments + self._own_instruments
        self._config = config
        self.config = MappingProxyType(config)

    # -------------------------------------------------------------- current
    @staticmethod
    def current() -> PassContext:
        """The innermost context entered on this thread (a default one if none)."""
        stack = _STATE.stack
        if stack:
            return stack[-1]
        if _STATE.default is None:
            _STATE.default = PassContext()
        return _STATE.default

    def __enter__(self) -> PassContext:
        if self._entered:
            raise ConfigError("this PassContext is already entered; create a new one to nest")
        stack = _STATE.stack
        self._resolve(stack[-1] if stack and self.inherit else None)
        self._entered = True
        stack.append(self)
        entered: list[PassInstrument] = []
        try:
            for inst in self._own_instruments:
                inst.enter_pass_ctx(self)
                entered.append(inst)
        except BaseException:
            stack.pop()
            self._entered = False
            for inst in reversed(entered):
                inst.exit_pass_ctx(self)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = _STATE.stack
        try:
            for inst in reversed(self._own_instruments):
                inst.exit_pass_ctx(self)
        finally:
            if stack and stack[-1] is self:
                stack.pop()
            else:  # pragma: no cover - only if contexts are exited out of order
                if self in stack:
                    stack.remove(self)
            self._entered = False

    # -------------------------------------------------------------- queries
    def get_config(self, key: str) -> Any:
        """The value of config ``key`` in this context (its default if not set)."""
        try:
            return self._config[key]
        except KeyError:
            return _option(key).default

    def skip_reason(self, info: PassInfo) -> str | None:
        """Why a pass with ``info`` does not run in this context, or None if it runs."""
        name = info.name
        if name in self.disabled:
            return "disabled by the pass context"
        if info.opt_level > self.opt_level and name not in self.required:
            return (f"its opt_level {info.opt_level} is above the context's opt_level "
                    f"{self.opt_level} (add it to required to force it)")
        return None

    def with_changes(self, **changes: Any) -> PassContext:
        """A new context like this one (flattened, not inheriting) with some fields
        replaced: ``opt_level``, ``required``, ``disabled``, ``config``, ``instruments``."""
        fields = dict(
            opt_level=self.opt_level,
            required=self.required,
            disabled=self.disabled,
            config=dict(self._config),
            instruments=self.instruments,
        )
        fields.update(changes)
        return PassContext(**fields, inherit=False)

    def __repr__(self) -> str:
        parts = [f"opt_level={self.opt_level}"]
        if self.required:
            parts.append(f"required={sorted(self.required)}")
        if self.disabled:
            parts.append(f"disabled={sorted(self.disabled)}")
        if self._config:
            parts.append(f"config={self._config}")
        if self.instruments:
            parts.append(f"instruments={[type(i).__name__ for i in self.instruments]}")
        return f"PassContext({', '.join(parts)})"


def _names(names: Iterable[str] | None, what: str) -> frozenset[str]:
    if names is None:
        return frozenset()
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out = []
    for n in names:
        if not isinstance(n, str):
            raise ConfigError(f"{what} must list pass names (strings), got {n!r}")
        out.append(n)
    return frozenset(out)


# ------------------------------------------------------------------ the infrastructure's keys


def _check_external_passes(value: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for codegen, names in value.items():
        if not isinstance(codegen, str):
            raise TypeError(f"codegen names must be strings, got {codegen!r}")
        if isinstance(names, str):
            names = [names]
        names = tuple(names)
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"the passes enabled for codegen {codegen!r} must be pass names")
        out[codegen] = names
    return out


register_config(
    "transform.reproducer_dir",
    (str, type(None)),
    None,
    "directory where a failing pass writes a reproducer (its input module and the pass)",
)
register_config(
    "transform.external_passes",
    dict,
    {},
    "codegen name -> pass names (or '*') that also run on functions with compiler=codegen",
    check=_check_external_passes,
)
register_config(
    "transform.check_transitions",
    bool,
    True,
    "check well-formedness for the new phase after every transition pass",
)


__all__ = [
    "DEFAULT_OPT_LEVEL",
    "ConfigOption",
    "PassContext",
    "config_options",
    "register_config",
]
