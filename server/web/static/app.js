// fedldp dashboard: the study list and a live study page, drawn from the public API.
// Plain JavaScript written for fedldp (no framework, no third-party code, works offline).
"use strict";

const ENDED = ["finished", "failed", "cancelled"];
const COLORS = ["#2f6fdb", "#e07b39", "#1f9d55", "#9b4dca", "#c93c37", "#0f8b8d", "#b58900", "#6b7483"];
const SVGNS = "http://www.w3.org/2000/svg";
const app = document.getElementById("app");

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) node.append(c);
  return node;
}

// replaceChildren, skipping absent parts (the DOM would show null as text)
function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function sv(tag, attrs, ...children) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (!isFinite(x)) return String(x);
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  return String(Number(x.toPrecision(digits)));
}

function vec(xs) { return `[${xs.slice(0, 6).map((x) => fmt(x)).join(", ")}${xs.length > 6 ? ", …" : ""}]`; }
function isNum(x) { return typeof x === "number" && isFinite(x); }
function isNumArray(x) { return Array.isArray(x) && x.length > 0 && x.every(isNum); }

function adminHeaders() {
  const key = document.getElementById("admin-key").value || sessionStorage.getItem("fedldp-admin") || "";
  return key ? { "X-Admin-Key": key } : {};
}
document.getElementById("admin-key").value = sessionStorage.getItem("fedldp-admin") || "";
document.getElementById("admin-key").addEventListener("change", (e) => sessionStorage.setItem("fedldp-admin", e.target.value));

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const err = new Error(body && body.detail ? `${body.code}: ${body.detail}` : `HTTP ${response.status}`);
    err.code = body && body.code;
    throw err;
  }
  return body;
}

// where a study's protocol code came from (StudyView.protocol_origin / protocol_version):
// fedldp's own ("built-in"), an installed plugin distribution, or not recorded (older studies)
function origin(v) {
  if (!v.protocol_origin) return { plugin: false, text: "origin not recorded" };
  if (v.protocol_origin === "built-in") return { plugin: false, text: `built-in, fedldp ${v.protocol_version}` };
  return { plugin: true, text: `plugin ${v.protocol_origin} ${v.protocol_version}` };
}

function protocolCell(v) {
  const o = origin(v);
  return el("td", { "data-testid": "protocol", title: o.text }, v.protocol,
    o.plugin ? el("div", { class: "muted small", "data-testid": "protocol-origin" }, `${v.protocol_origin} ${v.protocol_version}`) : null);
}

function badge(text) { return el("span", { class: `badge ${text}`, "data-testid": "phase" }, text); }

function bar(fraction, done) {
  const pct = Math.max(0, Math.min(1, fraction || 0)) * 100;
  return el("div", { class: done ? "bar done" : "bar", title: `${pct.toFixed(0)} %` }, el("span", { style: `width:${pct}%` }));
}

