// The lesson page: builds each scene's controls from /api/scenes, asks the
// Rust simulations for results as the reader moves them (debounced), draws
// the charts and runs the two quizzes.
"use strict";

(function () {
  const L = window.Lesson;
  const C = {
    accent: "#0f6e6e",
    loss: "#b4442c",
    dup: "#b7791f",
    ok: "#2f7d4f",
    ink: "#1f2933",
    muted: "#8a94a0",
    violet: "#6b5b95",
  };
  const DEBOUNCE_MS = 180;
  const POINTS_PER_ANSWER = 20;

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
  function formatParam(spec, value) {
    if (spec.type === "flag") return value ? "on" : "off";
    if (spec.type === "choice") return value;
    if (spec.type === "real" && spec.percent) return rate(value);
    if (spec.name.endsWith("_s")) return duration(value);
    if (spec.type === "real") return String(Number(value.toPrecision(3)));
    return count(value);
  }

  // ---------- state ----------
  const state = {
    seed: 1,
    catalog: {},
    params: {},
    last: {},
    timers: {},
    aborts: {},
    xp: 0,
    xpMax: 0,
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
          if (spec.min === 0 && pos === 0) return 0;
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

  function buildControl(scene, spec) {
    const id = `ctl-${scene}-${spec.name}`;
    const valueText = h("output", { class: "ctl-value", for: id, id: `${id}-value` });
    const wrap = h("div", { class: `ctl ctl-${spec.type}` });
    const label = h("label", { for: id, class: "ctl-label", title: spec.help }, spec.label);
    const set = (v) => {
      state.params[scene][spec.name] = v;
      valueText.textContent = formatParam(spec, v);
    };
    if (spec.type === "count" || spec.type === "real") {
      const scale = scaleFor(spec);
      const input = h("input", {
        type: "range",
        id,
        name: spec.name,
        min: scale.min,
        max: scale.max,
        step: scale.step,
        "aria-describedby": `${id}-help`,
      });
      input.value = scale.toPos(spec.default);
      input.addEventListener("input", () => {
        set(scale.toValue(input.value));
        schedule(scene);
      });
      set(spec.default);
      wrap.append(h("div", { class: "ctl-head" }, label, valueText), input);
    } else if (spec.type === "choice") {
      const group = h("div", { class: "segmented", role: "radiogroup", "aria-label": spec.label, id });
      for (const choice of spec.choices) {
        const b = h("button", { type: "button", role: "radio", "data-value": choice }, choice);
        b.addEventListener("click", () => {
          for (const o of group.children) o.setAttribute("aria-checked", String(o === b));
          set(choice);
          schedule(scene, 0);
        });
        b.setAttribute("aria-checked", String(choice === spec.default));
        group.append(b);
      }
      set(spec.default);
      wrap.append(h("div", { class: "ctl-head" }, h("span", { class: "ctl-label" }, spec.label), valueText), group);
    } else {
      const input = h("input", { type: "checkbox", id, name: spec.name, role: "switch" });
      input.checked = spec.default;
      input.addEventListener("change", () => {
        set(input.checked);
        schedule(scene, 0);
      });
      set(spec.default);
      wrap.append(h("div", { class: "ctl-head" }, h("label", { for: id, class: "ctl-label switch-label" }, input, h("span", {}, spec.label)), valueText));
    }
    wrap.append(h("p", { class: "ctl-help", id: `${id}-help` }, spec.help));
    return wrap;
  }

  // ---------- computing ----------
  function schedule(scene, delay) {
    clearTimeout(state.timers[scene]);
    const section = sectionOf(scene);
    section.dataset.state = "pending";
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
            label: op.operation,
            color: colors[op.operation],
            width: op.operation === o.operation ? 3 : 1.5,
            faded: op.operation !== o.operation,
            points: op.series.map((v, i) => [o.checkpoints[i], v]),
          })),
          {
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
        const strip = h("div", { class: "strip", "aria-label": "The first messages in the order they were consumed" });
        host.replaceChildren(cols, h("p", { class: "chart-caption" }, "The first 40 messages in the order consumers read them; highlighted ones overtook an earlier message:"), strip);
        L.charts.columns(
          cols,
          o.sweep.map((s) => ({ label: String(s.in_flight), value: s.out_of_order_share, model: s.expected_share, highlight: s.in_flight === p.in_flight })),
          { yFormat: (v) => pct(v, 1), xLabel: "requests in flight (same seed)", valueLabel: "sampled", modelLabel: "model" }
        );
        let min = Infinity;
        const late = new Set();
        for (let i = o.first_consumed.length - 1; i >= 0; i--) {
          if (o.first_consumed[i] > min) late.add(i);
          min = Math.min(min, o.first_consumed[i]);
        }
        o.first_consumed.forEach((id, i) => strip.append(h("span", { class: late.has(i) ? "chip-n chip-late" : "chip-n" }, String(id))));
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
            // coincide: draw the first wide and pale under the second.
            label: d.label,
            color: colors[i],
            width: [7, 2, 3][i],
            faded: i === 0,
            dash: i === 1,
            points: [[0, 0], ...d.series.map((v, j) => [o.checkpoints[j], v])],
          })),
          {
            xTicks: [0, 0.25, 0.5, 0.75, 1].map((f) => [Math.round(o.requests * f), count(o.requests * f)]),
            yFormat: (v) => count(v),
          }
        );
    },
  };

  function crashTimeline(o) {
    const c = o.chosen;
    const root = h("div", { class: "timeline" });
    const perMessage = c.steps.length;
    for (let m = 0; m < o.messages; m++) {
      const row = h("ol", { class: "tl-row", "aria-label": `Message ${m + 1}` });
      for (let s = 0; s < perMessage; s++) {
        const point = c.points[m * perMessage + s];
        const li = h("li", { class: "tl-step" }, h("span", { class: "tl-name" }, c.steps[s]));
        const verdict = { nothing: "nothing happens", duplicate: "done twice", loss: "lost" }[point.harm];
        li.append(
          h("span", {
            class: `tl-crash tl-${point.harm}`,
            title: `Crash after “${point.step_label}”: ${verdict} (effects per message: ${point.effects.join(", ")})`,
          }, h("span", { class: "tl-dot" }), h("span", { class: "tl-verdict" }, verdict))
        );
        row.append(li);
      }
      if (o.messages > 1) root.append(h("div", { class: "tl-msg" }, `message ${m + 1}`));
      root.append(row);
    }
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
  function buildScene(info) {
    const scene = info.scene;
    const text = L.content.scenes[scene];
    const section = sectionOf(scene);
    if (!section || !text) return;
    state.params[scene] = {};
    const controls = h("div", { class: "controls" }, ...info.params.map((p) => buildControl(scene, p)));
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
        h("div", { class: "chart", "aria-live": "polite" }),
        h("p", { class: "reading", "aria-live": "polite" }),
        h("p", { class: "status", role: "status" }),
        h("details", { class: "model" }, h("summary", {}, "The model"), h("p", {}, info.model))));
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
  const quizzes = [];
  let activeQuiz = null;

  function addXp(points) {
    state.xp += points;
    $("#xp").textContent = `${state.xp} / ${state.xpMax} XP`;
    $("#xp").dataset.value = String(state.xp);
  }

  function makeQuiz(root, questions, hint) {
    const quiz = { root, questions, index: 0, answered: false, score: 0 };
    state.xpMax += questions.length * POINTS_PER_ANSWER;
    quiz.show = function () {
      const q = questions[quiz.index];
      quiz.answered = false;
      const opts = h("div", { class: "options", role: "group", "aria-label": "Answers" },
        ...q.options.map((o, i) => h("button", { type: "button", class: "option", "data-index": i, onclick: () => quiz.answer(i) },
          h("kbd", {}, String(i + 1)), h("span", {}, o))));
      root.replaceChildren(
        h("div", { class: "quiz-head" },
          h("span", { class: "quiz-count" }, `Question ${quiz.index + 1} of ${questions.length}`),
          h("span", { class: "quiz-score", "data-value": String(quiz.score) }, `${quiz.score} XP`)),
        h("p", { class: "question" }, q.q),
        opts,
        h("div", { class: "feedback", "aria-live": "polite" }),
        h("div", { class: "quiz-foot" },
          h("p", { class: "hint" }, hint),
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
        addXp(POINTS_PER_ANSWER);
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
      $(".next", root).disabled = false;
      root.dataset.state = right ? "right" : "wrong";
    };
    quiz.next = function () {
      if (!quiz.answered) return;
      if (quiz.index + 1 < questions.length) {
        quiz.index += 1;
        quiz.show();
      } else {
        root.replaceChildren(
          h("p", { class: "question" }, `Done: ${quiz.score} of ${questions.length * POINTS_PER_ANSWER} XP.`),
          h("button", { type: "button", class: "next", onclick: () => { quiz.index = 0; quiz.score = 0; quiz.show(); } }, "Try again"));
        root.dataset.state = "done";
      }
    };
    root.addEventListener("pointerdown", () => (activeQuiz = quiz));
    root.addEventListener("focusin", () => (activeQuiz = quiz));
    quizzes.push(quiz);
    quiz.show();
    return quiz;
  }

  function watchQuizzes() {
    if (!("IntersectionObserver" in window)) return;
    const ratios = new Map();
    const io = new IntersectionObserver((entries) => {
      for (const e of entries) ratios.set(e.target, e.intersectionRatio);
      let best = null;
      let bestRatio = 0.25;
      for (const q of quizzes) {
        const r = ratios.get(q.root) || 0;
        if (r > bestRatio) {
          best = q;
          bestRatio = r;
        }
      }
      if (best) activeQuiz = best;
    }, { threshold: [0, 0.25, 0.5, 0.75, 1] });
    quizzes.forEach((q) => io.observe(q.root));
  }

  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
    if ($("#term-dialog").open) return;
    const quiz = activeQuiz;
    if (!quiz || quiz.root.dataset.state === "done") return;
    if (/^[1-9]$/.test(e.key)) {
      quiz.answer(Number(e.key) - 1);
      e.preventDefault();
    } else if (e.key === "Enter" && quiz.answered) {
      quiz.next();
      e.preventDefault();
    }
  });

  // ---------- start ----------
  async function start() {
    buildTerms();
    const g = L.content.guarantees;
    makeQuiz($("#quiz-guarantee"), L.content.quiz.map((q) => ({ ...q, options: g })), "Press 1–4 to answer, Enter for the next question.");
    makeQuiz($("#quiz-interview"), L.content.interview, "Press 1–3 to answer, Enter for the next question.");
    activeQuiz = quizzes[0];
    watchQuizzes();
    addXp(0);
    $("#who-cards").replaceChildren(...L.content.who.map((w) =>
      h("article", { class: "who" }, h("h3", {}, w.name), h("p", { class: "who-what" }, w.what), h("p", {}, w.text))));
    $("#next-list").replaceChildren(...L.content.next.map((n) => h("li", { html: n })));

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

    try {
      const res = await fetch("/api/scenes");
      const catalog = await res.json();
      for (const info of catalog) {
        state.catalog[info.scene] = info;
        buildScene(info);
      }
      for (const info of catalog) compute(info.scene);
    } catch (e) {
      $("#load-error").textContent = `The simulations could not be loaded: ${e.message}`;
    }
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
