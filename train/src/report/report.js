(function () {
'use strict';
// The SVG namespace, from the HTML parser, so that the page holds no URL at all.
const SVG = (function () { const d = document.createElement('div'); d.innerHTML = '<svg></svg>'; return d.firstChild.namespaceURI; })();
const D = JSON.parse(document.getElementById('report-data').textContent);
const S = D.samples, N = S.t.length, phases = D.phases, T = D.run_seconds > 0 ? D.run_seconds : 1;
const W = 960;
const C = { ips: '#4e79a7', busy: '#f28e2b', sBusy: '#59a14f', starved: '#edc948', blocked: '#e15759', other: '#e6e8eb',
            grow: '#2da44e', shrink: '#cf222e', flight: '#8250df', band: '#f3f4f6', loss: '#4e79a7',
            top1: '#4e79a7', val1: '#f28e2b', val5: '#59a14f', gpu: '#b07aa1' };
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function html(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function newSvg(box, w, h) { const s = el('svg', { viewBox: '0 0 ' + w + ' ' + h, class: 'chart', role: 'img' }); box.prepend(s); return s; }
function scale(d0, d1, r0, r1) { const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0); return v => r0 + (v - d0) * k; }
function step(span, n) {
  const raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p;
}
function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const s = step(hi - lo, n), out = [];
  for (let v = Math.ceil(lo / s - 1e-9) * s; v <= hi + s * 1e-9; v += s) out.push(+v.toPrecision(12));
  return out;
}
function niceMax(v) { if (!(v > 0)) return 1; const s = step(v, 5); return Math.ceil(v / s - 1e-9) * s; }
function num(v) {
  if (v === null || v === undefined || !isFinite(v)) return '-';
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
  if (a >= 100 || v === Math.round(v)) return String(Math.round(v));
  return String(parseFloat(v.toPrecision(3)));
}
function pct(v) { return v === null || v === undefined ? '-' : (100 * v).toFixed(1) + '%'; }
// A time on the run's clock: "12.5 s", "3:05" (min:s) or "1:02 h"; `exact` (tooltips): to the second.
function clock(s, exact) {
  if (T < 120) return (T < 20 || exact ? s.toFixed(1) : Math.round(s)) + ' s';
  const total = Math.round(s), mm = String(Math.floor(total / 60) % 60).padStart(2, '0'), ss = String(total % 60).padStart(2, '0');
  if (T < 7200) return Math.floor(total / 60) + ':' + ss;
  return Math.floor(total / 3600) + ':' + mm + (exact ? ':' + ss : ' h');
}
function phaseName(p) { return 'epoch ' + p.epoch + ' ' + p.name; }
function moveText(m) { return (m.stage === '' ? 'in-flight' : m.stage) + ' ' + m.from + ' -> ' + m.to; }

const tip = document.getElementById('tip');
function showTip(text, ev) {
  tip.textContent = text;
  tip.style.display = 'block';
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  tip.style.left = x + 'px';
  tip.style.top = (ev.clientY + 16) + 'px';
}
function hideTip() { tip.style.display = 'none'; }

function legend(box, items) {
  const l = html('div', { class: 'legend' }, box);
  for (const [name, color] of items) html('span', { style: '--c:' + color }, l, name);
}

function yAxis(s, y, yTicks, x0, x1, fmt, side, label) {
  for (const v of yTicks) {
    if (side === 'left') el('line', { x1: x0, x2: x1, y1: y(v), y2: y(v), class: 'grid' }, s);
    const tx = side === 'left' ? x0 - 6 : x1 + 6;
    el('text', { x: tx, y: y(v) + 4, 'text-anchor': side === 'left' ? 'end' : 'start' }, s, fmt(v));
  }
  const lx = side === 'left' ? x0 - 50 : x1 + 50, ly = (y(yTicks[0]) + y(yTicks[yTicks.length - 1])) / 2;
  el('text', { x: lx, y: ly, 'text-anchor': 'middle', transform: 'rotate(-90 ' + lx + ' ' + ly + ')' }, s, label);
}

// A path through the points, broken where a value is missing or where `breakAt(i)` says so.
function line(s, xs, ys, color, width, breakAt) {
  let d = '', open = false;
  for (let i = 0; i < xs.length; i++) {
    if (ys[i] === null || ys[i] === undefined || !isFinite(ys[i])) { open = false; continue; }
    const cmd = open && !(breakAt && breakAt(i)) ? 'L' : 'M';
    d += cmd + xs[i].toFixed(1) + ' ' + ys[i].toFixed(1);
    open = true;
  }
  if (d) el('path', { d: d, fill: 'none', stroke: color, 'stroke-width': width || 1.6, 'stroke-linejoin': 'round' }, s);
}

// At most `n` ticks over the run at a round number of seconds, minutes or hours.
function timeTicks(n) {
  const steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const s = steps.find(v => T / v <= n) || step(T, n), out = [];
  for (let v = 0; v <= T + s * 1e-9; v += s) out.push(+v.toPrecision(12));
  return out;
}

// The frame of a plot over the run's time: phase bands (evaluation shaded), epoch marks, x axis.
function timeFrame(box, h, m) {
  const s = newSvg(box, W, h);
  const x = scale(0, T, m.l, W - m.r), top = m.t, bottom = h - m.b;
  let lastLabel = -1e9;
  phases.forEach(p => {
    const end = p.end >= p.start ? p.end : T, x0 = x(p.start), x1 = x(end);
    if (p.name !== 'train') {
      const r = el('rect', { x: x0, y: top, width: Math.max(1, x1 - x0), height: bottom - top, fill: C.band }, s);
      el('title', {}, r, phaseName(p));
    }
    if (p.name === 'train' || p === phases[0]) {
      el('line', { x1: x0, x2: x0, y1: top, y2: bottom, class: 'epoch' }, s);
      if (x0 - lastLabel > 64) { el('text', { x: x0 + 3, y: top + 11 }, s, 'epoch ' + p.epoch); lastLabel = x0; }
    }
  });
  el('line', { x1: m.l, x2: W - m.r, y1: bottom, y2: bottom, class: 'axis' }, s);
  for (const v of timeTicks(10)) {
    el('line', { x1: x(v), x2: x(v), y1: bottom, y2: bottom + 4, class: 'axis' }, s);
    el('text', { x: x(v), y: bottom + 16, 'text-anchor': 'middle' }, s, clock(v));
  }
  return { s: s, x: x, top: top, bottom: bottom, m: m, h: h };
}

// The sample nearest to time `t` (samples are in time order).
function nearest(t) {
  let lo = 0, hi = N - 1;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (S.t[mid] - S.dt[mid] / 2 < t) lo = mid + 1; else hi = mid; }
  if (lo > 0 && Math.abs(S.t[lo - 1] - S.dt[lo - 1] / 2 - t) < Math.abs(S.t[lo] - S.dt[lo] / 2 - t)) lo--;
  return lo;
}

