"""The ``c`` target: its kind and pipeline, its dispatch to BLAS-backed library
functions, its default legalization into generated kernels (shared when identical), the
visible library-call fallback and its coverage, the build hook and its failure without a
compiler, and the module attributes it keeps (user C sources, the compiled library)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import plait
from plait.codegen.c import CFunction, CSource, NativeUnavailableError, compile_stats
from plait.ir import BlockBuilder, TensorType, Var, structural_equal
from plait.kernel import Kernel, dsl
from plait.op import list_ops, make_call, register_op
from plait.op.infer import infer_elemwise
from plait.runtime import VirtualMachine
from plait.target.c import (
    DispatchLibrary,
    add_c_source,
    c_sources,
    coverage,
    coverage_table,
    get_compute,
    library_calls,
    register_compute,
)
from plait.target.c.build import LibraryBlob, source_literal
from plait.transform import PassContext, PassError, Sequential, WellFormedCheck, make_pass

RNG = np.random.default_rng(3)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "targets.md"


def lower(mod: plait.IRModule, target: plait.Target | str = "c") -> plait.IRModule:
    """``mod`` through the default pipeline up to (not including) the build stage."""
    t = plait.Target.from_any(target)
    stages = [s for s in plait.default_pipeline(t).passes if s.name != "build"]
    return Sequential(stages)(mod.with_attrs(target=t))


def test_c_target_kind_hooks_and_pipeline() -> None:
    t = plait.Target("c")
    assert dict(t.attrs) == {"gemm": True, "attention": True, "winograd": "auto",
                             "depthwise": True, "decode": "auto", "decode_min_weights": 65536,
                             "blas": True, "fuse": True,
                             "single_entry": True, "step_timing": False, "opt_level": 3,
                             "march_native": False, "isas": None,
                             "out_of_range_indices": "raise"}
    stages = _target_stages(t)
    assert stages["dispatch"] == ["RecognizeActivations", "c.FoldPadIntoConv",
                                  "c.DispatchDecode", "c.DispatchAttention",
                                  "c.Conv1dAsConv2d", "c.SplitConcatConv",
                                  "c.DispatchSqueezeExcite",
                                  "c.DispatchGemm", "c.DispatchDepthwise", "c.DispatchPool",
                                  "c.DispatchLibrary"]
    assert stages["legalize"] == ["FuseOps", "FuseKernels", "LegalizeOps"]
    assert stages["build"] == ["RunCodegen", "ExplicitMemory", "PlanMemory",
                               "c.SingleEntry", "c.CompileKernels"]
    plain = plait.Target("c", gemm=False, blas=False, fuse=False)
    stages = _target_stages(plain)
    assert not stages.get("dispatch") and stages["legalize"] == ["LegalizeOps"]


def _target_stages(t: plait.Target) -> dict[str, list[str]]:
    """The pass names of each stage of ``t``'s default pipeline, without the passes the
    registered dialects contribute (they come first at their points)."""
    from plait.dialects import DIALECT_POINTS, dialect_passes

    dialect = {p.name for point in DIALECT_POINTS for p in dialect_passes(point, t)}
    return {s.name: [p.name for p in s.passes if p.name not in dialect]
            for s in plait.default_pipeline(t).passes}


MIXED = """
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((n, 4), "float32"), w: Tensor((4, 3), "float32"),
             v: Tensor((3, 4), "float32"), i: Tensor((2, 2), "int32")
             ) -> Tuple(Tensor((n, 3), "float32"), Tensor((2, 2), "int32")):
        with dataflow():
            a = matmul(x, w)
            b = linear(x, v)
            c = add(a, b)
            j = matmul(i, i)
            out = (c, j)
            output(out)
        return out
"""


def test_dispatch_sends_float_matmul_and_linear_to_blas() -> None:
    expected = plait.parse("""
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((n, 4), "float32"), w: Tensor((4, 3), "float32"),
             v: Tensor((3, 4), "float32"), i: Tensor((2, 2), "int32")
             ) -> Tuple(Tensor((n, 3), "float32"), Tensor((2, 2), "int32")):
        with dataflow():
            a = call_extern(extern("blas.matmul"), (x, w), out=Tensor((n, 3), "float32"))
            b = call_extern(extern("blas.linear"), (x, v), out=Tensor((n, 3), "float32"))
            c = add(a, b)
            j = matmul(i, i)
            out = (c, j)
            output(out)
        return out
