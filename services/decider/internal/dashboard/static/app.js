// The Switchboard dashboard: one page per hash route, each drawn from the
// JSON under api/. No inline script or style (the Content-Security-Policy
// forbids them) and nothing from another origin.
"use strict";

const API = "api/";
const main = document.getElementById("main");
let me = null; // the session: {role, subject, tenant, expires}

const pages = {
  operator: [["routing", "Routing"], ["limits", "Limits"]],
  tenant: [["calls", "Calls"], ["spend", "Spend"]],
};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k !== undefined && k !== null) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, opts) {
  const r = await fetch(API + path, Object.assign({ credentials: "same-origin" }, opts));
  if (r.status === 204) return null;
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new APIError(r.status, (body.error && body.error.message) || r.statusText);
  return body;
}

function fmtMS(v) { return v === null || v === undefined ? "–" : v < 1000 ? Math.round(v) + " ms" : (v / 1000).toFixed(2) + " s"; }
function fmtUSD(v) { return v === null || v === undefined ? "–" : "$" + (v < 0.01 && v > 0 ? v.toPrecision(3) : v.toFixed(v < 1 ? 4 : 2)); }
function fmtPrice(v) { return v === null || v === undefined ? "–" : "$" + v; }
function fmtPct(v) { return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%"; }
function fmtNum(v) { return v === null || v === undefined ? "–" : v.toLocaleString("en"); }
function fmtTime(s) { return new Date(s).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"); }

function table(id, head, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function chart(id, title, times, series, yLabel, yFormat) {
  const box = el("div", { class: "chart", id });
  const data = [times, ...series.map((s) => s.values)];
  const palette = ["#2557d6", "#d6592a", "#2a9d5c", "#9b3fc1", "#c19b1f", "#1fa3c1"];
  const opts = {
    title, width: 460, height: 220,
    scales: { x: { time: true } },
    // A line needs two figures in a row: a series with few figures (an
    // endpoint's first, between gaps) shows its points, or it would draw nothing.
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: false,
      points: { show: s.values.filter((v) => v !== null && v !== undefined).length < 3 } }))],
    axes: [{}, { label: yLabel, size: 70, values: (u, vals) => vals.map(yFormat || ((v) => v)) }],
  };
  // uPlot is loaded with defer before this script.
  new uPlot(opts, data, box); // eslint-disable-line no-new, no-undef
  return box;
}

function setNav(current) {
  const nav = document.getElementById("nav");
  nav.replaceChildren(...(me ? pages[me.role] : []).map(([id, name]) =>
    el("a", { href: "#" + id, class: id === current ? "current" : "" }, name)));
  document.getElementById("who").textContent = me ? (me.role === "operator" ? "operator " + me.subject : "tenant " + me.tenant + " (key " + me.subject + ")") : "";
  document.getElementById("signout").hidden = !me;
}

function show(page, ...kids) {
  main.dataset.page = page;
  main.replaceChildren(...kids.filter((k) => k !== null && k !== undefined));
}

function done() { main.dataset.loaded = "true"; }

function fail(err) {
  main.append(el("p", { class: "error", id: "page-error" }, err.message));
  done();
}

// signin is the sign-in form: an operator token or a tenant's API key.
function signin(message) {
  setNav("");
  const input = el("input", { type: "password", id: "credential", name: "credential", autocomplete: "off", placeholder: "operator token or API key" });
  const msg = el("p", { class: "error", id: "signin-error" }, message || "");
  const form = el("form", { class: "signin", id: "signin" },
    el("h2", {}, "Sign in"),
    el("p", { class: "muted" }, "Operators sign in with their operator token; tenants with one of their API keys."),
    input, el("button", { type: "submit", id: "signin-submit" }, "Sign in"), msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    try {
      me = await api("session", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ credential: input.value }) });
      input.value = "";
      const target = "#" + pages[me.role][0][0];
      if (location.hash === target) route(); else location.hash = target; // hashchange routes
    } catch (e) {
      input.value = "";
      msg.textContent = e.message;
    }
  });
  show("signin", form);
  done();
}

