// fleetgate dashboard: plain DOM, no framework. Every fact comes from the admin API;
// every value is put on the page as text (textContent), never as HTML.
(() => {
"use strict";

const KEY_STORAGE = "fleetgate.adminKey";
const state = { page: null, timers: [], models: [], deployments: [], keys: [] };

// ---- small helpers ---------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// a long id (`gpu-node-a.rack-12.example.internal`, `Qwen/Qwen3-Coder-30B`) may wrap after
// its dots and slashes, as it may after its hyphens; <wbr> adds nothing to a copied id
function breakable(text) {
  const parts = String(text).split(/(?<=[./_:@])/);
  return parts.flatMap((part, i) => (i ? [el("wbr", {}), part] : [part]));
}

function table(headers, rows, attrs) {
  return el("table", attrs, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

const fmt = {
  int: (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US")),
  secs(s) {
    if (s === null || s === undefined) return "–";
    if (s < 0.01) return `${(s * 1000).toFixed(s < 0.001 ? 2 : 1)} ms`;
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  },
  time(t) {
    const d = new Date(t * 1000);
    return d.toLocaleTimeString("en-GB", { hour12: false }) + "." +
      String(d.getMilliseconds()).padStart(3, "0");
  },
  date: (t) => new Date(t * 1000).toLocaleString("en-GB", { hour12: false }),
  money: (x) => (x === null || x === undefined ? "–" : Number(x).toPrecision(4).replace(/\.?0+$/, "")),
  json: (v) => JSON.stringify(v),
};

function statusClass(status) {
  if (status === null || status === undefined) return "bad";
  return status < 400 ? "ok" : status === 429 ? "warn" : "bad";
}

function adminKey() { return sessionStorage.getItem(KEY_STORAGE); }

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${adminKey()}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body !== undefined ? JSON.stringify(options.body) : undefined,
    cache: "no-store",
  });
  const text = await resp.text();
  const body = text ? JSON.parse(text) : null;
  if (resp.status === 401 || resp.status === 403) {
    if (!options.login) signOut(body && body.error ? body.error.message : "Signed out.");
    throw new ApiError(resp.status, body);
  }
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

function every(ms, fn) {
  const id = setInterval(() => { if (!document.hidden) fn(); }, ms);
  state.timers.push(id);
}

function clearTimers() {
  state.timers.forEach(clearInterval);
  state.timers = [];
}

function main() { return document.getElementById("main"); }

function showError(where, err) {
  where.replaceChildren(el("p", { class: "error", role: "alert" }, String(err.message || err)));
}

// ---- sign in ---------------------------------------------------------------------------
function signOut(message) {
  sessionStorage.removeItem(KEY_STORAGE);
  clearTimers();
  location.hash = "";
  renderLogin(message);
}

function renderLogin(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  const form = el("form", { id: "login", class: "card login", autocomplete: "off" },
    el("h1", {}, "Sign in"),
    el("p", {}, "The dashboard reads the admin API with the gateway's admin key. It is kept " +
      "for this browser tab only (session storage) and sent as a header, never in a URL."),
    el("label", {}, "Admin key ", el("input", { id: "login-key", type: "password", required: true })),
    el("button", { type: "submit" }, "Sign in"),
    el("p", { id: "login-error", class: "error", role: "alert" }, message || ""));
  form.addEventListener("submit", signIn);
  main().replaceChildren(form);
  form.querySelector("input").focus();
}

async function signIn(event) {
  event.preventDefault();
  const key = document.getElementById("login-key").value.trim();
  sessionStorage.setItem(KEY_STORAGE, key);
  try {
    await api("/admin/status", { login: true });
  } catch (err) {
    sessionStorage.removeItem(KEY_STORAGE);
    document.getElementById("login-error").textContent =
      err.status === 401 ? "That admin key is wrong." : err.message;
    return;
  }
  if (!location.hash || location.hash === "#" || location.hash === "#/") location.hash = "#/fleet";
  else route();
}

// ---- Fleet -----------------------------------------------------------------------------
function windowCell(w, estimate) {
  const parts = [el("b", {}, fmt.int(w.effective))];
  parts.push(el("span", { class: "muted" }, ` ${w.source || "unknown"}`));
  if (w.clamped_by) parts.push(el("span", { class: "tag warn", title: "clamped" }, `clamped by ${w.clamped_by}`));
  if (w.model_max && w.model_max !== w.effective) parts.push(el("span", { class: "muted" }, ` (model max ${fmt.int(w.model_max)})`));
  const title = Object.entries(w).map(([k, v]) => `${k}: ${fmt.json(v)}`).join("\n");
  return el("td", { title, class: "window" }, parts, estimate);
}

// the context estimate of a deployment: its tokenizer fit's source and evidence (the
// weights and the residual spread per kind of text in the tooltip), else its family
function estimateLine(e) {
  if (!e) return null;
  const fit = e.fit;
  if (!fit) return el("div", { class: "muted small estimate" }, `estimate: ${e.tokenizer_family} table`);
  const evidence = [];
  if (fit.probes) evidence.push(`${fmt.int(fit.probes)} probes`);
  evidence.push(`${fmt.int(fit.answers)} answers`);
  const spread = fit.spread && fit.spread["*"];
  const title = [`source: ${fit.source}`, `fingerprint: ${fit.fingerprint || "none"}`,
    "spread (true / estimate):",
    ...Object.entries(fit.spread || {}).map(([k, [lo, hi]]) => `  ${k}: ${lo}–${hi}`),
    "weights:", ...Object.entries(fit.weights || {}).map(([k, v]) => `  ${k}: ${v}`)].join("\n");
  return el("div", { class: "muted small estimate", title, dataset: { source: fit.source } },
    "estimate: ", el("b", {}, fit.source === "prior" ? `${e.tokenizer_family} table` : `fitted (${fit.source})`),
    ` · ${evidence.join(", ")}`, spread ? ` · ${spread[0]}–${spread[1]}` : "");
}

function healthCell(h, now, enabled) {
  const circuit = h.circuit || "closed";
  const cls = !h.available ? "bad" : circuit === "closed" ? "ok" : "warn";
  const parts = [el("span", { class: `tag ${cls}` }, circuit)];
  if (enabled === false) parts.push(el("span", { class: "tag bad" }, "disabled"));
  if (h.cooldown_until) {
    parts.push(el("span", { class: "muted" }, ` cooldown ${Math.max(0, h.cooldown_until - now).toFixed(0)} s`));
  }
  // why the circuit opened (`connect refused`, `503`, `timeout`), as the log says it
  if (h.open_cause && circuit !== "closed") parts.push(el("div", { class: "cause small" }, `opened by ${h.open_cause}`));
  else if (h.unavailable_reason && enabled !== false) parts.push(el("div", { class: "muted small" }, h.unavailable_reason));
  if (h.last_error) {
    parts.push(el("div", { class: "muted small last-error" },
      `last error ${h.last_error}, ${fmt.secs(Math.max(0, now - h.last_error_at))} ago`));
  }
  return el("td", { class: "health", title: `successes ${h.successes}, failures ${h.failures}, consecutive failures ${h.consecutive_failures}` }, parts);
}

function emaAge(ema, name) {
  for (const key of [`${name}_age_seconds`, "age_seconds"]) {
    if (ema[key] !== undefined && ema[key] !== null) return ` (${fmt.secs(ema[key])} ago)`;
  }
  return "";
}

const TPS_HINT = "Throughput is measured on streamed answers (tokens after the first, per " +
  "second); this deployment has served none yet.";

function emaCell(ema) {
  ema = ema || {};
  const tps = ema.tokens_per_second;
  const unmeasured = tps === null || tps === undefined;
  return el("td", { class: "ema" },
    el("div", {}, `TTFT ${fmt.secs(ema.ttft_seconds)}`, el("span", { class: "muted" }, emaAge(ema, "ttft"))),
    el("div", {}, `lat ${fmt.secs(ema.latency_seconds)}`, el("span", { class: "muted" }, emaAge(ema, "latency"))),
    unmeasured
      ? el("div", { class: "tps muted", title: TPS_HINT }, "– tok/s ", el("span", { class: "small" }, "(needs streamed traffic)"))
      : el("div", { class: "tps" }, `${tps.toFixed(1)} tok/s`, el("span", { class: "muted" }, emaAge(ema, "tokens_per_second"))));
}

function routeChain(routes) {
  return el("ol", { class: "chain" }, routes.map((r) => el("li", {},
    el("code", {}, r.target),
    r.deployments && r.deployments.length ? el("span", { class: "muted" }, ` → ${r.deployments.join(", ")}`) : el("span", { class: "tag bad" }, "no deployment"),
    r.key_label ? el("span", { class: "tag" }, `key ${r.key_label}`) : null,
    r.params ? el("span", { class: "muted" }, ` ${fmt.json(r.params)}`) : null)));
}

function actionsCell(d, act) {
  const toggle = el("button", { type: "button", class: `toggle${d.enabled === false ? "" : " danger"}`,
    title: d.enabled === false ? "Send it requests again" : "Send it nothing more (requests on it finish)",
    onclick: () => act.setEnabled(d, d.enabled === false) }, d.enabled === false ? "Enable" : "Disable");
  const out = d.health.circuit !== "closed" || d.health.cooldown_until;
  const reset = out ? el("button", { type: "button", class: "reset", title: "Close its circuit and end its cooldown now",
    onclick: () => act.reset(d) }, "Reset") : null;
  return el("td", { class: "actions" }, toggle, reset);
}

function renderFleet(data, filter, act) {
  const now = Date.now() / 1000;
  const providers = Object.fromEntries(data.providers.map((p) => [p.id, p]));
  const byModel = new Map();
  for (const d of data.deployments) {
    if (!byModel.has(d.model)) byModel.set(d.model, []);
    byModel.get(d.model).push(d);
  }
  const needle = filter.text.toLowerCase();
  const matches = (d) => (!filter.down || !d.health.available) && (!needle ||
    [d.id, d.model, d.provider, d.tier, d.upstream_model].some((x) => String(x || "").toLowerCase().includes(needle)));
  const down = data.deployments.filter((d) => !d.health.available).length;
  const sections = [];
  for (const model of data.models) {
    const deps = (byModel.get(model.id) || []).filter(matches);
    if (!deps.length) continue;
    const rows = deps.map((d) => {
      const p = providers[d.provider] || {};
      const caps = d.capabilities || [];
      const row = el("tr", { dataset: { deployment: d.id } },
        el("td", {}, el("b", {}, breakable(d.id)), el("div", { class: "muted small" }, breakable(d.upstream_model))),
        el("td", {}, breakable(d.provider), el("div", { class: "muted small" }, d.kind || p.kind || "")),
        el("td", { class: "tier" }, d.tier),
        windowCell(d.context_window, estimateLine(d.context_estimate)),
        healthCell(d.health, now, d.enabled),
        el("td", { class: "num" }, fmt.int(d.inflight)),
        emaCell(d.ema),
        el("td", { class: "num" }, d.price ? `${fmt.money(d.price.input)} / ${fmt.money(d.price.output)}` : "–"),
        el("td", { class: "caps", title: caps.join(", ") },
          el("div", { class: "clamp" }, caps.length ? `${caps.length}: ${caps.join(", ")}` : "–")),
        actionsCell(d, act));
      if (d.enabled === false) row.classList.add("disabled");
      return row;
    });
    sections.push(el("details", { open: true, class: "model", dataset: { model: model.id } },
      el("summary", {}, el("b", {}, model.id), el("span", { class: "muted" },
        ` ${deps.length} deployment${deps.length === 1 ? "" : "s"}, context ${fmt.int(model.context_length)}`)),
      table(["deployment", "provider", "tier", "window (source)", "health", "in flight",
        "EMAs", "price in / out", "capabilities", ""], rows, { class: "fleet" })));
  }
  const routesOf = (items, kind) => items.length ? el("section", { class: "card" },
    el("h2", {}, kind),
    items.map((v) => el("div", { class: "virtual", dataset: { name: v.name } },
      el("b", {}, v.name),
      v.response_mode && v.response_mode !== "any" ? el("span", { class: "tag" }, v.response_mode) : null,
      v.continue_on_default ? el("span", { class: "tag" }, "continue on default") : null,
      routeChain(v.routes)))) : null;
  return [
    el("p", { class: "summary" }, `config version ${data.version} · ${data.models.length} models · ` +
      `${data.deployments.length} deployments · ${data.providers.length} providers · `,
    el("span", { class: down ? "bad" : "ok" }, `${down} unavailable`)),
    ...sections,
    routesOf(data.virtual_models || [], "Virtual models"),
    routesOf(data.tiers || [], "Tiers"),
  ];
}

async function pageFleet(root) {
  const filter = el("input", { type: "search", placeholder: "filter deployments", id: "fleet-filter" });
  const down = el("input", { type: "checkbox", id: "fleet-down" });
  const body = el("div", { id: "fleet" }, el("p", { class: "muted" }, "loading…"));
  root.replaceChildren(el("div", { class: "toolbar" }, el("h1", {}, "Fleet"), filter,
    el("label", {}, down, " unavailable only")), body);
  let last = null;
  const draw = () => {
    if (!last) return;
    const closed = new Set([...body.querySelectorAll("details.model:not([open])")].map((d) => d.dataset.model));
    body.replaceChildren(...renderFleet(last, { text: filter.value, down: down.checked }, act).filter(Boolean));
    body.querySelectorAll("details.model").forEach((d) => { if (closed.has(d.dataset.model)) d.open = false; });
  };
  const load = async () => {
    try { last = await api("/admin/fleet"); draw(); } catch (err) { showError(body, err); }
  };
  const act = {
    async setEnabled(d, enabled) {
      try {
        await api(`/admin/deployments/${encodeURIComponent(d.id)}`, { method: "PATCH", body: { enabled } });
      } catch (err) { showError(body, err); return; }
      await load();
    },
    async reset(d) {
      try {
        await api(`/admin/deployments/${encodeURIComponent(d.id)}/reset`, { method: "POST" });
      } catch (err) { showError(body, err); return; }
      await load();
    },
  };
  filter.addEventListener("input", draw);
  down.addEventListener("change", draw);
  await load();
  every(3000, load);
}

// ---- Requests --------------------------------------------------------------------------
async function loadChoices() {
  try {
    const [fleet, keys] = await Promise.all([api("/admin/fleet"), api("/admin/keys")]);
    state.models = fleet.models.map((m) => m.id).concat((fleet.virtual_models || []).map((v) => v.name));
    state.deployments = fleet.deployments.map((d) => d.id);
    state.keys = keys.data;
  } catch (err) { /* the filters fall back to free text */ }
}

function select(id, label, options) {
  return el("label", {}, label, el("select", { id },
    el("option", { value: "" }, "any"),
    options.map(([value, text]) => el("option", { value }, text))));
}

function attemptRows(attempts) {
  return attempts.map((a) => el("tr", { class: statusClass(a.status) },
    el("td", { class: "num" }, a.idx),
    el("td", {}, a.deployment_id, el("div", { class: "muted small" }, `${a.provider_id} · ${a.upstream_model}`),
      a.wire ? el("div", { class: "muted small wire" }, a.wire === "native" ? "native" : `translated ${a.wire}`) : null),
    el("td", {}, el("span", { class: `tag ${statusClass(a.status)}` }, a.status === null ? "no answer" : a.status)),
    el("td", { class: "error-class" }, a.error_class || "–",
      a.failure ? el("div", { class: "muted small failure" }, a.failure) : null,
      a.finish ? el("div", { class: "muted small finish" }, `finish: ${a.finish}`) : null),
    el("td", { class: "num" }, fmt.secs(a.latency)),
    el("td", { class: "num" }, fmt.secs(a.ttft)),
    el("td", { class: "num" }, `${fmt.int(a.prompt_tokens)} / ${fmt.int(a.completion_tokens)}`),
    el("td", { class: "params" }, a.params ? fmt.json(a.params) : "–",
      a.dropped_params && a.dropped_params.length ? el("div", { class: "muted small" }, `dropped: ${a.dropped_params.join(", ")}`) : null,
      a.key_label ? el("div", { class: "muted small" }, `key ${a.key_label}`) : null),
    el("td", {}, a.scope || "–")));
}

function requestDetail(r) {
  const exact = r.context_exact ? "exact count" : "estimate";
  const usage = r.prompt_tokens === null || r.prompt_tokens === undefined ? "–" :
    `${fmt.int(r.prompt_tokens)}${r.tokens_estimated ? " (the estimate: the upstream sent no usage)" : " (upstream usage)"}`;
  return el("div", { class: "detail" },
    el("div", { class: "facts" },
      el("span", {}, `context ${exact}: `, el("b", {}, fmt.int(r.context_estimate))),
      el("span", {}, "prompt tokens: ", el("b", {}, usage)),
      el("span", {}, "capacity tier: ", el("b", {}, r.context_tier || "–")),
      el("span", {}, "routing tier: ", el("b", {}, r.tier || "–")),
      el("span", {}, "virtual model: ", el("b", {}, r.virtual_model || "–")),
      el("span", {}, "resolution: ", el("b", {}, r.resolution)),
      el("span", {}, "endpoint: ", el("b", {}, r.endpoint)),
      el("span", {}, "key: ", el("b", {}, r.client_key_id || "–")),
      r.trace_id ? el("span", {}, "trace: ", r.trace_url
        ? el("a", { class: "trace-id", href: r.trace_url, target: "_blank", rel: "noopener" }, r.trace_id)
        : el("code", { class: "trace-id" }, r.trace_id)) : null,
      r.error_code ? el("span", { class: "bad" }, `error: ${r.error_code}`) : null),
    el("h3", {}, `Attempts (${r.attempts.length})`),
    table(["#", "deployment", "status", "error class", "latency", "TTFT", "tokens in / out", "parameters sent", "scope"],
      attemptRows(r.attempts), { class: "attempts" }),
    el("h3", {}, `Dropped candidates (${(r.dropped || []).length})`),
    (r.dropped || []).length ? table(["deployment", "filter", "reason"], r.dropped.map((d) =>
      el("tr", {}, el("td", {}, d.deployment || d.deployment_id || "–"), el("td", {}, d.filter || "–"), el("td", {}, d.reason || "–"))),
    { class: "dropped" }) : el("p", { class: "muted" }, "none"));
}

async function pageRequests(root) {
  await loadChoices();
  const filters = el("form", { class: "filters", id: "request-filters" },
    el("label", {}, "model ", el("input", { id: "f-model", list: "models-list", placeholder: "any" })),
    el("datalist", { id: "models-list" }, state.models.map((m) => el("option", { value: m }))),
    select("f-key", "key ", state.keys.map((k) => [k.id, `${k.name || k.id} (${k.prefix}…)`])),
    select("f-status", "status ", [["ok", "ok (< 400)"], ["error", "error (≥ 400)"], ["429", "429"], ["502", "502"], ["503", "503"]]),
    select("f-deployment", "deployment ", state.deployments.map((d) => [d, d])),
    el("label", { class: "live" }, el("input", { type: "checkbox", id: "f-live", checked: true }), " live"));
  const status = el("span", { class: "muted", id: "requests-status" }, "");
  const tbody = el("tbody", {});
  const more = el("button", { type: "button", id: "more", hidden: true }, "Older requests");
  root.replaceChildren(el("div", { class: "toolbar" }, el("h1", {}, "Requests"), status), filters,
    el("table", { class: "requests", id: "requests" },
      el("thead", {}, el("tr", {}, ["time", "request id", "model", "deployment", "status",
        "latency", "TTFT", "tokens in / out", "fallbacks", "tier"].map((h) => el("th", {}, h)))), tbody), more);
  const open = new Map(); // id -> detail (or null while loading)
  let rows = [];
  let cursor = null;

  const query = () => {
    const params = new URLSearchParams({ limit: "50" });
    const set = (name, id) => { const v = document.getElementById(id).value.trim(); if (v) params.set(name, v); };
    set("model", "f-model"); set("key", "f-key"); set("status", "f-status"); set("deployment", "f-deployment");
    return params;
  };
  const rowFor = (r) => {
    const tr = el("tr", { class: `request ${statusClass(r.status)}`, dataset: { id: r.request_id }, tabindex: 0 },
      el("td", { title: fmt.date(r.time) }, fmt.time(r.time)),
      el("td", { class: "rid" }, r.request_id),
      el("td", {}, r.requested_model, r.virtual_model ? el("span", { class: "tag" }, "virtual") : null),
      el("td", {}, r.deployment_id || "–"),
      el("td", {}, el("span", { class: `tag ${statusClass(r.status)}` }, r.status)),
      el("td", { class: "num" }, fmt.secs(r.latency)),
      el("td", { class: "num" }, fmt.secs(r.ttft)),
      el("td", { class: "num" }, `${fmt.int(r.prompt_tokens)}${r.tokens_estimated ? "*" : ""} / ${fmt.int(r.completion_tokens)}`),
      el("td", { class: "num" }, r.fallback_count ? el("span", { class: "tag warn" }, r.fallback_count) : "0"),
      el("td", {}, r.context_tier || "–"));
    const toggle = () => {
      if (open.has(r.request_id)) open.delete(r.request_id);
      else { open.set(r.request_id, null); fetchDetail(r.request_id); }
      draw();
    };
    tr.addEventListener("click", toggle);
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") toggle(); });
    return tr;
  };
  const draw = () => {
    const out = [];
    for (const r of rows) {
      out.push(rowFor(r));
      if (open.has(r.request_id)) {
        const detail = open.get(r.request_id);
        out.push(el("tr", { class: "detail-row", dataset: { for: r.request_id } }, el("td", { colspan: 10 },
          detail ? requestDetail(detail) : el("p", { class: "muted" }, "loading…"))));
      }
    }
    tbody.replaceChildren(...out);
    more.hidden = !cursor;
    status.textContent = `${rows.length} shown · ${document.getElementById("f-live").checked ? "live" : "paused"}`;
  };
  const fetchDetail = async (id) => {
    try { open.set(id, await api(`/admin/requests/${encodeURIComponent(id)}`)); } catch (err) { open.delete(id); }
    draw();
  };
  const refresh = async () => {
    try {
      const page = await api(`/admin/requests?${query()}`);
      const older = rows.slice(page.data.length);
      // the newest page replaces the top; rows already paged in below it stay
      const seen = new Set(page.data.map((r) => r.request_id));
      rows = page.data.concat(older.filter((r) => !seen.has(r.request_id)));
      if (rows.length <= page.data.length) cursor = page.next_cursor;
      draw();
    } catch (err) { status.textContent = String(err.message); }
  };
  const reload = () => { rows = []; cursor = null; open.clear(); refresh(); };
  filters.addEventListener("change", reload);
  filters.addEventListener("submit", (e) => { e.preventDefault(); reload(); });
  more.addEventListener("click", async () => {
    const params = query();
    params.set("cursor", cursor);
    const page = await api(`/admin/requests?${params}`);
    rows = rows.concat(page.data);
    cursor = page.next_cursor;
    draw();
  });
  await refresh();
  every(1000, () => { if (document.getElementById("f-live").checked) refresh(); });
}

// ---- Explain ---------------------------------------------------------------------------
function planView(plan) {
  const candidates = plan.candidates.map((c) => el("tr", {},
    el("td", { class: "num" }, c.position), el("td", {}, el("b", {}, c.deployment)),
    el("td", {}, c.provider), el("td", { class: "num" }, fmt.int(c.context_window)),
    el("td", {}, c.tier), el("td", {}, c.scope || "–"),
    el("td", { class: "params" }, c.params ? fmt.json(c.params) : "–")));
  const dropped = plan.dropped.map((d) => el("tr", { class: "bad" },
    el("td", {}, el("b", {}, d.deployment)), el("td", {}, d.filter), el("td", { class: "reason" }, d.reason)));
  return el("div", { id: "plan" },
    plan.error ? el("p", { class: "error", role: "alert" }, `${plan.error.code}: ${plan.error.message}`) : null,
    el("p", {}, `model `, el("b", {}, plan.model), ` · resolution `, el("b", {}, plan.resolution),
      ` · endpoint `, el("b", {}, plan.endpoint),
      plan.emptied_by ? el("span", { class: "tag bad" }, `emptied by ${plan.emptied_by}`) : null),
    el("h3", {}, `Candidates, in the order they would be tried (${plan.candidates.length})`),
    plan.candidates.length ? table(["#", "deployment", "provider", "window", "tier", "scope", "parameters"], candidates, { class: "candidates" }) : el("p", { class: "muted" }, "none"),
    el("h3", {}, `Dropped (${plan.dropped.length})`),
    plan.dropped.length ? table(["deployment", "filter", "reason"], dropped, { class: "dropped" }) : el("p", { class: "muted" }, "none"),
    el("details", {}, el("summary", {}, "headers and notes"), el("pre", {}, JSON.stringify({ headers: plan.headers, notes: plan.notes }, null, 2))));
}

async function pageExplain(root) {
  await loadChoices();
  const model = state.models[0] || "model";
  const body = el("textarea", { id: "explain-body", rows: 12, spellcheck: "false" },
    JSON.stringify({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 256 }, null, 2));
  const headers = el("textarea", { id: "explain-headers", rows: 3, spellcheck: "false", placeholder: "X-Fleetgate-Tier: long" });
  const out = el("div", { id: "explain-out" });
  const form = el("form", { class: "card", id: "explain-form" },
    el("label", {}, "Request body (JSON; `endpoint` may name the API, e.g. \"embeddings\")", body),
    el("label", {}, "Headers, one `Name: value` a line (optional)", headers),
    el("button", { type: "submit" }, "Explain"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let request;
    try { request = JSON.parse(body.value); } catch (err) { showError(out, `The body is not JSON: ${err.message}`); return; }
    const sent = {};
    for (const line of headers.value.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) sent[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    try { out.replaceChildren(planView(await api("/admin/explain", { method: "POST", body: { request, headers: sent } }))); } catch (err) { showError(out, err); }
  });
  root.replaceChildren(el("h1", {}, "Explain"), el("p", { class: "muted" },
    "The plan a request would follow, from the live fleet and its health, without sending anything."), form, out);
}

// ---- Keys ------------------------------------------------------------------------------
function spendCell(k) {
  if (k.budget === null || k.budget === undefined) return el("td", { class: "num" }, `${fmt.money(k.spent)} (no budget)`);
  const share = k.budget > 0 ? Math.min(1, k.spent / k.budget) : 1;
  return el("td", { class: "spend" },
    el("meter", { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0, value: share }),
    ` ${fmt.money(k.spent)} of ${fmt.money(k.budget)} (${Math.round(share * 100)}%)`);
}

function keyLimits(form) {
  // the models, rpm, tpm and budget fields of a key form; empty means "no limit"
  const f = new FormData(form);
  const num = (name) => (f.get(name) === "" ? null : Number(f.get(name)));
  const models = String(f.get("models")).split(",").map((m) => m.trim()).filter(Boolean);
  return { allowed_models: models.length ? models : null, rpm: num("rpm"), tpm: num("tpm"), budget: num("budget") };
}

function limitsForm(k, done) {
  const input = (name, value, attrs) => el("input", { name, value: value === null || value === undefined ? "" : value, ...attrs });
  const form = el("form", { class: "inline" },
    el("label", {}, "models ", input("models", k.allowed_models ? k.allowed_models.join(",") : "", { placeholder: "all" })),
    el("label", {}, "rpm ", input("rpm", k.rpm, { type: "number", min: 1 })),
    el("label", {}, "tpm ", input("tpm", k.tpm, { type: "number", min: 1 })),
    el("label", {}, "budget ", input("budget", k.budget, { type: "number", min: 0, step: "any" })),
    el("button", { type: "submit" }, "Save"), el("span", { class: "error" }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api(`/admin/keys/${encodeURIComponent(k.id)}`, { method: "PATCH", body: keyLimits(form) });
      done();
    } catch (err) { form.querySelector(".error").textContent = err.message; }
  });
  return form;
}

async function pageKeys(root) {
  const list = el("div", { id: "keys" });
  const secretBox = el("div", { id: "secret" });
  const form = el("form", { class: "card inline", id: "key-form" },
    el("label", {}, "name ", el("input", { name: "name", required: true })),
    el("label", {}, "models ", el("input", { name: "models", placeholder: "all" })),
    el("label", {}, "rpm ", el("input", { name: "rpm", type: "number", min: 1 })),
    el("label", {}, "tpm ", el("input", { name: "tpm", type: "number", min: 1 })),
    el("label", {}, "budget ", el("input", { name: "budget", type: "number", min: 0, step: "any" })),
    el("button", { type: "submit" }, "Create key"), el("span", { class: "error" }));
  const editing = new Set();
  const load = async () => {
    let keys;
    try { keys = (await api("/admin/keys")).data; } catch (err) { showError(list, err); return; }
    const rows = [];
    for (const k of keys) {
      rows.push(el("tr", { dataset: { key: k.id }, class: k.disabled ? "disabled" : "" },
        el("td", {}, el("b", {}, k.name || "–"), el("div", { class: "muted small" }, k.id)),
        el("td", {}, el("code", {}, `${k.prefix}…`)),
        el("td", {}, el("span", { class: `tag ${k.disabled ? "bad" : "ok"}` }, k.disabled ? "disabled" : "active")),
        el("td", {}, k.allowed_models ? k.allowed_models.join(", ") : "all"),
        el("td", { class: "num" }, k.rpm === null ? "–" : fmt.int(k.rpm)),
        el("td", { class: "num" }, k.tpm === null ? "–" : fmt.int(k.tpm)),
        spendCell(k),
        el("td", { class: "muted" }, fmt.date(k.created_at)),
        el("td", { class: "actions" },
          el("button", { type: "button", class: "toggle", onclick: async () => {
            await api(`/admin/keys/${encodeURIComponent(k.id)}`, { method: "PATCH", body: { disabled: !k.disabled } }); load();
          } }, k.disabled ? "Enable" : "Disable"),
          el("button", { type: "button", class: "edit", onclick: () => { editing.has(k.id) ? editing.delete(k.id) : editing.add(k.id); load(); } }, "Limits"),
          el("button", { type: "button", class: "delete danger", onclick: async () => {
            if (!confirm(`Revoke key ${k.name || k.id}? Clients using it are refused at once.`)) return;
            await api(`/admin/keys/${encodeURIComponent(k.id)}`, { method: "DELETE" }); load();
          } }, "Delete"))));
      if (editing.has(k.id)) rows.push(el("tr", { class: "detail-row" }, el("td", { colspan: 9 }, limitsForm(k, () => { editing.delete(k.id); load(); }))));
    }
    list.replaceChildren(keys.length ? table(["name", "prefix", "state", "models", "rpm", "tpm", "spend / budget", "created", ""], rows, { class: "keys" }) : el("p", { class: "muted" }, "No client keys yet."));
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const name = new FormData(form).get("name");
      const created = await api("/admin/keys", { method: "POST", body: { name, ...keyLimits(form) } });
      form.reset();
      form.querySelector(".error").textContent = "";
      const dismiss = el("button", { type: "button", onclick: () => secretBox.replaceChildren() }, "I have stored it");
      secretBox.replaceChildren(el("div", { class: "card secret", role: "status" },
        el("p", {}, `Key ${created.name || created.id} created. Its secret is shown this once; store it now:`),
        el("code", { class: "secret-value" }, created.key), " ", dismiss));
      load();
    } catch (err) { form.querySelector(".error").textContent = err.message; }
  });
  root.replaceChildren(el("h1", {}, "Client keys"), form, secretBox, list);
  await load();
}

// ---- Charts ----------------------------------------------------------------------------
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#475569", "#ea580c"];

function chart(container, title, xs, series, unit) {
  const points = series.reduce((n, s) => n + s.values.filter((v) => v !== null && v > 0).length, 0);
  const box = el("div", { class: "chart card", dataset: { chart: title, points } }, el("h3", {}, title));
  container.append(box);
  if (!series.length) { box.append(el("p", { class: "muted" }, "no data in this window")); return; }
  const width = Math.max(280, box.clientWidth - 34);
  const opts = {
    width, height: 220,
    scales: { x: { time: true } },
    axes: [{}, { values: (u, ticks) => ticks.map((v) => unit === "s" ? fmt.secs(v) : fmt.int(v)), size: 70 }],
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5,
      points: { size: 6 }, spanGaps: false }))],
  };
  if (typeof uPlot === "undefined") { box.append(el("p", { class: "error" }, "the chart library did not load")); return; }
  new uPlot(opts, [xs, ...series.map((s) => s.values)], box);
}

