// The Engines page: each engine with its node facts and the jobs it ran, the ones gone
// (kept offline), and the recent events by what changed.
import {badge, bytes, cell, deliverer, el, empty, every, getJSON, link, nav, num, term, utc} from "./common.js";

nav();
document.getElementById("unobserved-term").append(term("changes too fast to observe"));
document.getElementById("failures-term").append(term("failures"));
document.getElementById("queue-term").append(term("queue", "queued"));
document.getElementById("facts-head").append(term("node facts", "node"));

let known = null;        // engine ids shown by the previous poll (null: first poll)
let lastSeq = 0;
const allEvents = [];    // newest last, at most 500

const ALERT = {
  sent: () => "alert sent",
  dropped: () => "alert failed (dropped after its retries)",
  waiting: () => "alert waits out its grace period",
  pending: () => "alert on its way",
  elsewhere: () => "alert left to the monitor that sends the alerts (not this one)",
  none: () => "no alert hook configured for it",
};

function alertNode(alert) {
  const span = el("span");
  if (!alert) return span;
  const says = (ALERT[alert.state] ?? (() => alert.state))();
  const hooks = alert.hooks.length ? ` (${alert.hooks.join(", ")})` : "";
  if (alert.state === "waiting") span.append("alert waits out its ", term("grace"), " period" + hooks);
  else span.append(says + hooks);
  if (alert.error) span.append(`: ${alert.error}`);
  return span;
}

function jobsText(jobs) {
  if (!jobs?.length) return "-";
  const pages = jobs.reduce((n, j) => n + (j.stats?.succeeded ?? 0), 0);
  const running = jobs.filter(j => j.state === "running").length;
  return `${jobs.length} job${jobs.length === 1 ? "" : "s"}, ${num(pages)} pages` +
         (running ? ` (${running} running)` : "");
}

function jobsCell(row, jobs) {
  const td = cell(row, "", "jobs");
  if (!jobs?.length) { td.textContent = "-"; return; }
  td.append(link(`/jobs?engine=${encodeURIComponent(row.dataset.engine)}`, jobsText(jobs)));
  const names = [...new Set(jobs.map(j => j.spider))].slice(0, 4).join(", ");
  td.append(el("div", names, "small"));
}

function spidersText(spiders) {
  return (spiders ?? []).map(s => `${s.name} (${s.state})`).join(", ") || "-";
}

// An engine that left or was lost, greyed, with its last figures, how it went and its alert.
function offlineRow(body, e, jobs) {
  const row = body.insertRow();
  row.dataset.engine = e.id;
  row.dataset.offline = e.how;
  row.className = "offline";
  cell(row, e.id);
  cell(row, `${e.host ?? "?"}:${e.port ?? "?"}`);
  const gone = el("span");
  gone.append(term(e.how === "left" ? "left" : "lost", e.how === "left" ? "left" : "lost (crashed or cut off)"),
              ` at ${utc(e.gone_at)}; `, alertNode(e.alert));
  cell(row, gone, "gone");
  cell(row, term("offline"), "state");
  const total = key => (e.spiders_read ?? []).reduce((n, s) => n + (typeof s[key] === "number" ? s[key] : 0), 0);
  // a reading, with its time: what the engine did after it (its last seconds) is not in it
  const read = e.spiders_read_at ? `read ${utc(e.spiders_read_at)}` : "last read";
  const figures = e.spiders_read?.length ? `${read}: ${num(total("succeeded"))} pages, ${num(total("items"))} items`
    : "its spiders never read";
  cell(row, `${spidersText(e.spiders)} · ${figures}`);
  jobsCell(row, jobs);
  cell(row, "-", "num");
  cell(row, "-");
  cell(row, utc(e.since), "time");
}