// A transparent layer over the plot that shows a guide line and `text(i)` of the nearest sample.
function hover(f, text) {
  if (N === 0) return;
  const guide = el('line', { x1: 0, x2: 0, y1: f.top, y2: f.bottom, stroke: '#57606a', 'stroke-width': 1, visibility: 'hidden' }, f.s);
  const area = el('rect', { x: f.m.l, y: f.top, width: W - f.m.l - f.m.r, height: f.bottom - f.top, fill: 'transparent' }, f.s);
  area.addEventListener('mousemove', ev => {
    const pt = f.s.createSVGPoint(); pt.x = ev.clientX; pt.y = ev.clientY;
    const local = pt.matrixTransform(f.s.getScreenCTM().inverse());
    const t = (local.x - f.m.l) / (W - f.m.l - f.m.r) * T, i = nearest(t), gx = f.x(S.t[i] - S.dt[i] / 2);
    guide.setAttribute('x1', gx); guide.setAttribute('x2', gx); guide.setAttribute('visibility', 'visible');
    showTip(clock(S.t[i], true) + '  (' + phaseName(phases[S.phase[i]]) + ')\n' + text(i), ev);
  });
  area.addEventListener('mouseleave', () => { guide.setAttribute('visibility', 'hidden'); hideTip(); });
}

function empty(f, text) {
  el('text', { x: (f.m.l + W - f.m.r) / 2, y: (f.top + f.bottom) / 2, 'text-anchor': 'middle', class: 'empty' }, f.s, text);
}

const xs = () => S.t.map((t, i) => t - S.dt[i] / 2);
const phaseBreak = i => i > 0 && S.phase[i] !== S.phase[i - 1];

