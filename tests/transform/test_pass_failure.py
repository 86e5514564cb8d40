"""Failures: PassError context, reproducers and replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transform_testlib import BASIC, P, Tag

from plait.ir import Function, IRModule, SeqExpr, assert_structural_equal
from plait.ir.well_formed import iter_bindings
from plait.transform import (
    ImmutabilityCheck,
    ImmutabilityError,
    PassContext,
    PassError,
    ReplayError,
    Sequential,
    function_pass,
    module_pass,
    replay,
)

TWO = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def helper(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            b = abs(a)
            return b

        @function
        def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            y = relu(x)
            z = cls.helper(y)
            return z
"""

BUG = {"armed": True}


@function_pass(name="test.Crash")
def crash(func: Function) -> Function:
    """Crash on functions that call relu (while the bug is armed)."""
    for b, _ in iter_bindings(func):
        if BUG["armed"] and "relu" in repr(b.value):
            raise ValueError("cannot handle relu here")
    return func


def test_pass_error_names_pass_phase_and_function() -> None:
    with pytest.raises(PassError) as info:
        Sequential([Tag(), crash])(P(TWO))
    err = info.value
    assert (err.pass_name, err.phase, err.function, err.reproducer) == (
        "test.Crash", "optimization", "main", None)
    assert isinstance(err.__cause__, ValueError)
    assert str(err) == ("pass 'test.Crash' failed in phase optimization while transforming "
                        "function 'main': ValueError: cannot handle relu here")


def test_crash_writes_a_reproducer_that_replays(tmp_path: Path) -> None:
    BUG["armed"] = True
    config = {"transform.reproducer_dir": str(tmp_path), "transform.check_transitions": True}
    with PassContext(opt_level=3, config=config):
        with pytest.raises(PassError) as info:
            Sequential([Tag(value="before-crash"), crash], name="pipe")(P(TWO))
    err = info.value
    path = Path(err.reproducer)  # type: ignore[arg-type]
    assert path.parent == tmp_path and path.name == "000_test.Crash"
    assert f"a reproducer was written to {path}" in str(err)
    meta = json.loads((path / "reproducer.json").read_text())
    assert meta["pass"] == "test.Crash"
    assert meta["pipeline"] == "pipe[test.Tag(value='before-crash'),test.Crash]"
    assert meta["function"] == "main"
    assert meta["context"]["opt_level"] == 3
    assert "transform.reproducer_dir" not in meta["context"]["config"]
    assert meta["error"]["type"] == "builtins.ValueError"
    # the module is the one the failing pass received (after Tag), in the text format
    received = P((path / "module.py").read_text())
    assert_structural_equal(received, P(TWO).with_attrs(tag="before-crash"))

    with pytest.raises(PassError) as again:
        replay(path)
    e2 = again.value
    assert (e2.pass_name, e2.phase, e2.function) == (err.pass_name, err.phase, err.function)
    assert type(e2.__cause__) is type(err.__cause__)
    assert str(e2.__cause__) == str(err.__cause__)
    assert e2.reproducer is None and len(list(tmp_path.iterdir())) == 1  # no new reproducer

    BUG["armed"] = False  # "fix the bug": the replay now succeeds
    try:
        assert_structural_equal(replay(path / "reproducer.json"), received)
    finally:
        BUG["armed"] = True


@module_pass(name="test.Cheat", register=False)
def cheat(mod: IRModule) -> IRModule:
    """Mutate the input in place (an unregistered, module-level pass)."""
    f = mod["main"]
    assert isinstance(f, Function) and isinstance(f.body, SeqExpr)
    object.__setattr__(f.body.blocks[0].bindings[0], "value", f.params[0])
    return mod


def test_a_failed_check_writes_a_reproducer_too(tmp_path: Path) -> None:
    with PassContext(instruments=[ImmutabilityCheck()],
                     config={"transform.reproducer_dir": str(tmp_path)}):
        with pytest.raises(ImmutabilityError) as info:
            cheat(P(BASIC))
    path = info.value.reproducer
    assert path is not None and "plait.transform.replay(" in str(info.value)
    meta = json.loads((Path(path) / "reproducer.json").read_text())
    assert meta["check"] == "immutability" and meta["python"].endswith(":cheat")
    with pytest.raises(ImmutabilityError, match="pass 'test.Cheat' modified the module"):
        replay(path)


def test_replay_explains_what_it_cannot_find(tmp_path: Path) -> None:
    @module_pass(name="test.LocalCrash", register=False)
    def local_crash(mod: IRModule) -> IRModule:
        raise RuntimeError("boom")

    with PassContext(config={"transform.reproducer_dir": str(tmp_path)}):
        with pytest.raises(PassError) as info:
            local_crash(P(BASIC))
    with pytest.raises(ReplayError, match="define it at module level"):
        replay(info.value.reproducer)  # type: ignore[arg-type]
    with pytest.raises(ReplayError, match="no reproducer at"):
        replay(tmp_path / "missing")


def _hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **meta: object) -> Path:
    """A reproducer written by someone else: a real one (of cheat) with ``meta``
    replaced, and a module ``plait_evil_pass.py`` next to it that writes ``marker`` when
    imported; the working directory is the reproducer's (where an import would look)."""
    with PassContext(instruments=[ImmutabilityCheck()],
                     config={"transform.reproducer_dir": str(tmp_path)}):
        with pytest.raises(ImmutabilityError) as info:
            cheat(P(BASIC))
    path = Path(info.value.reproducer)  # type: ignore[arg-type]
    data = json.loads((path / "reproducer.json").read_text())
    data.update(meta)
    (path / "reproducer.json").write_text(json.dumps(data))
    (path / "plait_evil_pass.py").write_text(
        "import pathlib\npathlib.Path('marker').write_text('imported')\n"
        "class Evil:\n    pass\n")
    monkeypatch.chdir(path)
    monkeypatch.syspath_prepend(str(path))  # as for python -c or a notebook started there
    return path


@pytest.mark.parametrize("pass_text, python, why", [
    # before: subprocess.Popen(args=[...]) ran the command
    ("Evil(args=['sh', '-c', 'echo ran > marker'])", "subprocess:Popen",
     "cannot find pass 'Evil' at subprocess:Popen: it is a Popen, not a pass"),
    # before: the reproducer's own plait_evil_pass.py was imported (and ran)
    ("Evil", "plait_evil_pass:Evil", "its module 'plait_evil_pass' is not imported; import "
     "plait_evil_pass .* before replay: a reproducer never imports the modules it names"),
    ("Evil", "os:nothing_here", "cannot find pass 'Evil' at os:nothing_here: nothing there"),
])
def test_a_reproducer_from_elsewhere_runs_nothing_but_a_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pass_text: str, python: str,
        why: str) -> None:
    import subprocess  # noqa: F401  (imported, so only the pass check stops Popen)

    path = _hostile(tmp_path, monkeypatch, **{"pass": pass_text, "python": python})
    with pytest.raises(ReplayError, match=why):
        replay(path)
    assert not (path / "marker").exists()


def test_a_reproducer_reads_only_its_own_files(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret.txt").write_text("the secret")
    for name in ("../secret.txt", str(tmp_path / "secret.txt"), "", None, ".."):
        path = _hostile(tmp_path / str(abs(hash(name))), monkeypatch, module_file=name)
        with pytest.raises(ReplayError, match="module_file must name a file of the "
                           "reproducer's directory") as info:
            replay(path)
        assert "the secret" not in str(info.value)