function topSeries(map, n) {
  return Object.entries(map).map(([label, values]) => ({ label, values, total: values.reduce((a, b) => a + (b || 0), 0) }))
    .sort((a, b) => b.total - a.total).slice(0, n);
}

async function pageCharts(root) {
  const windows = [["900", "15 minutes"], ["3600", "1 hour"], ["21600", "6 hours"], ["86400", "24 hours"], ["604800", "7 days"]];
  const pick = el("select", { id: "chart-window" }, windows.map(([v, t]) => el("option", { value: v, selected: v === "3600" }, t)));
  const area = el("div", { id: "charts", class: "charts" });
  const totals = el("p", { class: "summary", id: "chart-totals" });
  root.replaceChildren(el("div", { class: "toolbar" }, el("h1", {}, "Charts"), el("label", {}, "window ", pick)), totals, area);
  const load = async () => {
    let s;
    try { s = await api(`/admin/stats?window=${pick.value}&buckets=60`); } catch (err) { showError(area, err); return; }
    area.replaceChildren();
    const xs = s.buckets;
    const t = s.totals;
    const tiers = Object.entries(s.context_tiers).map(([k, v]) => [k, v.reduce((a, b) => a + b, 0)]);
    const tierShare = tiers.map(([k, n]) => `${k} ${t.requests ? Math.round((100 * n) / t.requests) : 0}%`).join(", ");
    totals.textContent = `${fmt.int(t.requests)} requests · ${fmt.int(t.errors)} errors · ${fmt.int(t.fallbacks)} with a fallback · tier share: ${tierShare || "–"}`;
    chart(area, "Requests, errors and fallbacks", xs, [
      { label: "requests", values: s.requests }, { label: "errors", values: s.errors }, { label: "fallbacks", values: s.fallbacks }]);
    const deps = Object.fromEntries(Object.entries(s.deployments).map(([k, v]) => [k, v.attempts]));
    chart(area, "Requests sent to each deployment", xs, topSeries(deps, 10));
    const errs = Object.fromEntries(Object.entries(s.deployments).map(([k, v]) => [k, v.errors]));
    chart(area, "Errors per deployment", xs, topSeries(errs, 10).filter((x) => x.total > 0));
    chart(area, "Capacity tier share", xs, topSeries(s.context_tiers, 10));
    chart(area, "TTFT p50 / p99", xs, [{ label: "p50", values: s.ttft_p50 }, { label: "p99", values: s.ttft_p99 }], "s");
  };
  pick.addEventListener("change", load);
  await load();
  every(10000, load);
}

