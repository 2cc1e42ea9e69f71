// What every dashboard page shares: the navigation bar, the one time format, plain-word
// explanations of the monitor's terms, the control token, and safe rendering helpers.
// Server data is put in the page with textContent only: it is never parsed as HTML.

export const params = new URLSearchParams(location.search);
/** how often a page polls the monitor, in ms (?interval= for tests) */
export const INTERVAL = Math.max(200, Number(params.get("interval")) || 1000);

/** The one time format of the dashboard: UTC, 24 h, to the second. */
export function utc(seconds) {
  if (typeof seconds !== "number" || !seconds) return "-";
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

/** A span of seconds in words: "45 s", "3 min 20 s", "2 h 5 min". */
export function duration(seconds) {
  if (typeof seconds !== "number" || seconds < 0) return "-";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function num(value) {
  return typeof value === "number" ? value.toLocaleString("en") : "-";
}

export function bytes(n) {
  if (typeof n !== "number") return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

/** The words a newcomer cannot guess, each explained in one line where it stands. */
export const TERMS = {
  "changes too fast to observe": "ZooKeeper tells the monitor that a node changed, not every change: these are the changes that came and went between two reads (counted from the node's version), so none was shown",
  "control token": "The secret the monitor was started with ([control] token_env). Starting, cancelling, pausing and reading a job's log or items need it; a monitor with no token answers these only on this machine (loopback). Kept in this browser tab only.",
  "grace": "How long an alert about a lost engine waits ([alerts] grace): an engine back within it was only a short cut (a flap), and no alert is sent",
  "tombstone": "A note an engine leaves in ZooKeeper when it stops on purpose, so the monitor says 'left', not 'lost'",
  "lost": "The engine's ZooKeeper session ended without a tombstone: it crashed, was killed or was cut off from ZooKeeper",
  "left": "The engine stopped on purpose and said so (a tombstone)",
  "stalled": "The engine's event loop did not run for longer than its loop_stall setting: a callback is blocking it, so it answers nothing meanwhile",
  "offline": "No longer in ZooKeeper; kept on this page with its last figures until the monitor restarts",
  "incarnation": "A new value each time the engine process starts: a changed incarnation is a restart",
  "node facts": "What the engine writes about its machine into its ZooKeeper node: CPU, load, memory, open files, free disk",
  "queue": "Requests waiting in the spider's frontier to be fetched",
  "failures": "Requests that failed for good (after retries), kept so they can be retried",
  "default version": "The version a job runs when it names none: the one set with 'netdisco deploy --default', else the newest",
  "kept items": "Every item a job yields is written on its engine, up to job_items_max; the rest are counted as dropped",
  "feeds": "Files the job wrote with its feeds setting, under the engine's feeds_dir",
  "on": "Where the job may run: any engine with a free slot, all of them, engines with a label (zone=a), or named engines",
  "sent": "The hook accepted the alert",
  "failed": "Every attempt failed until the alert passed its max_age: it was dropped, and logged",
  "waiting": "The alert waits out its grace period: it is sent only if the engine is not back by then",
  "skipped": "Ticks that made no job because the schedule's previous job was still pending or running",
};

/** A term with its explanation as a tooltip (dotted underline). */
export function term(word, shown = word) {
  const node = el("abbr", shown, "term");
  node.title = TERMS[word] ?? "";
  return node;
}

export function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

export function cell(row, text, cls) {
  const td = row.insertCell();
  if (text instanceof Node) td.append(text);
  else td.textContent = text ?? "";
  if (cls) td.className = cls;
  return td;
}

/** A table body's one row saying there is nothing, across ``span`` columns. */
export function empty(body, text, span) {
  body.replaceChildren();
  cell(body.insertRow(), text, "muted").colSpan = span;
}

export function link(href, text) {
  const a = el("a", text);
  a.href = href;
  return a;
}

// The control token: typed once in the navigation bar, kept in this tab's sessionStorage.
const TOKEN_KEY = "netdisco-token";
export function authHeaders() {
  const box = document.getElementById("token");
  const value = (box ? box.value : sessionStorage.getItem(TOKEN_KEY)) || "";
  return value ? {Authorization: `Bearer ${value}`} : {};
}

export async function getJSON(url, options = {}) {
  const resp = await fetch(url, {...options, signal: options.signal ?? AbortSignal.timeout(15000)});
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(`${resp.status}: ${body.error?.message ?? "no reason given"}`);
  return body;
}

/** A control call (token sent): {ok, status, body, message} - never throws; ``message``
 * says why it failed: "(403): the bearer token is not valid for control". */
export async function send(method, url, body) {
  const headers = {...authHeaders(), ...(body === undefined ? {} : {"Content-Type": "application/json"})};
  try {
    const resp = await fetch(url, {method, headers, signal: AbortSignal.timeout(15000),
                                   body: body === undefined ? undefined : JSON.stringify(body)});
    const answer = await resp.json().catch(() => ({}));
    return {ok: resp.ok, status: resp.status, body: answer,
            message: resp.ok ? "" : ` (${resp.status}): ${answer.error?.message ?? "no reason given"}`};
  } catch (err) {
    return {ok: false, status: 0, body: {}, message: ": " + (err.name === "TimeoutError" ? "no answer from the monitor" : err.message)};
  }
}

/** Fetch ``url`` with the token and save it under its own file name (the browser's download). */
export async function download(url, fallback) {
  const resp = await fetch(url, {headers: authHeaders()});
  if (!resp.ok) {
    const answer = await resp.json().catch(() => ({}));
    throw new Error(`${resp.status}: ${answer.error?.message ?? "no reason given"}`);
  }
  const named = /filename="?([^";]+)"?/.exec(resp.headers.get("Content-Disposition") ?? "");
  const a = el("a");
  a.href = URL.createObjectURL(await resp.blob());
  a.download = named ? named[1] : fallback;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}

const PAGES = [["/", "Engines"], ["/spiders", "Spiders"], ["/jobs", "Jobs"], ["/projects", "Projects"],
               ["/schedules", "Schedules"], ["/alerts", "Alerts"]];

/** The navigation bar, the live badge and the token box, at the top of every page. */
export function nav() {
  const bar = el("nav", undefined, "bar");
  bar.append(el("b", "netdisco monitor", "brand"));
  const links = el("span", undefined, "links");
  for (const [href, label] of PAGES) {
    const a = link(href + (params.has("interval") ? `?interval=${INTERVAL}` : ""), label);
    if (location.pathname === href) a.setAttribute("aria-current", "page");
    links.append(a);
  }
  const status = el("span", "connecting", "badge warn");
  status.id = "status";
  const box = el("label", undefined, "token");
  const input = el("input");
  Object.assign(input, {id: "token", type: "password", size: 14, autocomplete: "off", placeholder: "none"});
  input.value = sessionStorage.getItem(TOKEN_KEY) || "";
  const save = () => sessionStorage.setItem(TOKEN_KEY, input.value);
  input.addEventListener("change", save);
  input.addEventListener("input", save);
  box.append(term("control token"), " ", input);
  bar.append(links, status, box);
  document.body.prepend(bar);
  const msg = el("div", "", "msg");
  msg.id = "control-msg";
  msg.setAttribute("role", "status");
  bar.after(msg);
  return status;
}

/** The live badge: what the last poll found. */
export function badge(ok, text) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = "badge " + (ok ? "ok" : "bad");
}

