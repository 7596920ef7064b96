// The live page's only script: draws each chart's series from /api/overview (a band from
// lowest to highest per column, the mean as a line over it, broken only where samples
// are missing; "history since HH:MM" while the history is younger than the window) and
// refreshes the page every few seconds.
// Same origin only (the Content-Security-Policy says 'self').
"use strict";

const REFRESH_MS = 5000;

function windowName() {
  return new URLSearchParams(location.search).get("window") || document.body.dataset.window;
}

// A GPU is its index with its UUID: two boards may report the same UUID.
const gpuKey = (index, uuid) => `${index} ${uuid}`;

// Points are gathered into columns at least this many SVG units wide (about a screen
// pixel or two): each series draws its range in a column as a band and its mean as the
// line, so a value that flickers from one sample to the next reads as a band, not as a
// solid block. A column spans BAND_STEPS sampling steps where that leaves MIN_COLUMNS
// columns in the window (at 5 s: 10-second columns, 30 of them in 5 minutes); sparser
// samples are drawn one a column. Column edges fall halfway between the sampler's ticks
// (aligned to its phase, not to the window's start), so each column holds as many
// samples as the next and a refresh does not move points from one column to another.
const COLUMN = 3;
const BAND_STEPS = 2;
const MIN_COLUMNS = 30;

// Two consecutive points further apart than this many sampling steps (the larger of the
// window's step and the sampling interval) have a gap between them: samples really went
// missing there (NVML down, the GPU not read). Closer points are joined, however many
// columns lie between them (at 30 s, most columns of the 5-minute chart hold no point).
// A point without a value (a lost GPU) is a gap too.
const GAP_STEPS = 3;

function draw(doc) {
  const byKey = new Map(doc.gpus.map((gpu) => [gpuKey(gpu.index, gpu.uuid), gpu]));
  const end = doc.timestamp_seconds;
  const start = end - doc.window.seconds;
  const spacing = Math.max(doc.window.step_seconds, doc.interval_seconds || 0);
  for (const card of document.querySelectorAll("[data-gpu-uuid]")) {
    const gpu = byKey.get(gpuKey(card.dataset.gpuIndex, card.dataset.gpuUuid));
    if (!gpu) continue;
    for (const svg of card.querySelectorAll("svg[data-series]")) {
      drawChart(svg, gpu.history, start, end, spacing);
    }
  }
}

// The stretches of one series to draw unbroken, oldest first: each holds the times and
// values of consecutive points inside the window that all have a value, none more than
// `gap` seconds after the one before.
function stretches(times, values, start, gap) {
  const out = [];
  let open = null;
  times.forEach((t, i) => {
    const v = values[i];
    if (t < start) return;
    if (v === null || v === undefined) {
      open = null; // a gap, never a 0
      return;
    }
    if (open === null || t - open.times[open.times.length - 1] > gap) {
      open = { times: [], values: [] };
      out.push(open);
    }
    open.times.push(t);
    open.values.push(v);
  });
  return out;
}

// Per column of `seconds` (edges at `phase` plus a multiple of it) that holds a point
// of the stretch, in order: the lowest, highest and mean value and the mean time of
// its points.
function columns(stretch, seconds, phase) {
  const out = new Map();
  stretch.times.forEach((t, i) => {
    const v = stretch.values[i];
    const k = Math.floor((t - phase) / seconds);
    let c = out.get(k);
    if (c === undefined) out.set(k, (c = { min: v, max: v, sum: 0, t: 0, n: 0 }));
    c.min = Math.min(c.min, v);
    c.max = Math.max(c.max, v);
    c.sum += v;
    c.t += t;
    c.n += 1;
  });
  return [...out.values()];
}

function svgElement(svg, tag, attributes) {
  const element = document.createElementNS(svg.namespaceURI, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

function drawChart(svg, history, start, end, spacing) {
  const d = svg.dataset;
  const top = Number(d.top);
  const [left, right] = [Number(d.left), Number(d.right)];
  const [topY, bottomY] = [Number(d.topY), Number(d.bottomY)];
  const x = (t) => left + ((t - start) / (end - start)) * (right - left);
  const y = (v) => bottomY - ((bottomY - topY) * Math.min(Math.max(v, 0), top)) / top;
  const span = end - start;
  const narrowest = span / Math.max(1, Math.floor((right - left) / COLUMN));
  const column = Math.max(narrowest, Math.min(BAND_STEPS * spacing, span / MIN_COLUMNS));
  const gap = GAP_STEPS * spacing;
  const newest = history.times.length ? history.times[history.times.length - 1] : 0;
  const phase = (((newest - spacing / 2) % spacing) + spacing) % spacing;
  const group = svg.querySelector("g.lines");
  group.replaceChildren();
  let drawn = 0;
  // right after start, the long windows hold a sliver: say since when
  const first = history.times.find((t) => t >= start);
  if (first !== undefined && first - start > Math.max(gap, (end - start) / 20)) {
    group.appendChild(
      svgElement(svg, "rect", {
        class: "before",
        x: left,
        y: topY,
        width: (x(first) - left).toFixed(1),
        height: bottomY - topY,
      }),
    );
    const since = new Date(first * 1000).toTimeString().slice(0, 5);
    const label = svgElement(svg, "text", { class: "since", x: left + 4, y: topY + 12 });
    label.textContent = `history since ${since}`;
    group.appendChild(label);
  }
  d.series.split(" ").forEach((name, k) => {
    let line = "";
    let band = "";
    for (const stretch of stretches(history.times, history[name] || [], start, gap)) {
      const cells = columns(stretch, column, phase).map((c) => ({
        x: x(c.t / c.n).toFixed(1),
        mean: y(c.sum / c.n).toFixed(1),
        min: y(c.min).toFixed(1),
        max: y(c.max).toFixed(1),
      }));
      // one subpath per stretch; a lone point is a dot (round caps)
      line += `M${cells.map((c) => `${c.x} ${c.mean}`).join("L")}${cells.length > 1 ? "" : "h0"}`;
      const upper = cells.map((c) => `${c.x} ${c.max}`);
      const lower = cells.reverse().map((c) => `${c.x} ${c.min}`);
      band += `M${upper.join("L")}L${lower.join("L")}Z`;
      drawn += stretch.times.length;
    }
    group.appendChild(svgElement(svg, "path", { class: `band s${k} ${name}`, d: band }));
    group.appendChild(svgElement(svg, "path", { class: `line s${k} ${name}`, d: line }));
  });
  d.points = String(drawn);
}

async function refresh() {
  const query = `?window=${encodeURIComponent(windowName())}`;
  try {
    const [page, api] = await Promise.all([
      fetch(`./${query}`, { credentials: "same-origin" }),
      fetch(`api/overview${query}`, { credentials: "same-origin" }),
    ]);
    if (!page.ok || !api.ok) return;
    const fresh = new DOMParser().parseFromString(await page.text(), "text/html");
    const doc = await api.json();
    const main = fresh.getElementById("live");
    if (main) document.getElementById("live").replaceWith(main);
    draw(doc);
  } catch (error) {
    // the exporter restarts or the network blinks: the next refresh tries again
  }
}

async function start() {
  try {
    const api = await fetch(`api/overview?window=${encodeURIComponent(windowName())}`, {
      credentials: "same-origin",
    });
    if (api.ok) draw(await api.json());
  } finally {
    setInterval(refresh, REFRESH_MS);
  }
}

start();
