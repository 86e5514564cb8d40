"""The summaries of the c target's dispatch passes (docs/passes.md takes each pass's
first docstring line, tools/gen_pass_docs.py): one whole sentence, and none of them
claims a static shape for a rule that takes symbolic sizes (c.DispatchDepthwise and
c.DispatchPool take a symbolic batch and image: tests/target/test_c_run_time_sizes.py)."""

from __future__ import annotations

import pytest

from plait.target.c.dispatch import (
    Conv1dAsConv2d,
    DispatchDepthwise,
    DispatchGemm,
    DispatchLibrary,
    DispatchPool,
    DispatchSqueezeExcite,
    SplitConcatConv,
)

PASSES = [Conv1dAsConv2d, DispatchDepthwise, DispatchGemm, DispatchLibrary, DispatchPool,
          DispatchSqueezeExcite, SplitConcatConv]


@pytest.mark.parametrize("cls", PASSES, ids=lambda c: c.__name__)
def test_the_summary_is_one_sentence(cls: type) -> None:
    """The first docstring line ends its sentence (a line cut mid-sentence reads as a
    fragment in docs/passes.md)."""
    first = (cls.__doc__ or "").strip().splitlines()[0].strip()
    assert first.endswith("."), f"{cls.__name__}: {first!r}"


@pytest.mark.parametrize("cls", [DispatchDepthwise, DispatchPool], ids=lambda c: c.__name__)
def test_rules_of_symbolic_sizes_do_not_say_static_shape(cls: type) -> None:
    """Their docstrings name what is static (the channels and window) without claiming
    a static shape."""
    import inspect

    text = " ".join(inspect.getdoc(inspect.getmodule(cls)).split()) + " ".join(
        (cls.__doc__ or "").split())
    assert "of static shape" not in text
    assert "symbolic" in text
