#include "stoke/train/report.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace stoke::train {

namespace fs = std::filesystem;

namespace {

double seconds_of(std::chrono::nanoseconds t) { return std::chrono::duration<double>(t).count(); }

double fraction(double part, double whole) { return whole > 0 ? std::clamp(part / whole, 0.0, 1.0) : 0.0; }

/// `a` and `b` weighted by the time each covers (a missing value is left out of the mean).
std::optional<double> weighted(std::optional<double> a, double wa, std::optional<double> b, double wb) {
  if (!a) return b;
  if (!b) return a;
  return wa + wb > 0 ? (*a * wa + *b * wb) / (wa + wb) : *b;
}

/// One sample covering both `a`'s interval and the later `b`'s.
RunRecorder::Sample merge(const RunRecorder::Sample& a, const RunRecorder::Sample& b) {
  const double wa = a.interval;
  const double wb = b.interval;
  RunRecorder::Sample m;
  m.seconds = b.seconds;
  m.interval = wa + wb;
  m.phase = wa > wb ? a.phase : b.phase;
  m.images_per_sec = *weighted(a.images_per_sec, wa, b.images_per_sec, wb);
  m.gpu_busy = weighted(a.gpu_busy, wa, b.gpu_busy, wb);
  m.compute_busy = *weighted(a.compute_busy, wa, b.compute_busy, wb);
  // The stages by name: the same list in both but at a phase boundary, where a stage present in
  // one only keeps its own value.
  m.stages = a.stages;
  for (const StageSample& s : b.stages) {
    auto it = std::find_if(m.stages.begin(), m.stages.end(), [&](const StageSample& x) { return x.name == s.name; });
    if (it == m.stages.end()) {
      m.stages.push_back(s);
      continue;
    }
    it->busy = *weighted(it->busy, wa, s.busy, wb);
    it->starved = *weighted(it->starved, wa, s.starved, wb);
    it->blocked = *weighted(it->blocked, wa, s.blocked, wb);
  }
  return m;
}

// ---- text ----

/// A JSON string. '<', '>' and '&' are written as \u escapes, so no text in the blob can end the
/// <script> element holding it ("</script>") or open a comment in it.
void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// A number with `digits` significant digits; null when not finite.
void json_number(std::string& out, double v, int digits = 4) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
  out += buffer;
}

void json_optional(std::string& out, std::optional<double> v, int digits = 4) {
  if (v)
    json_number(out, *v, digits);
  else
    out += "null";
}

/// `"key":` with the comma before it unless it is the first.
void json_key(std::string& out, std::string_view key, bool first = false) {
  if (!first) out += ',';
  json_string(out, key);
  out += ':';
}

template <typename Each>
void json_array(std::string& out, std::size_t n, Each each) {
  out += '[';
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    each(i);
  }
  out += ']';
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// `v` with `decimals` digits after the point.
std::string fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

std::string percent(double fraction) { return fixed(100 * fraction, 1) + "%"; }

/// "3.4 s", "2 min 05 s", "1 h 02 min".
std::string duration_text(double s) {
  char buffer[64];
  if (s < 120) {
    std::snprintf(buffer, sizeof buffer, "%.1f s", s);
  } else if (s < 7200) {
    const long total = std::lround(s);
    std::snprintf(buffer, sizeof buffer, "%ld min %02ld s", total / 60, total % 60);
  } else {
    const long total = std::lround(s / 60);
    std::snprintf(buffer, sizeof buffer, "%ld h %02ld min", total / 60, total % 60);
  }
  return buffer;
}

std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string move_text(const graph::Decision& d) {
  return (d.stage.empty() ? std::string("in-flight") : d.stage) + " " + std::to_string(d.from) + " -> " +
         std::to_string(d.to);
}

// ---- the page's fixed parts ----

