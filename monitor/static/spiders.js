// The Spiders page: each engine's spiders with their rates over a span, pause, resume
// and stop buttons, their failed requests (with a retry) and their next scheduled runs.
import {chart, reading} from "./chart.js";
import {cell, duration, el, empty, every, getJSON, nav, num, params, say, send, term, utc} from "./common.js";

nav();
document.getElementById("failed-head").append("Failed requests ", el("span", "", "small"));
document.querySelector("#failed-head .small").append("(", term("failures", "what is kept"), ")");
const ACTIONS = {running: ["pause", "stop"], paused: ["resume", "stop"]};  // what the engine allows, by state
const spanSelect = document.getElementById("span");
spanSelect.value = params.get("span") ?? sessionStorage.getItem("netdisco-span") ?? "10m";
if (!spanSelect.value) spanSelect.value = "10m";  // a span it does not offer
spanSelect.addEventListener("change", () => { sessionStorage.setItem("netdisco-span", spanSelect.value); poll(); });

// Spans past what the monitor keeps ([http] history_hours) cannot be chosen.
function limitSpans(hours) {
  for (const option of spanSelect.options) option.disabled = Number(option.dataset.seconds) > hours * 3600;
}

// One engine's spiders: from its last poll, or (engine not read yet) its znode list.
function spiderRows(engine, polled) {
  const fromNode = new Map((engine.spiders ?? []).map(s => [s.name, s]));
  const rows = polled ? polled.spiders : [...fromNode.values()];
  return rows.map(s => ({...s, state: fromNode.get(s.name)?.state ?? s.state,
                         next_run: s.next_run ?? fromNode.get(s.name)?.next_run}));
}

function frame(history) {
  return {now: history.now, span: history.span, step: history.step, interval: history.interval,
          label: spanSelect.selectedOptions[0]?.textContent ?? ""};
}

function spiderTable(e, polled, history) {
  const table = el("table");
  table.dataset.engine = e.id;
  const head = table.createTHead().insertRow();
  for (const h of ["spider", "state", "pages", "failures", "queue", "pages/s", "chart", "next run", ""]) {
    const th = el("th");
    th.append(["failures", "queue"].includes(h) ? term(h) : h);
    head.append(th);
  }
  const body = table.createTBody();
  for (const s of spiderRows(e, polled)) {
    const row = body.insertRow();
    row.dataset.spider = s.name;
    cell(row, s.name);
    cell(row, s.state ?? "?", `state state-${s.state}`);
    cell(row, num(s.succeeded), "num");
    cell(row, num(s.failed), "num");
    cell(row, num(s.queue_size), "num");
    cell(row, reading(s.series ?? [], 0), "num rate");  // the legend's figure, read once
    cell(row, chart(s.series ?? [], frame(history)));
    cell(row, s.next_run ? utc(s.next_run) : "-");
    const buttons = cell(row, "");
    if (history.control) for (const action of ACTIONS[s.state] ?? []) {
      const button = el("button", action);
      Object.assign(button.dataset, {action, engine: e.id, spider: s.name});
      buttons.append(button);
    }
  }
  if (!body.rows.length) empty(body, polled ? "no spiders on this engine" : "no spiders known yet", 9);
  return table;
}

function renderSpiders(engines, history) {
  const box = document.getElementById("spiders");
  box.replaceChildren();
  box.className = engines.length ? "" : "muted";
  if (!engines.length) box.textContent = "none yet";
  for (const e of engines) {
    const polled = history.engines[e.id];
    const unread = e.status_error ? ` (status not read: ${e.status_error})` : " (not read yet)";
    box.append(el("h3", e.id + (polled && !e.status_error ? "" : unread), e.status_error ? "error" : ""));
    if (polled) {
      const whole = el("div", undefined, "engine-chart");
      whole.dataset.engine = e.id;
      whole.append(el("span", "all its spiders", "muted"), chart(polled.series ?? [], frame(history), 560, 130));
      box.append(whole);
    }
    box.append(spiderTable(e, polled, history));
  }
}

