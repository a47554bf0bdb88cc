"""The report script's page functions (one per page kind), joined into ``static.JS`` between
the shared helpers and ``main`` (see ``static.py``). Text only (DOM text nodes), as there."""

PAGES_JS = r"""
  // ------------------------------------------------------------------ index
  function changeTable(rows, history) {
    const cols = [
      ['', r => badge(r.verdict)],
      ['series', r => r.has_page ? link('series/' + r.slug + '.html', short(r.series, 60)) : short(r.series, 60), 'k'],
      ['what changed', r => { const text = r.kind === 'metric' && r.metric
            ? mid(r.kernel, 44) + ' \u00b7 ' + short(r.metric, 90) : mid(r.name, 70);
          return el('span', {}, r.has_page
          ? link('series/' + r.slug + '.html#' + r.anchor, text, short(r.name, 4000))
          : el('span', {class: 'name', title: short(r.name, 4000)}, text), el('span', {class: 'kind'}, r.kind)); }, 'k'],
      ['since label', r => el('span', {}, r.has_page
          ? link('labels/' + r.slug + '/' + r.label_slug + '.html', short(r.label, 40)) : short(r.label, 40),
          el('span', {class: 'kind'}, '#' + r.label_seq + (r.captured_at ? ' \u00b7 ' + r.captured_at.slice(0, 10) : '')),
          swapNote(r)), 'k'],
      ['size', r => pct(r.delta_pct), 'num', null, 'the change at the label it began at (label median vs the baseline before it)'],
      ['now', r => pct(r.now_pct), 'num', r => r.now_label === null ? null : 'the median of the label medians from the latest change through label ' +
         r.now_label + ', vs the level before this change', 'the level now (since the latest change) vs the level before the change'],
      ['per run', r => us(r.adds_us), 'num', null, 'time the change adds to every run now (latest median \u2212 the level before)'],
      ['of run', r => sshare(r.adds_share), 'num', null, 'that time as a share of the run (median run total at the latest label)'],
      ['q / p', r => pval(r), 'num', null, 'q of the confirming test, else p of the label vs its baseline'],
      ['trend', r => r.trail ? spark(r.trail, r.baseline, r.floor, r.trail_seq.indexOf(r.label_seq), VCOL[r.verdict]) : ''],
    ];
    if (history) cols.push(['what became of it', r => r.status, 'k']);
    cols.push(['', r => why(r), 'why']);
    return table(cols, rows);
  }

  // kernels new / gone at the label a change began at (a kernel swap: often its cause)
  function swapNote(r) {
    if (!r.new_kernels && !r.gone_kernels) return '';
    const text = (r.new_kernels && r.gone_kernels ? 'kernel swap: ' : 'kernels: ') + (r.new_kernels ? r.new_kernels + ' new' : '') +
      (r.new_kernels && r.gone_kernels ? ', ' : '') + (r.gone_kernels ? r.gone_kernels + ' gone' : '');
    return el('span', {class: 'kind swap-note'}, r.has_page
      ? link('labels/' + r.slug + '/' + r.label_slug + '.html#new-gone', text,
             'kernels new at this label and gone since the previous label (a kernel swap)') : text);
  }

  // a series' verdicts at its latest label: the inconclusive as a count linking to them
  function atLatest(r) {
    if (r.labels <= 1) return el('span', {class: 'muted'}, 'first label: no history yet');
    const out = [];
    if (r.regressed) out.push(badge('regressed'), ' ' + r.regressed + ' ');
    if (r.improved) out.push(badge('improved'), ' ' + r.improved + ' ');
    if (r.inconclusive) out.push(r.label_slug && r.has_page
      ? link('labels/' + r.slug + '/' + r.label_slug + '.html#inconclusive', r.inconclusive + ' inconclusive')
      : r.inconclusive + ' inconclusive');
    return out.length ? el('span', {}, out) : 'no change';
  }

  function indexPage(app) {
    app.appendChild(el('h1', {}, 'What changed, since when, by how much'));
    if (DATA.empty) { app.appendChild(el('div', {class: 'empty', id: 'empty'}, DATA.empty)); return; }
    const E = objs(DATA.effect), H = objs(DATA.history);
    // a metric that increased or decreased is neither a regression nor an improvement
    const nv = v => E.filter(r => r.verdict === v).length;
    const moved = nv('increased') + nv('decreased');
    const series = new Set(E.map(r => r.series)).size;
    app.appendChild(el('p', {id: 'effect-summary'}, E.length
      ? plural(E.length, 'change') + ' in effect in ' + plural(series, 'series').replace('seriess', 'series') + ': ' +
        plural(nv('regressed'), 'regression') + ', ' + plural(nv('improved'), 'improvement') +
        (moved ? ', ' + plural(moved, 'metric') + ' that moved (' + nv('increased') + ' increased, ' + nv('decreased') + ' decreased)' : '') +
        ', by the share of the run they take or give back. ' + (H.length ? H.length + ' reverted or no longer measured: in the history below.' : '')
      : 'No confirmed regression or improvement is in effect at the latest label of any series.'));
    app.appendChild(el('h2', {id: 'in-effect'}, 'Changes in effect'));
    if (E.length) app.appendChild(changeTable(E, false));
    app.appendChild(el('p', {class: 'muted small'}, 'A change is in effect while the level now still differs from the level before it by at least the floor; ' +
      '"size" is the change at the label it began at, "now" the level since the latest change (median of label medians) against the level before it. ' +
      'Bands in the trends: that level \u00b1 the floor.'));
    app.appendChild(el('h2', {}, 'Series'));
    app.appendChild(table([
      ['series', r => r.has_page ? link('series/' + r.slug + '.html', short(r.series, 80)) : short(r.series, 80), 'k'],
      ['runs', r => num(r.runs), 'num'], ['labels', r => num(r.labels), 'num'],
      ['latest label', r => r.latest_label === null ? '' : el('span', {}, (r.label_slug && r.has_page
        ? link('labels/' + r.slug + '/' + r.label_slug + '.html', short(r.latest_label, 60))
        : short(r.latest_label, 60)), el('span', {class: 'kind'}, (r.latest_captured_at || r.last_captured_at || '') + ' UTC')), 'k'],
      ['in effect', r => (r.effect_up ? '\u25b2 ' + r.effect_up + ' ' : '') + (r.effect_down ? '\u25bc ' + r.effect_down : '') || '\u2013', 'num', null,
       'changes in effect: \u25b2 regressions and metrics that increased, \u25bc improvements and metrics that decreased'],
      ['at the latest label', atLatest],
      ['kernels', r => num(r.kernels), 'num'],
    ], DATA.series));
    if (H.length) app.appendChild(fold('history', 'History: ' + plural(H.length, 'earlier change') +
      ' reverted or no longer measured', changeTable(H, true)));
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
      t.delta_pct === null ? '' : pct(t.delta_pct), pval(t)];
    const med = {
      type: 'scatter', mode: T.length > 1 ? 'lines' : 'lines+markers', name: 'label median', x: T.map(t => t.captured_at),
      y: T.map(t => t.median_us), line: {color: '#1f5fa8', width: 2}, customdata: T.map(lab),
      hovertemplate: 'label %{customdata[0]}<br>captured %{customdata[1]}<br>median %{y:.5g} \u00b5s' +
        '<br>%{customdata[2]} %{customdata[4]} %{customdata[5]}<br>%{customdata[3]}<extra></extra>',
    };
    const fl = (t) => (t.floor_pct === null || t.floor_pct === undefined ? 5 : t.floor_pct) / 100;
    const lo = T.map(t => t.baseline_median_us === null ? null : t.baseline_median_us * (1 - fl(t)));
    const hi = T.map(t => t.baseline_median_us === null ? null : t.baseline_median_us * (1 + fl(t)));
    const data = [];
    if (lo.some(v => v !== null)) {  // no legend entry for a band that is not drawn
      data.push({type: 'scatter', mode: 'lines', x: T.map(t => t.captured_at), y: lo,
        line: {width: 0}, showlegend: false, hoverinfo: 'skip'});
      data.push({type: 'scatter', mode: 'lines', x: T.map(t => t.captured_at), y: hi,
        line: {width: 0}, fill: 'tonexty', fillcolor: 'rgba(31,95,168,0.14)',
        name: 'baseline \u00b1 floor', hoverinfo: 'skip'});
    }
    data.push(runs, med);
    // inconclusive within the floor is noise: marked only beyond it ("looks changed, not proven")
    const beyond = t => t.delta_pct !== null && Math.abs(t.delta_pct) >= 100 * fl(t);
    for (const v of ['regressed', 'improved', 'inconclusive']) {
      const M = T.filter(t => t.verdict === v && t.baseline_median_us !== null && (v !== 'inconclusive' || beyond(t)));
      if (!M.length) continue;
      data.push({type: 'scatter', mode: 'markers', name: v === 'inconclusive' ? 'inconclusive beyond the floor' : v, x: M.map(t => t.captured_at),
        y: M.map(t => t.median_us), customdata: M.map(lab),
        marker: {symbol: VSYM[v], size: v === 'inconclusive' ? 10 : 13, color: VCOL[v],
                 line: {width: 2, color: VCOL[v]}},
        hovertemplate: '<b>%{customdata[2]}</b> %{customdata[4]} %{customdata[5]}<br>label %{customdata[0]}' +
          '<br>captured %{customdata[1]}<br>median %{y:.5g} \u00b5s<br>%{customdata[3]}<extra></extra>'});
    }
    const shapes = T.filter(t => t.change_point).map(t => ({type: 'line', xref: 'x', yref: 'paper',
      x0: t.captured_at, x1: t.captured_at, y0: 0, y1: 1, line: {color: '#7b3fa0', width: 1.5, dash: 'dot'}}));
    return {data: data, layout: {
      title: {text: esc(mid(k.kernel, 110)) + ' <span style="font-size:11px">(' + pt(k.kind, 30) + ')</span>',
              font: {size: 13}},
      height: 340, margin: {l: 60, r: 10, t: 36, b: 36}, hovermode: 'closest',
      xaxis: {type: 'date', range: xSpan ? xSpan.slice() : undefined}, yaxis: {title: {text: '\u00b5s'}, type: 'linear'},
      legend: {orientation: 'h', y: -0.18, font: {size: 11}}, shapes: shapes}};
  }

  // one time axis for every kernel of a series (its first to its latest capture): a kernel
  // measured at a few labels only (new, renamed, gone) sits where it was in the history, not
  // alone on an axis of milliseconds around its one point
  let xSpan = null;
  function seriesSpan() {
    const t = [];
    for (const l of DATA.labels || []) if (l.captured_at) t.push(Date.parse(l.captured_at + 'Z'));
    for (const k of DATA.kernels || []) for (const p of objs(k.points)) if (p.captured_at) t.push(Date.parse(p.captured_at + 'Z'));
    const ok = t.filter(v => !Number.isNaN(v));
    if (!ok.length) return null;
    const a = Math.min(...ok), b = Math.max(...ok), pad = (b - a) * 0.03 || 3600e3;
    const iso = v => new Date(v).toISOString().replace('Z', '');
    return [iso(a - pad), iso(b + pad)];
  }

  function labelMedians(P, key) {  // per label (in capture order): median of key over runs
    const by = new Map();
    for (const p of P) if (p[key] !== null && p[key] !== undefined) {
      if (!by.has(p.label)) by.set(p.label, {t: p.captured_at, v: []});
      by.get(p.label).v.push(p[key]);
    }
    return [...by.entries()].map(([l, o]) => {
      const v = o.v.slice().sort((a, b) => a - b), m = v.length >> 1;
      return {label: l, t: o.t, v: v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2};
    });
  }

  function stepsSection(app) {
    const P = objs(DATA.steps);
    app.appendChild(el('h2', {id: 'steps'}, 'Step time and GPU idle share over labels'));
    const S = labelMedians(P, 'step_ms'), I = labelMedians(P, 'idle_share');
    app.appendChild(el('p', {class: 'muted small'}, 'Points: each run (median step time over its ranks\u2019 steps); lines: label medians; ' +
      'idle share: idle time over the span of the GPU timeline (right axis).'));
    const div = el('div', {class: 'plot steps-plot', 'data-log': 'no'});
    app.appendChild(div);
    plot(div, () => {
      const data = [];
      if (S.length) {
        data.push({type: 'scatter', mode: 'markers', name: 'runs: step time', x: P.map(p => p.captured_at), y: P.map(p => p.step_ms),
          customdata: P.map(p => [p.run_id.slice(0, 16), pt(p.label, 60), num(p.steps)]), marker: {size: 5, color: 'rgba(70,80,95,0.5)'},
          hovertemplate: 'run %{customdata[0]}\u2026<br>label %{customdata[1]}<br>%{customdata[2]} steps, median %{y:.4g} ms<extra></extra>'});
        data.push({type: 'scatter', mode: 'lines+markers', name: 'step time (label median)', x: S.map(s => s.t), y: S.map(s => s.v),
          customdata: S.map(s => pt(s.label, 60)), line: {color: '#1f5fa8', width: 2},
          hovertemplate: 'label %{customdata}<br>step %{y:.4g} ms<extra></extra>'});
      }
      if (I.length) data.push({type: 'scatter', mode: 'lines+markers', name: 'GPU idle share (label median)', yaxis: 'y2',
        x: I.map(s => s.t), y: I.map(s => s.v), customdata: I.map(s => pt(s.label, 60)), line: {color: '#e08a00', width: 2, dash: 'dot'},
        hovertemplate: 'label %{customdata}<br>idle %{y:.1%}<extra></extra>'});
      return {data: data, layout: {height: 340, margin: {l: 60, r: 60, t: 10, b: 36}, hovermode: 'closest',
        xaxis: {type: 'date'}, yaxis: {title: {text: 'ms per step'}, rangemode: 'tozero'},
        yaxis2: {title: {text: 'idle'}, overlaying: 'y', side: 'right', tickformat: '.0%', rangemode: 'tozero'},
        legend: {orientation: 'h', y: -0.18, font: {size: 11}}}};
    });
  }

  // a trace fact's value in its unit: a share for gpu_idle_share, else ns shown as ms
  function fval(fact, v) {
    if (v === null || v === undefined) return '';
    return fact === 'gpu_idle_share' ? share(v) : ms(v) + ' ms';
  }
  const TRACE_FACT = {step_time: 'step time', gpu_idle_share: 'GPU idle share',
    communication_ns: 'communication time', op_kernel_ns: 'GPU time under the operator'};
  function traceEvidence(r) {  // the verdict's evidence only (the values are in the row)
    const o = {};
    for (const c of ['evidence', 'p_value', 'q_value', 'method', 'confirmed_by_label', 'baseline_from_label',
      'baseline_runs', 'min_detectable_pct', 'floor_pct']) if (r[c] !== undefined) o[c] = r[c];
    return why(o);
  }

  function traceSection(app) {
    const K = DATA.trace.keys, L = objs(DATA.trace.latest);
    app.appendChild(el('h2', {id: 'trace-facts'}, 'Trace facts: step time, GPU idle, communication, GPU time per operator'));
    const nChanged = K.filter(k => k.changed).length;
    app.appendChild(el('p', {class: 'muted small'}, 'Verdicts of marts.trace_trends per label (the same engine as the kernels\u2019): ' +
      plural(nChanged, 'fact key') + ' with a confirmed change; every whole-run key below, every key at the latest label in the table after.'));
    for (const k of K) {
      const R = objs(k.rows);
      const box = el('div', {class: 'trace-fact', id: k.anchor, 'data-fact': k.fact, 'data-key': short(k.key, 300)});
      const c = k.change;
      box.appendChild(el('h3', {class: 'name'}, short(k.key, 200), ' ', el('span', {class: 'kind'}, k.fact + ' \u00b7 ' + (TRACE_FACT[k.fact] || k.fact)),
        ' ', c ? el('span', {class: 'trace-change'}, badge(c.verdict), ' ' + pct(c.delta_pct) + ' at label ' + short(c.label, 40)) : '',
        k.latest_verdict ? el('span', {class: 'kind'}, ' \u00b7 at the latest label: ' + k.latest_verdict) : ''));
      box.appendChild(table([
        ['#', r => num(r.label_seq), 'num'], ['label', r => short(r.label, 40), 'k'],
        ['verdict', r => badge(r.verdict)],
        ['median', r => fval(k.fact, r.median), 'num', null, 'median of the label\u2019s runs'],
        ['baseline', r => fval(k.fact, r.baseline_median), 'num', null, 'median of the baseline runs'],
        ['change', r => pct(r.delta_pct), 'num'],
        ['q / p', r => pval(r), 'num', null, 'q of the confirming test, else p of this label vs its baseline'],
        ['runs', r => r.repeats === undefined || r.repeats === null ? '' : num(r.repeats), 'num'],
        ['', r => traceEvidence(r), 'why'],
      ], R.slice().reverse()));
      app.appendChild(box);
    }
    if (L.length) app.appendChild(fold('trace-latest', 'Every trace fact at its latest label (' + plural(L.length, 'key') + ')', table([
      ['fact', r => r.fact, 'k'], ['key', r => kname(r.key, 80), 'k'], ['label', r => short(r.label, 30)],
      ['verdict', r => badge(r.verdict)], ['median', r => fval(r.fact, r.median), 'num'],
      ['baseline', r => fval(r.fact, r.baseline_median), 'num'], ['change', r => pct(r.delta_pct), 'num'],
    ], L)));
  }

  function metricFigure(r, MARK, MSYM) {
    const f = (r.floor_pct === null || r.floor_pct === undefined ? 5 : r.floor_pct) / 100;
    const x = r.labels.map(l => pt(l, 40));
    const B = r.baselines || r.labels.map(() => null);
    const V = r.verdicts || r.labels.map(() => null);
    const lo = B.map(b => b === null ? null : b * (1 - f)), hi = B.map(b => b === null ? null : b * (1 + f));
    const ys = r.medians.filter(v => v !== null);
    const first = ys.length ? ys[0] : 0;
    const span = lo.concat(hi).filter(v => v !== null);
    if (!span.length) span.push(first * (1 - f), first * (1 + f));
    const ymin = Math.min(...span, ...ys), ymax = Math.max(...span, ...ys), pad = (ymax - ymin) * 0.06 || Math.abs(ymax) * 0.05 || 1;
    const idx = r.labels.map((l, i) => i);
    const changes = idx.filter(i => MARK.includes(V[i]));
    const last = changes.length ? changes[changes.length - 1] : null;
    const data = [];
    if (lo.some(v => v !== null)) {
      data.push({type: 'scatter', mode: 'lines', x: x, y: lo, line: {width: 0}, hoverinfo: 'skip', connectgaps: false});
      data.push({type: 'scatter', mode: 'lines', x: x, y: hi, line: {width: 0}, fill: 'tonexty',
        fillcolor: 'rgba(31,95,168,0.14)', hoverinfo: 'skip', connectgaps: false});
    }
    data.push({type: 'scatter', mode: 'lines+markers', x: x, y: r.medians, name: 'label median',
      customdata: idx.map(i => [pt(V[i] || '', 20), B[i] === null ? '' : num(B[i])]),
      line: {color: '#46505f', width: 2}, marker: {size: 5},
      hovertemplate: '%{x}: %{y:.5g}<br>baseline %{customdata[1]}<br>%{customdata[0]}<extra></extra>'});
    for (const v of MARK) {
      const at = changes.filter(i => V[i] === v);
      if (at.length) data.push({type: 'scatter', mode: 'markers', name: v, x: at.map(i => x[i]), y: at.map(i => r.medians[i]),
        marker: {symbol: MSYM[v], size: 13, color: VCOL[v]}, hovertemplate: v + ' at %{x}: %{y:.5g}<extra></extra>'});
    }
    const said = last === null ? (r.verdict ? pt(r.verdict, 20) : '')
      : pt(V[last], 20) + ' at ' + pt(r.labels[last], 30) + (r.verdict && last !== r.labels.length - 1 ? '; latest: ' + pt(r.verdict, 20) : '');
    return {data: data, layout: {height: 260, margin: {l: 60, r: 10, t: 40, b: 50}, showlegend: false,
      title: {text: esc(mid(r.kernel, 60)) + '<br><span style="font-size:11px">' + pt(r.metric, 80) +
        (r.unit ? ' (' + pt(r.unit, 20) + ')' : '') + (said ? ' \u00b7 ' + said : '') + '</span>', font: {size: 12}},
      xaxis: {type: 'category'}, yaxis: {range: [ymin - pad, ymax + pad]}}};
  }

  function metricsSection(app) {
    const M = objs(DATA.metrics);
    app.appendChild(el('h2', {id: 'metrics'}, 'Kernel metrics (' + plural(M.length, 'kernel metric') + ')'));
    // the metrics that changed first, then the key metrics; each on an honest scale: the
    // shaded band is each label's baseline \u00b1 the floor (as in the kernels' plots), the axis
    // spans at least it, so noise of a fraction of a percent stays flat; a marker where a
    // change was found (the title says the latest label's verdict as well)
    const shown = M.filter(r => r.plotted && r.medians && r.medians.length > 1)
      .sort((a, b) => (b.changed ? 1 : 0) - (a.changed ? 1 : 0));
    const MARK = ['regressed', 'improved', 'increased', 'decreased'];
    const MSYM = {regressed: 'triangle-up', improved: 'triangle-down', increased: 'triangle-up', decreased: 'triangle-down'};
    if (shown.length) {
      const grid = el('div', {class: 'grid2'});
      for (const r of shown) {
        const div = el('div', {class: 'plot metric-plot', 'data-log': 'no'});
        grid.appendChild(div);
        plot(div, () => metricFigure(r, MARK, MSYM));
      }
      app.appendChild(grid);
    }
    const input = el('input', {class: 'filter', type: 'search', placeholder: 'filter kernels and metrics'});
    const tbl = table([
      ['kernel', r => kname(r.kernel, 60), 'k'], ['metric', r => short(r.metric, 120), 'k'],
      ['unit', r => short(r.unit, 20)], ['label', r => short(r.label, 30)],
      ['median', r => num(r.median), 'num'], ['baseline', r => num(r.baseline), 'num'],
      ['change', r => pct(r.delta_pct), 'num'], ['verdict', r => badge(r.verdict)],
    ], M);
    const trs = [...tbl.tBodies[0].rows];
    input.oninput = () => {
      const q = input.value.toLowerCase();
      M.forEach((r, i) => { trs[i].style.display = !q || (r.kernel + ' ' + r.metric).toLowerCase().includes(q) ? '' : 'none'; });
    };
    app.appendChild(fold('metrics-all', 'Every metric at its latest label', el('div', {class: 'toolbar'}, input), tbl));
  }

  function seriesPage(app) {
    app.appendChild(el('h1', {class: 'name'}, 'Series ', short(DATA.series, 200)));
    const nav = el('nav', {class: 'labels'}, 'label vs baseline: ');
    for (const l of DATA.labels.slice(-12)) nav.appendChild(link('labels/' + DATA.slug + '/' + l.slug + '.html', short(l.label, 30)));
    if (DATA.labels.length > 12) nav.appendChild(el('span', {class: 'muted'}, '(latest 12 of ' + DATA.labels.length + '; all below)'));
    if (DATA.labels.length <= 1) {
      const only = DATA.labels[0];
      app.appendChild(el('div', {class: 'empty', id: 'first-label'}, 'First label: no history yet. ' + plural(DATA.runs, 'run') +
        ' of label ' + (only ? short(only.label, 60) : '') + '; trends and verdicts start with the next label.'));
      app.appendChild(nav);
      const K = DATA.kernels.map(k => { const t = objs(k.trend); const last = t[t.length - 1] || {};
        return {kernel: k.kernel, kernel_kind: k.kind, median_us: last.median_us, share_of_run: k.share_of_run, repeats: last.repeats}; })
        .concat(objs(DATA.others))
        .sort((a, b) => (b.share_of_run === null || b.share_of_run === undefined ? -1 : b.share_of_run) -
                        (a.share_of_run === null || a.share_of_run === undefined ? -1 : a.share_of_run));  // largest share first
      app.appendChild(el('h2', {}, 'Kernels of this label'));
      app.appendChild(table([['kernel', r => el('span', {}, short(r.kernel, 300), el('span', {class: 'kind'}, r.kernel_kind)), 'k'],
        ['median \u00b5s', r => num(r.median_us), 'num'], ['share of run', r => share(r.share_of_run), 'num']], K));
      if (DATA.steps) stepsSection(app);
      if (DATA.trace) traceSection(app);
      if (DATA.metrics) metricsSection(app);
      return;
    }
    app.appendChild(el('p', {class: 'muted'}, plural(DATA.runs, 'run') + ', ' +
      plural(DATA.labels.length, 'label') + '. Points: every run; line: label medians; band: baseline median \u00b1 the floor; ' +
      'markers: verdicts (\u25b2 regressed, \u25bc improved, \u25cb inconclusive beyond the floor); dotted rules: change points.'));
    app.appendChild(nav);
    if (DATA.steps) stepsSection(app);
    if (DATA.trace) traceSection(app);
    app.appendChild(el('h2', {}, 'Kernels'));
    app.appendChild(logToggle());
    xSpan = seriesSpan();
    if (!DATA.kernels.length) app.appendChild(el('div', {class: 'empty'}, 'No trended kernels in this series yet.'));
    for (const k of DATA.kernels) {
      const div = el('div', {class: 'plot kernel-plot', id: k.anchor, 'data-kernel': short(k.kernel, 300)});
      app.appendChild(div);
      plot(div, () => kernelFigure(k));
    }
    if (DATA.metrics) metricsSection(app);
    if (DATA.others.rows.length) {
      app.appendChild(el('h2', {}, 'Other kernels (latest label)'));
      app.appendChild(table([
        ['kernel', r => el('span', {}, short(r.kernel, 300), el('span', {class: 'kind'}, r.kernel_kind)), 'k'],
        ['verdict', r => badge(r.verdict)], ['median \u00b5s', r => num(r.median_us), 'num'],
        ['change', r => pct(r.delta_pct), 'num'], ['share of run', r => share(r.share_of_run), 'num'],
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
  function labelRows(R) {
    return table([
      ['verdict', r => badge(r.verdict)],
      ['kernel', r => el('span', {}, short(r.kernel, 300), el('span', {class: 'kind'}, r.kernel_kind)), 'k'],
      ['share of run', r => share(r.share_of_run), 'num', null, 'median over this label\u2019s runs'],
      ['median', r => us(r.median_us).replace('+', ''), 'num', null, 'label median per run'],
      ['baseline', r => us(r.baseline_median_us).replace('+', ''), 'num', null, 'median of the baseline runs'],
      ['change', r => us(r.delta_us), 'num', null, 'label median \u2212 baseline median, per run'],
      ['change %', r => pct(r.delta_pct), 'num'],
      ['q / p', r => pval(r), 'num', null, 'q of the confirming test, else p of this label vs its baseline'],
      ['runs', r => (r.repeats === null ? '' : num(r.repeats)) + (r.baseline_runs ? ' vs ' + num(r.baseline_runs) : ''), 'num', null,
       'runs of this label vs runs of the baseline'],
      ['', r => why(r), 'why'],
    ], R);
  }

  // kernels new at this label / gone since the previous label (swaps.py): no baseline, so
  // not in the chart of moves; the swap is said at the top and listed after the chart
  const sum = (R, c) => R.reduce((a, r) => a + (r[c] || 0), 0);
  function swapSummary(N, G) {
    const part = (R, what, sign, at) => R.length ? el('span', {}, el('b', {}, plural(R.length, 'kernel') + ' ' + what),
      ' (' + us(sign * sum(R, 'median_us')) + ' per run, ' + share(sum(R, 'share_of_run')) + ' of ' + at + ')') : '';
    return el('p', {id: 'swap-summary', class: 'swap'}, el('a', {href: '#new-gone'}, N.length && G.length ? 'Kernel swap' : 'Kernels new or gone'), ': ',
      part(N, 'new at this label', 1, 'the run'), N.length && G.length ? ' \u00b7 ' : '',
      part(G, 'gone since ' + short(DATA.prev_label, 40), -1, 'its run'),
      N.length && G.length ? ' \u00b7 net ' + us(sum(N, 'median_us') - sum(G, 'median_us')) + ' per run' : '',
      '. Listed below the chart of moves, which shows only kernels with a baseline.');
  }
  function swapRows(R, gone) {
    const at = gone ? ' at ' + short(DATA.prev_label, 40) : '';
    const src = r => 'select median_us from marts.kernel_trends where series = ' + sqlq(DATA.series) +
      ' and kernel_kind = ' + sqlq(r.kernel_kind) + ' and kernel = ' + sqlq(short(r.kernel, 100000)) + ' and label = ' + sqlq(r.at_label);
    const cols = [
      ['kernel', r => el('span', {}, short(r.kernel, 300), el('span', {class: 'kind'}, r.kernel_kind +
        (r.last_seen_label === null || r.last_seen_label === undefined ? ''
          : ' \u00b7 back: last measured at ' + short(r.last_seen_label, 40) + ' (#' + r.last_seen_seq + ')'))), 'k'],
      ['share of run' + at, r => share(r.share_of_run), 'num', null, 'median over the runs' + (gone ? ' of the previous label' : '') + ' of its time / the run\u2019s total'],
      ['time per run' + at, r => us(r.median_us).replace('+', ''), 'num', src, 'label median of its time per run (marts.kernel_trends.median_us)'],
      ['calls per run', r => num(r.calls), 'num', null, 'median over those runs of its calls (marts.kernel_run_rollup)'],
      ['runs', r => num(r.repeats), 'num', null, 'runs that measured it'],
    ];
    const top = R.slice(0, 15), rest = R.slice(15);
    const out = [table(cols, top, 'wide swap')];
    if (rest.length) out.push(fold(gone ? 'gone-more' : 'new-more', plural(rest.length, 'more kernel'), table(cols, rest, 'wide swap')));
    return out;
  }
  function swapSection(app, N, G) {
    if (!N.length && !G.length) {
      app.appendChild(el('p', {class: 'muted small', id: 'new-gone'}, 'No kernel new at this label or gone since the previous label (' +
        short(DATA.prev_label, 40) + '): the same kernels were measured at both.'));
      return;
    }
    app.appendChild(el('h2', {id: 'new-gone'}, 'Kernels new at this label, gone since the previous label'));
    app.appendChild(el('h3', {id: 'new-kernels', class: 'swap-head'}, plural(N.length, 'kernel') + ' new at this label'));
    if (N.length) app.appendChild(el('div', {}, swapRows(N, false)));
    app.appendChild(el('h3', {id: 'gone-kernels', class: 'swap-head'}, plural(G.length, 'kernel') + ' gone since the previous label, ' + short(DATA.prev_label, 40)));
    if (G.length) app.appendChild(el('div', {}, swapRows(G, true)));
    app.appendChild(el('p', {class: 'muted small'}, 'New: measured at this label, not at the previous label; gone: measured at the previous label, ' +
      'not at this one (a kernel last measured before it is not listed). Figures are those of the label it was measured at. ' +
      'Hover a time for the SQL that returns it.'));
    if (DATA.swap_sql) app.appendChild(fold('new-gone-sql', 'The SQL behind these lists', el('pre', {class: 'sql'}, DATA.swap_sql)));
  }

  function labelPage(app) {
    app.appendChild(el('h1', {class: 'name'}, short(DATA.label, 200), ' vs baseline'));
    app.appendChild(el('p', {}, 'series ', link('series/' + DATA.series_slug + '.html', short(DATA.series, 100)),
      ' \u00b7 label #' + DATA.label_seq + ', captured ' + DATA.captured_at + ' UTC \u00b7 ',
      DATA.prev ? link('labels/' + DATA.series_slug + '/' + DATA.prev + '.html', '\u2190 previous') : '', ' ',
      DATA.next ? link('labels/' + DATA.series_slug + '/' + DATA.next + '.html', 'next \u2192') : ''));
    const R = objs(DATA.rows);
    const by = {regressed: [], improved: [], inconclusive: [], unchanged: [], other: []};
    for (const r of R) (by[r.verdict] || by.other).push(r);
    app.appendChild(el('p', {}, badge('regressed'), ' ' + by.regressed.length + '  ', badge('improved'), ' ' + by.improved.length + '  ',
      by.inconclusive.length ? el('a', {href: '#inconclusive'}, by.inconclusive.length + ' inconclusive') : '0 inconclusive', '  \u00b7  ',
      by.unchanged.length ? el('a', {href: '#unchanged'}, by.unchanged.length + ' unchanged') : '0 unchanged'));
    const NEW = DATA.swaps ? objs(DATA.swaps.new) : [], GONE = DATA.swaps ? objs(DATA.swaps.gone) : [];
    if (NEW.length || GONE.length) app.appendChild(swapSummary(NEW, GONE));
    const moved = R.filter(r => r.delta_us !== null).sort((a, b) => Math.abs(b.delta_us) - Math.abs(a.delta_us)).slice(0, 25).reverse();
    if (moved.length) {
      app.appendChild(el('h2', {}, 'Where the time moved (label median \u2212 baseline median, per run)'));
      const h = Math.max(260, 22 * moved.length + 80);
      const div = el('div', {class: 'plot bars', 'data-log': 'no'});
      div.style.height = h + 'px';
      app.appendChild(div);
      plot(div, () => ({data: [{type: 'bar', orientation: 'h', y: moved.map((r, i) => i),
          x: moved.map(r => r.delta_us), marker: {color: moved.map(r => VCOL[r.verdict] || '#888')},
          customdata: moved.map(r => [pt(r.kernel, 300), pct(r.delta_pct), pt(r.verdict || '', 20)]),
          hovertemplate: '%{customdata[0]}<br>%{x:.4g} \u00b5s (%{customdata[1]}) %{customdata[2]}<extra></extra>'}],
        layout: {margin: {l: 330, r: 20, t: 10, b: 40}, height: h,
          xaxis: {title: {text: '\u0394 \u00b5s per run'}, zeroline: true},
          yaxis: {tickmode: 'array', tickvals: moved.map((r, i) => i), ticktext: moved.map(r => tick(r.kernel))}}}));
    } else {
      // a later label whose kernels all lack a baseline (new kernels, renamed ones) has history
      app.appendChild(el('div', {class: 'empty', id: 'no-baseline'}, DATA.prev
        ? 'No kernel of this label has a baseline: none was measured at an earlier label (new or renamed kernels). Nothing to compare yet.'
        : 'First label: no history yet. Nothing to compare this label with.'));
    }
    if (DATA.swaps) swapSection(app, NEW, GONE);
    const changed = by.regressed.concat(by.improved, by.other);
    app.appendChild(el('h2', {id: 'changed'}, 'Changed at this label'));
    if (changed.length) app.appendChild(labelRows(changed));
    else app.appendChild(el('p', {class: 'muted'}, 'No kernel regressed or improved at this label.'));
    // the metrics and trace facts that changed here: the index links their changes to this page
    const F = objs(DATA.facts);
    if (F.length) {
      app.appendChild(el('h2', {id: 'facts-changed'}, 'Metrics and trace facts changed at this label'));
      const fv = (r, v) => r.kind === 'metric' ? num(v) + (r.unit ? ' ' + short(r.unit, 20) : '') : fval(r.kind, v);
      app.appendChild(table([
        ['verdict', r => badge(r.verdict)],
        ['what changed', r => el('span', {}, kname(r.name, 120), el('span', {class: 'kind'},
          (r.kind === 'metric' ? 'metric ' : (TRACE_FACT[r.kind] || r.kind) + ' \u00b7 ') + short(r.what, 120))), 'k'],
        ['median', r => fv(r, r.median), 'num', null, 'label median'],
        ['baseline', r => fv(r, r.baseline), 'num', null, 'median of the baseline'],
        ['change %', r => pct(r.delta_pct), 'num'],
        ['q / p', r => pval(r), 'num', null, 'q of the confirming test, else p of this label vs its baseline'],
        ['', r => why({evidence: r.evidence, p_value: r.p_value, q_value: r.q_value}), 'why'],
      ], F));
    }
    app.appendChild(fold('inconclusive', plural(by.inconclusive.length, 'inconclusive kernel') +
      ' (a change not proven either way; the evidence says what is missing)', labelRows(by.inconclusive)));
    app.appendChild(fold('unchanged', plural(by.unchanged.length, 'unchanged kernel'), labelRows(by.unchanged)));
    if (DATA.runs && DATA.runs.length) {
      app.appendChild(el('h2', {}, 'Runs of this label'));
      app.appendChild(el('ul', {class: 'runs'}, DATA.runs.map(r => el('li', {}, link('runs/' + r + '.html', r)))));
    }
  }

  // ------------------------------------------------------------------ run
  const RUN_CORE = ['device', 'calls', 'total_us', 'share_of_run', 'mean_us', 'p50_us', 'p95_us', 'max_us'];
  const HEAD = {device: 'device', calls: 'calls', total_us: 'total \u00b5s', share_of_run: 'share of run',
    mean_us: 'mean \u00b5s', p50_us: 'p50 \u00b5s', p95_us: 'p95 \u00b5s', max_us: 'max \u00b5s', us: '\u00b5s', share: 'share',
    launches: 'launches', kernels: 'kernels'};
  function head(c) { return HEAD[c] || c.replace(/_/g, ' '); }

  function runFacts(app, run) {
    const S = objs(DATA.steps);
    if (S.length) {
      const d = S.map(s => s.duration_ns).sort((a, b) => a - b);
      const slow = S.reduce((a, b) => (b.duration_ns > a.duration_ns ? b : a));
      const ranks = new Set(S.map(s => s.rank)).size;
      app.appendChild(el('h2', {id: 'steps'}, 'Training steps'));
      app.appendChild(el('p', {}, plural(new Set(S.map(s => s.step)).size, 'step') + ' on ' + plural(ranks, 'rank') +
        '; median ' + ms(d[d.length >> 1]) + ' ms, slowest ' + ms(slow.duration_ns) + ' ms (step ' + slow.step + ', rank ' + slow.rank + ').'));
      const div = el('div', {class: 'plot steps-plot', 'data-log': 'no'});
      app.appendChild(div);
      plot(div, () => {
        const by = new Map();
        for (const s of S) { if (!by.has(s.rank)) by.set(s.rank, []); by.get(s.rank).push(s); }
        return {data: [...by.entries()].map(([rank, xs]) => ({type: 'scatter', mode: 'lines+markers', name: 'rank ' + rank,
            x: xs.map(s => s.step), y: xs.map(s => s.duration_ns / 1e6), hovertemplate: 'step %{x}: %{y:.4g} ms<extra>rank ' + rank + '</extra>'})),
          layout: {height: 300, margin: {l: 60, r: 10, t: 10, b: 40},
            xaxis: {title: {text: 'step'}, dtick: Math.max(1, Math.ceil(new Set(S.map(s => s.step)).size / 20))},
            yaxis: {title: {text: 'ms'}, rangemode: 'tozero'}, showlegend: by.size > 1}};
      });
    }
    const T = objs(DATA.timeline);
    if (T.length) {
      app.appendChild(el('h2', {id: 'timeline'}, 'GPU timeline (whole run)'));
      const part = (r, c) => r[c] === undefined || r[c] === null || !r.span_ns ? '' : share(r[c] / r.span_ns);
      app.appendChild(table([
        ['rank', r => num(r.rank), 'num'], ['device', r => short(r.device, 40)],
        ['span ms', r => ms(r.span_ns), 'num', null, 'first kernel start to last kernel end'],
        ['busy', r => part(r, 'busy_ns'), 'num'], ['idle', r => part(r, 'idle_ns'), 'num'],
        ['compute', r => part(r, 'compute_ns'), 'num'], ['communication', r => part(r, 'communication_ns'), 'num'],
        ['memory', r => part(r, 'memory_ns'), 'num'], ['comm./compute overlap', r => part(r, 'comm_compute_overlap_ns'), 'num'],
      ], T, 'auto'));
    }
    const O = objs(DATA.ops);
    if (O.length) {
      app.appendChild(el('h2', {id: 'operators'}, 'Top operators by GPU time'));
      app.appendChild(el('p', {class: 'muted small'}, 'The ' + O.length + ' largest of ' + plural(DATA.ops_count, 'operator') +
        ' (the innermost CPU operator that launched each kernel), summed over ranks.'));
      app.appendChild(table([
        ['operator', r => short(r.op, 300), 'k'], ['GPU ms', r => ms(r.kernel_ns), 'num'],
        ['share of GPU time', r => DATA.ops_total_ns ? share(r.kernel_ns / DATA.ops_total_ns) : '', 'num'],
        ['kernels', r => num(r.kernels), 'num'], ['calls', r => num(r.calls), 'num'],
        ['CPU ms', r => ms(r.cpu_ns), 'num'], ['ranks', r => num(r.ranks), 'num'],
      ], O));
    }
  }

  function runPage(app) {
    const run = DATA.run;
    app.appendChild(el('h1', {class: 'name'}, 'Run ' + run.run_id));
    app.appendChild(el('p', {}, 'series ', link('series/' + DATA.series_slug + '.html', short(run.series, 100)),
      ' \u00b7 label ', DATA.label_slug ? link('labels/' + DATA.series_slug + '/' + DATA.label_slug + '.html', short(run.label, 80)) : short(run.label, 80),
      ' \u00b7 captured ' + run.captured_at + ' UTC \u00b7 ' + run.source_format + ' \u00b7 checks: ' + run.check_status));
    const q = 'select * from marts.run_summary where run_id = ' + sqlq(run.run_id);
    // numbers right-aligned; names (a demangled kernel is KBs) wrap in their cell
    const sum = [['total_us', 'total \u00b5s', num(run.total_us)], ['kernel_count', 'kernels', num(run.kernel_count)],
      ['top_kernel', 'top kernel', kname(run.top_kernel, 200), 'k'], ['top_kernel_share', 'top kernel share', share(run.top_kernel_share)],
      ['file_name', 'file', short(run.file_name, 200), 'k']];
    const sumSql = r => 'select ' + r[0] + ' from marts.run_summary where run_id = ' + sqlq(run.run_id);
    const sumTable = table([['', r => r[1], 'head'], ['', r => r[2], 'num', sumSql]], sum, 'summary');
    sum.forEach((r, i) => { if (r[3]) sumTable.tBodies[0].rows[i].cells[1].className = 'k'; });
    app.appendChild(sumTable);
    app.appendChild(el('pre', {class: 'sql'}, q + ';'));
    runFacts(app, run);
    const R = objs(DATA.rollup);
    if (R.length) {
      app.appendChild(el('h2', {}, 'Share of run per kernel'));
      const top = R.slice(0, 25).reverse();
      const h = Math.max(240, 20 * top.length + 70);
      const div = el('div', {class: 'plot bars', 'data-log': 'no'});
      div.style.height = h + 'px';
      app.appendChild(div);
      plot(div, () => ({data: [{type: 'bar', orientation: 'h', y: top.map((r, i) => i), x: top.map(r => r.share_of_run),
          customdata: top.map(r => pt(r.kernel, 300)), marker: {color: '#1f5fa8'},
          hovertemplate: '%{customdata}<br>%{x:.2%}<extra></extra>'}],
        layout: {margin: {l: 330, r: 20, t: 10, b: 40}, height: h,
          xaxis: {tickformat: '.0%'}, yaxis: {tickmode: 'array', tickvals: top.map((r, i) => i),
          ticktext: top.map(r => tick(r.kernel))}}}));
      app.appendChild(el('h2', {}, 'Kernels (marts.kernel_run_rollup)'));
      app.appendChild(el('p', {class: 'muted'}, 'Hover a number for the SQL that returns it.'));
      const all = DATA.rollup.columns.filter(c => c !== 'kernel');
      const core = RUN_CORE.filter(c => all.includes(c)), rest = all.filter(c => !core.includes(c));
      // a kernel trace has one row per (device, kernel): the device picks the row
      const byDevice = all.includes('device');
      const rowKey = r => ' and kernel = ' + sqlq(short(r.kernel, 100000)) + (!byDevice ? '' :
        r.device == null ? ' and device is null' : ' and device = ' + sqlq(r.device));
      const cell = c => [head(c), r => c === 'share_of_run' ? share(r[c]) : num(r[c]), 'num',
        r => 'select ' + c + ' from marts.kernel_run_rollup where run_id = ' + sqlq(run.run_id) + rowKey(r)];
      const kcell = ['kernel', r => short(r.kernel, 300), 'k'];
      app.appendChild(table([kcell, ...core.map(cell)], R));
      if (rest.length) app.appendChild(fold('more-columns', plural(rest.length, 'more column') + ': ' + rest.map(head).join(', '),
        el('div', {class: 'scrollx'}, table([kcell, ...rest.map(cell)], R, 'more'))));
      app.appendChild(el('pre', {class: 'sql'}, DATA.sql.rollup));
    }
    const C = objs(DATA.categories);
    if (C.length) {
      app.appendChild(el('h2', {}, 'Audit categories (marts.audit_category_rollup)'));
      const ccols = DATA.categories.columns.filter(c => c !== 'category');
      app.appendChild(table([['category', r => short(r.category), 'k'], ...ccols.map(c => [head(c),
        r => c === 'share' ? share(r[c]) : num(r[c]), 'num',
        r => 'select ' + c + " from marts.audit_category_rollup where run_id = " + sqlq(run.run_id) + " and level = 'run' and category = " + sqlq(r.category)])], C));
      app.appendChild(el('pre', {class: 'sql'}, DATA.sql.categories));
    }
  }
"""
