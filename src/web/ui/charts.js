// codex-bridge admin view: the overview's charts, drawn as SVG by the page
// itself (no library). Loaded after app.js and built with its helper h().
// The data is the `stats` document (GET /api/gitea-workflow/stats, and the
// live stream's `stats` event); every text from it (repository names are
// whatever Gitea sent) goes in as text, never as markup.
//
// Each chart is drawn at the pixel width of its box (one SVG unit = one CSS
// pixel), so its text keeps its size on a phone; it is drawn again when
// that width changes.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_H = 180;
const PAD = { left: 44, right: 10, top: 10, bottom: 24 };
const REPO_COLOURS = ["#2457c5", "#e08a00", "#2e7d32", "#7b1fa2", "#b3261e", "#00838f", "#6d4c41", "#c2185b"];

// The last document, and the panel kept across the overview's re-renders.
const charts = { stats: null, panel: null, width: 0, observer: null };

/** svg("rect", {x: 1}, child, ...) → an SVG element; strings become text. */
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** A mark with a tooltip: `<title>` for a mouse, the readout line for a tap. */
function tipped(el, tip) {
  el.dataset.tip = tip;
  el.append(svg("title", {}, tip));
  return el;
}

function compact(n) {
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (n / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  return String(Math.round(n));
}

function duration(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
  if (ms < 3600000) return (ms / 60000).toFixed(1) + " min";
  return (ms / 3600000).toFixed(1) + " h";
}

function localTime(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function localDay(ms) {
  return new Date(ms).toLocaleDateString([], { month: "short", day: "numeric" });
}

/** A round maximum for a y axis at or above `max`, and its ticks (whole
 * numbers for counts). */
function yScale(max, whole) {
  if (!(max > 0)) max = 1;
  const step0 = Math.pow(10, Math.floor(Math.log10(max / 3)));
  let step = [1, 2, 5, 10].map((m) => m * step0).find((s) => s * 4 >= max) || step0 * 10;
  if (whole) step = Math.max(1, Math.round(step));
  const top = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = 0; v <= top + step / 2; v += step) ticks.push(v);
  return { top, ticks };
}

/** The frame of a chart: the SVG, its plot box and scales, and the y axis. */
function frame(width, yMax, yLabel, whole) {
  const box = { x: PAD.left, y: PAD.top, w: width - PAD.left - PAD.right, h: CHART_H - PAD.top - PAD.bottom };
  const { top, ticks } = yScale(yMax, whole);
  const root = svg("svg", { viewBox: "0 0 " + width + " " + CHART_H, width: "100%", role: "img",
    class: "chart-svg", preserveAspectRatio: "xMinYMin meet" });
  const y = (v) => box.y + box.h - (v / top) * box.h;
  for (const v of ticks) {
    root.append(svg("line", { class: "grid", x1: box.x, x2: box.x + box.w, y1: y(v), y2: y(v) }),
      svg("text", { class: "tick", x: box.x - 6, y: y(v) + 4, "text-anchor": "end" }, yLabel(v)));
  }
  return { root, box, y };
}

/** Local-time ticks along [from, to) (ms) on an x scale. */
function timeAxis(root, box, from, to, x) {
  const hours = (to - from) / 3600000;
  const fit = Math.max(2, Math.floor(box.w / 70));
  const step = [1, 2, 3, 6, 12, 24, 48].find((s) => hours / s <= fit) || 48;
  const d = new Date(from);
  d.setMinutes(0, 0, 0);
  while (d.getTime() < from || d.getHours() % Math.min(step, 24) !== 0) d.setHours(d.getHours() + 1);
  for (; d.getTime() < to; d.setHours(d.getHours() + step)) {
    const t = d.getTime();
    const label = d.getHours() === 0 ? localDay(t) : localTime(t);
    root.append(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: box.y, y2: box.y + box.h }),
      svg("text", { class: "tick", x: x(t), y: box.y + box.h + 16, "text-anchor": "middle" }, label));
  }
  root.append(svg("line", { class: "axis", x1: box.x, x2: box.x + box.w, y1: box.y + box.h, y2: box.y + box.h }));
}

