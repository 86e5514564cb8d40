"""``c.SingleEntry``: a function whose calls are all native runs as one native call,
with static sizes or symbolic ones (taken at run time).  The pass writes the module
before and after in the text format; the entry point's results equal the VM path's
bitwise (the same kernels) and numpy's; functions that do not qualify run on the VM
path with the reason; bad inputs get the VM's errors; the executable saves, loads and
runs from several threads.  Built with ``step_timing=True``, the entry point times
each call (``VirtualMachine.profile_steps``).  (The project's models:
tests/e2e/test_single_entry_models.py.)"""

from __future__ import annotations

import re
import textwrap
import threading
import time

import numpy as np
import pytest

import plait
from plait.codegen.c import CFunction, CSource
from plait.codegen.vm_codegen import vm_codegen
from plait.ir import assert_structural_equal
from plait.runtime import Executable, VirtualMachine, VMError, VMInputError
from plait.runtime.native import native_loader
from plait.target.c import add_c_source
from plait.transform import PassContext, WellFormedCheck, make_pass

KERNELS = """
    @kernel
    def relu(x: Buffer((n, 3), "float32"), y: Buffer((n, 3), "float32", output=True)):
        for i in range(n):
            for j in range(3):
                y[i, j] = max(x[i, j], 0.0)

    @kernel
    def add_row(x: Buffer((n, 3), "float32"), r: Buffer((3,), "float32"),
                y: Buffer((n, 3), "float32", output=True)):
        for i in range(n):
            for j in range(3):
                y[i, j] = x[i, j] + r[j]
"""

# a: x + r in the planned storage; b = relu(a), returned with x and the constant r
BEFORE = """
@module(attrs={"phase": "build", "target": Target("c")})
class M:
    @function
    def main(x: Tensor((N, 3), "float32")) -> Tuple(
            Tensor((N, 3), "float32"), Tensor((N, 3), "float32"), Tensor((3,), "float32")):
        storage = builtin.alloc_storage(nbytes=S)
        a = builtin.tensor_from_storage(storage, offset=0, shape=(N, 3), dtype="float32")
        _ = builtin.call_dps(cls.add_row, (x, const([1.0, -2.0, 3.0], "float32")), (a,))
        b = builtin.alloc_tensor(shape=(N, 3), dtype="float32")
        _1 = builtin.call_dps(cls.relu, (a,), (b,))
        return (b, x, const([1.0, -2.0, 3.0], "float32"))
""" + KERNELS

AFTER_ENTRY = """
    @function(attrs={"entry_of": "main"})
    def main__entry(x: Tensor((2, 3), "float32")) -> Tuple(
            Tensor((2, 3), "float32"), Tensor((2, 3), "float32"), Tensor((3,), "float32")):
        workspace = builtin.alloc_storage(nbytes=64)
        workspace_bytes = builtin.tensor_from_storage(workspace, offset=0, shape=(64,),
                                                      dtype="uint8")
        b = builtin.alloc_tensor(shape=(2, 3), dtype="float32")
        _ = builtin.call_dps(extern("main@entry"), (x, const([1.0, -2.0, 3.0], "float32")),
                             (workspace_bytes, b))
        return (b, x, const([1.0, -2.0, 3.0], "float32"))
"""

# inputs x (param 0), the constant (1), the workspace (2), the output b (3); relu's n = 2
PROGRAM = {
    "name": "main@entry",
    "params": (("x", (2, 3), "float32"), ("const0", (3,), "float32"),
               ("workspace", (64,), "uint8"), ("b", (2, 3), "float32")),
    "num_outputs": 2, "workspace": 2,
    "doc": "entry point main@entry: the 2 native calls of main in one",
    "steps": (("add_row", (("param", 0), ("param", 1), ("workspace", 0)), (2,)),
              ("relu", (("workspace", 0), ("param", 3)), (2,))),
}
REPORT = {"main": {"entry": "main__entry", "native": "main@entry", "calls": 2}}


def _module(rows: int, storage: int = 64) -> plait.IRModule:
    return plait.parse(BEFORE.replace("N", str(rows)).replace("S", str(storage)))


def _link(mod: plait.IRModule) -> Executable:
    """The link hook's passes and the VM code generator (the module is already in the
    build phase, so plait.build would skip the build stage)."""
    with PassContext(instruments=[WellFormedCheck()]):
        mod = make_pass("c.CompileKernels")(make_pass("c.SingleEntry")(mod))
    return vm_codegen(mod)


def test_pass_adds_the_entry_function_and_program() -> None:
    before = _module(2)
    after = make_pass("c.SingleEntry")(before)
    main_and_kernels = textwrap.dedent(BEFORE.split("@module", 1)[1].split("\n", 1)[1])
    want = plait.parse(
        '@module(attrs={"phase": "build", "target": Target("c"), "runtime_attrs": '
        f'{{"single_entry": {REPORT!r}}}, "native_entries": ({PROGRAM!r},)}})\n'
        + main_and_kernels.replace("N", "2").replace("S", "64") + AFTER_ENTRY)
    assert_structural_equal(after, want)