constexpr std::string_view style = R"CSS(
:root { --ink: #1f2328; --muted: #59636e; --line: #d0d7de; --band: #f3f4f6; --accent: #4e79a7; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1080px; margin: 0 auto; }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 16px; margin: 32px 0 4px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
p.note, .sub { color: var(--muted); margin: 2px 0 8px; font-size: 13px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; margin: 16px 0 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 19px; font-weight: 600; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0; }
th, td { text-align: left; padding: 3px 14px 3px 0; border-bottom: 1px solid #eaeef2; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; }
td.n, th.n { text-align: right; }
td.why { color: var(--muted); }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
details summary { cursor: pointer; color: var(--accent); margin: 6px 0; }
svg.chart { width: 100%; height: auto; display: block; overflow: visible; }
svg.chart text { font: 11px system-ui, sans-serif; fill: var(--muted); }
svg.chart .axis { stroke: #8c959f; stroke-width: 1; }
svg.chart .grid { stroke: #eaeef2; stroke-width: 1; }
svg.chart .epoch { stroke: #afb8c1; stroke-dasharray: 3 3; }
svg.chart text.title { font-size: 12px; font-weight: 600; fill: var(--ink); }
svg.chart text.empty { font-size: 13px; }
svg.chart .marker { cursor: default; }
.row { display: flex; gap: 16px; flex-wrap: wrap; }
.row > div { flex: 1 1 420px; min-width: 0; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12px; color: var(--muted); margin: 4px 0 0 64px; }
.legend span::before { content: ""; display: inline-block; width: 12px; height: 10px; margin-right: 5px; vertical-align: -1px; background: var(--c); border-radius: 2px; }
.controls { font-size: 13px; margin: 4px 0; }
.controls label { margin-right: 12px; }
#tip { position: fixed; pointer-events: none; background: rgba(31,35,40,.92); color: #fff; font-size: 12px; padding: 5px 8px; border-radius: 4px; max-width: 420px; white-space: pre-line; display: none; z-index: 9; }
#report-error { display: none; border: 2px solid #cf222e; background: #ffebe9; color: #82071e; padding: 10px 14px; border-radius: 6px; margin: 12px 0; white-space: pre-wrap; font: 13px ui-monospace, monospace; }
)CSS";

// Registered before the main script, so that its errors, syntax errors included, show on the page.
constexpr std::string_view error_script = R"JS(
window.onerror = function (message, source, line, column, error) {
  var box = document.getElementById('report-error');
  box.style.display = 'block';
  box.textContent = 'The report\'s script failed, so its plots are incomplete: ' + message +
      (line ? ' (line ' + line + ':' + column + ')' : '') + (error && error.stack ? '\n' + error.stack : '');
  document.body.dataset.rendered = 'error';
};
)JS";

// Draws the plots from the JSON blob #report-data as inline SVG.
constexpr std::string_view main_script = R"JS(
(function () {
'use strict';
// The SVG namespace, from the HTML parser, so that the page holds no URL at all.
const SVG = (function () { const d = document.createElement('div'); d.innerHTML = '<svg></svg>'; return d.firstChild.namespaceURI; })();
const D = JSON.parse(document.getElementById('report-data').textContent);
const S = D.samples, N = S.t.length, phases = D.phases, T = D.run_seconds > 0 ? D.run_seconds : 1;
const W = 960;
const C = { ips: '#4e79a7', busy: '#f28e2b', sBusy: '#59a14f', starved: '#edc948', blocked: '#e15759', other: '#e6e8eb',
            grow: '#2da44e', shrink: '#cf222e', flight: '#8250df', band: '#f3f4f6', loss: '#4e79a7',
            top1: '#4e79a7', val1: '#f28e2b', val5: '#59a14f' };
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

// (1) Throughput and GPU (or CPU compute) busy over time, with the scheduler's moves.
function throughput() {
  const box = document.getElementById('plot-throughput');
  const f = timeFrame(box, 330, { l: 64, r: 64, t: 40, b: 28 });
  const busy = D.gpu_known ? S.gpu : S.compute, busyName = D.gpu_known ? 'GPU busy' : 'CPU compute busy';
  const yMax = niceMax(Math.max(0, ...S.ips.filter(v => v !== null)) * 1.05);
  const y = scale(0, yMax, f.bottom, f.top), yb = scale(0, 1, f.bottom, f.top);
  yAxis(f.s, y, ticks(0, yMax, 5), f.m.l, W - f.m.r, num, 'left', 'images/s');
  yAxis(f.s, yb, [0, 0.25, 0.5, 0.75, 1], f.m.l, W - f.m.r, v => Math.round(100 * v) + '%', 'right', busyName);
  if (N === 0) empty(f, 'no samples were recorded');
  const x = xs().map(f.x);
  line(f.s, x, busy.map(v => v === null ? null : yb(v)), C.busy, 1.3, phaseBreak);
  line(f.s, x, S.ips.map(v => v === null ? null : y(v)), C.ips, 1.8, phaseBreak);
  hover(f, i => num(S.ips[i]) + ' images/s\n' + busyName + ' ' + pct(busy[i]));
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
  legend(box, [['images/s', C.ips], [busyName + ' %', C.busy], ['grow', C.grow], ['shrink', C.shrink],
               ['in-flight limit', C.flight], ['evaluation', '#dfe3e8']]);
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
)JS";

}  // namespace

RunRecorder::RunRecorder(std::size_t max_samples, std::size_t max_moves, std::size_t max_skips)
    : max_samples_(max_samples), max_moves_(max_moves), max_skips_(max_skips) {
  if (max_samples < 16)
    throw std::invalid_argument("RunRecorder: max_samples is " + std::to_string(max_samples) + "; give 16 or more");
}

void RunRecorder::begin_phase(double seconds, int epoch, std::string phase) {
  std::lock_guard lock(mutex_);
  begin_phase_locked(seconds, epoch, std::move(phase));
}

void RunRecorder::begin_phase_locked(double seconds, int epoch, std::string phase) {
  if (pending_) {
    push_locked(*pending_);
    pending_.reset();
  }
  Phase p;
  p.epoch = epoch;
  p.name = std::move(phase);
  p.start = seconds;
  phases_.push_back(std::move(p));
  last_seconds_ = seconds;
  last_images_ = 0;
  last_counters_.clear();
}

void RunRecorder::sample(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
                         std::optional<double> gpu_busy) {
  std::lock_guard lock(mutex_);
  sample_locked(seconds, images, stages, gpu_busy);
}

void RunRecorder::sample_locked(double seconds, std::int64_t images, const std::vector<graph::StageStats>& stages,
                                std::optional<double> gpu_busy) {
  if (phases_.empty() || phases_.back().end >= phases_.back().start)
    begin_phase_locked(phases_.empty() ? 0 : phases_.back().end, phases_.empty() ? 0 : phases_.back().epoch, "run");
  const double dt = seconds - last_seconds_;
  if (!(dt > 0)) return;
  const double dt_ns = dt * 1e9;

  Sample s;
  s.seconds = seconds;
  s.interval = dt;
  s.phase = static_cast<int>(phases_.size()) - 1;
  // A count below the previous one means a new pipeline the caller did not announce: count from 0.
  const std::int64_t done = images >= last_images_ ? images - last_images_ : images;
  s.images_per_sec = static_cast<double>(done) / dt;
  if (gpu_busy) s.gpu_busy = std::clamp(*gpu_busy, 0.0, 1.0);

  std::vector<Counters> now;
  now.reserve(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const graph::StageStats& st = stages[i];
    Counters c{st.name, st.busy.count(), st.starved.count(), st.blocked.count()};
    Counters before{st.name, 0, 0, 0};
    if (i < last_counters_.size() && last_counters_[i].name == st.name) {
      before = last_counters_[i];
    } else {
      auto it = std::find_if(last_counters_.begin(), last_counters_.end(),
                             [&](const Counters& x) { return x.name == st.name; });
      if (it != last_counters_.end()) before = *it;
    }
    const auto delta = [](std::int64_t now_ns, std::int64_t before_ns) {
      return static_cast<double>(now_ns >= before_ns ? now_ns - before_ns : now_ns);
    };
    s.stages.push_back(StageSample{st.name, fraction(delta(c.busy, before.busy), dt_ns * std::max(st.concurrency, 1)),
                                   fraction(delta(c.starved, before.starved), dt_ns),
                                   fraction(delta(c.blocked, before.blocked), dt_ns)});
    now.push_back(std::move(c));
  }
  if (!s.stages.empty()) s.compute_busy = s.stages.back().busy;
  last_counters_ = std::move(now);
  last_seconds_ = seconds;
  last_images_ = images;

  // Combined `stride_` at a time since the last halving, so that the resolution stays even.
  if (pending_) {
    pending_ = merge(*pending_, s);
  } else {
    pending_ = std::move(s);
    pending_count_ = 0;
  }
  if (++pending_count_ >= stride_) {
    push_locked(std::move(*pending_));
    pending_.reset();
  }
}

void RunRecorder::push_locked(Sample sample) {
  if (samples_.size() >= max_samples_) halve_locked();
  samples_.push_back(std::move(sample));
}

void RunRecorder::halve_locked() {
  std::vector<Sample> merged;
  merged.reserve(samples_.size() / 2 + 1);
  for (std::size_t i = 0; i < samples_.size(); i += 2)
    merged.push_back(i + 1 < samples_.size() ? merge(samples_[i], samples_[i + 1]) : samples_[i]);
  samples_ = std::move(merged);
  stride_ *= 2;
}

void RunRecorder::decision(double seconds, const graph::Decision& d) {
  std::lock_guard lock(mutex_);
  if (phases_.empty()) begin_phase_locked(0, 0, "run");
  phases_.back().live_decisions = true;
  ++moves_total_;
  if (moves_.size() < max_moves_) moves_.push_back(Move{seconds, static_cast<int>(phases_.size()) - 1, d});
}

void RunRecorder::end_phase(double seconds, std::int64_t images, const graph::RunReport& report) {
  std::lock_guard lock(mutex_);
  const double elapsed = seconds_of(report.elapsed);
  if (phases_.empty() || phases_.back().end >= phases_.back().start)
    begin_phase_locked(std::max(0.0, seconds - elapsed), phases_.empty() ? 0 : phases_.back().epoch, "run");
  sample_locked(seconds, images, report.stages, std::nullopt);
  if (pending_) {
    push_locked(std::move(*pending_));
    pending_.reset();
  }

  Phase& phase = phases_.back();
  const int index = static_cast<int>(phases_.size()) - 1;
  phase.end = std::max(seconds, phase.start);
  phase.images = images;
  phase.stopped = report.stopped || report.cancelled;
  phase.totals.clear();
  phase.concurrency.clear();
  for (const graph::StageStats& st : report.stages) {
    phase.totals.push_back(StageSample{st.name, fraction(seconds_of(st.busy), elapsed * std::max(st.concurrency, 1)),
                                       fraction(seconds_of(st.starved), elapsed),
                                       fraction(seconds_of(st.blocked), elapsed)});
    phase.concurrency.push_back(st.concurrency);
  }

  for (const graph::SkippedItem& item : report.skipped_items)
    if (skips_.size() < max_skips_) skips_.push_back(Skip{index, item});
  skips_total_ += std::max<std::uint64_t>(report.skipped, report.skipped_items.size());

  if (!phase.live_decisions) {
    // The report's times count from the pipeline's start, which is `elapsed` before its end.
    const double pipeline_start = seconds - elapsed;
    for (const graph::Decision& d : report.decisions) {
      ++moves_total_;
      if (moves_.size() < max_moves_) moves_.push_back(Move{pipeline_start + seconds_of(d.at), index, d});
    }
  }
}

void RunRecorder::epoch(const EpochRow& row) {
  std::lock_guard lock(mutex_);
  epochs_.push_back(row);
}

std::vector<RunRecorder::Sample> RunRecorder::samples() const {
  std::lock_guard lock(mutex_);
  std::vector<Sample> all = samples_;
  if (pending_) {
    if (all.size() < max_samples_)
      all.push_back(*pending_);
    else
      all.back() = merge(all.back(), *pending_);
  }
  return all;
}

std::string RunRecorder::json_locked() const {
  std::vector<Sample> all = samples_;
  if (pending_) {
    if (all.size() < max_samples_)
      all.push_back(*pending_);
    else
      all.back() = merge(all.back(), *pending_);
  }

  double run_seconds = 0;
  for (const Phase& p : phases_) run_seconds = std::max({run_seconds, p.start, p.end});
  if (!all.empty()) run_seconds = std::max(run_seconds, all.back().seconds);
  for (const Move& m : moves_) run_seconds = std::max(run_seconds, m.seconds);

  std::string out;
  out.reserve(4096 + all.size() * 160);
  out += '{';
  json_key(out, "run_seconds", true);
  json_number(out, run_seconds, 9);
  json_key(out, "gpu_known");
  out += std::any_of(all.begin(), all.end(), [](const Sample& s) { return s.gpu_busy.has_value(); }) ? "true" : "false";

  json_key(out, "samples");
  out += '{';
  json_key(out, "t", true);
  json_array(out, all.size(), [&](std::size_t i) { json_number(out, all[i].seconds, 9); });
  json_key(out, "dt");
  json_array(out, all.size(), [&](std::size_t i) { json_number(out, all[i].interval, 5); });
  json_key(out, "phase");
  json_array(out, all.size(), [&](std::size_t i) { out += std::to_string(all[i].phase); });
  json_key(out, "ips");
  json_array(out, all.size(), [&](std::size_t i) { json_number(out, all[i].images_per_sec, 5); });
  json_key(out, "gpu");
  json_array(out, all.size(), [&](std::size_t i) { json_optional(out, all[i].gpu_busy); });
  json_key(out, "compute");
  json_array(out, all.size(), [&](std::size_t i) { json_number(out, all[i].compute_busy); });
  out += '}';

  // Each stage's series over the samples, null where the stage was not in the pipeline.
  std::vector<std::string> names;
  for (const Sample& s : all)
    for (const StageSample& st : s.stages)
      if (std::find(names.begin(), names.end(), st.name) == names.end()) names.push_back(st.name);
  json_key(out, "stages_over_time");
  json_array(out, names.size(), [&](std::size_t k) {
    out += '{';
    json_key(out, "name", true);
    json_string(out, names[k]);
    for (const auto& [key, field] : {std::pair{"busy", &StageSample::busy}, std::pair{"starved", &StageSample::starved},
                                     std::pair{"blocked", &StageSample::blocked}}) {
      json_key(out, key);
      json_array(out, all.size(), [&](std::size_t i) {
        const auto& stages = all[i].stages;
        auto it = std::find_if(stages.begin(), stages.end(), [&](const StageSample& x) { return x.name == names[k]; });
        if (it == stages.end())
          out += "null";
        else
          json_number(out, (*it).*field);
      });
    }
    out += '}';
  });

  json_key(out, "phases");
  json_array(out, phases_.size(), [&](std::size_t i) {
    const Phase& p = phases_[i];
    out += '{';
    json_key(out, "epoch", true);
    out += std::to_string(p.epoch);
    json_key(out, "name");
    json_string(out, p.name);
    json_key(out, "start");
    json_number(out, p.start, 9);
    json_key(out, "end");
    json_number(out, p.end, 9);
    json_key(out, "elapsed");
    json_number(out, p.end >= p.start ? p.end - p.start : 0, 9);
    json_key(out, "images");
    out += std::to_string(p.images);
    json_key(out, "stopped");
    out += p.stopped ? "true" : "false";
    json_key(out, "stages");
    json_array(out, p.totals.size(), [&](std::size_t k) {
      out += '{';
      json_key(out, "name", true);
      json_string(out, p.totals[k].name);
      json_key(out, "busy");
      json_number(out, p.totals[k].busy);
      json_key(out, "starved");
      json_number(out, p.totals[k].starved);
      json_key(out, "blocked");
      json_number(out, p.totals[k].blocked);
      json_key(out, "concurrency");
      out += std::to_string(p.concurrency[k]);
      out += '}';
    });
    out += '}';
  });

  json_key(out, "moves");
  json_array(out, moves_.size(), [&](std::size_t i) {
    const Move& m = moves_[i];
    out += '{';
    json_key(out, "t", true);
    json_number(out, m.seconds, 9);
    json_key(out, "phase");
    out += std::to_string(m.phase);
    json_key(out, "kind");
    json_string(out, graph::to_string(m.decision.kind));
    json_key(out, "stage");
    json_string(out, m.decision.stage);
    json_key(out, "from");
    out += std::to_string(m.decision.from);
    json_key(out, "to");
    out += std::to_string(m.decision.to);
    json_key(out, "why");
    json_string(out, m.decision.why);
    json_key(out, "revert");
    out += m.decision.revert ? "true" : "false";
    out += '}';
  });

  json_key(out, "epochs");
  json_array(out, epochs_.size(), [&](std::size_t i) {
    const EpochRow& e = epochs_[i];
    out += '{';
    json_key(out, "epoch", true);
    out += std::to_string(e.epoch);
    json_key(out, "train_loss");
    json_number(out, e.train_loss, 6);
    json_key(out, "train_top1");
    json_number(out, e.train_top1, 6);
    json_key(out, "val_top1");
    json_optional(out, e.val_top1, 6);
    json_key(out, "val_top5");
    json_optional(out, e.val_top5, 6);
    json_key(out, "images_per_sec");
    json_number(out, e.images_per_sec, 6);
    json_key(out, "compute_busy");
    json_number(out, e.compute_busy);
    json_key(out, "skipped");
    out += std::to_string(e.skipped);
    out += '}';
  });
  out += '}';
  return out;
}

std::string RunRecorder::html(const std::string& title,
                              const std::vector<std::pair<std::string, std::string>>& settings) const {
  std::lock_guard lock(mutex_);

  // The summary.
  double run_seconds = 0, train_seconds = 0;
  std::int64_t train_images = 0, all_images = 0;
  for (const Phase& p : phases_) {
    run_seconds = std::max({run_seconds, p.start, p.end});
    all_images += p.images;
    if (p.name == "train" && p.end >= p.start) {
      train_seconds += p.end - p.start;
      train_images += p.images;
    }
  }
  if (!samples_.empty()) run_seconds = std::max(run_seconds, samples_.back().seconds);
  if (pending_) run_seconds = std::max(run_seconds, pending_->seconds);
  // The mean busy while training (over every phase when none is named "train"), weighted by time.
  double busy_sum = 0, busy_time = 0;
  bool gpu = false;
  for (const Sample& s : samples_) gpu = gpu || s.gpu_busy.has_value();
  const bool any_train = std::any_of(phases_.begin(), phases_.end(), [](const Phase& p) { return p.name == "train"; });
  for (const Sample& s : samples_) {
    if (gpu && !s.gpu_busy) continue;
    if (any_train && phases_[static_cast<std::size_t>(s.phase)].name != "train") continue;
    busy_sum += (gpu ? *s.gpu_busy : s.compute_busy) * s.interval;
    busy_time += s.interval;
  }
  std::optional<double> best_val;
  for (const EpochRow& e : epochs_)
    if (e.val_top1) best_val = std::max(best_val.value_or(0), *e.val_top1);

  std::vector<std::pair<std::string, std::string>> cards;
  cards.emplace_back("run time", duration_text(run_seconds));
  cards.emplace_back("epochs", std::to_string(epochs_.size()));
  cards.emplace_back("images trained", thousands(static_cast<std::uint64_t>(std::max<std::int64_t>(0, train_images))));
  cards.emplace_back("train images/s",
                     train_seconds > 0 ? fixed(static_cast<double>(train_images) / train_seconds, 0) : "-");
  cards.emplace_back(gpu ? "GPU busy, training" : "compute busy, training",
                     busy_time > 0 ? percent(busy_sum / busy_time) : "-");
  if (!epochs_.empty() && epochs_.back().val_top1)
    cards.emplace_back("last val top-1", percent(*epochs_.back().val_top1));
  if (best_val) cards.emplace_back("best val top-1", percent(*best_val));
  cards.emplace_back("scheduler moves", std::to_string(moves_total_));
  cards.emplace_back("skipped", thousands(skips_total_));
  if (all_images != train_images)
    cards.emplace_back("images evaluated",
                       thousands(static_cast<std::uint64_t>(std::max<std::int64_t>(0, all_images - train_images))));

  char written[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(written, sizeof written, "%Y-%m-%d %H:%M UTC", &utc);

  std::string h;
  h.reserve(64 * 1024);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + html_escape(title) + "</title>\n<style>" + std::string(style) + "</style>\n";
  h += "<script>" + std::string(error_script) + "</script>\n</head>\n<body>\n<main>\n";
  h += "<h1>" + html_escape(title) + "</h1>\n<div class=\"sub\">written " + html_escape(written) + "</div>\n";
  h += "<div id=\"report-error\"></div>\n";

  h += "<div class=\"cards\">\n";
  for (const auto& [k, v] : cards)
    h += "<div class=\"card\"><div class=\"k\">" + html_escape(k) + "</div><div class=\"v\">" + html_escape(v) +
         "</div></div>\n";
  h += "</div>\n";

  h += "<h2>Throughput</h2>\n<p class=\"note\">Images per second over the run, and how busy the ";
  h += gpu ? "GPU was (NVML utilization)" : "compute step was (the last stage's busy time over wall time)";
  h += "; evaluation passes are shaded. Triangles above the plot are the scheduler's moves: hover for why.</p>\n";
  h += "<div id=\"plot-throughput\" class=\"plot\"></div>\n";

  h += "<h2>Stages over time</h2>\n<div class=\"controls\">";
  for (const char* metric : {"busy", "starved", "blocked"})
    h += std::string("<label><input type=\"radio\" name=\"stage-metric\" value=\"") + metric + "\"" +
         (std::string_view(metric) == "busy" ? " checked" : "") + "> " + metric + "</label>";
  h += "</div>\n<div id=\"plot-stage-time\" class=\"plot\"></div>\n";

  h += "<h2>Where each stage spent its time</h2>\n<p class=\"note\">Busy: time inside the stage's work over wall "
       "time and its allowed concurrent calls. Starved: waiting for input. Blocked: holding output with no room "
       "downstream. Other: running fewer calls than allowed, or done.</p>\n";
  h += "<div class=\"controls\"><label>phase <select id=\"stage-phase\"></select></label></div>\n";
  h += "<div id=\"plot-stage-bars\" class=\"plot\"></div>\n";

  h += "<h2>Loss and accuracy</h2>\n<div class=\"row\"><div id=\"plot-loss\" class=\"plot\"></div>"
       "<div id=\"plot-accuracy\" class=\"plot\"></div></div>\n";
  if (!epochs_.empty()) {
    h += "<details" + std::string(epochs_.size() <= 20 ? " open" : "") + "><summary>" + std::to_string(epochs_.size()) +
         (epochs_.size() == 1 ? " epoch" : " epochs") + "</summary>\n";
    h += "<table>\n<tr><th class=\"n\">epoch</th><th class=\"n\">train loss</th><th class=\"n\">train top-1</th>"
         "<th class=\"n\">val top-1</th><th class=\"n\">val top-5</th><th class=\"n\">images/s</th>"
         "<th class=\"n\">compute busy</th><th class=\"n\">skipped</th></tr>\n";
    for (const EpochRow& e : epochs_) {
      h += "<tr><td class=\"n\">" + std::to_string(e.epoch) + "</td><td class=\"n\">" + fixed(e.train_loss, 4) +
           "</td><td class=\"n\">" + percent(e.train_top1) + "</td><td class=\"n\">" +
           (e.val_top1 ? percent(*e.val_top1) : "-") + "</td><td class=\"n\">" +
           (e.val_top5 ? percent(*e.val_top5) : "-") + "</td><td class=\"n\">" + fixed(e.images_per_sec, 0) +
           "</td><td class=\"n\">" + percent(e.compute_busy) + "</td><td class=\"n\">" + thousands(e.skipped) +
           "</td></tr>\n";
    }
    h += "</table>\n</details>\n";
  }

  h += "<h2>Scheduler moves</h2>\n";
  if (moves_total_ == 0) {
    h += "<p class=\"note\">None: the scheduler was off (--autotune off) or found nothing to change.</p>\n";
  } else {
    h += "<details" + std::string(moves_.size() <= 20 ? " open" : "") + "><summary>" + std::to_string(moves_total_) +
         " move" + (moves_total_ == 1 ? "" : "s") +
         "</summary>\n<table>\n<tr><th class=\"n\">time</th><th>phase</th>"
         "<th>move</th><th>why</th></tr>\n";
    for (const Move& m : moves_) {
      const Phase& p = phases_[static_cast<std::size_t>(m.phase)];
      h += "<tr><td class=\"n\">" + fixed(m.seconds, 1) + " s" + "</td><td>" +
           html_escape("epoch " + std::to_string(p.epoch) + " " + p.name) + "</td><td><code>" +
           html_escape(move_text(m.decision)) + (m.decision.revert ? " (revert)" : "") +
           "</code></td><td class=\"why\">" + html_escape(m.decision.why) + "</td></tr>\n";
    }
    h += "</table>\n";
    if (moves_total_ > moves_.size())
      h += "<p class=\"note\">and " + thousands(moves_total_ - moves_.size()) + " more, not listed</p>\n";
    h += "</details>\n";
  }

  h += "<h2>Settings</h2>\n<table>\n";
  for (const auto& [k, v] : settings)
    h += "<tr><th>" + html_escape(k) + "</th><td><code>" + html_escape(v) + "</code></td></tr>\n";
  h += "</table>\n";

  h += "<h2>Skipped files</h2>\n";
  if (skips_total_ == 0) {
    h += "<p class=\"note\">None.</p>\n";
  } else {
    h += "<details" + std::string(skips_.size() <= 20 ? " open" : "") + "><summary>" + thousands(skips_total_) +
         " skipped</summary>\n<table>\n<tr><th>phase</th><th>stage</th><th class=\"n\">item</th><th>why</th></tr>\n";
    for (const Skip& s : skips_) {
      const Phase& p = phases_[static_cast<std::size_t>(s.phase)];
      h += "<tr><td>" + html_escape("epoch " + std::to_string(p.epoch) + " " + p.name) + "</td><td>" +
           html_escape(s.item.stage) + "</td><td class=\"n\">" + std::to_string(s.item.index) + "</td><td>" +
           html_escape(s.item.reason) + "</td></tr>\n";
    }
    h += "</table>\n";
    if (skips_total_ > skips_.size())
      h += "<p class=\"note\">and " + thousands(skips_total_ - skips_.size()) + " more, not listed</p>\n";
    h += "</details>\n";
  }

  h += "</main>\n<div id=\"tip\"></div>\n";
  h += "<script type=\"application/json\" id=\"report-data\">" + json_locked() + "</script>\n";
  h += "<script>" + std::string(main_script) + "</script>\n</body>\n</html>\n";
  return h;
}

void RunRecorder::write_html(const fs::path& path, const std::string& title,
                             const std::vector<std::pair<std::string, std::string>>& settings) const {
  const std::string page = html(title, settings);
  // Written next to the target and renamed over it, so a reader never sees half a page.
  fs::path temporary = path;
  temporary += ".tmp";
  const auto fail = [&](const std::string& why) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw std::runtime_error("cannot write the report " + path.string() + ": " + why);
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(std::generic_category().message(errno) + " (check that its folder exists and is writable)");
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    if (!out.flush()) fail("write failed (disk full?)");
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) fail(error.message());
}

}  // namespace stoke::train
