// The inspector's acting and derived views (docs/inspector.md): driving a
// session by hand from forms built of the request schemas (form.js), and a
// session's environment episodes with their rewards plotted, drawn from
// the timeline's messages (app.js). Everything is written with
// textContent or as SVG elements: nothing an agent sent is parsed as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const MAX_HISTORY = 20;

const drive = {
  contract: null,   // a promise of the loaded bundle
  driven: new Set(), // handles this inspector drives
  handle: "",
  form: null,
  history: [],      // the last messages sent, newest first
};

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const r = await fetch("/inspector/api/" + path, init);
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.message || (r.status + " " + r.statusText));
  return j;
}

function loadContract() {
  if (!drive.contract) {
    drive.contract = fetch("/inspector/api/contract").then((r) => r.json()).then((b) => { AEPForm.load(b); return b; });
  }
  return drive.contract;
}

async function refreshDriveInfo() {
  try {
    const info = await api("drive");
    drive.driven = new Set(info.driven || []);
    const sel = document.getElementById("drive-tenant");
    if (sel.options.length === 0) {
      for (const t of info.tenants || []) sel.appendChild(el("option", "", t)).value = t;
    }
    document.getElementById("drive-open").hidden = !info.enabled;
  } catch (e) {
    document.getElementById("drive-open-note").textContent = e.message;
  }
}

async function openDriven() {
  const note = document.getElementById("drive-open-note");
  note.textContent = "opening…";
  const caps = document.getElementById("drive-caps").value.split(",").map((c) => c.trim()).filter((c) => c);
  try {
    const body = { tenant: document.getElementById("drive-tenant").value };
    if (caps.length) body.capabilities = caps;
    const o = await api("drive/open", body);
    drive.driven.add(o.handle);
    note.textContent = "";
    location.hash = "#/session/" + o.handle;
  } catch (e) {
    note.textContent = e.message;
  }
}

async function showDrive(handle) {
  const panel = document.getElementById("drive");
  drive.handle = handle;
  panel.hidden = !drive.driven.has(handle);
  if (panel.hidden) return;
  await loadContract();
  const sel = document.getElementById("drive-type");
  if (sel.options.length === 0) {
    for (const t of AEPForm.requestTypes()) sel.appendChild(el("option", "", t.type)).value = t.name;
  }
  buildForm();
  drawHistory();
}

function buildForm() {
  const name = document.getElementById("drive-type").value;
  drive.form = AEPForm.form(name);
  document.getElementById("drive-form").replaceChildren(drive.form.el);
  document.getElementById("drive-errors").replaceChildren();
  setRaw(document.getElementById("drive-raw").checked);
}

// setRaw switches between the form and one JSON editor of the whole
// message (without its envelope), validated against the same schema.
function setRaw(raw) {
  const area = document.getElementById("drive-json");
  const formBox = document.getElementById("drive-form");
  if (raw) {
    const m = drive.form.message({});
    const body = Object.assign({}, m.message || {});
    delete body.type;
    area.value = JSON.stringify(body, null, 2);
  } else if (!area.hidden && area.value.trim()) {
    try { drive.form.set(JSON.parse(area.value)); } catch (e) { /* left as the form was */ }
  }
  area.hidden = !raw;
  formBox.hidden = raw;
}

function envelope() {
  return { id: "insp-" + Date.now().toString(36) + "-" + Math.floor(Math.random() * 1e6).toString(36), proto: "1.0", ts: Date.now() / 1000 };
}

// built returns the message to send, or shows why there is none.
function built() {
  const errs = document.getElementById("drive-errors");
  errs.replaceChildren();
  let r;
  if (document.getElementById("drive-raw").checked) {
    try {
      const body = JSON.parse(document.getElementById("drive-json").value || "{}");
      const m = Object.assign({ type: drive.form.type }, envelope(), body);
      const e = AEPForm.validate(drive.form.schema, m, "");
      r = e.length ? { errors: e } : { message: m };
    } catch (e) {
      r = { errors: ["not JSON: " + e.message] };
    }
  } else {
    r = drive.form.message(envelope());
  }
  if (r.errors) {
    for (const e of r.errors) errs.appendChild(el("li", "", e));
    return null;
  }
  return r.message;
}

