// Small inline-SVG charts, drawn at the element's current width so text stays
// readable on a phone. No libraries: lines, bars and axes by hand.
//
// Every chart is named (`opts.name`, read out by screen readers), its marks
// keep at least 3:1 contrast with the panel (the colours come from app.js and
// style.css; the browser test measures them), and no label is allowed past
// the SVG's edges: `keepInside` moves any that would be clipped.
"use strict";

window.Lesson = window.Lesson || {};

(function () {
  const NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Draws into `host`: an HTML legend (which wraps on narrow screens) and an
  // SVG as wide as the host, named for assistive technology.
  function frame(host, height, legendItems, name) {
    const width = Math.max(200, Math.floor(host.clientWidth || 600));
    const svg = el("svg", {
      viewBox: `0 0 ${width} ${height}`,
      width: width,
      height: height,
      role: "img",
      "aria-label": name || "chart",
      class: "chart-svg",
    });
    svg.appendChild(el("title", {}, name || "chart"));
    const parts = [];
    if (legendItems && legendItems.length) parts.push(legend(legendItems));
    parts.push(svg);
    host.replaceChildren(...parts);
    return { svg, width, height };
  }

  // The rendered width of a label (an estimate when the SVG is not laid out).
  function textWidth(node) {
    try {
      const w = node.getComputedTextLength();
      if (w > 0) return w;
    } catch (_) {
      // Not rendered (yet): fall back to the estimate.
    }
    return node.textContent.length * 6.8;
  }

  // Moves every label that would be clipped back inside the SVG.
  function keepInside(svg, width) {
    for (const t of svg.querySelectorAll("text")) {
      let box;
      try {
        box = t.getBBox();
      } catch (_) {
        continue;
      }
      const x = Number(t.getAttribute("x"));
      if (box.x < 1) t.setAttribute("x", String(x + (1 - box.x)));
      else if (box.x + box.width > width - 1) t.setAttribute("x", String(x - (box.x + box.width - (width - 1))));
    }
  }

  // Rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function legend(items) {
    const box = document.createElement("div");
    box.className = "chart-legend";
    box.setAttribute("aria-hidden", "true");
    for (const it of items) {
      const item = document.createElement("span");
      item.className = "legend-item";
      const swatch = document.createElement("span");
      swatch.className = it.dash ? "swatch swatch-dash" : it.dot ? "swatch swatch-dot" : "swatch";
      swatch.style.setProperty("--c", it.color);
      item.append(swatch, document.createTextNode(it.label));
      box.append(item);
    }
    return box;
  }

  // A label beside a marker line at x, on whichever side has room; split in
  // two lines at " → " when one line does not fit.
  function markerLabel(svg, x, y, text, left, right) {
    const node = el("text", { x: x + 5, y, class: "marker-label" }, text);
    svg.appendChild(node);
    const one = textWidth(node);
    const roomRight = right - (x + 5);
    const roomLeft = x - 5 - left;
    if (one <= roomRight) return;
    if (one <= roomLeft) {
      node.setAttribute("x", x - 5);
      node.setAttribute("text-anchor", "end");
      return;
    }
    const parts = text.split(" → ");
    if (parts.length === 2) {
      node.textContent = "";
      node.appendChild(el("tspan", { x: 0, dy: 0 }, parts[0]));
      node.appendChild(el("tspan", { x: 0, dy: 14 }, "→ " + parts[1]));
    }
    const w = textWidth(node) || one;
    const wide = Math.max(...[...node.querySelectorAll("tspan")].map(textWidth), 0) || w;
    const goRight = roomRight >= roomLeft;
    const start = goRight ? Math.min(x + 5, right - wide) : Math.max(left, x - 5 - wide);
    for (const span of node.querySelectorAll("tspan")) span.setAttribute("x", start);
    node.setAttribute("x", start);
  }

  // series: [{label, color, points: [[x, y], ...], dash, width}]
  // opts: {name, xLog, xTicks: [[value, label]], yFormat, yMax, markerX, markerLabel, height}
  function line(host, series, opts) {
    const height = opts.height || 240;
    const items = series.filter((s) => s.label).map((s) => ({ label: s.label, color: s.color, dash: s.dash }));
    const { svg, width } = frame(host, height, items, opts.name);
    const all = series.flatMap((s) => s.points);
    if (all.length === 0) return;
    const ys = all.map((p) => p[1]);
    const yMin = Math.min(0, ...ys);
    const yMax = opts.yMax !== undefined ? opts.yMax : niceMax(Math.max(...ys));
    const top = yMax > 0 ? yMax : 1;
    const labelLen = Math.max(opts.yFormat(top).length, opts.yFormat(yMin).length);
    const m = { l: 16 + labelLen * 7, r: 22, t: opts.markerLabel ? 34 : 12, b: 34 };
    const w = width - m.l - m.r;
    const h = height - m.t - m.b;
    const xs = all.map((p) => p[0]);
    const tx = opts.xLog ? (v) => Math.log10(v) : (v) => v;
    const x0 = tx(Math.min(...xs));
    const x1 = tx(Math.max(...xs));
    const sx = (v) => m.l + (x1 === x0 ? w / 2 : ((tx(v) - x0) / (x1 - x0)) * w);
    const sy = (v) => m.t + h - ((v - yMin) / (top - yMin)) * h;

    // Grid and y axis.
    for (let i = 0; i <= 4; i++) {
      const v = yMin + ((top - yMin) * i) / 4;
      const y = sy(v);
      svg.appendChild(el("line", { x1: m.l, x2: m.l + w, y1: y, y2: y, class: i === 0 ? "axis" : "grid" }));
      svg.appendChild(el("text", { x: m.l - 8, y: y + 4, class: "tick", "text-anchor": "end" }, opts.yFormat(v)));
    }
    if (yMin < 0) {
      svg.appendChild(el("line", { x1: m.l, x2: m.l + w, y1: sy(0), y2: sy(0), class: "axis" }));
    }
    xTicks(svg, (opts.xTicks || []).filter(([v]) => sx(v) >= m.l - 1 && sx(v) <= m.l + w + 1), sx, m, w, h);
    if (opts.markerX !== undefined) {
      const x = sx(opts.markerX);
      svg.appendChild(el("line", { x1: x, x2: x, y1: m.t - 4, y2: m.t + h, class: "marker" }));
      if (opts.markerLabel) markerLabel(svg, x, 12, opts.markerLabel, 2, width - 2);
    }
    for (const s of series) {
      const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      svg.appendChild(el("path", {
        d,
        fill: "none",
        stroke: s.color,
        "stroke-width": s.width || 2,
        "stroke-dasharray": s.dash ? "5 4" : "none",
        "stroke-linejoin": "round",
        class: "mark",
      }));
    }
    keepInside(svg, width);
  }

  // X ticks, thinned so labels never overlap on a narrow screen (the last
  // one always stays).
  function xTicks(svg, ticks, sx, m, w, h) {
    const anchorAt = (x) => (x > m.l + w - 24 ? "end" : x < m.l + 24 ? "start" : "middle");
    const extent = (x, label) => {
      const lw = label.length * 6.6;
      const a = anchorAt(x);
      return a === "end" ? [x - lw, x] : a === "start" ? [x, x + lw] : [x - lw / 2, x + lw / 2];
    };
    const kept = [];
    for (let i = ticks.length - 1; i >= 0; i--) {
      const x = sx(ticks[i][0]);
      const [, right] = extent(x, ticks[i][1]);
      const last = kept[kept.length - 1];
      if (!last || right + 8 <= extent(sx(last[0]), last[1])[0]) kept.push(ticks[i]);
    }
    kept.reverse();
    for (const [v, label] of kept) {
      const x = sx(v);
      svg.appendChild(el("line", { x1: x, x2: x, y1: m.t + h, y2: m.t + h + 4, class: "axis" }));
      svg.appendChild(el("text", { x: x, y: m.t + h + 18, class: "tick", "text-anchor": anchorAt(x) }, label));
    }
  }

  // groups: [{label, bars: [{label, value, color}]}]; horizontal bars.
  // opts: {name, format, max, expected, expectedLabel}
  function bars(host, groups, opts) {
    const barH = 14;
    const gap = 4;
    const groupGap = 16;
    const rows = groups.reduce((n, g) => n + g.bars.length, 0);
    const height = 30 + rows * (barH + gap) + groups.length * (groupGap + 16);
    const { svg, width } = frame(host, height, null, opts.name);
    // Room on the right for the longest value label, measured.
    const probe = el("text", { x: 0, y: -10, class: "bar-value" }, "");
    svg.appendChild(probe);
    let valueW = 0;
    for (const g of groups) for (const b of g.bars) {
      probe.textContent = opts.format(b.value);
      valueW = Math.max(valueW, textWidth(probe));
    }
    probe.remove();
    const labelW = Math.min(190, Math.floor(width * 0.3));
    const m = { l: labelW, r: Math.ceil(valueW) + 12, t: 26 };
    const w = Math.max(20, width - m.l - m.r);
    const max = opts.max !== undefined ? opts.max : niceMax(Math.max(...groups.flatMap((g) => g.bars.map((b) => b.value))));
    let y = m.t;
    for (const g of groups) {
      svg.appendChild(el("text", { x: 0, y: y + 11, class: "bar-group" }, g.label));
      y += 16;
      for (const b of g.bars) {
        const bw = max > 0 ? Math.max(b.value > 0 ? 2 : 0, (b.value / max) * w) : 0;
        svg.appendChild(el("text", { x: 8, y: y + barH - 3, class: "tick" }, b.label));
        svg.appendChild(el("rect", { x: m.l, y, width: w, height: barH, class: "bar-track", rx: 3 }));
        svg.appendChild(el("rect", { x: m.l, y, width: bw, height: barH, fill: b.color, rx: 3, class: "mark mark-on-track" }));
        svg.appendChild(el("text", { x: m.l + bw + 6, y: y + barH - 3, class: "bar-value" }, opts.format(b.value)));
        y += barH + gap;
      }
      y += groupGap;
    }
    if (opts.expected !== undefined && max > 0) {
      const x = m.l + (opts.expected / max) * w;
      svg.appendChild(el("line", { x1: x, x2: x, y1: m.t - 8, y2: y - groupGap, class: "marker" }));
      svg.appendChild(el("text", { x: x, y: m.t - 12, class: "marker-label", "text-anchor": "middle" }, opts.expectedLabel));
    }
    keepInside(svg, width);
  }

  // Vertical bars with a model dot on each: [{label, value, model, highlight}].
  // opts: {name, yFormat, xLabel, valueLabel, modelLabel, colors: {col, on, dot}}
  function columns(host, items, opts) {
    const height = opts.height || 210;
    const { svg, width } = frame(host, height, [
      { label: opts.valueLabel, color: opts.colors.col },
      { label: opts.modelLabel, color: opts.colors.dot, dot: true },
    ], opts.name);
    const m = { l: 52, r: 8, t: 12, b: 40 };
    const w = width - m.l - m.r;
    const h = height - m.t - m.b;
    const max = niceMax(Math.max(...items.map((i) => Math.max(i.value, i.model || 0)), 1e-9));
    const sy = (v) => m.t + h - (v / max) * h;
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4;
      svg.appendChild(el("line", { x1: m.l, x2: m.l + w, y1: sy(v), y2: sy(v), class: i === 0 ? "axis" : "grid" }));
      svg.appendChild(el("text", { x: m.l - 8, y: sy(v) + 4, class: "tick", "text-anchor": "end" }, opts.yFormat(v)));
    }
    const slot = w / items.length;
    // On a narrow chart, label every other column (and the chosen one).
    const every = slot < 18 ? 2 : 1;
    items.forEach((it, i) => {
      const x = m.l + i * slot + slot * 0.15;
      const bw = slot * 0.7;
      svg.appendChild(el("rect", {
        x, y: sy(it.value), width: bw, height: Math.max(0, m.t + h - sy(it.value)),
        fill: it.highlight ? opts.colors.on : opts.colors.col, class: it.highlight ? "mark col-on" : "mark", rx: 2,
      }));
      if (it.model !== undefined) {
        svg.appendChild(el("circle", { cx: x + bw / 2, cy: sy(it.model), r: 3.5, fill: opts.colors.dot, class: "mark model-dot" }));
      }
      if (it.highlight || i % every === 0) {
        svg.appendChild(el("text", { x: x + bw / 2, y: m.t + h + 16, class: it.highlight ? "tick tick-on" : "tick", "text-anchor": "middle" }, it.label));
      }
    });
    svg.appendChild(el("text", { x: m.l + w / 2, y: height - 6, class: "tick", "text-anchor": "middle" }, opts.xLabel));
    keepInside(svg, width);
  }

  window.Lesson.charts = { line, bars, columns, niceMax };
})();
