// Renders a courier report (`courier chaos --report`, `courier bench`, the
// verifier's JSON) as tables and small charts. Any JSON works: scalars become
// key/value tables, objects sections, arrays of objects tables, arrays of
// numbers sparklines; a `{count, samples}` object (a verifier check) shows its
// count and samples. Used by the /report page (a file chosen by the user, read
// in the browser, never uploaded) and inlined into the HTML file that
// `render_report_html` writes next to a JSON report.
"use strict";

window.CourierReport = (function () {
  const NS = "http://www.w3.org/2000/svg";
  const DEPTH_MAX = 6;
  const ROWS_MAX = 500;

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function label(key) {
    return String(key).replace(/_/g, " ");
  }

  function isScalar(v) {
    return v === null || ["string", "number", "boolean"].includes(typeof v);
  }

  function isCheck(v) {
    return v && typeof v === "object" && !Array.isArray(v) &&
      typeof v.count === "number" && Array.isArray(v.samples) && Object.keys(v).length === 2;
  }

  function fmt(v) {
    if (v === null) return "–";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      return Math.abs(v) >= 100 ? v.toFixed(1) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3);
    }
    if (typeof v === "boolean") return v ? "yes" : "no";
    return String(v);
  }

  function cell(v) {
    if (isCheck(v)) {
      const td = h("td", {}, fmt(v.count));
      if (v.samples.length) td.append(h("div", { class: "note mono" }, v.samples.join(", ")));
      return td;
    }
    if (typeof v === "boolean") {
      return h("td", {}, h("span", { class: v ? "badge" : "badge bad" }, fmt(v)));
    }
    if (isScalar(v)) return h("td", { class: typeof v === "number" ? "num" : "" }, fmt(v));
    return h("td", { class: "mono wrap-cell" }, JSON.stringify(v).slice(0, 300));
  }

  function kvTable(entries) {
    return h("table", { class: "kv" }, h("tbody", {},
      ...entries.map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, label(k)), cell(v)))));
  }

  function sparkline(values) {
    const w = 320;
    const hgt = 48;
    const min = Math.min(...values);
    const max = Math.max(...values);
    const span = max - min || 1;
    const pts = values.map((v, i) =>
      `${((i / Math.max(1, values.length - 1)) * (w - 4) + 2).toFixed(1)},${(hgt - 2 - ((v - min) / span) * (hgt - 4)).toFixed(1)}`);
    const s = document.createElementNS(NS, "svg");
    s.setAttribute("width", w);
    s.setAttribute("height", hgt);
    s.setAttribute("class", "spark");
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "#0f6e6e");
    line.setAttribute("stroke-width", "1.5");
    s.append(line);
    const sorted = values.slice().sort((a, b) => a - b);
    const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
    return h("div", {}, s, h("p", { class: "note" },
      `${values.length} values · min ${fmt(min)} · median ${fmt(q(0.5))} · p99 ${fmt(q(0.99))} · max ${fmt(max)}`));
  }

  function objectTable(rows) {
    const keys = [];
    for (const r of rows.slice(0, ROWS_MAX)) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
    const table = h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, ...keys.map((k) => h("th", { scope: "col" }, label(k))))),
      h("tbody", {}, ...rows.slice(0, ROWS_MAX).map((r) => h("tr", {}, ...keys.map((k) => cell(r[k]))))));
    const wrap = h("div", { class: "table-wrap" }, table);
    if (rows.length > ROWS_MAX) wrap.append(h("p", { class: "note" }, `first ${ROWS_MAX} of ${rows.length} rows`));
    return wrap;
  }

  function section(key, value, depth) {
    const box = h("section", { class: depth === 0 ? "panel" : "" });
    box.append(h(depth === 0 ? "h2" : "h3", {}, label(key)));
    box.append(body(value, depth + 1));
    return box;
  }

  function body(value, depth) {
    if (depth > DEPTH_MAX) return h("pre", { class: "mono" }, JSON.stringify(value, null, 1).slice(0, 2000));
    if (isScalar(value) || isCheck(value)) return kvTable([["value", value]]);
    if (Array.isArray(value)) {
      if (value.length === 0) return h("p", { class: "empty" }, "empty");
      if (value.every((v) => typeof v === "number")) return sparkline(value);
      if (value.every((v) => v && typeof v === "object" && !Array.isArray(v))) return objectTable(value);
      if (value.every((v) => Array.isArray(v) && v.length === 2 && typeof v[0] === "string")) return kvTable(value);
      return h("ul", {}, ...value.slice(0, ROWS_MAX).map((v) => h("li", { class: "mono" }, isScalar(v) ? fmt(v) : JSON.stringify(v))));
    }
    const frag = h("div", {});
    const entries = Object.entries(value);
    const flat = entries.filter(([, v]) => isScalar(v) || isCheck(v));
    if (flat.length) frag.append(kvTable(flat));
    for (const [k, v] of entries) if (!(isScalar(v) || isCheck(v))) frag.append(section(k, v, depth));
    return frag;
  }

  // Draws `data` into `host`, replacing what was there.
  function render(host, data, name) {
    const parts = [];
    const head = h("div", { class: "report-head" });
    head.append(h("h1", {}, name ? `Report: ${name}` : "Report"));
    if (data && typeof data.passed === "boolean") {
      head.append(h("span", { class: data.passed ? "badge big" : "badge big bad", id: "verdict" }, data.passed ? "PASSED" : "FAILED"));
    }
    parts.push(head);
    if (data && typeof data === "object" && !Array.isArray(data)) {
      const entries = Object.entries(data);
      const flat = entries.filter(([, v]) => isScalar(v) || isCheck(v));
      if (flat.length) parts.push(h("section", { class: "panel" }, h("h2", {}, "summary"), kvTable(flat)));
      for (const [k, v] of entries) if (!(isScalar(v) || isCheck(v))) parts.push(section(k, v, 0));
    } else {
      parts.push(h("section", { class: "panel" }, body(data, 1)));
    }
    host.replaceChildren(...parts);
    host.dataset.rendered = "true";
  }

  // The /report page: a file input and a drop zone.
  function wirePage() {
    const input = document.getElementById("report-file");
    const out = document.getElementById("report");
    const drop = document.getElementById("drop");
    const msg = document.getElementById("report-status");
    if (!input || !out) return;
    const SIZE_MAX = 32 * 1024 * 1024;
    function load(file) {
      if (!file) return;
      if (file.size > SIZE_MAX) {
        msg.textContent = `${file.name} is larger than 32 MiB`;
        return;
      }
      file.text().then((text) => {
        try {
          render(out, JSON.parse(text), file.name);
          msg.textContent = "";
        } catch (e) {
          msg.textContent = `${file.name} is not JSON: ${e.message}`;
        }
      });
    }
    input.addEventListener("change", () => load(input.files[0]));
    if (drop) {
      drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
      drop.addEventListener("dragleave", () => drop.classList.remove("over"));
      drop.addEventListener("drop", (e) => {
        e.preventDefault();
        drop.classList.remove("over");
        load(e.dataTransfer.files[0]);
      });
    }
  }

  // A page with the data inlined (the HTML report file).
  function renderInline() {
    const data = document.getElementById("report-data");
    const out = document.getElementById("report");
    if (!data || !out) return;
    render(out, JSON.parse(data.textContent), out.dataset.name || "");
  }

  document.addEventListener("DOMContentLoaded", () => {
    wirePage();
    renderInline();
  });
  return { render };
})();