""")
    got = DispatchLibrary()(plait.parse(MIXED))
    assert structural_equal(got, expected), got.script()
    # only the ops asked for
    only_linear = DispatchLibrary(ops=("linear",))(plait.parse(MIXED))
    assert "blas.matmul" not in only_linear.script() and "blas.linear" in only_linear.script()
    with pytest.raises(ValueError, match="no library function for .*softmax"):
        DispatchLibrary(ops=("softmax",))


def test_dispatch_leaves_depthwise_conv2d_to_its_generated_kernel() -> None:
    """One input channel per group (MobileNet, EfficientNet, ConvNeXt): the generated
    kernel; two per group: still the library."""
    before = plait.parse("""
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((1, 4, 8, 8), "float32"), dw: Tensor((4, 1, 3, 3), "float32"),
             g: Tensor((4, 2, 3, 3), "float32")) -> Tensor((1, 4, 6, 6), "float32"):
        with dataflow():
            a = conv2d(x, dw, groups=4)
            b = conv2d(a, g, groups=2, padding=1)
            output(b)
        return b
""")
    expected = plait.parse("""
@module(attrs={"phase": "optimization"})
class Module:
    @function
    def main(x: Tensor((1, 4, 8, 8), "float32"), dw: Tensor((4, 1, 3, 3), "float32"),
             g: Tensor((4, 2, 3, 3), "float32")) -> Tensor((1, 4, 6, 6), "float32"):
        with dataflow():
            a = conv2d(x, dw, groups=4)
            b = call_extern(extern("blas.conv2d"), (a, g), out=Tensor((1, 4, 6, 6), "float32"),
                            attrs={"strides": (1, 1), "padding": 1, "dilation": (1, 1),
                                   "groups": 2, "data_layout": "NCHW", "kernel_layout": "OIHW"})
            output(b)
        return b
""")
    got = DispatchLibrary()(before)
    assert structural_equal(got, expected), got.script()


def test_legalize_generates_kernels() -> None:
    before = plait.parse("""
@module(attrs={"phase": "optimization", "target": Target("c")})
class Module:
    @function
    def main(x: Tensor((n, 4), "float32"), y: Tensor((4,), "float32")) -> Tensor((n, 4), "float32"):
        with dataflow():
            a = relu(x)
            b = add(a, y)
            output(b)
        return b
""")
    expected = plait.parse("""
@module(attrs={"phase": "lowering", "target": Target("c")})
class Module:
    @function
    def main(x: Tensor((n, 4), "float32"), y: Tensor((4,), "float32")) -> Tensor((n, 4), "float32"):
        with dataflow():
            a = call_kernel(cls.relu, (x,), out=Tensor((n, 4), "float32"))
            b = call_kernel(cls.add, (a, y), out=Tensor((n, 4), "float32"))
            output(b)
        return b

    @kernel
    def relu(x: Buffer((n, 4), "float32"), relu: Buffer((n, 4), "float32", output=True)):
        for i0 in parallel(n):
            for i1 in vectorized(4):
                relu[i0, i1] = max(x[i0, i1], 0.0)

    @kernel
    def add(x: Buffer((n, 4), "float32"), y: Buffer((4,), "float32"),
            add: Buffer((n, 4), "float32", output=True)):
        for i0 in parallel(n):
            for i1 in vectorized(4):
                add[i0, i1] = x[i0, i1] + y[i1]
""")
    got = make_pass("LegalizeOps")(before)
    assert structural_equal(got, expected), got.script()
    # the lowered module prints and parses back to an equal module
    assert structural_equal(plait.parse(got.script()), got)


@pytest.mark.parametrize("fuse", [False, True], ids=["per-op", "fused"])
def test_identical_kernels_are_shared_across_functions(fuse: bool) -> None:
    bb = BlockBuilder()
    for fname in ("f", "g"):
        x = Var("x", TensorType((8, 8), "float32"))
        with bb.function(fname, [x]):
            with bb.dataflow():
                v = x
                for _ in range(5):
                    v = bb.emit(make_call("relu", v), "v")
                out = bb.emit_output(make_call("sigmoid", v), "out")
            bb.emit_func_output(out)
    target = plait.Target("c", fuse=fuse)
    lowered = lower(bb.get(), target)
    names = sorted(n for n, f in lowered.items() if isinstance(f, Kernel))
    # per op: one relu and one sigmoid kernel; fused: one kernel for both functions
    assert len(names) == 1 if fuse else names == ["relu", "sigmoid"]
    exe = plait.build(bb.get(), target)
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    want = 1 / (1 + np.exp(-np.maximum(x, 0)))
    for fname in ("f", "g"):
        np.testing.assert_allclose(VirtualMachine(exe)[fname](x), want, rtol=1e-6)


def test_library_calls_are_the_visible_fallback() -> None:
    mod = plait.parse("""
