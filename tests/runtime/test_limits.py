"""plait.runtime.limits: the budget's defaults, the environment, use_limits blocks, messages."""

from __future__ import annotations

import pytest

import plait
from plait.runtime.limits import LimitExceeded, Limits, check_limit, current_limits, limit_value


def test_defaults_environment_and_blocks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PLAIT_MAX_OUTPUTS", raising=False)
    assert current_limits() == Limits()
    assert limit_value("max_outputs") == 65_536
    monkeypatch.setenv("PLAIT_MAX_OUTPUTS", "100")
    assert current_limits().max_outputs == 100 == limit_value("max_outputs")
    with plait.use_limits(max_outputs=7) as inside:
        assert inside.max_outputs == 7 == limit_value("max_outputs")
        with plait.use_limits(max_outputs=None):
            assert limit_value("max_outputs") is None
            check_limit("max_outputs", 10**12, "anything")   # no limit: no error
        assert limit_value("max_outputs") == 7
    assert limit_value("max_outputs") == 100
    monkeypatch.setenv("PLAIT_MAX_OUTPUTS", "0")
    assert current_limits().max_outputs is None


def test_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(TypeError, match="unknown limit.*max_outputs"):
        with plait.use_limits(max_output=3):
            pass
    with pytest.raises(ValueError, match="positive integer"):
        with plait.use_limits(max_outputs=-1):
            pass
    monkeypatch.setenv("PLAIT_MAX_TENSOR_BYTES", "lots")
    with pytest.raises(ValueError, match="PLAIT_MAX_TENSOR_BYTES='lots' is not an integer"):
        current_limits()


def test_the_message_names_the_limit_and_how_to_raise_it():
    with plait.use_limits(max_tensor_bytes=1 << 20):
        with pytest.raises(LimitExceeded) as info:
            check_limit("max_tensor_bytes", 3 << 30, "a tensor needs")
    e = info.value
    assert (e.limit, e.requested, e.allowed) == ("max_tensor_bytes", 3 << 30, 1 << 20)
    msg = str(e)
    assert "a tensor needs: 3,221,225,472 bytes (3.0 GiB) exceeds the limit max_tensor_bytes" \
        in msg
    assert "plait.use_limits(max_tensor_bytes=...)" in msg and "PLAIT_MAX_TENSOR_BYTES" in msg
