// The Jobs page: start a job by picking a project, a version and a spider by name; the
// jobs, newest first; one job (#id) with its feeds, its kept items page by page (and as
// downloads), and its log followed live, wrapped and filtered.
import {authHeaders, cell, download, duration, el, empty, every, getJSON, link, nav, num, params, send, term, utc} from "./common.js";

nav();
document.getElementById("on-term").append(term("on", "run on"));
document.getElementById("feeds-term").append(term("feeds", "Feeds"));
document.getElementById("items-term").append(term("kept items", "Items"));
const API = "/netdiscovery/monitor/jobs";
const $ = id => document.getElementById(id);
const onlyEngine = params.get("engine");
if (onlyEngine) {
  $("filter").hidden = false;
  $("filter").append(`jobs that ran on ${onlyEngine} · `, link("/jobs", "all jobs"));
}

// ---- the start form: projects, their versions and their spiders' names, from the routes
async function loadProjects() {
  const {projects} = await getJSON("/netdiscovery/monitor/projects");
  const select = $("project");
  for (const p of projects) select.append(new Option(p.project, p.project));
  const wanted = params.get("project");
  if (wanted && projects.some(p => p.project === wanted)) { select.value = wanted; await projectChosen(); }
}

async function projectChosen() {
  const project = $("project").value;
  $("version-box").hidden = $("pick-box").hidden = !project;
  $("spider-box").hidden = Boolean(project);
  if (!project) return;
  const about = await getJSON(`/netdiscovery/monitor/projects/${encodeURIComponent(project)}`);
  const versions = $("version");
  versions.replaceChildren(new Option(`default (${shortVersion(about.versions.find(v => v.id === about.default))})`, ""));
  for (const v of [...about.versions].reverse()) versions.append(new Option(`${shortVersion(v)} · ${utc(v.created)}`, v.id));
  await versionChosen();
}

function shortVersion(v) {
  if (!v) return "none";
  return v.label ? `${v.label} (${v.id.slice(0, 8)})` : v.id.slice(0, 12);
}

async function versionChosen() {
  const project = $("project").value, version = $("version").value;
  const query = version ? `?version=${encodeURIComponent(version)}` : "";
  const {spiders, commands = []} = await getJSON(`/netdiscovery/monitor/projects/${encodeURIComponent(project)}/spiders${query}`);
  const pick = $("spider-pick");
  // a command's value says so: a spider's name never holds a colon
  pick.replaceChildren(...spiders.map(s => new Option(`${s.name} (${s.spider})`, s.name)),
    ...commands.map(c => new Option(`${c.name} (command: ${c.argv.join(" ")})`, `command:${c.name}`)));
}

$("project").addEventListener("change", () => projectChosen().catch(err => { $("error").textContent = err.message; }));
$("version").addEventListener("change", () => versionChosen().catch(err => { $("error").textContent = err.message; }));

$("start").addEventListener("submit", async event => {
  event.preventDefault();
  const value = id => $(id).value.trim();
  const project = value("project");
  const body = {spider: project ? value("spider-pick") : value("spider"), on: value("on") || "any"};
  if (project) body.project = project;
  if (project && value("version")) body.version = value("version");
  try {
    if (value("args")) body.args = JSON.parse(value("args"));
    if (value("settings")) body.settings = JSON.parse(value("settings"));
  } catch (err) { $("error").textContent = `arguments and settings are JSON objects: ${err.message}`; return; }
  if (!body.spider) { $("error").textContent = "name a spider"; return; }
  if (body.spider.startsWith("command:")) {  // a command job: its arguments are a JSON list
    body.command = body.spider.slice("command:".length);
    delete body.spider;
    if (body.args !== undefined) { body.argv = body.args; delete body.args; }
  }
  const answer = await send("POST", API, body);
  $("error").textContent = answer.ok ? "" : `not started ${answer.message}`;
  if (answer.ok) { await refresh(); location.hash = answer.body.jobs[0].id; }
});