function renderNextRuns(engines, history) {
  const runs = [];
  for (const e of engines) for (const s of spiderRows(e, history.engines[e.id])) {
    if (typeof s.next_run === "number") runs.push([s.next_run, e.id, s.name]);
  }
  runs.sort((a, b) => a[0] - b[0]);
  const body = document.getElementById("next-runs");
  if (!runs.length) return empty(body, "nothing scheduled", 4);
  body.replaceChildren();
  for (const [at, engine, spider] of runs) {
    const row = body.insertRow();
    cell(row, utc(at));
    cell(row, duration(Math.max(0, at - Date.now() / 1000)), "num");
    cell(row, engine);
    cell(row, spider);
  }
}

const failedSeen = new Map();  // spider -> [failures counted, when read]: read again on change or after 10 s
const failedRows = new Map();  // spider -> its aggregated answer

async function pollFailed(engines, history) {
  const counts = new Map();
  for (const e of engines) for (const s of history.engines[e.id]?.spiders ?? []) {
    if (typeof s.failed === "number" && s.failed > 0) counts.set(s.name, (counts.get(s.name) ?? 0) + s.failed);
  }
  const now = Date.now();
  for (const [spider, n] of counts) {
    const seen = failedSeen.get(spider);
    if (seen && seen[0] === n && now - seen[1] < 10000) continue;
    failedSeen.set(spider, [n, now]);
    failedRows.set(spider, await getJSON(`/netdiscovery/monitor/spiders/${encodeURIComponent(spider)}/failed`));
  }
  for (const spider of [...failedRows.keys()]) if (!counts.has(spider)) failedRows.delete(spider);
  renderFailed(history.control);
}

function renderFailed(controls) {
  const body = document.getElementById("failed");
  body.replaceChildren();
  for (const [spider, agg] of failedRows) for (const one of agg.engines) {
    if (!one.total && !one.error) continue;
    const row = body.insertRow();
    Object.assign(row.dataset, {engine: one.engine, spider});
    cell(row, one.engine);
    cell(row, spider);
    cell(row, one.error ? `not read: ${one.error}` : num(one.total), "num total");
    cell(row, Object.entries(one.by_reason ?? {}).map(([r, n]) => `${r}: ${n}`).join(", "));
    cell(row, (one.failed ?? []).slice(0, 3).map(f => `${f.reason ?? "?"} ${f.url}`).join("\n"));
    const buttons = cell(row, "");
    if (controls && one.total) {
      const button = el("button", "retry all");
      Object.assign(button.dataset, {retry: "1", engine: one.engine, spider});
      buttons.append(button);
    }
  }
  if (!body.rows.length) empty(body, "none", 6);
}

function spiderUrl(engine, spider, what) {
  return `/netdiscovery/monitor/engines/${encodeURIComponent(engine)}/spiders/${encodeURIComponent(spider)}/${what}`;
}

document.getElementById("failed").addEventListener("click", async ev => {
  const button = ev.target;
  if (!(button instanceof HTMLButtonElement) || !button.dataset.retry) return;
  const {engine, spider} = button.dataset;
  const answer = await send("POST", spiderUrl(engine, spider, "failed/retry"), {});
  if (answer.ok) say(`${engine}/${spider} retry: requeued ${answer.body.requeued}`);
  else say(`${engine}/${spider} retry failed${answer.message}`, true);
  failedSeen.clear();
});

document.getElementById("spiders").addEventListener("click", async ev => {
  const button = ev.target;
  if (!(button instanceof HTMLButtonElement) || !button.dataset.action) return;
  const {action, engine, spider} = button.dataset;
  const what = `${engine}/${spider} ${action}`;
  say(`${what}: sent`);
  const answer = await send("POST", spiderUrl(engine, spider, action));
  if (answer.ok) say(`${what}: now ${answer.body.state}`);
  else say(`${what} failed${answer.message}`, true);
  poll();
});

async function poll() {
  const [view, history] = await Promise.all([
    getJSON("/netdiscovery/monitor"),
    getJSON(`/netdiscovery/monitor/spiders?span=${encodeURIComponent(spanSelect.value)}`),
  ]);
  limitSpans(history.hours);
  renderSpiders(view.engines, history);
  renderNextRuns(view.engines, history);
  await pollFailed(view.engines, history);
}

every(poll);
