"""The pipeline report: one self-contained HTML page about compiling a model.

:func:`pipeline_report` runs a pipeline with an instrument that records every pass
(its time, its phase, whether it changed the module, the module's text when it did),
and writes one HTML file — no script, style sheet or font from the network (one
inline line of script marks the page ready):

* the pipeline as a timeline: every pass with its stage, phases, time, a bar and the
  process's resident memory after it, then the pipeline's peak resident memory;
* for every pass that changed the module, a side-by-side diff of the text (Python's
  ``difflib``) that fits the page (long lines wrap), the module's attributes one per
  line, and long attribute values (libraries, C sources, external modules), constants
  and C sources shortened to a digest so the diff shows the IR and still shows that
  one of them changed;
* the graph of ``main`` before (entering optimization) and after (the last module in
  the lowering phase), drawn by :mod:`plait.tools.svg_graph`;
* the memory plan of the built ``main`` (:mod:`plait.tools.memory_chart`);
* the module's kernels with their C source, and the C sources it links;
* when it was built with a tuning database (``Target("c", tuning_db=...)``,
  ``PLAIT_TUNING_DB``; docs/tuning.md), every call with a search space: the point it
  took, whether that came from the database or is the default (the heuristic's), the
  measured time of the point and of the default.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..ir.expr import Function
from ..ir.module import IRModule
from ..ir.structural import structural_equal
from ..kernel.ir import Kernel
from ..transform.context import PassContext
from ..transform.instruments import PassInstrument
from ..transform.pass_base import PassInfo
from ..transform.sequential import Sequential, running_pipelines
from .memory_chart import render_memory
from .resident import ResidentWatch
from .svg_graph import legend_html, render_svg

MAX_DIFF_LINES = 4000
"""Texts longer than this (in lines) are diffed with fewer lines of context."""


@dataclass
class PassRecord:
    """One pass run: name, stage (the enclosing pipeline), phases, seconds, whether it
    changed the module, and the module after it."""

    name: str
    stage: str
    phase_in: str
    phase_out: str
    seconds: float
    changed: bool
    module: IRModule
    before: IRModule
    resident_mib: float | None = None
    """The process's resident memory after the pass, above where the pipeline started
    (None where ``/proc`` is not available)."""


@dataclass
class Recorder(PassInstrument):
    """Records the passes of a pipeline (see :func:`pipeline_report`)."""

    records: list[PassRecord] = field(default_factory=list)
    start: IRModule | None = None
    memory: ResidentWatch = field(default_factory=ResidentWatch)
    """Resident memory from the first pass on: each record's ``resident_mib`` and the
    pipeline's peak (``memory.peak()``; the records' modules are part of it)."""
    _t0: list[float] = field(default_factory=list)

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.start is None:
            self.start = mod
            self.memory.start()
        self._t0.append(time.perf_counter())

    def run_after_pass(self, mod: IRModule, result: IRModule, info: PassInfo) -> None:
        seconds = time.perf_counter() - self._t0.pop()
        if info.kind == "sequential":
            return
        stages = running_pipelines()
        stage = stages[-1].info.name if stages else ""
        changed = result is not mod and not structural_equal(mod, result)
        self.records.append(PassRecord(info.name, stage, mod.phase, result.phase, seconds,
                                       changed, result, mod, self.memory.now()))

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        if self._t0:
            self._t0.pop()


_BASE64 = re.compile(r'base64="([^"]*)"')
_CODE = re.compile(r"\"code\": '((?:[^'\\]|\\.)*)'")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


ATTR_CHARS = 120
"""A module attribute whose text is longer than this shows as its size and digest."""


def _attr_lines(mod: IRModule) -> list[str]:
    """One comment line per module attribute; a long value (compiled libraries, C
    sources, external modules, entry points) as its size and digest, so a diff shows
    that it changed and not the blob."""
    from ..ir.printer import Printer

    printer = Printer()
    lines = []
    for k, v in mod.attrs.items():
        t = printer.value_text(v)
        if len(t) > ATTR_CHARS:
            t = f"<{type(v).__name__} of {len(t)} chars sha1:{_digest(t)}>"
        lines.append(f"# module attribute {k!r}: {t}")
    return lines


def display_text(mod: IRModule) -> str:
    """The module's text with its attributes one per line (long ones as a digest) and
    constants and C sources replaced by a digest."""
    text = mod.script()
    head, _, rest = text.partition("\n")
    if head.startswith("@module(attrs="):
        text = "\n".join([*_attr_lines(mod), "@module", rest])
    text = _BASE64.sub(lambda m: f'base64=<{len(m.group(1))} chars sha1:{_digest(m.group(1))}>',
                       text)
    return _CODE.sub(lambda m: f'"code": <C source, {len(m.group(1))} chars sha1:'
                               f"{_digest(m.group(1))}>", text)


_COLGROUPS = re.compile(r"(?:<colgroup></colgroup>\s*){6}")
_COLS = ('<colgroup><col class="dn"><col class="dl"><col class="dt"><col class="dn">'
         '<col class="dl"><col class="dt"></colgroup>')


def _diff(a: str, b: str, label_a: str, label_b: str) -> str:
    """A side-by-side diff that fits the page: fixed columns, long lines wrapped by
    the browser (difflib's own cells never wrap)."""
    la, lb = a.splitlines(), b.splitlines()
    context = 3 if max(len(la), len(lb)) < MAX_DIFF_LINES else 1
    table = difflib.HtmlDiff().make_table(la, lb, html.escape(label_a), html.escape(label_b),
                                          context=True, numlines=context)
    table = _COLGROUPS.sub(_COLS, table, count=1)
    return table.replace('<td nowrap="nowrap">', '<td class="dtext">')


def _mib(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f} MiB"


def _memory_line(peak: float | None, weights_mib: float = 0.0) -> str:
    if peak is None:
        return ("<p>peak resident memory: not measured here (it needs Linux's "
                "<code>/proc/self/status</code> and <code>clear_refs</code>)</p>")
    times = f"{peak / weights_mib:.2f}x" if weights_mib > 0 else "no"
    return (f"<p>peak resident memory while the pipeline ran: {peak:.1f} MiB above its start, "
            f"{times} the module's constants ({weights_mib:.2f} MiB) (<code>VmHWM</code>; "
            "the modules this report keeps for its diffs count in it, so a build alone "
            "peaks at most this high)</p>")


def constant_mib(mod: IRModule) -> float:
    """The bytes of the distinct constants of ``mod`` (the model's weights), in MiB."""
    from ..ir.expr import Constant
    from ..ir.visitor import post_order

    seen: dict[int, int] = {}
    for func in mod.functions.values():
        for node in post_order(func):
            if isinstance(node, Constant):
                seen[id(node.data)] = node.data.nbytes
    return sum(seen.values()) / 2**20


def _timeline(records: list[PassRecord], numeric: Any = None,
              peak: float | None = None, weights_mib: float = 0.0) -> str:
    total = sum(r.seconds for r in records) or 1.0
    checks = list(numeric.records) if numeric is not None else []
    rows = []
    for i, r in enumerate(records, 1):
        check = ""
        if checks:
            c = checks[i - 1] if i - 1 < len(checks) else None
            check = "<td></td>" if c is None else (
                f'<td class="num {"ok" if c.ok else "bad"}" title="{html.escape(c.note)}">'
                f"{c.max_abs:.2g}</td>")
        width = max(100.0 * r.seconds / total, 0.3)
        phase = r.phase_in if r.phase_in == r.phase_out else f"{r.phase_in} → {r.phase_out}"
        link = (f'<a href="#diff-{i}">changed</a>' if r.changed else
                '<span class="muted">unchanged</span>')
        rows.append(
            f'<tr><td>{i}</td><td>{html.escape(r.stage)}</td><td class="pass">'
            f"{html.escape(r.name)}</td><td>{html.escape(phase)}</td>"
            f'<td class="num">{r.seconds * 1e3:.2f} ms</td><td class="barcell">'
            f'<div class="bar phase-{html.escape(r.phase_out)}" style="width:{width:.1f}%">'
            f'</div></td><td class="num">{_mib(r.resident_mib)}</td><td>{link}</td>'
            f"{check}</tr>")
    head = "<th>max error</th>" if checks else ""
    return ('<table class="timeline"><tr><th>#</th><th>stage</th><th>pass</th><th>phase</th>'
            f'<th>time</th><th></th><th title="resident memory after the pass, above the '
            f'start">resident</th><th>module</th>{head}</tr>' + "".join(rows) + "</table>"
            f"<p>total {total * 1e3:.1f} ms in {len(records)} passes</p>"
            + _memory_line(peak, weights_mib))


def _kernels(mod: IRModule) -> str:
    from ..codegen.c.emit import emit_kernel

    parts = []
    for name, k in mod.items():
        if not isinstance(k, Kernel):
            continue
        try:
            c = emit_kernel(name, k)
        except Exception as e:  # a kernel C cannot take is shown with the reason
            c = f"/* no C source: {type(e).__name__}: {e} */"
        parts.append(f"<details><summary><code>{html.escape(name)}</code> "
                     f"({len(k.params)} buffers)</summary><h4>kernel IR</h4><pre>"
                     f"{html.escape(k.script(name))}</pre><h4>C</h4><pre>{html.escape(c)}"
                     "</pre></details>")
    for lit in mod.attrs.get("c_sources") or ():
        funcs = ", ".join(f["name"] for f in lit.get("functions", ()))
        parts.append(f"<details><summary>C source <code>{html.escape(lit['name'])}</code> "
                     f"({len(lit['code']):,} chars{'; ' + html.escape(funcs) if funcs else ''})"
                     f"</summary><pre>{html.escape(lit['code'])}</pre></details>")
    return "".join(parts) or '<p class="note">the module has no kernel and no C source.</p>'


def _seconds(v: Any) -> str:
    return f"{float(v) * 1e6:,.1f} us" if isinstance(v, (int, float)) else "—"


def tuned_calls(mod: IRModule) -> list[dict[str, Any]]:
    """The calls with a search space of a module built with a tuning database (the
    ``tuning`` entry of ``runtime_attrs``), each with its wrapper ``symbol``."""
    runtime = mod.attrs.get("runtime_attrs") or {}
    calls = runtime.get("tuning") if isinstance(runtime, Mapping) else None
    if not isinstance(calls, Mapping):
        return []
    return [{"symbol": k, **v} for k, v in sorted(calls.items()) if isinstance(v, Mapping)]


def _tuning(mod: IRModule) -> str:
    calls = tuned_calls(mod)
    if not calls:
        return ('<p class="note">built without a tuning database (Target("c", '
                'tuning_db=...) or PLAIT_TUNING_DB): every call takes the heuristic\'s '
                'point.</p>')
    from plait.target.c.tuning.space import point_label

    rows = []
    for c in calls:
        space = c.get("space") if isinstance(c.get("space"), Mapping) else None
        point = point_label(c.get("point"), space)
        default = point_label((space or {}).get("default"), space)
        rows.append(f"<tr><td class=\"pass\">{html.escape(c['symbol'])}</td>"
                    f"<td>{html.escape(str(c.get('op', '')))}</td>"
                    f"<td>{html.escape(point)}</td><td>{html.escape(str(c.get('origin')))}</td>"
                    f"<td>{html.escape(default)}</td>"
                    f"<td class=\"num\">{_seconds(c.get('seconds'))}</td>"
                    f"<td class=\"num\">{_seconds(c.get('default_seconds'))}</td></tr>")
    n = sum(c.get("origin") == "database" for c in calls)
    return (f"<p>{n} of {len(calls)} calls with a search space took their point from the "
            "tuning database (times measured inside the model by plait tune).</p>"
            '<table class="timeline"><tr><th>call</th><th>op</th><th>point</th>'
            "<th>from</th><th>default point</th><th>measured</th><th>default's</th></tr>"
            + "".join(rows)
            + "</table>")


def _main_of(mod: IRModule) -> Function | None:
    f = mod.functions.get("main")
    return f if isinstance(f, Function) else None


def pipeline_report(mod: IRModule, pipeline: Sequential, title: str,
                    extra_instruments: list[Any] | None = None,
                    numeric: Any = None) -> tuple[str, IRModule]:
    """Run ``pipeline`` on ``mod`` and return (the HTML page, the resulting module).
    ``numeric``: a :class:`~plait.transform.NumericCheck` among the instruments whose
    records become a column of the timeline."""
    rec = Recorder()
    with PassContext(instruments=[rec, *(extra_instruments or [])]):
        result = pipeline(mod)
    return render_report(rec, result, title, numeric), result


def render_report(rec: Recorder, result: IRModule, title: str, numeric: Any = None) -> str:
    """The HTML page of a recorded pipeline run."""
    records = rec.records
    start = rec.start if rec.start is not None else result
    # before: the first module in the optimization phase; after: the last in lowering
    before = next((r.module for r in records if r.phase_out == "optimization"), start)
    after = next((r.module for r in reversed(records) if r.phase_out == "lowering"), result)
    sections = [f"<h1>{html.escape(title)}</h1>",
                f"<p>{len(records)} passes; target {html.escape(str(result.target))}; "
                f"final phase {html.escape(result.phase)}</p>",
                "<h2>Pipeline</h2>",
                _timeline(records, numeric, rec.memory.peak(), constant_mib(start))]
    graphs = []
    for label, m in (("before: main entering optimization", before),
                     ("after: main in the lowering phase", after)):
        f = _main_of(m)
        if f is not None:
            graphs.append(f'<div class="graphbox"><h3>{html.escape(label)}</h3>'
                          f"{render_svg(f, m, label)}</div>")
    sections += ["<h2>Graph of main</h2>", legend_html(), '<div class="graphs">',
                 *graphs, "</div>"]
    final_main = _main_of(result)
    sections += ["<h2>Memory plan</h2>",
                 render_memory(final_main) if final_main is not None and result.phase == "build"
                 else '<p class="note">the module did not reach the build phase.</p>']
    sections += ["<h2>Kernels and native code</h2>", _kernels(result)]
    sections += ["<h2>Tuned calls</h2>", _tuning(result)]
    texts: dict[int, str] = {}  # the records keep every module alive: ids are stable

    def text_of(m: IRModule) -> str:
        if id(m) not in texts:
            texts[id(m)] = display_text(m)
        return texts[id(m)]

    diffs = []
    for i, r in enumerate(records, 1):
        if r.changed:
            diffs.append(f'<section id="diff-{i}"><h3>#{i} {html.escape(r.name)} '
                         f"({html.escape(r.phase_in)} → {html.escape(r.phase_out)})</h3>"
                         f"{_diff(text_of(r.before), text_of(r.module), 'before', 'after')}"
                         "</section>")
    sections += ["<h2>What each pass changed</h2>", *(diffs or ["<p>no pass changed it</p>"])]
    body = "\n".join(sections)
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>{body}"
            f"<script>{_SCRIPT}</script></body></html>\n")


