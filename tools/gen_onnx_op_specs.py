"""Write plait/frontend/onnx/op_spec_table.py from the installed onnx package.

    python tools/gen_onnx_op_specs.py            # rewrite the table
    python tools/gen_onnx_op_specs.py --check    # exit 1 if the table differs from onnx's

The table holds what the importer's checks use of every operator schema onnx defines
(plait/frontend/onnx/op_specs.py), so that importing a model does not make onnx build its
registry of schemas.  Run it after upgrading onnx; tests/frontend/test_onnx_op_specs.py
fails while the table and the installed onnx disagree on an op the table covers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "plait" / "frontend" / "onnx" / "op_spec_table.py"

HEADER = '''"""The operator schemas onnx {version} defines, as the importer's checks use them.

Written by ``python tools/gen_onnx_op_specs.py``: do not edit.  Each row is an
:class:`~plait.frontend.onnx.op_specs.OpSpec` (since, input names, input options, at most
inputs, at most outputs, attributes as (name, type, required), has a function body).
"""
# ruff: noqa: E501

'''


def source() -> str:
    """The text of the table module, from the installed onnx."""
    import onnx
    from onnx.onnx_cpp2py_export import defs as cdefs

    from plait.frontend.onnx.op_specs import table_rows

    opsets = {d: hi for d, (_, hi) in sorted(cdefs.schema_version_map().items())}
    lines = [HEADER.format(version=onnx.__version__),
             f"ONNX_VERSION = {onnx.__version__!r}",
             '"""The onnx release the table was written from."""',
             "",
             f"MAX_OPSETS: dict[str, int] = {opsets!r}",
             '"""The newest opset of each domain that release knows: the table answers for '
             'these."""',
             "",
             "SPECS: dict[tuple[str, str], tuple[tuple, ...]] = {"]
    for key, rows in table_rows().items():
        lines.append(f"    {key!r}: (")
        lines.extend(f"        {row!r}," for row in rows)
        lines.append("    ),")
    lines += ["}", '"""(domain, op type) -> its schemas, oldest first."""', ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if the table is not what onnx gives")
    args = ap.parse_args(argv)
    text = source()
    if args.check:
        same = TABLE.exists() and TABLE.read_text() == text
        print(f"{TABLE.relative_to(ROOT)} is {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
