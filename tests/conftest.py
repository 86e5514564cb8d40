"""Session-wide fixtures: one compiled-library cache (``PLAIT_CACHE_DIR``) for the whole
test run, shared by the xdist workers, so every native library — and the object of
plait_gemm.c, the same source for every model — is compiled once per run and nothing is
written to the user's cache.  (tests/codegen keeps a cache of its own: its tests count
compiler runs.)

A developer who runs the tests again and again may set ``PLAIT_TEST_CACHE_DIR`` to a
directory of their own: every run then shares it (the cache is keyed by the content of each
source, the compiler and its flags, so a changed kernel is rebuilt and an unchanged one is
not).  CI leaves it unset and compiles everything once per run, as a fresh machine would.

The run builds only the ISA copies this CPU runs (``PLAIT_BUILD_ISAS=host``, unless the
variable is set): a copy the CPU cannot run is never executed here, and compiling it for
every test model took a third of the suite's compile time on an AVX2 machine.  Every copy
of every family and of the generated kernels is still compiled by the tests that ask for
all of them (tests/target/test_kernel_variants.py, test_build_isas.py,
test_native_aarch64.py)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run sees (the base temp directory's parent
    under xdist, the base temp directory otherwise)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


RUN_CACHE: list[Path] = []
"""The run's plait cache directory, once :func:`plait_cache_dir` made it."""


@pytest.fixture(scope="session", autouse=True)
def plait_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The run's plait cache directory."""
    own = os.environ.get("PLAIT_TEST_CACHE_DIR")
    d = Path(own) if own else shared_root(tmp_path_factory) / "plait-cache"
    d.mkdir(parents=True, exist_ok=True)
    RUN_CACHE[:] = [d]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAIT_CACHE_DIR", str(d))
        mp.setenv("PLAIT_BUILD_ISAS", os.environ.get("PLAIT_BUILD_ISAS") or "host")
        yield d


def seed_cache(root: Path) -> Path:
    """A plait cache directory of its own at ``root`` (another machine: its own key and
    signed libraries) that starts with the compiled objects of the run's cache, hard
    links (or copies) of its ``c/obj-*.o`` and compiler probes.  An object is named by
    its source text, flags and compiler, so a library built here from them is what a
    cold compile would give — without compiling every kernel family again for a test
    about keys and trust."""
    shared = RUN_CACHE[0] / "c" if RUN_CACHE else None
    c = root / "c"
    c.mkdir(parents=True, exist_ok=True)
    if shared is not None and shared.is_dir():
        for f in shared.iterdir():
            if f.name.startswith(("obj-", "threads-")) and not f.name.endswith(".lock"):
                try:
                    os.link(f, c / f.name)
                except FileExistsError:
                    pass
                except OSError:
                    shutil.copy2(f, c / f.name)
    return root


@pytest.fixture()
def seeded_cache() -> Callable[[Path], Path]:
    """:func:`seed_cache`, for tests that play another machine."""
    return seed_cache


def exported_model(name: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``examples/export_models.py`` model ``name`` exported once per test run (shared by
    the xdist workers: written to a private file, then renamed into place)."""
    import importlib.util
    import tempfile

    pytest.importorskip("torch")
    root = shared_root(tmp_path_factory) / "exported-models"
    root.mkdir(exist_ok=True)
    path = root / f"{name}.onnx"
    if path.is_file():
        return str(path)
    spec = importlib.util.spec_from_file_location(
        "export_models", Path(__file__).parent.parent / "examples" / "export_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        os.replace(module.export(name, tmp), path)
    return str(path)


@pytest.fixture(scope="session")
def cnn_onnx(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The ResNet-style CNN of examples/export_models.py (input (batch, 3, 32, 32))."""
    return exported_model("cnn", tmp_path_factory)


@pytest.fixture(scope="session")
def mlp_onnx(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The MLP of examples/export_models.py (input (batch, 784))."""
    return exported_model("mlp", tmp_path_factory)


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s: the refusal is not immediate")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def deadline() -> Callable[[float], AbstractContextManager[None]]:
    """``with deadline(10): ...`` fails the test (a TimeoutError) when the block takes
    longer than 10 s, instead of hanging the suite (a guard for tests of refusals that
    must be immediate; SIGALRM, main thread)."""
    return _deadline
