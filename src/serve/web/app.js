// The clocklm lab: one page with four views chosen by the address's #fragment: #/runs (the runs
// table), #/run/ID (live curves, config, plan, profile, checkpoints, the sample box),
// #/compare?run=A&run=B (overlaid curves and a config diff) and #/lab (queue, ledger, journal).
// Everything comes from the server's /api/ routes; curves poll for new metrics rows only.
'use strict';

const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
const POLL_RUNS_MS = 2000;
const POLL_METRICS_MS = 1000;

let timers = [];
let viewToken = 0;  // bumped on every view change; stale callbacks check it and stop

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

async function api(path, options) {
  const res = await fetch(path, Object.assign({ cache: 'no-store' }, options || {}));
  let body = null;
  try { body = await res.json(); } catch (e) { body = { error: res.statusText }; }
  if (!res.ok) throw new Error(body && body.error ? body.error : res.statusText);
  return body;
}

function every(ms, fn) {
  const token = viewToken;
  let busy = false;
  const tick = async () => {
    if (token !== viewToken || busy) return;
    busy = true;
    try { await fn(); } catch (e) { setStatus(e.message, true); } finally { busy = false; }
  };
  timers.push(setInterval(tick, ms));
  return tick();
}

function setStatus(text, isError) {
  const s = document.getElementById('status-line');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}

// ---- formatting ----
function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  return Number(v).toFixed(digits);
}
function fmtSi(v) {
  if (v === null || v === undefined) return '-';
  const a = Math.abs(v);
  if (a >= 1e12) return (v / 1e12).toFixed(1) + 'T';
  if (a >= 1e9) return (v / 1e9).toFixed(1) + 'B';
  if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (a >= 1e3) return (v / 1e3).toFixed(1) + 'k';
  return String(Math.round(v * 10) / 10);
}
function fmtSeconds(s) {
  if (s === null || s === undefined) return '-';
  s = Math.round(s);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
}
function statusBadge(s) { return el('span', { class: 'status status-' + s }, s); }
function runLink(id) { return '#/run/' + encodeURIComponent(id); }

// ---- charts: SVG line plots with linear or log axes ----
function niceTicks(lo, hi, n, log) {
  if (log) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
      for (const m of [1, 2, 5]) { const v = m * Math.pow(10, e); if (v >= lo && v <= hi) out.push(v); }
    return out.length >= 2 ? out : [lo, hi];
  }
  const span = hi - lo || 1, step0 = span / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => span / s <= n) || mag * 10;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// series: [{name, color, points: [[x, y], ...], dots}]; opts: {xlog, ylog, xlabel, budget}
