// The aep inspector's page (docs/inspector.md). It reads two server-sent
// event streams of its own origin and writes everything it shows with
// textContent: nothing an agent sent is ever parsed as markup.
"use strict";

const ROW = 22;        // px, the height of one timeline row (app.css .row)
const OVERSCAN = 10;   // rows drawn beyond the visible ones

let source = null;     // the open EventSource

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setStatus(text, cls) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status" + (cls ? " " + cls : "");
}

function age(seconds) {
  if (seconds < 60) return Math.floor(seconds) + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

function bytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + " MiB";
  return (n / (1 << 30)).toFixed(1) + " GiB";
}

// budgetText is the short form of msg.SessionBudgets: used of limit.
function budgetText(b) {
  if (!b) return "";
  const parts = [];
  const add = (name, u, isBytes) => {
    if (!u) return;
    const f = isBytes ? bytes : String;
    parts.push(name + " " + f(u.used) + "/" + (u.limit ? f(u.limit) : "∞"));
  };
  add("disk", b.disk_bytes, true);
  add("files", b.files, false);
  add("work", b.leaf_work, false);
  add("wmem", b.working_memory_bytes, true);
  add("pmem", b.persistent_memory_bytes, true);
  add("sandbox", b.sandbox_memory_bytes, true);
  add("steps", b.steps, false);
  return parts.join(" · ");
}

// ---- the host view ----

function showHost() {
  document.getElementById("host-view").hidden = false;
  document.getElementById("session-view").hidden = true;
  source = new EventSource("/inspector/api/host");
  source.addEventListener("host", (ev) => renderHost(JSON.parse(ev.data)));
  source.onerror = () => setStatus("disconnected; retrying…");
}

