// A small SVG line chart: one panel, several named series, x = training step. No library.
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#2f6fdf", "#e0702b", "#1f8a4c", "#c2352b", "#7b4fc9", "#0f8b8d", "#b7791f", "#d44a9a", "#5b6b7b"];
const W = 600, H = 240, PAD = { left: 54, right: 12, top: 10, bottom: 26 };

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function formatNumber(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) return v.toExponential(2);
  return Number(v.toPrecision(4)).toString();
}

export class LineChart {
  constructor(container, { title, unit = "" }) {
    this.series = new Map(); // name -> [[x, y], ...] in increasing x
    this.unit = unit;
    this.root = document.createElement("div");
    this.root.className = "chart-panel";
    const heading = document.createElement("h3");
    heading.textContent = unit ? `${title} (${unit})` : title;
    this.svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
    this.legend = document.createElement("ul");
    this.legend.className = "legend";
    this.root.append(heading, this.svg, this.legend);
    container.append(this.root);
    this.pending = false;
  }

  // A step drawn again (recomputed after a retry) replaces its earlier value: one point per step.
  add(name, x, y) {
    if (typeof y !== "number" || !Number.isFinite(y) || typeof x !== "number") return;
    if (!this.series.has(name)) this.series.set(name, []);
    const points = this.series.get(name);
    const at = points.findIndex(([px]) => px >= x);
    if (at === -1) points.push([x, y]);
    else if (points[at][0] === x) points[at] = [x, y];
    else points.splice(at, 0, [x, y]);
    this.schedule();
  }

  // Forget every point after step x (a retried job recomputes them from its checkpoint at x).
  truncateAfter(x) {
    for (const [name, points] of this.series) {
      const kept = points.filter(([px]) => px <= x);
      if (kept.length) this.series.set(name, kept);
      else this.series.delete(name);
    }
    this.schedule();
  }

  schedule() {
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.render(); });
    }
  }

  bounds() {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const points of this.series.values()) {
      for (const [x, y] of points) {
        x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
    }
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    return { x0, x1, y0, y1 };
  }

  render() {
    if (this.series.size === 0) {
      this.svg.replaceChildren();
      this.legend.replaceChildren();
      return;
    }
    const { x0, x1, y0, y1 } = this.bounds();
    const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
    const sy = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
    this.svg.replaceChildren();
    for (let i = 0; i <= 4; i++) {
      const y = y0 + ((y1 - y0) * i) / 4;
      this.svg.append(el("line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: sy(y), y2: sy(y) }));
      this.svg.append(el("text", { x: PAD.left - 6, y: sy(y) + 4, "text-anchor": "end" }, formatNumber(y)));
    }
    this.svg.append(el("line", { class: "axis", x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: H - PAD.bottom }));
    this.svg.append(el("line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom }));
    this.svg.append(el("text", { x: PAD.left, y: H - 8, "text-anchor": "start" }, `step ${formatNumber(x0)}`));
    this.svg.append(el("text", { x: W - PAD.right, y: H - 8, "text-anchor": "end" }, `step ${formatNumber(x1)}`));
    this.legend.replaceChildren();
    let i = 0;
    for (const [name, points] of this.series) {
      const color = PALETTE[i++ % PALETTE.length];
      const coords = points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
      this.svg.append(el("polyline", { points: coords, stroke: color, "data-series": name, "data-points": points.length }));
      const last = points[points.length - 1];
      this.svg.append(el("circle", { cx: sx(last[0]), cy: sy(last[1]), r: 2.5, fill: color }));
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color;
      item.append(swatch, `${name}: ${formatNumber(last[1])}`);
      this.legend.append(item);
    }
  }
}