// ---- routing ---------------------------------------------------------------------------
const PAGES = { fleet: pageFleet, requests: pageRequests, explain: pageExplain, keys: pageKeys, charts: pageCharts };

// the gateway's version in the header, once signed in (`/admin/status`)
async function showVersion() {
  const span = document.getElementById("version");
  if (span.textContent) return;
  try { span.textContent = (await api("/admin/status", { login: true })).version || ""; } catch (err) { /* the page says why */ }
}

// with no admin key set on the gateway, the sign-in form says so instead of asking for one
async function adminOff() {
  try {
    const resp = await fetch("/admin/status");
    const body = await resp.json();
    return resp.status === 403 && body.error && body.error.code === "admin_disabled" ? body.error.message : null;
  } catch (err) { return null; }
}

async function route() {
  if (!adminKey()) {
    renderLogin();
    const off = await adminOff();
    if (off) {
      document.getElementById("login-error").textContent = off;
      document.querySelector("#login button").disabled = true;
    }
    return;
  }
  showVersion();
  clearTimers();
  const name = (location.hash.replace(/^#\/?/, "") || "fleet").split("?")[0];
  const page = PAGES[name] || pageFleet;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === name));
  const root = el("section", { id: `page-${name}`, class: "page" });
  main().replaceChildren(root);
  state.page = name;
  try { await page(root); } catch (err) { if (!(err instanceof ApiError && err.status === 401)) showError(root, err); }
  root.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("logout").addEventListener("click", () => signOut("Signed out."));
  window.addEventListener("hashchange", route);
  route();
});
})();
