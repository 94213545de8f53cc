// The lesson page: builds each scene's controls from /api/scenes, asks the
// Rust simulations for results as the reader moves them (debounced), draws
// the charts and runs the two quizzes.
//
// The seed and every control that differs from its default live in the
// address (`?seed=7&ack.crash_rate=0.02`), so a link reproduces a run; a
// value the page cannot use gets a visible note and the scene's default.
"use strict";

(function () {
  const L = window.Lesson;
  // Chart colours: each keeps at least 3:1 against the white panel (and the
  // bar track), which the browser test measures.
  const C = {
    accent: "#0f6e6e",
    loss: "#b4442c",
    dup: "#a86f1c",
    ok: "#2f7d4f",
    ink: "#1f2933",
    violet: "#6b5b95",
    col: "#4f918c",
  };
  const DEBOUNCE_MS = 180;
  const POINTS_PER_ANSWER = 20;
  const DEFAULT_SEED = 1;

  // ---------- formatting ----------
  const nf = new Intl.NumberFormat("en-US");
  const count = (n) => nf.format(Math.round(n));
  const signed = (n) => (n > 0 ? "+" : "") + count(n);
  function pct(share, decimals) {
    return (share * 100).toFixed(decimals === undefined ? 2 : decimals) + "%";
  }
  function rate(share) {
    const p = share * 100;
    for (let d = 0; d <= 4; d++) {
      if (Math.abs(Number(p.toFixed(d)) - p) < 1e-9) return p.toFixed(d) + "%";
    }
    return p.toPrecision(3) + "%";
  }
  function duration(s) {
    const units = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
    for (const [size, unit] of units) {
      if (s >= size || size === 1) {
        const v = Math.round((s / size) * 10) / 10;
        return `${Number.isInteger(v) ? v : v.toFixed(1)} ${unit}`;
      }
    }
    return `${s} s`;
  }
  function twoSignificant(v) {
    if (v <= 0) return 0;
    const p = Math.pow(10, Math.floor(Math.log10(v)) - 1);
    return Math.round(v / p) * p;
  }
  function choiceLabel(value) {
    return L.content.choiceLabels[value] || String(value).replace(/-/g, " ");
  }
  function formatParam(spec, value) {
    if (spec.type === "flag") return value ? "on" : "off";
    if (spec.type === "choice") return choiceLabel(value);
    if (spec.type === "real" && spec.percent) return rate(value);
    if (spec.name.endsWith("_s")) return duration(value);
    if (spec.type === "real") return String(Number(value.toPrecision(3)));
    return count(value);
  }

  // ---------- state ----------
  const state = {
    seed: DEFAULT_SEED,
    catalog: {},
    params: {},
    last: {},
    timers: {},
    aborts: {},
    crashPoint: null,
  };

  const $ = (sel, root) => (root || document).querySelector(sel);
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "html") node.innerHTML = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  // ---------- the address ----------
  // Reads `text` as a value of `spec`; null when it is not a valid one.
  function parseParam(spec, text) {
    if (spec.type === "flag") return text === "true" ? true : text === "false" ? false : null;
    if (spec.type === "choice") return spec.choices.includes(text) ? text : null;
    if (!/^-?[0-9]+(\.[0-9]+)?(e-?[0-9]+)?$/i.test(text)) return null;
    const v = Number(text);
    if (!Number.isFinite(v) || v < spec.min || v > spec.max) return null;
    if (spec.type === "count" && !Number.isInteger(v)) return null;
    return v;
  }

  function allowed(spec) {
    if (spec.type === "flag") return "true or false";
    if (spec.type === "choice") return spec.choices.join(", ");
    return `${spec.type === "count" ? "a whole number" : "a number"} from ${spec.min} to ${spec.max}`;
  }

  // Sorts the address's values into the scenes' parameters; everything it
  // cannot use becomes a note. Returns {seed, values: {scene: {name: v}}, notes}.
  function readAddress(catalog) {
    const q = new URLSearchParams(location.search);
    const out = { seed: DEFAULT_SEED, values: {}, notes: [] };
    for (const [key, text] of q) {
      if (key === "seed") {
        const v = /^[0-9]+$/.test(text) ? Number(text) : NaN;
        if (Number.isSafeInteger(v)) out.seed = v;
        else out.notes.push(`“seed=${text}” is not a whole number from 0 to ${Number.MAX_SAFE_INTEGER}; using seed ${DEFAULT_SEED}.`);
        continue;
      }
      const [scene, name] = key.split(".");
      const spec = catalog[scene] && catalog[scene].params.find((p) => p.name === name);
      if (!spec) {
        out.notes.push(`“${key}” is not a control of this lesson; it was ignored.`);
        continue;
      }
      const v = parseParam(spec, text);
      if (v === null) {
        out.notes.push(`“${key}=${text}” is not a valid ${spec.label} (${allowed(spec)}); the scene uses its default, ${formatParam(spec, spec.default)}.`);
      } else {
        (out.values[scene] = out.values[scene] || {})[name] = v;
      }
    }
    return out;
  }

  // Writes the seed and every control that differs from its default.
  function writeAddress() {
    const q = new URLSearchParams();
    q.set("seed", String(state.seed));
    for (const [scene, info] of Object.entries(state.catalog)) {
      for (const spec of info.params) {
        const v = state.params[scene] && state.params[scene][spec.name];
        if (v !== undefined && v !== spec.default) q.set(`${scene}.${spec.name}`, String(v));
      }
    }
    history.replaceState(null, "", `${location.pathname}?${q}${location.hash}`);
  }

  function showAddressNotes(notes) {
    const note = $("#url-note");
    note.replaceChildren(...(notes.length ? [h("strong", {}, "This link asked for values the page could not use. "), notes.join(" ")] : []));
  }

  // ---------- controls ----------
  function niceStep(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [5, 2, 1]) if (m * p <= v) return m * p;
    return p;
  }

  // A slider's position <-> the parameter's value.
  function scaleFor(spec) {
    if (spec.log) {
      const lower = spec.min > 0 ? spec.min : spec.max * 1e-4;
      const ratio = spec.max / lower;
      return {
        min: 0,
        max: 1000,
        step: 1,
        toValue(pos) {
          if (spec.min === 0 && Number(pos) === 0) return 0;
          let v = twoSignificant(lower * Math.pow(ratio, pos / 1000));
          if (spec.type === "count") v = Math.round(v);
          return Math.min(spec.max, Math.max(spec.min, v));
        },
        toPos(v) {
          if (v <= 0) return 0;
          return Math.round((1000 * Math.log(Math.max(v, lower) / lower)) / Math.log(ratio));
        },
      };
    }
    const step = spec.type === "count" ? 1 : niceStep((spec.max - spec.min) / 400);
    return {
      min: spec.min,
      max: spec.max,
      step,
      toValue(pos) {
        const v = Number(pos);
        return spec.type === "count" ? Math.round(v) : Number(v.toPrecision(6));
      },
      toPos: (v) => v,
    };
  }

  function slider(scene, spec, id, initial, set) {
    const scale = scaleFor(spec);
    const input = h("input", {
      type: "range", id, name: spec.name,
      min: scale.min, max: scale.max, step: scale.step,
      "aria-describedby": `${id}-help`,
    });
    input.value = scale.toPos(initial);
    input.addEventListener("input", () => {
      set(scale.toValue(input.value));
      schedule(scene);
    });
    return input;
  }

  // A radio group of buttons: one tab stop, arrow keys move the choice.
  function segmented(scene, spec, id, initial, set) {
    const group = h("div", { class: "segmented", role: "radiogroup", "aria-labelledby": `${id}-label`, id });
    const pick = (b, focus) => {
      for (const o of group.children) {
        o.setAttribute("aria-checked", String(o === b));
        o.tabIndex = o === b ? 0 : -1;
      }
      if (focus) b.focus();
      set(b.dataset.value);
      schedule(scene, 0);
    };
    for (const choice of spec.choices) {
      const b = h("button", { type: "button", role: "radio", "data-value": choice }, choiceLabel(choice));
      b.setAttribute("aria-checked", String(choice === initial));
      b.tabIndex = choice === initial ? 0 : -1;
      b.addEventListener("click", () => pick(b, false));
      group.append(b);
    }
    group.addEventListener("keydown", (e) => {
      const buttons = [...group.children];
      const i = buttons.indexOf(document.activeElement);
      if (i < 0) return;
      const last = buttons.length - 1;
      const to = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: last }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      pick(buttons[(to + buttons.length) % buttons.length], true);
    });
    return group;
  }

  function buildControl(scene, spec, initial) {
    const id = `ctl-${scene}-${spec.name}`;
    const valueText = h("output", { class: "ctl-value", for: id, id: `${id}-value`, "aria-hidden": "true" });
    const wrap = h("div", { class: `ctl ctl-${spec.type}` });
    let input = null;
    const set = (v) => {
      state.params[scene][spec.name] = v;
      const text = formatParam(spec, v);
      valueText.textContent = text;
      if (input && input.type === "range") input.setAttribute("aria-valuetext", text);
    };
    if (spec.type === "count" || spec.type === "real") {
      input = slider(scene, spec, id, initial, set);
      wrap.append(h("div", { class: "ctl-head" }, h("label", { for: id, class: "ctl-label" }, spec.label), valueText), input);
    } else if (spec.type === "choice") {
      const group = segmented(scene, spec, id, initial, set);
      wrap.append(h("div", { class: "ctl-head" }, h("span", { class: "ctl-label", id: `${id}-label` }, spec.label), valueText), group);
    } else {
      input = h("input", { type: "checkbox", id, name: spec.name, role: "switch", "aria-describedby": `${id}-help` });
      input.checked = initial;
      input.addEventListener("change", () => {
        set(input.checked);
        schedule(scene, 0);
      });
      wrap.append(h("div", { class: "ctl-head" }, h("label", { for: id, class: "ctl-label switch-label" }, input, h("span", {}, spec.label)), valueText));
    }
    set(initial);
    wrap.append(h("p", { class: "ctl-help", id: `${id}-help` }, spec.help));
    return wrap;
  }

  // ---------- computing ----------
  function schedule(scene, delay) {
    clearTimeout(state.timers[scene]);
    const section = sectionOf(scene);
    section.dataset.state = "pending";
    writeAddress();
    state.timers[scene] = setTimeout(() => compute(scene), delay === undefined ? DEBOUNCE_MS : delay);
  }

  function sectionOf(scene) {
    return document.querySelector(`section[data-scene="${scene}"]`);
  }

  async function compute(scene) {
    const section = sectionOf(scene);
    if (state.aborts[scene]) state.aborts[scene].abort();
    const ctl = new AbortController();
    state.aborts[scene] = ctl;
    const body = { seed: state.seed, params: { ...state.params[scene] } };
    section.dataset.state = "loading";
    const status = $(".status", section);
    try {
      const res = await fetch(`/api/sim/${scene}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: ctl.signal,
      });
      const data = await res.json();
      if (!res.ok) throw new Error(data.error || `HTTP ${res.status}`);
      state.last[scene] = data;
      render(scene, data);
      status.textContent = "";
      section.dataset.request = JSON.stringify(body);
      section.dataset.state = "ready";
    } catch (e) {
      if (e.name === "AbortError") return;
      status.textContent = `Could not compute: ${e.message}`;
      section.dataset.state = "error";
    }
  }

  function setFigure(id, value, text) {
    const node = document.getElementById(id);
    if (!node) return;
    node.dataset.value = String(value);
    $(".fig-value", node).textContent = text;
  }

  // ---------- renderers, one per scene ----------
  const renderers = {
    "ack"(o) {
      const [first, after, dedup] = o.strategies;
      setFigure("fig-ack-lost", first.lost_per_million, count(first.lost_per_million));
      setFigure("fig-ack-dup", after.duplicated_per_million, count(after.duplicated_per_million));
      const harmed = dedup.lost_per_million + dedup.duplicated_per_million;
      setFigure("fig-ack-dedup", harmed, count(harmed));
      return (host) =>
        L.charts.bars(
          host,
          o.strategies.map((s) => ({
            label: s.label,
            bars: [
              { label: "lost", value: s.lost_per_million, color: C.loss },
              { label: "done twice", value: s.duplicated_per_million, color: C.dup },
            ],
          })),
          {
            name: `Bar chart: messages lost and done twice per million, for each strategy; the model expects ${count(o.expected_per_million)} per million.`,
            format: (v) => count(v) + " /M",
            expected: o.expected_per_million,
            expectedLabel: `model ${count(o.expected_per_million)}`,
          }
        );
    },
    "key-lifetime"(o, p) {
      setFigure("fig-key-late", o.late_share, pct(o.late_share));
      setFigure("fig-key-model", o.expected_late_share, pct(o.expected_late_share));
      return (host) =>
        L.charts.line(
          host,
          [
            { label: "sampled", color: C.accent, points: o.series.map((s) => [s.key_lifetime_s, s.late_share]), width: 2.5 },
            { label: "model", color: C.ink, dash: true, points: o.series.map((s) => [s.key_lifetime_s, s.expected_late_share]), width: 1.5 },
          ],
          {
            name: `Line chart: the share of retries that arrive after their key expired, for key lifetimes from 1 second to 30 days; with your ${duration(p.key_lifetime_s)} keys, ${pct(o.late_share)} are late.`,
            xLog: true,
            xTicks: [[1, "1 s"], [60, "1 min"], [3600, "1 h"], [86400, "1 d"], [2592000, "30 d"]],
            yFormat: (v) => pct(v, 0),
            yMax: 1,
            markerX: p.key_lifetime_s,
            markerLabel: `your keys: ${duration(p.key_lifetime_s)} → ${pct(o.late_share)} late`,
          }
        );
    },
    "repeats"(o) {
      const c = o.chosen;
      setFigure("fig-rep-dups", c.duplicate_effects, count(c.duplicate_effects));
      setFigure("fig-rep-off", c.final_off, signed(c.final_off));
      const colors = { "increment": C.loss, "set": C.dup, "insert-if-new": C.ok, "versioned": C.violet };
      return (host) =>
        L.charts.line(
          host,
          o.by_operation.map((op) => ({
            label: choiceLabel(op.operation),
            color: colors[op.operation],
            width: op.operation === o.operation ? 3.5 : 1.5,
            points: op.series.map((v, i) => [o.checkpoints[i], v]),
          })),
          {
            name: `Line chart: how far the balance is off as ${count(o.messages)} messages arrive, for each kind of operation; ${choiceLabel(o.operation)} is drawn thick.`,
            xTicks: [0, 0.25, 0.5, 0.75, 1].map((f) => [Math.max(1, Math.round(o.messages * f)), count(o.messages * f)]),
            yFormat: (v) => signed(v),
          }
        );
    },
    "crash-points"(o) {
      const c = o.chosen;
      setFigure("fig-cp-dup", c.duplicate, `${c.duplicate} of ${c.points.length}`);
      setFigure("fig-cp-loss", c.loss, `${c.loss} of ${c.points.length}`);
      return (host) => host.replaceChildren(crashTimeline(o));
    },
    "ordering"(o, p) {
      setFigure("fig-ord-share", o.out_of_order_share, pct(o.out_of_order_share));
      setFigure("fig-ord-model", o.expected_share, pct(o.expected_share));
      return (host) => {
        const cols = h("div", { class: "chart-part" });
        const strip = h("div", { class: "strip", role: "list", "aria-label": "The first messages in the order they were consumed" });
        host.replaceChildren(cols, h("p", { class: "chart-caption" }, "The first 40 messages in the order consumers read them; highlighted ones overtook an earlier message:"), strip);
        L.charts.columns(
          cols,
          o.sweep.map((s) => ({ label: String(s.in_flight), value: s.out_of_order_share, model: s.expected_share, highlight: s.in_flight === p.in_flight })),
          {
            name: `Column chart: the share of messages consumed out of order for 1 to ${o.sweep.length} requests in flight, same seed; it stops growing at the round trip of ${p.round_trip_slots} slots.`,
            yFormat: (v) => pct(v, 1),
            xLabel: "requests in flight (same seed)",
            valueLabel: "sampled",
            modelLabel: "model",
            colors: { col: C.col, on: C.accent, dot: C.ink },
          }
        );
        let min = Infinity;
        const late = new Set();
        for (let i = o.first_consumed.length - 1; i >= 0; i--) {
          if (o.first_consumed[i] > min) late.add(i);
          min = Math.min(min, o.first_consumed[i]);
        }
        o.first_consumed.forEach((id, i) => strip.append(h("span", {
          class: late.has(i) ? "chip-n chip-late" : "chip-n",
          role: "listitem",
          "aria-label": late.has(i) ? `${id}, overtook an earlier message` : String(id),
        }, String(id))));
      };
    },
    "write-order"(o) {
      const [key, effect, tx] = o.designs;
      setFigure("fig-wo-lost", key.lost, count(key.lost));
      setFigure("fig-wo-twice", effect.charged_twice, count(effect.charged_twice));
      setFigure("fig-wo-tx", tx.lost + tx.charged_twice, count(tx.lost + tx.charged_twice));
      const colors = [C.loss, C.dup, C.ok];
      return (host) =>
        L.charts.line(
          host,
          o.designs.map((d, i) => ({
            // The same crashes hit every design, so the first two lines
            // coincide: draw the first wide under the dashed second.
            label: d.label,
            color: colors[i],
            width: [7, 2, 3][i],
            dash: i === 1,
            points: [[0, 0], ...d.series.map((v, j) => [o.checkpoints[j], v])],
          })),
          {
            name: `Line chart: requests harmed as ${count(o.requests)} requests arrive, for each order of writes.`,
            xTicks: [0, 0.25, 0.5, 0.75, 1].map((f) => [Math.round(o.requests * f), count(o.requests * f)]),
            yFormat: (v) => count(v),
          }
        );
    },
  };

  // Each crash point is a button that shows what a crash there does (no
  // hover-only tooltips: touch users can open them too).
  function crashTimeline(o) {
    const c = o.chosen;
    const root = h("div", { class: "timeline" });
    const detail = h("p", { class: "tl-detail", "aria-live": "polite" });
    // The chosen point survives a redraw (a resize) and a new run.
    const picked = state.crashPoint;
    const perMessage = c.steps.length;
    for (let m = 0; m < o.messages; m++) {
      const row = h("ol", { class: "tl-row", "aria-label": `Message ${m + 1}` });
      for (let s = 0; s < perMessage; s++) {
        const point = c.points[m * perMessage + s];
        const li = h("li", { class: "tl-step" }, h("span", { class: "tl-name" }, c.steps[s]));
        const verdict = { nothing: "nothing happens", duplicate: "done twice", loss: "lost" }[point.harm];
        const text = `Crash after “${point.step_label}”: ${verdict} (effects per message: ${point.effects.join(", ")}).`;
        const b = h("button", { type: "button", class: `tl-crash tl-${point.harm}`, "aria-label": `Crash after ${point.step_label}: ${verdict}`, "aria-pressed": "false" },
          h("span", { class: "tl-dot" }), h("span", { class: "tl-verdict" }, verdict));
        const show = () => {
          root.querySelectorAll(".tl-crash").forEach((x) => x.setAttribute("aria-pressed", String(x === b)));
          detail.textContent = text;
        };
        b.addEventListener("click", () => {
          state.crashPoint = m * perMessage + s;
          show();
        });
        if (picked === m * perMessage + s) queueMicrotask(show);
        li.append(b);
        row.append(li);
      }
      if (o.messages > 1) root.append(h("div", { class: "tl-msg" }, `message ${m + 1}`));
      root.append(row);
    }
    root.append(h("p", { class: "tl-hint" }, "Choose a crash point to see what a crash there does."), detail);
    const table = h("table", { class: "mini" },
      h("thead", {}, h("tr", {}, h("th", {}, "design"), h("th", {}, "crash points"), h("th", {}, "done twice"), h("th", {}, "lost"))),
      h("tbody", {}, ...o.designs.map((d) =>
        h("tr", { class: d.design === o.design ? "on" : "" },
          h("td", {}, d.label), h("td", {}, String(d.points.length)),
          h("td", { class: d.duplicate ? "dup" : "" }, String(d.duplicate)),
          h("td", { class: d.loss ? "loss" : "" }, String(d.loss))))));
    root.append(table);
    return root;
  }

  function render(scene, run) {
    const section = sectionOf(scene);
    const draw = renderers[scene](run.outcome, run.params);
    section._draw = draw;
    draw($(".chart", section));
    $(".reading", section).textContent = run.reading;
  }

  // ---------- building the scenes ----------
  // The model's text names parameters as the code does; show the labels the
  // sliders carry instead.
  function modelText(info) {
    let text = info.model;
    for (const p of [...info.params].sort((a, b) => b.name.length - a.name.length)) {
      text = text.replace(new RegExp(`\\b${p.name}\\b`, "g"), `“${p.label}”`);
    }
    return text;
  }

  function buildScene(info, initial) {
    const scene = info.scene;
    const text = L.content.scenes[scene];
    const section = sectionOf(scene);
    if (!section || !text) return;
    state.params[scene] = {};
    const controls = h("div", { class: "controls" }, ...info.params.map((p) =>
      buildControl(scene, p, initial[p.name] !== undefined ? initial[p.name] : p.default)));
    const figures = h("div", { class: "figures" }, ...text.figures.map((f) =>
      h("div", { class: `figure fig-${f.kind}`, id: f.id, "data-value": "" },
        h("span", { class: "fig-value" }, "…"), h("span", { class: "fig-label" }, f.label))));
    section.replaceChildren(
      h("p", { class: "kicker" }, text.kicker),
      h("h2", { id: `h-${scene}` }, text.title),
      ...text.intro.map((p) => h("p", { class: "intro", html: p })),
      h("div", { class: "panel" },
        h("p", { class: "try" }, text.tryThis),
        controls,
        figures,
        h("div", { class: "chart" }),
        h("p", { class: "reading", "aria-live": "polite" }),
        text.takeaway ? h("p", { class: "takeaway" }, text.takeaway) : null,
        h("p", { class: "status", role: "status" }),
        h("details", { class: "model" }, h("summary", {}, "The model"), h("p", {}, modelText(info)))));
    section.setAttribute("aria-labelledby", `h-${scene}`);
  }

  // ---------- term cards ----------
  function openTerm(id) {
    const term = L.content.terms.find((t) => t.id === id);
    if (!term) return;
    const dialog = $("#term-dialog");
    $("h3", dialog).textContent = term.name;
    $("p", dialog).textContent = term.text;
    if (!dialog.open) dialog.showModal();
  }

  function buildTerms() {
    const list = $("#terms");
    for (const t of L.content.terms) {
      list.append(h("button", { type: "button", class: "term", "data-term": t.id }, t.name));
    }
    document.addEventListener("click", (e) => {
      const link = e.target.closest("[data-term]");
      if (!link) return;
      e.preventDefault();
      openTerm(link.dataset.term);
    });
    $("#term-close").addEventListener("click", () => $("#term-dialog").close());
    $("#term-dialog").addEventListener("click", (e) => {
      if (e.target.id === "term-dialog") e.target.close();
    });
  }

  // ---------- quizzes ----------
  // XP counts each question once, the first time it is answered right, so
  // "Try again" can never push the total past its maximum.
  const quizzes = [];

  function showXp() {
    const max = quizzes.reduce((n, q) => n + q.questions.length * POINTS_PER_ANSWER, 0);
    const xp = quizzes.reduce((n, q) => n + q.earned.size * POINTS_PER_ANSWER, 0);
    $("#xp").textContent = `${xp} / ${max} XP`;
    $("#xp").dataset.value = String(xp);
    $("#xp").dataset.max = String(max);
  }

  function makeQuiz(root, questions, keysHint) {
    const quiz = { root, questions, index: 0, answered: false, score: 0, earned: new Set() };
    const hint = () => h("p", { class: "hint" },
      h("span", { class: "hint-keys" }, keysHint),
      h("span", { class: "hint-touch" }, "Tap an answer, then “Next”."));
    quiz.show = function () {
      const q = questions[quiz.index];
      quiz.answered = false;
      const opts = h("div", { class: "options", role: "group", "aria-labelledby": `${root.id}-q` },
        ...q.options.map((o, i) => h("button", { type: "button", class: "option", "data-index": i, onclick: () => quiz.answer(i) },
          h("kbd", { "aria-hidden": "true" }, String(i + 1)), h("span", {}, o))));
      root.replaceChildren(
        h("div", { class: "quiz-head" },
          h("span", { class: "quiz-count" }, `Question ${quiz.index + 1} of ${questions.length}`),
          h("span", { class: "quiz-score", "data-value": String(quiz.score) }, `${quiz.score} XP`)),
        h("p", { class: "question", id: `${root.id}-q`, tabindex: "-1" }, q.q),
        opts,
        h("div", { class: "feedback", "aria-live": "polite" }),
        h("div", { class: "quiz-foot" },
          hint(),
          h("button", { type: "button", class: "next", disabled: "", onclick: () => quiz.next() }, quiz.index + 1 < questions.length ? "Next →" : "Finish")));
      root.dataset.state = "asking";
    };
    quiz.answer = function (i) {
      const q = questions[quiz.index];
      if (quiz.answered || i < 0 || i >= q.options.length) return;
      quiz.answered = true;
      const right = i === q.answer;
      if (right) {
        quiz.score += POINTS_PER_ANSWER;
        quiz.earned.add(quiz.index);
        showXp();
      }
      root.querySelectorAll(".option").forEach((b, j) => {
        b.disabled = true;
        if (j === q.answer) b.classList.add("right");
        else if (j === i) b.classList.add("wrong");
      });
      const fb = $(".feedback", root);
      fb.replaceChildren(h("strong", {}, right ? `Right — +${POINTS_PER_ANSWER} XP. ` : `Not quite: “${q.options[q.answer]}”. `), q.why);
      fb.className = `feedback ${right ? "good" : "bad"}`;
      $(".quiz-score", root).textContent = `${quiz.score} XP`;
      $(".quiz-score", root).dataset.value = String(quiz.score);
      const next = $(".next", root);
      next.disabled = false;
      // The answered option is disabled now: keep the focus in the quiz.
      next.focus();
      root.dataset.state = right ? "right" : "wrong";
    };
    quiz.next = function () {
      if (!quiz.answered) return;
      if (quiz.index + 1 < questions.length) {
        quiz.index += 1;
        quiz.show();
        $(".question", root).focus();
        return;
      }
      const again = h("button", { type: "button", class: "next", onclick: () => {
        quiz.index = 0;
        quiz.score = 0;
        quiz.show();
        $(".question", root).focus();
      } }, "Try again");
      root.replaceChildren(
        h("p", { class: "question" }, `Done: ${quiz.score} of ${questions.length * POINTS_PER_ANSWER} XP.`),
        again);
      root.dataset.state = "done";
      again.focus();
    };
    quizzes.push(quiz);
    quiz.show();
    return quiz;
  }

  // The quiz a digit key answers: the one holding the focus, or, with
  // nothing focused, the one filling most of the window (at least half of
  // it, or of the quiz, is visible). Otherwise none.
  function quizForKey(target) {
    const inside = quizzes.find((q) => q.root.contains(target));
    if (inside) return inside;
    if (target && target !== document.body && target !== document.documentElement) return null;
    let best = null;
    let bestShare = 0.5;
    for (const q of quizzes) {
      const r = q.root.getBoundingClientRect();
      const seen = Math.min(r.bottom, window.innerHeight) - Math.max(r.top, 0);
      const share = seen / Math.min(r.height, window.innerHeight);
      if (share >= bestShare) {
        best = q;
        bestShare = share;
      }
    }
    return best;
  }

  // Digits answer the quiz in view; Enter is left to the focused button
  // (after an answer that is "Next"), so it never hijacks another control.
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || !/^[1-9]$/.test(e.key)) return;
    if ($("#term-dialog").open) return;
    const quiz = quizForKey(e.target);
    if (!quiz || quiz.root.dataset.state !== "asking") return;
    quiz.answer(Number(e.key) - 1);
    e.preventDefault();
  });

  // ---------- start ----------
  function buildStatic() {
    buildTerms();
    const g = L.content.guarantees;
    makeQuiz($("#quiz-guarantee"), L.content.quiz.map((q) => ({ ...q, options: g })), "Press 1–4 to answer, then Enter for the next question.");
    makeQuiz($("#quiz-interview"), L.content.interview, "Press 1–3 to answer, then Enter for the next question.");
    showXp();
    $("#who-cards").replaceChildren(...L.content.who.map((w) =>
      h("article", { class: "who" }, h("h3", {}, w.name), h("p", { class: "who-what" }, w.what), h("p", {}, w.text),
        h("p", { class: "who-source" }, "Source: ", h("a", { href: w.href, rel: "noopener" }, w.source)))));
    $("#next-list").replaceChildren(...L.content.next.map((n) => h("li", {},
      h("span", { html: n.html }), n.doc ? h("span", {}, " ", h("a", { href: n.doc }, n.docLabel), ".") : null)));
  }

  function wireSeed() {
    const seedInput = $("#seed");
    seedInput.value = String(state.seed);
    const reseed = (v) => {
      state.seed = v;
      seedInput.value = String(v);
      Object.keys(state.params).forEach((s) => schedule(s, 0));
    };
    seedInput.addEventListener("change", () => {
      const v = Number(seedInput.value);
      if (Number.isSafeInteger(v) && v >= 0) reseed(v);
      else seedInput.value = String(state.seed);
    });
    $("#reseed").addEventListener("click", () => reseed(Math.floor(Math.random() * 1e9)));
  }

  async function start() {
    buildStatic();
    try {
      const res = await fetch("/api/scenes");
      const catalog = await res.json();
      for (const info of catalog) state.catalog[info.scene] = info;
      const address = readAddress(state.catalog);
      state.seed = address.seed;
      showAddressNotes(address.notes);
      for (const info of catalog) buildScene(info, address.values[info.scene] || {});
      writeAddress();
      for (const info of catalog) compute(info.scene);
    } catch (e) {
      $("#load-error").textContent = `The simulations could not be loaded: ${e.message}`;
    }
    wireSeed();
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        document.querySelectorAll("section[data-scene]").forEach((s) => s._draw && s._draw($(".chart", s)));
      }, 120);
    });
    document.body.dataset.ready = "true";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