@module
class Module:
    @function
    def main(x: Tensor((3, 6), "float32"), i: Tensor((4,), "int32"), h: Tensor((2,), "float16"),
             u: Tensor(None, "float32")):
        with dataflow():
            t = topk(x, k=2)
            b = bitwise_and(i, i)
            f = isfinite(h)
            r = relu(u)
            s = softmax(x)
            out = (t, b, f, r, s)
            output(out)
        return out
""")
    # no compute; integer bit operations; float16; unknown rank — softmax is a kernel
    assert library_calls(lower(mod)) == ["topk", "bitwise_and", "isfinite", "relu"]
    exe = plait.build(mod, "c")
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    i = np.array([1, 5, 6, 7], np.int32)
    h = np.array([np.inf, 1], np.float16)
    u = RNG.standard_normal((2, 5)).astype(np.float32)
    (vals, idx), b, f, r, s = VirtualMachine(exe)["main"](x, i, h, u)
    np.testing.assert_array_equal(vals, -np.sort(-x, axis=1)[:, :2])
    np.testing.assert_array_equal(b, i)
    np.testing.assert_array_equal(f, [False, True])
    np.testing.assert_array_equal(r, np.maximum(u, 0))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_coverage_of_the_core_ops() -> None:
    core = {d.name for d in list_ops() if d.extra.get("module", "").startswith("plait.op.")}
    cov = coverage()
    assert set(cov) == core and len(core) > 100
    library = sorted(n for n, v in cov.items() if v == "library")
    assert library == ["scatter_elements", "topk"]
    assert sum(v == "kernel" for v in cov.values()) == len(core) - 2
    assert all(get_compute(n) is not None for n, v in cov.items() if v == "kernel")
    table = coverage_table()
    assert f"{len(core) - 2} of {len(core)} core ops have a compute" in table
    assert ("| `conv2d` | kernel | float32: plait's matrix product (`c.DispatchGemm`); "
            "grouped and depthwise: a product per group or plait_dwconv.c "
            "(`c.DispatchDepthwise`); other floats: `blas.conv2d` |") in table
    assert "| `topk` | library call |" in table


def test_docs_show_the_current_coverage_table() -> None:
    assert coverage_table() in DOCS.read_text(), (
        "docs/targets.md is out of date: paste plait.target.c.coverage_table() into it"
    )


def test_a_new_op_gets_a_kernel_from_a_registered_compute() -> None:
    name = "ctest.twice"
    register_op(name, infer_type=infer_elemwise("float"), doc="2 * x (test op)", override=True)
    mod = plait.parse(f"""
@module
class Module:
    @function
    def main(x: Tensor((5,), "float32")) -> Tensor((5,), "float32"):
        with dataflow():
            y = {name}(x)
            output(y)
        return y
""")
    # no compute and no numpy function: an error naming the op, the target and the fix
    with pytest.raises(PassError, match=r"op 'ctest.twice' has neither a compute.*'c'.*"
                                        r"register_compute"):
        plait.build(mod, "c")

    @register_compute(name, override=True)
    def twice(inputs, attrs, out_ty):  # type: ignore[no-untyped-def]
        (x,) = inputs
        return dsl.compute(x.shape, lambda i: x[i] * 2.0, "twice")

    exe = plait.build(mod, "c")
    x = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), 2 * x)


def test_a_compute_that_breaks_its_contract_is_reported_with_op_and_target() -> None:
    original = get_compute("relu")

    def wrong(inputs, attrs, out_ty):  # type: ignore[no-untyped-def]
        (x,) = inputs
        return dsl.compute(x.shape, lambda *i: dsl.cast(x[i], "float64"), "relu")

    register_compute("relu", wrong, override=True)
    try:
        mod = plait.parse("""
