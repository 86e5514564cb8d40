"""The resident memory of this process while a pipeline runs (Linux ``/proc``).

``VmRSS`` is what the process holds now and ``VmHWM`` its peak; writing ``5`` to
``/proc/self/clear_refs`` resets the peak to the current size (Linux 4.0+), so the peak
of one pipeline is measured even when the process was larger before (an ONNX file
parsed, an earlier build).  Elsewhere, or when the reset is not allowed, the figures
are None and the report says so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass

_STATUS = "/proc/self/status"


def status_mib(key: str) -> float | None:
    """The ``key`` line (``"VmRSS"``, ``"VmHWM"``) of ``/proc/self/status`` in MiB, or
    None where there is no such file or line."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current resident size; False when the
    system does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class ResidentWatch:
    """Resident memory relative to where :meth:`start` found it, in MiB."""

    base: float | None = None
    peak_known: bool = False

    def start(self) -> None:
        self.peak_known = reset_peak()
        self.base = status_mib("VmRSS")

    def now(self) -> float | None:
        """The growth of the resident memory since :meth:`start` (negative: shrank)."""
        rss = status_mib("VmRSS")
        return None if rss is None or self.base is None else rss - self.base

    def peak(self) -> float | None:
        """The peak resident memory since :meth:`start`, above where it started."""
        hwm = status_mib("VmHWM")
        if hwm is None or self.base is None or not self.peak_known:
            return None
        return hwm - self.base


__all__ = ["ResidentWatch", "reset_peak", "status_mib"]
