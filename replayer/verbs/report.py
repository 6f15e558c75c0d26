"""The HTML reports: compare's report.html and `replayer view`'s. Each is one self-contained page (no
external assets), drawn in the browser from the result embedded as JSON, so that what a person sees is
exactly what the JSON says. Every value reaches the page as a DOM text node (never as markup): trajectory
content is untrusted, and a `<script>` in a tool output is text."""

from __future__ import annotations

from typing import Any

import orjson

from replayer.floor.compare_results import CompareResult

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.4em 0 .5em}
.meta{color:#555;margin:.1em 0}code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#fff;border:1px solid #ddd;padding:.5em;overflow:auto;max-height:24em;white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f3}.pass{color:#0a7d32;font-weight:600}.fail{color:#b3261e;font-weight:600}
.infra-note{color:#8a5a00;font-weight:600}
.grid{display:grid;grid-auto-flow:column;grid-auto-columns:minmax(22em,1fr);gap:1em;overflow-x:auto}
.col h3{margin:.2em 0 .5em}.run{background:#fff;border:1px solid #ccc;border-radius:6px;padding:.6em;margin-bottom:1em}
.run.failed{border-color:#b3261e}.run.infra{border-color:#e0a800;border-style:dashed}
.badge{display:inline-block;border-radius:4px;padding:0 .4em;margin-right:.3em;font-size:12px;background:#e8e8ed}
ol.timeline{padding-left:1.6em;margin:.4em 0}ol.timeline li{margin:.35em 0}
ol.timeline pre{margin:.2em 0;padding:.3em .5em;max-height:16em}
li.differs{background:#fff4d6;outline:2px solid #e0a800}.role{font-weight:600;margin-right:.4em}
.call{color:#333;background:#f6f6fa}
.add{color:#0a7d32}.del{color:#b3261e}.hunk{color:#6a3fb5}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.6em}.pair h4{margin:.3em 0;font-size:12px;color:#555}
.rerun{background:#fff;border:1px solid #ccc;border-radius:6px;padding:.6em;margin-bottom:.8em}
.rerun.different{border-color:#e0a800}mark{background:#ffd86b}
#filters{margin:.6em 0}#filters input{width:20em}tr.failed .status,tr.refused .status,tr.unreadable .status{color:#b3261e;font-weight:600}
"""

_BASE_JS = r"""
const data = JSON.parse(document.getElementById('report-data').textContent);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};
const root = document.getElementById('report');

function diffPre(text, cls) {
  const pre = el('pre', {class: 'diff ' + cls});
  for (const line of text.split('\n')) {
    const kind = line.startsWith('@@') ? 'hunk' : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : '';
    pre.append(el('span', kind ? {class: kind} : {}, line + '\n'));
  }
  return pre;
}

// one message a list item; texts, call arguments and tool outputs in <pre>: their line breaks are kept
function conversation(entries, itemAttrs = () => ({})) {
  const list = el('ol', {class: 'timeline'});
  entries.forEach((e, i) => {
    const item = el('li', {'data-role': e.role, ...itemAttrs(e, i)}, el('span', {class: 'role'}, e.role));
    if (e.call_id) item.append(el('code', {class: 'call-id'}, e.call_id));
    if (e.text) item.append(el('pre', {class: e.role === 'tool' ? 'text tool-output' : 'text'}, e.text));
    for (const call of e.tool_calls) item.append(el('pre', {class: 'call'}, `${call.name}(${call.arguments})`));
    if (e.truncated) item.append(el('em', {}, ' (cut)'));
    list.append(item);
  });
  return list;
}

const versionText = v => v ? `${v.version} (${v.source}, ${v.status})` : 'unknown';
// which version ran, and the pinned one only beside it when they differ
const ranText = (v, pins) => !v ? `ran the pinned ${pins.cli_version}`
  : `ran ${versionText(v)}` + (v.version === pins.cli_version ? ', the pinned version' : `; pinned ${pins.cli_version}, not run`);

// the model a continuation named, and that the mock answered when it did (continuation.mock)
const MOCK_NOTE = 'the answers came from the built-in mock model (--upstream mock), not from a model service';
const modelText = (c, none) => `model ${c && c.model ? c.model : none}` + (c && c.mock ? ` (${MOCK_NOTE})` : '');

function degradations(list) {
  const box = el('div', {id: 'degradations'}, el('h2', {}, `Degradations (${list.length})`));
  if (!list.length) box.append(el('p', {class: 'meta'}, 'none: every call of the prefix was rerun'));
  const ul = el('ul', {});
  for (const d of list) ul.append(el('li', {class: 'degradation'}, `${d.action}: ${d.reason}`));
  if (list.length) box.append(ul);
  return box;
}
"""

_COMPARE_JS = r"""
const rate = v => {
  if (v.check_pass_rate === null) return 'no check';
  return `${v.check_passed}/${v.runs - v.infrastructure_failures} (${Math.round(v.check_pass_rate * 100)}%)`;
};
const tokens = (i, o) => i === null && o === null ? 'not reported' : `${i ?? '?'} in / ${o ?? '?'} out`;
const checkLine = c => c ? el('span', {class: c.passed ? 'pass check-pass' : 'fail check-fail'},
  c.passed ? 'check passed' : (c.timed_out ? 'check timed out' : `check failed (exit ${c.exit_code})`)) : el('span', {}, 'no check');

function diffBlock(label, text, cut, cls) {
  const small = text.split('\n').length <= 40;
  return el('details', small && text ? {open: '', class: cls} : {class: cls},
    el('summary', {}, label + (text ? '' : ' (no change)') + (cut ? ' (cut)' : '')), diffPre(text, cls));
}

function run(r) {
  const classes = ['run'];
  if (r.status === 'failed') classes.push('failed');
  if (r.infrastructure_failure) classes.push('infra');
  const card = el('div', {class: classes.join(' '), 'data-run': `${r.variant}/${r.repeat}`});
  const c = r.continuation;
  card.append(el('div', {}, el('strong', {}, `run ${r.repeat}`), ' ',
    el('span', {class: 'badge agent-status'}, r.status === 'failed' ? 'run failed' : c.agent_status),
    el('span', {class: 'badge'}, c ? `${c.steps_used} step(s)` : '-'), ' ', checkLine(r.check)));
  const pins = r.pins;
  card.append(el('p', {class: 'meta versions'},
    `agent ${pins ? `${pins.adapter} ${pins.cli_version ?? '?'}` : '?'}; replayer ${pins ? pins.replayer : '?'}; ${modelText(c, '?')}`));
  if (r.infrastructure_failure) card.append(el('p', {class: 'infra-note'},
    `infrastructure failure, not counted in the pass rate: ${r.infrastructure_failure}`));
  else if (r.status === 'failed') card.append(el('p', {class: 'fail error'}, `${r.error_kind}: ${r.error}`));
  else if (r.continuation_error) card.append(el('p', {class: 'fail error'}, r.continuation_error));
  if (r.status === 'ok') card.append(el('p', {class: 'meta first-difference'},
    `${r.variant}/${r.repeat}` === data.reference_run ? 'the reference run' :
    r.first_difference === null ? `same actions as the reference run ${data.reference_run}` : `differs from the reference run ${data.reference_run} at action ${r.first_difference + 1}`));
  const list = conversation(r.timeline, (e, i) => i === r.first_difference ? {class: 'differs'} : {});
  card.append(el('details', {open: ''}, el('summary', {}, `timeline after the boundary (${r.timeline.length})`), list));
  if (r.check) card.append(el('details', {}, el('summary', {}, `check output (${r.check.output_bytes} bytes${r.check.truncated ? ', cut' : ''})`), el('pre', {class: 'check-output'}, r.check.output)));
  if (r.patch_diff !== null) card.append(diffBlock("the variant's patch, applied at the boundary", r.patch_diff, r.patch_diff_truncated, 'patch-diff'));
  if (r.status === 'ok') card.append(diffBlock(r.patch_diff !== null ? "the agent's edits (after the patch)" : "the agent's edits (workspace diff)",
    r.workspace_diff, r.workspace_diff_truncated, 'agent-diff'));
  if (c && c.cassette && c.cassette.notes.length) card.append(el('p', {class: 'meta cassette-notes'},
    `cassette ${c.cassette.verdict}: ${c.cassette.notes.join('; ')}`));  // a bound that cut the oracle's read, too
  card.append(el('p', {class: 'meta'}, `${r.wall_s.toFixed(1)} s; ${r.dir}`));
  return card;
}

const req = data.request;
document.title = `compare: ${data.agent} after step ${data.after_step}`;
root.append(el('h1', {}, `${data.agent} ${data.agent_version ?? ''}: ${req.variants.length} variant(s) from step ${data.after_step}`));
root.append(el('p', {class: 'meta'}, `trajectory ${req.trajectory}; ${req.repeat} run(s) per variant`));
root.append(el('p', {class: 'meta versions'}, `replay: agent ${data.agent} (${data.pins.cli_package}) ${ranText(data.version, data.pins)}; replayer ${data.pins.replayer}; model ${req.defaults.model ?? "(the trajectory's own)"}`));
const mocked = data.runs.filter(r => r.continuation && r.continuation.mock).map(r => `${r.variant}/${r.repeat}`);
if (mocked.length) root.append(el('p', {class: 'infra-note mock'},
  `${mocked.length === data.runs.length ? 'every run' : `runs ${mocked.join(', ')}`}: ${MOCK_NOTE}`));
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
  ['infrastructure failures', v => v.infrastructure_failures],
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
root.append(el('h2', {}, 'Variants'), table,
  el('p', {class: 'meta'}, 'check passed: over the runs that were not infrastructure failures (a container, bridge, install or worker failure, or a refused gate), counted apart'));
root.append(degradations(data.degradations));
const grid = el('div', {class: 'grid'});
for (const v of data.variants) {
  const col = el('div', {class: 'col', 'data-variant': v.name}, el('h3', {}, v.name));
  for (const r of data.runs.filter(r => r.variant === v.name)) col.append(run(r));
  grid.append(col);
}
root.append(el('h2', {}, 'Runs'), grid);
root.setAttribute('data-rendered', 'yes');
"""

_VIEW_JS = r"""
const r = data.result;
const c = r.continuation;

// the two texts with the part between their common start and common end marked
function marked(text, other) {
  const pre = el('pre', {class: 'observation'});
  if (text === null) { pre.append(el('em', {}, '(no observation recorded)')); return pre; }
  if (other === null || text === other) { pre.append(text); return pre; }
  let start = 0;
  while (start < text.length && start < other.length && text[start] === other[start]) start++;
  let end = 0;
  while (end < text.length - start && end < other.length - start && text[text.length - 1 - end] === other[other.length - 1 - end]) end++;
  pre.append(text.slice(0, start), el('mark', {class: 'difference'}, text.slice(start, text.length - end)), text.slice(text.length - end));
  return pre;
}

document.title = `replay: ${r.agent} after step ${r.after_step}`;
root.append(el('h1', {}, `${r.agent} ${r.agent_version ?? ''}: replay after step ${r.after_step}`));
root.append(el('p', {class: 'meta'}, `trajectory ${r.request.trajectory}; session ${r.session_id ?? '-'}; cwd ${r.cwd ?? '-'}`));
root.append(el('p', {class: 'meta versions'}, `agent ${r.agent} (${r.pins.cli_package}) ${ranText(r.version, r.pins)}; replayer ${r.pins.replayer}; ${modelText(c, '-')}`));
if (c && c.mock) root.append(el('p', {class: 'infra-note mock'}, `continuation: ${MOCK_NOTE}`));
const counts = {};
for (const d of r.divergences) counts[d.status] = (counts[d.status] || 0) + 1;
root.append(el('p', {class: 'meta'}, 'prefix reruns: ' + (Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ') || 'none')));
if (c) root.append(el('p', {class: 'meta continuation-status'},
  `continuation: gate ${c.gate}; ${c.agent_status}; ${c.steps_used} step(s); ${c.input_condition}`));
for (const hint of r.hints) root.append(el('p', {class: 'infra-note hint'}, hint));
root.append(degradations(r.degradations));

const byCall = Object.fromEntries(r.divergences.map(d => [d.call_id, d]));
root.append(el('h2', {}, `The prefix (${data.prefix.length} messages, fresh observations)`));
root.append(el('details', {open: '', id: 'prefix'}, el('summary', {}, 'conversation up to the boundary'),
  conversation(data.prefix, e => e.call_id && byCall[e.call_id] && byCall[e.call_id].status === 'different' ? {class: 'differs', 'data-call': e.call_id} : (e.call_id ? {'data-call': e.call_id} : {}))));

root.append(el('h2', {}, `Reruns (${data.reruns.length})`));
const reruns = el('div', {id: 'reruns'});
for (const x of data.reruns) {
  const d = byCall[x.call_id] || {status: 'unknown', normalizers: []};
  const box = el('div', {class: `rerun ${d.status}`, 'data-call': x.call_id},
    el('div', {}, el('strong', {}, `step ${x.step}: ${x.tool}`), ' ', el('code', {}, x.call_id), ' ',
      el('span', {class: 'badge status'}, d.status), d.normalizers.length ? el('span', {class: 'badge'}, 'normalized: ' + d.normalizers.join(', ')) : '',
      d.line ? el('span', {class: 'badge position'}, `${d.in_wrapper ? "in the agent's wrapper, " : ''}line ${d.line}, column ${d.column}`) : ''));
  if (x.excerpts) box.append(el('p', {class: 'meta'}, 'excerpts only (this directory has no reruns.json)'));
  box.append(el('div', {class: 'pair'},
    el('div', {class: 'historical'}, el('h4', {}, 'historical'), marked(x.historical, x.fresh)),
    el('div', {class: 'fresh'}, el('h4', {}, 'fresh'), marked(x.fresh, x.historical))));
  reruns.append(box);
}
root.append(reruns);

root.append(el('h2', {}, 'After the boundary'));
if (!c) root.append(el('p', {class: 'meta', id: 'continuation'}, 'no continuation (the replay stopped at the boundary)'));
else root.append(el('div', {id: 'continuation'}, conversation(data.continuation)));
root.setAttribute('data-rendered', 'yes');
"""


_INDEX_JS = r"""
const rows = data.rows;
document.title = `results: ${data.root}`;
root.append(el('h1', {}, `Results in ${data.root}`));
root.append(el('p', {class: 'meta', id: 'count'}, ''));
for (const s of data.skipped) root.append(el('p', {class: 'infra-note skipped'}, s));
// a link made from names found on disk: relative, each part encoded (a folder named `javascript:x` stays a path)
const href = path => './' + path.split('/').map(encodeURIComponent).join('/');
const divergenceText = d => Object.entries(d).map(([k, v]) => `${v} ${k}`).join(', ');
const columns = ['kind', 'trajectory', 'agent', 'version', 'boundary', 'status', 'divergences', 'continuation', 'path', 'note'];
const text = (r, c) => c === 'divergences' ? divergenceText(r.divergences) : (r[c] ?? '');
const choices = c => [...new Set(rows.map(r => String(text(r, c))))].filter(v => v !== '').sort();
const filters = el('div', {id: 'filters'});
const search = el('input', {id: 'search', type: 'search', placeholder: 'filter: any text'});
filters.append(search);
const selects = {};
for (const c of ['kind', 'agent', 'version', 'status', 'continuation']) {
  const select = el('select', {id: `filter-${c}`, 'aria-label': c}, el('option', {value: ''}, `any ${c}`));
  for (const v of choices(c)) select.append(el('option', {value: v}, v));
  selects[c] = select;
  filters.append(' ', select);
}
root.append(filters);
const table = el('table', {id: 'runs'});
table.append(el('thead', {}, el('tr', {}, el('th', {}, 'report'), ...columns.map(c => el('th', {}, c)))));
const body = el('tbody');
for (const r of rows) {
  const tr = el('tr', {class: `row ${r.status}`, 'data-status': r.status, 'data-agent': r.agent ?? '', 'data-kind': r.kind});
  const cell = el('td', {class: 'report'});
  if (r.report) cell.append(el('a', {href: href(r.report)}, 'report'));
  tr.append(cell);
  for (const c of columns) tr.append(el('td', {class: c}, String(text(r, c))));
  body.append(tr);
}
table.append(body);
root.append(table);
function apply() {
  const needle = search.value.toLowerCase();
  let shown = 0;
  rows.forEach((r, i) => {
    const tr = body.children[i];
    const ok = Object.entries(selects).every(([c, s]) => s.value === '' || String(text(r, c)) === s.value)
      && (needle === '' || tr.textContent.toLowerCase().includes(needle));
    tr.hidden = !ok;
    if (ok) shown++;
  });
  document.getElementById('count').textContent = `${shown} of ${rows.length} run(s) shown`;
}
search.addEventListener('input', apply);
for (const s of Object.values(selects)) s.addEventListener('change', apply);
// the filter can come with the address: index.html#status=failed&agent=codex&q=text
const wanted = new URLSearchParams(location.hash.slice(1));
for (const [c, s] of Object.entries(selects)) if (wanted.get(c) !== null) s.value = wanted.get(c);
if (wanted.get('q') !== null) search.value = wanted.get('q');
apply();
root.setAttribute('data-rendered', 'yes');
"""


def _page(title: str, data: dict[str, Any], js: str) -> str:
    # `<` escaped inside the JSON: the data can never close its script element
    embedded = orjson.dumps(data).replace(b"<", b"\\u003c").decode()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title>"
        f"<style>{_CSS}</style></head><body>"
        '<main id="report"><noscript>This report is drawn by JavaScript from the data it embeds.</noscript></main>'
        f'<script type="application/json" id="report-data">{embedded}</script>'
        f"<script>{_BASE_JS}{js}</script></body></html>\n"
    )


def render_html(result: CompareResult) -> str:
    return _page("compare report", result.model_dump(mode="json"), _COMPARE_JS)


def render_view(data: dict[str, Any]) -> str:
    """`replayer view`'s page from replayer.view.ViewData's JSON form."""
    return _page("replay report", data, _VIEW_JS)


def render_index(data: dict[str, Any]) -> str:
    """`replayer view`'s index page of a folder of results from replayer.index.Index's JSON form."""
    return _page("results", data, _INDEX_JS)
