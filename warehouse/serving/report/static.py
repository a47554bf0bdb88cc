"""The report's stylesheet and script, written once per report folder (``assets/``) beside
plotly.js (copied from the ``plotly`` Python package: no CDN, works offline from ``file://``).

Pages carry their data as JSON in ``<script type="application/json" id="pwh-data">`` and this
script builds tables and plots from it with DOM text nodes only (never ``innerHTML``), so
kernel names and labels from profiler files are always shown as text. Text handed to plotly
(titles, hover) is entity-escaped first: plotly reads a few HTML-like tags in its strings.
"""

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
.muted { color: var(--muted); }
.name { overflow-wrap: anywhere; word-break: break-word; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--bg); font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num[title] { cursor: help; }
td.ev { max-width: 520px; color: var(--muted); font-size: 12px; overflow-wrap: anywhere; }
td.k { max-width: 460px; min-width: 140px; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; color: #fff;
         background: var(--unc); white-space: nowrap; }
.badge.regressed { background: var(--reg); } .badge.improved { background: var(--imp); }
.badge.inconclusive { background: var(--inc); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px; min-width: 0; }
.card .head { font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.spark { height: 60px; }
.plot { height: 340px; border: 1px solid var(--line); border-radius: 6px; margin: 8px 0 14px; }
.bars { min-height: 300px; }
.toolbar { margin: 8px 0; display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); background: var(--bg);
         border-radius: 4px; cursor: pointer; }