def test_entry_point_equals_the_vm_path_and_numpy() -> None:
    exe = _link(_module(2))
    vm, vm_path = VirtualMachine(exe), VirtualMachine(exe, single_entry=False)
    assert vm.execution_path("main") == ("main: single native entry point 'main@entry' (2 "
                                         "native calls in one, through 'main__entry')")
    x = np.array([[0.5, 1.0, -4.0], [-2.0, 3.0, 1.0]], np.float32)
    b, same_x, r = vm["main"](x)
    b_vm, _, r_vm = vm_path["main"](x)
    np.testing.assert_array_equal(b, np.maximum(x + np.float32([1, -2, 3]), 0))  # exact
    assert b.tobytes() == b_vm.tobytes()
    assert same_x is x                                   # an input returned is the input
    np.testing.assert_array_equal(r, [1, -2, 3])
    assert not r.flags.writeable and r_vm.base is r.base  # the executable's constant


def test_zero_sized_tensors() -> None:
    exe = _link(_module(0, storage=0))
    assert "main@entry" in str(exe.attrs["single_entry"])
    b, x, _ = VirtualMachine(exe)["main"](np.zeros((0, 3), np.float32))
    assert b.shape == (0, 3) and x.shape == (0, 3)


MODEL = """
@module
class M:
    @function
    def main(x: Tensor((4, 8), "float32"), w: Tensor((8, 8), "float32")) -> Tuple(
            Tensor((4, 8), "float32"), Tensor((4, 8), "float32"), Tensor((4, 8), "float32")):
        with dataflow():
            h = tanh(matmul(x, w))
            y = relu(add(h, x))
            z = multiply(y, const(0.5, "float32"))
            s = sigmoid(z)
            output(y, s)
        return (y, s, x)
"""


def _reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.maximum(np.tanh(x @ w) + x, 0)
    return y, 1 / (1 + np.exp(-y * 0.5))


@pytest.fixture(scope="module")
def model_exe() -> Executable:
    with PassContext(instruments=[WellFormedCheck()]):
        return plait.build(plait.parse(MODEL), "c")


def test_model_with_several_outputs(model_exe: Executable) -> None:
    assert model_exe.attrs["single_entry"]["main"]["calls"] >= 2
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32) * 0.3
    got = VirtualMachine(model_exe)["main"](x, w)
    vm_path = VirtualMachine(model_exe, single_entry=False)["main"](x, w)
    assert [a.tobytes() for a in got] == [a.tobytes() for a in vm_path]
    assert got[2] is x
    for g, want in zip(got, _reference(x, w)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_entry_point_runs_after_save_and_load_and_from_threads(model_exe: Executable,
                                                               tmp_path) -> None:
    path = tmp_path / "model.plx"
    model_exe.save(path)
    vm = VirtualMachine(Executable.load(path))
    assert vm.entry_point("main") == "main__entry"
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 8)).astype(np.float32) * 0.3
    xs = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(4)]
    results: dict[int, list[np.ndarray]] = {}

    def work(i: int) -> None:
        for _ in range(25):   # concurrent calls share nothing but the constants
            results[i] = list(vm["main"](xs[i], w))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        for g, want in zip(results[i], _reference(x, w)):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_bad_inputs_get_the_vm_errors(model_exe: Executable) -> None:
    main = VirtualMachine(model_exe)["main"]
    w = np.zeros((8, 8), np.float32)
    with pytest.raises(VMInputError, match=r"calling 'main': parameter 'x': expected rank 2 "
                                           r"\(shape \(4, 8\)\), got rank 1"):
        main(np.zeros(32, np.float32), w)
    with pytest.raises(VMInputError, match=r"parameter 'w': expected dtype float32, got int64"):
        main(np.zeros((4, 8), np.float32), np.zeros((8, 8), np.int64))
    with pytest.raises(VMInputError, match=r"parameter 'x': expected a tensor \(numpy.ndarray\)"):
        main([[0.0] * 8] * 4, w)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)[::2]   # not contiguous: copied
    np.testing.assert_allclose(main(x, w)[0], _reference(np.ascontiguousarray(x), w)[0],
                               rtol=1e-5, atol=1e-6)


def test_profile_times_each_kernel_on_the_vm_path(model_exe: Executable) -> None:
    vm = VirtualMachine(model_exe)
    x, w = np.ones((4, 8), np.float32), np.eye(8, dtype=np.float32)
    _, entries = vm.profile("main", x, w)
    assert {e.function for e in entries} == {"main"}
    native = [e for e in entries if not e.callee.startswith("vm.builtin.")]
    assert len(native) == model_exe.attrs["single_entry"]["main"]["calls"]


