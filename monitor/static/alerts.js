// The Alerts page: which hooks the monitor has, the alerts waiting out their grace period
// or being sent, and each delivery with its result (sent, failed), attempts and error.
import {cell, deliverer, el, empty, every, getJSON, nav, num, term, utc} from "./common.js";

nav();

function hooks(view) {
  const box = document.getElementById("hooks");
  box.replaceChildren();
  if (!view.hooks.length) {
    box.append(el("b", "No alert hook configured: "), "events are kept and shown here, and nothing is sent. ",
               "Add [email], [[webhook]] or [[command]] to the monitor's configuration.");
    return;
  }
  box.append("Hooks: ");
  view.hooks.forEach((h, n) => box.append(n ? "; " : "", el("b", h.name), ` (${h.events.join(", ")})`));
  box.append(". An alert about a lost engine waits its ", term("grace"), ` of ${num(view.grace)} s first.`);
}

function waiting(view) {
  const body = document.getElementById("waiting");
  const rows = [...view.waiting.map(w => ({...w, state: "waiting"})),
                ...view.sending.map(s => ({event: s.events.join(", "), hook: s.hook, state: s.retrying ? "failed once, retrying" : "being sent"}))];
  if (!rows.length) return empty(body, "nothing waiting", 5);
  body.replaceChildren();
  for (const w of rows) {
    const row = body.insertRow();
    row.dataset.state = w.state;
    cell(row, w.event);
    cell(row, w.engine_id ?? w.hook ?? "-");
    cell(row, utc(w.since));
    cell(row, w.until ? `${utc(w.until)} unless it is back` : "-");
    cell(row, w.state === "waiting" ? term("waiting") : w.state);
  }
}

function delivered(view) {
  const body = document.getElementById("alerts");
  if (!view.deliveries.length) return empty(body, "none yet", 6);
  body.replaceChildren();
  for (const a of [...view.deliveries].reverse()) {
    const row = body.insertRow();
    row.dataset.result = a.result;
    cell(row, utc(a.time));
    cell(row, a.hook);
    cell(row, a.events.join(", "));
    const result = a.result === "sent" ? "sent" : a.result === "dropped" ? "failed" : a.result;
    cell(row, term(result), a.result === "sent" ? "state-finished" : "error");
    cell(row, String(a.attempts), "num");
    cell(row, a.error ?? "");
  }
}

async function poll() {
  const view = await getJSON("/netdiscovery/monitor/alerts");
  hooks(view);
  document.getElementById("monitors").textContent = deliverer(view.monitors);
  waiting(view);
  delivered(view);
}

every(poll);