// The time-weighted mean of `series` over the samples of training phases (of every phase when
// none is a training one), skipping nulls; null when nothing is left.
function trainingMean(series) {
  const training = D.phases.some(p => p.name === 'train');
  let sum = 0, time = 0;
  series.forEach((v, i) => {
    if (v === null || (training && D.phases[S.phase[i]].name !== 'train')) return;
    sum += v * S.dt[i];
    time += S.dt[i];
  });
  return time > 0 ? sum / time : null;
}

// The epoch table's compute busy, each epoch weighted by the length of its training phases.
function epochsMean() {
  let sum = 0, time = 0;
  for (const e of D.epochs) {
    const t = D.phases.filter(p => p.epoch === e.epoch && p.name === 'train').reduce((a, p) => a + p.elapsed, 0);
    sum += e.compute_busy * t;
    time += t;
  }
  return time > 0 ? sum / time : null;
}

// (1) Throughput, compute busy (and GPU busy, when NVML gave it) over time, with the scheduler's
// moves. The means of what is drawn go on the plot's element for scripts/check-report.sh, which
// compares them with the summary's card and the epoch table.
function throughput() {
  const box = document.getElementById('plot-throughput');
  const f = timeFrame(box, 330, { l: 64, r: 64, t: 40, b: 28 });
  const busy = S.compute, busyName = 'compute busy';
  const yMax = niceMax(Math.max(0, ...S.ips.filter(v => v !== null)) * 1.05);
  const y = scale(0, yMax, f.bottom, f.top), yb = scale(0, 1, f.bottom, f.top);
  yAxis(f.s, y, ticks(0, yMax, 5), f.m.l, W - f.m.r, num, 'left', 'images/s');
  yAxis(f.s, yb, [0, 0.25, 0.5, 0.75, 1], f.m.l, W - f.m.r, v => Math.round(100 * v) + '%', 'right', D.gpu_known ? 'busy' : busyName);
  if (N === 0) empty(f, 'no samples were recorded');
  const x = xs().map(f.x);
  line(f.s, x, busy.map(v => v === null ? null : yb(v)), C.busy, 1.3, phaseBreak);
  if (D.gpu_known) line(f.s, x, S.gpu.map(v => v === null ? null : yb(v)), C.gpu, 1.3, phaseBreak);
  line(f.s, x, S.ips.map(v => v === null ? null : y(v)), C.ips, 1.8, phaseBreak);
  hover(f, i => num(S.ips[i]) + ' images/s\n' + busyName + ' ' + pct(busy[i]) +
                (D.gpu_known ? '\nGPU busy ' + pct(S.gpu[i]) : ''));
  const drawn = trainingMean(busy), epochs = epochsMean();
  if (drawn !== null) box.dataset.computeBusyDrawn = drawn.toFixed(4);
  if (epochs !== null) box.dataset.computeBusyEpochs = epochs.toFixed(4);
  // The scheduler's moves: a strip above the plot, one triangle each (up: grow, down: shrink).
  const strip = f.top - 13;
  el('text', { x: f.m.l - 6, y: strip + 4, 'text-anchor': 'end' }, f.s, 'scheduler');
  el('line', { x1: f.m.l, x2: W - f.m.r, y1: strip, y2: strip, class: 'grid' }, f.s);
  for (const m of D.moves) {
    const mx = f.x(m.t), up = m.to > m.from;
    const color = m.stage === '' ? C.flight : up ? C.grow : C.shrink;
    const d = up ? 'M' + (mx - 5) + ' ' + (strip + 5) + 'L' + (mx + 5) + ' ' + (strip + 5) + 'L' + mx + ' ' + (strip - 5) + 'Z'
                 : 'M' + (mx - 5) + ' ' + (strip - 5) + 'L' + (mx + 5) + ' ' + (strip - 5) + 'L' + mx + ' ' + (strip + 5) + 'Z';
    const text = clock(m.t, true) + '  ' + moveText(m) + (m.revert ? ' (revert)' : '') + ': ' + m.why;
    const p = el('path', { d: d, class: 'marker', fill: m.revert ? '#fff' : color, stroke: color, 'stroke-width': 1.2 }, f.s);
    el('title', {}, p, text);
    p.addEventListener('mousemove', ev => showTip(text, ev));
    p.addEventListener('mouseleave', hideTip);
  }
  legend(box, [['images/s', C.ips], [busyName + ' %', C.busy], ...(D.gpu_known ? [['GPU busy (NVML) %', C.gpu]] : []),
               ['grow', C.grow], ['shrink', C.shrink], ['in-flight limit', C.flight], ['evaluation', '#dfe3e8']]);
}

