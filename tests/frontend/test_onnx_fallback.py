"""Nodes plait cannot import, run by onnxruntime: ``from_onnx(..., fallback="onnxruntime")``.

The model mixes supported ops with ``com.microsoft::FusedMatMul`` (an onnxruntime
contrib op) and ``Det`` (a standard op plait has no converter for); every result is
checked against onnxruntime running the whole original model (rtol 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import init, model, vi  # noqa: E402

import plait  # noqa: E402
from plait import cli  # noqa: E402
from plait.frontend.onnx import OnnxImportError, from_onnx  # noqa: E402
from plait.frontend.onnx.fallback import offloaded_nodes  # noqa: E402
from plait.frontend.onnx.fallback_plan import plan_fallback  # noqa: E402
from plait.ir import Function  # noqa: E402
from plait.runtime import Executable, VirtualMachine  # noqa: E402
from plait.runtime.trust import UntrustedCodeError  # noqa: E402

RTOL = 1e-5
MS = {"com.microsoft": 1}


def _mixed() -> onnx.ModelProto:
    """relu, add -> FusedMatMul -> Det -> sigmoid; FusedMatMul's result also feeds a
    ReduceSum (so its group has two outputs); a second Det on the input on its own."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Add", ["a", "B"], ["a2"], name="add"),
        helper.make_node("FusedMatMul", ["a2", "W"], ["b"], domain="com.microsoft",
                         alpha=0.5, transB=1, name="fm"),
        helper.make_node("Det", ["b"], ["d"], name="det"),
        helper.make_node("Sigmoid", ["d"], ["e"], name="sig"),
        helper.make_node("ReduceSum", ["b", "axes"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Det", ["x"], ["dx"], name="det_x"),
        helper.make_node("Mul", ["e", "dx"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "s"], ["y"], name="out"),
    ]
    inits = [init("W", rng.standard_normal((3, 3)).astype(np.float32)),
             init("B", rng.standard_normal(3).astype(np.float32)),
             init("axes", np.array([1, 2], np.int64))]
    return model(nodes, [vi("x", ["n", 3, 3])], [vi("y", ["n"])], inits, extra_opsets=MS)


def _reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _x(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 3, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def mixed_module():
    return from_onnx(_mixed(), fallback="onnxruntime")


def test_unsupported_nodes_become_onnxruntime_functions_with_symbolic_sizes(mixed_module):
    mod = mixed_module
    assert offloaded_nodes(mod.attrs["external_mods"]) == {
        "onnxruntime_fallback_0": ["'det_x' (Det)"],
        "onnxruntime_fallback_1": ["'fm' (com.microsoft::FusedMatMul)", "'det' (Det)"],
    }
    main = mod["main"]
    assert isinstance(main, Function)
    calls = [b.value for blk in main.body.blocks for b in blk.bindings
             if getattr(getattr(b.value, "op", None), "name", None) == "call_extern"]
    assert [c.args[0].symbol for c in calls] == ["onnxruntime_fallback_0",
                                                 "onnxruntime_fallback_1"]
    # the sizes stay symbolic: (n,) for det_x, ((n, 3, 3), (n,)) for the FusedMatMul group
    assert calls[0].ty == plait.ir.TensorType(("n",), "float32")
    assert [t.shape for t in calls[1].ty.fields] == [("n", 3, 3), ("n",)]
    # what plait converts stays plait's: no other extern call
    ops = {getattr(getattr(b.value, "op", None), "name", None)
           for blk in main.body.blocks for b in blk.bindings}
    assert {"relu", "add", "sigmoid", "sum", "multiply"} <= ops


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_the_model_matches_onnxruntime_at_two_sizes_and_after_save_and_load(
        mixed_module, target, tmp_path):
    m = _mixed()
    exe = plait.build(mixed_module, target)
    path = tmp_path / f"fallback-{target}.plx"
    exe.save(path)
    for e in (exe, Executable.load(path)):
        vm = VirtualMachine(e)
        for n in (1, 5):
            got = np.asarray(vm["main"](_x(n)))
            np.testing.assert_allclose(got, _reference(m, _x(n)), rtol=RTOL, atol=1e-6)


def test_a_session_takes_the_fallback():
    sess = plait.load(_mixed(), "numpy", fallback="onnxruntime")
    got = sess.run({"x": _x(2)})["y"]
    np.testing.assert_allclose(got, _reference(_mixed(), _x(2)), rtol=RTOL, atol=1e-6)


def test_without_the_fallback_every_unsupported_node_and_the_option_are_named():
    with pytest.raises(OnnxImportError) as info:
        from_onnx(_mixed())
    text = str(info.value)
    assert info.value.unsupported == {"Det": ["det", "det_x"],
                                      "com.microsoft::FusedMatMul": ["fm"]}
    assert "unsupported operator Det (opset 17): nodes 'det', 'det_x'" in text
    assert "unsupported operator com.microsoft::FusedMatMul (opset 1): nodes 'fm'" in text
    assert 'fallback="onnxruntime"' in text and "--fallback onnxruntime" in text
    assert "--offload onnxruntime" in text
    with pytest.raises(OnnxImportError, match="fallback='tvm' is not a fallback plait knows"):
        from_onnx(_mixed(), fallback="tvm")


def test_the_cli_names_the_nodes_it_hands_to_onnxruntime(tmp_path, capsys):
    path = str(tmp_path / "mixed.onnx")
    onnx.save(_mixed(), path)
    code = cli.main(["run", path, "--fallback", "onnxruntime", "--shape", "x=4,3,3",
                     "--compare", "onnxruntime"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "onnxruntime runs 3 nodes plait cannot import, as 2 functions:" in out
    assert "onnxruntime_fallback_1: 'fm' (com.microsoft::FusedMatMul), 'det' (Det)" in out
    assert out.rstrip().endswith("PASS")
    plx = str(tmp_path / "mixed.plx")
    code = cli.main(["compile", path, "-o", plx, "--offload", "onnxruntime",
                     "--target", "numpy"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "onnxruntime_fallback_0: 'det_x' (Det)" in out
    assert cli.main(["run", plx]) == 0
    assert "onnxruntime_fallback_0: 'det_x' (Det)" in capsys.readouterr().out
    code = cli.main(["run", path])
    _, err = capsys.readouterr()
    assert code == 2 and "--fallback onnxruntime" in err and "'det_x'" in err


def test_a_kept_graph_with_fallback_models_round_trips_under_the_trust_policy(
        mixed_module, tmp_path, monkeypatch):
    path = tmp_path / "fallback.plx"
    plait.build(mixed_module, "c").save(path)
    # the kept graph prints and parses the external module (its models as constants)
    exe = Executable.load(path)
    mod = plait.graph_module(exe)
    assert mod.attrs["external_mods"] == mixed_module.attrs["external_mods"]
    # from a file nobody vouched for, the models are code that needs consent
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "other-machine"))
    foreign = Executable.load(path)
    with pytest.raises(UntrustedCodeError, match="external modules"):
        plait.rebuild(foreign, "numpy")
    rebuilt = plait.rebuild(foreign, "numpy", allow_native=True)
    got = np.asarray(VirtualMachine(rebuilt)["main"](_x(3)))
    np.testing.assert_allclose(got, _reference(_mixed(), _x(3)), rtol=RTOL, atol=1e-6)


def test_a_group_on_constants_runs_once_at_import_and_a_group_may_end_the_graph():
    w = np.random.default_rng(0).standard_normal((3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Det", ["W"], ["dw"], name="det_w"),
             helper.make_node("Add", ["x", "dw"], ["a"], name="add"),
             helper.make_node("Det", ["a"], ["y"], name="det")]
    m = model(nodes, [vi("x", [2, 3, 3])], [vi("y", [2])], [init("W", w)])
    mod = from_onnx(m, fallback="onnxruntime")
    assert offloaded_nodes(mod.attrs["external_mods"]) == {
        "onnxruntime_fallback_0": ["'det' (Det)"]}
    assert mod.script().count("call_extern(") == 1
    (add,) = [b.value for blk in mod["main"].body.blocks for b in blk.bindings
              if getattr(getattr(b.value, "op", None), "name", None) == "add"]
    np.testing.assert_allclose(add.args[1].data, np.linalg.det(w), rtol=RTOL)
    x = _x(2)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.asarray(VirtualMachine(plait.build(mod, "c"))["main"](x)),
                               ref, rtol=RTOL, atol=1e-6)


def test_a_size_that_depends_on_the_data_is_refused_naming_the_node():
    nodes = [helper.make_node("Relu", ["boxes"], ["b"], name="relu"),
             helper.make_node("NonMaxSuppression", ["b", "scores"], ["sel"], name="nms"),
             helper.make_node("Cast", ["sel"], ["y"], to=TensorProto.FLOAT, name="cast")]
    m = model(nodes, [vi("boxes", [1, 4, 4]), vi("scores", [1, 1, 4])], [vi("y", None)])
    with pytest.raises(OnnxImportError) as info:
        from_onnx(m, fallback="onnxruntime")
    text = str(info.value)
    assert "node 'nms' (NonMaxSuppression)" in text and "cannot type 'sel'" in text
    assert "a size that depends on the data" in text


def test_a_control_flow_node_with_an_unsupported_node_inside_goes_whole():
    then = helper.make_graph([helper.make_node("Det", ["x"], ["t"], name="det_in")], "then",
                             [], [vi("t", [2])])
    other = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["u"], keepdims=0,
                                                name="sum_in")], "else", [], [vi("u", [2])])
    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0, name="max"),
             helper.make_node("Greater", ["mx", "zero"], ["c"], name="gt"),
             helper.make_node("Neg", ["x"], ["nx"], name="neg"),
             helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other,
                              name="if"),
             helper.make_node("Add", ["r", "nx"], ["y"], name="add")]
    m = model(nodes, [vi("x", [2, 2, 2])], [vi("y", [2, 2, 2])],
              [init("zero", np.float32(0)), init("axes", np.array([1, 2], np.int64))],
              opset=13)
    mod = from_onnx(m, fallback="onnxruntime")
    # the If reads the condition and captures x and the initializer axes
    assert offloaded_nodes(mod.attrs["external_mods"]) == {
        "onnxruntime_fallback_0": ["'if' (If)"]}
    (ext,) = mod.attrs["external_mods"]
    assert ext.meta["graphs"]["onnxruntime_fallback_0"]["inputs"] == ["c", "x"]
    x = np.random.default_rng(2).standard_normal((2, 2, 2)).astype(np.float32)
    got = np.asarray(VirtualMachine(plait.build(mod, "numpy"))["main"](x))
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-6)


