"""The report's stylesheet and script, written once per report folder (``assets/``) beside
plotly.js (copied from the ``plotly`` Python package: no CDN, works offline from ``file://``).

Pages carry their data as JSON in ``<script type="application/json" id="pwh-data">`` and this
script builds tables and plots from it with DOM text nodes only (never ``innerHTML``), so
kernel names and labels from profiler files are always shown as text. Text handed to plotly
(titles, hover) is entity-escaped first: plotly reads a few HTML-like tags in its strings.

This module holds the stylesheet and the script's shared part (helpers, tables, lazy plots,
SVG sparklines, the page chrome); ``static_pages.py`` holds one function per page kind.
Every page fits a 1,400 px window: tables take the page's width and wrap long names, the
evidence of a row is on demand (``<details>``), wide extra columns sit in their own scrolling
box.
"""

from warehouse.serving.report.static_pages import PAGES_JS

CSS = r"""
:root { --fg: #1d232b; --muted: #5b6573; --line: #d9dee5; --bg: #f6f7f9;
        --reg: #c62828; --imp: #2e7d32; --inc: #e08a00; --unc: #6b7785; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0; background: #fff; }
header.top { background: #23303f; color: #fff; padding: 10px 20px; display: flex; gap: 18px;
             align-items: baseline; flex-wrap: wrap; }
header.top a { color: #cfe3ff; }
header.top .title { font-weight: 600; font-size: 16px; }
main { padding: 12px 20px 40px; max-width: 1400px; }
h1 { font-size: 20px; margin: 8px 0; overflow-wrap: anywhere; }
h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 3px; }
h3.swap-head { font-size: 14px; margin: 12px 0 2px; }
.muted { color: var(--muted); }
.small { font-size: 12px; }
.name { overflow-wrap: anywhere; word-break: break-word; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; max-width: 100%; }
table.wide { width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: var(--bg); font-weight: 600; position: sticky; top: 0; z-index: 1; }
th[title] { cursor: help; text-decoration: underline dotted; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num[title] { cursor: help; }
td.k { max-width: 420px; min-width: 140px; overflow-wrap: anywhere; word-break: break-word; }
td.k .kind { display: block; font-size: 11px; color: var(--muted); }
td.why { width: 1%; min-width: 60px; }
td.why details[open] { width: 340px; max-width: 340px; }
details.why summary { cursor: pointer; color: #1f5fa8; font-size: 12px; white-space: nowrap; }
details.why dl { margin: 4px 0; font-size: 12px; color: var(--muted); }
details.why dt { font-weight: 600; color: var(--fg); }
details.why dd { margin: 0 0 3px 0; overflow-wrap: anywhere; }
details.fold > summary { cursor: pointer; font-weight: 600; margin: 14px 0 6px; }
.scrollx { overflow-x: auto; max-width: 100%; }
.badge { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; color: #fff;
         background: var(--unc); white-space: nowrap; }
.badge.regressed { background: var(--reg); } .badge.improved { background: var(--imp); }
.badge.inconclusive { background: var(--inc); }
.badge.increased { background: #8e4b10; } .badge.decreased { background: #1f5fa8; }
svg.spark { display: block; }
.plot { height: 340px; border: 1px solid var(--line); border-radius: 6px; margin: 8px 0 14px; }
.bars { min-height: 260px; }
.grid2 { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 10px; }
.grid2 .plot { height: 260px; margin: 0; }
.toolbar { margin: 8px 0; display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); background: var(--bg);
         border-radius: 4px; cursor: pointer; }
button.on { background: #23303f; color: #fff; }
input.filter { font: inherit; padding: 2px 6px; width: 320px; max-width: 100%; }
pre.sql { background: var(--bg); border: 1px solid var(--line); padding: 6px 8px; font-size: 12px;
          white-space: pre-wrap; overflow-wrap: anywhere; max-width: 1100px; }
.empty { padding: 24px; border: 1px dashed var(--line); border-radius: 8px; color: var(--muted);
         font-size: 15px; margin: 16px 0; }
nav.labels a { margin-right: 10px; }
ul.runs { columns: 2; font-family: ui-monospace, monospace; font-size: 12px; }
table.summary td.head { white-space: nowrap; }
table.summary td.k { max-width: 760px; }
/* a window narrower than a table's least width: the table scrolls in its own box, the page
   does not (the header, the text and the plots stay in view) */
/* an opened "why" (340 px of evidence) can make a table wider than a wide window too: that
   table then scrolls in its own box, whatever the window's width */
table.wide:has(td.why details[open]) { display: block; overflow-x: auto; max-width: 100%; }
@media (max-width: 1440px) { td.why details[open] { width: 220px; max-width: 220px; } }
@media (max-width: 1240px) {
  table.wide, table.auto { display: block; overflow-x: auto; max-width: 100%; }
  td.k { min-width: 170px; }
}
"""

