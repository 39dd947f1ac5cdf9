// How jobs end, as the dashboard shows it (disq extensions): a job's progress (WORKING
// ... PROGRESS / DATA), its last errors (NACK ... ERROR), its end (GET
// /api/v1/jobs/{id}/result: an ACKJOB ... RESULT's result, or why it is a dead letter),
// a dead letter's failure in a queue's job list, and the finished jobs (GET
// /api/v1/results: the results the serving node keeps, the last kept first).
// Values from the server go into markup through esc() only (a hostile result is shown
// as text); a binary result's download link is made in the browser from its base64.

import { $, base64Bytes, bytes, duration, enc, esc, num, when } from "./format.js";

const STATE_NOTES = {
  acked: "acknowledged",
  dead: "a dead letter",
  queued: "queued: not ended yet",
  active: "delivered, being worked on: not ended yet",
  unknown: "no reachable node knows the job or its end (a plain ACK leaves no record once "
    + "collected, nor does a job whose TTL ran out; a result goes after its queue's RESULT-TTL)",
};

// A page redrawn at each poll says a failure once, not at every poll: again once it
// changed, or failed anew after a success.
function failureReporter(toast) {
  let last = "";
  return {
    failed(text) { if (text !== last) toast(text, "error"); last = text; },
    succeeded() { last = ""; },
  };
}

// A page's load(): `work()` reads and renders; one at a time (a poll that comes while
// one runs is dropped); a failure is told once (failureReporter), `"Could not
// ${what}: ..."`, and given to `onFailure(text)` to clear what the page showed; a 401
// is the login form's business.
export function reloader(toast, what, work, onFailure = () => {}) {
  const report = failureReporter(toast);
  let loading = false;
  return async function load() {
    if (loading) return;
    loading = true;
    try {
      await work();
      report.succeeded();
    } catch (err) {
      if (err.status === 401) return;
      const text = `Could not ${what}: ${err.message}`;
      report.failed(text);
      onFailure(text);
    } finally {
      loading = false;
    }
  };
}

// -- a job's page ------------------------------------------------------------------------------
export function progressHtml(progress, data, dataBase64) {
  if (progress == null && data == null && dataBase64 == null) return "";
  let html = "";
  if (progress != null) {
    const percent = Math.min(100, Math.max(0, Math.round(Number(progress)) || 0));
    html += `<div class="progress-row">
      <div class="progress" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${percent}">
        <div class="progress-fill" style="width: ${percent}%"></div></div>
      <b class="progress-value">${percent} %</b></div>`;
  } else {
    html += '<p class="muted">No percentage reported.</p>';
  }
  if (data != null) html += `<pre class="body progress-data">${esc(data)}</pre>`;
  else if (dataBase64 != null) html += `<p class="progress-data muted">binary data, ${bytes(base64Bytes(dataBase64))}</p>`;
  return html;
}

// SHOW's errors, [[delivery, unix ms, reason], ...] oldest first, newest first here.
export function errorsHtml(errors) {
  if (!errors?.length) return "";
  const rows = [...errors].reverse().map(([delivery, time, reason]) => `<tr>
      <td class="num">#${num(delivery)}</td><td>${when(time)}</td>
      <td class="reason"><code>${esc(reason)}</code></td></tr>`).join("");
  return `<table class="grid errors"><thead><tr><th class="num">Delivery</th><th>Time</th><th>Error</th></tr></thead>
    <tbody>${rows}</tbody></table>`;
}

// GET /api/v1/jobs/{id}/result's answer: the state, and the result or the last error.
export function endHtml(end) {
  const note = STATE_NOTES[end.state] ?? "";
  let html = `<p class="end-state"><span class="badge end end-${esc(end.state)}">${esc(end.state)}</span>
    <span class="muted">${esc(note)}</span></p>`;
  if (end.state === "acked") {
    html += "<h3>Result</h3>";
    if (end.result != null) html += `<pre class="body result">${esc(end.result)}</pre>`;
    else if (end.result_base64 != null) html += binaryHtml(end.result_base64, `result-${end.id}.bin`);
    else html += '<p class="muted result">No result: a plain ACK.</p>';
  } else if (end.state === "dead") {
    html += `<h3>Why</h3><pre class="body end-error">${end.error == null ? "" : esc(end.error)}</pre>`;
  }
  return html;
}

function binaryHtml(encoded, name) {
  return `<div class="binary"><p><span class="binary-size">binary, ${bytes(base64Bytes(encoded))}</span>
      <a class="download" data-base64="${esc(encoded)}" download="${esc(name)}">Download</a></p>
    <details><summary>base64</summary><pre class="body base64">${esc(encoded)}</pre></details></div>`;
}