{
  const start = el("button", "Start");
  Object.assign(start, {type: "submit", id: "start-button"});
  $("start").append(start);  // only now: a click before this module ran would reload the page
}

// ---- the list
function stateCell(row, state) {
  const td = cell(row, state, `state state-${state}`);
  return td;
}

function ran(job) {
  return job.started_at ? duration((job.ended_at || Date.now() / 1000) - job.started_at) : "-";
}

function actions(td, job) {
  if (job.state === "pending" || job.state === "running") {
    const cancel = el("button", "Cancel", "cancel");
    cancel.dataset.act = "cancel";
    cancel.dataset.job = job.id;
    td.append(cancel);
  }
  const rerun = el("button", "Re-run", "re-run");
  rerun.dataset.act = "rerun";
  rerun.dataset.job = job.id;
  td.append(rerun);
}

function render(jobs) {
  const body = $("jobs");
  const shown = onlyEngine ? jobs.filter(j => j.engine === onlyEngine) : jobs;
  if (!shown.length) return empty(body, "no jobs yet", 11);
  body.replaceChildren();
  for (const job of shown) {
    const row = body.insertRow();
    row.dataset.job = job.id;
    if (job.id === current) row.className = "chosen";
    cell(row, link(`#${job.id}`, job.id));
    cell(row, job.project ?? "-");
    cell(row, job.kind === "command" ? `${job.spider} (command)` : job.spider);
    stateCell(row, job.state);
    cell(row, job.engine ?? "-");
    cell(row, utc(job.started_at));
    cell(row, ran(job), "num");
    const stats = job.stats || {};
    cell(row, num(stats.succeeded), "num");
    cell(row, num(stats.items), "num");
    cell(row, num(stats.failed), "num");
    actions(cell(row, ""), job);
  }
}

async function act(what, jobId) {
  const answer = await send("POST", `${API}/${jobId}/${what}`);
  $("error").textContent = answer.ok ? "" : `${what} ${jobId} refused ${answer.message}`;
  if (answer.ok && what === "rerun") location.hash = answer.body.id;
  await refresh();
}

for (const box of [$("jobs"), $("job")]) box.addEventListener("click", ev => {
  const button = ev.target;
  if (button instanceof HTMLButtonElement && button.dataset.act) act(button.dataset.act, button.dataset.job);
});

let jobs = [];
async function refresh() {
  jobs = (await getJSON(API)).jobs;
  render(jobs);
  const job = jobs.find(j => j.id === current);
  if (job) showFacts(job);
}

// ---- one job
let current = null;
let following = null;   // the AbortController of the log being followed

function showFacts(job) {
  $("job-state").textContent = job.state;
  $("job-state").className = `state state-${job.state}`;
  $("job-cancel").hidden = !(job.state === "pending" || job.state === "running");
  $("job-cancel").dataset.act = "cancel";
  $("job-rerun").dataset.act = "rerun";
  $("job-cancel").dataset.job = $("job-rerun").dataset.job = job.id;
  const where = job.project ? `${job.project} @ ${job.version ? job.version.slice(0, 12) : "default"}` : "spider_modules";
  const spider = job.kind === "command" ? `command ${[job.spider, ...(job.argv || [])].join(" ")}`
    : job.spider_class && job.spider_class !== job.spider ? `${job.spider} = ${job.spider_class}` : job.spider;
  const facts = [`${spider} (${where})`, `on ${job.engine ?? "no engine yet"}`, `created ${utc(job.created_at)}`];
  if (job.started_at) facts.push(`started ${utc(job.started_at)}`);
  if (job.ended_at) facts.push(`ended ${utc(job.ended_at)}`);
  if (job.attempts > 1) facts.push(`attempt ${job.attempts}`);
  if (job.exit_status !== null && job.exit_status !== undefined) facts.push(`exit status ${job.exit_status}`);
  if (job.error) facts.push(`error: ${job.error}`);
  $("job-facts").textContent = facts.join(" · ");
  const s = job.stats || {};
  $("job-counters").textContent = `pages ${num(s.succeeded ?? 0)} · items ${num(s.items ?? 0)} · errors ${num(s.failed ?? 0)}` +
    (s.items_kept !== undefined ? ` · kept ${num(s.items_kept)}, dropped ${num(s.items_dropped ?? 0)}` : "");
  renderFeeds(job);
}

