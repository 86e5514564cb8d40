"""docs/passes.md is generated and up to date; the guide's examples run."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_pass_docs", ROOT / "tools" /
                                                  "gen_pass_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_passes_md_is_up_to_date() -> None:
    gen = _load_generator()
    text = gen.render()
    current = (ROOT / "docs" / "passes.md").read_text()
    assert current == text, "docs/passes.md is out of date; run: python tools/gen_pass_docs.py"
    for name in ("`Normalize`", "`LambdaLift`", "transform.reproducer_dir"):
        assert name in text
    assert "test." not in text  # passes registered by tests are not plait's


def test_guide_examples_run(capsys) -> None:  # noqa: ANN001
    guide = (ROOT / "docs" / "writing_a_pass.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.S)
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "writing_a_pass_guide"}
    exec(compile("\n".join(blocks), "docs/writing_a_pass.md", "exec"), namespace)  # noqa: S102
    assert "pass timing" in capsys.readouterr().out
