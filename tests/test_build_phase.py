"""A module printed at the build phase and built again: its library is compiled again
from the kernels it holds (an edited kernel was silently ignored: the library named by
its digest ran), and building it for another target than the one it was lowered for is
refused."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import plait
import plait.runtime
from plait.interp import run as interpret
from plait.pipeline import build_pipeline
from plait.runtime import VirtualMachine

TEXT = '''
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        y = add(x, x)
        z = tanh(y)
        return z
'''


def digest(exe: plait.runtime.Executable) -> str:
    return hashlib.sha256(bytes(exe.libs["c"])).hexdigest()


def built_text(target: plait.Target, text: str = TEXT) -> str:
    mod = plait.parse(text).with_attrs(target=target)
    built = build_pipeline(target, mod.phase)(mod)
    assert built.phase == "build"
    return built.script()


@pytest.mark.parametrize("fuse", [True, False])
def test_an_edited_kernel_is_compiled_again(fuse: bool):
    """``fuse=False``: two kernels behind one single entry point, which is compiled
    again too."""
    target = plait.Target("c", fuse=fuse)
    text = built_text(target)
    assert 'native_library(sha256="' in text
    changed = re.sub(r"(\w+\[i0\]) \+ (\w+\[i0\])", r"\1 * \2", text, count=1)
    assert changed != text
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    same = plait.parse(text)
    np.testing.assert_allclose(VirtualMachine(plait.build(same))["main"](x), np.tanh(x + x),
                               rtol=1e-6, atol=1e-7)
    edited = plait.parse(changed)
    want = np.tanh(x * x)
    np.testing.assert_allclose(interpret(edited, x), want, rtol=1e-6, atol=1e-7)
    exe = plait.build(edited)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), want, rtol=1e-6, atol=1e-7)
    assert digest(exe) != digest(plait.build(same))


def test_an_unedited_module_gets_the_same_library():
    """(From the compile cache: the same kernels make the same C source.)"""
    text = built_text(plait.Target("c"), TEXT.replace("tanh", "relu"))
    mod = plait.parse(text)
    exe = plait.build(mod)
    assert digest(exe) == hashlib.sha256(bytes(mod.attrs["native_libs"]["c"])).hexdigest()


def test_building_it_for_another_target_is_refused():
    mod = plait.parse(built_text(plait.Target("c")))
    with pytest.raises(ValueError, match="at the build phase, lowered for target 'c': build "
                                         "it for 'c'.*an earlier phase for 'numpy'"):
        plait.build(mod, target="numpy")