// Stage names in order of first appearance, over the samples or the phases.
const stageNames = (() => D.stages_over_time.map(s => s.name))();

// Each stage's busy (or starved, blocked) fraction over time.
function stagesOverTime(metric) {
  const box = document.getElementById('plot-stage-time');
  box.querySelectorAll('svg, .legend').forEach(e => e.remove());
  const f = timeFrame(box, 260, { l: 64, r: 20, t: 24, b: 28 });
  const y = scale(0, 1, f.bottom, f.top);
  yAxis(f.s, y, [0, 0.25, 0.5, 0.75, 1], f.m.l, W - f.m.r, v => Math.round(100 * v) + '%', 'left', metric + ' %');
  if (N === 0) empty(f, 'no samples were recorded');
  const x = xs().map(f.x);
  D.stages_over_time.forEach((st, k) => line(f.s, x, st[metric].map(v => v === null ? null : y(v)), PALETTE[k % PALETTE.length], 1.5, phaseBreak));
  hover(f, i => D.stages_over_time.filter(st => st[metric][i] !== null).map(st => st.name + ' ' + pct(st[metric][i])).join('\n'));
  legend(box, D.stages_over_time.map((st, k) => [st.name, PALETTE[k % PALETTE.length]]));
}

// (2) Busy / starved / blocked per stage as stacked bars, for a phase or all phases of a kind,
// weighted by their durations.
function stageTotals(choice) {
  const chosen = phases.filter((p, i) => choice === 'all ' + p.name || choice === String(i));
  const names = [], sums = {};
  let weight = 0;
  for (const p of chosen) {
    weight += p.elapsed;
    for (const st of p.stages) {
      if (!(st.name in sums)) { names.push(st.name); sums[st.name] = { busy: 0, starved: 0, blocked: 0, w: 0, conc: st.concurrency }; }
      const a = sums[st.name];
      a.busy += st.busy * p.elapsed; a.starved += st.starved * p.elapsed; a.blocked += st.blocked * p.elapsed; a.w += p.elapsed;
      a.conc = st.concurrency;
    }
  }
  return names.map(n => { const a = sums[n], w = a.w > 0 ? a.w : 1;
    return { name: n, busy: a.busy / w, starved: a.starved / w, blocked: a.blocked / w, concurrency: a.conc }; });
}
function stageBars(choice) {
  const box = document.getElementById('plot-stage-bars');
  box.querySelectorAll('svg, .legend').forEach(e => e.remove());
  const rows = stageTotals(choice), rowH = 26, m = { l: 150, r: 20, t: 10, b: 28 };
  const h = m.t + m.b + Math.max(1, rows.length) * rowH;
  const s = newSvg(box, W, h), x = scale(0, 1, m.l, W - m.r), bottom = h - m.b;
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    el('line', { x1: x(v), x2: x(v), y1: m.t, y2: bottom, class: 'grid' }, s);
    el('text', { x: x(v), y: bottom + 16, 'text-anchor': 'middle' }, s, Math.round(100 * v) + '%');
  }
  if (rows.length === 0) el('text', { x: (m.l + W - m.r) / 2, y: m.t + 16, 'text-anchor': 'middle', class: 'empty' }, s, 'no phase has ended');
  rows.forEach((r, k) => {
    const y0 = m.t + k * rowH + 4, bh = rowH - 8;
    el('text', { x: m.l - 8, y: y0 + bh / 2 + 4, 'text-anchor': 'end' }, s, r.name + (r.concurrency > 1 ? ' \u00d7' + r.concurrency : ''));
    let at = 0;
    const parts = [['busy', r.busy, C.sBusy], ['starved', r.starved, C.starved], ['blocked', r.blocked, C.blocked],
                   ['other', Math.max(0, 1 - r.busy - r.starved - r.blocked), C.other]];
    for (const [name, v, color] of parts) {
      if (v <= 0) continue;
      const w = Math.max(0, Math.min(1, at + v) - at);
      const rect = el('rect', { x: x(at), y: y0, width: x(at + w) - x(at), height: bh, fill: color }, s);
      el('title', {}, rect, r.name + ': ' + name + ' ' + pct(v));
      if (x(at + w) - x(at) > 34) el('text', { x: x(at) + 4, y: y0 + bh / 2 + 4, style: 'fill:#1f2328' }, s, Math.round(100 * v) + '%');
      at += w;
    }
  });
  legend(box, [['busy (per allowed call)', C.sBusy], ['starved (no input)', C.starved], ['blocked (no room downstream)', C.blocked], ['other', C.other]]);
}