function timeLeft(deadline) {
  if (!deadline) return "–";
  const s = (new Date(deadline) - Date.now()) / 1000;
  if (s <= 0) return "due";
  if (s < 120) return `${s.toFixed(0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(0)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// ------------------------------------------------------------------ charts (hand-drawn SVG)

function frame(title, width, height) {
  const svg = sv("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  svg.append(sv("text", { x: 0, y: 13, class: "title" }, title));
  return svg;
}

function scale(lo, hi, a, b) {
  if (!(hi > lo)) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
  const f = (x) => a + ((x - lo) / (hi - lo)) * (b - a);
  f.lo = lo; f.hi = hi;
  return f;
}

function yAxis(svg, y, left, right) {
  for (const v of [y.lo, (y.lo + y.hi) / 2, y.hi]) {
    svg.append(sv("line", { x1: left, x2: right, y1: y(v), y2: y(v), class: "gridline" }));
    svg.append(sv("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v, 3)));
  }
}

// bars: values (and optional outline values on the same axis), x labels at the edges
function barChart({ title, values, outline, labels, width = 460, height = 190, color = COLORS[0], note, highlight }) {
  const svg = frame(title, width, height);
  const left = 52, right = width - 8, top = 24, bottom = height - 30;
  const top_ = Math.max(...values, ...(outline || []), 0);
  const low = Math.min(...values, 0);  // below 0: a debiased estimate may be
  const y = scale(low, top_ || 1, bottom, top);
  yAxis(svg, y, left, right);
  if (low < 0) svg.append(sv("line", { x1: left, x2: right, y1: y(0), y2: y(0), class: "axis" }));
  const n = values.length, w = (right - left) / n;
  values.forEach((v, i) => {
    svg.append(sv("rect", { x: left + i * w + 1, y: Math.min(y(v), y(0)), width: Math.max(1, w - 2), height: Math.abs(y(0) - y(v)), fill: i === highlight ? COLORS[1] : color, rx: 1 },
      sv("title", {}, `${labels ? labels[i] + ": " : ""}${fmt(v, 6)}`)));
  });
  if (outline) outline.forEach((v, i) => {
    svg.append(sv("rect", { x: left + i * w + 1, y: y(v), width: Math.max(1, w - 2), height: Math.max(0, bottom - y(v)), fill: "none", stroke: "#1d2430", "stroke-dasharray": "3 2" }));
  });
  svg.append(sv("line", { x1: left, x2: right, y1: bottom, y2: bottom, class: "axis" }));
  if (labels) {
    const ticks = n <= 10 ? [...Array(n).keys()] : [0, Math.floor(n / 2), n - 1];
    for (const i of ticks) svg.append(sv("text", { x: left + (i + 0.5) * w, y: bottom + 14, "text-anchor": "middle" }, labels[i]));
  }
  if (note) svg.append(sv("text", { x: right, y: height - 2, "text-anchor": "end" }, note));
  return svg;
}

// lines with points: series [{name, values, color}] over a shared x (0..n-1 or given xs)
function lineChart({ title, series, xs, xlabel, width = 460, height = 200 }) {
  const svg = frame(title, width, height);
  const left = 52, right = width - 10, top = 24, bottom = height - 34;
  const all = series.flatMap((s) => s.values.filter(isNum));
  const n = Math.max(...series.map((s) => s.values.length));
  const xv = xs || [...Array(n).keys()];
  const x = scale(Math.min(...xv), Math.max(...xv), left, right);
  const y = scale(Math.min(...all), Math.max(...all), bottom, top);
  yAxis(svg, y, left, right);
  svg.append(sv("line", { x1: left, x2: right, y1: bottom, y2: bottom, class: "axis" }));
  for (const i of [0, xv.length - 1]) svg.append(sv("text", { x: x(xv[i]), y: bottom + 14, "text-anchor": "middle" }, fmt(xv[i])));
  if (xlabel) svg.append(sv("text", { x: (left + right) / 2, y: bottom + 28, "text-anchor": "middle" }, xlabel));
  series.forEach((s, k) => {
    const color = s.color || COLORS[k % COLORS.length];
    const pts = s.values.map((v, i) => [x(xv[i]), y(v), v]).filter((p) => isNum(p[2]));
    if (pts.length > 1) svg.append(sv("polyline", { points: pts.map((p) => `${p[0]},${p[1]}`).join(" "), fill: "none", stroke: color, "stroke-width": 1.8 }));
    for (const p of pts) svg.append(sv("circle", { cx: p[0], cy: p[1], r: pts.length > 40 ? 1.5 : 3, fill: color }, sv("title", {}, `${s.name}: ${fmt(p[2], 6)}`)));
  });
  return svg;
}

// horizontal ranges: rows [{label, lo, hi, L, R, point, half}] each on its own number line
function rangeChart({ title, rows, width = 460 }) {
  const height = 34 + rows.length * 40;
  const svg = frame(title, width, height);
  const left = 70, right = width - 14;
  rows.forEach((r, i) => {
    const yy = 44 + i * 40;
    const x = scale(r.lo, r.hi, left, right);
    svg.append(sv("text", { x: left - 8, y: yy + 4, "text-anchor": "end" }, r.label));
    svg.append(sv("line", { x1: left, x2: right, y1: yy, y2: yy, class: "axis" }));
    svg.append(sv("text", { x: left, y: yy + 16, "text-anchor": "start" }, fmt(x.lo)));
    svg.append(sv("text", { x: right, y: yy + 16, "text-anchor": "end" }, fmt(x.hi)));
    if (isNum(r.L) && isNum(r.R)) {
      svg.append(sv("rect", { x: x(r.L), y: yy - 6, width: Math.max(2, x(r.R) - x(r.L)), height: 12, fill: COLORS[0], opacity: 0.35, rx: 2 },
        sv("title", {}, `[${fmt(r.L, 6)}, ${fmt(r.R, 6)}]`)));
      svg.append(sv("text", { x: (x(r.L) + x(r.R)) / 2, y: yy - 9, "text-anchor": "middle" }, `[${fmt(r.L)}, ${fmt(r.R)}]`));
    }
    if (isNum(r.point)) {
      if (isNum(r.half)) svg.append(sv("line", { x1: x(r.point - r.half), x2: x(r.point + r.half), y1: yy, y2: yy, stroke: COLORS[4], "stroke-width": 3 }));
      svg.append(sv("circle", { cx: x(r.point), cy: yy, r: 5, fill: COLORS[4] }, sv("title", {}, fmt(r.point, 8))));
      svg.append(sv("text", { x: x(r.point), y: yy - 9, "text-anchor": "middle" }, fmt(r.point)));
    }
  });
  return svg;
}

function legend(series) {
  return el("div", { class: "legend" }, series.map((s, k) => el("span", {}, el("i", { style: `background:${s.color || COLORS[k % COLORS.length]}` }), s.name)));
}

// ------------------------------------------------------------------ the study list

function studyProgress(v) {
  const total = v.rounds.length;
  if (v.phase === "enrolling") return v.enrollment_target ? v.n_participants / v.enrollment_target : 0;
  if (v.phase === "finished") return 1;
  if (!total) return 0;
  let done = 0;
  for (const r of v.rounds) done += r.status === "closed" ? 1 : r.status === "open" && r.expected ? r.received / r.expected : 0;
  return done / total;
}

function listPage() {
  let timer = null, stopped = false;
  fill(app, el("div", { class: "card" }, el("h2", {}, "Studies"), el("p", { class: "muted" }, "Loading…")));
  async function refresh() {
    try {
      const [{ studies }, { campaigns }] = await Promise.all([api("/v1/studies"), api("/v1/campaigns")]);
      studies.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
      campaigns.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
      const rows = studies.map((v) => {
        const closed = v.rounds.filter((r) => r.status === "closed").length;
        const open = v.rounds.find((r) => r.status === "open");
        const detail = v.phase === "enrolling"
          ? `${v.n_participants}${v.enrollment_target ? " / " + v.enrollment_target : ""} enrolled`
          : `${closed} / ${v.rounds.length} rounds${open ? ` · ${open.received} / ${open.expected} reports` : ""}`;
        return el("tr", { class: "link", "data-study": v.id, onclick: () => { location.hash = `#/study/${v.id}`; } },
          el("td", {}, el("a", { href: `#/study/${v.id}` }, v.name || v.id.slice(0, 12))),
          protocolCell(v),
          el("td", {}, badge(v.phase)),
          el("td", { class: "num" }, String(v.n_participants)),
          el("td", {}, bar(studyProgress(v), v.phase === "finished")),
          el("td", { class: "muted" }, detail),
          el("td", { class: "muted" }, new Date(v.created_at).toLocaleString()));
      });
      fill(app, campaigns.length ? el("div", { class: "card" }, el("h2", {}, el("a", { href: "#/campaigns" }, `Campaigns (${campaigns.length})`)), campaignTable(campaigns)) : null,
        el("div", { class: "card" },
        el("h2", {}, `Studies (${studies.length})`),
        studies.length
          ? el("table", {}, el("thead", {}, el("tr", {}, ["study", "protocol", "phase", "participants", "progress", "", "created"].map((h) => el("th", { class: h === "participants" ? "num" : null }, h)))), el("tbody", {}, rows))
          : el("p", { class: "muted" }, "No studies yet: create one with POST /v1/studies or `fedldp swarm`.")));
    } catch (e) {
      fill(app, el("div", { class: "card error" }, `Could not list the studies: ${e.message}`));
    }
    if (!stopped) timer = setTimeout(refresh, 2000);
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}

// ------------------------------------------------------------------ one study, live

