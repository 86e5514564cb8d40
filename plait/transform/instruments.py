"""Pass instruments: hooks the pass manager calls around every pass.

An instrument subclasses :class:`PassInstrument` and overrides any of:

* ``enter_pass_ctx(ctx)`` / ``exit_pass_ctx(ctx)``: the context holding it is
  entered / exited;
* ``should_run(mod, info) -> bool``: a veto; returning False skips the pass;
* ``run_before_pass(mod, info)`` / ``run_after_pass(mod, result, info)``: around each
  pass that runs (``mod`` is the input, ``result`` the output);
* ``run_skipped_pass(mod, info, reason)``: a pass was skipped (disabled, opt_level,
  veto);
* ``on_pass_error(mod, info, error)``: a pass (or a check after it) failed.

Hooks run for every pass, a :class:`~plait.transform.Sequential` included
(``info.kind == "sequential"``), so nested pipelines are visible.  The built-in
instruments are :class:`PassTiming`, :class:`PrintIR`, :class:`PrintIfChanged`,
:class:`DumpIR`, :class:`WellFormedCheck` and :class:`ImmutabilityCheck`.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..ir.module import IRModule
from ..ir.structural import structural_equal, structural_hash
from ..ir.well_formed import well_formed
from .errors import ImmutabilityError, PassWellFormedError

if TYPE_CHECKING:
    from .context import PassContext
    from .pass_base import PassInfo


class PassInstrument:
    """Base class of instruments; every hook does nothing by default."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def enter_pass_ctx(self, ctx: PassContext) -> None:
        """The context holding this instrument is entered."""

    def exit_pass_ctx(self, ctx: PassContext) -> None:
        """The context holding this instrument is exited."""

    def should_run(self, mod: IRModule, info: PassInfo) -> bool:
        """Return False to skip the pass (a veto)."""
        return True

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Called before a pass runs on ``mod``."""

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        """Called after a pass turned ``mod`` into ``result``."""

    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None:
        """Called instead of the other hooks when a pass is skipped."""

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        """Called when a pass, or a check right after it, raised ``error``."""


def _name_filter(spec: str | bool | Iterable[str] | None) -> tuple[bool, frozenset[str]]:
    """(all leaf passes?, explicit names) from a pass selection."""
    if spec is True or spec == "*":
        return True, frozenset()
    if not spec:
        return False, frozenset()
    if isinstance(spec, str):
        spec = [s.strip() for s in spec.split(",")]
    return False, frozenset(spec)


def _selected(sel: tuple[bool, frozenset[str]], info: PassInfo) -> bool:
    every, names = sel
    if info.name in names:
        return True
    return every and info.kind != "sequential"


def _text(mod: IRModule) -> str:
    from .replay import module_text

    return module_text(mod)


# ------------------------------------------------------------------ timing


@dataclass
class TimingEntry:
    """The time one pass took; a Sequential's entry has its passes as children."""

    name: str
    kind: str
    seconds: float = 0.0
    children: list[TimingEntry] = field(default_factory=list)
    skipped: str | None = None
    failed: bool = False


class PassTiming(PassInstrument):
    """Times every pass; :meth:`report` prints a tree (Sequential in Sequential nests).

    Skipped passes appear in the report with the reason they were skipped."""

    def __init__(self) -> None:
        self.entries: list[TimingEntry] = []
        self._stack: list[tuple[TimingEntry, float]] = []

    def clear(self) -> None:
        self.entries.clear()
        self._stack.clear()

    def _add(self, entry: TimingEntry) -> None:
        (self._stack[-1][0].children if self._stack else self.entries).append(entry)

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        entry = TimingEntry(info.name, info.kind)
        self._add(entry)
        self._stack.append((entry, time.perf_counter()))

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        entry, t0 = self._stack.pop()
        entry.seconds = time.perf_counter() - t0

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        if self._stack:
            entry, t0 = self._stack.pop()
            entry.seconds = time.perf_counter() - t0
            entry.failed = True

    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None:
        self._add(TimingEntry(info.name, info.kind, skipped=reason))

    @property
    def total(self) -> float:
        """Seconds spent in the outermost passes."""
        return sum(e.seconds for e in self.entries)

    def report(self) -> str:
        """The timing tree as text: name, milliseconds, share of the total."""
        total = self.total
        lines = [f"pass timing: {total * 1e3:.3f} ms total"]
        rows: list[tuple[str, str]] = []
        stack: list[tuple[TimingEntry, int]] = [(e, 1) for e in reversed(self.entries)]
        while stack:
            e, depth = stack.pop()
            label = "  " * depth + e.name
            if e.skipped is not None:
                rows.append((label, f"skipped: {e.skipped}"))
            else:
                share = 100.0 * e.seconds / total if total > 0 else 0.0
                note = "  FAILED" if e.failed else ""
                rows.append((label, f"{e.seconds * 1e3:10.3f} ms {share:6.1f}%{note}"))
            stack.extend((c, depth + 1) for c in reversed(e.children))
        width = max((len(r[0]) for r in rows), default=0) + 2
        lines.extend(f"{label:<{width}}{value}" for label, value in rows)
        return "\n".join(lines)


