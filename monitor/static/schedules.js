// The Schedules page: the monitor's job schedules, when each runs next, what it fired,
// and a switch to pause or resume one (control).
import {cell, duration, el, empty, every, getJSON, link, nav, num, say, send, term, utc} from "./common.js";

nav();
document.getElementById("skipped-head").append(term("skipped"));
const API = "/netdiscovery/monitor/schedules";

function what(request) {
  const project = request.project ? `${request.project}: ` : "";
  return `${project}${request.spider ?? "?"} on ${request.on ?? "any"}`;
}

async function poll() {
  const {schedules} = await getJSON(API);
  const body = document.getElementById("schedules");
  if (!schedules.length) return empty(body, "no schedules", 9);
  body.replaceChildren();
  for (const s of schedules) {
    const row = body.insertRow();
    row.dataset.schedule = s.id;
    cell(row, el("code", s.id));
    cell(row, what(s.request ?? {}));
    cell(row, s.cron ? `cron ${s.cron}` : `every ${duration(s.every)}`);
    cell(row, s.enabled ? "yes" : "no", s.enabled ? "state-running" : "muted");
    cell(row, s.next_run ? `${utc(s.next_run)} (in ${duration(s.next_run - Date.now() / 1000)})` : "-");
    cell(row, num(s.fired), "num");
    cell(row, num(s.skipped), "num");
    cell(row, s.last_job ? link(`/jobs#${s.last_job}`, s.last_job) : "-");
    const button = el("button", s.enabled ? "disable" : "enable");
    Object.assign(button.dataset, {schedule: s.id, enabled: s.enabled ? "" : "1"});
    cell(row, button);
  }
}

document.getElementById("schedules").addEventListener("click", async ev => {
  const button = ev.target;
  if (!(button instanceof HTMLButtonElement) || !button.dataset.schedule) return;
  const enabled = Boolean(button.dataset.enabled);
  const answer = await send("PATCH", `${API}/${button.dataset.schedule}`, {enabled});
  say(answer.ok ? `schedule ${button.dataset.schedule} ${enabled ? "enabled" : "disabled"}`
                : `schedule ${button.dataset.schedule} not changed${answer.message}`, !answer.ok);
  await poll();
});

every(poll, 2000);
