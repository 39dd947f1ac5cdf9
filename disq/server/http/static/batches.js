// Batches, as the dashboard shows them (a disq extension: BATCH NEW / CLOSE / STATUS /
// LIST over GET /api/v1/batches): the batches the serving node knows whose callback
// queues the user may use, each with its state, its members' counts and progress, the
// callback jobs added once it is done, and when it is forgotten. A member job's page
// shows its batch the same way (jobpage.js). Values from the server go into markup
// through esc() only, into links through enc().

import { $, duration, enc, esc, jobs, num } from "./format.js";
import { progressHtml, reloader } from "./ends.js";

const STATE_NOTES = {
  open: "open: members may still be added",
  closed: "closed: its members counted, waiting for them to end",
  done: "done: every member ended, its callbacks added",
};

// When a batch is forgotten: the date and time, and in how long.
function expiresHtml(unixMs) {
  const left = Math.max(0, Math.round((unixMs - Date.now()) / 1000));
  return `${esc(new Date(unixMs).toLocaleString())} <span class="muted">(in ${esc(duration(left))})</span>`;
}

// The share of the members that ended (acked or dead), as a bar and a percentage.
export function batchProgressHtml(batch) {
  const ended = batch.acked + batch.dead;
  const percent = batch.state === "done" ? 100 : batch.members ? Math.floor((100 * ended) / batch.members) : 0;
  return `<div class="batch-progress" title="${esc(`${num(ended)} of ${num(batch.members)} jobs ended`)}">${progressHtml(percent)}</div>`;
}

function callbacksHtml(batch) {
  if (!batch.callbacks.length) return '<span class="muted">—</span>';
  return batch.callbacks.map((id) => `<a class="callback" href="#/job/${enc(id)}"><code>${esc(id)}</code></a>`).join(" ");
}

export const BATCH_HEADER = `<tr><th>Batch</th><th>State</th><th class="num">Members</th><th class="num">Pending</th>
  <th class="num">Acked</th><th class="num">Dead</th><th>Progress</th><th>Callback jobs</th><th>Expires</th>
  <th class="actions">Actions</th></tr>`;

export function batchRow(batch) {
  const close = batch.state === "open"
    ? `<button type="button" class="small ghost" data-action="close-batch" data-batch="${esc(batch.id)}">Close</button>` : "";
  return `<tr data-batch="${esc(batch.id)}">
    <td><code>${esc(batch.id)}</code></td>
    <td><span class="badge batch-${esc(batch.state)}" title="${esc(STATE_NOTES[batch.state] ?? "")}">${esc(batch.state)}</span></td>
    <td class="num members">${jobs(batch.members)}</td><td class="num pending">${jobs(batch.pending)}</td>
    <td class="num acked">${jobs(batch.acked)}</td><td class="num dead">${jobs(batch.dead)}</td>
    <td class="progress-cell">${batchProgressHtml(batch)}</td>
    <td class="callbacks">${callbacksHtml(batch)}</td>
    <td class="expires">${expiresHtml(batch.expires_ms)}</td>
    <td class="actions">${close}</td></tr>`;
}

export function batchesPage(root, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1>Batches</h1>
      <div class="tools">
        <label class="inline">State <select id="batch-state">
          <option value="">any</option><option value="open">open</option><option value="closed">closed</option><option value="done">done</option>
        </select></label>
        <button type="button" class="small ghost" data-action="refresh-jobs">Refresh</button>
      </div></div>
    <section class="panel">
      <p class="muted" id="batches-note"></p>
      <table class="grid" id="batches"><thead>${BATCH_HEADER}</thead><tbody></tbody></table>
    </section>`;
  $("#batch-state", root).addEventListener("change", () => load());
  const load = reloader(toast, "list the batches", async () => {
    const state = $("#batch-state", root).value;
    const data = await api("GET", `/api/v1/batches${state ? `?state=${enc(state)}` : ""}`);
    render(data, state);
  }, (text) => {
    $("#batches-note", root).textContent = text;
    $("#batches tbody", root).innerHTML = "";
  });

  function render(data, state) {
    $("#batches-note", root).textContent = "The batches this node knows (every node holds every batch) whose "
      + "callback queues you may use, the newest first; an open batch's members are those this node knows of "
      + "(closing it counts them all)."
      + (data.complete ? "" : " Only the newest 1,000 are shown: pick a state to see others.");
    $("#batches tbody", root).innerHTML = data.batches.map(batchRow).join("")
      || `<tr><td colspan="10" class="muted empty">No batch${state ? ` ${esc(state)}` : ""} here.</td></tr>`;
  }

  load();
  return { update: load, loadJobs: load };
}
