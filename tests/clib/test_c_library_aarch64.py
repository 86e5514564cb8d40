"""A C library cross-compiled for aarch64 (``export_library(..., cc=
"aarch64-linux-gnu-gcc")``, what ``plait compile --emit library --cc ...`` runs) runs
under qemu: examples/c_api's runner, built for aarch64 with its Makefile (``CC=``),
loads it and its outputs match onnxruntime's (rtol 1e-4, atol 1e-5, the tolerance of
tests/e2e) for two batch sizes of the symbolic batch; the libraries are aarch64 ELF
files.  The plait cache is tests/target/test_native_aarch64.py's, so the
kernel families' aarch64 objects are compiled once for both.  Skipped where the cross
compiler, its C library or qemu is missing (.ci/run installs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from clib_helpers import EXAMPLE, ROOT, sample

import plait
from plait.frontend import from_onnx

ort = pytest.importorskip("onnxruntime")

CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
SYSROOT = Path("/usr/aarch64-linux-gnu")
pytestmark = pytest.mark.skipif(
    shutil.which(CC) is None or shutil.which(QEMU) is None or shutil.which("make") is None
    or not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists(),
    reason=f"needs {CC}, its C library in {SYSROOT}, {QEMU} and make")
TINY = ROOT / "examples" / "models" / "tiny_mlp.onnx"
EM_AARCH64 = 183


@pytest.fixture(scope="module")
def cross_cache() -> Iterator[Path]:
    cache = Path(tempfile.gettempdir()) / f"plait-test-aarch64-{os.getuid()}"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(cache))
        yield cache


def _machine(path: Path) -> int:
    data = path.read_bytes()[:20]
    assert data[:4] == b"\x7fELF", path
    return int.from_bytes(data[18:20], "little")


def test_a_cross_compiled_library_runs_under_qemu(cross_cache: Path, tmp_path: Path) -> None:
    lib = plait.export_library(from_onnx(TINY), tmp_path / "out", name="tiny", cc=CC,
                               output_names=["output"])
    assert lib.arch == "aarch64"
    assert _machine(lib.shared) == EM_AARCH64
    r = subprocess.run([CC.replace("gcc", "readelf"), "-h", str(lib.static)],
                       capture_output=True, text=True, timeout=60)
    assert "AArch64" in r.stdout, r.stdout[:400]
    runner = tmp_path / "runner"
    runner.mkdir()
    for f in ("main.c", "npy.c", "npy.h", "Makefile"):
        shutil.copy(EXAMPLE / f, runner / f)
    r = subprocess.run(["make", "-s", f"CC={CC}", f"PLAIT_INCLUDE={lib.header.parent}"],
                       cwd=runner, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _machine(runner / "run_model") == EM_AARCH64
    sess = ort.InferenceSession(str(TINY), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = sample((batch, 64), batch)
        np.save(tmp_path / "x.npy", x)
        res = tmp_path / f"res{batch}"
        res.mkdir()
        r = subprocess.run([QEMU, "-L", str(SYSROOT), str(runner / "run_model"),
                            str(lib.shared), str(tmp_path / "x.npy"), "-o", str(res)],
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PLAIT_NUM_THREADS="2"))
        assert r.returncode == 0, r.stderr
        want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(np.load(res / "output.npy"), want, rtol=1e-4, atol=1e-5)