button.on { background: #23303f; color: #fff; }
pre.sql { background: var(--bg); border: 1px solid var(--line); padding: 6px 8px; font-size: 12px;
          white-space: pre-wrap; overflow-wrap: anywhere; max-width: 1100px; }
.empty { padding: 30px; border: 1px dashed var(--line); border-radius: 8px; color: var(--muted);
         font-size: 15px; margin: 20px 0; }
nav.labels a { margin-right: 10px; }
"""

JS = r"""
'use strict';
(function () {
  const DATA = JSON.parse(document.getElementById('pwh-data').textContent);
  const ROOT = DATA.root || '';
  const VCOL = {regressed: '#c62828', improved: '#2e7d32', inconclusive: '#e08a00',
                unchanged: '#6b7785'};
  const VSYM = {regressed: 'triangle-up', improved: 'triangle-down', inconclusive: 'circle-open'};
  const plotted = [];
  let yType = 'linear';
  window.pwhReport = {page: DATA.page, plotted: plotted, errors: []};

  // ------------------------------------------------------------------ helpers (text only)
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v; else e.setAttribute(k, String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined) continue;
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
  // text for plotly: it interprets <br>, <b>, <a …> and entities in strings; escape them
  function pt(s, n) {
    return short(s, n || 120).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  }
  // an axis tick: the tail of a long name (audit keys end in their category)
  function tick(s) {
    s = String(s === null || s === undefined ? '' : s);
    return pt(s.length > 38 ? '\u2026' + s.slice(-37) : s, 60);
  }
  function num(v, d) {
    if (v === null || v === undefined) return '';
    if (typeof v !== 'number') return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential(2);
    return Number(v.toPrecision(d || 5)).toLocaleString('en-US', {maximumFractionDigits: 6});
  }
  function pct(v) { return v === null || v === undefined ? '' : (v > 0 ? '+' : '') + v.toFixed(1) + '%'; }
  function share(v) { return v === null || v === undefined ? '' : (100 * v).toFixed(1) + '%'; }
  function badge(v) { return v ? el('span', {class: 'badge ' + v}, v) : ''; }
  function objs(t) {
    return t.rows.map(r => Object.fromEntries(t.columns.map((c, i) => [c, r[i]])));
  }
  function sqlq(s) { return "'" + String(s).replace(/'/g, "''") + "'"; }
  function link(href, text) { return el('a', {href: ROOT + href, class: 'name'}, text); }
  function table(cols, rows) {
    const t = el('table');
    t.appendChild(el('thead', {}, el('tr', {}, cols.map(c => el('th', {}, c[0])))));
    const tb = el('tbody');
    for (const r of rows) {
      tb.appendChild(el('tr', {}, cols.map(c => {
        const v = c[1](r);
        const cls = c[2] || '';
        const title = c[3] ? c[3](r) : null;
        return el('td', {class: cls, title: title}, v);
      })));
    }
    t.appendChild(tb);
    return t;
  }

  // ------------------------------------------------------------------ lazy plots
  const io = 'IntersectionObserver' in window ? new IntersectionObserver((entries) => {
    for (const e of entries) if (e.isIntersecting) { io.unobserve(e.target); draw(e.target); }
  }, {rootMargin: '300px'}) : null;
  function draw(div) {
    if (div.dataset.plotted) return;
    div.dataset.plotted = '1';
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

  // ------------------------------------------------------------------ page chrome
  function header() {
    const h = el('header', {class: 'top'}, el('span', {class: 'title'}, 'Profile Warehouse report'),
      el('a', {href: ROOT + 'index.html'}, 'index'));
    if (DATA.snapshot) h.appendChild(el('span', {}, 'snapshot ' + DATA.snapshot));
    if (DATA.generated_at) h.appendChild(el('span', {}, 'generated ' + DATA.generated_at + ' UTC'));
    return h;
  }

  // ------------------------------------------------------------------ index
  function indexPage(app) {
    app.appendChild(el('h1', {}, 'Kernel trends and regressions'));
    if (DATA.empty) { app.appendChild(el('div', {class: 'empty', id: 'empty'}, DATA.empty)); return; }
    app.appendChild(el('h2', {}, 'Series'));
    app.appendChild(table([
      ['series', r => r.has_page ? link('series/' + r.slug + '.html', short(r.series, 80)) : short(r.series, 80), 'k'],
      ['runs', r => num(r.runs), 'num'], ['labels', r => num(r.labels), 'num'],
      ['latest label', r => r.latest_label === null ? '' : (r.label_slug && r.has_page
        ? link('labels/' + r.slug + '/' + r.label_slug + '.html', short(r.latest_label, 60))
        : short(r.latest_label, 60)), 'k'],
      ['captured (UTC)', r => r.latest_captured_at || r.last_captured_at || ''],
      ['regressed', r => num(r.regressed), 'num'], ['improved', r => num(r.improved), 'num'],
      ['inconclusive', r => num(r.inconclusive), 'num'], ['kernels', r => num(r.kernels), 'num'],
    ], DATA.series));
    app.appendChild(el('h2', {}, 'Latest regressions and improvements'));
    const ch = objs(DATA.changes);
    if (!ch.length) app.appendChild(el('p', {class: 'muted'}, 'None at the latest label of any series.'));
    else app.appendChild(table([
      ['verdict', r => badge(r.verdict)], ['series', r => short(r.series, 60), 'k'],
      ['label', r => short(r.label, 40), 'k'], ['kernel', r => short(r.kernel), 'k'],
      ['delta', r => pct(r.delta_pct), 'num'], ['q', r => num(r.q_value, 2), 'num'],
      ['evidence', r => short(r.evidence, 400), 'ev'],
    ], ch));
    app.appendChild(el('h2', {}, 'Kernels with a verdict at the latest label'));
    const sp = objs(DATA.sparklines);
    if (!sp.length) { app.appendChild(el('p', {class: 'muted'}, 'None.')); return; }
    const cards = el('div', {class: 'cards'});
    for (const s of sp) {
      const div = el('div', {class: 'spark', 'data-log': 'no'});
      cards.appendChild(el('div', {class: 'card'},
        el('div', {class: 'head', title: short(s.kernel, 2000)}, badge(s.verdict), ' ', pct(s.delta_pct), ' ',
          link('series/' + s.slug + '.html', short(s.series, 40)), ' \u00b7 ', short(s.kernel, 80)), div));
      plot(div, () => ({
        data: [{type: 'scatter', mode: 'lines', x: s.labels.map((_, i) => i), y: s.medians,
                line: {color: VCOL[s.verdict] || '#555', width: 1.5},
                customdata: s.labels.map(l => pt(l, 40)),
                hovertemplate: '%{customdata}: %{y:.4g} \u00b5s<extra></extra>'}],
        layout: {margin: {l: 2, r: 2, t: 2, b: 2}, height: 60, showlegend: false,
                 xaxis: {visible: false}, yaxis: {visible: false}},
        config: {displayModeBar: false},
      }));
    }
    app.appendChild(cards);
  }

  // ------------------------------------------------------------------ series
  function kernelFigure(k) {
    const T = objs(k.trend), P = objs(k.points);
    const ev = {};
    for (const t of T) ev[t.label] = t;
    const runs = {
      type: 'scatter', mode: 'markers', name: 'runs', x: P.map(p => p.captured_at),
      y: P.map(p => p.value_us), marker: {size: 5, color: 'rgba(70,80,95,0.5)'},
      customdata: P.map(p => [p.run_id.slice(0, 16), pt(p.label, 60), p.captured_at,
        pt((ev[p.label] || {}).verdict || '', 20), pt((ev[p.label] || {}).evidence || '', 240)]),
      hovertemplate: 'run %{customdata[0]}\u2026<br>label %{customdata[1]}<br>captured %{customdata[2]}' +
        '<br>value %{y:.5g} \u00b5s<br>%{customdata[3]}: %{customdata[4]}<extra></extra>',
    };
    const lab = (t) => [pt(t.label, 60), t.captured_at, pt(t.verdict || '', 20), pt(t.evidence || '', 240),
      t.delta_pct === null ? '' : pct(t.delta_pct), t.q_value === null ? '' : num(t.q_value, 2)];
    const med = {
      type: 'scatter', mode: 'lines', name: 'label median', x: T.map(t => t.captured_at),
      y: T.map(t => t.median_us), line: {color: '#1f5fa8', width: 2}, customdata: T.map(lab),
      hovertemplate: 'label %{customdata[0]}<br>captured %{customdata[1]}<br>median %{y:.5g} \u00b5s' +
        '<br>%{customdata[2]} %{customdata[4]} q=%{customdata[5]}<br>%{customdata[3]}<extra></extra>',
    };
    const fl = (t) => (t.floor_pct === null || t.floor_pct === undefined ? 5 : t.floor_pct) / 100;
    const lo = T.map(t => t.baseline_median_us === null ? null : t.baseline_median_us * (1 - fl(t)));
    const hi = T.map(t => t.baseline_median_us === null ? null : t.baseline_median_us * (1 + fl(t)));
    const bandLo = {type: 'scatter', mode: 'lines', x: T.map(t => t.captured_at), y: lo,
      line: {width: 0}, showlegend: false, hoverinfo: 'skip'};
    const bandHi = {type: 'scatter', mode: 'lines', x: T.map(t => t.captured_at), y: hi,
      line: {width: 0}, fill: 'tonexty', fillcolor: 'rgba(31,95,168,0.14)',
      name: 'baseline \u00b1 floor', hoverinfo: 'skip'};
    const data = [bandLo, bandHi, runs, med];
    for (const v of ['regressed', 'improved', 'inconclusive']) {
      const M = T.filter(t => t.verdict === v && t.baseline_median_us !== null);
      if (!M.length) continue;
      data.push({type: 'scatter', mode: 'markers', name: v, x: M.map(t => t.captured_at),
        y: M.map(t => t.median_us), customdata: M.map(lab),
        marker: {symbol: VSYM[v], size: v === 'inconclusive' ? 10 : 13, color: VCOL[v],
                 line: {width: 2, color: VCOL[v]}},
        hovertemplate: '<b>%{customdata[2]}</b> %{customdata[4]} q=%{customdata[5]}<br>label %{customdata[0]}' +
          '<br>captured %{customdata[1]}<br>median %{y:.5g} \u00b5s<br>%{customdata[3]}<extra></extra>'});
    }
    const shapes = T.filter(t => t.change_point).map(t => ({type: 'line', xref: 'x', yref: 'paper',
      x0: t.captured_at, x1: t.captured_at, y0: 0, y1: 1, line: {color: '#7b3fa0', width: 1.5, dash: 'dot'}}));
    const xaxis = {type: 'date'};
    const xs = new Set(P.map(p => p.captured_at).concat(T.map(t => t.captured_at)));
    if (xs.size === 1) {  // one capture time: show a day around it, not milliseconds
      const t0 = Date.parse([...xs][0] + 'Z');
      xaxis.range = [new Date(t0 - 432e5).toISOString(), new Date(t0 + 432e5).toISOString()];
    }
    return {data: data, layout: {
      title: {text: pt(k.kernel, 110) + ' <span style="font-size:11px">(' + pt(k.kind, 30) + ')</span>',
              font: {size: 13}},
      height: 340, margin: {l: 60, r: 10, t: 36, b: 36}, hovermode: 'closest',
      xaxis: xaxis, yaxis: {title: {text: '\u00b5s'}, type: 'linear'},
      legend: {orientation: 'h', y: -0.18, font: {size: 11}}, shapes: shapes}};
  }

  function seriesPage(app) {
    app.appendChild(el('h1', {class: 'name'}, 'Series ', short(DATA.series, 200)));
    const plural = (n, w) => n + ' ' + w + (n === 1 ? '' : 's');
    app.appendChild(el('p', {class: 'muted'}, plural(DATA.runs, 'run') + ', ' +
      plural(DATA.labels.length, 'label') + '. Points: every run; line: label medians; band: baseline median \u00b1 the floor; ' +
      'markers: verdicts (\u25b2 regressed, \u25bc improved, \u25cb inconclusive); dotted rules: change points.'));
    const nav = el('nav', {class: 'labels'}, 'label vs baseline: ');
    for (const l of DATA.labels.slice(-12)) nav.appendChild(link('labels/' + DATA.slug + '/' + l.slug + '.html', short(l.label, 30)));
    if (DATA.labels.length > 12) nav.appendChild(el('span', {class: 'muted'}, '(latest 12 of ' + DATA.labels.length + '; all below)'));
    app.appendChild(nav);
    app.appendChild(logToggle());
    if (!DATA.kernels.length) app.appendChild(el('div', {class: 'empty'}, 'No trended kernels in this series yet.'));
    for (const k of DATA.kernels) {
      const div = el('div', {class: 'plot kernel-plot', 'data-kernel': short(k.kernel, 300)});
      app.appendChild(div);
      plot(div, () => kernelFigure(k));
    }
    if (DATA.others.rows.length) {
      app.appendChild(el('h2', {}, 'Other kernels (latest label)'));
      app.appendChild(table([
        ['kernel', r => short(r.kernel), 'k'], ['kind', r => r.kernel_kind],
        ['verdict', r => badge(r.verdict)], ['median \u00b5s', r => num(r.median_us), 'num'],
        ['delta', r => pct(r.delta_pct), 'num'], ['share of run', r => share(r.share_of_run), 'num'],
      ], objs(DATA.others)));
    }
    app.appendChild(el('h2', {}, 'Labels'));
    app.appendChild(table([
      ['#', r => num(r.label_seq), 'num'],
      ['label', r => link('labels/' + DATA.slug + '/' + r.slug + '.html', short(r.label, 80)), 'k'],
      ['captured (UTC)', r => r.captured_at],
    ], DATA.labels.slice().reverse()));
  }

  // ------------------------------------------------------------------ label vs baseline
  function labelPage(app) {
    app.appendChild(el('h1', {class: 'name'}, short(DATA.label, 200), ' vs baseline'));
    app.appendChild(el('p', {}, 'series ', link('series/' + DATA.series_slug + '.html', short(DATA.series, 100)),
      ' \u00b7 label #' + DATA.label_seq + ', captured ' + DATA.captured_at + ' UTC \u00b7 ',
      DATA.prev ? link('labels/' + DATA.series_slug + '/' + DATA.prev + '.html', '\u2190 previous') : '', ' ',
      DATA.next ? link('labels/' + DATA.series_slug + '/' + DATA.next + '.html', 'next \u2192') : ''));
    const R = objs(DATA.rows);
    const c = {regressed: 0, improved: 0, inconclusive: 0, unchanged: 0};
    for (const r of R) if (r.verdict in c) c[r.verdict]++;
    app.appendChild(el('p', {}, Object.entries(c).map(([k, v]) => [badge(k), ' ' + v + '  '])));
    const moved = R.filter(r => r.delta_us !== null).sort((a, b) => Math.abs(b.delta_us) - Math.abs(a.delta_us)).slice(0, 25).reverse();
    if (moved.length) {
      app.appendChild(el('h2', {}, 'Where the time moved (label median \u2212 baseline median, \u00b5s)'));
      const div = el('div', {class: 'plot bars', 'data-log': 'no'});
      div.style.height = Math.max(260, 22 * moved.length + 80) + 'px';
      app.appendChild(div);
      plot(div, () => ({data: [{type: 'bar', orientation: 'h', y: moved.map((r, i) => i),
          x: moved.map(r => r.delta_us), marker: {color: moved.map(r => VCOL[r.verdict] || '#888')},
          customdata: moved.map(r => [pt(r.kernel, 200), pct(r.delta_pct), pt(r.verdict || '', 20)]),
          hovertemplate: '%{customdata[0]}<br>%{x:.4g} \u00b5s (%{customdata[1]}) %{customdata[2]}<extra></extra>'}],
        layout: {margin: {l: 260, r: 20, t: 10, b: 40}, height: Math.max(260, 22 * moved.length + 80),
          xaxis: {title: {text: '\u0394 \u00b5s'}, zeroline: true},
          yaxis: {tickmode: 'array', tickvals: moved.map((r, i) => i), ticktext: moved.map(r => tick(r.kernel))}}}));
    } else {
      app.appendChild(el('p', {class: 'muted'}, 'No baseline yet: nothing to compare this label with.'));
    }
    app.appendChild(el('h2', {}, 'Every kernel, by |delta|'));
    const extra = DATA.evidence_columns || [];
    app.appendChild(table([
      ['verdict', r => badge(r.verdict)], ['kernel', r => short(r.kernel), 'k'], ['kind', r => r.kernel_kind],
      ['share of run', r => share(r.share_of_run), 'num'], ['median \u00b5s', r => num(r.median_us), 'num'],
      ['baseline \u00b5s', r => num(r.baseline_median_us), 'num'], ['\u0394 \u00b5s', r => num(r.delta_us), 'num'],
      ['delta', r => pct(r.delta_pct), 'num'], ['q', r => num(r.q_value, 2), 'num'],
      ['runs', r => num(r.repeats) + ' vs ' + num(r.baseline_runs), 'num'],
      ...extra.map(c => [c, r => num(r[c]), 'num']),
      ['evidence', r => short(r.evidence, 400), 'ev'],
    ], R));
    if (DATA.runs && DATA.runs.length) {
      app.appendChild(el('h2', {}, 'Runs of this label'));
      app.appendChild(el('ul', {}, DATA.runs.map(r => el('li', {}, link('runs/' + r + '.html', r)))));
    }
  }

  // ------------------------------------------------------------------ run
  function runPage(app) {
    const run = DATA.run;
    app.appendChild(el('h1', {class: 'name'}, 'Run ' + run.run_id));
    app.appendChild(el('p', {}, 'series ', link('series/' + DATA.series_slug + '.html', short(run.series, 100)),
      ' \u00b7 label ', DATA.label_slug ? link('labels/' + DATA.series_slug + '/' + DATA.label_slug + '.html', short(run.label, 80)) : short(run.label, 80),
      ' \u00b7 captured ' + run.captured_at + ' UTC \u00b7 ' + run.source_format + ' \u00b7 checks: ' + run.check_status));
    const q = 'select * from marts.run_summary where run_id = ' + sqlq(run.run_id);
    const sum = [['total_us', num(run.total_us)], ['kernel_count', num(run.kernel_count)],
      ['top_kernel', short(run.top_kernel, 200)], ['top_kernel_share', share(run.top_kernel_share)],
      ['file_name', short(run.file_name, 200)]];
    app.appendChild(table([['field', r => r[0]], ['value', r => r[1], 'num',
      r => 'select ' + r[0] + ' from marts.run_summary where run_id = ' + sqlq(run.run_id)]], sum));
    app.appendChild(el('pre', {class: 'sql'}, q + ';'));
    const R = objs(DATA.rollup);
    if (R.length) {
      app.appendChild(el('h2', {}, 'Share of run per kernel'));
      const top = R.slice(0, 25).reverse();
      const div = el('div', {class: 'plot bars', 'data-log': 'no'});
      div.style.height = Math.max(240, 20 * top.length + 70) + 'px';
      app.appendChild(div);
      plot(div, () => ({data: [{type: 'bar', orientation: 'h', y: top.map((r, i) => i), x: top.map(r => r.share_of_run),
          customdata: top.map(r => pt(r.kernel, 200)), marker: {color: '#1f5fa8'},
          hovertemplate: '%{customdata}<br>%{x:.2%}<extra></extra>'}],
        layout: {margin: {l: 260, r: 20, t: 10, b: 40}, height: Math.max(240, 20 * top.length + 70),
          xaxis: {tickformat: '.0%'}, yaxis: {tickmode: 'array', tickvals: top.map((r, i) => i),
          ticktext: top.map(r => tick(r.kernel))}}}));
      app.appendChild(el('h2', {}, 'Rollup (marts.kernel_run_rollup)'));
      app.appendChild(el('p', {class: 'muted'}, 'Hover a number for the SQL that returns it.'));
      const cols = DATA.rollup.columns.filter(c => c !== 'kernel');
      // a kernel trace has one row per (device, kernel): the device picks the row
      const byDevice = DATA.rollup.columns.includes('device');
      const rowKey = r => ' and kernel = ' + sqlq(short(r.kernel, 100000)) + (!byDevice ? '' :
        r.device == null ? ' and device is null' : ' and device = ' + sqlq(r.device));
      app.appendChild(table([['kernel', r => short(r.kernel), 'k'], ...cols.map(c => [c,
        r => c === 'share_of_run' ? share(r[c]) : num(r[c]), 'num',
        r => 'select ' + c + ' from marts.kernel_run_rollup where run_id = ' + sqlq(run.run_id) + rowKey(r)])], R));
      app.appendChild(el('pre', {class: 'sql'}, DATA.sql.rollup));
    }
    const C = DATA.categories ? objs(DATA.categories) : [];
    if (C.length) {
      app.appendChild(el('h2', {}, 'Audit categories (marts.audit_category_rollup)'));
      const ccols = DATA.categories.columns.filter(c => c !== 'category');
      app.appendChild(table([['category', r => short(r.category), 'k'], ...ccols.map(c => [c,
        r => c === 'share' ? share(r[c]) : num(r[c]), 'num',
        r => 'select ' + c + " from marts.audit_category_rollup where run_id = " + sqlq(run.run_id) + " and level = 'run' and category = " + sqlq(r.category)])], C));
      app.appendChild(el('pre', {class: 'sql'}, DATA.sql.categories));
    }
  }

  function main() {
    document.body.insertBefore(header(), document.body.firstChild);
    const app = document.getElementById('app');
    app.textContent = '';
    ({index: indexPage, series: seriesPage, label: labelPage, run: runPage})[DATA.page](app);
    window.pwhReport.ready = true;
  }
  try { main(); } catch (err) { window.pwhReport.errors.push(String(err)); throw err; }
})();
"""
