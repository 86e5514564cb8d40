"""Tests of the virtual machine, the packed-function registry and the builtins."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from plait.runtime import (
    AllocStorage,
    AllocTensor,
    Call,
    Const,
    Executable,
    ExecutableFormatError,
    Goto,
    If,
    Imm,
    Move,
    ParamSig,
    Reg,
    Ret,
    VirtualMachine,
    VMCallDepthError,
    VMError,
    VMFunction,
    VMInputError,
    get_func,
    has_func,
    list_funcs,
    register_func,
    register_native_loader,
    unregister_native_loader,
)


def _add(a, b, out):
    return np.add(a, b, out=out)


def _mul(a, b, out):
    return np.multiply(a, b, out=out)


def _fail(x):
    raise ValueError("kernel exploded")


def _need_contiguous(x, out):
    assert x.flags.c_contiguous
    np.copyto(out, x)
    return out


def _sum(x, axis=None, keepdims=False, out=None):
    assert axis is None or isinstance(axis, tuple)
    return np.sum(x, axis=axis, keepdims=keepdims, out=out)


register_func("test.vm.add", _add, override=True)
register_func("test.vm.mul", _mul, override=True)
register_func("test.vm.fail", _fail, override=True)
register_func("test.vm.need_contiguous", _need_contiguous, override=True)
register_func("test.vm.sum", _sum, override=True)
register_func("test.vm.lt", lambda a, b: a < b, override=True)
register_func("test.vm.iadd", lambda a, b: a + b, override=True)
register_func("test.vm.isub", lambda a, b: a - b, override=True)
register_func("test.vm.fill", lambda out, v: out.fill(v), override=True)


def tensor(name, shape, dtype="float32"):
    return ParamSig(name, "tensor", tuple(shape), dtype)


def single(fn: VMFunction, constants=(), libs=None) -> VirtualMachine:
    return VirtualMachine(Executable({fn.name: fn}, list(constants), {}, libs or {}))


def add_exe(shape=(2, 3), out_shape=None) -> VirtualMachine:
    out_shape = list(out_shape or shape)
    return single(
        VMFunction(
            "main",
            [tensor("x", shape), tensor("y", shape)],
            3,
            [
                AllocTensor(2, out_shape, "float32"),
                Call("test.vm.add", [Reg(0), Reg(1), Reg(2)], None),
                Ret(2),
            ],
        )
    )


def test_add_and_call_styles():
    vm = add_exe()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(vm["main"](x, y), x + y)
    np.testing.assert_array_equal(vm.invoke("main", x, y), x + y)
    np.testing.assert_array_equal(vm.invoke("main", x, y=y), x + y)
    np.testing.assert_array_equal(vm["main"](y=y, x=x), x + y)
    assert "main" in vm and vm.function_names() == ["main"]


def test_storage_reuse_with_offsets():
    # t0 = x + y, t1 = t0 * x (both in storage 1), t0' = t1 + t1 reuses t0's slot
    vm = single(
        VMFunction(
            "main",
            [tensor("x", (4,)), tensor("y", (4,))],
            6,
            [
                AllocStorage(2, 32),
                AllocTensor(3, [4], "float32", storage=2, offset=0),
                AllocTensor(4, [4], "float32", storage=2, offset=16),
                Call("test.vm.add", [Reg(0), Reg(1), Reg(3)], None),
                Call("test.vm.mul", [Reg(3), Reg(0), Reg(4)], None),
                AllocTensor(5, [4], "float32", storage=2, offset=0),
                Call("test.vm.add", [Reg(4), Reg(4), Reg(5)], None),
                Call("vm.builtin.tuple", [Reg(5), Reg(4), Reg(3)], 2),
                Ret(2),
            ],
        )
    )
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 2, np.float32)
    out, t1, t0 = vm["main"](x, y)
    np.testing.assert_array_equal(out, 2 * (x + y) * x)
    assert out.flags.c_contiguous and out.shape == (4,) and out.dtype == np.float32
    assert np.shares_memory(out, t0) and not np.shares_memory(out, t1)
    assert out.base is t1.base  # both are views of the one storage buffer


def _arena_function(returns_arena: bool) -> VMFunction:
    # t = x + x in a storage; returns t itself, or t * x in a fresh tensor
    body = [
        AllocStorage(1, 64),
        AllocTensor(2, [4], "float32", storage=1, offset=0),
        Call("test.vm.add", [Reg(0), Reg(0), Reg(2)], None),
    ]
    if returns_arena:
        body.append(Ret(2))
    else:
        body += [AllocTensor(3, [4], "float32"), Call("test.vm.mul", [Reg(2), Reg(0), Reg(3)],
                                                     None), Ret(3)]
    return VMFunction("main", [tensor("x", (4,))], 4, body)


def test_an_arena_is_reused_by_the_next_call():
    vm = single(_arena_function(returns_arena=False))
    code = vm._code["main"]
    x = np.arange(4, dtype=np.float32)
    first = vm["main"](x)
    (_reg, _nbytes, pool), = code.storages
    assert len(pool) == 1
    kept = pool[0]
    second = vm["main"](x + 1)
    assert pool == [kept]                       # the same buffer went out and came back
    np.testing.assert_array_equal(first, 2 * x * x)   # results are never in the arena
    np.testing.assert_array_equal(second, 2 * (x + 1) * (x + 1))


def test_an_arena_the_result_lives_in_is_not_reused():
    vm = single(_arena_function(returns_arena=True))
    x = np.arange(4, dtype=np.float32)
    first = vm["main"](x)
    second = vm["main"](x + 10)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, 2 * x)  # not overwritten by the second call
    np.testing.assert_array_equal(second, 2 * (x + 10))
    assert vm._code["main"].storages[0][2] == []


def test_storage_is_aligned_and_overflow_is_reported():
    vm = single(
        VMFunction(
            "main",
            [],
            3,
            [
                AllocStorage(0, 16),
                AllocTensor(1, [2], "float64", storage=0, offset=8),
                Ret(1),
            ],
        )
    )
    with pytest.raises(VMError, match="does not fit in a storage of 16 bytes") as info:
        vm["main"]()
    assert info.value.function == "main" and info.value.pc == 1
    from plait.runtime.vm import aligned_storage

    buf = aligned_storage(100)
    assert buf.ctypes.data % 64 == 0 and buf.shape == (100,) and buf.dtype == np.uint8


def loop_sum_function() -> VMFunction:
    # acc = 0; i = 0; while i < n: acc += i; i += 1; return acc
    return VMFunction(
        "main",
        [ParamSig("n", "prim", None, "int64")],
        5,
        [
            Call("test.vm.iadd", [Imm(0), Imm(0)], 1),  # 0: acc = 0
            Move(2, 1),  # 1: i = acc (0)
            Call("test.vm.lt", [Reg(2), Reg(0)], 3),  # 2: c = i < n
            If(3, 7),  # 3
            Call("test.vm.iadd", [Reg(1), Reg(2)], 1),  # 4: acc += i
            Call("test.vm.iadd", [Reg(2), Imm(1)], 2),  # 5: i += 1
            Goto(2),  # 6
            Ret(1),  # 7
        ],
    )


def test_if_goto_loop():
    vm = single(loop_sum_function())
    assert vm["main"](10) == 45
    assert vm["main"](0) == 0
    assert vm["main"](np.int64(5)) == 10


def test_nested_and_recursive_calls_do_not_use_python_recursion():
    # rsum(n) = n + rsum(n - 1) if 0 < n else n; depth 3000 > Python's recursion limit
    rsum = VMFunction(
        "rsum",
        [ParamSig("n", "prim")],
        4,
        [
            Call("test.vm.lt", [Imm(0), Reg(0)], 1),  # 0: c = 0 < n
            If(1, 6),  # 1
            Call("test.vm.isub", [Reg(0), Imm(1)], 2),  # 2: m = n - 1
            Call("rsum", [Reg(2)], 3),  # 3: r = rsum(m)
            Call("test.vm.iadd", [Reg(0), Reg(3)], 3),  # 4: r = n + r
            Ret(3),  # 5
            Ret(0),  # 6
        ],
    )
    main = VMFunction("main", [ParamSig("n", "prim")], 2, [Call("rsum", [Reg(0)], 1), Ret(1)])
    vm = VirtualMachine(Executable({"main": main, "rsum": rsum}))
    assert vm["main"](3000) == 3000 * 3001 // 2
    with pytest.raises(VMCallDepthError, match="VM call depth exceeds 10000") as info:
        vm["main"](20000)
    assert "... 9990 more callers ..." in str(info.value)  # not 10,000 lines
    assert len(str(info.value).splitlines()) == 12


def test_nested_call_of_tensor_function_binds_its_own_symbols():
    double = VMFunction(
        "double",
        [tensor("a", ("m",))],
        2,
        [
            AllocTensor(1, ["m"], "float32"),
            Call("test.vm.add", [Reg(0), Reg(0), Reg(1)], None),
            Ret(1),
        ],
    )
    main = VMFunction(
        "main",
        [tensor("x", ("n",))],
        3,
        [
            Call("double", [Reg(0)], 1),
            Call("double", [Reg(1)], 2),
            Ret(2),
        ],
    )
    vm = VirtualMachine(Executable({"main": main, "double": double}))
    for n in (1, 5):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(vm["main"](x), 4 * x)


def test_tuple_result_and_builtins():
    vm = single(
        VMFunction(
            "main",
            [tensor("x", (2, 3))],
            7,
            [
                Call("vm.builtin.shape_of", [Reg(0)], 1),
                Call("vm.builtin.reshape_view", [Reg(0), Imm((3, 2))], 2),
                Call("vm.builtin.empty", [Imm([3, 2]), Imm("float32")], 3),
                Call("vm.builtin.copy", [Reg(2), Reg(3)], None),
                Call("vm.builtin.tuple", [Reg(2), Reg(3), Reg(1)], 4),
                Call("vm.builtin.tuple_getitem", [Reg(4), Imm(0)], 5),
                Call("vm.builtin.tuple", [Reg(5), Reg(3)], 6),
                Ret(6),
            ],
        )
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b = vm["main"](x)
    np.testing.assert_array_equal(a, x.reshape(3, 2))
    np.testing.assert_array_equal(b, x.reshape(3, 2))
    assert np.shares_memory(a, x)  # reshape_view of a contiguous input is a view
    assert not np.shares_memory(b, x)
    assert get_func("vm.builtin.shape_of")(x) == (2, 3)


def test_check_tensor_builtin():
    check = get_func("vm.builtin.check_tensor")
    x = np.zeros((3, 3), np.float32)
    assert check(x, ("n", "n"), "float32", "x") is x
    assert check(x, None, None, "x") is x
    assert check(x, (3, None), None, "x") is x
    with pytest.raises(
        ValueError, match="match_cast of 'y': dimension 1 is 4 but symbolic size 'n' is 3"
    ):
        check(np.zeros((3, 4), np.float32), ("n", "n"), "float32", "y")
    with pytest.raises(TypeError, match="expected dtype int64, got float32"):
        check(x, (3, 3), "int64", "x")
    with pytest.raises(ValueError, match="expected rank 1"):
        check(x, (9,), None, "x")
    with pytest.raises(TypeError, match="expected a tensor"):
        check([1, 2], None, None, "x")


def test_kwargs_constants_and_immediates():
    w = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    vm = single(
        VMFunction(
            "main",
            [tensor("x", (2, 2))],
            4,
            [
                AllocTensor(1, [2, 2], "float32"),
                Call("test.vm.add", [Reg(0), Const(0), Reg(1)], None),
                Call("test.vm.sum", [Reg(1)], 2, {"axis": (0, 1), "keepdims": True}),
                AllocTensor(3, [2, 1], "float32"),
                Call(
                    "test.vm.sum", [Const(0)], None, {"axis": (1,), "keepdims": True, "out": Reg(3)}
                ),
                Call("vm.builtin.tuple", [Reg(2), Reg(3)], 2),
                Ret(2),
            ],
        ),
        constants=[w],
    )
    x = np.ones((2, 2), np.float32)
    total, rows = vm["main"](x)
    assert total.shape == (1, 1) and total[0, 0] == 14
    np.testing.assert_array_equal(rows, [[3.0], [7.0]])


def test_constants_are_read_only_for_kernels():
    vm = single(
        VMFunction(
            "main",
            [],
            1,
            [
                Call("test.vm.fill", [Const(0), Imm(1.0)], None),
                Ret(0),
            ],
        ),
        constants=[np.zeros(3, np.float32)],
    )
    with pytest.raises(VMError, match="read-only"):
        vm["main"]()
    assert not vm.executable.constants[0].any()


def test_symbolic_dimension_errors_name_parameter_and_symbol():
    vm = single(
        VMFunction(
            "main",
            [tensor("x", ("n", 4)), tensor("y", ("n", 4))],
            3,
            [
                AllocTensor(2, ["n", 4], "float32"),
                Call("test.vm.add", [Reg(0), Reg(1), Reg(2)], None),
                Ret(2),
            ],
        )
    )
    for n in (1, 7):
        x = np.ones((n, 4), np.float32)
        np.testing.assert_array_equal(vm["main"](x, x), 2 * x)
    with pytest.raises(VMInputError) as info:
        vm["main"](np.ones((4, 4), np.float32), np.ones((3, 4), np.float32))
    assert (
        "parameter 'y': dimension 0 is 3 but symbolic size 'n' was bound to 4 by parameter 'x'"
    ) in str(info.value)
    with pytest.raises(VMInputError, match=r"parameter 'x': dimension 1 is 5, expected 4"):
        vm["main"](np.ones((2, 5), np.float32), np.ones((2, 4), np.float32))


def test_input_errors():
    vm = add_exe()
    x = np.ones((2, 3), np.float32)
    with pytest.raises(VMInputError, match=r"main\(x, y\) takes 2 arguments but 1 was given"):
        vm["main"](x)
    with pytest.raises(
        VMInputError,
        match=r"parameter 'y': expected rank 2 \(shape \(2, 3\)\), "
        r"got rank 1",
    ):
        vm["main"](x, np.ones(6, np.float32))
    with pytest.raises(VMInputError, match="parameter 'x': expected dtype float32, got float64"):
        vm["main"](x.astype(np.float64), x)
    with pytest.raises(VMInputError, match="parameter 'x': expected a tensor .* got list"):
        vm["main"](x.tolist(), x)
    with pytest.raises(VMInputError, match="parameter 'y': expected a tensor .* got float"):
        vm["main"](x, 1.0)
    with pytest.raises(VMInputError, match="no parameter 'z'"):
        vm["main"](x, y=x, z=x)
    with pytest.raises(KeyError, match="no function 'mian'.*did you mean 'main'"):
        vm["mian"]


def test_big_endian_inputs_are_converted():
    vm = add_exe()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = vm["main"](x.astype(">f4"), x.astype(">f4"))
    assert got.dtype == np.float32 and got.dtype.isnative
    np.testing.assert_array_equal(got, x + x)  # exact: a byte swap loses nothing
    with pytest.raises(VMInputError, match=r"expected dtype float32, got float64 \(big-endian\)"):
        vm["main"](x.astype(">f8"), x)


def test_non_contiguous_inputs_are_made_contiguous():
    vm = single(
        VMFunction(
            "main",
            [tensor("x", (3, 2))],
            2,
            [
                AllocTensor(1, [3, 2], "float32"),
                Call("test.vm.need_contiguous", [Reg(0), Reg(1)], None),
                Ret(1),
            ],
        )
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3).T
    np.testing.assert_array_equal(vm["main"](x), x)


def test_unknown_packed_function_is_reported_at_construction():
    fn = VMFunction(
        "main",
        [tensor("x", (2,))],
        2,
        [
            AllocTensor(1, [2], "float32"),
            Call("test.vm.ad", [Reg(0), Reg(0), Reg(1)], None),
            Ret(1),
        ],
    )
    with pytest.raises(VMError) as info:
        single(fn)
    msg = str(info.value)
    assert "'test.vm.ad'" in msg and "pc 1" in msg and "'main'" in msg
    assert "call test.vm.ad(%0, %0, %1)" in msg and "did you mean 'test.vm.add'" in msg


def test_vm_call_arity_is_checked_at_construction():
    callee = VMFunction("f", [tensor("a", (2,))], 1, [Ret(0)])
    main = VMFunction("main", [tensor("x", (2,))], 2, [Call("f", [Reg(0), Reg(0)], 1), Ret(1)])
    with pytest.raises(VMError, match=r"f\(a\) takes 1 argument\(s\), the call passes 2"):
        VirtualMachine(Executable({"main": main, "f": callee}))


def test_packed_function_errors_are_located_and_chained():
    inner = VMFunction(
        "inner",
        [tensor("a", (2,))],
        2,
        [
            Call("test.vm.fail", [Reg(0)], 1),
            Ret(1),
        ],
    )
    main = VMFunction(
        "main",
        [tensor("x", (2,))],
        2,
        [
            Move(1, 0),
            Call("inner", [Reg(1)], 1),
            Ret(1),
        ],
    )
    vm = VirtualMachine(Executable({"main": main, "inner": inner}))
    with pytest.raises(VMError) as info:
        vm["main"](np.zeros(2, np.float32))
    err = info.value
    assert isinstance(err.__cause__, ValueError)
    assert (err.function, err.pc, err.instruction) == ("inner", 0, "%1 = call test.vm.fail(%0)")
    assert "ValueError: kernel exploded" in str(err)
    assert "  its arguments: %0 = float32 (2,)\n" in str(err)  # what the kernel was given
    assert "called from 'main', pc 1 (`%1 = call inner(%1)`)" in str(err)


def test_hand_built_malformed_executable_is_rejected():
    fn = VMFunction("main", [tensor("x", (2,))], 2, [Ret(5)])
    with pytest.raises(ExecutableFormatError, match="register 5 out of range"):
        single(fn)


def test_registry():
    @register_func("test.vm.registry.twice", override=True)
    def twice(x):
        return 2 * x

    assert has_func("test.vm.registry.twice") and get_func("test.vm.registry.twice")(2) == 4
    assert list_funcs("test.vm.registry.") == ["test.vm.registry.twice"]
    with pytest.raises(ValueError, match="already registered"):
        register_func("test.vm.registry.twice", twice)
    register_func("test.vm.registry.twice", lambda x: 3 * x, override=True)
    assert get_func("test.vm.registry.twice")(2) == 6
    with pytest.raises(KeyError, match="did you mean 'test.vm.registry.twice'") as info:
        get_func("test.vm.registry.twise")
    assert str(info.value).startswith("no packed function named 'test.vm.registry.twise'")
    assert "vm.builtin.tuple" in list_funcs("vm.builtin.")


def test_native_loader_hook():
    asked = []

    def loader(exe, name):
        asked.append(name)
        if name == "native.scale" and "kernels" in exe.libs:
            return lambda x, out: np.multiply(x, 3, out=out)
        return None

    fn = VMFunction(
        "main",
        [tensor("x", (2,))],
        2,
        [
            AllocTensor(1, [2], "float32"),
            Call("native.scale", [Reg(0), Reg(1)], None),
            Ret(1),
        ],
    )
    register_native_loader(loader)
    try:
        vm = single(fn, libs={"kernels": b"\x7fELF..."})
        np.testing.assert_array_equal(vm["main"](np.ones(2, np.float32)), [3, 3])
        with pytest.raises(VMError, match="unknown function 'native.scale'"):
            single(fn)  # no libraries: the loaders are not asked
        assert asked == ["native.scale"]
    finally:
        unregister_native_loader(loader)


def test_profile():
    vm = single(loop_sum_function())
    result, entries = vm.profile("main", 4)
    assert result == 6
    by_pc = {e.pc: e for e in entries}
    assert by_pc[2].calls == 5 and by_pc[4].calls == 4 and by_pc[2].callee == "test.vm.lt"
    assert all(e.seconds >= 0 and e.function == "main" for e in entries)
    assert "test.vm.lt" in str(by_pc[2])
    result, entries = vm.profile("main", 1)  # counters restart
    assert result == 0 and {e.pc: e.calls for e in entries}[2] == 2


def test_runtime_imports_nothing_from_the_compiler():
    """The runtime imports itself and plait.errors (a leaf: the base of the error
    classes, which imports nothing) only."""
    root = pathlib.Path(__file__).resolve().parents[2] / "plait" / "runtime"
    errors = root.parent / "errors.py"
    assert not [n for n in ast.walk(ast.parse(errors.read_text()))
                if isinstance(n, ast.Import | ast.ImportFrom)
                and getattr(n, "module", None) != "__future__"]
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("plait") or name.startswith("plait.runtime") \
                    or name == "plait.errors", (
                    f"{path.name} imports {name}"
                )


def test_ready_arrays_are_bound_as_they_are_and_the_rest_is_checked():
    """bind's fast path (contiguous arrays of the parameters' dtypes, as a decode step
    passes its cache views) takes the arrays themselves; a size expression, a range,
    a view to copy and a wrong dtype still go through the full checks."""
    fn = VMFunction("main", [tensor("x", ("n", 4)), tensor("y", ("n * 2",))], 2, [Ret(0)])
    vm = VirtualMachine(Executable({"main": fn}, [], {"dim_ranges": {"n": [1, 8]}}, {}))
    x = np.ones((3, 4), np.float32)
    assert vm["main"](x, np.zeros(6, np.float32)) is x
    with pytest.raises(VMInputError, match=r"parameter 'y': dimension 0 is 5 but its size "
                       r"n \* 2 is 6"):
        vm["main"](x, np.zeros(5, np.float32))
    with pytest.raises(VMInputError, match=r"parameter 'x': dimension 0 is 9, outside the "
                       r"range \[1, 8\] of symbolic size 'n'"):
        vm["main"](np.ones((9, 4), np.float32), np.zeros(18, np.float32))
    view = np.arange(24, dtype=np.float32).reshape(4, 6)[:, :4]
    got = vm["main"](view, np.zeros(8, np.float32))
    assert got is not view and got.flags.c_contiguous
    np.testing.assert_array_equal(got, view)
    with pytest.raises(VMInputError, match="parameter 'y': expected dtype float32, got int64"):
        vm["main"](x, np.zeros(6, np.int64))
