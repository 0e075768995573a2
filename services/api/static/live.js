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
  text.textContent = message === undefined ? count : `${count} ${message}`.trim();
}

export function setState(node, state) {
  node.textContent = state;
  node.className = `state state-${state}`;
}

export function when(iso) {
  if (!iso) return "—";
  return new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}
