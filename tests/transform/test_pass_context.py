"""PassContext: nesting, threads, opt_level / required / disabled, config."""

from __future__ import annotations

import logging
import threading

import pytest
from transform_testlib import BASIC, P, recorder, relu_to_abs

from plait.transform import (
    ConfigError,
    PassContext,
    PassInstrument,
    Sequential,
    register_config,
)

register_config("test.knob", int, 3, "a knob for the tests")
register_config("test.ratio", float, 0.5, "a ratio for the tests")


def test_defaults_and_nesting() -> None:
    outer_inst, inner_inst = PassInstrument(), PassInstrument()
    assert PassContext.current().opt_level == 2
    with PassContext(opt_level=3, disabled=["A", "B"], config={"test.knob": 5},
                     instruments=[outer_inst]) as outer:
        assert PassContext.current() is outer
        with PassContext(required=["A"], disabled=["C"], config={"test.ratio": 1},
                         instruments=[inner_inst]) as inner:
            assert PassContext.current() is inner
            assert inner.opt_level == 3
            assert inner.disabled == {"B", "C"}
            assert inner.required == {"A"}
            assert inner.get_config("test.knob") == 5
            assert inner.get_config("test.ratio") == 1
            assert inner.instruments == (outer_inst, inner_inst)
            with PassContext(opt_level=0, inherit=False) as clean:
                assert clean.disabled == frozenset() and clean.instruments == ()
                assert clean.get_config("test.knob") == 3
        assert PassContext.current() is outer
    assert PassContext.current().opt_level == 2


def test_contexts_are_thread_local() -> None:
    seen: list[int] = []
    with PassContext(opt_level=4):
        t = threading.Thread(target=lambda: seen.append(PassContext.current().opt_level))
        t.start()
        t.join()
        assert PassContext.current().opt_level == 4
    assert seen == [2]


def test_a_context_is_entered_once() -> None:
    ctx = PassContext()
    with ctx:
        with pytest.raises(ConfigError, match="already entered"):
            with ctx:
                pass


def test_opt_level_applies_directly_and_in_a_pipeline() -> None:
    log: list[str] = []
    heavy = recorder("test.Heavy", log, opt_level=3)
    mod = P(BASIC)
    assert heavy(mod) is mod and log == []
    assert Sequential([heavy])(mod) is mod and log == []
    with PassContext(opt_level=3):
        heavy(mod)
        Sequential([heavy])(mod)
    assert log == ["test.Heavy", "test.Heavy"]
    with PassContext(required=["test.Heavy"]):
        heavy(mod)
    assert len(log) == 3


def test_disabled_applies_directly_and_in_a_pipeline(caplog: pytest.LogCaptureFixture) -> None:
    skipped: list[tuple[str, str]] = []

    class Watch(PassInstrument):
        def run_skipped_pass(self, mod, info, reason):  # noqa: ANN001, ANN201
            skipped.append((info.name, reason))

    mod = P(BASIC)
    with PassContext(disabled=["test.ReluToAbs"], instruments=[Watch()]):
        with caplog.at_level(logging.INFO, logger="plait.transform"):
            assert relu_to_abs(mod) is mod  # called directly: unchanged
            assert Sequential([relu_to_abs])(mod) is mod
    assert skipped == [("test.ReluToAbs", "disabled by the pass context")] * 2
    levels = [r.levelname for r in caplog.records if "test.ReluToAbs" in r.getMessage()]
    assert levels == ["WARNING", "INFO"]  # a direct call warns; inside a pipeline it informs
    assert "pass 'test.ReluToAbs' skipped: disabled by the pass context" in caplog.text


def test_a_disabled_pipeline_skips_its_passes() -> None:
    log: list[str] = []
    seq = Sequential([Sequential([recorder("test.X", log)], name="extra")])
    with PassContext(disabled=["extra"]):
        plan = seq.validate("optimization")
        assert plan[0].skip == "its pipeline 'extra' is skipped (disabled by the pass context)"
        seq(P(BASIC))
    assert log == []


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown config key 'test.knbo'; did you mean "
                                          "'test.knob'"):
        PassContext(config={"test.knbo": 1})
    with pytest.raises(ConfigError, match="'test.knob' must be int, got str '4'"):
        PassContext(config={"test.knob": "4"})
    with pytest.raises(ConfigError, match="must be int, got bool"):
        PassContext(config={"test.knob": True})
    assert PassContext(config={"test.ratio": 2}).get_config("test.ratio") == 2
    with pytest.raises(ConfigError, match="unknown config key"):
        PassContext().get_config("test.nothing")
    with pytest.raises(ConfigError, match="both required and disabled"):
        PassContext(required=["A"], disabled=["A"])
    with pytest.raises(ConfigError, match="opt_level must be an int from 0 to 4"):
        PassContext(opt_level=7)
    with pytest.raises(ValueError, match="already registered"):
        register_config("test.knob", str, "x", "clash")
    with pytest.raises(ConfigError, match="must be pass names"):
        PassContext(config={"transform.external_passes": {"x": [1]}})
    ctx = PassContext(config={"transform.external_passes": {"x": "test.ReluToAbs"}})
    assert ctx.get_config("transform.external_passes") == {"x": ("test.ReluToAbs",)}
