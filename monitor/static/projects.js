// The Projects page: each deployed project, its versions (newest first) with their deploy
// time and spiders by name, and which one is the default.
import {bytes, cell, el, every, getJSON, link, nav, term, utc} from "./common.js";

nav();
document.getElementById("default-term").append(term("default version"));

function versionTable(about) {
  const table = el("table");
  table.dataset.project = about.project;
  const head = table.createTHead().insertRow();
  for (const h of ["version", "deployed", "kind", "size", "spiders (name: class)", ""]) head.append(el("th", h));
  const body = table.createTBody();
  for (const v of [...about.versions].reverse()) {
    const row = body.insertRow();
    row.dataset.version = v.id;
    const name = cell(row, v.label ? `${v.label} ` : "");
    name.append(el("code", v.id.slice(0, 12)));
    name.title = v.id;
    if (v.id === about.default) {
      name.append(" ", el("span", about.default_set ? "default (set)" : "default (newest)", "badge ok"));
      row.dataset.default = "1";
    }
    cell(row, utc(v.created));
    cell(row, v.kind);
    cell(row, bytes(v.size));
    const names = Object.entries(v.names ?? {}).sort((a, b) => a[1].localeCompare(b[1]));
    const list = el("span", undefined, "spiders");
    names.forEach(([ref, spider], n) => {
      if (n) list.append(", ");
      list.append(el("b", spider), el("span", ` ${ref}`, "small"));
    });
    cell(row, names.length ? list : "-");
    cell(row, link(`/jobs?project=${encodeURIComponent(about.project)}`, "start a job"));
  }
  return table;
}

async function poll() {
  const {projects} = await getJSON("/netdiscovery/monitor/projects");
  const box = document.getElementById("projects");
  box.className = projects.length ? "" : "muted";
  if (!projects.length) { box.textContent = "no project deployed yet"; return; }
  box.replaceChildren();
  for (const about of projects) {
    box.append(el("h2", about.project));
    const newest = about.versions[about.versions.length - 1];
    box.append(el("p", `${about.versions.length} version${about.versions.length === 1 ? "" : "s"}; last deployed ${utc(newest?.created)}`, "small"));
    box.append(versionTable(about));
  }
}

every(poll, 5000);
