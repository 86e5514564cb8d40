"""Search spaces as data (plait/target/c/tuning/space.py): every family's default
point is the heuristic's choice (the same calls, byte for byte, as a build without a
database), and every other point of the small model's spaces computes the right
answer (against a float64 numpy reference, tuning_models.reference)."""

from __future__ import annotations

import numpy as np
import pytest
from tuning_models import reference, sample_input, small_model

import plait
from plait.runtime import VirtualMachine
from plait.target.c.dispatch.depthwise import dwconv_space
from plait.target.c.dispatch.gemm import conv2d_space, gemm_space
from plait.target.c.tuning import SPACES, Choice, Record, SearchSpace, TuningDB, current_machine

pytestmark = pytest.mark.skipif(plait.codegen.c.find_compiler() is None,
                                reason="needs a C compiler")


def _conv(c: int, o: int, hw: int, k: int = 3, s: int = 1) -> dict[str, int]:
    oh = (hw + 2 * (k // 2) - k) // s + 1
    return dict(N=1, C=c, H=hw, W=hw, O=o, KH=k, KW=k, SH=s, SW=s, DH=1, DW=1,
                PT=k // 2, PL=k // 2, PB=k // 2, PR=k // 2, OH=oh, OW=oh)


@pytest.mark.parametrize("desc, expected", [
    # docs/targets.md, the winograd attribute: F(4x4) on large images, F(2x2) near
    # 14 x 14, not Winograd on 7 x 7, where ResNet's layers take pixels as rows
    # (pixel_rows_applies' docstring)
    (_conv(64, 64, 56), "winograd4"),
    (_conv(256, 256, 14), "winograd2"),
    (_conv(512, 512, 7), "pixel_rows"),
    # fewer than 16 input channels: no Winograd (winograd_applies)
    (_conv(3, 64, 56), "direct"),
    # 1x1 convolutions 960 -> 320 and 160 -> 960 on 7 x 7: pixels as rows
    # (dispatch/gemm.py, PIXEL_ROWS_MIN_K's measurement); 32 -> 256 has too short a sum
    (_conv(960, 320, 7, k=1), "pixel_rows"),
    (_conv(160, 960, 7, k=1), "pixel_rows"),
    (_conv(32, 256, 7, k=1), "direct"),
])
def test_conv2d_default_point_is_the_heuristic(desc: dict[str, int], expected: str) -> None:
    space = conv2d_space(desc, "auto", 2)
    assert space is not None and space.default_point() == {
        "algorithm": expected, "threads": 0, "split": "auto", "kc": 0, "mc": 0, "nc": 0}
    assert expected in space.choices[0].values


def test_forced_winograd_leaves_no_choice() -> None:
    assert conv2d_space(_conv(64, 64, 56), 2).choices[0].values == ("winograd2",)
    assert "winograd4" not in conv2d_space(_conv(64, 64, 56), 0).choices[0].values


def test_spaces_validate_points() -> None:
    s = dwconv_space(dict(_conv(32, 32, 56), G=32), 2)
    assert s is not None and s.default_point() == {"layout": "auto", "threads": 0}
    assert set(s.choices[0].values) == {"auto", "planes", "lanes", "rows"}
    assert s.contains({"layout": "lanes", "threads": 1})
    assert not s.contains({"layout": "lanes", "threads": 5})        # out of range
    assert not s.contains({"layout": "lanes"})                       # a choice missing
    assert not s.contains({"layout": "lanes", "threads": "1"})       # wrong type
    grouped = dwconv_space(dict(_conv(32, 64, 56), G=16), 2)         # 2 in, 4 out a group
    assert grouped is not None and grouped.choices[0].values == ("auto", "planes")
    # constant weights: a product per group is a layout too, the default from 8
    # channels per group (dispatch/depthwise.py, grouped_default)
    wide = dwconv_space(dict(_conv(128, 128, 7), G=2), 2, product=True)   # 64 a group
    assert wide is not None and wide.default_point() == {
        "layout": "product", "threads": 0, "split": "auto", "kc": 0, "mc": 0, "nc": 0}
    # the product per group's split and blocks, free for the layout product only
    assert wide.contains({**wide.default_point(), "kc": 96})
    assert not wide.contains({**wide.default_point(), "layout": "winograd2", "kc": 96})
    assert wide.choices[0].values == ("auto", "planes", "product", "product_rows",
                                      "winograd2", "winograd4")
    # Winograd per group where winograd_choice picks it for one group (RegNet's 56 x 56
    # and 28 x 28: F(4x4); 14 x 14: F(2x2)); a forced variant is the only one, 0 none
    assert dwconv_space(dict(_conv(128, 128, 28), G=2), 2, product=True).default_point()[
        "layout"] == "winograd4"
    assert dwconv_space(dict(_conv(128, 128, 14), G=2), 2, product=True).default_point()[
        "layout"] == "winograd2"
    forced = dwconv_space(dict(_conv(128, 128, 28), G=2), 2, product=True, winograd=2)
    assert forced is not None and forced.choices[0].values[-1] == "winograd2"
    assert "winograd4" not in forced.choices[0].values
    off = dwconv_space(dict(_conv(128, 128, 28), G=2), 2, product=True, winograd=0)
    assert off is not None and off.default_point()["layout"] == "product"
    assert not any("winograd" in str(v) for v in off.choices[0].values)
    few = dwconv_space(dict(_conv(32, 32, 14), G=8), 2, product=True)     # 4 a group
    assert few is not None and few.default_point()["layout"] == "auto"
    assert "product_rows" in few.choices[0].values
    depthwise = dwconv_space(dict(_conv(32, 32, 14), G=32), 2, product=True)
    assert depthwise is not None and "product" not in depthwise.choices[0].values
    tiny = gemm_space(dict(M=1, N=8, K=8, batch=1), 2)
    assert tiny is not None and tiny.size() == 1                     # one thread anyway
    big = gemm_space(dict(M=64, N=512, K=512, batch=1), 2)
    assert big is not None and big.default_point() == {
        "threads": 0, "split": "auto", "kc": 0, "mc": 0, "nc": 0}
    # K 512: the rule's 2 blocks of 256; 96, 128 and 192 block it otherwise (5, 4, 3
    # blocks), 256 does not; 64 rows: mc 24 and 48 (192 is one block, as 96); nc
    # below 512; the split only on all threads
    values = {c.name: c.values for c in big.choices}
    assert values == {"threads": (0, 1), "split": ("auto", "columns", "rows"),
                      "kc": (0, 96, 128, 192), "mc": (0, 24, 48),
                      "nc": (0, 64, 128, 256)}
    assert big.size() == (3 + 1) * 4 * 3 * 4
    assert len(s.points()) == s.size() and s.points()[0] == s.default_point()
    assert SPACES == {"conv2d": conv2d_space, "gemm": gemm_space, "dwconv2d": dwconv_space}


def test_conditional_choices() -> None:
    """A choice is free only where its ``when`` holds; elsewhere it takes its first
    (neutral) value: Winograd runs no product, so no thread cap, split or block; one
    thread has no split.  A record of an older space (fewer choices) is completed with
    the neutral values, and the space travels as data (the tuner's workers)."""
    s = conv2d_space(_conv(64, 64, 56), "auto", 2)
    assert s is not None and s.default_point()["algorithm"] == "winograd4"
    base = s.default_point()
    assert s.contains(base)
    assert not s.contains({**base, "threads": 1})                       # Winograd
    assert not s.contains({**base, "kc": 96})
    assert s.contains({**base, "algorithm": "pixel_rows", "threads": 1})
    assert not s.contains({**base, "algorithm": "pixel_rows", "nc": 64})
    assert s.contains({**base, "algorithm": "direct", "nc": 64, "kc": 96, "mc": 24})
    assert not s.contains({**base, "algorithm": "direct", "threads": 1, "split": "rows"})
    pts = s.points()
    assert len(pts) == s.size() == len({tuple(sorted(p.items())) for p in pts})
    assert all(s.contains(p) for p in pts)
    assert [s.distance(p) for p in pts] == sorted(s.distance(p) for p in pts)
    assert s.complete({"algorithm": "pixel_rows"}) == {**base, "algorithm": "pixel_rows"}
    assert SearchSpace.from_json(s.as_json()) == s
    short = gemm_space(dict(M=64, N=512, K=300, batch=1), 2)
    assert short is not None and "kc" in dict(short.default) and \
        {c.name: c.values for c in short.choices}["kc"] == (0, 96, 128, 192)  # 256: 2 x 150 too
    with pytest.raises(ValueError, match="depends on"):
        SearchSpace("x", (Choice("a", (0, 1), when=(("b", (0,)),)),), (("a", 0),))


def _c_sources(exe: plait.Executable) -> list[str]:
    return sorted(lit["code"] for lit in exe.attrs.get("c_sources", ()) or ())


def test_default_points_reproduce_todays_calls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A build with an empty database makes the same native calls (wrappers byte for
    byte) as one without: the default points are today's choices."""
    mod = small_model()
    plain = plait.build(mod, "c")
    db = tmp_path / "t.db"
    TuningDB(db)
    tuned = plait.build(mod, plait.Target("c", tuning_db=str(db)))
    calls = tuned.attrs["tuning"]
    assert {v["op"] for v in calls.values()} == {"conv2d", "dwconv2d", "linear"}
    assert all(v["origin"] == "default" for v in calls.values())
    assert [i for i in map(str, plain.functions["main"].instructions)] == \
        [i for i in map(str, tuned.functions["main"].instructions)]
    assert plain.libs == tuned.libs


def _points(mod: plait.IRModule, db: str) -> dict[str, dict]:
    """{op: (call key, space)} of the model's tunable calls."""
    exe = plait.build(mod, plait.Target("c", tuning_db=db))
    return {v["op"]: (v["call"], v["space"]) for v in exe.attrs["tuning"].values()}


def _each_value(space: SearchSpace) -> list[dict]:
    """For each value of each choice other than the default's, the point nearest the
    default that takes it (SearchSpace.points orders them so): every value built once,
    not every combination (hundreds of builds)."""
    out: list[dict] = []
    default = space.default_point()
    for c in space.choices:
        for v in c.values:
            if v != default[c.name]:
                p = next(p for p in space.points() if p[c.name] == v)
                if p not in out:
                    out.append(p)
    return out


def test_every_value_computes_the_right_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each value of each choice of the small model's spaces (the point nearest the
    default that takes it: a block size with the direct algorithm; one family at a
    time, the others at their defaults), built from a database record, against numpy in
    float64: rtol 1e-4 and atol 2e-3 (Winograd F(4x4, 3x3) rounds its transforms; sums
    of 144 products of values in [-1, 1])."""
    mod = small_model()
    x = sample_input()
    expected = reference(x)
    empty = tmp_path / "empty.db"
    TuningDB(empty)
    calls = _points(mod, str(empty))
    machine = current_machine()
    tried: dict[str, set[str]] = {}
    for op, (key, data) in calls.items():
        for i, point in enumerate(_each_value(SearchSpace.from_json(data))):
            db = tmp_path / f"{op}-{i}.db"
            TuningDB(db).add([Record(key, op, machine, point, 1e-3, 2e-3)])
            exe = plait.build(mod, plait.Target("c", tuning_db=str(db)))
            noted = [v for v in exe.attrs["tuning"].values() if v["op"] == op]
            assert noted and all(v["origin"] == "database" and v["point"] == point
                                 for v in noted), noted
            got = VirtualMachine(exe)["main"](x)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-3,
                                       err_msg=f"{op} at {point}")
            tried.setdefault(op, set()).update(k for k, v in point.items()
                                               if v != data["default"][k])
    # conv: the 3 other algorithms, a block of each size and a split; the linear
    # layer's sum block; dwconv: 3 other layouts
    assert {"algorithm", "split", "kc", "mc", "nc"} <= tried["conv2d"]
    assert "kc" in tried["linear"] and "layout" in tried["dwconv2d"]


def test_grouped_product_blocks_compute_the_right_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A grouped convolution computed as a product per group (RegNet's kind: 16
    channels in and 64 out a group) with a split and every block size of its space set, from a
    database record, against numpy in float64 (rtol 1e-4, atol 1e-3: sums of 144
    products of values in [-1, 1])."""
    from tuning_models import build_graph, const, conv_ref, emit

    rng = np.random.default_rng(7)
    w = rng.uniform(-1, 1, (128, 16, 3, 3)).astype(np.float32)
    x = rng.uniform(-1, 1, (1, 32, 12, 12)).astype(np.float32)
    mod = build_graph({"x": x.shape}, lambda bb, p: emit(
        bb, "conv2d", p[0], const(w), padding=(1, 1), groups=2))
    empty = tmp_path / "empty.db"
    TuningDB(empty)
    (noted,) = plait.build(mod, plait.Target("c", tuning_db=str(empty))).attrs[
        "tuning"].values()
    space = SearchSpace.from_json(noted["space"])
    values = {c.name: c.values for c in space.choices}
    point = {**space.default_point(), "layout": "product", "split": values["split"][-1],
             "kc": values["kc"][1], "mc": values["mc"][1], "nc": values["nc"][1]}
    assert space.contains(point) and 0 not in (point["kc"], point["mc"], point["nc"])
    db = tmp_path / "grouped.db"
    TuningDB(db).add([Record(noted["call"], "dwconv2d", current_machine(), point, 1e-3, 2e-3)])
    exe = plait.build(mod, plait.Target("c", tuning_db=str(db)))
    (got_point,) = [v["point"] for v in exe.attrs["tuning"].values()]
    assert got_point == point
    # the call sets the blocks (plait_conv2d_desc's fields, which the product takes)
    from plait.ir.expr import Call
    from plait.target.c.dispatch.depthwise import plan_grouped_conv2d
    from plait.target.c.tuning import Chooser

    conv = next(b.value for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, Call))
    fields = dict(plan_grouped_conv2d(conv, Chooser(str(db))).native_call().desc)
    assert {k: fields.get(k) for k in ("kc", "mc", "nc")} == {
        k: point[k] for k in ("kc", "mc", "nc")}
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), conv_ref(x, w, groups=2),
                               rtol=1e-4, atol=1e-3)