// (4) Loss and accuracy per epoch.
function epochChart(id, title, series, fmt, fixedMax) {
  const box = document.getElementById(id), w = 470, h = 260, m = { l: 56, r: 16, t: 26, b: 34 };
  const s = newSvg(box, w, h), E = D.epochs;
  el('text', { x: m.l, y: 14, class: 'title' }, s, title);
  const values = [];
  for (const [, key] of series) for (const e of E) if (e[key] !== null) values.push(e[key]);
  let lo = values.length ? Math.min(...values) : 0, hi = fixedMax !== undefined ? fixedMax : niceMax(values.length ? Math.max(...values) : 1);
  lo = fixedMax !== undefined ? Math.max(0, Math.floor((lo - 0.02) * 10) / 10) : 0;
  if (!(hi > lo)) hi = lo + 1;
  const first = E.length ? E[0].epoch : 1, last = E.length ? E[E.length - 1].epoch : 1;
  const x = first === last ? () => (m.l + w - m.r) / 2 : scale(first, last, m.l + 10, w - m.r - 10);
  const y = scale(lo, hi, h - m.b, m.t);
  yAxis(s, y, ticks(lo, hi, 5), m.l, w - m.r, fmt, 'left', '');
  el('line', { x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b, class: 'axis' }, s);
  const xt = first === last ? [first] : ticks(first, last, Math.min(10, last - first)).filter(v => v === Math.round(v));
  for (const v of xt) el('text', { x: x(v), y: h - m.b + 16, 'text-anchor': 'middle' }, s, String(v));
  el('text', { x: (m.l + w - m.r) / 2, y: h - 4, 'text-anchor': 'middle' }, s, 'epoch');
  if (E.length === 0) el('text', { x: (m.l + w - m.r) / 2, y: (m.t + h - m.b) / 2, 'text-anchor': 'middle', class: 'empty' }, s, 'no epoch finished');
  for (const [name, key, color] of series) {
    line(s, E.map(e => x(e.epoch)), E.map(e => e[key] === null ? null : y(e[key])), color, 1.8);
    for (const e of E) {
      if (e[key] === null) continue;
      const c = el('circle', { cx: x(e.epoch), cy: y(e[key]), r: 3.2, fill: color }, s);
      el('title', {}, c, 'epoch ' + e.epoch + ': ' + name + ' ' + fmt(e[key], true));
    }
  }
  legend(box, series.filter(([, key]) => E.some(e => e[key] !== null)).map(([name, , color]) => [name, color]));
}

throughput();
stagesOverTime('busy');
document.querySelectorAll('input[name=stage-metric]').forEach(r => r.addEventListener('change', () => stagesOverTime(r.value)));

const select = document.getElementById('stage-phase');
const kinds = [...new Set(phases.filter(p => p.end >= p.start).map(p => p.name))];
for (const k of kinds) html('option', { value: 'all ' + k }, select, k + ', all epochs');
phases.forEach((p, i) => { if (p.end >= p.start) html('option', { value: String(i) }, select, phaseName(p)); });
select.addEventListener('change', () => stageBars(select.value));
stageBars(select.value);

epochChart('plot-loss', 'Training loss', [['train loss', 'train_loss', C.loss]], (v, exact) => exact ? v.toFixed(4) : num(v));
epochChart('plot-accuracy', 'Accuracy', [['train top-1', 'train_top1', C.top1], ['val top-1', 'val_top1', C.val1], ['val top-5', 'val_top5', C.val5]],
           (v, exact) => (100 * v).toFixed(exact ? 2 : 0) + '%', 1);

// For scripts/check-report.sh: done, and how tall the page is (its screenshot's height).
document.body.dataset.height = String(Math.ceil(document.documentElement.scrollHeight));
if (document.body.dataset.rendered !== 'error') document.body.dataset.rendered = 'ok';
})();
