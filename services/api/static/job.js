// One job: live state and progress, training curves from metrics events, eval tables from results.
import { LineChart } from "./chart.js";
import { pageData, setProgress, setState, TERMINAL, when } from "./live.js";

const page = pageData();
const eventsList = document.getElementById("events");
let metricsSeen = 0; // number of the last metrics event drawn

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
  data.textContent = JSON.stringify(event.data);
  li.append(seq, " ", type, " ", data);
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
    document.getElementById("job-reason").textContent = event.data.reason || "—";
    if (TERMINAL.has(event.data.state)) {
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
  } else if (event.type === "result") {
    refreshResults();
  }
}

async function start() {
  if (page.kind === "train") {
    const response = await fetch(`/v1/jobs/${page.job_id}/metrics`);
    const body = await response.json();
    body.steps.forEach((step, i) => drawStep(step, i));
    metricsSeen = body.last_event;
  }
  if (TERMINAL.has(page.state)) return; // everything is on the page already
  const stream = new EventSource(`/v1/jobs/${page.job_id}/events?after=${page.last_event}`);
  for (const type of ["state", "progress", "metrics", "result", "cancel_requested"]) {
    stream.addEventListener(type, (event) => onEvent(JSON.parse(event.data)));
  }
  stream.addEventListener("end", () => stream.close());
  window.addEventListener("pagehide", () => stream.close());
}

start();
