// A job's page (#/job/<id>): what the serving node holds of it (SHOW: its fields, its
// body, its last errors, its history on this node), its batch if it is a member of one (SHOW's `batch`, read with
// GET /api/v1/batches/{bid}), its progress, and its end wherever it is held (GET
// /api/v1/jobs/{id}/result without a wait: the nodes are asked), redrawn as the
// dashboard polls, a part only when what it shows changed (an open base64 view stays
// open). The buttons' actions are app.js's.

import { BATCH_HEADER, batchRow } from "./batches.js";
import { endHtml, errorsHtml, linkDownloads, progressHtml, reloader } from "./ends.js";
import { $, count, enc, esc, millis, when } from "./format.js";

const MAX_ERRORS = 5; // errors a job keeps (NACK ... ERROR)
const MAX_HISTORY = 16; // events a job's history keeps (disq/job.py MAX_HISTORY)

export function jobPage(root, id, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1><span class="up">Job</span> <code id="job-id"></code></h1>
      <div class="tools">
        <button type="button" id="requeue" data-action="enqueue" data-job="${esc(id)}">Requeue</button>
        <button type="button" class="danger" data-action="delete-job" data-job="${esc(id)}">Delete</button>
        <button type="button" class="ghost" data-action="delete-here" data-job="${esc(id)}">Delete this node's copy</button>
      </div></div>
    <section class="panel" id="job-batch" hidden><h2>Its batch</h2><div class="content"></div></section>
    <section class="panel" id="job-progress" hidden><h2>Progress</h2><div class="content"></div></section>
    <section class="panel" id="job-end" hidden><h2>Its end</h2><div class="content"></div></section>
    <section class="panel" id="job-errors" hidden><h2>Errors <span class="muted">(the last ${MAX_ERRORS}, newest first)</span></h2><div class="content"></div></section>
    <section class="panel" id="job-history" hidden><h2>History <span class="muted">(this node's view: its last ${MAX_HISTORY} events, oldest first; kept from the job's first failed delivery on)</span></h2><div class="content"></div></section>
    <section class="panel" id="job"><p class="muted">Loading…</p></section>`;
  $("#job-id", root).textContent = id;
  const shown = new WeakMap(); // what each part shows: redrawn only when it changes
  function fill(element, html) {
    if (shown.get(element) === html) return;
    shown.set(element, html);
    for (const link of element.querySelectorAll("a.download[href]")) URL.revokeObjectURL(link.href); // (the old result's bytes)
    element.innerHTML = html;
    linkDownloads(element);
  }
  function part(selector, html) {
    const section = $(selector, root);
    section.hidden = !html;
    fill($(".content", section), html);
  }
  const load = reloader(toast, "read the job", async () => {
    // SHOW: the job this node holds (404: none); its end wherever it is held (WAITJOB
    // without a wait: the nodes are asked), unless the user may not read ends.
    const [job, end] = await Promise.all([
      api("GET", `/api/v1/jobs/${enc(id)}`).catch((err) => { if (err.status === 404) return null; throw err; }),
      api("GET", `/api/v1/jobs/${enc(id)}/result`).catch((err) => { if (err.status === 403) return null; throw err; }),
    ]);
    const batch = job?.batch == null ? null : await api("GET", `/api/v1/batches/${enc(job.batch)}`)
      .catch((err) => { if (err.status === 403 || err.status === 404) return { id: job.batch, refused: err.message }; throw err; });
    part("#job-batch", batch ? batchHtml(batch) : "");
    const progress = end?.state === "active" ? end : job; // (the result route gives binary data as base64)
    part("#job-progress", progress ? progressHtml(progress.progress, progress.progress_data, progress.progress_data_base64) : "");
    part("#job-end", end ? endHtml(end) : "");
    part("#job-errors", errorsHtml(job?.errors));
    part("#job-history", historyHtml(job?.history));
    const requeue = $("#requeue", root); // a dead letter goes back to the queue it came from
    requeue.dataset.action = job?.dead_from != null ? "requeue-dead-job" : "enqueue";
    requeue.textContent = job?.dead_from != null ? `Requeue to ${job.dead_from}` : "Requeue";
    fill($("#job", root), job ? jobHtml(job)
      : '<p class="muted">This node does not hold this job (acknowledged, deleted, or held only by other nodes).</p>');
  });
  load();
  return { update: load, loadJobs: load };
}

const SHOWN_APART = ["body", "body_base64", "id", "errors", "progress", "progress_data", "batch", "history"];

// SHOW's `history`: [unix ms, event, detail] oldest first, as a table with times.
function historyHtml(history) {
  if (!history?.length) return "";
  const rows = history.map(([ms, event, detail]) => `<tr class="event"><td>${when(ms)}</td>
    <td><span class="badge event-${esc(event)}">${esc(event)}</span></td><td>${esc(detail)}</td></tr>`).join("");
  return `<table class="grid" id="history"><thead><tr><th>Time</th><th>Event</th><th>Detail</th></tr></thead><tbody>${rows}</tbody></table>`;
}

// The member's batch as the Batches page shows it, or why it cannot be read (forgotten
// past its TTL, or a callback queue the user may not use).
function batchHtml(batch) {
  if (batch.refused) {
    return `<p>Batch <code class="batch-id">${esc(batch.id)}</code>: <span class="muted">${esc(batch.refused)}</span></p>`;
  }
  return `<table class="grid" id="batch"><thead>${BATCH_HEADER}</thead><tbody>${batchRow(batch)}</tbody></table>
    <p><a href="#/batches">Every batch</a></p>`;
}

function jobHtml(job) {
  const rows = Object.entries(job).filter(([key]) => !SHOWN_APART.includes(key)).map(([key, value]) => {
    let shown = Array.isArray(value) ? value.map((v) => `<code>${esc(v)}</code>`).join(" ") : esc(value);
    if (key === "queue") shown = `<a href="#/queue/${enc(value)}">${esc(value)}</a>`;
    if (key === "ctime") shown += ` <span class="muted">(${esc(new Date(value / 1e6).toLocaleString())})</span>`;
    if ((key.endsWith("_within") || key === "ttl_ms" || key === "retry_ms" || key === "delay_ms") && value != null) shown = esc(millis(value));
    if (key === "due_ms" && value) shown = when(value);
    if ((key === "nacks" || key === "additional_deliveries" || key === "repl") && value != null) {
      shown = key === "repl" ? count(value, "copy", "copies") : key === "nacks" ? count(value, "nack") : count(value, "delivery", "deliveries");
    }
    return `<tr><th>${esc(key)}</th><td>${shown}</td></tr>`;
  }).join("");
  const body = job.body != null ? esc(job.body) : `(binary, base64) ${esc(job.body_base64)}`;
  return `<table class="fields">${rows}</table><h2>Body</h2><pre class="body">${body}</pre>`;
}
