// The Rollouts view of a train job: pick a logged step, see each group's frames (thumbnails drawn by
// the server), the question, the answer, and every response with its reward and advantage, coloured
// red → green by overall reward. Everything the model or the dataset wrote is set as text, never HTML.
import { formatNumber } from "./chart.js";
import { pageData, TERMINAL, visible } from "./live.js";

const page = pageData();
const base = `/v1/jobs/${page.job_id}/rollouts`;
const select = document.getElementById("rollout-step");
const status = document.getElementById("rollout-status");
const groupsNode = document.getElementById("rollout-groups");
const STEPS_POLL_MS = 15000; // a running job logs new steps: the list is read again this often
const MAIN_PARTS = new Set(["overall", "accuracy", "format"]);
const NUMERIC = new Set(["#", "overall", "accuracy", "format", "advantage"]);
let shownStep = null;

function node(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined && text !== null) el.textContent = visible(text);
  return el;
}

function number(value) {
  return typeof value === "number" ? formatNumber(value) : "—";
}

async function problem(response) {
  const body = await response.json().catch(() => ({}));
  const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  return `${response.status}: ${detail ?? response.statusText}`;
}

// The colour scale spans [min(0, lowest), max(1, highest)] of the step: rewards in [0, 1] keep their
// absolute colour, and a reward mix that goes beyond stretches the scale instead of saturating.
function rewardScale(groups) {
  let lo = 0, hi = 1;
  for (const group of groups) {
    for (const r of group.responses) {
      if (typeof r.reward.overall === "number") {
        lo = Math.min(lo, r.reward.overall);
        hi = Math.max(hi, r.reward.overall);
      }
    }
  }
  return { lo, hi };
}

function rewardColour(value, { lo, hi }) {
  if (typeof value !== "number") return "#e6e8eb"; // not finite in the log
  const t = Math.min(1, Math.max(0, (value - lo) / (hi - lo)));
  return `hsl(${Math.round(120 * t)}, 65%, 85%)`;
}

function frameUrl(step, key, index) {
  return `${base}/${step}/frames/${encodeURIComponent(key)}/${index}?size=${page.thumb_size}`;
}

function clipStrip(step, clip) {
  const strip = node("div", "clip");
  strip.dataset.key = clip.key;
  if (clip.timestamps.length === 0) {
    // a still image (read from its file) or a clip decoded without storing: no frames to show
    strip.append(node("span", "muted", `${clip.key.slice(0, 12)}…: no stored frames`));
    return strip;
  }
  clip.timestamps.forEach((seconds, index) => {
    const figure = node("figure", "frame");
    const img = document.createElement("img");
    img.loading = "lazy";
    img.decoding = "async";
    img.src = frameUrl(step, clip.key, index);
    img.alt = `frame ${index} at ${number(seconds)} s`;
    img.dataset.index = index;
    img.addEventListener("error", () => img.replaceWith(node("span", "frame-missing", "frame unavailable")), { once: true });
    figure.append(img, node("figcaption", null, `${number(seconds)} s`));
    strip.append(figure);
  });
  return strip;
}

function answerText(answer) {
  if (answer === null || answer === undefined) return "—";
  return typeof answer === "string" ? answer : JSON.stringify(answer);
}

function responseRow(response, scale) {
  const row = node("tr", "response");
  row.dataset.index = response.index;
  row.dataset.overall = response.reward.overall ?? "";
  row.style.backgroundColor = rewardColour(response.reward.overall, scale);
  const who = node("td", "num", `${response.index}`);
  if (response.offline) who.append(" ", node("span", "badge offline", "offline"));
  const parts = Object.entries(response.reward)
    .filter(([name]) => !MAIN_PARTS.has(name))
    .map(([name, value]) => `${name} ${number(value)}`)
    .join(" · ");
  const text = node("td", "response-cell");
  text.append(node("pre", "response-text", response.text));
  if (response.error) text.append(node("p", "error", `not scored: ${response.error}`));
  const meta = [`${response.length} token${response.length === 1 ? "" : "s"}`];
  if (response.engine !== null && response.engine !== undefined) meta.push(`engine ${response.engine}`);
  text.append(node("p", "muted", meta.join(" · ")));
  row.append(
    who,
    node("td", "num reward-overall", number(response.reward.overall)),
    node("td", "num", number(response.reward.accuracy)),
    node("td", "num", number(response.reward.format)),
    node("td", "parts", parts || "—"),
    node("td", "num advantage", number(response.advantage)),
    text,
  );
  return row;
}