_SCRIPT = (
    "(function(){var n=document.querySelectorAll('svg.graph g.node').length;"
    "document.body.setAttribute('data-ready',String(n));"
    "console.log('plait-report ready: '+n+' graph nodes');})();"
)
"""The page's only script: it marks the page ready (what the browser test checks)."""

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{margin-top:32px;border-bottom:1px solid #ccc}
table.timeline{border-collapse:collapse;width:100%}
.timeline td,.timeline th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
.timeline td.num{text-align:right;white-space:nowrap}.timeline td.pass{font-family:monospace}
td.barcell{width:30%}.bar{height:12px;border-radius:2px}
.phase-ingestion{background:#76b7b2}.phase-optimization{background:#4e79a7}
.phase-lowering{background:#f28e2b}.phase-build{background:#e15759}
.muted{color:#999}td.ok{color:#2a7}td.bad{color:#c22;font-weight:bold}.note{color:#666;font-style:italic}
.legend{margin:8px 0}.key{margin-right:14px;white-space:nowrap}
.swatch{display:inline-block;width:12px;height:12px;border:1px solid #777;margin-right:4px;
vertical-align:middle}
.graphs{display:flex;gap:24px;overflow-x:auto;align-items:flex-start}
.graphbox{flex:0 0 auto}
svg.graph text{font:11px monospace;text-anchor:middle;fill:#111}
svg.graph text.sub{font-size:9px;fill:#333}
svg.graph text.elabel{font-size:9px;fill:#555;text-anchor:start}
svg.graph path.edge{fill:none;stroke:#888;stroke-width:1.2}
svg.graph g.param rect{stroke:#333;stroke-dasharray:3 2}
svg.graph g.node rect{stroke:#333}
svg.memory .axis{stroke:#333}svg.memory .axislabel{font:11px sans-serif}
svg.memory rect.tensor{stroke:#333;stroke-width:.5}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}
table.diff{font:12px monospace;border-collapse:collapse;margin-bottom:16px;width:100%;
table-layout:fixed}
.diff col.dn{width:1.5em}.diff col.dl{width:3.5em}
.diff td{padding:0 4px;vertical-align:top;white-space:pre-wrap;overflow-wrap:anywhere}
.diff_header{background:#eee;color:#777}.diff_next{background:#eee}
.diff_add{background:#aaffaa}.diff_chg{background:#ffff77}.diff_sub{background:#ffaaaa}
"""


__all__ = ["PassRecord", "Recorder", "display_text", "pipeline_report", "render_report",
           "tuned_calls"]