// routing: per model, each endpoint's figures now, its first-token time
// per size bucket over time, and the choice per bucket with its reasons.
async function routing() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const ov = await api("operator/overview?tenant=" + encodeURIComponent(params.get("tenant") || ""));
  const models = ov.models.map((m) => m.id);
  const model = models.includes(params.get("model")) ? params.get("model") : models[0];
  const tenant = ov.tenant;
  const pick = (name, values, cur) => el("select", { id: "pick-" + name, onchange: (ev) => {
    const p = new URLSearchParams({ model, tenant }); p.set(name, ev.target.value); location.hash = "#routing?" + p;
  } }, values.map((v) => el("option", { value: v, selected: v === cur }, v)));
  const m = ov.models.find((x) => x.id === model);
  const [hist, ex] = await Promise.all([
    api("operator/ttft?model=" + encodeURIComponent(model)),
    api("operator/choices?model=" + encodeURIComponent(model) + "&tenant=" + encodeURIComponent(tenant || "")),
  ]);
  const endpoints = table("endpoints-table",
    ["endpoint", "input $/M", "cached $/M", "output $/M", "traffic share", "requests/min", ...ov.buckets.map((b) => "TTFT " + b), "429 rate", "error rate", "cool-down until"],
    m.endpoints.map((e) => el("tr", {},
      el("td", {}, e.id), el("td", { class: "num" }, fmtPrice(e.price_input)), el("td", { class: "num" }, fmtPrice(e.price_cached_input)),
      el("td", { class: "num" }, fmtPrice(e.price_output)),
      el("td", { class: "num" }, bar(e.traffic_share), " ", (100 * e.traffic_share).toFixed(0) + "%"),
      el("td", { class: "num" }, e.requests_per_minute.toFixed(1)),
      e.ttft_ms.map((t, i) => el("td", { class: "num", title: e.samples[i] + " samples" }, fmtMS(t))),
      el("td", { class: "num" }, fmtPct(e.rate_limited_rate)), el("td", { class: "num" }, fmtPct(e.error_rate)),
      el("td", {}, e.cooled_until ? fmtTime(e.cooled_until) : "–"))));
  const charts = el("div", { class: "charts", id: "ttft-charts" }, hist.buckets.map((b, i) =>
    chart("ttft-" + i, "first token, prompts " + b, hist.times, hist.series[i].map((s) => ({ label: s.endpoint, values: s.values })), "ms")));
  const byBucket = Object.fromEntries(ex.choices.map((c) => [c.bucket, c]));
  const choices = table("choices-table", ["bucket", "chosen endpoint", "reason", "explanation", "fallbacks", "hedge", "candidates"],
    (m.choices || []).map((c) => {
      const x = byBucket[c.bucket] || {};
      return el("tr", {},
        el("td", {}, c.bucket), el("td", {}, c.endpoint || el("span", { class: "error" }, c.unavailable || x.error || "none")), el("td", {}, c.reason),
        el("td", {}, c.summary), el("td", {}, (x.fallbacks || []).join(", ")), el("td", {}, x.hedge || ""),
        el("td", {}, (x.candidates || []).map((k) => el("div", {}, k.endpoint + ": " + fmtMS(k.ttft_ms) + ", " + fmtUSD(k.cost_usd) +
          (k.qualified ? "" : " (not qualified)") + (k.note ? " – " + k.note : "")))));
    }));
  show("routing",
    el("div", { class: "controls" }, "model", pick("model", models, model), "choices for tenant", pick("tenant", ov.tenants, tenant)),
    el("h2", {}, "Endpoints of " + model), endpoints,
    el("h2", {}, "Typical first-token time since " + (hist.times.length ? fmtTime(hist.times[0] * 1000) : "now") + " (sampled every " + hist.every_seconds + " s, the last point now)"), charts,
    el("h2", {}, "Where a request would go now, per prompt size (" + (tenant || "no tenant") + ")"), choices,
    el("p", { class: "muted" }, "Read on replica " + ov.replica + " at catalog revision " + ov.revision + "."));
  done();
}

