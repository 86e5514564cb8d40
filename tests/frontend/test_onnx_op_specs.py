"""The importer checks nodes against a table of onnx's operator schemas
(plait/frontend/onnx/op_spec_table.py) instead of onnx's registry, which onnx builds
whole (about 7 MiB resident) at its first schema look-up.  The table must say what onnx
says, op by op and version by version, and importing a model must not build the
registry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from plait.frontend.onnx.op_spec_table import MAX_OPSETS, ONNX_VERSION, SPECS  # noqa: E402
from plait.frontend.onnx.op_specs import op_spec, spec_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _onnx_spec(op: str, version: int, domain: str):  # type: ignore[no-untyped-def]
    try:
        return spec_of(onnx.defs.get_schema(op, version, domain))
    except onnx.defs.SchemaError:
        return None


def test_the_table_says_what_onnx_says_for_every_op_and_version():
    """Every op the table or the installed onnx defines, at every opset of its domain
    that both know, has the schema onnx's own look-up gives (or none where onnx has
    none: before the op's first version, or an op onnx does not define).  (An onnx
    newer than the table's is asked beyond the table's opsets: op_specs.covered.)"""
    from onnx.onnx_cpp2py_export import defs as cdefs

    installed = {d: hi for d, (_, hi) in cdefs.schema_version_map().items()}
    ops = {(s.domain, s.name) for s in onnx.defs.get_all_schemas_with_history()} | set(SPECS)
    checked = 0
    for domain, op in sorted(ops):
        for version in range(1, min(MAX_OPSETS.get(domain, 0), installed.get(domain, 0)) + 1):
            assert op_spec(op, version, domain) == _onnx_spec(op, version, domain), (
                f"{domain or 'ai.onnx'}::{op} opset {version}: the table differs from onnx "
                f"{onnx.__version__}; run python tools/gen_onnx_op_specs.py")
            checked += 1
    assert checked > 5000
    # ops onnx does not know, and domains it does not know, have no schema
    assert op_spec("NoSuchOp", 17, "") is None
    assert op_spec("FusedMatMul", 1, "com.microsoft") is None


@pytest.mark.skipif(onnx.__version__ != ONNX_VERSION,
                    reason=f"the table was written from onnx {ONNX_VERSION}")
def test_the_table_is_what_the_generator_writes():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_onnx_op_specs.py"),
                           "--check"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024

    from plait.frontend.onnx import from_onnx
    w = np.ones((8, 3, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from_onnx(model.SerializeToString())
    before = rss()
    onnx.defs.get_schema("Relu", 17, "")   # builds onnx's registry now, if not before
    print(rss() - before)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_importing_a_model_does_not_build_onnx_schema_registry():
    """After importing a model, onnx's first schema look-up still builds its registry
    (several MiB resident: about 5-7 with onnx 1.23): the import did not."""
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) > 2, proc.stdout