# ------------------------------------------------------------------ grouping


def _chain(ops: list[tuple[str, list[str], str]]) -> onnx.GraphProto:
    nodes = [helper.make_node(op, ins, [out], name=out) for op, ins, out in ops]
    return helper.make_graph(nodes, "g", [vi("x", [2, 2])], [vi(ops[-1][2], [2, 2])])


def _groups(graph: onnx.GraphProto) -> list[list[str]]:
    plan = plan_fallback(graph, {"": 17})
    assert plan is not None
    return [[n.name for n in g.nodes] for g in plan.groups]


def test_groups_are_maximal_connected_runs_that_never_make_a_cycle():
    # Det -> Det is one run; two runs feeding one unsupported node merge into it
    assert _groups(_chain([("Det", ["x"], "a"), ("Det", ["a"], "b"), ("Relu", ["b"], "c")])) \
        == [["a", "b"]]
    assert _groups(_chain([("Det", ["x"], "a"), ("Det", ["x"], "b"),
                           ("Det", ["a", "b"], "c")])) == [["a", "b", "c"]]
    # a -> relu -> c and a -> c: one group {a, c} would read relu's result, which reads
    # the group's own result: a cycle, so c starts a group of its own
    plan = plan_fallback(_chain([("Det", ["x"], "a"), ("Relu", ["a"], "r"),
                                 ("Det", ["a", "r"], "c")]), {"": 17})
    assert plan is not None
    assert [[n.name for n in g.nodes] for g in plan.groups] == [["a"], ["c"]]
    order = [u.nodes[0].name if hasattr(u, "nodes") else u.name for u in plan.units]
    assert order == ["a", "r", "c"]
    assert plan.groups[0].outputs == ["a"] and plan.groups[1].inputs == ["a", "r"]