// The download links of what `root` shows: the bytes, decoded here, as a blob (no request).
export function linkDownloads(root) {
  for (const link of root.querySelectorAll("a.download[data-base64]")) {
    const raw = atob(link.dataset.base64);
    const data = Uint8Array.from(raw, (c) => c.charCodeAt(0));
    link.href = URL.createObjectURL(new Blob([data], { type: "application/octet-stream" }));
  }
}

// -- a queue's job list: why a job failed ----------------------------------------------------
export function failureHtml(job) {
  let html = "";
  if (job.dead_reason != null) {
    html += `<span class="badge dlq dead-reason" title="why it became a dead letter">${esc(job.dead_reason)}</span>`;
    if (job.dead_from != null) html += ` <span class="muted">from ${esc(job.dead_from)}</span>`;
  }
  if (job.errors?.length) {
    html += `<ol class="last-errors">${[...job.errors].reverse().map(([delivery, time, reason]) => `<li>
        <span class="muted" title="${esc(new Date(time).toLocaleString())}">#${num(delivery)}, ${esc(new Date(time).toLocaleTimeString())}</span>
        <code>${esc(reason)}</code></li>`).join("")}</ol>`;
  }
  return html;
}

// -- the finished jobs -------------------------------------------------------------------------
function resultPreview(item) {
  if (item.state === "dead") return `<code class="end-error">${esc(item.error)}</code>`;
  if (item.result != null) return `<code>${esc(item.result)}${item.truncated ? "…" : ""}</code>`;
  if (item.result_base64 != null) return `<span class="muted binary-size">binary, ${bytes(item.bytes)}</span>`;
  return '<span class="muted">no result (a plain ACK)</span>';
}

export function finishedPage(root, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1>Finished jobs</h1>
      <div class="tools">
        <input id="results-queue" type="search" placeholder="Queue (every queue)" aria-label="Queue">
        <label class="inline">Show <select id="results-limit"><option>20</option><option selected>50</option><option>200</option></select></label>
        <button type="button" class="small ghost" data-action="refresh-jobs">Refresh</button>
      </div></div>
    <section class="panel">
      <p class="muted" id="results-note"></p>
      <table class="grid" id="results"><thead><tr><th>Job</th><th>Queue</th><th>State</th><th>Ended</th><th>Result</th>
        <th class="num">Size</th><th class="num">Kept for</th></tr></thead><tbody></tbody></table>
    </section>`;
  for (const id of ["#results-queue", "#results-limit"]) $(id, root).addEventListener("change", () => load());
  const load = reloader(toast, "list the finished jobs", async () => {
    const queue = $("#results-queue", root).value.trim();
    const limit = $("#results-limit", root).value;
    const data = await api("GET", `/api/v1/results?limit=${enc(limit)}${queue ? `&queue=${enc(queue)}` : ""}`);
    render(data, queue);
  }, (text) => {
    $("#results-note", root).textContent = text; // (not the last answer's rows, as if they were these)
    $("#results tbody", root).innerHTML = "";
  });

  function render(data, queue) {
    const now = Date.now();
    const node = $("#status-text b")?.textContent || "this node";
    $("#results-note", root).textContent = `The results node ${node} keeps (a job's result is kept on the nodes `
      + "that held it, for its queue's RESULT-TTL), the last kept first; dead letters are on their dead-letter queue's page."
      + (data.complete ? "" : " Only the newest results were looked at: name a queue to see more of it.");
    $("#results tbody", root).innerHTML = data.results.map((item) => `<tr data-job="${esc(item.id)}">
        <td><a href="#/job/${enc(item.id)}"><code>${esc(item.id)}</code></a></td>
        <td>${item.queue == null ? '<span class="muted">—</span>' : `<a href="#/queue/${enc(item.queue)}">${esc(item.queue)}</a>`}</td>
        <td><span class="badge end end-${esc(item.state)}">${esc(item.state)}</span></td>
        <td>${when(item.ended_ms)}</td><td class="body result">${resultPreview(item)}</td>
        <td class="num">${item.bytes == null ? "—" : esc(bytes(item.bytes))}</td>
        <td class="num">${esc(duration(Math.max(0, Math.round((item.expires_ms - now) / 1000))))}</td></tr>`).join("")
      || `<tr><td colspan="7" class="muted empty">No result kept here${queue ? ` for ${esc(queue)}` : ""}.</td></tr>`;
  }

  load();
  return { update: load, loadJobs: load };
}
