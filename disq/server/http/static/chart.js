// Charts as inline SVG markup: a time series chart with axes and a sparkline. No
// library: a few polylines and labels.

const SVG = 'xmlns="http://www.w3.org/2000/svg"';

// The smallest "round" number (1, 2, 2.5 or 5 times a power of ten) at least `value`.
export function niceCeiling(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= value) return step * power;
  }
  return 10 * power;
}

function shortNumber(value) {
  if (value >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (value >= 1e3) return `${+(value / 1e3).toFixed(1)}k`;
  return `${+value.toFixed(value < 10 ? 1 : 0)}`;
}

function escapeXml(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// A chart of `series` ([{name, cls, area, points: [[t ms, value], ...]}], `area`: filled
// below its line) over the last `spanMs`
// up to `now`, `width` x `height` pixels: a y axis from 0 to a round maximum, a time
// axis labelled in minutes ago.
export function timeChart({ series, now, spanMs, width, height = 180, label = "" }) {
  const left = 44, right = 10, top = 10, bottom = 22;
  const plotW = Math.max(width - left - right, 10), plotH = height - top - bottom;
  let peak = 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= now - spanMs && v > peak) peak = v;
  const max = niceCeiling(peak);
  const x = (t) => left + plotW * (1 - (now - t) / spanMs);
  const y = (v) => top + plotH * (1 - v / max);
  const parts = [`<svg ${SVG} class="chart-svg" width="${width}" height="${height}" role="img" aria-label="${escapeXml(label)}">`];
  for (const fraction of [0, 0.5, 1]) {
    const yy = y(max * fraction).toFixed(1);
    parts.push(`<line class="grid" x1="${left}" x2="${left + plotW}" y1="${yy}" y2="${yy}"/>`);
    parts.push(`<text class="axis" x="${left - 6}" y="${yy}" text-anchor="end" dominant-baseline="middle">${shortNumber(max * fraction)}</text>`);
  }
  const minutes = Math.round(spanMs / 60000);
  const stepMin = minutes > 10 ? 5 : minutes > 4 ? 2 : 1;
  for (let m = 0; m <= minutes; m += stepMin) {
    const xx = x(now - m * 60000).toFixed(1);
    parts.push(`<text class="axis" x="${xx}" y="${height - 6}" text-anchor="${m === 0 ? "end" : "middle"}">${m === 0 ? "now" : `-${m}m`}</text>`);
  }
  for (const s of series) {
    const shown = s.points.filter(([t]) => t >= now - spanMs);
    if (shown.length < 2) continue;
    const line = shown.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    if (s.area) { // filled down to 0: a line drawn over it stays visible where they meet
      const base = y(0).toFixed(1);
      const first = x(shown[0][0]).toFixed(1), last = x(shown[shown.length - 1][0]).toFixed(1);
      parts.push(`<polygon class="area ${s.cls}" points="${first},${base} ${line} ${last},${base}"/>`);
    }
    parts.push(`<polyline class="line ${s.cls}" points="${line}"><title>${escapeXml(s.name)}</title></polyline>`);
  }
  if (series.every((s) => s.points.filter(([t]) => t >= now - spanMs).length < 2)) {
    parts.push(`<text class="axis empty" x="${left + plotW / 2}" y="${top + plotH / 2}" text-anchor="middle">collecting samples…</text>`);
  }
  parts.push("</svg>");
  return parts.join("");
}

// A small line of `values` (oldest first), `width` x `height`, scaled to their maximum.
export function sparkline(values, { width = 96, height = 22, cls = "" } = {}) {
  if (values.length < 2) return `<svg ${SVG} class="spark" width="${width}" height="${height}"></svg>`;
  const max = Math.max(...values, 1e-9);
  const step = width / (values.length - 1);
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (height - 4) * (v / max)).toFixed(1)}`);
  return `<svg ${SVG} class="spark" width="${width}" height="${height}"><polyline class="line ${cls}" points="${points.join(" ")}"/></svg>`;
}