function groupCard(step, group, scale) {
  const card = node("article", "rollout-group");
  card.dataset.group = group.group;
  card.append(node("h3", null, `group ${group.group} · ${group.sample_id} · ${group.problem_type}`));
  const clips = node("div", "clips");
  for (const clip of group.clips) clips.append(clipStrip(step, clip));
  if (group.clips.length) card.append(clips);
  const qa = node("dl", "qa");
  const question = node("dd");
  question.append(node("pre", "prompt", group.prompt));
  if (group.prompt_full) {
    const full = node("details");
    full.append(node("summary", null, "full prompt"), node("pre", "prompt-full", group.prompt_full));
    question.append(full);
  }
  qa.append(node("dt", null, "question"), question, node("dt", null, "answer"), node("dd", "answer", answerText(group.answer)));
  card.append(qa);
  const table = node("table", "responses");
  const head = node("tr");
  for (const title of ["#", "overall", "accuracy", "format", "other parts", "advantage", "response"]) {
    head.append(node("th", NUMERIC.has(title) ? "num" : null, title));
  }
  const thead = node("thead");
  thead.append(head);
  const body = node("tbody");
  for (const response of group.responses) body.append(responseRow(response, scale));
  table.append(thead, body);
  card.append(table);
  return card;
}

async function showStep(step) {
  status.textContent = `loading step ${step}…`;
  const response = await fetch(`${base}/${step}`);
  if (!response.ok) {
    status.textContent = visible(await problem(response));
    groupsNode.replaceChildren();
    return;
  }
  const body = await response.json();
  shownStep = step;
  const scale = rewardScale(body.groups);
  document.getElementById("reward-scale-lo").textContent = number(scale.lo);
  document.getElementById("reward-scale-hi").textContent = number(scale.hi);
  document.getElementById("reward-scale").hidden = body.groups.length === 0;
  groupsNode.replaceChildren(...body.groups.map((group) => groupCard(step, group, scale)));
  const count = body.groups.length;
  status.textContent = `step ${step}: ${count} group${count === 1 ? "" : "s"}`;
  const url = new URL(window.location.href);
  url.searchParams.set("step", step);
  window.history.replaceState(null, "", url);
}

async function loadSteps() {
  const response = await fetch(base);
  if (!response.ok) {
    status.textContent = visible(await problem(response));
    return [];
  }
  const { steps } = await response.json();
  const known = new Set([...select.options].map((o) => Number(o.value)));
  for (const step of [...steps].reverse()) { // newest first
    if (known.has(step)) continue;
    const option = node("option", null, `${step}`);
    option.value = step;
    const after = [...select.options].find((o) => Number(o.value) < step);
    select.insertBefore(option, after ?? null);
  }
  select.disabled = steps.length === 0;
  document.getElementById("rollouts-empty").hidden = steps.length > 0;
  if (steps.length === 0) status.textContent = "";
  return steps;
}

async function start() {
  const steps = await loadSteps();
  if (steps.length) {
    const wanted = steps.includes(page.step) ? page.step : steps[steps.length - 1];
    select.value = wanted;
    await showStep(wanted);
  } else if (page.step !== null && page.step !== undefined) {
    await showStep(page.step); // says why it is missing
  }
  select.addEventListener("change", () => showStep(Number(select.value)));
  if (!TERMINAL.has(page.state)) {
    const timer = setInterval(async () => {
      const fresh = await loadSteps();
      if (shownStep === null && fresh.length) {
        select.value = fresh[fresh.length - 1];
        showStep(fresh[fresh.length - 1]);
      }
    }, STEPS_POLL_MS);
    window.addEventListener("pagehide", () => clearInterval(timer));
  }
}

start();