function renderFeeds(job) {
  const body = $("feeds");
  if (!job.feeds?.length) return empty(body, "none declared (items are kept all the same: below)", 3);
  body.replaceChildren();
  job.feeds.forEach((feed, index) => {
    const row = body.insertRow();
    cell(row, feed.path ?? "?");
    cell(row, num(feed.items), "num");
    const button = el("button", "show its items");
    button.type = "button";
    button.addEventListener("click", () => { source = index; offset = 0; loadItems(); });
    cell(row, /\.(jsonl|jl|ndjson)$/.test(feed.path ?? "") ? button : el("span", "not JSON lines", "muted"));
  });
}

// items: a page at a time, of the kept items or (``source``: a number) of a feed
let offset = 0, source = null, kept = 0;

function columns(items) {
  const keys = [];
  for (const item of items) for (const k of Object.keys(item ?? {})) if (!keys.includes(k) && keys.length < 12) keys.push(k);
  return keys;
}

function shown(value) {
  if (value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

async function loadItems() {
  const limit = Number($("items-limit").value);
  const feed = source === null ? "" : `&feed=${source}`;
  const resp = await fetch(`${API}/${current}/items?offset=${offset}&limit=${limit}${feed}`, {headers: authHeaders()});
  const body = await resp.json().catch(() => ({}));
  const table = $("items");
  $("items-source").textContent = source === null ? "(kept by the engine)" : `(feed ${source})`;
  if (!resp.ok) {
    table.tHead.replaceChildren();
    empty(table.tBodies[0], resp.status === 404 ? `none yet (${body.error?.message ?? "no items"})` : `not read: ${body.error?.message ?? resp.status}`, 1);
    $("items-range").textContent = "-";
    return;
  }
  const items = body.items ?? [];
  kept = Math.max(body.items_kept ?? body.total ?? 0, offset + items.length);  // never fewer than shown
  const keys = columns(items);
  const head = table.tHead;
  head.replaceChildren();
  const hr = head.insertRow();
  for (const k of ["#", ...keys]) hr.append(el("th", k));
  const tbody = table.tBodies[0];
  if (!items.length) empty(tbody, "no items on this page", keys.length + 1);
  else tbody.replaceChildren();
  items.forEach((item, n) => {
    const row = tbody.insertRow();
    row.dataset.index = String(offset + n);
    cell(row, String(offset + n + 1), "num");
    for (const k of keys) cell(row, shown(item?.[k]));
  });
  const end = offset + items.length;
  $("items-range").textContent = items.length ? `${num(offset + 1)}-${num(end)} of ${num(kept)}` : `0 of ${num(kept)}`;
  $("items-prev").disabled = offset === 0;
  $("items-next").disabled = end >= kept;
}

$("items-prev").addEventListener("click", () => { offset = Math.max(0, offset - Number($("items-limit").value)); loadItems(); });
$("items-next").addEventListener("click", () => { offset += Number($("items-limit").value); loadItems(); });
$("items-limit").addEventListener("change", () => { offset = 0; loadItems(); });
for (const a of document.querySelectorAll("a.download")) a.addEventListener("click", async ev => {
  ev.preventDefault();
  try {
    await download(a.href, `${current}.${a.dataset.format}`);
  } catch (err) { $("error").textContent = `download: ${err.message}`; }
});

// the log: JSON lines shown as "time level event key=value", filtered and wrapped
const LEVELS = {debug: 10, info: 20, warning: 30, error: 40, critical: 50};
let lines = [];

function parse(text) {
  try {
    const data = JSON.parse(text);
    if (data && typeof data === "object" && !Array.isArray(data)) {
      const {timestamp, level, event, ...rest} = data;
      const when = typeof timestamp === "string" && !Number.isNaN(Date.parse(timestamp)) ? utc(Date.parse(timestamp) / 1000) : String(timestamp ?? "");
      const extra = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
      return {when, level: String(level ?? "info").toLowerCase(), event: String(event ?? ""), extra, text};
    }
  } catch { /* not JSON: shown as it is */ }
  return {when: "", level: "info", event: "", extra: text, text};
}

function passes(line) {
  const level = $("log-level").value, words = $("log-text").value.trim().toLowerCase();
  if (level && (LEVELS[line.level] ?? 20) < LEVELS[level]) return false;
  return !words || line.text.toLowerCase().includes(words);
}

function lineNode(line) {
  const span = el("span", undefined, `line lv-${line.level}`);
  if (line.when) span.append(el("span", line.when, "ts"), " ");
  if (line.event) span.append(el("span", line.level.padEnd(7), "lv"), " ", el("span", line.event, "ev"), " ");
  span.append(line.extra, "\n");
  return span;
}

function showLines(fresh) {
  const out = $("log");
  if (fresh === null) out.replaceChildren(...lines.filter(passes).map(lineNode));
  else out.append(...fresh.filter(passes).map(lineNode));
  $("log-count").textContent = `${num(out.childElementCount)} of ${num(lines.length)} lines shown`;
  if ($("log-follow").checked) out.scrollTop = out.scrollHeight;
}

for (const id of ["log-level", "log-text"]) $(id).addEventListener("input", () => showLines(null));
$("log-wrap").addEventListener("change", () => $("log").classList.toggle("nowrap", !$("log-wrap").checked));
$("log-follow").addEventListener("change", () => showLines([]));

async function followLog(id) {
  if (following) following.abort();
  const mine = following = new AbortController();
  lines = [];
  showLines(null);
  // a job not yet placed has no log: ask again until it has one (or another job is shown)
  while (following === mine) {
    try {
      const resp = await fetch(`${API}/${id}/log?tail=2000&follow=1`, {signal: mine.signal, headers: authHeaders()});
      if (!resp.ok) { await new Promise(r => setTimeout(r, 700)); continue; }
      const reader = resp.body.getReader();
      const text = new TextDecoder();
      let rest = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) return;
        const parts = (rest + text.decode(value, {stream: true})).split("\n");
        rest = parts.pop();
        const fresh = parts.filter(p => p.trim()).map(parse);
        lines.push(...fresh);
        if (lines.length > 20000) { lines = lines.slice(-10000); showLines(null); } else showLines(fresh);
      }
    } catch (err) {
      if (err.name !== "AbortError") $("log").append(`\n[${err.message}]`);
      return;
    }
  }
}

function choose() {
  const id = location.hash.slice(1);
  if (!/^[0-9a-f]{6,40}$/.test(id) || id === current) return;
  current = id;
  $("job").hidden = false;
  $("job-id").textContent = id;
  offset = 0;
  source = null;
  const job = jobs.find(j => j.id === id);
  if (job) showFacts(job);
  for (const a of document.querySelectorAll("a.download")) a.href = `${API}/${id}/items?format=${a.dataset.format}`;
  loadItems();
  followLog(id);
}

window.addEventListener("hashchange", choose);
loadProjects().catch(err => { $("error").textContent = `projects not read: ${err.message}`; });
let ticks = 0, lastState = null;
every(async () => {
  await refresh();
  choose();
  const job = jobs.find(j => j.id === current);
  // a running job's items grow: its page is read again every few polls, and once as it ends
  const changed = job !== undefined && job.state !== lastState;
  lastState = job?.state ?? null;
  if (job && (changed || (job.state === "running" && ++ticks % 3 === 0))) await loadItems();
});