async function send(m) {
  const out = document.getElementById("drive-answer");
  out.textContent = "sent " + m.type + " #" + m.id + " …";
  drive.history.unshift(m);
  drive.history.length = Math.min(drive.history.length, MAX_HISTORY);
  drawHistory();
  try {
    const a = await api("drive/send", { handle: drive.handle, message: m });
    out.dataset.answered = m.id;
    out.textContent = a.answer !== undefined && a.answer !== null
      ? JSON.stringify(a.answer, null, 2)
      : (a.pending || "sent: a notification has no answer");
  } catch (e) {
    out.textContent = "not sent: " + e.message;
  }
}

function drawHistory() {
  const list = document.getElementById("drive-history-list");
  const rows = drive.history.map((m, i) => {
    const li = el("li", "sent");
    li.appendChild(el("span", "type", m.type + " "));
    li.appendChild(el("span", "id", "#" + m.id + " "));
    const again = el("button", "resend", "send again");
    again.type = "button";
    again.addEventListener("click", () => send(Object.assign({}, drive.history[i], envelope())));
    const edit = el("button", "edit", "edit");
    edit.type = "button";
    edit.addEventListener("click", () => {
      const m2 = drive.history[i];
      const sel = document.getElementById("drive-type");
      const t = AEPForm.requestTypes().find((x) => x.type === m2.type);
      if (!t) return;
      sel.value = t.name;
      buildForm();
      const body = Object.assign({}, m2);
      for (const k of ["type", "id", "proto", "ts"]) delete body[k];
      drive.form.set(body);
    });
    li.appendChild(again);
    li.appendChild(edit);
    return li;
  });
  list.replaceChildren(...rows);
}

// ---- episodes ----