def test_symbolic_sizes_have_an_entry_point_taking_them_at_run_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``x: (n, 8)``: the entry point takes ``n`` from its argument; its workspace and
    offsets are size expressions (one native call for every ``n``, the pooled
    workspace reused when it is large enough and grown when not); the results equal the
    VM path's bitwise and numpy's."""
    with PassContext(instruments=[WellFormedCheck()]):
        exe = plait.build(plait.parse(MODEL.replace("(4, 8)", "(n, 8)")), "c")
    report = exe.attrs["single_entry"]["main"]
    assert report.get("native") == "main@entry", report
    entry = exe.as_text().split("func main__entry", 1)[1]
    assert re.search(r"alloc_storage n \* \d+", entry), entry
    exe.save(tmp_path / "m.plx")   # the program's size expressions survive the file
    vm = VirtualMachine(Executable.load(tmp_path / "m.plx"))
    vm_path = VirtualMachine(exe, single_entry=False)
    assert vm.execution_path("main").startswith("main: single native entry point")
    w = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    for n in (4, 1, 9, 0, 3):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        y, s, same_x = vm["main"](x, w)
        y_vm, s_vm, _ = vm_path["main"](x, w)
        assert same_x is x and y.shape == (n, 8)
        assert y.tobytes() == y_vm.tobytes() and s.tobytes() == s_vm.tobytes()
        for g, want in zip((y, s), _reference(x, w)):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text, target, reason", [
    (MODEL, plait.Target("c", gemm=False), "it calls 'blas.matmul' (1x): not functions of "
                                           "the native library"),
    (MODEL, plait.Target("c", single_entry=False), "turned off by the target attribute "
                                                   "single_entry=False"),
])
def test_functions_that_do_not_qualify_run_on_the_vm_path(text: str, target: plait.Target,
                                                          reason: str) -> None:
    exe = plait.build(plait.parse(text), target)
    assert reason in exe.attrs["single_entry"]["main"]["reason"]
    assert set(exe.functions) == {"main"}
    vm = VirtualMachine(exe)
    assert vm.entry_point("main") is None and reason in vm.execution_path("main")
    x = np.full((4, 8), 0.25, np.float32)
    w = np.eye(8, dtype=np.float32)
    for g, want in zip(vm["main"](x, w), _reference(x, w)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


SPIN = CSource(
    "#include <time.h>\n"
    "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);\n"
    "    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }\n"
    "void spin(const float* x, float* y, long n) {   /* y = x, after 3 ms */\n"
    "    double end = now() + 3e-3;\n"
    "    while (now() < end) {}\n"
    "    for (long i = 0; i < n; ++i) y[i] = x[i]; }\n",
    (CFunction("spin", ((("n",), "float32"), (("n",), "float32"))),), "spin.c")

SPIN_MODEL = """
@module
class Module:
    @function
    def main(x: Tensor((16,), "float32")) -> Tensor((16,), "float32"):
        with dataflow():
            y = call_extern(extern("spin"), (x,), out=Tensor((16,), "float32"))
            z = relu(y)
            output(z)
        return z
"""


def test_step_timing_times_each_call_inside_the_entry_point() -> None:
    """Target("c", step_timing=True): VirtualMachine.profile_steps gives each native
    call's time inside the one entry call: the 3 ms spin is the first step's, not the
    relu's; the result is the untimed executable's."""
    mod = add_c_source(plait.parse(SPIN_MODEL), SPIN)
    with PassContext(instruments=[WellFormedCheck()]):
        timed = plait.build(mod, plait.Target("c", step_timing=True))
    plain = plait.build(mod, "c")
    assert timed.attrs["single_entry"]["main"]["timed"] is True
    assert "timed" not in plain.attrs["single_entry"]["main"]
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    vm = VirtualMachine(timed)
    start = time.perf_counter()
    got, steps = vm.profile_steps("main", x)
    wall = time.perf_counter() - start
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    assert got.tobytes() == VirtualMachine(plain)["main"](x).tobytes()
    assert [(e.function, e.pc, e.calls) for e in steps] == [("main@entry", 0, 1),
                                                           ("main@entry", 1, 1)]
    assert steps[0].callee == "spin" and steps[0].instruction == "step 0: spin"
    assert 3e-3 <= steps[0].seconds <= wall
    assert 0 <= steps[1].seconds < steps[0].seconds
    assert sum(e.seconds for e in steps) <= wall
    # again: the times of the last call (thread-local), the same steps
    _, again = vm.profile_steps("main", x)
    assert [e.callee for e in again] == [e.callee for e in steps] and again[0].seconds >= 3e-3


def test_profile_steps_names_what_is_missing(model_exe: Executable) -> None:
    x, w = np.zeros((4, 8), np.float32), np.zeros((8, 8), np.float32)
    with pytest.raises(VMError, match=r"profile_steps\('main'\): the entry point "
                                      r"'main@entry' does not time its steps: build with "
                                      r"Target\('c', step_timing=True\)"):
        VirtualMachine(model_exe).profile_steps("main", x, w)
    with pytest.raises(VMError, match=r"main: VM path .*single_entry=False.*only a single "
                                      r"entry point has steps to time"):
        VirtualMachine(model_exe, single_entry=False).profile_steps("main", x, w)
    native = native_loader(model_exe, "main@entry")
    with pytest.raises(ValueError, match=r"'main@entry' is not a timed entry point: build "
                                         r"with Target\('c', step_timing=True\)"):
        native.step_times()