function nodeText(facts) {
  if (!facts || typeof facts !== "object" || !Object.keys(facts).length) return "-";
  const parts = [];
  if (typeof facts.cpu_percent === "number") parts.push(`cpu ${facts.cpu_percent.toFixed(0)}%`);
  if (typeof facts.load1 === "number") parts.push(`load ${facts.load1.toFixed(2)}`);
  if (typeof facts.rss === "number") parts.push(`rss ${bytes(facts.rss)}`);
  if (typeof facts.memory_available === "number") parts.push(`mem free ${bytes(facts.memory_available)}`);
  if (typeof facts.open_fds === "number") parts.push(`fds ${facts.open_fds}`);
  for (const [dir, free] of Object.entries(facts.disk_free ?? {})) parts.push(`${dir} disk ${bytes(free)} free`);
  return parts.join(" · ") || "-";
}

function engineRow(body, e, jobs) {
  const row = body.insertRow();
  row.dataset.engine = e.id;
  cell(row, e.id);
  cell(row, `${e.host ?? "?"}:${e.port ?? "?"}`);
  const url = String(e.status_url ?? "");
  const a = link(/^https?:\/\//.test(url) ? url : "#", url || "-");
  cell(row, a);
  if (e.stalled === true) {
    const said = cell(row, "", "stalled");
    said.append(term("stalled"), ` (loop ${num(e.loop_lag)} s late)`);
    said.dataset.state = "stalled";
  } else {
    cell(row, e.state, e.state === "running" ? "state-running" : "muted").dataset.state = e.state;
  }
  cell(row, spidersText(e.spiders), "spiders");
  jobsCell(row, jobs);
  cell(row, e.pages_per_second == null ? "?" : String(e.pages_per_second), "num");
  cell(row, nodeText(e.facts), "node");
  cell(row, utc(e.since), "time");
}

function renderEngines(view, byEngine) {
  const body = document.getElementById("engines");
  const offline = view.offline ?? [];
  if (!view.engines.length && !offline.length) return empty(body, "no engines", 9);
  body.replaceChildren();
  for (const e of offline) offlineRow(body, e, byEngine.get(e.id));
  for (const e of view.engines) engineRow(body, e, byEngine.get(e.id));
}

function noteChanges(engines) {
  const now = new Set(engines.map(e => e.id));
  if (known !== null) {
    const list = document.getElementById("changes");
    const stamp = utc(Date.now() / 1000);
    const change = text => { const li = el("li", `${stamp} ${text}`); li.dataset.change = text; list.append(li); };
    for (const id of now) if (!known.has(id)) change(`+${id}`);
    for (const id of known) if (!now.has(id)) change(`-${id}`);
    const none = list.children.length === 0;
    list.hidden = none;
    document.getElementById("changes-head").hidden = none;
  }
  known = now;
}

// What an engine_updated carries that a person acts on (spider changes and rule alarms
// are events of their own): its state, or its loop stalling or recovering. Else nothing.
function updateCarries(ev) {
  const before = ev.previous ?? {}, after = ev.engine ?? {};
  if (before.state !== undefined && before.state !== after.state) return `state ${before.state} → ${after.state}`;
  if (Boolean(before.stalled) !== Boolean(after.stalled)) return after.stalled ? "loop stalled" : "loop running again";
  return null;
}

function whatChanged(ev) {
  const d = ev.detail ?? {};
  if (ev.type === "engine_updated") return updateCarries(ev);
  if (d.from !== undefined && d.to !== undefined) return `${d.from ?? "-"} → ${d.to}`;
  const figures = Object.entries(d).filter(([k, v]) => !["spider", "dashboard", "last_seen"].includes(k) && v !== null && typeof v !== "object");
  return figures.slice(0, 4).map(([k, v]) => `${k} ${figure(k, v)}`).join(", ");
}

// A figure of an event's detail in words: a time in the one format, a hash shortened.
function figure(key, value) {
  if (typeof value === "number" && /(_at|_seen|time|since)$/.test(key)) return utc(value);
  if (typeof value === "number") return String(Number(value.toPrecision(4)));
  return /^[0-9a-f]{40,}$/.test(value) ? value.slice(0, 12) : String(value);
}

/** Events as shown: the ones that say a change, runs of one kind from one engine folded. */
export function folded(events) {
  const shown = [];
  for (const ev of events) {
    const what = whatChanged(ev);
    if (ev.type === "engine_updated" && !what) continue;
    const last = shown[shown.length - 1];
    if (last && last.type === ev.type && last.engine_id === ev.engine_id) {
      last.count += 1;
      last.time = ev.time;
      last.what = what;
      last.spider = last.spider === ev.detail?.spider ? last.spider : null;
      continue;
    }
    shown.push({type: ev.type, engine_id: ev.engine_id, time: ev.time, what, count: 1,
                spider: ev.detail?.spider ?? null});
  }
  return shown;
}

function addOption(select, value) {
  if (value && ![...select.options].some(o => o.value === value)) select.append(new Option(value, value));
}

function renderEvents(events) {
  for (const ev of events) {
    if (ev.seq <= lastSeq) continue;
    lastSeq = ev.seq;
    allEvents.push(ev);
    addOption(document.getElementById("event-type"), ev.type);
    addOption(document.getElementById("event-engine"), ev.engine_id);
  }
  allEvents.splice(0, Math.max(0, allEvents.length - 500));
  const type = document.getElementById("event-type").value;
  const engine = document.getElementById("event-engine").value;
  const chosen = allEvents.filter(ev => (!type || ev.type === type) && (!engine || ev.engine_id === engine));
  const items = folded(chosen).slice(-200).reverse().map(f => {
    const li = el("li");
    Object.assign(li.dataset, {type: f.type, engine: f.engine_id ?? "", count: String(f.count)});
    const who = (f.engine_id ?? "") + (f.spider ? "/" + f.spider : "");
    li.append(el("span", utc(f.time), "ts"), " ", el("span", f.type, "type"), " ", who);
    if (f.count > 1) li.append(" ", el("span", `×${f.count}`, "count"));
    if (f.what) li.append(" ", el("span", f.what, "what"));
    return li;
  });
  document.getElementById("events").replaceChildren(...items);
}
for (const id of ["event-type", "event-engine"]) document.getElementById(id).addEventListener("change", () => renderEvents([]));

function renderTotals(view, totals, jobs) {
  const set = (id, v) => { document.getElementById(id).textContent = num(v); };
  set("t-engines", view.engines.length);
  set("t-spiders", totals.spiders);
  set("t-running", totals.states.running ?? 0);
  set("t-pages", totals.pages);
  set("t-failed", totals.failed);
  set("t-queue", totals.queue);
  set("t-rate", totals.pages_per_second);
  set("t-jobs", jobs.length);
}

async function poll() {
  const [view, evs, history, jobs] = await Promise.all([
    getJSON("/netdiscovery/monitor"),
    getJSON(`/netdiscovery/events?since=${lastSeq}&limit=200`),
    getJSON("/netdiscovery/monitor/spiders"),
    getJSON("/netdiscovery/monitor/jobs").then(b => b.jobs, () => []),
  ]);
  const byEngine = new Map();
  for (const job of jobs) if (job.engine) byEngine.set(job.engine, [...(byEngine.get(job.engine) ?? []), job]);
  renderEngines(view, byEngine);
  noteChanges(view.engines);
  renderTotals(view, history.totals, jobs);
  renderEvents(evs.events);
  document.getElementById("root").textContent = view.root;
  const n = view.engines.length;
  document.getElementById("count").textContent = `${n} engine${n === 1 ? "" : "s"}`;
  document.getElementById("unobserved").textContent = view.unobserved_changes;
  document.getElementById("monitors").textContent = deliverer(view.monitors);
  document.getElementById("updated").textContent = utc(Date.now() / 1000);
  const ok = view.zookeeper.connected && view.zookeeper.fresh;
  badge(ok, ok ? "live" : "stale view");
  return false;
}

every(poll);
