// Shared by the pages: reading the page's data and formatting a job's state and progress.
export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export function pageData() {
  const node = document.getElementById("page-data");
  return node ? JSON.parse(node.textContent) : {};
}

export function setProgress(bar, text, progress, message, state) {
  if (progress.total) {
    bar.max = progress.total;
    bar.value = progress.done;
  } else if (TERMINAL.has(state)) {
    bar.max = 1;
    bar.value = state === "succeeded" ? 1 : 0;
  } else {
    bar.removeAttribute("value"); // indeterminate: no total known yet
  }
  const count = progress.total === null || progress.total === undefined ? `${progress.done}` : `${progress.done}/${progress.total}`;
  text.textContent = message === undefined ? count : visible(`${count} ${message}`.trim());
}

// Bidi controls (U+202A-E, U+2066-9, the marks) in a job's text would reverse what surrounds them:
// shown as their code points, as the server-rendered page does (services/common/text.py).
const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;

export function visible(text) {
  if (text === null || text === undefined) return "";
  return String(text).replace(BIDI, (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}>`);
}

export function setState(node, state) {
  node.textContent = state;
  node.className = `state state-${state}`;
}

export function when(iso) {
  if (!iso) return "—";
  return new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}