function bar(share) {
  const b = el("span", { class: "bar" });
  b.style.width = Math.round(60 * share) + "px";
  return b;
}

// limits: the hedge budget, the broker's buckets and queues.
async function limits() {
  const l = await api("operator/limits");
  const h = l.hedge;
  const cards = el("div", { class: "cards", id: "hedge-cards" },
    el("div", { class: "card" }, "hedge spend today", el("b", {}, fmtUSD(h.spent_usd))),
    el("div", { class: "card" }, "daily hedge budget", el("b", {}, fmtUSD(h.daily_usd))),
    el("div", { class: "card" }, "hedges granted", el("b", {}, fmtNum(h.granted))),
    el("div", { class: "card" }, "hedges refused", el("b", {}, fmtNum(h.refused))));
  const buckets = table("buckets-table", ["scope", "key", "unit", "window", "limit from", "limit", "available", "level"],
    (l.buckets || []).map((b) => el("tr", {},
      el("td", {}, b.scope), el("td", {}, b.key), el("td", {}, b.unit), el("td", {}, b.window), el("td", {}, b.learned ? "provider headers" : "catalog"),
      el("td", { class: "num" }, b.limit < 0 ? "∞" : fmtNum(b.limit)), el("td", { class: "num" }, b.available < 0 && b.limit < 0 ? "∞" : fmtNum(Math.round(b.available * 100) / 100)),
      el("td", {}, bar(b.limit > 0 ? Math.max(0, Math.min(1, b.available / b.limit)) : 0)))));
  const queues = table("queues-table", ["class", "tenant", "waiting"],
    (l.queues || []).map((q) => el("tr", {}, el("td", {}, q.class), el("td", {}, q.tenant), el("td", { class: "num" }, q.depth))));
  show("limits", el("p", { class: "muted" }, "As the broker's owner " + (l.owner || "(none yet)") + " holds them: " +
      fmtNum(l.open_reservations) + " open reservations, " + fmtNum(l.queued_total) + " requests queued so far, " + fmtNum(l.timed_out_in_queue) + " timed out in a queue."),
    el("h2", {}, "Hedge budget"), cards, el("h2", {}, "Rate-limit buckets" + (l.total_buckets > (l.buckets || []).length ? " (the first " + l.buckets.length + " of " + l.total_buckets + ")" : "")),
    (l.buckets || []).length ? buckets : el("p", { class: "muted", id: "buckets-empty" }, "The catalog sets no limits and none was learned from a provider."),
    el("h2", {}, "Admission queues"), (l.queues || []).length ? queues : el("p", { class: "muted", id: "queues-empty" }, "No request is waiting."));
  done();
}