CORE_JS = r"""
'use strict';
(function () {
  const DATA = JSON.parse(document.getElementById('pwh-data').textContent);
  const ROOT = DATA.root || '';
  const VCOL = {regressed: '#c62828', improved: '#2e7d32', inconclusive: '#e08a00',
                unchanged: '#6b7785', increased: '#8e4b10', decreased: '#1f5fa8'};
  const VSYM = {regressed: 'triangle-up', improved: 'triangle-down', inconclusive: 'circle-open'};
  const plotted = [];
  const lazy = new Set();
  let yType = 'linear';
  // the test hooks: ready once the page is built; drawAll() draws every lazy plot now
  window.pwhReport = {page: DATA.page, plotted: plotted, errors: [], ready: false,
                      pending: () => lazy.size, drawAll: () => { for (const d of [...lazy]) draw(d); }};

  // ------------------------------------------------------------------ helpers (text only)
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v; else e.setAttribute(k, String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.appendChild(typeof kid === 'string' || typeof kid === 'number'
        ? document.createTextNode(String(kid)) : kid);
    }
    return e;
  }
  function short(s, n) {
    s = s === null || s === undefined ? '' : String(s);
    n = n || 160;
    return s.length > n ? s.slice(0, n - 1) + '\u2026 (' + s.length + ' chars)' : s;
  }
  // a name cut in the middle: what tells kernels apart is often at both ends
  function mid(s, n) {
    s = s === null || s === undefined ? '' : String(s);
    n = n || 60;
    if (s.length <= n) return s;
    const head = Math.ceil((n - 1) / 2), tail = Math.floor((n - 1) / 2);
    return s.slice(0, head) + '\u2026' + s.slice(s.length - tail);
  }
  // text for plotly: it interprets <br>, <b>, <a …> and entities in strings; escape them
  function esc(s) { return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'); }
  function pt(s, n) { return esc(short(s, n || 120)); }
  function tick(s) { return esc(mid(s, 44)); }
  // a name on screen: cut in the middle, the full name (up to 4,000 characters) on hover
  function kname(s, n) { return el('span', {class: 'name', title: short(s, 4000)}, mid(s, n || 70)); }
  function num(v, d) {
    if (v === null || v === undefined) return '';
    if (typeof v !== 'number') return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential(2);
    return Number(v.toPrecision(d || 5)).toLocaleString('en-US', {maximumFractionDigits: 6});
  }
  function pct(v) { return v === null || v === undefined ? '' : (v > 0 ? '+' : '') + v.toFixed(1) + '%'; }
  function share(v) { return v === null || v === undefined ? '' : (100 * v).toFixed(1) + '%'; }
  function sshare(v) { return v === null || v === undefined ? '' : (v > 0 ? '+' : '') + (100 * v).toFixed(2) + '%'; }
  function us(v) {
    if (v === null || v === undefined) return '';
    const a = Math.abs(v), sg = v > 0 ? '+' : v < 0 ? '\u2212' : '';
    if (a >= 1e6) return sg + num(a / 1e6, 3) + ' s';
    if (a >= 1e3) return sg + num(a / 1e3, 3) + ' ms';
    return sg + num(a, 3) + ' \u00b5s';
  }
  function ms(ns) { return ns === null || ns === undefined ? '' : num(ns / 1e6, 4); }
  function pval(r) {
    if (r.q_value !== null && r.q_value !== undefined) return 'q ' + num(r.q_value, 2);
    if (r.p_value !== null && r.p_value !== undefined) return 'p ' + num(r.p_value, 2);
    return '';
  }
  function badge(v) { return v ? el('span', {class: 'badge ' + v}, v) : ''; }
  function objs(t) {
    return t ? t.rows.map(r => Object.fromEntries(t.columns.map((c, i) => [c, r[i]]))) : [];
  }
  function sqlq(s) { return "'" + String(s).replace(/'/g, "''") + "'"; }
  function link(href, text, title) { return el('a', {href: ROOT + href, class: 'name', title: title}, text); }
  function plural(n, w) { return n + ' ' + w + (n === 1 ? '' : 's'); }
  // a table: cols = [header, cell(row), class, title(row), header title]
  function table(cols, rows, cls) {
    const t = el('table', {class: cls || 'wide'});
    t.appendChild(el('thead', {}, el('tr', {}, cols.map(c =>
      el('th', {class: c[2] === 'num' ? 'num' : null, title: c[4] || null}, c[0])))));
    const tb = el('tbody');
    for (const r of rows) {
      tb.appendChild(el('tr', {}, cols.map(c => {
        const v = c[1](r);
        const title = c[3] ? c[3](r) : null;
        return el('td', {class: c[2] || null, title: title}, v);
      })));
    }
    t.appendChild(tb);
    return t;
  }
  // evidence, p-values and power of a verdict row, on demand
  const WHY = [['evidence', 'evidence'], ['p_value', 'p (this label vs baseline)'],
    ['q_value', 'q (false-discovery adjusted / confirming test)'], ['method', 'method'],
    ['confirmed_by_label', 'confirmed by label'], ['baseline_from_label', 'baseline since label'],
    ['baseline_labels', 'baseline labels'], ['baseline_runs', 'baseline runs'],
    ['min_detectable_pct', 'smallest change these runs can detect (%)'],
    ['runs_needed', 'runs needed to decide'], ['min_attainable_p', 'smallest attainable p'],
    ['kernel_delta_pct', "the kernel's own change (%)"], ['run_wide_pct', 'run-wide change (%)'],
    ['run_wide_verdict', 'run-wide verdict'], ['run_factors', 'run-wide factor per run'],
    ['floor_pct', 'floor (%)'], ['status', 'status']];
  const HIDE = new Set(['kernel_kind', 'kernel', 'label', 'verdict', 'median_us', 'baseline_median_us',
    'delta_us', 'delta_pct', 'share_of_run', 'repeats', 'change_point', 'series', 'slug', 'has_page',
    'kind', 'name', 'anchor', 'label_slug', 'label_seq', 'captured_at', 'trail', 'trail_seq',
    'now_pct', 'now_label', 'adds_us', 'adds_share', 'baseline', 'now', 'floor', 'sign',
    'new_kernels', 'gone_kernels']);
  function val(v) {
    if (Array.isArray(v)) return v.map(x => num(x, 4)).join(', ');
    return typeof v === 'number' ? num(v, 4) : short(v, 1200);
  }
  function why(r) {
    const dl = el('dl');
    const seen = new Set();
    for (const [k, name] of WHY) {
      seen.add(k);
      if (r[k] === null || r[k] === undefined || r[k] === '') continue;
      dl.appendChild(el('dt', {}, name)); dl.appendChild(el('dd', {}, val(r[k])));
    }
    for (const k of Object.keys(r)) {  // columns a mart gains: shown by name
      if (seen.has(k) || HIDE.has(k) || r[k] === null || r[k] === undefined || r[k] === '') continue;
      dl.appendChild(el('dt', {}, k.replace(/_/g, ' '))); dl.appendChild(el('dd', {}, val(r[k])));
    }
    return el('details', {class: 'why'}, el('summary', {}, 'why'), dl);
  }
  // an SVG sparkline on an honest scale: the band is the baseline \u00b1 the floor, the axis
  // always spans at least that band, so noise inside the floor stays small
  function spark(values, baseline, floor, mark, color) {
    const NS = 'http://www.w3.org/2000/svg', W = 150, H = 32;
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('class', 'spark'); svg.setAttribute('width', W); svg.setAttribute('height', H);
    const ys = (values || []).filter(v => v !== null && v !== undefined);
    if (!ys.length) return svg;
    const f = (floor === null || floor === undefined ? 5 : floor) / 100;
    const lo0 = baseline ? baseline * (1 - f) : Math.min(...ys), hi0 = baseline ? baseline * (1 + f) : Math.max(...ys);
    let lo = Math.min(lo0, ...ys), hi = Math.max(hi0, ...ys);
    const pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.05 || 1;
    lo -= pad; hi += pad;
    const n = values.length;
    const x = i => n === 1 ? W / 2 : 2 + i * (W - 4) / (n - 1);
    const y = v => H - 2 - (v - lo) / (hi - lo) * (H - 4);
    const add = (tag, attrs) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
      svg.appendChild(e); return e;
    };
    if (baseline) add('rect', {x: 0, y: y(hi0), width: W, height: Math.max(1, y(lo0) - y(hi0)),
                               fill: 'rgba(31,95,168,0.14)'});
    const pts = values.map((v, i) => v === null || v === undefined ? null : x(i) + ',' + y(v).toFixed(1)).filter(Boolean);
    add('polyline', {points: pts.join(' '), fill: 'none', stroke: '#333', 'stroke-width': 1.3});
    if (mark !== null && mark !== undefined && mark >= 0 && values[mark] !== null && values[mark] !== undefined)
      add('circle', {cx: x(mark), cy: y(values[mark]), r: 3, fill: color || '#333'});
    return svg;
  }

  // ------------------------------------------------------------------ lazy plots
  const io = 'IntersectionObserver' in window ? new IntersectionObserver((entries) => {
    for (const e of entries) if (e.isIntersecting) draw(e.target);
  }, {rootMargin: '400px'}) : null;
  function draw(div) {
    if (div.dataset.plotted) return;
    div.dataset.plotted = '1';
    lazy.delete(div);
    if (io) io.unobserve(div);
    try {
      const f = div._pwhFigure();
      if (f.layout.yaxis && div.dataset.log !== 'no') f.layout.yaxis.type = yType;
      Plotly.newPlot(div, f.data, f.layout, Object.assign(
        {responsive: true, displaylogo: false}, f.config || {}));
      plotted.push(div);
    } catch (err) {
      window.pwhReport.errors.push(String(err));
      div.appendChild(el('p', {class: 'muted'}, 'plot failed: ' + err));
    }
  }
  function plot(div, figure) {
    div._pwhFigure = figure;
    lazy.add(div);
    if (io) io.observe(div); else draw(div);
    return div;
  }
  function logToggle() {
    const b1 = el('button', {class: 'on', type: 'button'}, 'linear');
    const b2 = el('button', {type: 'button'}, 'log');
    const set = (t) => {
      yType = t;
      b1.className = t === 'linear' ? 'on' : ''; b2.className = t === 'log' ? 'on' : '';
      for (const d of plotted) if (d.dataset.log !== 'no') Plotly.relayout(d, {'yaxis.type': t});
    };
    b1.onclick = () => set('linear'); b2.onclick = () => set('log');
    return el('div', {class: 'toolbar'}, 'y axis: ', b1, b2);
  }
  // a folded section (<details>) that opens when the address names it (#id)
  function fold(id, summary, ...kids) {
    const d = el('details', {class: 'fold', id: id}, el('summary', {}, summary), ...kids);
    return d;
  }
  function openTarget() {
    const id = decodeURIComponent(location.hash.slice(1));
    const t = id && document.getElementById(id);
    if (t && t.tagName === 'DETAILS') t.open = true;
    if (t) t.scrollIntoView();
  }

  // ------------------------------------------------------------------ page chrome
  function header() {
    const h = el('header', {class: 'top'}, el('span', {class: 'title'}, 'Profile Warehouse report'),
      el('a', {href: ROOT + 'index.html'}, 'index'));
    if (DATA.snapshot) h.appendChild(el('span', {}, 'snapshot ' + DATA.snapshot));
    if (DATA.generated_at) h.appendChild(el('span', {}, 'generated ' + DATA.generated_at + ' UTC'));
    return h;
  }
"""

CORE_END_JS = r"""
  function main() {
    document.body.insertBefore(header(), document.body.firstChild);
    const app = document.getElementById('app');
    app.textContent = '';
    ({index: indexPage, series: seriesPage, label: labelPage, run: runPage})[DATA.page](app);
    window.addEventListener('hashchange', openTarget);
    if (location.hash) openTarget();
    window.pwhReport.readyAt = performance.now();  // ms since navigation start (the bench)
    window.pwhReport.ready = true;
  }
  try { main(); } catch (err) { window.pwhReport.errors.push(String(err)); throw err; }
})();
"""

JS = CORE_JS + PAGES_JS + CORE_END_JS