// episodes reads the env episodes of the timeline: each reset's answer
// opens one, each step's answer adds its request's action and its reward,
// each render's answer its text.
function episodes() {
  const byID = new Map();
  const order = [];
  const get = (id) => {
    let e = byID.get(id);
    if (!e) { e = { id, env: "", steps: [], renders: [] }; byID.set(id, e); order.push(e); }
    return e;
  };
  for (const e of tl.all) {
    const m = e.message || {};
    if (e.dir !== "host" || e.kind !== "reply" || !m.episode_id) continue;
    const req = e.request !== undefined ? tl.all[e.request].message || {} : {};
    if (e.type === "env/reset/resp") {
      const ep = get(m.episode_id);
      ep.env = m.env_name || ep.env;
      ep.reset = m.observation;
    } else if (e.type === "env/step/resp") {
      get(m.episode_id).steps.push({ step: m.step, action: req.action, reward: Number(m.reward) || 0,
        terminated: !!m.terminated, truncated: !!m.truncated, observation: m.observation });
    } else if (e.type === "env/render/resp") {
      get(m.episode_id).renders.push({ after: get(m.episode_id).steps.length, text: m.text || "" });
    }
  }
  return order;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

// plot draws series (each a list of numbers, one point per step) as lines
// with a point per value, on shared axes.
function plot(id, series, names) {
  const W = 520, H = 180, L = 44, B = 22, T = 8, R = 8;
  const s = svg("svg", { id, class: "plot", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
  let lo = 0, hi = 0, n = 1;
  for (const ys of series) for (const y of ys) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
  for (const ys of series) n = Math.max(n, ys.length);
  if (hi === lo) hi = lo + 1;
  const x = (i) => L + (n === 1 ? (W - L - R) / 2 : i * (W - L - R) / (n - 1));
  const y = (v) => T + (hi - v) * (H - T - B) / (hi - lo);
  s.appendChild(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }));
  s.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (const v of [lo, hi]) {
    const t = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end", class: "tick" });
    t.textContent = String(Math.round(v * 100) / 100);
    s.appendChild(t);
  }
  const xl = svg("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "tick" });
  xl.textContent = "step " + n;
  s.appendChild(xl);
  series.forEach((ys, k) => {
    const g = svg("g", { class: "series", "data-name": names[k] || "", "data-points": ys.length });
    const color = COLORS[k % COLORS.length];
    g.appendChild(svg("polyline", { points: ys.map((v, i) => x(i) + "," + y(v)).join(" "), fill: "none", stroke: color }));
    ys.forEach((v, i) => {
      const c = svg("circle", { cx: x(i), cy: y(v), r: 3, fill: color, class: "pt", "data-step": i + 1, "data-value": v });
      const tip = svg("title");
      tip.textContent = (names[k] ? names[k] + " " : "") + "step " + (i + 1) + ": " + v;
      c.appendChild(tip);
      g.appendChild(c);
    });
    s.appendChild(g);
  });
  return s;
}

let redrawQueued = false;

// entriesChanged redraws the derived view on show, once a frame at most.
function entriesChanged() {
  if (redrawQueued || (currentTab !== "episodes" && currentTab !== "memory" && currentTab !== "processes")) return;
  redrawQueued = true;
  requestAnimationFrame(() => { redrawQueued = false; if (currentTab !== "lineage") redrawTab(); });
}

function drawEpisodes() {
  const eps = episodes();
  const box = document.getElementById("episode-list");
  const last8 = eps.slice(-8);
  const cum = last8.map((ep) => { let r = 0; return ep.steps.map((s) => (r += s.reward)); });
  const legend = el("ul", "legend");
  last8.forEach((ep, k) => {
    const li = el("li", "", ep.env + " " + ep.id + ": return " + ep.steps.reduce((a, s) => a + s.reward, 0));
    li.style.color = COLORS[k % COLORS.length];
    legend.appendChild(li);
  });
  document.getElementById("returns-chart").replaceChildren(plot("returns-plot", cum, last8.map((e) => e.id)), legend);
  const parts = [];
  if (eps.length === 0) parts.push(el("p", "note", "No env episode in this timeline yet."));
  for (const ep of eps.slice().reverse()) {
    const d = el("div", "episode");
    d.dataset.episode = ep.id;
    const ret = ep.steps.reduce((a, s) => a + s.reward, 0);
    const end = ep.steps.length && (ep.steps[ep.steps.length - 1].terminated || ep.steps[ep.steps.length - 1].truncated);
    d.appendChild(el("h3", "", ep.env + " · " + ep.id + " · " + ep.steps.length + " steps · return " + ret + (end ? " · ended" : "")));
    const p = plot("", [ep.steps.map((s) => s.reward)], ["reward"]);
    p.classList.add("reward-plot");
    d.appendChild(p);
    const t = el("table", "steps");
    const hr = el("tr");
    for (const h of ["step", "action", "reward", "return", "done", "observation"]) hr.appendChild(el("th", "", h));
    t.appendChild(hr);
    let r = 0;
    for (const s of ep.steps) {
      r += s.reward;
      const tr = el("tr", "step");
      for (const v of [s.step, JSON.stringify(s.action), s.reward, r, s.terminated ? "terminated" : s.truncated ? "truncated" : "",
        JSON.stringify(s.observation)]) tr.appendChild(el("td", "", String(v === undefined ? "" : v)));
      t.appendChild(tr);
    }
    d.appendChild(t);
    for (const rd of ep.renders) {
      d.appendChild(el("div", "note", "render after step " + rd.after + ":"));
      d.appendChild(el("pre", "render", rd.text));
    }
    parts.push(d);
  }
  box.replaceChildren(...parts);
}

// ---- lineage ----

let lineageHandle = "";
let exportURL = "";

function fmtNum(x) { return String(Math.round(x * 1000) / 1000); }

async function drawLineage() {
  const box = document.getElementById("lineage-tree");
  let j;
  try {
    j = await api("lineage?handle=" + encodeURIComponent(lineageHandle));
  } catch (e) {
    box.replaceChildren(el("p", "note", "No lineage: " + e.message));
    return;
  }
  if (j.nodes.length === 0 && !(j.snapshots && j.snapshots.length)) {
    box.replaceChildren(el("p", "note", "This session recorded nothing: its lineage is not in the store."));
    return;
  }
  const kids = new Map();
  const known = new Set(j.nodes.map((n) => n.handle));
  for (const n of j.nodes) {
    const p = n.parent && known.has(n.parent) ? n.parent : "";
    if (!kids.has(p)) kids.set(p, []);
    kids.get(p).push(n);
  }
  const node = (n) => {
    const li = el("li", "node" + (n.handle === lineageHandle ? " this" : ""));
    li.dataset.handle = n.handle;
    li.dataset.return = String(n.episode_return);
    const a = el("a", "", n.handle);
    a.href = "#/session/" + n.handle;
    li.appendChild(a);
    const fp = n.parent ? (n.fork_point !== undefined ? " · forked at record " + n.fork_point : " · prefix missing") : " · root";
    li.appendChild(el("span", "meta", fp + " · " + n.steps + " steps · return " + fmtNum(n.return) +
      (n.parent ? " · episode return " + fmtNum(n.episode_return) : "")));
    const sub = kids.get(n.handle) || [];
    if (sub.length) li.appendChild(groups(sub));
    return li;
  };
  const groups = (list) => {
    const ul = el("ul", "tree");
    const byGroup = new Map();
    for (const n of list) {
      const g = n.group || "";
      if (!byGroup.has(g)) byGroup.set(g, []);
      byGroup.get(g).push(n);
    }
    for (const [g, ns] of byGroup) {
      if (!g) { for (const n of ns) ul.appendChild(node(n)); continue; }
      const gl = el("li", "group");
      gl.dataset.group = g;
      const rets = ns.map((n) => n.episode_return);
      gl.appendChild(el("span", "gname", "group " + g + " · " + ns.length + " branches · returns " +
        fmtNum(Math.min(...rets)) + " to " + fmtNum(Math.max(...rets))));
      const b = el("button", "export-group", "export group");
      b.type = "button";
      b.addEventListener("click", () => exportLines("group=" + encodeURIComponent(g), "group " + g));
      gl.appendChild(b);
      const inner = el("ul", "tree");
      for (const n of ns) inner.appendChild(node(n));
      gl.appendChild(inner);
      ul.appendChild(gl);
    }
    return ul;
  };
  const parts = [groups(kids.get("") || [])];
  if (j.snapshots && j.snapshots.length) {
    parts.push(el("h3", "", "Snapshots this session may restore"));
    const ul = el("ul", "snapshots");
    for (const s of j.snapshots) {
      const li = el("li", "snapshot", s.id + " · " + s.target + " · " + s.kind + " · " + new Date(s.at).toLocaleString() + " · " + bytes(s.bytes));
      li.dataset.snapshot = s.id;
      ul.appendChild(li);
    }
    parts.push(ul);
  }
  if (j.truncated) parts.unshift(el("p", "banner", "This lineage has more records than the tree reads: counts are of the first."));
  box.replaceChildren(...parts);
}

async function exportLines(query, what) {
  const box = document.getElementById("export-box");
  const out = document.getElementById("export-out");
  box.hidden = false;
  document.getElementById("export-title").textContent = "export of " + what + " (jsonl, prefix repeat)";
  out.textContent = "exporting…";
  out.dataset.done = "";
  const r = await fetch("/inspector/api/export?" + query + "&format=jsonl&prefix=repeat");
  const text = await r.text();
  out.textContent = text;
  out.dataset.done = r.ok ? "ok" : "error";
  out.dataset.records = r.headers.get("X-Aep-Records") || "";
  if (exportURL) URL.revokeObjectURL(exportURL);
  exportURL = URL.createObjectURL(new Blob([text], { type: "application/jsonl" }));
  document.getElementById("export-save").href = exportURL;
}

// ---- memory ----

// memoryOf reads what the session stored from its messages: each store
// that was answered, less what a forget that was answered removed.
function memoryOf() {
  const mems = new Map(); // memory_id → Map(tier → Map(key → [entry]))
  const recalls = [];
  const ok = (e) => e.answer === "ok";
  for (const e of tl.all) {
    const m = e.message || {};
    if (e.kind !== "request" || !ok(e)) continue;
    if (e.type === "memory/store/req" && Array.isArray(m.entries)) {
      if (!mems.has(m.memory_id)) mems.set(m.memory_id, new Map());
      const tiers = mems.get(m.memory_id);
      for (const en of m.entries) {
        if (!tiers.has(en.tier)) tiers.set(en.tier, new Map());
        const keys = tiers.get(en.tier);
        // Episodic events append; the other tiers upsert by key.
        if (en.tier === "episodic" && keys.has(en.key)) keys.get(en.key).push(en);
        else keys.set(en.key, [en]);
      }
    } else if (e.type === "memory/forget/req" && mems.has(m.memory_id)) {
      for (const [tier, keys] of mems.get(m.memory_id)) {
        if (m.tier && m.tier !== tier) continue;
        if (Array.isArray(m.keys)) for (const k of m.keys) keys.delete(k);
        else if (!m.tags && m.older_than === undefined) keys.clear();
      }
    } else if (e.type === "memory/recall/req") {
      const r = tl.all.find((x) => x.request === e.n && x.kind === "reply");
      recalls.push({ query: m.query || "", tier: m.tier || "", hits: (r && r.message && r.message.hits) || [] });
    }
  }
  return { mems, recalls };
}

function entryText(en) {
  return en.key + " " + (en.tags || []).join(" ") + " " + (typeof en.content === "string" ? en.content : JSON.stringify(en.content));
}

function drawMemory() {
  const q = document.getElementById("memory-search").value.trim().toLowerCase();
  const { mems, recalls } = memoryOf();
  const parts = [];
  let shown = 0, total = 0;
  for (const [id, tiers] of mems) {
    const d = el("div", "memory");
    d.dataset.memory = id;
    d.appendChild(el("h3", "", "memory " + id));
    for (const tier of ["working", "episodic", "semantic"]) {
      const keys = tiers.get(tier);
      if (!keys || keys.size === 0) continue;
      const t = el("table", "entries");
      t.dataset.tier = tier;
      const cap = el("caption", "", tier);
      t.appendChild(cap);
      for (const [key, list] of keys) {
        for (const en of list) {
          total++;
          const hit = q !== "" && entryText(en).toLowerCase().includes(q);
          if (q !== "" && !hit) continue;
          shown++;
          const tr = el("tr", "entry" + (hit ? " hit" : ""));
          tr.dataset.key = key;
          tr.appendChild(el("td", "key", key));
          tr.appendChild(el("td", "tags", (en.tags || []).join(", ")));
          tr.appendChild(el("td", "content", typeof en.content === "string" ? en.content : JSON.stringify(en.content)));
          t.appendChild(tr);
        }
      }
      d.appendChild(t);
    }
    parts.push(d);
  }
  if (mems.size === 0) parts.push(el("p", "note", "No memory stored in this timeline yet."));
  document.getElementById("memory-list").replaceChildren(...parts);
  document.getElementById("memory-count").textContent = q ? shown + " of " + total + " entries match" : total + " entries";
  const rs = recalls.slice(-50).reverse().map((r) => {
    const d = el("div", "recall");
    d.appendChild(el("span", "", "“" + r.query + "”" + (r.tier ? " in " + r.tier : "") + ": " + r.hits.length + " hits"));
    const ul = el("ul");
    for (const h of r.hits.slice(0, 20)) {
      const en = h.entry || h;
      ul.appendChild(el("li", "", (en.key || "") + ": " + (typeof en.content === "string" ? en.content : JSON.stringify(en.content))));
    }
    d.appendChild(ul);
    return d;
  });
  document.getElementById("memory-recalls").replaceChildren(...rs);
}

// ---- processes ----

// processesOf reads the session's processes from its messages: spawns,
// every answer that describes one, and their output, streamed as
// proc/event artifacts of a following read or returned by a read.
function processesOf() {
  const procs = new Map();
  const order = [];
  const get = (id) => {
    let p = procs.get(id);
    if (!p) { p = { id, argv: [], state: "", exit: undefined, out: [] }; procs.set(id, p); order.push(p); }
    return p;
  };
  for (const e of tl.all) {
    const m = e.message || {};
    if (m.process && m.process.proc_id) {
      const p = get(m.process.proc_id);
      if (m.process.argv) p.argv = m.process.argv;
      if (m.process.state) p.state = m.process.state;
      if (m.process.exit_code !== undefined && m.process.exit_code !== null) p.exit = m.process.exit_code;
    }
    if (e.type === "proc/event" && e.request === undefined) {
      // An event names its read by req_id.
      const r = tl.byReq.get(e.req_id);
      const req = r !== undefined ? tl.all[r].message || {} : {};
      if (req.proc_id && m.data && typeof m.data.chunk === "string") get(req.proc_id).out.push([m.data.name || "stdout", m.data.chunk]);
    } else if (e.type === "proc/read/resp" && m.proc_id) {
      const p = get(m.proc_id);
      if (m.state) p.state = m.state;
      if (!m.streamed) {
        for (const name of ["stdout", "stderr"]) {
          const s = m[name];
          if (s && typeof s.data === "string" && s.data !== "") p.out.push([name, s.data]);
        }
      }
    }
  }
  return order;
}

function drawProcesses() {
  const parts = processesOf().map((p) => {
    const d = el("div", "proc");
    d.dataset.proc = p.id;
    d.appendChild(el("h3", "", p.id + " · " + p.argv.join(" ") + " · " + (p.state || "?") + (p.exit !== undefined ? " · exit " + p.exit : "")));
    const pre = el("pre", "proc-out");
    for (const [name, text] of p.out) pre.appendChild(el("span", name, text));
    d.appendChild(pre);
    return d;
  });
  if (parts.length === 0) parts.push(el("p", "note", "No process in this timeline yet."));
  document.getElementById("proc-list").replaceChildren(...parts);
}

const TABS = [["timeline", "timeline-view"], ["episodes", "episodes"], ["lineage", "lineage"], ["memory", "memory"], ["processes", "processes"]];
let currentTab = "timeline";

function showTab(which) {
  currentTab = which;
  for (const [tab, view] of TABS) {
    document.getElementById(view).hidden = tab !== which;
    document.getElementById("tab-" + tab).classList.toggle("on", tab === which);
  }
  redrawTab();
}

function redrawTab() {
  if (currentTab === "episodes") drawEpisodes();
  if (currentTab === "lineage") drawLineage();
  if (currentTab === "memory") drawMemory();
  if (currentTab === "processes") drawProcesses();
}

async function routed(handle) {
  lineageHandle = handle;
  document.getElementById("export-box").hidden = true;
  showTab("timeline");
  await refreshDriveInfo();
  if (handle) showDrive(handle);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("drive-open-btn").addEventListener("click", openDriven);
  document.getElementById("drive-type").addEventListener("change", buildForm);
  document.getElementById("drive-raw").addEventListener("change", (ev) => setRaw(ev.target.checked));
  document.getElementById("drive-send").addEventListener("click", () => {
    const m = built();
    if (m) send(m);
  });
  document.getElementById("drive-end").addEventListener("click", async () => {
    try { await api("drive/close", { handle: drive.handle }); } catch (e) { /* ended already */ }
    drive.driven.delete(drive.handle);
    document.getElementById("drive").hidden = true;
  });
  document.getElementById("tab-timeline").addEventListener("click", () => showTab("timeline"));
  document.getElementById("tab-episodes").addEventListener("click", () => showTab("episodes"));
  document.getElementById("tab-lineage").addEventListener("click", () => showTab("lineage"));
  document.getElementById("tab-memory").addEventListener("click", () => showTab("memory"));
  document.getElementById("tab-processes").addEventListener("click", () => showTab("processes"));
  document.getElementById("memory-search").addEventListener("input", drawMemory);
});
