"""``import plait`` is lazy (plait/__init__.py, PEP 562): it imports no other module;
serving a saved executable (``plait.load("m.plx")``, ``plait run m.plx``) imports the
runtime and not the compiler; every name of ``plait.__all__`` still resolves; and code
that imports a submodule directly finds every registered operator, pass, codegen and
dialect (the registries load the compiler on a miss).  The import checks run in fresh
interpreters (``sys.modules`` of this one has everything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import plait

ROOT = Path(__file__).resolve().parents[1]
COMPILER = ("plait.ir", "plait.kernel", "plait.op", "plait.interp", "plait.transform",
            "plait.codegen", "plait.target", "plait.pipeline", "plait.build",
            "plait.offload", "plait.frontend", "plait.dialects")
"""The compiler's packages and modules: none is imported to serve a model."""


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (this checkout first on the path); it prints
    one JSON line last, returned."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compiler_modules(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith(COMPILER))


def test_every_name_of_all_resolves():
    assert set(plait.ir.__all__) <= set(plait.__all__)
    for name in plait.__all__:
        assert getattr(plait, name) is not None, name
    namespace: dict = {}
    exec("from plait import *", namespace)
    assert set(plait.__all__) <= set(namespace)
    assert namespace["IRModule"] is plait.ir.IRModule
    assert namespace["parse"] is plait.ir.parser.parse


def test_build_stays_the_function():
    import plait.build  # binds the submodule on the package, as any import of it does

    assert callable(plait.build) and plait.build.__module__ == "plait.build"
    from plait import build

    assert build is plait.build


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        plait.no_such_name  # noqa: B018


def _saved(tmp_path: Path, target: str) -> tuple[Path, np.ndarray]:
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    mod = plait.parse(textwrap.dedent("""
        @module
        class M:
            @function
            def main(x: Tensor((2, 16), "float32"), w: Tensor((16, 8), "float32")):
                with dataflow():
                    y = matmul(x, w)
                    z = relu(y)
                    output(z)
                return z
        """))
    path = tmp_path / "m.plx"
    plait.load(mod, target).save(path)
    return path, w


def test_serving_a_plx_imports_no_compiler(tmp_path: Path):
    from plait.session import default_target

    path, w = _saved(tmp_path, default_target())
    x = np.arange(32, dtype=np.float32).reshape(2, 16) / 32
    out = _run(f"""
        import sys, json
        import numpy as np
        import plait
        after_import = sorted(m for m in sys.modules if m.startswith("plait"))
        sess = plait.load({str(path)!r})
        x = np.arange(32, dtype=np.float32).reshape(2, 16) / 32
        w = np.array({w.tolist()!r}, dtype=np.float32)
        y = sess.run({{"x": x, "w": w}})["output0"]
        print(json.dumps({{"after_import": after_import, "y": y.tolist(),
                          "modules": sorted(sys.modules)}}))
        """)
    assert out["after_import"] == ["plait"]
    assert _compiler_modules(out["modules"]) == []
    np.testing.assert_allclose(np.array(out["y"]), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)


def test_plait_run_of_a_plx_imports_no_compiler(tmp_path: Path):
    from plait.session import default_target

    path, _ = _saved(tmp_path, default_target())
    out = _run(f"""
        import io, sys, json, contextlib
        from plait.cli import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["run", {str(path)!r}])
        print(json.dumps({{"code": code, "text": buf.getvalue(),
                          "modules": sorted(sys.modules)}}))
        """)
    assert out["code"] == 0 and "output output0: float32 (2, 8)" in out["text"]
    assert _compiler_modules(out["modules"]) == []


def test_a_submodule_imported_first_finds_every_registry():
    # no plait.<name> is touched: the operator registry's first miss loads the compiler
    # (the core ops and the qnn dialect's), the pass registry has the dialects' passes,
    # and the onnxruntime codegen is registered
    out = _run("""
        import json, sys
        from plait.ir.parser import parse
        loaded_by_import = "plait.dialects.qnn" in sys.modules
        mod = parse('''
        @module
        class M:
            @function
            def main(x: Tensor((4,), "float32")):
                with dataflow():
                    q = qnn.quantize(x, const(0.5, "float32"), const(3, "int8"))
                    d = qnn.dequantize(q, const(0.5, "float32"), const(3, "int8"))
                    y = add(d, x)
                    output(y)
                return y
        ''')
        from plait.build import build
        from plait.runtime import VirtualMachine
        from plait.transform.codegens import get_codegen
        import numpy as np
        x = np.array([0.2, -1.3, 2.6, 40.0], dtype=np.float32)
        y = VirtualMachine(build(mod, "numpy"))["main"](x)
        print(json.dumps({"loaded_by_import": loaded_by_import, "y": y.tolist(),
                          "codegen": get_codegen("onnxruntime").name}))
        """)
    assert out["loaded_by_import"] is False
    assert out["codegen"] == "onnxruntime"
    x = np.array([0.2, -1.3, 2.6, 40.0], dtype=np.float32)
    # numpy reference of int8 quantize (round half to even, saturate) then dequantize
    q = np.clip(np.rint(x / 0.5) + 3, -128, 127)
    np.testing.assert_allclose(out["y"], (q - 3) * 0.5 + x, rtol=1e-6)
