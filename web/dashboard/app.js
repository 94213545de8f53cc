// The live dashboard of `courier serve`: it polls GET /v1/ops/snapshot (the
// server's latest database sample; the server reads the database once per
// interval whatever the number of viewers) and redraws. The Action panel
// reads one action (GET /v1/actions/{id}) and, after an in-page
// confirmation, calls the API's cancel and re-drive routes, which decide
// whether the page's token may; the Held unknown panel calls the resolve
// route the same way. The Store settings panel lists the snapshot's
// configured stores and reads one provider gate (GET /v1/providers/{name}).
// When the server has an API token, the page
// sends it as a bearer token; it is kept in this browser's localStorage.
// Text from the server is set with textContent.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  // ActionState::ALL, in the order of an action's life (a test of
  // dashboard.rs keeps the two equal).
  const STATES = ["scheduled", "pending", "claimed", "dispatched", "done", "failed", "cancelled", "expired", "unknown"];
  const COLORS = {
    scheduled: "#6b46c1",
    pending: "#8a94a0",
    claimed: "#b7791f",
    dispatched: "#2b6cb0",
    done: "#2f7d4f",
    failed: "#b4442c",
    cancelled: "#4a5568",
    expired: "#b83280",
    unknown: "#c05621",
  };
  const CANCELLABLE = ["scheduled", "pending"];
  const TOKEN_KEY = "courier.apiToken";
  const POLL_MIN_MS = 1000;

  let token = "";
  try {
    token = localStorage.getItem(TOKEN_KEY) || "";
  } catch (e) {
    token = "";
  }
  let sort = { key: "load", dir: "desc" };
  let last = null;
  let timer = null;
  let busy = false;
  window.__dashboardErrors = [];
  window.addEventListener("error", (e) => window.__dashboardErrors.push(String(e.message)));

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmtInt(n) {
    return Number(n || 0).toLocaleString("en-US");
  }

  function fmtSecs(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    const a = Math.abs(s);
    const sign = s < 0 ? "−" : "";
    if (a < 1) return sign + Math.round(a * 1000) + " ms";
    if (a < 90) return sign + a.toFixed(1) + " s";
    if (a < 5400) return sign + (a / 60).toFixed(1) + " min";
    if (a < 172800) return sign + (a / 3600).toFixed(1) + " h";
    return sign + (a / 86400).toFixed(1) + " d";
  }

  function setStatus(text, state) {
    const s = document.getElementById("status");
    s.textContent = text;
    s.dataset.state = state;
  }

  function td(value, cls) {
    return h("td", { class: cls }, value);
  }

  function emptyRow(tbody, cols, text) {
    tbody.replaceChildren(h("tr", {}, h("td", { colspan: cols, class: "empty" }, text)));
  }

  // Counts by state, plus the alert figures.
  function renderCards(data) {
    const snap = data.snapshot;
    const host = document.getElementById("cards");
    const cards = STATES.map((st) => {
      const n = (snap.by_state.find((p) => p[0] === st) || [st, 0])[1];
      const held = st === "unknown" && n > 0;
      const c = h("div", { class: "card" + (held ? " alert" : ""), dataset: { state: st, value: n } },
        h("div", { class: "k" }, st), h("div", { class: "v" }, fmtInt(n)));
      c.style.setProperty("--c", COLORS[st]);
      return c;
    });
    const alert = snap.intents_older_than_alert;
    const fenced = eventCount(snap, "fenced");
    const backward = eventCount(snap, "backward");
    cards.push(h("div", { class: "card" + (alert > 0 ? " alert" : ""), dataset: { value: alert } },
      h("div", { class: "k" }, "intents past alert"), h("div", { class: "v" }, fmtInt(alert))));
    cards.push(h("div", { class: "card", dataset: { value: fenced } },
      h("div", { class: "k" }, "fenced writes"), h("div", { class: "v" }, fmtInt(fenced))));
    cards.push(h("div", { class: "card", dataset: { value: backward } },
      h("div", { class: "k" }, "backward reports"), h("div", { class: "v" }, fmtInt(backward))));
    host.replaceChildren(...cards);
  }

  function eventCount(snap, kind) {
    const p = snap.event_counts.find((e) => e[0] === kind);
    return p ? p[1] : 0;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // Lines of actions by state over the kept history, drawn at the host's width.
  function renderChart(history) {
    const host = document.getElementById("chart");
    const width = Math.max(280, Math.floor(host.clientWidth || 800));
    const height = 240;
    const pad = { l: 52, r: 14, t: 10, b: 26 };
    // A state a point lacks is drawn at 0 rather than breaking the chart
    // (metrics::HistoryPoint should name every state; its test says so).
    const at = (p, st) => p[st] || 0;
    const legend = h("div", { class: "chart-legend" }, ...STATES.map((st) => {
      const latest = history.length ? at(history[history.length - 1], st) : 0;
      const sw = h("span", { class: "swatch" });
      sw.style.setProperty("--c", COLORS[st]);
      return h("span", { class: "legend-item" }, sw, `${st} ${fmtInt(latest)}`);
    }));
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "state-chart" });
    host.dataset.points = String(history.length);
    host.dataset.latest = history.length ? JSON.stringify(history[history.length - 1]) : "";
    if (history.length === 0) {
      root.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "waiting for the first sample…"));
      host.replaceChildren(legend, root);
      return;
    }
    // The kept window, but at least half a minute, so a short run is not a sliver.
    const t1 = history[history.length - 1].t_ms;
    const t0 = Math.min(history[0].t_ms, t1 - 30000);
    let yMax = 0;
    for (const p of history) for (const st of STATES) yMax = Math.max(yMax, at(p, st));
    yMax = niceMax(yMax);
    const x = (t) => pad.l + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad.l - pad.r);
    const y = (v) => pad.t + (1 - v / yMax) * (height - pad.t - pad.b);
    // Five steps when they fall on whole numbers (250 -> 50s), else four.
    const steps = Number.isInteger(yMax / 5) ? 5 : 4;
    for (let i = 0; i <= steps; i++) {
      const v = (yMax * i) / steps;
      const label = Number.isInteger(v) ? fmtInt(v) : v.toFixed(2);
      root.append(svg("line", { x1: pad.l, x2: width - pad.r, y1: y(v), y2: y(v), stroke: "#eeede7" }));
      root.append(svg("text", { x: pad.l - 6, y: y(v) + 4, "text-anchor": "end" }, label));
    }
    // Time ticks back from now: 10 s apart for a short window, then minutes.
    const spanS = (t1 - t0) / 1000;
    const stepS = [10, 30, 60, 120, 300].find((s) => spanS / s <= 8) || 600;
    for (let back = 0; back <= spanS + 1e-9; back += stepS) {
      const t = t1 - back * 1000;
      const text = back === 0 ? "now" : back < 60 ? `−${back} s` : `−${back / 60} min`;
      root.append(svg("text", { x: x(t), y: height - 8, "text-anchor": "middle" }, text));
    }
    for (const st of STATES) {
      const pts = history.map((p) => `${x(p.t_ms).toFixed(1)},${y(at(p, st)).toFixed(1)}`).join(" ");
      root.append(svg("polyline", {
        points: pts, fill: "none", stroke: COLORS[st], "stroke-width": 2,
        "stroke-linejoin": "round", "data-state": st,
      }));
    }
    host.replaceChildren(legend, root);
  }

  function storeValue(s, key) {
    if (key === "load") return s.pending + s.in_flight;
    if (key === "oldest_pending_s") return s.oldest_pending_s === null ? -1 : s.oldest_pending_s;
    return s[key];
  }

  function renderStores(snap) {
    const tbody = document.querySelector("#stores tbody");
    const rows = snap.stores.slice();
    const dir = sort.dir === "asc" ? 1 : -1;
    rows.sort((a, b) => {
      const va = storeValue(a, sort.key);
      const vb = storeValue(b, sort.key);
      if (va < vb) return -dir;
      if (va > vb) return dir;
      return a.store < b.store ? -1 : a.store > b.store ? 1 : 0;
    });
    for (const th of document.querySelectorAll("#stores th")) {
      if (th.dataset.key === sort.key) th.setAttribute("aria-sort", sort.dir === "asc" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    document.getElementById("stores-note").textContent =
      `${fmtInt(snap.stores.length)} busiest of the stores with work (${fmtInt(snap.stores_total)} stores registered); click a column to sort.`;
    if (rows.length === 0) {
      return emptyRow(tbody, 5, snap.stores_total > 0 ? "no store has work" : "no stores yet");
    }
    tbody.replaceChildren(...rows.map((s) => h("tr", {
      dataset: { store: s.store, pending: s.pending, inFlight: s.in_flight },
    }, td(s.store, "mono"), td(fmtInt(s.pending), "num"), td(fmtInt(s.in_flight), "num"),
      td(fmtInt(s.pending + s.in_flight), "num"), td(fmtSecs(s.oldest_pending_s), "num"))));
  }

  function fmtNum(v) {
    return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US", { maximumFractionDigits: 3 });
  }

  // The configured stores, as the server last read them.
  function renderSettings(data) {
    const list = data.store_settings;
    const note = document.getElementById("settings-note");
    if (!list) {
      note.textContent = data.store_settings_error
        ? `cannot read the list: ${data.store_settings_error}`
        : "waiting for the first read of the list…";
      return;
    }
    const more = list.length >= data.store_settings_max ? ` The first ${fmtInt(list.length)} by name are listed.` : "";
    const failed = data.store_settings_error ? ` Cannot read the list now (${data.store_settings_error}); it is older.` : "";
    note.textContent = `${fmtInt(list.length)} configured.${more}${failed}`;
    const tbody = document.querySelector("#store-settings tbody");
    if (list.length === 0) return emptyRow(tbody, 7, "no store has a rate or a cap of its own");
    tbody.replaceChildren(...list.map((f) => h("tr", { dataset: { store: f.store } },
      td(f.store, "mono"), td(fmtNum(f.settings.rate_per_s), "num"), td(fmtNum(f.settings.burst), "num"),
      td(f.settings.in_flight_max === null ? "worker's" : fmtInt(f.settings.in_flight_max), "num"),
      td(fmtInt(f.in_flight), "num"), td(f.tokens === null ? "–" : f.tokens.toFixed(1), "num"),
      td(f.configured_at === null ? "–" : String(f.configured_at).replace("T", " ").replace(/\.[0-9]*Z$|Z$/, "")))));
  }

  // One provider gate by name: its ceiling, tokens and pause.
  async function lookUpGate(name) {
    const answer = (text, state, code) => showAnswer("gate-answer", text, state, code);
    const fields = document.getElementById("gate-fields");
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(name) || name === "." || name === "..") {
      fields.hidden = true;
      answer("A gate's name is 1 to 64 of A-Z a-z 0-9 . _ -", "error", "bad_provider");
      return;
    }
    answer(`looking up gate ${name}…`, "wait");
    try {
      const resp = await fetch(`/v1/providers/${encodeURIComponent(name)}`, { headers: authHeaders(), cache: "no-store" });
      if (!resp.ok) {
        const e = await errorAnswer(resp);
        fields.hidden = true;
        answer(resp.status === 404 ? `No gate ${name}: never given a ceiling, never paused.` : e.text, "error", e.code);
        return;
      }
      const g = await resp.json();
      const ceiling = g.settings.rate_per_s === null
        ? "none"
        : `${fmtNum(g.settings.rate_per_s)} a second, burst ${fmtNum(g.settings.burst)}`;
      const rows = [
        ["Gate", g.provider],
        ["Ceiling", ceiling],
        ["Tokens now", g.tokens === null ? "–" : g.tokens.toFixed(1)],
        ["Paused", g.paused_ms === null ? "no" : `for ${fmtInt(g.paused_ms)} ms more`],
        ["Pauses", fmtInt(g.pauses)],
        ["Configured", fmtTime(g.configured_at)],
      ];
      fields.querySelector("tbody").replaceChildren(...rows.map(([k, v]) =>
        h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))));
      fields.hidden = false;
      fields.dataset.paused = g.paused_ms === null ? "no" : "yes";
      answer("", "ok");
    } catch (e) {
      answer(`cannot reach the server (${e.message})`, "error");
    }
  }

  function renderWorkers(data) {
    const tbody = document.querySelector("#workers tbody");
    document.getElementById("ttl").textContent = fmtSecs(data.lease_ttl_ms / 1000);
    const owners = data.snapshot.owners;
    if (owners.length === 0) return emptyRow(tbody, 6, "no worker holds a lease");
    tbody.replaceChildren(...owners.map((o) => {
      const live = o.lease_left_s > 0 && o.expired < o.held;
      const state = live
        ? (o.expired > 0 ? h("span", { class: "badge warn" }, `${o.expired} expired`) : h("span", { class: "badge" }, "live"))
        : h("span", { class: "badge bad" }, "lease ran out");
      const epochs = o.epoch_min === o.epoch_max ? String(o.epoch_min) : `${o.epoch_min}–${o.epoch_max}`;
      return h("tr", { dataset: { owner: o.owner } }, td(o.owner, "mono"), td(fmtInt(o.held), "num"),
        td(epochs), td(fmtSecs(o.lease_left_s), "num"), td(fmtSecs(o.heartbeat_age_s) + " ago", "num"), h("td", {}, state));
    }));
  }

  function renderIntents(data) {
    const tbody = document.querySelector("#intents tbody");
    const snap = data.snapshot;
    const retention = data.key_retention_s;
    document.getElementById("intents-note").textContent =
      `${fmtInt(snap.open_intents)} open; key retention ${fmtSecs(retention)}, alert past ${fmtSecs(data.intent_alert_s)} ` +
      `(${fmtInt(snap.intents_older_than_alert)} past it).`;
    if (snap.oldest_intents.length === 0) return emptyRow(tbody, 6, "every intent has its final status");
    tbody.replaceChildren(...snap.oldest_intents.map((i) => {
      const share = retention > 0 ? i.age_s / retention : 0;
      const bar = h("span", { class: "bar" + (i.age_s >= data.intent_alert_s ? " bad" : share > 0.25 ? " warn" : "") });
      const fill = h("span", {});
      fill.style.width = Math.min(100, share * 100).toFixed(1) + "%";
      const mark = h("i", {});
      mark.style.left = Math.min(100, (data.intent_alert_s / Math.max(1, retention)) * 100).toFixed(1) + "%";
      bar.append(fill, mark);
      return h("tr", { title: `${i.key} · action ${i.state}` }, td(String(i.action_id), "num"), td(i.store, "mono"), td(i.status),
        td(fmtInt(i.attempts), "num"), td(fmtSecs(i.age_s), "num"),
        h("td", {}, bar, ` ${(share * 100).toFixed(share < 0.01 ? 2 : 0)}%`));
    }));
  }

  function renderEvents(snap) {
    const tbody = document.querySelector("#events tbody");
    if (snap.events.length === 0) return emptyRow(tbody, 4, "none yet");
    tbody.replaceChildren(...snap.events.map((e) => h("tr", { dataset: { kind: e.kind } },
      td(e.at.replace("T", " ").replace("Z", "")),
      h("td", {}, h("span", { class: "badge" + (e.kind === "fenced" || e.kind === "conflict" ? " warn" : "") }, e.kind)),
      td(e.action_id === null ? "–" : String(e.action_id), "num"), td(e.detail, "wrap-cell"))));
  }

  // The node the sample was read from (pg_is_in_recovery(), the connection's
  // address) and its standbys (pg_stat_replication); no table without standbys.
  function renderReplication(snap) {
    const r = snap.replication;
    const role = r.primary ? "primary" : "standby (read-only)";
    const timeline = r.timeline === null ? "" : ` · timeline ${r.timeline}`;
    const count = r.standbys.length === 0 ? "no standby streams from it" : `${r.standbys.length} standby(s)`;
    document.getElementById("replication-note").textContent = `${r.node}: ${role}${timeline} · ${count}.`;
    document.getElementById("replication-wrap").hidden = r.standbys.length === 0;
    const ms = (v) => (v === null ? "–" : `${v.toFixed(1)} ms`);
    document.querySelector("#replication tbody").replaceChildren(...r.standbys.map((st) => h("tr", { dataset: { standby: st.name } },
      td(st.name, "mono"), td(st.addr === null ? "–" : st.addr, "mono"), td(st.state), td(st.sync_state),
      td(ms(st.write_lag_ms), "num"), td(ms(st.replay_lag_ms), "num"),
      td(st.replay_behind_bytes === null ? "–" : fmtInt(st.replay_behind_bytes), "num"))));
  }

  function render(data) {
    last = data;
    if (!data.snapshot) {
      setStatus(data.error || "waiting for the first database sample…", "wait");
      renderChart(data.history || []);
      return;
    }
    renderCards(data);
    renderChart(data.history);
    renderHeld(data);
    renderStores(data.snapshot);
    renderSettings(data);
    renderWorkers(data);
    renderIntents(data);
    renderEvents(data.snapshot);
    renderReplication(data.snapshot);
    const age = data.sample_age_ms === null ? "" : ` · sample ${fmtSecs(data.sample_age_ms / 1000)} old`;
    const when = new Date().toLocaleTimeString();
    if (data.error) setStatus(`database: ${data.error} (showing the last sample)`, "error");
    else setStatus(`updated ${when}${age} · every ${fmtSecs(data.interval_ms / 1000)}`, "ok");
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }

  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const headers = token ? { Authorization: "Bearer " + token } : {};
      const resp = await fetch("/v1/ops/snapshot", { headers, cache: "no-store" });
      if (resp.status === 401) {
        setStatus("This server needs its API token: enter it above.", "error");
        document.getElementById("token").focus();
        return;
      }
      if (!resp.ok) {
        setStatus(`the server answered ${resp.status}`, "error");
        return;
      }
      render(await resp.json());
    } catch (e) {
      setStatus(`cannot reach the server (${e.message}); retrying`, "error");
    } finally {
      busy = false;
      schedule();
    }
  }

  function schedule() {
    clearTimeout(timer);
    const every = Math.max(POLL_MIN_MS, (last && last.interval_ms) || 2000);
    timer = setTimeout(refresh, every);
  }

  // The Action panel: one action by id; cancel and re-drive after an
  // in-page confirmation. The API decides (the action's state, the token's
  // reach) and the page shows its answer, its refusals' sentences included.
  let shown = null;
  let asked = null;
  let lookupSeq = 0;

  function authHeaders() {
    return token ? { Authorization: "Bearer " + token } : {};
  }

  // A panel's answer line (`action-answer`, `held-answer`): its text, its
  // state (wait, ok, error) and the API's code, for styles and tests.
  function showAnswer(id, text, state, code) {
    const a = document.getElementById(id);
    a.textContent = text;
    a.dataset.state = state;
    if (code) a.dataset.code = code;
    else delete a.dataset.code;
  }

  function setAnswer(text, state, code) {
    showAnswer("action-answer", text, state, code);
  }

  // One POST to an action's route (cancel, redrive, resolve) with the page's
  // token, `body` sent as JSON when given; rejects when the server cannot
  // be reached.
  function postAction(id, op, body) {
    const init = { method: "POST", headers: authHeaders(), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(`/v1/actions/${id}/${op}`, init);
  }

  // A panel's in-page confirmation (`action-confirm`, `held-confirm`): the
  // question, the label of its yes button; its no button takes the focus.
  function openConfirm(panel, op, text, yes) {
    document.getElementById(`${panel}-confirm-text`).textContent = text;
    document.getElementById(`${panel}-confirm-yes`).textContent = yes;
    const box = document.getElementById(`${panel}-confirm`);
    box.dataset.op = op;
    box.hidden = false;
    document.getElementById(`${panel}-confirm-no`).focus();
  }

  function closeConfirm(panel) {
    const box = document.getElementById(`${panel}-confirm`);
    box.hidden = true;
    delete box.dataset.op;
  }

  // An RFC 3339 time from the server, in UTC, and how far from now.
  function fmtTime(t) {
    if (t === null || t === undefined) return "–";
    const text = String(t).replace("T", " ").replace("Z", "") + " UTC";
    const ms = Date.parse(t);
    if (!isFinite(ms)) return text;
    const s = (ms - Date.now()) / 1000;
    return `${text} (${s >= 0 ? "in " + fmtSecs(s) : fmtSecs(-s) + " ago"})`;
  }

  function actionLink(id) {
    if (id === null || id === undefined) return "–";
    const b = h("button", { type: "button", class: "link", dataset: { goto: id } }, `action ${id}`);
    b.addEventListener("click", () => {
      document.getElementById("action-id").value = String(id);
      lookUp(String(id), false);
    });
    return b;
  }

  function renderAction(a) {
    shown = a;
    hideConfirm();
    const view = document.getElementById("action-view");
    view.hidden = false;
    view.dataset.id = String(a.id);
    view.dataset.state = a.state;
    const badge = h("span", { class: "badge state" }, a.state);
    badge.style.setProperty("--c", COLORS[a.state] || "#7b8591");
    const rows = [
      ["Action", String(a.id)],
      ["State", badge],
      ["Store", a.store],
      ["Enqueued", fmtTime(a.enqueued_at)],
      ["Not before", fmtTime(a.not_before)],
      ["Expires", fmtTime(a.expires_at)],
      ["Status", a.status === null ? "–" : a.status],
      ["Attempts", fmtInt(a.attempts)],
      ["Fail reason", a.fail_reason === null ? "–" : a.fail_reason],
      ["Re-drive of", actionLink(a.redrive_of)],
      ["Re-driven as", actionLink(a.redriven_as)],
    ];
    document.querySelector("#action-fields tbody").replaceChildren(...rows.map(([k, v]) =>
      h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))));
    document.getElementById("action-cancel").disabled = !CANCELLABLE.includes(a.state);
    document.getElementById("action-redrive").disabled = a.state !== "failed";
  }

  function hideAction() {
    shown = null;
    hideConfirm();
    const view = document.getElementById("action-view");
    view.hidden = true;
    delete view.dataset.id;
    delete view.dataset.state;
  }

  // An error answer's sentence (`{"error", "message"}`), or its status.
  async function errorAnswer(resp) {
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    let text = body && typeof body.message === "string" ? body.message : `the server answered ${resp.status}`;
    if (resp.status === 401) text += " (enter the API token above)";
    return { text, code: body && typeof body.error === "string" ? body.error : String(resp.status) };
  }

  // Reads action `id`; `quiet` keeps the answer shown (after a cancel or a
  // re-drive) unless the read fails. A later lookup wins over an earlier one.
  async function lookUp(id, quiet) {
    const mine = ++lookupSeq;
    if (!/^[0-9]{1,18}$/.test(id)) {
      hideAction();
      setAnswer("An action id is a whole number.", "error", "bad_id");
      return;
    }
    if (!quiet) setAnswer(`looking up action ${id}…`, "wait");
    try {
      const resp = await fetch(`/v1/actions/${id}`, { headers: authHeaders(), cache: "no-store" });
      if (mine !== lookupSeq) return;
      if (!resp.ok) {
        const e = await errorAnswer(resp);
        hideAction();
        setAnswer(e.text, "error", e.code);
        return;
      }
      const a = await resp.json();
      if (mine !== lookupSeq) return;
      renderAction(a);
      if (!quiet) setAnswer("", "ok");
    } catch (e) {
      if (mine === lookupSeq) setAnswer(`cannot reach the server (${e.message})`, "error");
    }
  }

  function askConfirm(op) {
    if (!shown) return;
    asked = { op, id: shown.id };
    openConfirm("action", op, op === "cancel"
      ? `Cancel action ${shown.id} (store ${shown.store}, ${shown.state})? It ends cancelled and is never sent.`
      : `Re-drive action ${shown.id} (store ${shown.store})? A new action, with a new key, sends the same text to the same recipient.`,
    op === "cancel" ? "Yes, cancel it" : "Yes, re-drive it");
  }

  function hideConfirm() {
    asked = null;
    closeConfirm("action");
  }

  // The confirmed cancel or re-drive: one POST, then the API's answer.
  async function runConfirmed() {
    const op = asked;
    hideConfirm();
    if (!op) return;
    document.getElementById("action-cancel").disabled = true;
    document.getElementById("action-redrive").disabled = true;
    setAnswer(op.op === "cancel" ? `cancelling action ${op.id}…` : `re-driving action ${op.id}…`, "wait");
    let resp;
    try {
      resp = await postAction(op.id, op.op);
    } catch (e) {
      setAnswer(`cannot reach the server (${e.message}); look the action up again to see whether it changed`, "error");
      return;
    }
    if (!resp.ok) {
      const e = await errorAnswer(resp);
      setAnswer(e.text, "error", e.code);
      lookUp(String(op.id), true);
      return;
    }
    const a = await resp.json();
    if (op.op === "cancel") {
      setAnswer(`Action ${a.id} cancelled: no worker will claim it; nothing was sent.`, "ok", "cancelled");
      lookupSeq++;
      renderAction(a);
    } else {
      const again = resp.status === 201
        ? `Action ${op.id} re-driven as action ${a.id}.`
        : `Action ${op.id} was re-driven before, as action ${a.id}.`;
      setAnswer(again, "ok", resp.status === 201 ? "redriven" : "already");
      lookUp(String(op.id), true);
    }
  }

  // The Held unknown panel: the actions a worker held because their
  // provider offers no way to learn whether an attempt went out (newest
  // first, as the server last read them). Each is resolved, after an
  // in-page confirmation, through the API's resolve route. The list is the
  // server's latest read, so a row resolved here stays, marked and without
  // its buttons, until a read without it arrives.
  const OUTCOMES = { sent: "sent", not_sent: "not sent" };
  const resolved = new Map(); // action id -> the state its resolution left
  let heldAsked = null;
  let heldShown = null;

  function setHeldAnswer(text, state, code) {
    showAnswer("held-answer", text, state, code);
  }

  function renderHeld(data) {
    const list = data.held_unknown;
    const byState = (data.snapshot.by_state.find((p) => p[0] === "unknown") || ["unknown", 0])[1];
    const note = document.getElementById("held-note");
    if (!list) {
      note.textContent = data.held_unknown_error
        ? `cannot read the list: ${data.held_unknown_error}`
        : "waiting for the first read of the list…";
      return;
    }
    for (const id of [...resolved.keys()]) if (!list.some((a) => a.id === id)) resolved.delete(id);
    // A list shorter than its cap is all of them; else the maintained count.
    const count = list.length < data.held_unknown_max ? list.length : Math.max(byState, list.length);
    const panel = document.getElementById("held-panel");
    panel.dataset.count = String(count);
    const badge = document.getElementById("held-count");
    badge.textContent = fmtInt(count);
    badge.className = "badge" + (count > 0 ? " bad" : "");
    const listed = count > list.length ? ` The newest ${fmtInt(list.length)} are listed.` : "";
    const failed = data.held_unknown_error ? ` Cannot read the list now (${data.held_unknown_error}); it is older.` : "";
    note.textContent = `${fmtInt(count)} held.${listed}${failed}`;
    // Redrawn only when it changed, so a focused button keeps its focus.
    const key = JSON.stringify([list, [...resolved]]);
    if (key === heldShown) return;
    heldShown = key;
    const tbody = document.querySelector("#held tbody");
    if (list.length === 0) return emptyRow(tbody, 6, "none held");
    tbody.replaceChildren(...list.map((a) => {
      const done = resolved.get(a.id);
      const cell = done
        ? h("td", {}, h("span", { class: "badge" }, `resolved: ${done}`))
        : h("td", { class: "row-buttons" }, resolveButton(a, "sent"), resolveButton(a, "not_sent"));
      return h("tr", { dataset: { id: a.id }, title: `key ${a.idempotency_key || "–"} · to ${a.to}` },
        td(String(a.id), "num"), td(a.store, "mono"), td(a.held_at.replace("T", " ").replace("Z", "")),
        td(fmtInt(a.attempts), "num"), td(a.reason, "mono"), cell);
    }));
  }

  // Its visible text first in its name, then the action it resolves.
  function resolveButton(a, outcome) {
    const b = h("button", {
      type: "button", dataset: { resolve: outcome },
      "aria-label": `Resolve: ${OUTCOMES[outcome]}, action ${a.id}`,
    }, `Resolve: ${OUTCOMES[outcome]}`);
    b.addEventListener("click", () => askResolve(a, outcome));
    return b;
  }

  function askResolve(a, outcome) {
    heldAsked = { id: a.id, outcome };
    openConfirm("held", outcome, outcome === "sent"
      ? `Resolve action ${a.id} (store ${a.store}) as sent? Only if the provider has the message: it ends done and is never sent again.`
      : `Resolve action ${a.id} (store ${a.store}) as not sent? Only if nothing went out: it ends failed, and a re-drive sends it again with a new key.`,
    outcome === "sent" ? "Yes, it was sent" : "Yes, nothing was sent");
  }

  function hideResolve() {
    heldAsked = null;
    closeConfirm("held");
  }

  // The confirmed resolution: one POST, then the API's answer and a refresh.
  async function runResolve() {
    const ask = heldAsked;
    hideResolve();
    if (!ask) return;
    setHeldAnswer(`resolving action ${ask.id} as ${OUTCOMES[ask.outcome]}…`, "wait");
    let resp;
    try {
      resp = await postAction(ask.id, "resolve", { outcome: ask.outcome });
    } catch (e) {
      setHeldAnswer(`cannot reach the server (${e.message}); the list will show whether it changed`, "error");
      return;
    }
    if (!resp.ok) {
      const e = await errorAnswer(resp);
      setHeldAnswer(e.text, "error", e.code);
      refresh();
      return;
    }
    const a = await resp.json();
    resolved.set(a.id, a.state);
    setHeldAnswer(`Action ${a.id} resolved as ${OUTCOMES[ask.outcome]}: it is ${a.state}.`, "ok", "resolved");
    if (ask.outcome === "not_sent") {
      document.getElementById("held-answer").append(" To send it again, with a new key, re-drive ", actionLink(a.id), ".");
    }
    if (shown && shown.id === a.id) {
      lookupSeq++;
      renderAction(a);
    }
    if (last && last.snapshot) renderHeld(last);
    refresh();
  }

  document.getElementById("held-confirm-yes").addEventListener("click", runResolve);
  document.getElementById("held-confirm-no").addEventListener("click", () => {
    hideResolve();
    setHeldAnswer("Nothing was sent to the server.", "ok", "dismissed");
  });
  document.getElementById("held-confirm").addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") document.getElementById("held-confirm-no").click();
  });

  document.getElementById("gate-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    lookUpGate(document.getElementById("gate-name").value.trim());
  });
  document.getElementById("action-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    lookUp(document.getElementById("action-id").value.trim(), false);
  });
  document.getElementById("action-cancel").addEventListener("click", () => askConfirm("cancel"));
  document.getElementById("action-redrive").addEventListener("click", () => askConfirm("redrive"));
  document.getElementById("action-confirm-yes").addEventListener("click", runConfirmed);
  document.getElementById("action-confirm-no").addEventListener("click", () => {
    hideConfirm();
    setAnswer("Nothing was sent to the server.", "ok", "dismissed");
  });
  document.getElementById("action-confirm").addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") document.getElementById("action-confirm-no").click();
  });

  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = document.getElementById("token").value.trim();
    try {
      if (token) localStorage.setItem(TOKEN_KEY, token);
      else localStorage.removeItem(TOKEN_KEY);
    } catch (e) {
      // Private windows may refuse storage; the token still works for this page.
    }
    refresh();
  });
  document.getElementById("token").value = token;

  for (const th of document.querySelectorAll("#stores th")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.key;
      if (sort.key === key) sort.dir = sort.dir === "asc" ? "desc" : "asc";
      else sort = { key, dir: th.dataset.type === "text" ? "asc" : "desc" };
      if (last && last.snapshot) renderStores(last.snapshot);
    });
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => last && renderChart(last.history || []), 150);
  });

  refresh();
})();
