// Jobs list: one stream of job snapshots keeps every row's state and progress current; a Cancel
// button on each row the visitor may cancel (the rule of the API, sent as page data).
import { pageData, setProgress, setState, TERMINAL, visible, when } from "./live.js";

const filters = pageData();
const body = document.querySelector("#jobs tbody");
const dialog = document.getElementById("cancel-dialog");
let cancelling = null; // the job the dialog asks about

function mayCancel(job) {
  const rule = filters.cancel;
  return Boolean(rule) && !TERMINAL.has(job.state) && !job.cancel_requested && (rule.any || job.owner === rule.owner);
}

function cancelButton() {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "danger small";
  button.dataset.cancel = "";
  button.textContent = "Cancel";
  return button;
}

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
  const actions = cell("actions");
  if (filters.cancel) actions.append(cancelButton());
  tr.append(id, kind, state, progress, cell("headline"), cell("message"), cell("created"), cell("updated"), actions);
  body.prepend(tr);
  document.getElementById("no-jobs").hidden = true;
  filters.total += 1;
  const shown = body.rows.length;
  document.getElementById("live-status").textContent =
    `1–${shown} of ${filters.total} job${filters.total === 1 ? "" : "s"}`;
  return tr;
}

function update(job) {
  if (filters.kind && job.kind !== filters.kind) return;
  let tr = body.querySelector(`tr[data-job-id="${job.id}"]`);
  if (!tr) {
    // A new job belongs on the first page (newest first); a later page only shows what it listed.
    if ((filters.state && job.state !== filters.state) || filters.offset > 0) return;
    tr = newRow(job);
  }
  tr.dataset.state = job.state;
  setState(tr.querySelector("td.state span"), job.state);
  setProgress(tr.querySelector("progress"), tr.querySelector(".count"), job.progress, undefined, job.state);
  tr.querySelector("td.headline").textContent = visible(job.headline || "");
  tr.querySelector("td.message").textContent = visible(job.reason || job.progress.message);
  tr.querySelector("td.created").textContent = when(job.created_at);
  tr.querySelector("td.updated").textContent = when(job.updated_at);
  const button = tr.querySelector("button[data-cancel]");
  if (button) button.hidden = !mayCancel(job);
}

async function cancel(jobId) {
  const row = body.querySelector(`tr[data-job-id="${jobId}"]`);
  const headers = filters.cancel.csrf ? { "X-ReelRL-CSRF": filters.cancel.csrf } : {};
  const response = await fetch(`/v1/jobs/${jobId}/cancel`, { method: "POST", headers });
  const job = await response.json();
  if (response.ok) update(job);
  else row.querySelector("td.message").textContent = visible(`cancel refused: ${typeof job.detail === "string" ? job.detail : JSON.stringify(job.detail)}`);
}

if (dialog) {
  body.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-cancel]");
    if (!button) return;
    cancelling = button.closest("tr").dataset.jobId;
    document.getElementById("cancel-dialog-job").textContent = cancelling.slice(0, 8);
    dialog.returnValue = ""; // closing with Escape keeps the last value: start from none
    dialog.showModal();
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "cancel" && cancelling) cancel(cancelling);
    cancelling = null;
  });
}

const stream = new EventSource("/v1/events");
stream.addEventListener("job", (event) => update(JSON.parse(event.data)));
window.addEventListener("pagehide", () => stream.close());