/** A chart's box: title, a legend, the drawing (or why there is none), a readout for taps. */
function figure(id, title, legend, drawing, empty) {
  const readout = h("p", { class: "readout small muted", "aria-live": "polite" }, "\u00a0");
  const fig = h("figure", { class: "chart", id },
    h("figcaption", {}, h("h3", {}, title),
      legend.length ? h("ul", { class: "legend" }, legend.map(([name, colour]) =>
        h("li", {}, h("span", { class: "swatch", "data-colour": colour }), name))) : null),
    drawing || h("p", { class: "empty muted" }, empty),
    drawing ? readout : null);
  // Inline styles are refused by the page's CSP: colours go in as SVG
  // attributes, and a legend's swatch is a tiny SVG too.
  for (const sw of fig.querySelectorAll(".swatch")) {
    sw.append(svg("svg", { viewBox: "0 0 10 10", width: 10, height: 10 },
      svg("rect", { width: 10, height: 10, rx: 2, fill: sw.dataset.colour })));
  }
  if (drawing) {
    const show = (ev) => {
      const tip = ev.target.closest && ev.target.closest("[data-tip]");
      if (tip) readout.textContent = tip.dataset.tip;
    };
    drawing.addEventListener("pointerover", show);
    drawing.addEventListener("click", show);
  }
  return fig;
}

/** Per-bucket counts of several series, stacked as columns of at least 2 px
 * (a lone event in one minute of a day would vanish as an area). */
function columnsChart(id, title, s, points, series, unit, width) {
  const from = Date.parse(s.from), to = Date.parse(s.to), b = s.bucketSecs * 1000;
  const rows = points.filter((p) => series.some(([k]) => p[k] > 0));
  const total = rows.reduce((n, p) => n + series.reduce((m, [k]) => m + p[k], 0), 0);
  if (!rows.length) {
    const none = figure(id, title, [], null, "None in the last " + Math.round((to - from) / 3600000) + " h.");
    none.dataset.total = "0";
    return none;
  }
  const max = Math.max(...rows.map((p) => series.reduce((n, [k]) => n + p[k], 0)));
  const { root, box, y } = frame(width, max, compact, true);
  const x = (t) => box.x + ((t - from) / (to - from)) * box.w;
  timeAxis(root, box, from, to, x);
  const w = Math.max(2, (b / (to - from)) * box.w);
  for (const p of rows) {
    const t = Date.parse(p.t);
    let base = 0;
    const words = series.filter(([k]) => p[k]).map(([k, name]) => p[k] + " " + name).join(", ");
    for (const [k, , colour] of series) {
      if (!p[k]) continue;
      const y0 = y(base), y1 = y(base + p[k]);
      root.append(tipped(svg("rect", { class: "mark", x: x(t), y: y1, width: w, height: Math.max(1, y0 - y1), fill: colour }),
        localTime(t) + ": " + words + " " + unit));
      base += p[k];
    }
  }
  const fig = figure(id, title, series.map(([, name, colour]) => [name, colour]), root);
  fig.dataset.total = String(total);
  return fig;
}