def test_planning_a_long_chain_is_iterative_and_linear():
    n = 100_000
    ops = [("Det" if i % 1000 == 500 else "Relu", ["x" if i == 0 else f"v{i - 1}"], f"v{i}")
           for i in range(n)]
    plan = plan_fallback(_chain(ops), {"": 17})
    assert plan is not None and len(plan.groups) == 100 and len(plan.units) == n
    assert plan.groups[3].inputs == ["v3499"] and plan.groups[3].outputs == ["v3500"]


def test_the_fallback_models_keep_no_external_data():
    """What the importer reads from external data files goes into the sub-models as
    initializers: the executable names no file (docs/reliability.md)."""
    mod = from_onnx(_mixed(), fallback="onnxruntime")
    from plait.runtime.onnx_wire import external_data_tensors

    (ext,) = mod.attrs["external_mods"]
    assert all(external_data_tensors(b) == [] for b in ext.blobs.values())


def test_for_codegen_on_a_module_with_only_fallback_functions_does_nothing(mixed_module):
    """The fallback's onnxruntime modules are not compiled partitions: ForCodegen finds no
    function of its codegen and leaves the module as it is (it used to claim RunCodegen
    had already run)."""
    from plait.transform import ForCodegen
    from plait.transform.fold_constant import FoldConstant

    mod = mixed_module.with_attrs(phase="optimization")
    assert ForCodegen("onnxruntime", [FoldConstant()])(mod) is mod
