// One job: live state and progress, training curves from metrics events, eval tables from results,
// and the cancel button (shown to visitors who may cancel the job).
import { LineChart } from "./chart.js";
import { pageData, setProgress, setState, TERMINAL, visible, when } from "./live.js";

const page = pageData();
const eventsList = document.getElementById("events");
let metricsSeen = 0; // number of the last metrics (or rewind) event drawn

const panels = (page.panels || []).map((p) => ({ ...p, regex: new RegExp(p.pattern), chart: null }));

function drawStep(step, fallbackX) {
  const x = typeof step.step === "number" ? step.step : fallbackX;
  for (const [key, value] of Object.entries(step)) {
    if (key === "step" || typeof value !== "number") continue;
    for (const panel of panels) {
      if (!panel.regex.test(key)) continue;
      if (!panel.chart) {
        panel.chart = new LineChart(document.getElementById("charts"), panel);
        document.getElementById("charts-empty").hidden = true;
      }
      panel.chart.add(key, x, value);
    }
  }
}

function rewind(afterStep) {
  for (const panel of panels) if (panel.chart) panel.chart.truncateAfter(afterStep);
}

function logEvent(event) {
  if (event.type === "metrics" || event.type === "result") return;
  const li = document.createElement("li");
  const seq = document.createElement("span");
  seq.className = "seq";
  seq.textContent = `#${event.seq}`;
  const type = document.createElement("span");
  type.className = "etype";
  type.textContent = event.type;
  const data = document.createElement("span");
  data.className = "edata";
  const { traceback, ...shown } = event.data;
  data.textContent = visible(JSON.stringify(shown));
  li.append(seq, " ", type, " ", data);
  if (typeof traceback === "string") {
    const pre = document.createElement("pre"); // as text: lines and quotes as the worker wrote them
    pre.className = "traceback";
    pre.textContent = visible(traceback);
    li.append(pre);
  }
  eventsList.append(li);
  eventsList.scrollTop = eventsList.scrollHeight;
}

async function refreshResults() {
  const response = await fetch(`/jobs/${page.job_id}/results.html`);
  if (response.ok) document.getElementById("results").innerHTML = await response.text();
}

function onEvent(event) {
  logEvent(event);
  if (event.type === "state") {
    setState(document.getElementById("job-state"), event.data.state);
    document.getElementById("job-reason").textContent = visible(event.data.reason) || "—";
    if (event.data.attempt) document.getElementById("job-attempts").textContent = event.data.attempt;
    if (event.data.worker) document.getElementById("job-worker").textContent = visible(event.data.worker);
    if (event.data.state === "running") document.getElementById("job-started").textContent = when(event.created_at);
    if (TERMINAL.has(event.data.state)) {
      endCancel("");
      document.getElementById("job-finished").textContent = when(event.created_at);
      const bar = document.getElementById("job-progress");
      if (!bar.hasAttribute("value")) {
        bar.max = 1; // no total was reported: full for success, empty otherwise
        bar.value = event.data.state === "succeeded" ? 1 : 0;
      }
    }
  } else if (event.type === "progress") {
    setProgress(document.getElementById("job-progress"), document.getElementById("job-progress-text"), event.data, event.data.message);
  } else if (event.type === "metrics" && event.seq > metricsSeen) {
    metricsSeen = event.seq;
    drawStep(event.data, event.seq);
  } else if (event.type === "metrics_rewind" && event.seq > metricsSeen) {
    metricsSeen = event.seq;
    rewind(event.data.after_step);
  } else if (event.type === "cancel_requested") {
    endCancel("(cancel requested)");
  } else if (event.type === "result") {
    refreshResults();
  }
}

// --- cancel -------------------------------------------------------------------------------------
const cancelButton = document.getElementById("cancel-job");
const cancelDialog = document.getElementById("cancel-dialog");

function endCancel(note) {
  if (cancelButton) cancelButton.hidden = true;
  document.getElementById("cancel-note").textContent = note;
}

async function cancelJob() {
  cancelButton.disabled = true;
  // The cookie proves who asks; the header, which only this page can know, that the page asks.
  const headers = page.cancel.csrf ? { "X-ReelRL-CSRF": page.cancel.csrf } : {};
  const response = await fetch(`/v1/jobs/${page.job_id}/cancel`, { method: "POST", headers });
  const body = await response.json();
  if (!response.ok) {
    cancelButton.disabled = false;
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    document.getElementById("cancel-note").textContent = visible(`cancel refused: ${detail}`);
    return;
  }
  if (TERMINAL.has(body.state)) setState(document.getElementById("job-state"), body.state);
  endCancel(TERMINAL.has(body.state) ? "" : "(cancel requested)");
}

if (cancelButton) {
  cancelButton.addEventListener("click", () => {
    cancelDialog.returnValue = ""; // closing with Escape keeps the last value: start from none
    cancelDialog.showModal();
  });
  cancelDialog.addEventListener("close", () => {
    if (cancelDialog.returnValue === "cancel") cancelJob();
  });
}

async function start() {
  if (page.kind === "train") {
    const response = await fetch(`/v1/jobs/${page.job_id}/metrics`);
    const body = await response.json(); // each step once, rewinds applied
    body.steps.forEach((step, i) => drawStep(step, i));
    metricsSeen = body.last_event;
  }
  if (TERMINAL.has(page.state)) return; // everything is on the page already
  const stream = new EventSource(`/v1/jobs/${page.job_id}/events?after=${page.last_event}`);
  for (const type of ["state", "progress", "metrics", "metrics_rewind", "result", "cancel_requested"]) {
    stream.addEventListener(type, (event) => onEvent(JSON.parse(event.data)));
  }
  stream.addEventListener("end", () => stream.close());
  window.addEventListener("pagehide", () => stream.close());
}

start();