/** The queue's depth as steps: each point holds until the next. */
function queueChart(s, width) {
  const from = Date.parse(s.from), to = Date.parse(s.to), b = s.bucketSecs * 1000;
  const pts = s.queueDepth || [];
  const title = "Queue depth";
  if (!pts.length) return figure("chart-queue", title, [], null, "No queue history.");
  const max = Math.max(...pts.map((p) => p.depth));
  const { root, box, y } = frame(width, max, compact, true);
  const x = (t) => box.x + ((Math.min(Math.max(t, from), to) - from) / (to - from)) * box.w;
  timeAxis(root, box, from, to, x);
  // A point is the depth at its bucket's end, held until the next point:
  // the step is drawn where the next point's bucket starts.
  let cur = pts[0].depth;
  let d = "M " + x(from) + " " + y(0) + " L " + x(from) + " " + y(cur);
  for (const p of pts.slice(1)) {
    const at = x(Date.parse(p.t));
    d += " L " + at + " " + y(cur) + " L " + at + " " + y(p.depth);
    cur = p.depth;
  }
  d += " L " + x(to) + " " + y(cur) + " L " + x(to) + " " + y(0) + " Z";
  root.append(svg("path", { class: "mark area", d, fill: "#e08a00", "fill-opacity": 0.25, stroke: "#e08a00", "stroke-width": 1.5 }));
  for (const p of pts) {
    const t = Date.parse(p.t) + b;
    root.append(tipped(svg("rect", { class: "hit", x: x(t) - 3, y: box.y, width: 6, height: box.h, fill: "transparent" }),
      localTime(t) + ": " + p.depth + " queued"));
  }
  const now = pts[pts.length - 1].depth;
  return figure("chart-queue", title + " (now " + now + ")", [["queued tasks", "#e08a00"]], root);
}

/** p50, p90 and p99 of turn durations per hour, as lines with points. */
function turnsChart(s, width) {
  const pts = s.turnDuration || [];
  const title = "Turn duration per hour";
  if (!pts.length) return figure("chart-turns", title, [], null, "No turn ended in this range.");
  const from = Date.parse(s.from), to = Date.parse(s.to);
  const { root, box, y } = frame(width, Math.max(...pts.map((p) => p.p99Ms)), duration);
  // An hour's point sits at its middle, kept inside the range the other
  // charts show (the first and the current hour stick out of it).
  const at = (t) => box.x + ((Math.min(Math.max(t, from), to) - from) / (to - from)) * box.w;
  const x = (t) => at(t + 1800000);
  timeAxis(root, box, from, to, at);
  const lines = [["p50Ms", "p50", "#2457c5"], ["p90Ms", "p90", "#7b1fa2"], ["p99Ms", "p99", "#b3261e"]];
  for (const [k, , colour] of lines) {
    const d = pts.map((p, i) => (i ? "L " : "M ") + x(Date.parse(p.t)) + " " + y(p[k])).join(" ");
    root.append(svg("path", { class: "mark line", d, fill: "none", stroke: colour, "stroke-width": 2 }));
  }
  for (const p of pts) {
    const t = Date.parse(p.t);
    const tip = localTime(t) + "–" + localTime(t + 3600000) + ": " + p.count + " turn" + (p.count === 1 ? "" : "s") +
      ", p50 " + duration(p.p50Ms) + ", p90 " + duration(p.p90Ms) + ", p99 " + duration(p.p99Ms);
    for (const [k, , colour] of lines) {
      root.append(tipped(svg("circle", { class: "mark dot", cx: x(t), cy: y(p[k]), r: 3.5, fill: colour }), tip));
    }
  }
  return figure("chart-turns", title, lines.map(([, name, colour]) => [name, colour]), root);
}