# ------------------------------------------------------------------ printing


class PrintIR(PassInstrument):
    """Prints the module before and/or after the selected passes.

    ``before`` and ``after`` are pass names (a list or comma-separated text), ``"*"``
    or True for every pass (Sequentials are included only when named)."""

    def __init__(
        self,
        before: str | bool | Iterable[str] | None = None,
        after: str | bool | Iterable[str] | None = "*",
        file: TextIO | None = None,
    ) -> None:
        self._before = _name_filter(before)
        self._after = _name_filter(after)
        self.file = file

    def _print(self, text: str) -> None:
        print(text, file=self.file if self.file is not None else sys.stdout)

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if _selected(self._before, info):
            self._print(f"# IR before pass {info.name!r} (phase {mod.phase})\n{_text(mod)}")

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if _selected(self._after, info):
            self._print(f"# IR after pass {info.name!r} (phase {result.phase})\n{_text(result)}")


class PrintIfChanged(PassInstrument):
    """Prints the module after every pass that changed it (structurally)."""

    def __init__(self, passes: str | bool | Iterable[str] | None = "*",
                 file: TextIO | None = None) -> None:
        self._sel = _name_filter(passes)
        self.file = file

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if not _selected(self._sel, info) or result is mod or structural_equal(mod, result):
            return
        out = self.file if self.file is not None else sys.stdout
        print(f"# IR after pass {info.name!r} changed it (phase {result.phase})\n"
              f"{_text(result)}", file=out)


class DumpIR(PassInstrument):
    """Writes the module to numbered files in ``directory``: ``000_input.py`` (what
    the first pass received), then ``001_<pass>.py`` after each pass, and so on."""

    def __init__(self, directory: str | Path, passes: str | bool | Iterable[str] | None = "*"):
        self.directory = Path(directory)
        self._sel = _name_filter(passes)
        self.counter = 0
        self.files: list[Path] = []

    def _write(self, label: str, mod: IRModule) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        path = self.directory / f"{self.counter:03d}_{safe}.py"
        path.write_text(_text(mod) + "\n")
        self.files.append(path)
        self.counter += 1

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.counter == 0:
            self._write("input", mod)

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if _selected(self._sel, info):
            self._write(info.name, result)


# ------------------------------------------------------------------ checks


class WellFormedCheck(PassInstrument):
    """Checks well-formedness after every pass (and the input of the first one); a
    violation raises :class:`~plait.transform.PassWellFormedError` naming the pass."""

    def __init__(self) -> None:
        self._last_ok: IRModule | None = None

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if mod is self._last_ok:
            return
        violations = well_formed(mod)
        if violations:
            raise PassWellFormedError(
                info.name, mod.phase, violations,
                f"the module given to pass {info.name!r} is already malformed "
                "(the problem comes from before the pipeline)",
            )
        self._last_ok = mod

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if result is self._last_ok or info.kind == "sequential":
            return
        violations = well_formed(result)
        if violations:
            raise PassWellFormedError(
                info.name, result.phase, violations,
                f"after pass {info.name!r} (phase {mod.phase} -> {result.phase})",
            )
        self._last_ok = result


def _fingerprint(mod: IRModule) -> dict[str, Any]:
    fp: dict[str, Any] = {"<module attrs>": structural_hash(mod.attrs)}
    for name, f in mod.items():
        fp[name] = structural_hash(f)
    return fp


class ImmutabilityCheck(PassInstrument):
    """Checks that every pass left its input module unchanged (a structural hash of
    each function and of the module attributes, before and after the pass).  A pass
    that mutated its input raises :class:`~plait.transform.ImmutabilityError`."""

    def __init__(self) -> None:
        self._stack: list[tuple[dict[str, Any], str | None]] = []

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        # With a reproducer directory, keep the input's text: after a mutation the
        # module object no longer shows what the pass received.
        from .context import PassContext

        text = None
        if info.kind != "sequential" and PassContext.current().get_config(
                "transform.reproducer_dir"):
            text = _text(mod)
        self._stack.append((_fingerprint(mod), text))

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        if self._stack:
            self._stack.pop()

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        before, text = self._stack.pop()
        after = _fingerprint(mod)
        if before == after:
            return
        changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
        added = sorted(after.keys() - before.keys())
        removed = sorted(before.keys() - after.keys())
        what = []
        if changed:
            what.append("changed " + ", ".join(map(repr, changed)))
        if added:
            what.append("added " + ", ".join(map(repr, added)))
        if removed:
            what.append("removed " + ", ".join(map(repr, removed)))
        err = ImmutabilityError(
            info.name, mod.phase,
            f"pass {info.name!r} modified the module it was given ({'; '.join(what)}); "
            "IR is immutable: build new nodes (dataclasses.replace, the block builder, "
            "ExprMutator) and return a new module with IRModule.with_function/with_attrs, "
            "and never write into a Constant's array or an attribute mapping",
        )
        err.input_text = text
        raise err


__all__ = [
    "DumpIR",
    "ImmutabilityCheck",
    "PassInstrument",
    "PassTiming",
    "PrintIR",
    "PrintIfChanged",
    "TimingEntry",
    "WellFormedCheck",
]
