// Shared by the pages: reading the page's data and formatting a job's state and progress.
export function pageData() {
  const node = document.getElementById("page-data");
  return node ? JSON.parse(node.textContent) : {};
}

export function setProgress(bar, text, progress, message) {
  if (progress.total) {
    bar.max = progress.total;
    bar.value = progress.done;
  } else {
    bar.removeAttribute("value"); // indeterminate
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

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
