// Recurring jobs, as the dashboard shows them (a disq extension: CRON LIST / ADD / DEL
// over /api/v1/cron): every schedule of the queues the user may see, when it fires next
// and what it fired last (a link to that job), a form to define or replace one, and a
// Delete button after a confirmation. Values from the server go into markup through
// esc() only, into links through enc().

import { $, duration, enc, esc, when } from "./format.js";
import { reloader } from "./ends.js";

function scheduleRow(s) {
  const next = s.tick_replicate === 0
    ? '<span class="muted" title="no majority of the nodes is reachable from this node: no tick fires here">not here</span>'
    : `in ${esc(duration(Math.round(s.next_fire_in / 1000)))}`;
  const last = s.last_job
    ? `${when(s.last_fire)} <a href="#/job/${enc(s.last_job)}"><code>${esc(s.last_job.slice(0, 12))}…</code></a>`
    : '<span class="muted">never</span>';
  return `<tr data-name="${esc(s.name)}"><td><code>${esc(s.name)}</code></td>
    <td><a href="#/queue/${enc(s.queue)}"><code>${esc(s.queue)}</code></a></td>
    <td><code>${esc(s.spec)}</code> <span class="muted">${esc(s.tz)}</span></td>
    <td class="next">${next}</td><td>${last}</td>
    <td><button type="button" class="small ghost danger" data-action="delete-cron" data-name="${esc(s.name)}">Delete</button></td></tr>`;
}

export function cronPage(root, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1>Recurring jobs</h1>
      <div class="tools"><button type="button" class="small ghost" data-action="refresh-jobs">Refresh</button></div></div>
    <section class="panel">
      <p class="muted">Each schedule adds one job to its queue at every tick, once in the cluster (fired by one node
        of a side that reaches a majority of the nodes). Every node holds every schedule.</p>
      <table class="grid" id="schedules"><thead><tr><th>Name</th><th>Queue</th><th>Schedule</th><th>Next tick</th>
        <th>Last tick, its job</th><th></th></tr></thead><tbody></tbody></table>
    </section>
    <section class="panel">
      <h2>Define a schedule</h2>
      <form id="cron-form" class="inline-form">
        <label>Name <input name="name" required maxlength="256" autocomplete="off"></label>
        <label>Queue <input name="queue" required maxlength="1024" autocomplete="off"></label>
        <label>Schedule <input name="spec" required placeholder="*/5 * * * *" autocomplete="off"
          title="cron syntax: minute hour day month weekday (a sixth field first: seconds)"></label>
        <label>Time zone <input name="tz" placeholder="UTC" autocomplete="off"></label>
        <label>Body <input name="body" autocomplete="off"></label>
        <button type="submit" class="small">Save</button>
      </form>
    </section>`;
  const load = reloader(toast, "list the schedules", async () => {
    const { schedules } = await api("GET", "/api/v1/cron");
    $("#schedules tbody", root).innerHTML = schedules.map(scheduleRow).join("")
      || '<tr><td colspan="6" class="muted empty">No schedule on the queues you may see.</td></tr>';
  });

  $("#cron-form", root).addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const data = { name: form.name.value, queue: form.queue.value, spec: form.spec.value, body: form.body.value };
    if (form.tz.value) data.tz = form.tz.value;
    try {
      await api("POST", "/api/v1/cron", data);
      toast(`Schedule ${data.name} saved`);
      form.reset();
      load();
    } catch (err) {
      toast(`Could not save the schedule: ${err.message}`, "error");
    }
  });

  load();
  return { update: load, loadJobs: load };
}