// calls: the tenant's calls, newest first, filtered and paged.
async function calls() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const q = new URLSearchParams();
  for (const k of ["model", "status", "cursor"]) if (params.get(k)) q.set(k, params.get(k));
  q.set("limit", params.get("limit") || "25");
  const page = await api("tenant/calls?" + q);
  const model = el("input", { id: "filter-model", value: params.get("model") || "", placeholder: "any model" });
  const status = el("select", { id: "filter-status" }, ["", "ok", "failed", "interrupted", "cancelled"].map((s) =>
    el("option", { value: s, selected: s === (params.get("status") || "") }, s || "any status")));
  const apply = (cursor) => {
    const p = new URLSearchParams();
    if (model.value) p.set("model", model.value);
    if (status.value) p.set("status", status.value);
    if (cursor) p.set("cursor", cursor);
    p.set("limit", q.get("limit"));
    location.hash = "#calls?" + p;
  };
  const rows = page.calls.map((c) => el("tr", { "data-id": c.id },
    el("td", {}, fmtTime(c.time)), el("td", {}, c.model), el("td", {}, c.provider), el("td", {}, c.status + (c.http_status ? " " + c.http_status : "")),
    el("td", {}, c.attempts ? c.attempts.map((a) => el("div", {}, a.provider + " " + a.outcome + (a.hedge ? " (hedge)" : ""))) : "–"),
    el("td", {}, c.hedged ? "won by " + c.hedge_winner : "–"),
    el("td", { class: "num" }, fmtNum(c.input_tokens)), el("td", { class: "num" }, fmtNum(c.cached_input_tokens)), el("td", { class: "num" }, fmtNum(c.output_tokens)),
    el("td", { class: "num" }, fmtUSD(c.cost_usd)), el("td", { class: "num" }, fmtMS(c.ttft_ms)), el("td", { class: "num" }, fmtMS(c.duration_ms))));
  show("calls",
    el("div", { class: "controls" }, "model", model, "status", status,
      el("button", { type: "button", id: "filter-apply", onclick: () => apply("") }, "Filter")),
    el("h2", {}, "Calls of " + page.tenant),
    table("calls-table", ["time", "model", "provider", "status", "attempts", "hedge", "input", "cached", "output", "cost", "first token", "duration"], rows),
    page.calls.length ? null : el("p", { class: "muted", id: "calls-empty" }, "No calls match."),
    el("div", { class: "controls" },
      params.get("cursor") ? el("button", { type: "button", id: "page-first", onclick: () => apply("") }, "First page") : null,
      page.next_cursor ? el("button", { type: "button", id: "page-next", onclick: () => apply(page.next_cursor) }, "Next page") : null));
  done();
}

// spend: the tenant's spend over time.
async function spend() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const hours = params.get("hours") || "24";
  const s = await api("tenant/spend?hours=" + encodeURIComponent(hours));
  const pick = el("select", { id: "pick-hours", onchange: (ev) => { location.hash = "#spend?hours=" + ev.target.value; } },
    [["1", "last hour"], ["24", "last day"], ["168", "last week"]].map(([v, n]) => el("option", { value: v, selected: v === hours }, n)));
  show("spend",
    el("div", { class: "controls" }, pick),
    el("h2", {}, "Spend of " + s.tenant), el("div", { class: "cards" },
      el("div", { class: "card", id: "spend-total" }, "total", el("b", {}, fmtUSD(s.total_usd))),
      el("div", { class: "card" }, "calls", el("b", {}, fmtNum(s.calls.reduce((a, b) => a + b, 0))))),
    el("div", { class: "charts" },
      chart("spend-chart", "USD per " + (s.bin_seconds === 60 ? "minute" : "hour"), s.times, [{ label: "cost", values: s.cost_usd }], "USD", (v) => (v === 0 ? "0" : v.toPrecision(2))),
      chart("calls-chart", "calls per " + (s.bin_seconds === 60 ? "minute" : "hour"), s.times, [{ label: "calls", values: s.calls }], "calls")),
    s.truncated ? el("p", { class: "muted" }, "Only the latest calls are counted.") : null);
  done();
}

const views = { routing, limits, calls, spend };

async function route() {
  main.dataset.loaded = "false";
  const name = (location.hash.slice(1).split("?")[0]) || "";
  if (!me) {
    const who = await api("session").catch((e) => ({ role: "", message: e.message }));
    if (!who.role) return signin(name ? who.message : "");
    me = who;
  }
  const allowed = pages[me.role].map(([id]) => id);
  if (!allowed.includes(name)) {
    if (views[name]) {
      setNav("");
      show("forbidden", el("p", { class: "error", id: "page-error" }, "This page is not for a " + me.role + " sign-in."));
      return done();
    }
    location.hash = "#" + allowed[0];
    return;
  }
  setNav(name);
  show(name, el("p", { class: "muted" }, "Loading…"));
  try {
    await views[name]();
  } catch (e) {
    if (e.status === 401) { me = null; return signin(e.message); }
    show(name);
    fail(e);
  }
}

document.getElementById("signout").addEventListener("click", async () => {
  await api("session", { method: "DELETE" }).catch(() => null);
  me = null;
  location.hash = "";
  signin("");
});
window.addEventListener("hashchange", route);
route();