function lineChart(name, series, opts) {
  const W = 520, H = 300, L = 58, R = 14, T = 10, B = 38;
  const svgNS = 'http://www.w3.org/2000/svg';
  const mk = (tag, attrs) => { const e = document.createElementNS(svgNS, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); return e; };
  const svg = mk('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  const ok = (v, log) => Number.isFinite(v) && (!log || v > 0);
  const pts = series.map(s => s.points.filter(p => ok(p[0], opts.xlog) && ok(p[1], opts.ylog)));
  const all = pts.flat();
  svg.dataset.chart = name;
  svg.dataset.points = String(all.length);
  svg.dataset.series = String(series.filter((s, i) => pts[i].length > 0).length);
  if (all.length === 0) {
    const t = mk('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }); t.textContent = 'no points yet'; svg.append(t);
    return svg;
  }
  let [x0, x1] = [Math.min(...all.map(p => p[0])), Math.max(...all.map(p => p[0]))];
  let [y0, y1] = [Math.min(...all.map(p => p[1])), Math.max(...all.map(p => p[1]))];
  if (opts.budget && Number.isFinite(opts.budget) && (!opts.xlog || opts.budget > 0)) x1 = Math.max(x1, opts.budget);
  if (x0 === x1) { x0 = opts.xlog ? x0 / 2 : x0 - 1; x1 = opts.xlog ? x1 * 2 : x1 + 1; }
  if (y0 === y1) { y0 = opts.ylog ? y0 / 1.1 : y0 - 0.5; y1 = opts.ylog ? y1 * 1.1 : y1 + 0.5; }
  const f = (v, log) => log ? Math.log10(v) : v;
  const sx = v => L + (f(v, opts.xlog) - f(x0, opts.xlog)) / (f(x1, opts.xlog) - f(x0, opts.xlog)) * (W - L - R);
  const sy = v => H - B - (f(v, opts.ylog) - f(y0, opts.ylog)) / (f(y1, opts.ylog) - f(y0, opts.ylog)) * (H - T - B);
  for (const v of niceTicks(y0, y1, 5, opts.ylog)) {
    svg.append(mk('line', { class: 'grid', x1: L, x2: W - R, y1: sy(v), y2: sy(v) }));
    const t = mk('text', { x: L - 6, y: sy(v) + 4, 'text-anchor': 'end' }); t.textContent = fmtTick(v); svg.append(t);
  }
  for (const v of niceTicks(x0, x1, 6, opts.xlog)) {
    svg.append(mk('line', { class: 'grid', x1: sx(v), x2: sx(v), y1: T, y2: H - B }));
    const t = mk('text', { x: sx(v), y: H - B + 15, 'text-anchor': 'middle' }); t.textContent = fmtTick(v); svg.append(t);
  }
  svg.append(mk('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.append(mk('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
  const xl = mk('text', { x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle' }); xl.textContent = opts.xlabel; svg.append(xl);
  if (opts.budget && Number.isFinite(opts.budget) && opts.budget <= x1) {
    svg.append(mk('line', { class: 'budget', x1: sx(opts.budget), x2: sx(opts.budget), y1: T, y2: H - B }));
    const t = mk('text', { x: sx(opts.budget) - 4, y: T + 12, 'text-anchor': 'end' }); t.textContent = 'budget end'; svg.append(t);
  }
  series.forEach((s, i) => {
    const p = decimate(pts[i], sx, sy);
    if (p.length === 0) return;
    const d = p.map((q, k) => (k ? 'L' : 'M') + sx(q[0]).toFixed(1) + ' ' + sy(q[1]).toFixed(1)).join('');
    svg.append(mk('path', { class: 'series', d, stroke: s.color, 'data-name': s.name }));
    if (s.dots || p.length < 40) for (const q of p) svg.append(mk('circle', { cx: sx(q[0]), cy: sy(q[1]), r: 2.5, fill: s.color }));
  });
  return svg;
}
// At most a few points per pixel column are drawn: for each column, its first, lowest, highest
// and last point, so a 30-minute run's curve keeps its envelope and draws as fast as a short one.
function decimate(points, sx, sy) {
  if (points.length < 2000) return points;
  const out = [];
  let col = null, group = [];
  const flush = () => {
    if (!group.length) return;
    let lo = group[0], hi = group[0];
    for (const q of group) { if (sy(q[1]) > sy(lo[1])) lo = q; if (sy(q[1]) < sy(hi[1])) hi = q; }
    const keep = [group[0], lo, hi, group[group.length - 1]].sort((a, b) => a[0] - b[0]);
    for (const q of keep) if (out[out.length - 1] !== q) out.push(q);
    group = [];
  };
  for (const q of points) {
    const c = Math.round(sx(q[0]));
    if (c !== col) { flush(); col = c; }
    group.push(q);
  }
  flush();
  return out;
}
function fmtTick(v) {
  const a = Math.abs(v);
  if (a >= 1e4 || (a > 0 && a < 1e-2)) return fmtSi(v);
  return String(Number(v.toPrecision(4)));
}

// ---- metrics kept per run, extended by polling ----
const metricsCache = new Map();  // id -> {rows, next, status, budget}
async function pollMetrics(id) {
  const m = metricsCache.get(id) || { rows: [], next: 0, status: '', budget: null };
  const got = await api('/api/metrics?run=' + encodeURIComponent(id) + '&from=' + m.next);
  if (got.total < m.next) { m.rows = []; }  // the run was rewritten (a resume): start over
  if (got.from === m.rows.length) m.rows.push(...got.rows);
  m.next = got.next; m.status = got.status; m.budget = got.budget_seconds;
  metricsCache.set(id, m);
  return m;
}
function seriesOf(rows, xKey, yKey) {
  const out = [];
  for (const r of rows) if (r[xKey] !== undefined && r[yKey] !== undefined) out.push([r[xKey], r[yKey]]);
  return out;
}

// Curve panel shared by the run page and the comparison: train loss and val bpb against the
// chosen x (device-seconds or tokens), log toggles, the budget's end marked.
function curvePanel(ids) {
  const state = { x: 'device_seconds', xlog: false, ylog: false };
  const charts = el('div', { class: 'charts', id: 'charts' });
  const legend = el('div', { class: 'legend' });
  const redraw = () => {
    charts.replaceChildren();
    const budget = state.x === 'device_seconds'
      ? Math.max(...ids.map(id => (metricsCache.get(id) || {}).budget || 0)) || null : null;
    const xlabel = state.x === 'device_seconds' ? 'device seconds' : 'tokens';
    for (const [name, key, title] of [['loss', 'loss', 'train loss'], ['val_bpb', 'val_bpb', 'val bpb']]) {
      const series = ids.map((id, i) => ({ name: id, color: COLORS[i % COLORS.length],
        points: seriesOf((metricsCache.get(id) || { rows: [] }).rows, state.x, key), dots: key === 'val_bpb' }));
      charts.append(el('div', { class: 'chart-box' }, el('h3', {}, title),
        lineChart(name, series, { xlog: state.xlog, ylog: state.ylog, xlabel, budget })));
    }
    legend.replaceChildren(...ids.map((id, i) => el('span', {}, el('i', { 'data-color': COLORS[i % COLORS.length] }), id)));
    for (const i of legend.querySelectorAll('i')) i.style.background = i.dataset.color;
  };
  const toggle = (label, key, on, off) => el('label', {}, el('input', { type: 'checkbox', id: 'toggle-' + key,
    onchange: e => { state[key] = e.target.checked ? on : off; redraw(); } }), ' ' + label);
  const controls = el('div', { class: 'controls' },
    el('label', {}, 'x: ', el('select', { id: 'x-axis', onchange: e => { state.x = e.target.value; redraw(); } },
      el('option', { value: 'device_seconds' }, 'device seconds'), el('option', { value: 'tokens' }, 'tokens'))),
    toggle('log x', 'xlog', true, false), toggle('log y', 'ylog', true, false), legend);
  return { node: el('div', {}, controls, charts), redraw };
}

// ---- views ----
const runsState = { sort: 'updated', desc: true, selected: new Set() };
const RUN_COLUMNS = [
  ['name', 'run', r => el('a', { href: runLink(r.id) }, r.id)],
  ['config', 'config', r => r.config],
  ['params', 'params', r => fmtSi(r.params), true],
  ['device', 'device', r => r.device || '-'],
  ['budget_seconds', 'budget', r => fmtSeconds(r.budget_seconds), true],
  ['device_seconds', 'device time', r => fmtSeconds(r.device_seconds), true],
  ['tokens', 'tokens', r => fmtSi(r.tokens), true],
  ['tokens_per_second', 'tok/s', r => fmtSi(r.tokens_per_second), true],
  ['loss', 'loss', r => fmtNum(r.loss, 3), true],
  ['val_bpb', 'val bpb', r => fmtNum(r.val_bpb, 4), true],
  ['core', 'CORE', r => fmtNum(r.core, 4), true],
  ['status', 'status', r => statusBadge(r.status)],
];

function sortRuns(runs) {
  const k = runsState.sort, sign = runsState.desc ? -1 : 1;
  return runs.slice().sort((a, b) => {
    const va = a[k], vb = b[k];
    if (va === vb) return a.id < b.id ? -1 : 1;
    if (va === null || va === undefined) return 1;
    if (vb === null || vb === undefined) return -1;
    return (va < vb ? -1 : 1) * sign;
  });
}

function viewRuns(root) {
  const table = el('table', { id: 'runs-table' });
  const errors = el('div', { class: 'error' });
  const compareBtn = el('button', { id: 'compare-selected', onclick: () => {
    location.hash = '#/compare?' + [...runsState.selected].map(id => 'run=' + encodeURIComponent(id)).join('&');
  } }, 'Compare selected');
  root.append(el('h1', {}, 'Runs'), el('div', { class: 'controls' }, compareBtn,
    el('span', { class: 'muted', id: 'runs-count' })), table, errors);
  let last = [];
  const render = () => {
    const head = el('tr', {}, el('th', {}, ''), RUN_COLUMNS.map(([key, label, , num]) => {
      const th = el('th', { class: 'sortable' + (num ? ' num' : '') + (runsState.sort === key ? (runsState.desc ? ' sorted-desc' : ' sorted-asc') : ''),
        'data-key': key, onclick: () => { runsState.desc = runsState.sort === key ? !runsState.desc : !!num; runsState.sort = key; render(); } }, label);
      return th;
    }));
    const body = el('tbody', {}, sortRuns(last).map(r => el('tr', { 'data-run-id': r.id, 'data-status': r.status },
      el('td', {}, el('input', { type: 'checkbox', class: 'pick', checked: runsState.selected.has(r.id),
        onchange: e => { e.target.checked ? runsState.selected.add(r.id) : runsState.selected.delete(r.id); compareBtn.disabled = runsState.selected.size < 1; } })),
      RUN_COLUMNS.map(([key, , fn, num]) => el('td', { class: num ? 'num' : '' }, fn(r))))));
    table.replaceChildren(el('thead', {}, head), body);
    compareBtn.disabled = runsState.selected.size < 1;
    document.getElementById('runs-count').textContent = last.length + ' runs';
  };
  return every(POLL_RUNS_MS, async () => {
    const got = await api('/api/runs');
    last = got.runs;
    errors.replaceChildren(...got.errors.map(e => el('div', {}, e)));
    render();
    setStatus('updated ' + new Date().toLocaleTimeString());
    document.body.dataset.ready = 'runs';
  });
}

function factsOf(row) {
  const f = (label, value) => el('div', { class: 'fact' }, el('small', {}, label), el('b', {}, value));
  return el('div', { class: 'facts', id: 'run-facts' },
    f('status', statusBadge(row.status)), f('val bpb', fmtNum(row.val_bpb, 4)), f('train loss', fmtNum(row.loss, 3)),
    f('device time', fmtSeconds(row.device_seconds) + ' / ' + fmtSeconds(row.budget_seconds)),
    f('tokens', fmtSi(row.tokens)), f('tok/s', fmtSi(row.tokens_per_second)), f('params', fmtSi(row.params)),
    f('config', row.config), f('device', (row.device || '-').split(' (')[0]));
}

function kvTable(obj, id) {
  const rows = [];
  const walk = (o, prefix) => {
    if (o && typeof o === 'object' && !Array.isArray(o)) for (const k of Object.keys(o)) walk(o[k], prefix ? prefix + '.' + k : k);
    else rows.push(el('tr', {}, el('td', {}, prefix), el('td', {}, typeof o === 'string' ? o : JSON.stringify(o))));
  };
  walk(obj, '');
  return el('div', { class: 'scroll' }, el('table', { id }, el('tbody', {}, rows)));
}

function planSection(plan) {
  if (!plan) return el('p', { class: 'muted' }, 'No plan: this run was not started with --config auto.');
  const cols = ['config', 'n_layer', 'd_model', 'seq_len', 'params', 'tokens_per_second', 'tokens', 'predicted_bpb', 'fits', 'note'];
  const rows = (plan.candidates || []).map((c, i) => el('tr', { class: i === plan.choice ? 'differs' : '' },
    cols.map(k => el('td', {}, typeof c[k] === 'number' ? (k === 'predicted_bpb' ? fmtNum(c[k], 4) : fmtSi(c[k])) : String(c[k] ?? '')))));
  return el('div', {}, el('p', {}, 'Budget ' + fmtSeconds(plan.budget_seconds) + ' on ' + plan.device +
    '; the chosen candidate is highlighted.' + (plan.warning ? ' ' + plan.warning : '')),
    el('div', { class: 'scroll' }, el('table', { id: 'plan-table' }, el('thead', {}, el('tr', {}, cols.map(c => el('th', {}, c)))), el('tbody', {}, rows))));
}

function profileSection(profile, hasTrace, id) {
  const trace = hasTrace ? el('p', {}, el('a', { href: '/api/trace?run=' + encodeURIComponent(id), id: 'trace-link' },
    'Download the Chrome trace'), ' (open it in Perfetto or chrome://tracing)') : null;
  if (!profile) return el('div', {}, el('p', { class: 'muted' }, 'No profile: train with --profile to record one.'), trace);
  const cols = [['name', 'op'], ['phase', 'phase'], ['ms_per_step', 'ms/step'], ['share', 'share'], ['flops_per_s', 'FLOP/s'],
    ['bytes_per_s', 'B/s'], ['intensity', 'FLOP/B'], ['roof_fraction', 'of roofline'], ['bound', 'bound']];
  const cell = (k, v) => k === 'share' || k === 'roof_fraction' ? fmtNum(100 * v, 1) + '%' : k === 'ms_per_step' ? fmtNum(v, 2) :
    typeof v === 'number' ? fmtSi(v) : String(v ?? '');
  return el('div', {}, el('p', {}, 'Step ' + fmtNum(1e3 * profile.step_seconds, 1) + ' ms, ' + fmtSi(profile.achieved_flops_per_s) +
    'FLOP/s against a ' + profile.compute_roof + ' roofline.'), trace,
    el('div', { class: 'scroll' }, el('table', { id: 'profile-table' }, el('thead', {}, el('tr', {}, cols.map(c => el('th', {}, c[1])))),
      el('tbody', {}, (profile.ops || []).map(o => el('tr', {}, cols.map(([k]) => el('td', {}, cell(k, o[k])))))))));
}

function sampleBox(id) {
  const out = el('pre', { class: 'sample', id: 'sample-output' });
  const prompt = el('textarea', { id: 'sample-prompt' }, 'Once upon a time');
  const num = (idName, value, min, max, step) => el('input', { type: 'number', id: idName, value, min, max, step: step || 1 });
  const temp = num('sample-temperature', '0.8', 0, 10, 0.1), topk = num('sample-top-k', '50', 0, 100000),
    tokens = num('sample-tokens', '64', 1, 512);
  const go = el('button', { id: 'sample-go', onclick: async () => {
    go.disabled = true; out.textContent = 'sampling...'; out.className = 'sample';
    try {
      const got = await api('/api/sample', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ run: id, prompt: prompt.value, temperature: Number(temp.value), top_k: Number(topk.value), tokens: Number(tokens.value) }) });
      out.textContent = got.text;
      out.dataset.done = '1';
    } catch (e) { out.textContent = e.message; out.className = 'sample error'; out.dataset.done = 'error'; }
    go.disabled = false;
  } }, 'Sample');
  return el('div', {}, prompt, el('div', { class: 'controls' }, el('label', {}, 'temperature ', temp),
    el('label', {}, 'top-k ', topk), el('label', {}, 'tokens ', tokens), go,
    el('span', { class: 'muted' }, 'from the newest checkpoint; one sample at a time')), out);
}

function checkpointsTable(cks) {
  if (!cks.length) return el('p', { class: 'muted' }, 'No checkpoints yet.');
  return el('table', { id: 'checkpoints-table' }, el('thead', {}, el('tr', {}, el('th', {}, 'file'), el('th', {}, 'step'), el('th', { class: 'num' }, 'size'), el('th', {}, ''))),
    el('tbody', {}, cks.map(c => el('tr', {}, el('td', {}, c.name), el('td', {}, c.step ?? '-'), el('td', { class: 'num' }, fmtSi(c.bytes) + 'B'), el('td', {}, c.latest ? 'latest' : '')))));
}

function viewRun(root, id) {
  const title = el('h1', {}, 'Run ', id);
  const facts = el('div', {});
  const panel = curvePanel([id]);
  const details = el('div', {});
  root.append(title, facts, el('h2', {}, 'Curves'), panel.node, details);
  let detailsShown = false, lastStatus = '';
  const showDetails = async () => {
    const page = await api('/api/run?run=' + encodeURIComponent(id));
    facts.replaceChildren(factsOf(page.row));
    if (detailsShown && page.row.status === lastStatus && page.row.status !== 'running') return;
    lastStatus = page.row.status;
    const sample = details.querySelector('#sample-box');
    details.replaceChildren(
      el('h2', {}, 'Sample'), sample || el('div', { id: 'sample-box' }, sampleBox(id)),
      el('h2', {}, 'Checkpoints'), checkpointsTable(page.checkpoints),
      el('h2', {}, 'Plan'), planSection(page.plan),
      el('h2', {}, 'Profile'), profileSection(page.profile, page.has_trace, id),
      el('h2', {}, 'Config'), kvTable(page.config, 'config-table'),
      el('h2', {}, 'Run record'), kvTable(page.run, 'run-record-table'),
      page.warnings.length ? el('p', { class: 'error' }, page.warnings.join('; ')) : null);
    detailsShown = true;
  };
  every(5000, showDetails);
  let drawn = -1;
  return every(POLL_METRICS_MS, async () => {
    const m = await pollMetrics(id);
    if (m.rows.length !== drawn) panel.redraw();  // an idle run costs one small request a second
    drawn = m.rows.length;
    setStatus(m.status + ', ' + m.rows.length + ' metrics rows, updated ' + new Date().toLocaleTimeString());
    document.body.dataset.ready = 'run';
  });
}

function viewCompare(root, ids) {
  root.append(el('h1', {}, 'Compare'));
  if (ids.length === 0) {
    root.append(el('p', {}, 'Pick runs in the ', el('a', { href: '#/runs' }, 'runs table'), ' and press "Compare selected".'));
    return;
  }
  const panel = curvePanel(ids);
  const only = el('input', { type: 'checkbox', id: 'only-differences' });
  const diff = el('div', {});
  root.append(el('p', {}, ids.map((id, i) => [i ? ', ' : '', el('a', { href: runLink(id) }, id)])), panel.node,
    el('h2', {}, 'Configs'), el('label', {}, only, ' only the differences'), diff);
  const showDiff = async () => {
    const got = await api('/api/compare?' + ids.map(id => 'run=' + encodeURIComponent(id)).join('&'));
    const render = () => diff.replaceChildren(el('table', { id: 'compare-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'), got.runs.map(r => el('th', {}, r)))),
      el('tbody', {}, got.keys.filter(k => !only.checked || k.differs).map(k =>
        el('tr', { class: k.differs ? 'differs' : '' }, el('td', {}, k.key), k.values.map(v => el('td', {}, v)))))));
    only.onchange = render;
    render();
  };
  showDiff().catch(e => setStatus(e.message, true));
  let drawn = -1;
  return every(POLL_METRICS_MS, async () => {
    const total = (await Promise.all(ids.map(pollMetrics))).reduce((n, m) => n + m.rows.length, 0);
    if (total !== drawn) panel.redraw();
    drawn = total;
    setStatus('updated ' + new Date().toLocaleTimeString());
    document.body.dataset.ready = 'compare';
  });
}

function viewLab(root) {
  root.append(el('h1', {}, 'Lab'));
  const body = el('div', {});
  root.append(body);
  return every(POLL_RUNS_MS, async () => {
    const queues = await api('/api/lab');
    if (queues.length === 0) {
      body.replaceChildren(el('p', { class: 'muted', id: 'no-queue' }, 'No experiment queue under these folders (clocklm exp init QUEUE).'));
    } else {
      body.replaceChildren(...queues.map(q => {
        const l = q.ledger;
        return el('section', { class: 'queue' }, el('h2', {}, 'Queue ', q.dir),
          el('div', { class: 'facts' },
            el('div', { class: 'fact' }, el('small', {}, 'spent'), el('b', {}, fmtSeconds(l.spent))),
            el('div', { class: 'fact' }, el('small', {}, 'reserved'), el('b', {}, fmtSeconds(l.reserved))),
            el('div', { class: 'fact' }, el('small', {}, 'remaining'), el('b', {}, l.cap === null ? 'no cap' : fmtSeconds(l.remaining))),
            el('div', { class: 'fact' }, el('small', {}, 'runner'), el('b', {}, q.runner ? 'pid ' + q.runner.pid : 'idle'))),
          el('h2', {}, 'Experiments'),
          el('table', { class: 'queue-table' }, el('thead', {}, el('tr', {}, ['id', 'name', 'state', 'config', 'budget', 'device time', 'val bpb', 'vs baseline', 'hypothesis'].map(h => el('th', {}, h)))),
            el('tbody', {}, q.experiments.map(e => {
              const j = e.journal || {}, r = j.result || {}, d = j.delta || {};
              return el('tr', { 'data-exp-id': e.id }, el('td', {}, el('a', { href: runLink(e.id + '/run') }, e.id)), el('td', {}, e.name),
                el('td', {}, statusBadge(e.state)), el('td', {}, e.config + (e.set.length ? ' ' + e.set.join(' ') : '')),
                el('td', {}, e.budget), el('td', {}, fmtSeconds(e.device_seconds)), el('td', {}, fmtNum(r.val_bpb, 4)),
                el('td', {}, d.val_bpb === undefined || d.val_bpb === null ? '-' : (d.val_bpb > 0 ? '+' : '') + fmtNum(d.val_bpb, 4)),
                el('td', {}, e.hypothesis || e.reason || ''));
            }))));
      }));
    }
    setStatus('updated ' + new Date().toLocaleTimeString());
    document.body.dataset.ready = 'lab';
  });
}

// ---- routing ----
function route() {
  viewToken++;
  for (const t of timers) clearInterval(t);
  timers = [];
  delete document.body.dataset.ready;
  const main = document.getElementById('main');
  main.replaceChildren();
  const hash = location.hash || '#/runs';
  const [path, query] = hash.slice(1).split('?');
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', path.startsWith(a.getAttribute('href').slice(1)));
  if (path.startsWith('/run/')) return viewRun(main, decodeURIComponent(path.slice(5)));
  if (path === '/compare') return viewCompare(main, new URLSearchParams(query || '').getAll('run'));
  if (path === '/lab') return viewLab(main);
  return viewRuns(main);
}
window.addEventListener('hashchange', route);
route();