function studyPage(id) {
  const st = { view: null, rounds: new Map(), n: 0, phase: null, reason: null, result: null, ledger: null, selected: null, live: false };
  const parts = {
    head: el("div", { class: "card" }), facts: el("div", { class: "card" }), progress: el("div", { class: "card" }),
    rounds: el("div", { class: "card" }), output: el("div", { class: "card" }), series: el("div", { class: "card" }),
    result: el("div", { class: "card" }), ledger: el("div", { class: "card" }),
  };
  fill(app, parts.head, el("div", { class: "grid" }, parts.progress, parts.result), el("div", { class: "grid" }, parts.rounds, parts.output),
    parts.series, el("div", { class: "grid" }, parts.ledger, parts.facts));
  let source = null, ticker = null, pending = new Set(), frameRequested = false, stopped = false;

  function schedule(...names) {
    names.forEach((n) => pending.add(n));
    if (frameRequested) return;
    frameRequested = true;
    requestAnimationFrame(() => {
      frameRequested = false;
      const todo = [...pending]; pending.clear();
      for (const n of todo) render[n]();
    });
  }

  function mergeView(view) {
    st.view = view; st.phase = st.phase || view.phase; st.n = view.n_participants;
    for (const r of view.rounds) {
      const known = st.rounds.get(r.index) || {};
      st.rounds.set(r.index, { ...r, ...known, name: r.name, expected: known.expected ?? r.expected, received: Math.max(known.received || 0, r.received), status: known.status || r.status, deadline: known.deadline || r.deadline });
    }
  }

  const render = {
    head() {
      const v = st.view;
      const actions = el("div", { class: "actions" });
      if (st.phase === "enrolling") actions.append(el("button", { onclick: () => admin("start") }, "Start now"));
      if (st.phase === "enrolling" || st.phase === "running") actions.append(el("button", { class: "danger", onclick: () => admin("cancel") }, "Cancel"));
      fill(parts.head, 
        el("div", { class: "headline" }, el("a", { href: "#/" }, "← studies"), el("h1", {}, v.name || "study"), el("span", { id: "phase" }, badge(st.phase)),
          el("span", { class: st.live ? "live on" : "live" }, st.live ? "live" : ENDED.includes(st.phase) ? "ended" : "connecting"), el("span", { class: "id" }, v.id)),
        el("div", { class: "actions" }, el("span", { class: "muted", id: "protocol-line" }, `${v.protocol} (${origin(v).text}) · ${v.trust} trust${Number.isSafeInteger(v.seed) ? ` · seed ${v.seed}` : ""}`), el("span", { style: "flex:1" }), actions),
        st.reason ? el("p", { class: "error" }, st.reason) : null,
        el("p", { class: "error", id: "action-error" }));
    },
    facts() {
      const v = st.view;
      const rows = [["protocol", v.protocol], ["protocol code", origin(v).text], ["participants", String(st.n)], ["enrollment target", v.enrollment_target ?? "–"], ["ε accepted", `${fmt(v.epsilon_min)} to ${fmt(v.epsilon_max)}`],
        ["round deadline", `${fmt(v.round_deadline_s)} s, quorum ${fmt(v.quorum)}`], ["parameters", JSON.stringify(v.params)], ["created", new Date(v.created_at).toLocaleString()]];
      for (const w of v.warnings) rows.push(["warning", w]);
      fill(parts.facts, el("h2", {}, "Study"), el("dl", { class: "facts", id: "study-facts" }, rows.map(([k, val]) => [el("dt", {}, k), el("dd", {}, String(val))])));
    },
    progress() {
      const rounds = [...st.rounds.values()];
      const closed = rounds.filter((r) => r.status === "closed").length;
      const open = rounds.find((r) => r.status === "open");
      const received = rounds.reduce((a, r) => a + (r.received || 0), 0);
      const expected = rounds.reduce((a, r) => a + (r.expected || 0), 0);
      const body = [el("h2", {}, "Progress")];
      if (st.phase === "enrolling") {
        const t = st.view.enrollment_target;
        body.push(el("p", {}, `Enrolling: ${st.n}${t ? " of " + t : ""} participants`), bar(t ? st.n / t : 0));
      } else {
        body.push(el("p", {}, el("b", {}, `${closed} of ${rounds.length}`), " rounds closed · ",
          el("b", { id: "reports-total", "data-value": received }, String(received)), ` of ${expected} reports received`), bar(expected ? received / expected : 0, st.phase === "finished"));
        if (open) {
          body.push(el("p", { style: "margin-top:14px" }, "Open round ", el("b", {}, `${open.index} (${open.name})`), ": ",
            el("b", { id: "open-received", "data-value": open.received }, String(open.received)), ` of ${open.expected} reports · deadline in `, el("b", {}, timeLeft(open.deadline))),
          bar(open.expected ? open.received / open.expected : 0));
        }
      }
      fill(parts.progress, ...body);
    },
    rounds() {
      const rows = [...st.rounds.values()].sort((a, b) => a.index - b.index).map((r) => el("tr", { class: r.output ? "link" : null, "data-round": r.index, onclick: r.output ? () => { st.selected = r.index; schedule("output"); } : null, style: st.selected === r.index ? "background:#f0f4fb" : null },
        el("td", { class: "num" }, String(r.index)), el("td", {}, r.name), el("td", {}, badge(r.status)),
        el("td", { class: "num", "data-testid": `round-received-${r.index}` }, `${r.received} / ${r.expected}`),
        el("td", {}, bar(r.expected ? r.received / r.expected : r.status === "closed" ? 1 : 0, r.status === "closed")),
        el("td", { class: "muted" }, r.status === "open" ? timeLeft(r.deadline) : "")));
      fill(parts.rounds, el("h2", {}, "Rounds"), rows.length
        ? el("div", { style: "max-height:360px;overflow:auto" }, el("table", {}, el("thead", {}, el("tr", {}, ["#", "round", "status", "reports", "", "time left"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)))
        : el("p", { class: "muted" }, "Rounds are planned when enrollment closes."));
    },
    output() {
      const closed = [...st.rounds.values()].filter((r) => r.output).sort((a, b) => a.index - b.index);
      const chosen = st.rounds.get(st.selected);
      const r = chosen && chosen.output ? chosen : closed[closed.length - 1];
      const stageOne = [...closed].reverse().find(hasInterval);
      const body = [];
      if (!r) body.push(el("h2", {}, "Round outputs"), el("p", { class: "muted" }, "Each round's public output is drawn here when the round closes."));
      if (stageOne && stageOne !== r) body.push(el("h2", {}, `Round ${stageOne.index} · ${stageOne.name}`), ...drawOutput(stageOne), el("hr", { style: "border:0;border-top:1px solid var(--line);margin:14px 0" }));
      if (r) body.push(el("h2", {}, `Round ${r.index} · ${r.name}`), ...drawOutput(r));
      if (closed.length > 1) body.push(el("p", { class: "muted" }, "Click a closed round in the table to draw its output."));
      fill(parts.output, ...body);
    },
    series() {
      const closed = [...st.rounds.values()].filter((r) => r.output).sort((a, b) => a.index - b.index);
      const charts = [];
      const est = closed.filter((r) => r.output.estimate !== undefined);
      if (est.length > 1) {
        const dims = Math.min(8, [].concat(est[0].output.estimate).length);
        const series = [...Array(dims).keys()].map((k) => ({ name: dims > 1 ? `component ${k}` : "estimate", values: est.map((r) => [].concat(r.output.estimate)[k]) }));
        charts.push(el("div", {}, lineChart({ title: "Per-round estimates", series, xs: est.map((r) => r.index), xlabel: "round" }), dims > 1 ? legend(series) : null));
      }
      const grad = closed.filter((r) => isNumArray(r.output.theta_next) || isNumArray(r.output.theta));
      if (grad.length) {
        const theta = grad.map((r) => r.output.theta_next || r.output.theta);
        const dims = Math.min(8, theta[0].length);
        const series = [...Array(dims).keys()].map((k) => ({ name: `θ${k}`, values: theta.map((t) => t[k]) }));
        charts.push(el("div", {}, lineChart({ title: "Gradient rounds: θ trajectory", series, xlabel: "gradient step" }), legend(series)));
      }
      const loss = closed.filter((r) => isNum(r.output.loss));
      if (loss.length) charts.push(lineChart({ title: "Gradient rounds: loss", series: [{ name: "loss", values: loss.map((r) => r.output.loss), color: COLORS[1] }], xlabel: "gradient step" }));
      parts.series.style.display = charts.length ? "" : "none";
      fill(parts.series, el("h2", {}, "Across rounds"), el("div", { class: "grid" }, charts));
    },
    result() {
      const res = st.result;
      if (!res) {
        const msg = ENDED.includes(st.phase) && st.phase !== "finished" ? `The study ${st.phase}: no result.` : "The result appears when the last round closes.";
        fill(parts.result, el("h2", {}, "Result"), el("p", { class: "muted" }, msg)); return;
      }
      const bar_ = res.error_bar;
      const est = res.estimate;
      const body = [el("h2", {}, "Result")];
      if (isNum(est)) {
        body.push(el("div", {}, el("span", { class: "result-value", id: "result-estimate", "data-value": String(est) }, fmt(est, 6)),
          bar_ ? el("span", { class: "muted" }, `  ± ${fmt(bar_.half_width, 4)} (${bar_.kind}, level ${fmt(bar_.level)}${bar_.approximate ? ", approximate" : ""})`) : null));
        if (bar_) body.push(rangeChart({ title: "Estimate with its error bar", rows: [{ label: "estimate", lo: est - 2 * bar_.half_width, hi: est + 2 * bar_.half_width, point: est, half: bar_.half_width }] }));
      } else if (isNumArray(est)) {
        body.push(el("div", { id: "result-estimate", "data-value": JSON.stringify(est) }, el("span", { class: "result-value" }, `[${est.slice(0, 6).map((x) => fmt(x)).join(", ")}${est.length > 6 ? ", …" : ""}]`)));
        if (bar_) body.push(el("p", { class: "muted" }, `± ${fmt(bar_.half_width)} in ${bar_.norm} norm (${bar_.kind}, level ${fmt(bar_.level)})`));
        const shown = est.slice(0, 8);
        const h = bar_ ? bar_.half_width : 0;
        const pad = Math.max(1.5 * h, 0.15 * (Math.max(...shown) - Math.min(...shown)) || 1);
        const lo = Math.min(...shown) - pad, hi = Math.max(...shown) + pad;
        body.push(rangeChart({ title: "Components with the error bar", rows: shown.map((x, k) => ({ label: `[${k}]`, lo, hi, point: x, half: bar_ ? h : undefined })) }));
      }
      const s = res.epsilon_spent;
      body.push(el("p", { class: "muted" }, `ε spent: mean ${fmt(s.mean)}, median ${fmt(s.median)}, max ${fmt(s.max)} over ${s.participants} participants (${s.charged} charged)`));
      fill(parts.result, ...body);
    },
    ledger() {
      const L = st.ledger;
      if (!L || !L.participants) { fill(parts.ledger, el("h2", {}, "ε ledger"), el("p", { class: "muted" }, "No participants yet.")); return; }
      const labels = L.edges.slice(0, -1).map((e, i) => `${fmt(e, 2)}–${fmt(L.edges[i + 1], 2)}`);
      fill(parts.ledger, el("h2", {}, "ε ledger"),
        barChart({ title: "Participants by ε spent so far", values: L.spent, outline: L.declared, labels, color: COLORS[2], note: "ε" }),
        el("div", { class: "legend" }, el("span", {}, el("i", { style: `background:${COLORS[2]}` }), "spent"), el("span", {}, el("i", { style: "border:1px dashed #1d2430" }), "declared")),
        el("p", { class: "muted" }, `${L.participants} participants · total ε spent ${fmt(L.spent_total)} · largest ${fmt(L.spent_max)}`));
    },
  };

  async function admin(action) {
    try {
      const view = await api(`/v1/studies/${id}/${action}`, { method: "POST", headers: adminHeaders() });
      mergeView(view);
      schedule("head", "facts", "rounds", "progress");
    } catch (e) {
      const box = document.getElementById("action-error");
      if (box) box.textContent = e.code === "admin_key_required" || e.code === "admin_key_invalid" ? `${e.message} (type the admin key at the top right)` : e.message;
    }
  }

  async function refreshLedger() {
    try { st.ledger = await api(`/v1/studies/${id}/epsilon?bins=12`); schedule("ledger"); } catch (e) { /* shown on the next event */ }
  }
  async function refreshView() {
    try { mergeView(await api(`/v1/studies/${id}`)); schedule("head", "facts", "rounds", "progress"); } catch (e) { /* kept */ }
  }

  function listen() {
    source = new EventSource(`/v1/studies/${id}/events`);
    source.onopen = () => { st.live = true; schedule("head"); };
    source.onerror = () => { st.live = false; schedule("head"); };
    const on = (kind, f) => source.addEventListener(kind, (m) => f(JSON.parse(m.data)));
    on("phase", (e) => {
      st.phase = e.phase; st.reason = e.reason;
      if (e.phase === "running") refreshView();
      if (ENDED.includes(e.phase)) { source.close(); st.live = false; refreshLedger(); }
      schedule("head", "progress", "result");
    });
    on("round_opened", (e) => {
      const r = st.rounds.get(e.index) || {};
      st.rounds.set(e.index, { ...r, index: e.index, name: e.name, status: "open", expected: e.expected, received: r.received || 0, deadline: e.deadline, broadcast: e.broadcast });
      schedule("rounds", "progress");
    });
    on("round_closed", (e) => {
      const r = st.rounds.get(e.index) || {};
      st.rounds.set(e.index, { ...r, index: e.index, name: e.name, status: "closed", expected: e.expected, received: e.received, output: e.output });
      schedule("rounds", "progress", "output", "series");
      refreshLedger();
    });
    on("progress", (e) => {
      st.n = e.n_participants;
      if (e.round !== null && st.rounds.has(e.round)) {
        const r = st.rounds.get(e.round);
        if (r.status === "open") { r.received = e.received; r.expected = e.expected; r.deadline = e.deadline; }
      }
      schedule("progress", "rounds");
    });
    on("result", async () => {
      try { st.result = await api(`/v1/studies/${id}/result`); } catch (e) { /* the phase event follows */ }
      schedule("result");
    });
  }

  (async () => {
    try {
      mergeView(await api(`/v1/studies/${id}`));
    } catch (e) {
      fill(app, el("div", { class: "card error" }, `Study ${id}: ${e.message}`), el("a", { href: "#/" }, "← studies"));
      return;
    }
    if (stopped) return;
    st.phase = st.view.phase; st.reason = st.view.failure_reason;
    Object.keys(render).forEach((n) => schedule(n));
    refreshLedger();
    listen();
    ticker = setInterval(() => { if (st.phase === "running") schedule("progress", "rounds"); }, 1000);
  })();
  return () => { stopped = true; if (source) source.close(); clearInterval(ticker); };
}

function hasInterval(r) {
  const o = r.output;
  return ["sums", "counts", "histogram"].some((k) => isNumArray(o[k])) || (o.L !== undefined && o.R !== undefined);
}

// what a round's public output shows: a histogram and interval (stage one), estimates, the rest as JSON
function drawOutput(r) {
  const o = r.output, out = [];
  const hist = ["sums", "counts", "histogram"].find((k) => isNumArray(o[k]) && o[k].length > 1);
  const k = isNum(o.k_hat) ? o.k_hat - 1 : undefined;  // the paper's 1-based bin index
  if (hist) out.push(barChart({ title: `Stage-one histogram (${hist} per bin${k !== undefined ? ", chosen bin in orange" : ""})`, values: o[hist], labels: o[hist].map((_, i) => String(i + 1)), note: "bin", highlight: k }));
  const rows = [];
  if (isNum(o.L) && isNum(o.R)) rows.push({ label: "interval", lo: isNum(o.lo) ? Math.min(o.lo, o.L) : o.L, hi: isNum(o.hi) ? Math.max(o.hi, o.R) : o.R, L: o.L, R: o.R });
  else if (isNumArray(o.L) && isNumArray(o.R)) o.L.slice(0, 8).forEach((L, k) => rows.push({ label: `[${k}]`, lo: isNumArray(o.lo) ? Math.min(o.lo[k], L) : L, hi: isNumArray(o.hi) ? Math.max(o.hi[k], o.R[k]) : o.R[k], L, R: o.R[k] }));
  if (rows.length) out.push(rangeChart({ title: "Stage-one interval [L, R] within the searched range", rows }));
  if (isNum(o.estimate)) out.push(el("p", {}, "Round estimate ", el("b", {}, fmt(o.estimate, 6)), isNum(o.predicted_mse) ? el("span", { class: "muted" }, ` (predicted MSE ${fmt(o.predicted_mse)})`) : null));
  if (isNumArray(o.estimate)) out.push(el("p", {}, "Round estimate ", el("b", {}, vec(o.estimate))));
  if (isNumArray(o.theta) && isNumArray(o.theta_next)) {
    out.push(el("p", {}, "Gradient step: θ ", el("b", {}, vec(o.theta)), " → ", el("b", {}, vec(o.theta_next)),
      isNumArray(o.gradient) ? el("span", { class: "muted" }, ` (gradient ${vec(o.gradient)}${isNum(o.step) ? `, step ${fmt(o.step)}` : ""})`) : null));
  }
  if (isNum(o.loss)) out.push(el("p", {}, "Loss ", el("b", {}, fmt(o.loss, 6))));
  if (isNum(o.n_reports)) out.push(el("p", { class: "muted" }, `${o.n_reports} reports aggregated`));
  if (out.length === 0) out.push(...drawAnyOutput(o));
  out.push(el("details", {}, el("summary", {}, "output as JSON"), el("pre", {}, JSON.stringify(o, null, 1))));
  return out;
}

// an output none of the fields above names (a plugin protocol's own): its numeric lists as bar
// charts (the first two), its numbers as facts
function drawAnyOutput(o) {
  const out = [];
  const lists = Object.keys(o).filter((k) => isNumArray(o[k]) && o[k].length > 1).slice(0, 2);
  for (const k of lists) out.push(barChart({ title: `${k} (${o[k].length} values)`, values: o[k].slice(0, 64), labels: o[k].slice(0, 64).map((_, i) => String(i)), note: o[k].length > 64 ? "first 64" : undefined }));
  const numbers = Object.keys(o).filter((k) => isNum(o[k]));
  if (numbers.length) out.push(el("dl", { class: "facts", "data-testid": "output-numbers" }, numbers.map((k) => [el("dt", {}, k), el("dd", {}, fmt(o[k], 6))])));
  return out;
}

// ------------------------------------------------------------------ campaigns (docs/campaigns.md)

function isEnded(phase) { return ENDED.includes(phase); }

// the error of an estimate against the truth, in the norm of the error bar ("abs", "l2", "linf")
function errorOf(est, truth, norm) {
  if (isNum(est) && isNum(truth)) return Math.abs(est - truth);
  if (!isNumArray(est) || !isNumArray(truth) || est.length !== truth.length) return null;
  const d = est.map((x, i) => Math.abs(x - truth[i]));
  return norm === "l2" ? Math.sqrt(d.reduce((a, x) => a + x * x, 0)) : Math.max(...d);
}

// where a campaign stands on its schedule: opened, ended, the open occurrence, the next one due
function schedule_(c) {
  const occ = c.occurrences, last = occ[occ.length - 1];
  const ended = occ.filter((o) => isEnded(o.phase)).length;
  const open = last && !isEnded(last.phase) ? last : null;
  const complete = occ.length >= c.times && !open;
  const nextIndex = open ? null : occ.length < c.times ? occ.length : null;
  return { ended, open, complete, nextIndex, nextDay: nextIndex === null ? null : c.start + nextIndex * c.every };
}

// a float's rounding residue shown as 0 (−0.3 + 3·0.1 is 5.6e-17, not a value a person means)
function clean(x) { return isNum(x) && Math.abs(x) < 1e-12 ? 0 : x; }
function cleanAll(v) { return Array.isArray(v) ? v.map(clean) : clean(v); }

// a campaign's own status: pending before its first occurrence, running until its last has ended
function campaignStatus(c, s) { return s.complete ? "finished" : c.occurrences.length ? "running" : "pending"; }

function days(x) { return `day ${fmt(x, 4)}`; }
function every(c) { return c.every === 1 ? "daily" : `every ${fmt(c.every)} d`; }
function budgetText(c) {
  if (c.budget_epsilon === null || c.budget_epsilon === undefined) return "no budget (unlimited)";
  const at = c.budget_delta === null || c.budget_delta === undefined ? "" : ` at δ ${c.budget_delta}`;
  return `ε ${fmt(c.budget_epsilon)}${at} per device ${c.budget_period === null || c.budget_period === undefined ? "over its lifetime" : c.budget_period === 1 ? "per day" : `per ${fmt(c.budget_period)} d`}`;
}

function campaignRows(campaigns) {
  return campaigns.map((c) => {
    const s = schedule_(c);
    const status = campaignStatus(c, s);
    return el("tr", { class: "link", "data-campaign": c.id, onclick: () => { location.hash = `#/campaign/${c.id}`; } },
      el("td", {}, el("a", { href: `#/campaign/${c.id}` }, c.name || c.id.slice(0, 12))),
      el("td", {}, c.protocol),
      el("td", {}, badge(status)),
      el("td", { class: "num" }, `${s.ended} / ${c.times}`),
      el("td", {}, bar(s.ended / c.times, s.complete)),
      el("td", { class: "muted" }, `${every(c)} · clock ${c.clock === null ? "–" : days(c.clock)}`),
      el("td", { class: "muted" }, budgetText(c)));
  });
}

function campaignTable(campaigns) {
  return el("table", { id: "campaign-list" }, el("thead", {}, el("tr", {}, ["campaign", "protocol", "status", "occurrences", "progress", "schedule", "budget"].map((h) => el("th", { class: h === "occurrences" ? "num" : null }, h)))),
    el("tbody", {}, campaignRows(campaigns)));
}

function campaignListPage() {
  let timer = null, stopped = false;
  fill(app, el("div", { class: "card" }, el("h2", {}, "Campaigns"), el("p", { class: "muted" }, "Loading…")));
  async function refresh() {
    try {
      const { campaigns } = await api("/v1/campaigns");
      campaigns.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
      fill(app, el("div", { class: "card" }, el("h2", {}, `Campaigns (${campaigns.length})`),
        campaigns.length ? campaignTable(campaigns) : el("p", { class: "muted" }, "No campaigns yet: run one with `fedldp campaign run FILE --server URL`.")));
    } catch (e) {
      fill(app, el("div", { class: "card error" }, `Could not list the campaigns: ${e.message}`));
    }
    if (!stopped) timer = setTimeout(refresh, 2000);
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}

// ticks at round numbers (1, 2 or 5 times a power of ten apart) over [lo, hi]
function dayTicks(lo, hi, count = 6) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => (hi - lo) / s <= count + 1) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push(Number(t.toPrecision(12)));
  return out;
}

// points over simulated days: [{x, y, half, truth, status}]; the estimate with its error bar, the
// truth (a dashed line with hollow markers), the days still to come shaded
function overTimeChart({ title, points, xlo, xhi, ylabel, width = 1100, height = 300, now, showTruth = true, testid }) {
  const svg = frame(title, width, height);
  if (testid) svg.setAttribute("data-testid", testid);
  const left = 64, right = width - 16, top = 28, bottom = height - 44;
  const ys = [];
  for (const p of points) {
    if (isNum(p.y)) ys.push(p.y - (p.half || 0), p.y + (p.half || 0));
    if (showTruth && isNum(p.truth)) ys.push(p.truth);
  }
  const lo = ys.length ? Math.min(...ys) : 0, hi = ys.length ? Math.max(...ys) : 1;
  const pad = (hi - lo) * 0.06 || Math.abs(hi) * 0.1 || 1;
  const yticks = dayTicks(lo - pad, hi + pad, 5);
  const y = scale(Math.min(lo - pad, yticks[0]), Math.max(hi + pad, yticks[yticks.length - 1]), bottom, top);
  const span = xhi - xlo || 1;
  const x = scale(xlo - span * 0.02, xhi + span * 0.02, left, right);
  for (const v of yticks) {
    svg.append(sv("line", { x1: left, x2: right, y1: y(v), y2: y(v), class: "gridline" }));
    svg.append(sv("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(clean(v), 3)));
  }
  if (y.lo < 0 && y.hi > 0) svg.append(sv("line", { x1: left, x2: right, y1: y(0), y2: y(0), class: "axis" }));
  if (isNum(now) && now < xhi) {
    const from = Math.max(left, x(now) - 10);
    svg.append(sv("rect", { x: from, y: top, width: Math.max(0, right - from), height: bottom - top, fill: "#f3f5f8" }));
    svg.append(sv("text", { x: right - 4, y: top + 12, "text-anchor": "end" }, "still to come"));
  }
  svg.append(sv("line", { x1: left, x2: right, y1: bottom, y2: bottom, class: "axis" }));
  for (const t of dayTicks(xlo, xhi)) {
    svg.append(sv("line", { x1: x(t), x2: x(t), y1: bottom, y2: bottom + 4, class: "axis" }));
    svg.append(sv("text", { x: x(t), y: bottom + 16, "text-anchor": "middle" }, fmt(t, 4)));
  }
  svg.append(sv("text", { x: (left + right) / 2, y: bottom + 34, "text-anchor": "middle" }, "simulated day"));
  if (ylabel) svg.append(sv("text", { x: 14, y: (top + bottom) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(top + bottom) / 2})` }, ylabel));
  const truth = showTruth ? points.filter((p) => isNum(p.truth)) : [];
  if (truth.length > 1) svg.append(sv("polyline", { points: truth.map((p) => `${x(p.x)},${y(p.truth)}`).join(" "), fill: "none", stroke: COLORS[1], "stroke-width": 1.6, "stroke-dasharray": "5 3" }));
  const w = Math.max(3, Math.min(8, ((right - left) / Math.max(1, points.length)) * 0.25));
  for (const p of points) {
    if (isNum(p.y) && isNum(p.half)) {
      svg.append(sv("line", { x1: x(p.x), x2: x(p.x), y1: y(p.y - p.half), y2: y(p.y + p.half), stroke: COLORS[0], "stroke-width": 1.4, opacity: 0.8 }));
      for (const v of [p.y - p.half, p.y + p.half]) svg.append(sv("line", { x1: x(p.x) - w, x2: x(p.x) + w, y1: y(v), y2: y(v), stroke: COLORS[0], "stroke-width": 1.4, opacity: 0.8 }));
    }
  }
  for (const p of truth) svg.append(sv("circle", { cx: x(p.x), cy: y(p.truth), r: 3, fill: "#fff", stroke: COLORS[1], "stroke-width": 1.5 }, sv("title", {}, `${days(p.x)} truth ${fmt(p.truth, 6)}`)));
  for (const p of points) {
    if (!isNum(p.y)) continue;
    svg.append(sv("circle", { cx: x(p.x), cy: y(p.y), r: 3.6, fill: COLORS[0], "data-occurrence": p.index },
      sv("title", {}, `occurrence ${p.index}, ${days(p.x)}: ${fmt(p.y, 6)}${isNum(p.half) ? " ± " + fmt(p.half, 4) : ""}${isNum(p.truth) ? ", truth " + fmt(p.truth, 6) : ""}`)));
  }
  // an occurrence still running (or failed) is marked on the axis
  for (const p of points) {
    if (isNum(p.y)) continue;
    const color = p.status === "failed" || p.status === "cancelled" ? COLORS[4] : COLORS[7];
    svg.append(sv("path", { d: `M${x(p.x)},${bottom - 2} l-4,-7 l8,0 z`, fill: color }, sv("title", {}, `occurrence ${p.index}, ${days(p.x)}: ${p.status}`)));
  }
  return svg;
}

function campaignPage(id) {
  const st = { view: null, component: 0, stopped: false };
  const parts = {
    head: el("div", { class: "card" }), chart: el("div", { class: "card" }), error: el("div", { class: "card" }),
    table: el("div", { class: "card" }), budget: el("div", { class: "card" }), facts: el("div", { class: "card" }),
  };
  fill(app, parts.head, parts.chart, el("div", { class: "grid" }, parts.error, parts.budget), parts.table, parts.facts);
  let timer = null;

  function dims() {
    const o = st.view.occurrences.find((o) => isNumArray(o.estimate) || isNumArray(o.truth));
    return o ? (isNumArray(o.estimate) ? o.estimate : o.truth).length : 0;
  }
  const pick = (v) => (isNumArray(v) ? v[st.component] : v);

  function points(c) {
    return c.occurrences.map((o) => ({ index: o.index, x: o.day, status: o.phase, y: pick(o.estimate), truth: pick(o.truth),
      half: o.error_bar && (o.error_bar.norm === "abs" || o.error_bar.norm === "linf") ? o.error_bar.half_width : null }));
  }

  const render = {
    head(c, s) {
      const status = campaignStatus(c, s);
      const where = s.complete
        ? `complete: all ${c.times} occurrences ran`
        : s.open
          ? `occurrence ${s.open.index} (${days(s.open.day)}) is ${s.open.phase}`
          : `next due: occurrence ${s.nextIndex} on ${days(s.nextDay)} (opened when the driver asks for it)`;
      fill(parts.head,
        el("div", { class: "headline" }, el("a", { href: "#/campaigns" }, "← campaigns"), el("h1", {}, c.name || "campaign"), el("span", { class: "id" }, c.id),
          el("span", { id: "campaign-status" }, badge(status)), s.complete ? el("span", { class: "live", title: "the page asks the server every 5 s" }, "complete") : el("span", { class: "live on", title: "the page asks the server every second" }, "live")),
        el("p", {}, el("b", {}, c.protocol), ` · ${every(c)}, ${c.times} times from ${days(c.start)} · clock: `,
          el("b", { id: "campaign-clock" }, c.clock === null ? "not started" : days(c.clock)), " · ", el("span", { id: "campaign-next" }, where)),
        el("p", {}, el("b", { id: "occurrences-ended", "data-value": s.ended }, String(s.ended)), ` of ${c.times} occurrences ended`), bar(s.ended / c.times, s.complete));
    },
    chart(c, s) {
      const pts = points(c);
      const known = pts.some((p) => isNum(p.truth));
      const n = dims();
      const xhi = c.start + (c.times - 1) * c.every;
      const bars = c.occurrences.filter((o) => o.error_bar).map((o) => o.error_bar);
      const barNote = bars.length ? `${bars[0].kind}, level ${fmt(bars[0].level)}${bars[0].norm === "l2" ? "; an l2 bar bounds the whole vector, drawn in the error chart only" : ""}` : "none yet";
      const select = n > 1 ? el("label", { class: "small muted" }, "component ",
        el("select", { id: "component", onchange: (e) => { st.component = Number(e.target.value); draw(); } },
          [...Array(Math.min(n, 64)).keys()].map((k) => el("option", { value: k, selected: k === st.component }, String(k))))) : null;
      const now = s.complete ? null : s.open ? s.open.day : s.nextDay;
      fill(parts.chart, el("h2", {}, "Estimates over time"), select,
        overTimeChart({ title: `Each occurrence's estimate${n > 1 ? ` (component ${st.component})` : ""} with its error bar${known ? ", against the day's truth" : ""}`,
          points: pts, xlo: c.start, xhi: xhi > c.start ? xhi : c.start + c.every, ylabel: n > 1 ? `component ${st.component}` : "estimate", now, testid: "estimates-chart" }),
        el("div", { class: "legend" },
          el("span", {}, el("i", { style: `background:${COLORS[0]}` }), "estimate ± error bar"),
          known ? el("span", {}, el("i", { style: `border:2px dashed ${COLORS[1]};background:#fff` }), "truth (declared by the driver)") : null,
          el("span", {}, el("i", { style: `background:${COLORS[7]}` }), "running, no estimate yet"),
          el("span", {}, el("i", { style: `background:${COLORS[4]}` }), "failed or cancelled")),
        el("p", { class: "muted small", id: "truth-note" }, known
          ? `Error bars: ${barNote}. The truth is the day's law's mean as the driver simulating the population declared it (PUT …/occurrences/{k}/truth); the server does not see the population.`
          : `Error bars: ${barNote}. No truth declared: the server does not see the population, so it shows the estimates alone (\`fedldp campaign run\` declares each day's truth).`));
    },
    error(c) {
      const rows = c.occurrences.map((o) => ({ o, err: errorOf(o.estimate, o.truth, o.error_bar ? o.error_bar.norm : "linf") })).filter((r) => isNum(r.err));
      if (!rows.length) {
        fill(parts.error, el("h2", {}, "Error against the truth"), el("p", { class: "muted" }, c.occurrences.some((o) => o.truth !== null)
          ? "Drawn once an occurrence with a declared truth has finished."
          : "Needs the truth of each day, which this campaign's driver has not declared."));
        return;
      }
      const norm = rows.find((r) => r.o.error_bar)?.o.error_bar.norm || (isNumArray(rows[0].o.estimate) ? "linf" : "abs");
      const series = [{ name: norm === "abs" ? "|estimate − truth|" : `‖estimate − truth‖ (${norm})`, values: rows.map((r) => r.err), color: COLORS[4] }];
      if (rows.some((r) => r.o.error_bar)) series.push({ name: "error-bar half-width", values: rows.map((r) => (r.o.error_bar ? r.o.error_bar.half_width : null)), color: COLORS[0] });
      const inside = rows.filter((r) => r.o.error_bar && r.err <= r.o.error_bar.half_width).length;
      const withBar = rows.filter((r) => r.o.error_bar).length;
      fill(parts.error, el("h2", {}, "Error against the truth"),
        lineChart({ title: "Each occurrence's error", series, xs: rows.map((r) => r.o.day), xlabel: "simulated day", width: 540 }), legend(series),
        withBar ? el("p", { class: "muted", id: "covered" }, `${inside} of ${withBar} error bars cover the truth`) : null);
    },
    table(c, s) {
      const body = c.occurrences.map((o) => {
        const half = o.error_bar ? o.error_bar.half_width : null;
        const err = errorOf(o.estimate, o.truth, o.error_bar ? o.error_bar.norm : "linf");
        // a vector: its first 4 components, wrapped, so the row keeps its error and study
        const value = (v) => (isNumArray(v) ? `[${cleanAll(v).slice(0, 4).map((x) => fmt(x, 3)).join(", ")}${v.length > 4 ? ", …" : ""}]` : fmt(clean(v), 6));
        const wide = isNumArray(o.estimate) || isNumArray(o.truth) ? "white-space:normal;min-width:140px" : null;
        return el("tr", { "data-occurrence": o.index, class: "link", onclick: () => { location.hash = `#/study/${o.study_id}`; } },
          el("td", { class: "num" }, String(o.index)), el("td", { class: "num" }, fmt(o.day, 6)), el("td", {}, badge(o.phase)),
          el("td", { class: "num" }, String(o.devices_charged)), el("td", { class: "num" }, fmt(o.epsilon_charged)),
          el("td", { class: "num", style: wide, title: o.estimate === null ? null : JSON.stringify(o.estimate), "data-testid": "estimate", "data-value": o.estimate === null ? "" : JSON.stringify(o.estimate) }, o.estimate === null ? "–" : value(o.estimate)),
          el("td", { class: "num" }, half === null ? "–" : `± ${fmt(half)}`),
          el("td", { class: "num", style: wide, title: o.truth === null ? null : JSON.stringify(o.truth) }, o.truth === null ? "–" : value(o.truth)),
          el("td", { class: "num" }, isNum(err) ? fmt(err) : "–"),
          el("td", {}, el("a", { href: `#/study/${o.study_id}` }, o.study_id.slice(0, 8))));
      });
      const todo = s.nextIndex === null ? [] : [...Array(Math.min(3, c.times - s.nextIndex)).keys()].map((k) => s.nextIndex + k);
      for (const k of todo) body.push(el("tr", { class: "muted", "data-scheduled": k }, el("td", { class: "num" }, String(k)), el("td", { class: "num" }, fmt(c.start + k * c.every, 6)),
        el("td", {}, badge("pending")), el("td", { colspan: 7, class: "muted" }, k === s.nextIndex ? "next due" : "scheduled")));
      const more = s.nextIndex === null ? 0 : c.times - s.nextIndex - todo.length;
      fill(parts.table, el("h2", {}, "Occurrences"),
        el("div", { style: "max-height:520px;overflow:auto" }, el("table", { id: "occurrences" },
          el("thead", {}, el("tr", {}, ["#", "day", "status", "devices", ["ε", " charged"], "estimate", "error bar", "truth", "error", "study"].map((h, i) => el("th", { class: i === 2 || i === 9 ? null : "num" },
            Array.isArray(h) ? [el("span", { style: "text-transform:none" }, h[0]), h[1]] : h)))),
          el("tbody", {}, body))),
        more > 0 ? el("p", { class: "muted small" }, `… ${more} more scheduled, the last on ${days(c.start + (c.times - 1) * c.every)}`) : null);
    },
    budget(c) {
      const sp = c.spent;
      const charged = c.occurrences.map((o) => o.devices_charged);
      const body = [el("h2", {}, "Device budgets"), el("p", {}, `Budget: ${budgetText(c)}.`)];
      if (!sp) { body.push(el("p", { class: "muted" }, "No device charged yet.")); fill(parts.budget, ...body); return; }
      body.push(el("p", { id: "spent-summary" }, `${sp.devices} devices charged · cumulative ε per device: mean ${fmt(sp.mean)}, largest ${fmt(sp.max)} · ε charged in all ${fmt(sp.total)}`));
      const labels = sp.edges.slice(0, -1).map((e, i) => `${fmt(e, 2)}–${fmt(sp.edges[i + 1], 2)}`);
      body.push(barChart({ title: "Devices by cumulative ε spent over the campaign", values: sp.counts, labels, color: COLORS[2], note: "cumulative ε", width: 540 }));
      if (charged.length > 1) body.push(lineChart({ title: "Devices charged per occurrence (admitted by their budget)", series: [{ name: "devices", values: charged, color: COLORS[2] }], xs: c.occurrences.map((o) => o.day), xlabel: "simulated day", width: 540 }));
      fill(parts.budget, ...body);
    },
    facts(c) {
      const rows = [["id", c.id], ["protocol", c.protocol], ["parameters", JSON.stringify(c.params)], ["seed (occurrence 0)", c.seed],
        ["schedule", `${every(c)}, ${c.times} times from ${days(c.start)}`], ["budget", budgetText(c)], ["created", new Date(c.created_at).toLocaleString()]];
      fill(parts.facts, el("h2", {}, "Campaign"), el("dl", { class: "facts" }, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])));
    },
  };

  function draw() {
    const c = st.view, s = schedule_(c);
    for (const n of Object.keys(render)) render[n](c, s);
  }

  async function refresh() {
    try {
      const view = await api(`/v1/campaigns/${id}`);
      const changed = !st.view || JSON.stringify(view) !== JSON.stringify(st.view);
      st.view = view;
      if (changed) draw();
    } catch (e) {
      if (!st.view) { fill(app, el("div", { class: "card error" }, `Campaign ${id}: ${e.message}`), el("a", { href: "#/campaigns" }, "← campaigns")); return; }
    }
    if (!st.stopped) timer = setTimeout(refresh, st.view && schedule_(st.view).complete ? 5000 : 1000);
  }
  refresh();
  return () => { st.stopped = true; clearTimeout(timer); };
}

// ------------------------------------------------------------------ routing

let leave = null;
function route() {
  if (leave) leave();
  const m = location.hash.match(/^#\/study\/([0-9a-zA-Z]+)/);
  const c = location.hash.match(/^#\/campaign\/([0-9a-zA-Z]+)/);
  leave = m ? studyPage(m[1]) : c ? campaignPage(c[1]) : location.hash.startsWith("#/campaigns") ? campaignListPage() : listPage();
}
window.addEventListener("hashchange", route);
route();
