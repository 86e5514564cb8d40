"""A progress bar on stderr for compiles that take longer than a second.

:class:`ProgressBar` is a pass instrument: one step per leaf pass, the pass's name as
the description.  While the C compiler runs (most of a cold ``c`` build, inside the one
pass ``c.CompileKernels``) the description counts the object files compiled and says
when the library is linked (:func:`plait.codegen.c.compiler.compile_events`), and the
bar is redrawn twice a second so its elapsed time moves during a long compiler run.  It
draws with ``tqdm`` (the ``cli`` extra) only when stderr is a terminal and the compile
has run for a second; without ``tqdm`` it draws nothing.
"""

from __future__ import annotations

import sys
import threading
import time
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
        self.current = ""
        self.compile_steps: list[tuple[str, int, int]] = []
        """The compiler's events seen (``("objects", done, total)``, ``("library", ...)``)."""
        self._events: Any = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._t0 = 0.0

    def enter_pass_ctx(self, ctx: PassContext) -> None:
        tqdm = _tqdm()
        if tqdm is None:
            return
        out = self.file if self.file is not None else sys.stderr
        shown = self.force or (hasattr(out, "isatty") and out.isatty())
        self.bar = tqdm(total=self.total, desc=self.desc, file=out, delay=self.delay,
                        disable=not shown, unit="pass", leave=False, dynamic_ncols=True)
        self._t0 = time.monotonic()
        if shown:
            from ..codegen.c.compiler import compile_events

            self._events = compile_events(self._on_compile)
            self._events.__enter__()

    def exit_pass_ctx(self, ctx: PassContext) -> None:
        self._stop_ticker()
        if self._events is not None:
            self._events.__exit__(None, None, None)
            self._events = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _on_compile(self, step: str, done: int, total: int) -> None:
        self.compile_steps.append((step, done, total))
        if self.bar is None:
            return
        what = (f"C compiler: object files {done}/{total}" if step == "objects" else
                "C compiler: the library" if done == 0 else "C compiler: done")
        self.bar.set_description_str(f"{self.desc}: {self.current}, {what}", refresh=False)
        self._refresh()
        if self._ticker is None and not (step == "library" and done):
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        elif step == "library" and done:
            self._stop_ticker()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._refresh()

    def _refresh(self) -> None:
        """Redraw, once the compile has run for ``delay`` seconds (tqdm's own delay
        applies to updates only)."""
        bar = self.bar
        if bar is not None and time.monotonic() - self._t0 >= self.delay:
            bar.refresh()

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if info.kind != "sequential":
            self.current = info.name
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
