"""End-to-end on the ``c`` target: the models of test_numpy_models.py (their text is
imported from there) built for ``c`` — generated kernels, plait's own product for
matmul/linear (taking the symbolic batch at run time), BLAS for a conv2d of parameter
weights — and, with ``Target("c", blas=False, gemm=False)``, entirely from generated
kernels; matched
against the same independent numpy computations with the same tolerances.  Also: the
cache (a second build compiles nothing), and save/load of the executable in a process
that has no C compiler."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_numpy_models import ATTENTION, CONV_BLOCK, MLP, naive_conv2d_same

import plait
from plait.codegen.c import compile_stats
from plait.runtime import Executable, VirtualMachine
from plait.transform import PassContext, WellFormedCheck

RNG = np.random.default_rng(7)
RTOL, ATOL = 1e-5, 1e-5
TARGETS = [plait.Target("c"), plait.Target("c", blas=False, gemm=False)]
IDS = ["c", "c-kernels-only"]


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def build(text: str, target: plait.Target) -> Executable:
    with PassContext(instruments=[WellFormedCheck()]):
        return plait.build(plait.parse(text), target)


def calls(exe: Executable) -> list[str]:
    return [i.func for i in exe.functions["main"].instructions
            if hasattr(i, "func") and not i.func.startswith("vm.builtin.")]


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_mlp_on_c_matches_numpy_for_several_batch_sizes(target: plait.Target) -> None:
    w1, b1, w2, b2 = randn(64, 32, scale=0.2), randn(32), randn(10, 32, scale=0.2), randn(10)
    exe = build(MLP, target)
    names = calls(exe)
    assert not [c for c in names if c.startswith("numpy.")], names  # nothing left to numpy
    assert not [c for c in names if c.startswith("blas.")], names
    assert any(c.startswith("plait_gemm_") for c in names) == target.attrs["gemm"]
    vm = VirtualMachine(exe)
    for n in (1, 5):
        x = randn(n, 64)
        got = vm["main"](x, w1, b1, w2, b2)
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2.T + b2
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
        assert got.shape == (n, 10)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_conv_batchnorm_relu_pool_on_c_matches_numpy(target: plait.Target) -> None:
    x, w = randn(2, 3, 10, 10), randn(8, 3, 3, 3, scale=0.3)
    gamma, beta, mean = randn(8), randn(8), randn(8)
    var = np.abs(randn(8)) + 0.5
    exe = build(CONV_BLOCK, target)
    assert ("blas.conv2d" in calls(exe)) == target.attrs["blas"]
    got = VirtualMachine(exe)["main"](x, w, gamma, beta, mean, var)
    c = naive_conv2d_same(x, w)
    bn = (c - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * gamma[
        :, None, None
    ] + beta[:, None, None]
    want = np.maximum(bn, 0).reshape(2, 8, 5, 2, 5, 2).max(axis=(3, 5))
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-4, atol=1e-5)
    assert 0 < exe.attrs["planned_peak_bytes"] <= exe.attrs["naive_peak_bytes"]


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_self_attention_block_on_c_matches_numpy(target: plait.Target) -> None:
    x = randn(1, 16, 32)
    wq, wk, wv, wo = (randn(32, 32, scale=0.2) for _ in range(4))
    g, b = randn(32), randn(32)
    exe = build(ATTENTION, target)
    assert not [c for c in calls(exe) if c.startswith("numpy.")]
    got = VirtualMachine(exe)["main"](x, wq, wk, wv, wo, g, b)
    q = (x @ wq).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    k = (x @ wk).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    v = (x @ wv).reshape(1, 16, 4, 8).transpose(0, 2, 1, 3)
    s = q @ k.transpose(0, 1, 3, 2) * np.float32(0.35355339)
    e = np.exp(s - s.max(-1, keepdims=True))
    a = e / e.sum(-1, keepdims=True)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(1, 16, 32)
    y = x + ctx @ wo
    mu = y.mean(-1, keepdims=True)
    sd = np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = (y - mu) / sd * g + b
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)


def test_second_build_of_a_model_compiles_nothing() -> None:
    mod = plait.parse(ATTENTION)
    plait.build(mod, "c")
    before = compile_stats()
    exe = plait.build(plait.parse(ATTENTION), "c")
    after = compile_stats()
    assert after["compiles"] == before["compiles"]
    assert after["cache_hits"] == before["cache_hits"] + 1
    assert list(exe.libs) == ["c"]


def test_saved_executable_runs_where_there_is_no_compiler(tmp_path: Path) -> None:
    w1, b1, w2, b2 = randn(64, 32), randn(32), randn(10, 32), randn(10)
    x = randn(3, 64)
    exe = plait.build(plait.parse(MLP), "c")
    path = tmp_path / "mlp.plx"
    key = bytes(range(32))  # shared with the machine that runs it (an HMAC secret)
    exe.save(path, sign_key=key)
    np.savez(tmp_path / "io.npz", x=x, w1=w1, b1=b1, w2=w2, b2=b2,
             want=VirtualMachine(exe)["main"](x, w1, b1, w2, b2))
    script = textwrap.dedent(f"""
        import shutil, numpy as np
        assert shutil.which("cc") is None and shutil.which("gcc") is None
        import plait
        from plait.codegen.c import NativeUnavailableError, find_compiler
        try:
            find_compiler()
            raise SystemExit("a compiler was found")
        except NativeUnavailableError:
            pass
        from plait.runtime import Executable, VirtualMachine
        d = np.load({str(tmp_path / "io.npz")!r})
        from plait.runtime.trust import UntrustedCodeError
        try:  # another machine: its own key did not sign the file
            VirtualMachine(Executable.load({str(path)!r}))
            raise SystemExit("native code of an unsigned file ran")
        except UntrustedCodeError:
            pass
        vm = VirtualMachine(Executable.load({str(path)!r}, trusted_keys=[{key!r}]))
        got = vm["main"](d["x"], d["w1"], d["b1"], d["w2"], d["b2"])
        np.testing.assert_array_equal(got, d["want"])
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "PATH")}
    env["PATH"] = str(tmp_path)  # no compiler there
    env["PLAIT_CACHE_DIR"] = str(tmp_path / "empty-cache")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(plait.__file__).parents[1]),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
