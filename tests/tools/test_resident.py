"""The resident-memory watch behind ``plait report``'s memory column and peak
(plait/tools/resident.py): it sees a 64 MiB buffer come and go, and the peak it
reports is the pipeline's own even when the process was larger before."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from plait.tools.resident import ResidentWatch, status_mib

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or
                                status_mib("VmRSS") is None, reason="needs Linux /proc")

MIB = 2**20


def test_the_watch_sees_a_buffer_come_and_go() -> None:
    before = np.ones(96 * MIB, np.uint8)  # the process is larger before the watch starts
    del before
    watch = ResidentWatch()
    watch.start()
    if not watch.peak_known:
        pytest.skip("this kernel does not allow resetting VmHWM")
    buf = np.ones(64 * MIB, np.uint8)  # touched: resident
    grown = watch.now()
    assert grown is not None and grown >= 60
    del buf
    after = watch.now()
    assert after is not None and after < grown - 50  # numpy returned it (mmap'd)
    peak = watch.peak()
    assert peak is not None and 60 <= peak < 90  # this buffer, not the 96 MiB one before
