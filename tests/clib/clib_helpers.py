"""Helpers of the C library tests: the models, building them once for the VM and the C
library, compiling the example runner, running C programs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from plait.codegen.c.model_library import ModelLibrary
from plait.codegen.c.variants import host_arch
from plait.codegen.vm_codegen import vm_codegen
from plait.frontend import from_onnx
from plait.pipeline import build_pipeline
from plait.runtime import Executable, VirtualMachine
from plait.target import Target
from plait.target.c.library_export import export_built_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "c_api"
SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=97",
                 "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=98"}
SANITIZER_REPORTS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "UndefinedBehavior")


def onnx_models(d: Path) -> dict[str, tuple[str, dict[str, Any], tuple[int, ...]]]:
    """The three models: path, importer options and the input shape of the test run.
    The CNN and the transformer (examples/export_models.py, small) keep a symbolic
    batch; the int8 model is the MLP quantized by onnxruntime's tools (QOperator)."""
    sys.path.insert(0, str(ROOT / "examples"))
    sys.path.insert(0, str(ROOT / "tests" / "dialects" / "qnn"))
    from export_models import export
    from qnn_models import quantize

    (d / "q").mkdir(parents=True, exist_ok=True)
    return {
        "cnn": (export("cnn", str(d), shape=(1, 3, 32, 32)), {"dim_ranges": {"batch": (1, 4)}},
                (2, 3, 32, 32)),
        "transformer": (export("transformer", str(d), shape=(1, 16, 256)),
                        {"dim_ranges": {"batch": (1, 2)}}, (2, 16, 256)),
        "int8": (quantize("mlp", "qop", str(d / "q")), {}, (4, 64)),
    }


def build_once(path: str, options: dict[str, Any]) -> tuple[Executable, Any]:
    """The model built for c once: its executable (for the VM) and the built module (for
    the C library)."""
    mod = from_onnx(path, **options)
    t = Target("c")
    built = build_pipeline(t, mod.phase)(mod.with_attrs(target=t))
    return vm_codegen(built), built


def export(built: Any, out: Path, name: str, **kw: Any) -> Any:
    return export_built_module(built, out, name, **kw)


def compile_runner(out: Path, include: Path, flags: tuple[str, ...] = ()) -> Path:
    """examples/c_api's run_model built with its Makefile (CFLAGS plus ``flags``)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in ("main.c", "npy.c", "npy.h", "Makefile"):
        shutil.copy(EXAMPLE / f, out / f)
    r = subprocess.run(["make", "-s", f"PLAIT_INCLUDE={include}",
                        f"CFLAGS=-O1 -g {' '.join(flags)}"], cwd=out, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out / "run_model"


def run(command: list[str], cwd: Path | None = None, sanitized: bool = False,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PLAIT_NUM_THREADS="2")
    if sanitized:
        env.update(SANITIZER_ENV)
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def assert_clean(r: subprocess.CompletedProcess[str]) -> None:
    """The process succeeded and no sanitizer reported anything."""
    found = [s for s in SANITIZER_REPORTS if s in r.stderr]
    assert r.returncode == 0 and not found, (r.returncode, r.stderr[-4000:])


def sample(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _library(d: Path, name: str) -> ModelLibrary:
    weights = d / f"{name}.weights"
    return ModelLibrary(d / f"lib{name}.so", d / f"lib{name}.a", d / f"{name}.h",
                        d / "dlpack.h", weights if weights.exists() else None, host_arch())


def shared_models(root: Path, sanitize: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The three models built and exported once per test run, by whichever xdist worker
    comes first (the others wait on a lock and read the files): per model its ONNX
    path, input, the VM's output, its plain library and one whose API is compiled
    with ``sanitize``."""
    root = root / "clib-models"
    with _locked(root / ".lock"):
        if not (root / "done").exists():
            for name, (path, options, shape) in onnx_models(root / "onnx").items():
                exe, built = build_once(path, options)
                x = sample(shape, 1)
                want = VirtualMachine(exe)["main"](x)
                d = root / name
                d.mkdir(exist_ok=True)
                np.save(d / "x.npy", x)
                np.save(d / "vm.npy", want[0] if isinstance(want, tuple) else want)
                (d / "path").write_text(path)
                export(built, d / "plain", name, output_names=["output"])
                export(built, d / "asan", name, output_names=["output"], api_flags=sanitize)
            (root / "done").write_text("")
    out = {}
    for name in ("cnn", "transformer", "int8"):
        d = root / name
        out[name] = {"path": (d / "path").read_text(), "x": np.load(d / "x.npy"),
                     "vm": (np.load(d / "vm.npy"),), "lib": _library(d / "plain", name),
                     "asan": _library(d / "asan", name), "dir": d}
    return out