@module
class Module:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            y = relu(x)
            output(y)
        return y
""")
        with pytest.raises(PassError, match=r"compute of op 'relu' produced result 0 .* float64.*"
                                            r"Tensor\(\(4,\), \"float32\"\)"):
            plait.build(mod, "c")
    finally:
        register_compute("relu", original, override=True)


def test_building_without_a_compiler_points_to_the_numpy_target(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mod = plait.parse("""
@module
class Module:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            y = exp(x)
            output(y)
        return y
""")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no cc
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(PassError) as info:
        plait.build(mod, "c")
    assert isinstance(info.value.__cause__, NativeUnavailableError)
    message = str(info.value)
    assert "c.CompileKernels" in message and 'target="numpy"' in message
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(PassError, match=r"no-such-compiler-xyz.*target=\"numpy\""):
        plait.build(mod, "c")
    # the numpy target needs none
    exe = plait.build(mod, "numpy")
    np.testing.assert_allclose(VirtualMachine(exe)["main"](np.ones(4, np.float32)), np.e, rtol=1e-6)


def _tanh_module(n: int, dtype: str) -> plait.IRModule:
    return plait.parse(f"""
@module
class Module:
    @function
    def main(x: Tensor(({n},), "{dtype}")) -> Tensor(({n},), "{dtype}"):
        with dataflow():
            y = tanh(x)
            output(y)
        return y
""")


def test_compiler_options_come_from_the_target(tmp_path, monkeypatch, seeded_cache) -> None:
    # a cache of its own: in a cache shared across runs (PLAIT_TEST_CACHE_DIR) another
    # run may have built both libraries already
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(seeded_cache(tmp_path / "cache")))
    mod = _tanh_module(64, "float64")
    x = RNG.standard_normal(64)
    results = []
    for target in (plait.Target("c", threads=False, opt_level=1), plait.Target("c")):
        before = compile_stats()["compiles"]
        exe = plait.build(mod, target)
        assert compile_stats()["compiles"] == before + 1  # other flags, another library
        results.append(VirtualMachine(exe)["main"](x))
    np.testing.assert_allclose(results[0], np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(results[1], np.tanh(x), rtol=1e-12)


def test_module_attributes_hold_c_sources_and_the_compiled_library() -> None:
    src = CSource("void twice(const float* x, float* y, long n) { for (long i = 0; i < n; ++i)"
                  " y[i] = 2 * x[i]; }",
                  (CFunction("twice", ((("n",), "float32"), (("n",), "float32"))),), "twice.c")
    mod = plait.parse("""
@module
class Module:
    @function
    def main(x: Tensor((n,), "float32")) -> Tensor((n,), "float32"):
        with dataflow():
            y = call_extern(extern("twice"), (x,), out=Tensor((n,), "float32"))
            z = relu(y)
            output(z)
        return z
""")
    mod = add_c_source(mod, src)
    assert add_c_source(mod, src) is mod  # recorded once
    with pytest.raises(ValueError, match="different C source named 'twice.c'"):
        add_c_source(mod, CSource("int x;", (), "twice.c"))
    again = plait.parse(mod.script())  # a literal attribute: prints and parses
    assert [source_literal(s) for s in c_sources(again)] == [source_literal(src)]
    assert structural_equal(again, mod)
    no_entry = plait.Target("c", single_entry=False)   # (the library without main@entry)
    with PassContext(instruments=[WellFormedCheck()]):
        exe = plait.build(mod, no_entry)
    x = RNG.standard_normal(7).astype(np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), np.maximum(2 * x, 0))
    # the library in the module attributes prints as one line
    built = make_pass("c.CompileKernels")(lower(mod, no_entry))
    blob = built.attrs["native_libs"]["c"]
    assert isinstance(blob, LibraryBlob) and bytes(blob) == exe.libs["c"]
    assert f'native_library(sha256="{blob.sha256}"' in built.script()
    assert "\\x7fELF" not in built.script()


def test_the_old_openmp_attribute_names_its_replacement() -> None:
    mod = _tanh_module(4, "float32")
    with pytest.raises(Exception, match=r"'openmp' is now 'threads'.*threads=False"):
        plait.build(mod, plait.Target("c", openmp=False))
