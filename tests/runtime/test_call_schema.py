"""The keywords of calls are checked by the called function's schema before anything
runs (plait/runtime/call_schema.py): in executables (at load and when a VM is made) and
in lowering-phase text (``call_extern(..., attrs={...})``, at parse).  Before, an
unknown keyword, a layout outside its choices or a zero stride reached
plait/runtime/numpy_ops.py and came back as a KeyError, TypeError or ZeroDivisionError
inside a VMError at run time."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.runtime import Executable, VirtualMachine
from plait.runtime.executable import Call, ExecutableFormatError

CONV = """
@module
class M:
    @function
    def main(x: Tensor((1, 4, 8, 8), "float32"),
             w: Tensor((4, 4, 3, 3), "float32")) -> Tensor((1, 4, 3, 3), "float32"):
        with dataflow():
            y = conv2d(x, w, strides=(2, 2))
            output(y)
        return y
"""

BAD = [
    ({"foo": 1}, "numpy.conv2d has no keyword 'foo'; its keywords are strides, padding"),
    ({"data_layout": "ABC"}, "'data_layout' of op 'conv2d' must be one of 'NCHW', 'NHWC'"),
    ({"strides": "ab"}, "'strides' of op 'conv2d' must be an int or a tuple of ints"),
    ({"strides": (0, 0)}, "keyword 'strides' of numpy.conv2d must be at least 1"),
    ({"groups": 0}, "keyword 'groups' of numpy.conv2d must be at least 1"),
    ({"dilation": (1, -1)}, "keyword 'dilation' of numpy.conv2d must be at least 1"),
]


def _with_keywords(kwargs: dict) -> Executable:
    exe = plait.build(plait.parse(CONV), "numpy")
    fn = exe.functions["main"]
    at = next(i for i, ins in enumerate(fn.instructions) if isinstance(ins, Call))
    ins = fn.instructions[at]
    fn.instructions[at] = Call(ins.func, ins.args, ins.dst, {**ins.kwargs, **kwargs})
    return exe


def test_the_conv_runs_with_its_own_keywords() -> None:
    """The base case (so the refusals below are the keywords' doing): the output
    against numpy's sliding windows, float64 reference, rtol 1e-5."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3),
                                                       axis=(2, 3))[:, :, ::2, ::2]
    want = np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64))
    got = VirtualMachine(_with_keywords({}))["main"](x, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[str(k) for k, _ in BAD])
def test_bad_call_keywords_are_refused_at_load_and_by_the_vm(kwargs: dict,
                                                             message: str) -> None:
    exe = _with_keywords(kwargs)
    with pytest.raises(ExecutableFormatError, match="pc 1") as e:
        VirtualMachine(exe)
    assert message in str(e.value)
    with pytest.raises(ExecutableFormatError) as e:
        Executable.from_bytes(exe.to_bytes())   # a file with the same call
    assert message in str(e.value) and "function 'main', pc 1" in str(e.value)


def test_keywords_of_builtins_are_checked_by_their_signature() -> None:
    """A packed function without a schema of its own (vm.builtin.tuple) is judged by
    its Python signature."""
    from plait.runtime.call_schema import keyword_problem

    assert keyword_problem("vm.builtin.tuple", {"axis": 1}) == (
        "vm.builtin.tuple has no keyword 'axis'; its keywords are none")
    assert keyword_problem("numpy.add", {"axis": 1}) is not None   # a ufunc: none
    assert keyword_problem("numpy.softmax", {"axis": 1}) is None
    assert keyword_problem("a.native.kernel", {"axis": 1}) is None   # resolved later


LOWERED = """
@module(attrs={"target": Target("numpy"), "phase": "lowering"})
class Module:
    @function
    def main(x: Tensor((1, 4, 8, 8), "float32"),
             w: Tensor((4, 4, 3, 3), "float32")) -> Tensor((1, 4, 3, 3), "float32"):
        with dataflow():
            y = call_extern(extern("numpy.conv2d"), (x, w), out=Tensor((1, 4, 3, 3), "float32"),
                            attrs={"strides": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1),
                                   "groups": 1, "data_layout": "NCHW", "kernel_layout": "OIHW"})
            output(y)
        return y
"""


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[str(k) for k, _ in BAD])
def test_bad_extern_attributes_in_lowering_text_are_refused_at_parse(kwargs: dict,
                                                                     message: str) -> None:
    good = plait.parse(LOWERED)
    assert plait.ir.well_formed.well_formed(good) == []
    key, value = next(iter(kwargs.items()))
    text = LOWERED.replace('"groups": 1,', f'"groups": 1, "{key}": {value!r},') \
        if key in ("foo",) else LOWERED.replace(
            {"data_layout": '"data_layout": "NCHW"', "strides": '"strides": (2, 2)',
             "groups": '"groups": 1', "dilation": '"dilation": (1, 1)'}[key],
            f'"{key}": {value!r}')
    with pytest.raises(plait.ir.parser.ParseError, match="binding 'y'") as e:
        plait.parse(text)
    assert message in str(e.value)


def test_an_extern_call_of_an_op_function_is_checked_by_the_op(tmp_path) -> None:
    """A fuzz finding: lowering-phase text whose numpy.max_pool2d got a rank-1 tensor
    reached an IndexError inside the function at run time; the op's type inference
    now refuses it at parse, naming the binding."""
    text = LOWERED.replace('Tensor((1, 4, 8, 8), "float32")', 'Tensor((8,), "float32")')
    with pytest.raises(plait.ir.parser.ParseError, match="binding 'y'") as e:
        plait.parse(text)
    assert "call_extern of 'numpy.conv2d'" in str(e.value) and "rank" in str(e.value)