function renderHost(v) {
  setStatus(v.draining ? "draining: no new sessions" : "live", v.draining ? "draining" : "");
  const errors = v.errors;
  document.getElementById("host-summary").textContent =
    v.sessions.length + " sessions · " + v.rps.toFixed(1) + " req/s · " + errors + " errors" +
    (v.draining ? " · draining" : "");
  const body = document.getElementById("session-rows");
  const rows = [];
  let group = null;
  for (const s of v.sessions) {
    const g = s.tenant || "(no tenant yet)";
    if (g !== group) {
      group = g;
      const tr = el("tr", "group");
      const td = el("td", "", "tenant " + g);
      td.colSpan = 9;
      tr.appendChild(td);
      rows.push(tr);
    }
    const tr = el("tr", "session");
    tr.dataset.handle = s.handle;
    const link = el("a", "", s.handle);
    link.href = "#/session/" + encodeURIComponent(s.handle);
    const first = el("td");
    first.appendChild(link);
    if (s.parent) first.appendChild(el("span", "note", " (subagent)"));
    if (s.operator_opened) first.appendChild(el("span", "note", " (operator)"));
    tr.appendChild(first);
    tr.appendChild(el("td", "agent", s.agent_id));
    tr.appendChild(el("td", "num", age(s.age_s)));
    tr.appendChild(el("td", "", s.transport));
    tr.appendChild(el("td", "", s.state));
    tr.appendChild(el("td", "num", String(s.in_flight)));
    tr.appendChild(el("td", "num rps", s.rps.toFixed(1)));
    const errText = s.errors + (s.tool_failed ? " (+" + s.tool_failed + " tool)" : "") + (s.last_error ? " " + s.last_error : "");
    tr.appendChild(el("td", s.errors ? "num errs err" : "num errs", errText));
    tr.appendChild(el("td", "budgets", budgetText(s.budgets)));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

// ---- the session view ----

const tl = {
  all: [],        // every entry, in arrival order
  shown: [],      // indexes into all that pass the filter
  byReq: new Map(), // request id → its index in all
  selected: -1,
  kind: "",
  type: "",
  drawn: "",
};

function showSession(handle) {
  document.getElementById("host-view").hidden = true;
  document.getElementById("session-view").hidden = false;
  Object.assign(tl, { all: [], shown: [], byReq: new Map(), selected: -1, drawn: "" });
  document.getElementById("detail").textContent = "Select a message to see it whole.";
  document.getElementById("session-head").textContent = "session " + handle;
  const box = document.getElementById("timeline");
  box.scrollTop = 0;
  draw();
  source = new EventSource("/inspector/api/session?handle=" + encodeURIComponent(handle));
  source.addEventListener("meta", (ev) => renderMeta(JSON.parse(ev.data)));
  source.addEventListener("msgs", (ev) => addEntries(JSON.parse(ev.data)));
  source.addEventListener("dropped", (ev) => {
    const d = JSON.parse(ev.data);
    banner(d.count + " messages were not shown: this page read slower than the session talked.");
  });
  source.addEventListener("end", () => {
    setStatus("session ended");
    source.close();
  });
  source.onerror = () => { setStatus("not available"); source.close(); };
}

function banner(text) {
  const b = el("div", "banner", text);
  document.getElementById("session-note").after(b);
}

function renderMeta(m) {
  setStatus(m.live ? "following live" : "not live: recorded only");
  document.getElementById("session-head").textContent =
    "session " + m.handle + (m.tenant ? " · tenant " + m.tenant : "") + (m.agent_id ? " · agent " + m.agent_id : "");
  const since = new Date(m.since).toLocaleTimeString();
  let note;
  if (m.live && m.recording) {
    note = "Shown: what the store recorded of this session before " + since +
      (m.recorded_more ? " (its newest " + m.recorded + " records)" : "") +
      ", then every message since this page subscribed.";
  } else if (m.live) {
    note = "This session's trajectory is not recorded: shown is every message since this page subscribed at " + since +
      "; earlier ones are not available.";
  } else {
    note = "The session is not live: shown is what the store recorded of it.";
  }
  document.getElementById("session-note").textContent =
    note + " Nothing is recorded for the inspector's sake.";
}

function passes(e) {
  if (tl.kind && e.kind !== tl.kind) return false;
  if (tl.type && !e.type.includes(tl.type)) return false;
  return true;
}

function addEntries(list) {
  for (const e of list) {
    const i = tl.all.length;
    e.n = i;
    tl.all.push(e);
    if (e.kind === "request" && e.id) tl.byReq.set(e.id, i);
    if (e.dir === "host" && e.req_id && e.kind !== "event") {
      const r = tl.byReq.get(e.req_id);
      if (r !== undefined) {
        const q = tl.all[r];
        q.answer = e.kind === "error" ? (e.code || "error") : "ok";
        // A tool that ran and failed answers with success false.
        const res = e.message && e.message.result;
        if (e.kind === "reply" && res && res.success === false) {
          q.answer = "tool failed" + (res.error_code ? ": " + res.error_code : "");
          e.toolFailed = q.answer;
        }
        if (e.duration_ms !== undefined) q.latency = e.duration_ms;
        e.request = r;
      }
    }
    if (e.type === "cancel") {
      const target = (e.message && e.message.req_id) || "";
      const r = tl.byReq.get(target);
      if (r !== undefined) tl.all[r].cancelled = true;
    }
    if (passes(e)) tl.shown.push(i);
  }
  const box = document.getElementById("timeline");
  const follow = document.getElementById("follow").checked;
  sizeSpacer();
  if (follow) box.scrollTop = box.scrollHeight;
  tl.drawn = "";
  draw();
  if (typeof entriesChanged === "function") entriesChanged();
}

function refilter() {
  tl.kind = document.getElementById("filter-kind").value;
  tl.type = document.getElementById("filter-type").value.trim();
  tl.shown = [];
  for (const e of tl.all) if (passes(e)) tl.shown.push(e.n);
  sizeSpacer();
  tl.drawn = "";
  draw();
}

function sizeSpacer() {
  document.getElementById("spacer").style.height = tl.shown.length * ROW + "px";
  document.getElementById("count").textContent = tl.shown.length + " of " + tl.all.length + " messages";
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function statusOf(e) {
  if (e.kind === "request") {
    if (e.cancelled && !e.answer) return ["cancelling", "status-pending"];
    if (!e.answer) return ["pending", "status-pending"];
    const lat = e.latency !== undefined ? " " + e.latency.toFixed(1) + " ms" : "";
    if (e.answer === "ok") return ["→ reply" + lat, "status-ok"];
    return ["→ " + e.answer + lat, "status-err"];
  }
  if (e.request !== undefined) {
    const lat = e.duration_ms !== undefined ? " " + e.duration_ms.toFixed(1) + " ms" : "";
    const bad = e.kind === "error" || e.toolFailed;
    const why = e.toolFailed ? " · " + e.toolFailed : e.kind === "error" ? " · " + (e.code || "error") : "";
    return ["↳ " + (tl.all[e.request].type || "") + lat + why, bad ? "status-err" : "status-ok"];
  }
  if (e.type === "cancel" && e.message && e.message.req_id) return ["cancels #" + e.message.req_id, "status-pending"];
  if (e.kind === "error") return [e.code || "error", "status-err"];
  return ["", ""];
}

// draw renders only the rows in view: the timeline holds a few dozen
// nodes however long the session.
function draw() {
  const box = document.getElementById("timeline");
  const spacer = document.getElementById("spacer");
  const first = Math.max(0, Math.floor(box.scrollTop / ROW) - OVERSCAN);
  const last = Math.min(tl.shown.length, Math.ceil((box.scrollTop + box.clientHeight) / ROW) + OVERSCAN);
  const key = first + ":" + last + ":" + tl.selected;
  if (key === tl.drawn) return;
  tl.drawn = key;
  const rows = [];
  for (let k = first; k < last; k++) {
    const e = tl.all[tl.shown[k]];
    const r = el("div", "row k-" + e.kind + (e.src === "recorded" ? " recorded" : "") + (e.n === tl.selected ? " sel" : ""));
    r.style.top = k * ROW + "px";
    r.dataset.n = String(e.n);
    r.dataset.kind = e.kind;
    r.dataset.type = e.type || "";
    r.appendChild(el("span", "t", fmtTime(e.at)));
    r.appendChild(el("span", "kind", (e.dir === "agent" ? "▶ " : "◀ ") + e.kind));
    r.appendChild(el("span", "type", (e.type || "(undecodable)") + " "));
    if (e.id) r.appendChild(el("span", "id", "#" + e.id + " "));
    const [st, cls] = statusOf(e);
    if (st) r.appendChild(el("span", cls, st));
    rows.push(r);
  }
  spacer.replaceChildren(...rows);
}

function select(n) {
  tl.selected = n;
  const e = tl.all[n];
  document.getElementById("detail").textContent =
    (e.src === "recorded" ? "recorded" : "live") + " · " + new Date(e.at).toISOString() + "\n\n" +
    JSON.stringify(e.message, null, 2);
  tl.drawn = "";
  draw();
}

// ---- routing ----

function route() {
  if (source) source.close();
  source = null;
  document.querySelectorAll(".banner").forEach((b) => b.remove());
  const m = location.hash.match(/^#\/session\/(h-[0-9a-f]{32})$/);
  if (m) showSession(m[1]);
  else showHost();
  if (typeof routed === "function") routed(m ? m[1] : "");
}

document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("timeline");
  box.addEventListener("scroll", () => {
    draw();
    // Scrolling up stops following; back at the end follows again.
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - ROW;
    document.getElementById("follow").checked = atEnd;
  });
  document.getElementById("spacer").addEventListener("click", (ev) => {
    const row = ev.target.closest(".row");
    if (row) select(Number(row.dataset.n));
  });
  document.getElementById("filter-kind").addEventListener("change", refilter);
  document.getElementById("filter-type").addEventListener("input", refilter);
  document.getElementById("follow").addEventListener("change", () => {
    if (document.getElementById("follow").checked) box.scrollTop = box.scrollHeight;
  });
  window.addEventListener("hashchange", route);
  route();
});