/** A line in the message box under the bar; an error in red. */
export function say(text, error = false) {
  const msg = document.getElementById("control-msg");
  msg.textContent = text;
  msg.className = "msg" + (error ? " error" : "");
}

/** Poll ``fn`` every INTERVAL ms; the badge says whether the monitor answers. */
export function every(fn, interval = INTERVAL) {
  const run = async () => {
    try {
      if (await fn() !== false) badge(true, "live");  // false: fn set the badge itself
    } catch (err) {
      badge(false, "monitor unreachable");
      console.error(err);
    }
    setTimeout(run, interval);
  };
  run();
}

// Which monitor sends the alerts, and the others: "alerts sent by this monitor; 2 monitors
// running: http://a:8316 (sends), http://b:8316". ``m``: the routes' ``monitors``.
export function deliverer(m) {
  if (!m || !m.monitors.length) return "no monitor sends alerts yet (not in the latch)";
  const by = m.delivering ? "this monitor" : (m.leader?.url ?? m.leader?.instance ?? "?");
  const names = m.monitors.map((x, n) => `${x.url ?? x.instance}${n ? "" : " (sends)"}`
                                         + (x.instance === m.instance ? " (this one)" : ""));
  const count = `${m.monitors.length} monitor${m.monitors.length === 1 ? "" : "s"} running`;
  return `alerts sent by ${by}; ${count}: ${names.join(", ")}`;
}
