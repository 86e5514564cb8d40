"""A progress bar on stderr for compiles that take longer than a second.

:class:`ProgressBar` is a pass instrument: one step per leaf pass, the pass's name as
the description.  It draws with ``tqdm`` (the ``cli`` extra) only when stderr is a
terminal and the compile has run for a second; without ``tqdm`` it draws nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..ir.module import IRModule
from ..transform.context import PassContext
from ..transform.instruments import PassInstrument
from ..transform.pass_base import PassInfo

DELAY = 1.0
"""Seconds a compile runs before its bar appears."""


def _tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # the cli extra is not installed: no bar
        return None
    return tqdm


class ProgressBar(PassInstrument):
    """Shows the passes of a pipeline going by (see the module docstring)."""

    def __init__(self, total: int | None = None, *, desc: str = "compile",
                 file: TextIO | None = None, delay: float = DELAY,
                 force: bool = False) -> None:
        self.total = total
        self.desc = desc
        self.file = file
        self.delay = delay
        self.force = force
        self.bar: Any = None
        self.steps = 0

    def enter_pass_ctx(self, ctx: PassContext) -> None:
        tqdm = _tqdm()
        if tqdm is None:
            return
        out = self.file if self.file is not None else sys.stderr
        shown = self.force or (hasattr(out, "isatty") and out.isatty())
        self.bar = tqdm(total=self.total, desc=self.desc, file=out, delay=self.delay,
                        disable=not shown, unit="pass", leave=False, dynamic_ncols=True)

    def exit_pass_ctx(self, ctx: PassContext) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.bar is not None and info.kind != "sequential":
            self.bar.set_description_str(f"{self.desc}: {info.name}", refresh=False)

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        if info.kind != "sequential":
            self.steps += 1
            if self.bar is not None:
                self.bar.update(1)

    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None:
        self.run_after_pass(mod, mod, info)


@contextmanager
def progress(total: int | None, desc: str = "compile") -> Iterator[ProgressBar]:
    """Run the body under a context with a :class:`ProgressBar` of ``total`` steps."""
    bar = ProgressBar(total, desc=desc)
    with PassContext(instruments=[bar]):
        yield bar


__all__ = ["DELAY", "ProgressBar", "progress"]