/** Tokens per UTC day, one stacked column per day, a colour per repository. */
function tokensChart(s, width) {
  const rows = (s.tokensByRepoDay || []).filter((r) => r.total > 0);
  const title = "Tokens per repository per day (UTC)";
  if (!rows.length) return figure("chart-tokens", title, [], null, "No tokens used in the last 14 days.");
  const last = Date.parse(s.to.slice(0, 10) + "T00:00:00Z");
  const days = [];
  for (let i = 13; i >= 0; i--) days.push(new Date(last - i * 86400000).toISOString().slice(0, 10));
  const byRepo = new Map();
  for (const r of rows) byRepo.set(r.repo, (byRepo.get(r.repo) || 0) + r.total);
  // The largest repositories get their own colour; the rest share one.
  const repos = [...byRepo.keys()].sort((a, b) => byRepo.get(b) - byRepo.get(a));
  const named = repos.slice(0, REPO_COLOURS.length - 1);
  const colourOf = (repo) => named.includes(repo) ? REPO_COLOURS[named.indexOf(repo)] : "#9aa3b2";
  const perDay = new Map(days.map((d) => [d, 0]));
  for (const r of rows) if (perDay.has(r.day)) perDay.set(r.day, perDay.get(r.day) + r.total);
  const { root, box, y } = frame(width, Math.max(...perDay.values()), compact, true);
  const slot = box.w / days.length;
  const fit = Math.max(1, Math.ceil(days.length / Math.max(2, Math.floor(box.w / 60))));
  days.forEach((day, i) => {
    const cx = box.x + slot * i;
    if ((days.length - 1 - i) % fit === 0) {
      root.append(svg("text", { class: "tick", x: cx + slot / 2, y: box.y + box.h + 16, "text-anchor": "middle" }, day.slice(5)));
    }
    let base = 0;
    for (const r of rows.filter((r) => r.day === day).sort((a, b) => byRepo.get(b.repo) - byRepo.get(a.repo))) {
      const y0 = y(base), y1 = y(base + r.total);
      root.append(tipped(svg("rect", { class: "mark", x: cx + slot * 0.15, y: y1, width: Math.max(2, slot * 0.7),
        height: Math.max(1, y0 - y1), fill: colourOf(r.repo) }),
        r.repo + " on " + day + ": " + r.total + " tokens (" + r.input + " in, " + r.cachedInput + " cached, " + r.output + " out)"));
      base += r.total;
    }
  });
  root.append(svg("line", { class: "axis", x1: box.x, x2: box.x + box.w, y1: box.y + box.h, y2: box.y + box.h }));
  const legend = named.map((r) => [r, colourOf(r)]);
  if (repos.length > named.length) legend.push([(repos.length - named.length) + " more", "#9aa3b2"]);
  return figure("chart-tokens", title, legend, root);
}

/** Draws every chart of the last document into the panel. */
function drawCharts() {
  const panel = charts.panel;
  const s = charts.stats;
  const head = h("h2", {}, "Activity");
  if (!s) return panel.replaceChildren(head, h("p", { class: "muted" }, "Waiting for the charts' data…"));
  // Every chart is as wide as the grid's column: measure one.
  const probe = panel.querySelector(".chart");
  const width = Math.max(260, Math.floor((probe && probe.clientWidth) || panel.clientWidth / 2 || 560));
  charts.width = width;
  const hours = Math.round((Date.parse(s.to) - Date.parse(s.from)) / 3600000);
  panel.replaceChildren(head, h("div", { class: "chart-grid" },
    columnsChart("chart-webhooks", "Webhooks per minute (" + hours + " h)", s, s.webhooks || [],
      [["accepted", "accepted", "#2457c5"], ["other", "duplicate, ignored or refused", "#9aa3b2"]], "webhooks", width),
    columnsChart("chart-tasks", "Tasks finished per minute (" + hours + " h)", s, s.tasksFinished || [],
      [["succeeded", "succeeded", "#2e7d32"], ["failed", "failed", "#b3261e"], ["other", "cancelled or not run", "#9aa3b2"]],
      "tasks", width),
    queueChart(s, width),
    turnsChart(s, width),
    tokensChart(s, width)));
}

/** The charts' panel for the overview: the same element every time, so a
 * re-render of the overview does not draw the charts again. */
function chartsPanel() {
  if (!charts.panel) {
    charts.panel = h("section", { class: "panel charts", id: "charts" });
    drawCharts();
    // Drawn again at the new width when the window (a phone turned) changes it.
    charts.observer = new ResizeObserver(() => {
      const probe = charts.panel.querySelector(".chart");
      const w = probe ? probe.clientWidth : 0;
      if (w > 0 && Math.abs(w - charts.width) > 8) drawCharts();
    });
    charts.observer.observe(charts.panel);
  }
  return charts.panel;
}

/** A new `stats` document (live event). */
function chartsUpdate(stats) {
  charts.stats = stats;
  if (charts.panel) drawCharts();
}
