// The dashboard's formatting, shared by its pages (app.js, ends.js, ...): every value
// from the server goes into markup through esc() (as text, never as markup), and every
// figure carries its unit, formatted here: bytes as B / KiB / MiB (bytes), durations as
// ms / s / minutes... (millis, duration), counts with what they count (count, jobs),
// rates per second (perSecond).

export const $ = (selector, root = document) => root.querySelector(selector);
export const enc = encodeURIComponent;

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
export const num = (n) => (n == null ? "—" : Number(n).toLocaleString("en-US"));
export function rate(n) {
  if (n == null) return "—";
  return n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US");
}
export function bytes(n) {
  if (n == null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}
// A figure with its unit, the unit muted: `count(3, "job")` is 3 jobs (markup).
export function count(n, unit, plural = `${unit}s`) {
  if (n == null) return "—";
  return `${num(n)} <span class="muted unit">${n === 1 ? unit : plural}</span>`;
}
export const jobs = (n) => count(n, "job");
// A rate with its unit (markup).
export const perSecond = (n) => (n == null ? "—" : `${rate(n)} <span class="muted unit">/s</span>`);
// A duration given in ms: "850 ms", "4.2 s", then duration()'s "3m 20s".
export function millis(ms) {
  if (ms == null) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  return duration(Math.round(ms / 1000));
}
export function duration(seconds) {
  if (seconds == null) return "—";
  const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return m ? `${m}m ${seconds % 60}s` : `${seconds}s`;
}
export const shortId = (id) => id.slice(0, 8);
export function bodyPreview(job, length = 80) {
  if (job.body == null) {
    return job.body_base64 != null ? `<span class="muted">binary, ${bytes(atob(job.body_base64).length)}</span>` : "";
  }
  const text = job.body.length > length ? `${job.body.slice(0, length)}…` : job.body;
  return `<code>${esc(text)}</code>`;
}
export const stateBadge = (state) => `<span class="badge state-${esc(state.replace("?", "q"))}">${esc(state)}</span>`;
export function pauseBadge(pause) {
  if (!pause || pause === "none") return "";
  const text = pause === "all" ? "paused" : pause === "mixed" ? "paused on some nodes" : `paused ${pause}`;
  return `<span class="badge paused" title="PAUSE ${esc(pause)}">${esc(text)}</span>`;
}
export const dlqBadge = (dead) => (dead ? '<span class="badge dlq" title="a dead-letter queue">dead letters</span>' : "");

// The size of base64 data, without decoding it.
export function base64Bytes(encoded) {
  const padding = encoded.endsWith("==") ? 2 : encoded.endsWith("=") ? 1 : 0;
  return (encoded.length / 4) * 3 - padding;
}
// A Unix time in ms: the date and time, and how long ago.
export function when(unixMs) {
  if (unixMs == null) return "—";
  const ago = Math.max(0, Math.round((Date.now() - unixMs) / 1000));
  return `${esc(new Date(unixMs).toLocaleString())} <span class="muted">(${esc(duration(ago))} ago)</span>`;
}
