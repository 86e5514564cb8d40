"""The VM's single entry points: ``vm[f]`` runs the function the executable's
``single_entry`` attribute names for ``f`` (unless turned off), with ``f``'s argument
checks; ``profile`` runs ``f`` itself; malformed attributes are refused at load.

The entry points here are VM functions over packed functions (no C compiler needed):
the VM treats an entry point as an ordinary function; the ``c`` target's ones are
tested in tests/target/test_single_entry.py."""

from __future__ import annotations

import numpy as np
import pytest

from plait.runtime import (
    AllocTensor,
    Call,
    Executable,
    ExecutableFormatError,
    ParamSig,
    Reg,
    Ret,
    VirtualMachine,
    VMFunction,
    VMInputError,
    register_func,
)

ENTRY_CALLS: list[int] = []


def _entry_add(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    ENTRY_CALLS.append(1)
    np.add(a, b, out=out)


register_func("test.entry.add", _entry_add, override=True)
register_func("test.entry.vm_add", lambda a, b, out: np.add(a, b, out=out), override=True)

PARAMS = [ParamSig("x", "tensor", (2, 3), "float32"), ParamSig("y", "tensor", (2, 3), "float32")]


def _add_function(name: str, callee: str, params: list[ParamSig] = PARAMS) -> VMFunction:
    return VMFunction(name, list(params), 3, [AllocTensor(2, [2, 3], "float32"),
                                              Call(callee, [Reg(0), Reg(1), Reg(2)], None),
                                              Ret(2)])


def _exe(report: object, entry_params: list[ParamSig] = PARAMS) -> Executable:
    return Executable({"main": _add_function("main", "test.entry.vm_add"),
                       "main__entry": _add_function("main__entry", "test.entry.add",
                                                    entry_params)},
                      [], {"single_entry": report})


REPORT = {"main": {"entry": "main__entry", "native": "main@entry", "calls": 1}}
X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


def test_vm_runs_the_entry_point_unless_turned_off() -> None:
    exe = _exe(REPORT)
    vm, vm_path = VirtualMachine(exe), VirtualMachine(exe, single_entry=False)
    ENTRY_CALLS.clear()
    np.testing.assert_array_equal(vm["main"](X, Y), X + Y)
    np.testing.assert_array_equal(vm.invoke("main", X, y=Y), X + Y)
    assert len(ENTRY_CALLS) == 2
    np.testing.assert_array_equal(vm_path["main"](X, Y), X + Y)
    assert len(ENTRY_CALLS) == 2                     # the VM path did not use it
    assert vm.entry_point("main") == "main__entry" and vm_path.entry_point("main") is None
    assert vm.execution_path("main") == ("main: single native entry point 'main@entry' "
                                         "(1 native call in one, through 'main__entry')")
    assert "turned off by VirtualMachine(..., single_entry=False)" in \
        vm_path.execution_path("main")


def test_profile_runs_the_vm_path() -> None:
    vm = VirtualMachine(_exe(REPORT))
    ENTRY_CALLS.clear()
    result, entries = vm.profile("main", X, Y)
    np.testing.assert_array_equal(result, X + Y)
    assert not ENTRY_CALLS
    assert [(e.function, e.callee) for e in entries] == [("main", "test.entry.vm_add")]


def test_input_errors_name_the_function_called() -> None:
    vm = VirtualMachine(_exe(REPORT))
    with pytest.raises(VMInputError, match=r"calling 'main': parameter 'y': expected dtype "
                                           r"float32, got float64"):
        vm["main"](X, Y.astype(np.float64))
    with pytest.raises(VMInputError, match=r"calling 'main': parameter 'x': dimension 1 is 4, "
                                           r"expected 3"):
        vm["main"](np.zeros((2, 4), np.float32), Y)
    with pytest.raises(VMInputError, match=r"main\(x, y\) takes 2 arguments but 1 was given"):
        vm["main"](X)


def test_reasons_are_reported_for_functions_without_entry_point() -> None:
    vm = VirtualMachine(_exe({"main": {"reason": "parameter 'x' has a symbolic shape"}}))
    assert vm.entry_point("main") is None
    assert vm.execution_path("main") == ("main: VM path (no single entry point: parameter "
                                         "'x' has a symbolic shape)")
    old = VirtualMachine(Executable({"main": _add_function("main", "test.entry.vm_add")}))
    assert "records no single entry point" in old.execution_path("main")


@pytest.mark.parametrize("report, message", [
    (["main"], "must be a dict of function name -> dict"),
    ({"main": "main__entry"}, "the entry of 'main' must be a dict"),
    ({"main": {"entry": "nowhere"}}, "has the entry point 'nowhere', but the executable has "
                                     "no function 'nowhere'"),
    ({"other": {"entry": "main__entry"}}, "no function 'other'"),
])
def test_malformed_reports_are_refused(report: object, message: str) -> None:
    with pytest.raises(ExecutableFormatError, match=message):
        VirtualMachine(_exe(report))


def test_an_entry_point_with_other_parameters_is_refused() -> None:
    other = [PARAMS[0], ParamSig("y", "tensor", (2, 3), "float64")]
    with pytest.raises(ExecutableFormatError, match="the entry point 'main__entry' of 'main' "
                                                    "takes .*float64.*not 'main''s parameters"):
        VirtualMachine(_exe(REPORT, other))


def test_the_report_survives_save_and_load(tmp_path) -> None:
    path = tmp_path / "entry.plx"
    _exe(REPORT).save(path)
    vm = VirtualMachine(Executable.load(path))
    ENTRY_CALLS.clear()
    np.testing.assert_array_equal(vm["main"](X, Y), X + Y)
    assert ENTRY_CALLS == [1]
