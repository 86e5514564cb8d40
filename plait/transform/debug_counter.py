"""Debug counters: limit, site by site, the rewrites a pass makes (MLIR's ``-debug-counter``).

A rewriting pass asks once per site whether to rewrite it::

    from plait.transform.debug_counter import allow_rewrite

    if not allow_rewrite(binding.var):      # the site: a variable, a name, a callable
        return call                         # keep the original

With no counter configured, :func:`allow_rewrite` is one thread-local read and returns
True.  With one, the pass manager tells the counter which pass runs, and the counter
numbers that pass's sites and allows those inside its limits::

    with PassContext(config={"debug_counter": {"FoldConstant": {"skip": 2, "count": 1}}}):
        mod = pipeline(mod)          # FoldConstant rewrites only its third site

The config value maps a key to a limit:

* the key is a pass name (its sites are numbered across all its runs in the
  pipeline), ``"Name@k"`` (only the k-th run of pass ``Name``, 1-based) or ``"*"``
  (every pass without a key of its own);
* the limit is an int ``n`` (the first ``n`` sites), ``None`` (no limit: count only)
  or a dict ``{"skip": s, "count": c}``: site ``i`` (0-based) is rewritten when
  ``s <= i`` and (``c < 0`` or ``i < s + c``).

The value becomes a :class:`DebugCounter` (give one to keep a handle on it), which
records every site it saw (:attr:`DebugCounter.sites`): the pass, its run, the site's
number and description and whether it was rewritten.  ``plait bisect`` uses this to
find the first rewrite that breaks a model.  A declined site must leave a correct
module: a pass that cannot skip a site (``LegalizeOps`` must lower every op) falls
back to a plain, trusted rewrite there (``LegalizeOps``: the op's numpy library
function).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .context import register_config


@dataclass(frozen=True)
class Limit:
    """Which sites of a key are rewritten: ``skip`` first, then ``count`` (-1: all)."""

    skip: int = 0
    count: int = -1

    def allows(self, index: int) -> bool:
        return index >= self.skip and (self.count < 0 or index < self.skip + self.count)

    def to_json(self) -> dict[str, int]:
        return {"skip": self.skip, "count": self.count}


@dataclass(frozen=True)
class Site:
    """A rewrite site a pass asked about: ``pass_name``, its ``run`` (1-based),
    ``index`` (0-based, among the sites of the key that limited it; among the
    pass's sites over all its runs when no key did), the site's ``description`` and
    whether it was ``allowed``."""

    pass_name: str
    run: int
    index: int
    index_in_run: int
    description: str
    allowed: bool

    def __str__(self) -> str:
        state = "rewritten" if self.allowed else "skipped"
        return (f"{self.pass_name} (run {self.run}) site #{self.index + 1}: "
                f"{self.description} [{state}]")


def _limit(key: str, value: Any) -> Limit:
    if value is None:
        return Limit()
    if isinstance(value, Limit):
        return value
    if isinstance(value, bool) or not isinstance(value, int | Mapping):
        raise TypeError(f"debug_counter[{key!r}] must be an int (the number of sites to "
                        "rewrite), None or a dict {'skip': s, 'count': c}, got "
                        f"{value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"debug_counter[{key!r}] = {value}: the number of sites must "
                             "not be negative")
        return Limit(0, value)
    unknown = set(value) - {"skip", "count"}
    if unknown:
        raise ValueError(f"debug_counter[{key!r}] has unknown field(s) "
                         f"{', '.join(sorted(map(str, unknown)))}; the fields are "
                         "'skip' and 'count'")
    skip, count = value.get("skip", 0), value.get("count", -1)
    for name, v in (("skip", skip), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"debug_counter[{key!r}][{name!r}] must be an int, got {v!r}")
    if skip < 0:
        raise ValueError(f"debug_counter[{key!r}]['skip'] must not be negative")
    return Limit(skip, count)


class _Frame:
    """One running pass: its counter, name and run number."""

    __slots__ = ("counter", "name", "run", "in_run", "prev")

    def __init__(self, counter: DebugCounter, name: str, run: int, prev: _Frame | None):
        self.counter = counter
        self.name = name
        self.run = run
        self.in_run = 0
        self.prev = prev

    def allow(self, what: Any) -> bool:
        return self.counter._allow(self, what)


class DebugCounter(dict):
    """The limits of a ``debug_counter`` config (a dict: key -> limit as given) and
    the sites seen under it.  Shared by nested contexts, so the numbering runs over
    the whole pipeline; :meth:`reset` starts it again."""

    def __init__(self, spec: Mapping[str, Any] | None = None) -> None:
        spec = dict(spec or {})
        limits: dict[str, Limit] = {}
        for key, value in spec.items():
            if not isinstance(key, str) or not key:
                raise TypeError(f"debug_counter keys are pass names, 'Name@k' or '*', got "
                                f"{key!r}")
            if "@" in key:
                name, _, run = key.rpartition("@")
                if not name or not run.isdigit() or int(run) < 1:
                    raise ValueError(f"debug_counter key {key!r}: write 'Name@k' with k the "
                                     "run of the pass, counted from 1")
            limits[key] = _limit(key, value)
        super().__init__({k: (v.to_json() if isinstance(v, Limit) else v)
                          for k, v in spec.items()})
        self.limits = limits
        self.sites: list[Site] = []
        self.runs: dict[str, int] = {}
        self._by_key: dict[str, int] = {}

    def reset(self) -> None:
        """Forget the sites and runs seen (the limits stay)."""
        self.sites.clear()
        self.runs.clear()
        self._by_key.clear()

    # ------------------------------------------------------------ the pass manager's side
    def begin(self, pass_name: str) -> _Frame:
        """A pass named ``pass_name`` starts; its sites are counted until :meth:`end`."""
        run = self.runs.get(pass_name, 0) + 1
        self.runs[pass_name] = run
        frame = _Frame(self, pass_name, run, _ACTIVE.frame)
        _ACTIVE.frame = frame
        return frame

    def end(self, frame: _Frame) -> None:
        """The pass of ``frame`` finished (or failed)."""
        _ACTIVE.frame = frame.prev

    def _allow(self, frame: _Frame, what: Any) -> bool:
        key = f"{frame.name}@{frame.run}"
        limit = self.limits.get(key)
        if limit is None:
            key = frame.name
            limit = self.limits.get(key)
            if limit is None:
                limit = self.limits.get("*")
        index = self._by_key.get(key, 0)
        self._by_key[key] = index + 1
        allowed = limit is None or limit.allows(index)
        self.sites.append(Site(frame.name, frame.run, index, frame.in_run,
                               describe_site(what), allowed))
        frame.in_run += 1
        return allowed

    # ------------------------------------------------------------ queries
    def sites_of(self, pass_name: str, run: int | None = None) -> list[Site]:
        """The sites of ``pass_name`` seen so far (of its ``run`` when given)."""
        return [s for s in self.sites
                if s.pass_name == pass_name and (run is None or s.run == run)]

    def counts(self) -> dict[str, int]:
        """The number of sites seen per pass name."""
        out: dict[str, int] = {}
        for s in self.sites:
            out[s.pass_name] = out.get(s.pass_name, 0) + 1
        return out

    def __repr__(self) -> str:
        return f"DebugCounter({dict(self)!r}, {len(self.sites)} sites seen)"


def describe_site(what: Any) -> str:
    """A short description of a rewrite site: a string as is, a callable's result, a
    variable or binding by name, a call by its callee."""
    if what is None:
        return "site"
    if isinstance(what, str):
        return what
    name = getattr(what, "name_hint", None)
    if isinstance(name, str):
        return f"binding {name!r}"
    var = getattr(what, "var", None)
    if var is not None and isinstance(getattr(var, "name_hint", None), str):
        return f"binding {var.name_hint!r}"
    if callable(what):
        try:
            return str(what())
        except Exception as e:  # a description must never break the pass
            return f"<site description failed: {type(e).__name__}: {e}>"
    op = getattr(what, "op", None)
    if op is not None:
        return f"call of {getattr(op, 'name', None) or getattr(op, 'name_hint', op)}"
    return type(what).__name__


class _Active(threading.local):
    frame: _Frame | None = None


_ACTIVE = _Active()


def allow_rewrite(what: Any = None) -> bool:
    """Whether the running pass may rewrite the site ``what`` (see the module
    docstring).  True when no debug counter is configured."""
    frame = _ACTIVE.frame
    if frame is None:
        return True
    return frame.allow(what)


def counting() -> bool:
    """Whether a debug counter is configured for the running pass (when not, every
    :func:`allow_rewrite` is True: a pass may skip describing its sites)."""
    return _ACTIVE.frame is not None


def _check(value: Any) -> DebugCounter | None:
    if value is None or isinstance(value, DebugCounter):
        return value
    return DebugCounter(value)


register_config(
    "debug_counter",
    (dict, type(None)),
    None,
    "pass name ('Name@k' for its k-th run, '*' for all) -> the sites it may rewrite: "
    "n (the first n), None (all, counted) or {'skip': s, 'count': c}",
    check=_check,
)


__all__ = ["DebugCounter", "Limit", "Site", "allow_rewrite", "counting", "describe_site"]
