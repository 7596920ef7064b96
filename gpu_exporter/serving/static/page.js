// The live page's only script: draws each chart's series from /api/overview (a band from
// lowest to highest per column, the mean as a line over it, "history since HH:MM" while
// the history is younger than the window) and refreshes the page every few seconds.
// Same origin only (the Content-Security-Policy says 'self').
"use strict";

const REFRESH_MS = 5000;

function windowName() {
  return new URLSearchParams(location.search).get("window") || document.body.dataset.window;
}

// A GPU is its index with its UUID: two boards may report the same UUID.
const gpuKey = (index, uuid) => `${index} ${uuid}`;

// Points are gathered into columns this many SVG units wide (about a screen pixel or
// two): each series draws its range in a column as a band and its mean as the line, so
// a value that flickers every second reads as a band, not as a solid block.
const COLUMN = 3;

function draw(doc) {
  const byKey = new Map(doc.gpus.map((gpu) => [gpuKey(gpu.index, gpu.uuid), gpu]));
  const end = doc.timestamp_seconds;
  const start = end - doc.window.seconds;
  for (const card of document.querySelectorAll("[data-gpu-uuid]")) {
    const gpu = byKey.get(gpuKey(card.dataset.gpuIndex, card.dataset.gpuUuid));
    if (!gpu) continue;
    for (const svg of card.querySelectorAll("svg[data-series]")) {
      drawChart(svg, gpu.history, start, end, doc.window.step_seconds);
    }
  }
}

// Per column of the plot: the lowest, highest and mean value of one series and the mean
// time of its points; a column without a value is null (a gap, never a 0).
function columns(times, values, start, end, count) {
  const out = Array.from({ length: count }, () => null);
  times.forEach((t, i) => {
    const v = values[i];
    if (v === null || v === undefined || t < start) return;
    const k = Math.min(count - 1, Math.floor(((t - start) / (end - start)) * count));
    const c = out[k] || (out[k] = { min: v, max: v, sum: 0, t: 0, n: 0 });
    c.min = Math.min(c.min, v);
    c.max = Math.max(c.max, v);
    c.sum += v;
    c.t += t;
    c.n += 1;
  });
  return out;
}

function svgElement(svg, tag, attributes) {
  const element = document.createElementNS(svg.namespaceURI, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

function drawChart(svg, history, start, end, step) {
  const d = svg.dataset;
  const top = Number(d.top);
  const [left, right] = [Number(d.left), Number(d.right)];
  const [topY, bottomY] = [Number(d.topY), Number(d.bottomY)];
  const x = (t) => left + ((t - start) / (end - start)) * (right - left);
  const y = (v) => bottomY - ((bottomY - topY) * Math.min(Math.max(v, 0), top)) / top;
  const count = Math.max(1, Math.floor((right - left) / COLUMN));
  const group = svg.querySelector("g.lines");
  group.replaceChildren();
  let drawn = 0;
  // right after start, the long windows hold a sliver: say since when
  const first = history.times.find((t) => t >= start);
  if (first !== undefined && first - start > Math.max(3 * step, (end - start) / 20)) {
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
    const cells = columns(history.times, history[name] || [], start, end, count);
    let line = "";
    let band = "";
    let run = []; // consecutive columns with a value: one band each
    const closeBand = () => {
      if (run.length) {
        const upper = run.map((c) => `${c.x} ${y(c.max).toFixed(1)}`);
        const lower = run.reverse().map((c) => `${c.x} ${y(c.min).toFixed(1)}`);
        band += `M${upper.join("L")}L${lower.join("L")}Z`;
      }
      run = [];
    };
    cells.forEach((c) => {
      if (c === null) {
        closeBand();
        return;
      }
      const cx = x(c.t / c.n).toFixed(1);
      line += `${run.length ? "L" : "M"}${cx} ${y(c.sum / c.n).toFixed(1)}`;
      run.push({ x: cx, min: c.min, max: c.max });
      drawn += c.n;
    });
    closeBand();
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
