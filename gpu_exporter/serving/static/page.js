// The live page's only script: draws each chart's lines from /api/overview and refreshes
// the page every few seconds. Same origin only (the Content-Security-Policy says 'self').
"use strict";

const REFRESH_MS = 5000;

function windowName() {
  return new URLSearchParams(location.search).get("window") || document.body.dataset.window;
}

// A GPU is its index with its UUID: two boards may report the same UUID.
const gpuKey = (index, uuid) => `${index} ${uuid}`;

function draw(doc) {
  const byKey = new Map(doc.gpus.map((gpu) => [gpuKey(gpu.index, gpu.uuid), gpu]));
  const end = doc.timestamp_seconds;
  const start = end - doc.window.seconds;
  for (const card of document.querySelectorAll("[data-gpu-uuid]")) {
    const gpu = byKey.get(gpuKey(card.dataset.gpuIndex, card.dataset.gpuUuid));
    if (!gpu) continue;
    for (const svg of card.querySelectorAll("svg[data-series]")) {
      drawChart(svg, gpu.history, start, end);
    }
  }
}

function drawChart(svg, history, start, end) {
  const d = svg.dataset;
  const top = Number(d.top);
  const [left, right] = [Number(d.left), Number(d.right)];
  const [topY, bottomY] = [Number(d.topY), Number(d.bottomY)];
  const x = (t) => left + ((t - start) / (end - start)) * (right - left);
  const y = (v) => bottomY - ((bottomY - topY) * Math.min(Math.max(v, 0), top)) / top;
  const group = svg.querySelector("g.lines");
  group.replaceChildren();
  let drawn = 0;
  d.series.split(" ").forEach((name, k) => {
    const values = history[name] || [];
    let path = "";
    let pen = false; // a missing value (null) lifts the pen: a gap, never a 0
    history.times.forEach((t, i) => {
      const v = values[i];
      if (v === null || v === undefined || t < start) {
        pen = false;
        return;
      }
      path += `${pen ? "L" : "M"}${x(t).toFixed(1)} ${y(v).toFixed(1)}`;
      pen = true;
      drawn += 1;
    });
    const line = document.createElementNS(svg.namespaceURI, "path");
    line.setAttribute("class", `line s${k} ${name}`);
    line.setAttribute("d", path);
    group.appendChild(line);
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
