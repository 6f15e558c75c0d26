"""compare's report.html: one self-contained page (no external assets), drawn in the browser from the
compare result embedded as JSON, so that what a person sees is exactly what compare.json says."""

from __future__ import annotations

import orjson

from replayer.models import CompareResult

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.4em 0 .5em}
.meta{color:#555;margin:.1em 0}code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#fff;border:1px solid #ddd;padding:.5em;overflow:auto;max-height:24em;white-space:pre-wrap}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f3}.pass{color:#0a7d32;font-weight:600}.fail{color:#b3261e;font-weight:600}
.grid{display:grid;grid-auto-flow:column;grid-auto-columns:minmax(22em,1fr);gap:1em;overflow-x:auto}
.col h3{margin:.2em 0 .5em}.run{background:#fff;border:1px solid #ccc;border-radius:6px;padding:.6em;margin-bottom:1em}
.run.failed{border-color:#b3261e}.badge{display:inline-block;border-radius:4px;padding:0 .4em;margin-right:.3em;font-size:12px;background:#e8e8ed}
ol.timeline{padding-left:1.6em;margin:.4em 0}ol.timeline li{margin:.25em 0}
li.differs{background:#fff4d6;outline:2px solid #e0a800}.role{font-weight:600;margin-right:.4em}
.call{font-family:ui-monospace,monospace;font-size:12px;display:block;color:#333}
.add{color:#0a7d32}.del{color:#b3261e}.hunk{color:#6a3fb5}
"""

_JS = r"""
const data = JSON.parse(document.getElementById('compare-data').textContent);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};
const rate = v => v.check_pass_rate === null ? 'no check' : `${v.check_passed}/${v.runs} (${Math.round(v.check_pass_rate * 100)}%)`;
const tokens = (i, o) => i === null && o === null ? 'not reported' : `${i ?? '?'} in / ${o ?? '?'} out`;
const checkLine = c => c ? el('span', {class: c.passed ? 'pass check-pass' : 'fail check-fail'},
  c.passed ? 'check passed' : (c.timed_out ? 'check timed out' : `check failed (exit ${c.exit_code})`)) : el('span', {}, 'no check');

function diffPre(text) {
  const pre = el('pre', {class: 'diff'});
  for (const line of text.split('\n')) {
    const cls = line.startsWith('@@') ? 'hunk' : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : '';
    pre.append(el('span', cls ? {class: cls} : {}, line + '\n'));
  }
  return pre;
}

function run(r) {
  const card = el('div', {class: 'run' + (r.status === 'failed' ? ' failed' : ''), 'data-run': `${r.variant}/${r.repeat}`});
  const c = r.continuation;
  card.append(el('div', {}, el('strong', {}, `run ${r.repeat}`), ' ',
    el('span', {class: 'badge agent-status'}, r.status === 'failed' ? 'run failed' : c.agent_status),
    el('span', {class: 'badge'}, c ? `${c.steps_used} step(s)` : '-'), ' ', checkLine(r.check)));
  if (r.status === 'failed') card.append(el('p', {class: 'fail error'}, `${r.error_kind}: ${r.error}`));
  if (r.status === 'ok') card.append(el('p', {class: 'meta first-difference'},
    `${r.variant}/${r.repeat}` === data.reference_run ? 'the reference run' :
    r.first_difference === null ? `same actions as the reference run ${data.reference_run}` : `differs from the reference run ${data.reference_run} at action ${r.first_difference + 1}`));
  const list = el('ol', {class: 'timeline'});
  r.timeline.forEach((e, i) => {
    const item = el('li', i === r.first_difference ? {class: 'differs'} : {}, el('span', {class: 'role'}, e.role));
    if (e.text) item.append(el('span', {class: 'text'}, e.text));
    for (const call of e.tool_calls) item.append(el('span', {class: 'call'}, `${call.name}(${call.arguments})`));
    if (e.truncated) item.append(el('em', {}, ' (cut)'));
    list.append(item);
  });
  card.append(el('details', {open: ''}, el('summary', {}, `timeline after the boundary (${r.timeline.length})`), list));
  if (r.check) card.append(el('details', {}, el('summary', {}, `check output (${r.check.output_bytes} bytes${r.check.truncated ? ', cut' : ''})`), el('pre', {class: 'check-output'}, r.check.output)));
  const small = r.workspace_diff.split('\n').length <= 40;
  card.append(el('details', small && r.workspace_diff ? {open: ''} : {}, el('summary', {}, 'workspace diff' + (r.workspace_diff ? '' : ' (no change)') + (r.workspace_diff_truncated ? ' (cut)' : '')), diffPre(r.workspace_diff)));
  card.append(el('p', {class: 'meta'}, `${r.wall_s.toFixed(1)} s; ${r.dir}`));
  return card;
}

const req = data.request;
document.title = `compare: ${data.agent} after step ${data.after_step}`;
const root = document.getElementById('report');
root.append(el('h1', {}, `${data.agent} ${data.agent_version ?? ''}: ${req.variants.length} variant(s) from step ${data.after_step}`));
root.append(el('p', {class: 'meta'}, `trajectory ${req.trajectory}; ${req.repeat} run(s) per variant; replayer ${data.pins.replayer}; ${data.pins.cli_package} ${data.pins.cli_version}`));
root.append(el('p', {class: 'meta'}, 'prefix reruns: ' + (Object.entries(data.divergences).map(([k, v]) => `${v} ${k}`).join(', ') || 'none')
  + `; all runs share their first ${data.common_actions} action(s)`));
if (data.boundary_check) root.append(el('p', {class: 'boundary-check'}, 'at the boundary: ', checkLine(data.boundary_check)));
if (req.check) root.append(el('p', {class: 'meta'}, 'check: ', el('code', {}, req.check)));

const table = el('table', {id: 'summary'});
const head = el('tr', {}, el('th', {}, ''));
for (const v of data.variants) head.append(el('th', {'data-variant': v.name}, v.name));
table.append(head);
const rows = [
  ['spec', v => Object.entries(v.spec).filter(([, x]) => x !== null && !(typeof x === 'object' && !Object.keys(x).length)).map(([k, x]) => `${k}=${typeof x === 'object' ? JSON.stringify(x) : x}`).join(', ') || '(shared settings)'],
  ['check passed', rate],
  ['agent status', v => Object.entries(v.agent_status).map(([k, n]) => `${k} x${n}`).join(', ') || '-'],
  ['failed runs', v => v.failed_runs],
  ['steps used', v => v.steps_used.join(', ') || '-'],
  ['tokens', v => tokens(v.input_tokens, v.output_tokens)],
  ['mean wall time', v => `${v.mean_wall_s.toFixed(1)} s`],
];
for (const [label, fn] of rows) {
  const tr = el('tr', {'data-row': label}, el('th', {}, label));
  for (const v of data.variants) tr.append(el('td', {'data-variant': v.name}, fn(v)));
  table.append(tr);
}
root.append(el('h2', {}, 'Variants'), table);
const grid = el('div', {class: 'grid'});
for (const v of data.variants) {
  const col = el('div', {class: 'col', 'data-variant': v.name}, el('h3', {}, v.name));
  for (const r of data.runs.filter(r => r.variant === v.name)) col.append(run(r));
  grid.append(col);
}
root.append(el('h2', {}, 'Runs'), grid);
root.setAttribute('data-rendered', 'yes');
"""


def render_html(result: CompareResult) -> str:
    # `<` escaped inside the JSON: the data can never close its script element
    data = orjson.dumps(result.model_dump(mode="json")).replace(b"<", b"\\u003c").decode()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>compare report</title>"
        f"<style>{_CSS}</style></head><body>"
        '<main id="report"><noscript>This report is drawn by JavaScript from compare.json.</noscript></main>'
        f'<script type="application/json" id="compare-data">{data}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )
