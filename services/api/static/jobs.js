// Jobs list: one stream of job snapshots keeps every row's state and progress current.
import { pageData, setProgress, setState, when } from "./live.js";

const filters = pageData();
const body = document.querySelector("#jobs tbody");

function cell(cls) {
  const td = document.createElement("td");
  td.className = cls;
  return td;
}

function newRow(job) {
  const tr = document.createElement("tr");
  tr.dataset.jobId = job.id;
  const id = cell("id");
  const link = document.createElement("a");
  link.href = `/jobs/${job.id}`;
  link.textContent = job.id.slice(0, 8);
  id.append(link);
  const kind = cell("kind");
  kind.textContent = job.kind;
  const state = cell("state");
  state.append(document.createElement("span"));
  const progress = cell("progress");
  const count = document.createElement("span");
  count.className = "count";
  progress.append(document.createElement("progress"), " ", count);
  tr.append(id, kind, state, progress, cell("message"), cell("created"), cell("updated"));
  body.prepend(tr);
  document.getElementById("no-jobs").hidden = true;
  const shown = body.rows.length;
  document.getElementById("live-status").textContent = `${shown} job${shown === 1 ? "" : "s"} shown`;
  return tr;
}

function update(job) {
  if (filters.kind && job.kind !== filters.kind) return;
  let tr = body.querySelector(`tr[data-job-id="${job.id}"]`);
  if (!tr) {
    if (filters.state && job.state !== filters.state) return;
    tr = newRow(job);
  }
  tr.dataset.state = job.state;
  setState(tr.querySelector("td.state span"), job.state);
  setProgress(tr.querySelector("progress"), tr.querySelector(".count"), job.progress, undefined, job.state);
  tr.querySelector("td.message").textContent = job.reason || job.progress.message;
  tr.querySelector("td.created").textContent = when(job.created_at);
  tr.querySelector("td.updated").textContent = when(job.updated_at);
}

const stream = new EventSource("/v1/events");
stream.addEventListener("job", (event) => update(JSON.parse(event.data)));
window.addEventListener("pagehide", () => stream.close());
