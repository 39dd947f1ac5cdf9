// Workers, as the dashboard shows them: the RESP connections of the serving node (GET
// /api/v1/clients, CLIENT LIST's), the consumers first: the queues a blocked GETJOB
// waits on, the jobs each took and settled itself, and those still in its hands.
// Values from the server go into markup through esc() only, into links through enc().

import { $, enc, esc, jobs, millis, num } from "./format.js";
import { reloader } from "./ends.js";

function clientRow(c) {
  const queues = c.blocked_on.map((q) => `<a href="#/queue/${enc(q)}"><code>${esc(q)}</code></a>`).join(" ");
  return `<tr data-client="${esc(c.id)}">
    <td><code>${esc(c.name || c.addr)}</code>${c.name ? ` <span class="muted">${esc(c.addr)}</span>` : ""}</td>
    <td>${esc(c.user)}</td>
    <td>${queues ? `waiting on ${queues}` : `<span class="muted">${esc(c.last_command)}</span>`}</td>
    <td class="num in-hand">${jobs(c.jobs_in_hand)}</td>
    <td class="num">${jobs(c.jobs_taken)}</td>
    <td class="num">${jobs(c.jobs_settled)}</td>
    <td class="num">${esc(millis(c.idle_ms))}</td><td class="num">${esc(millis(c.age_ms))}</td></tr>`;
}

export function workersPage(root, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1>Workers</h1>
      <div class="tools"><label class="inline"><input type="checkbox" id="consumers-only" checked> consumers only</label></div></div>
    <section class="panel">
      <p class="muted">The connections to this node. A consumer is one that took jobs (GETJOB) or waits for some;
        in its hands: the jobs it took and has not acked or put back itself.</p>
      <table class="grid" id="clients"><thead><tr><th>Client</th><th>User</th><th>Doing</th>
        <th class="num">In its hands</th><th class="num">Taken</th><th class="num">Settled</th>
        <th class="num">Idle</th><th class="num">Connected for</th></tr></thead><tbody></tbody></table>
      <p class="muted" id="clients-note"></p>
    </section>`;
  const load = reloader(toast, "list the connections", async () => {
    const { clients, complete } = await api("GET", "/api/v1/clients");
    const only = $("#consumers-only", root).checked;
    const shown = clients
      .filter((c) => !only || c.jobs_taken > 0 || c.blocked_on.length)
      .sort((a, b) => b.jobs_in_hand - a.jobs_in_hand || b.jobs_taken - a.jobs_taken);
    $("#clients tbody", root).innerHTML = shown.map(clientRow).join("")
      || `<tr><td colspan="8" class="muted empty">${only ? "No consumer connected to this node." : "No connection."}</td></tr>`;
    $("#clients-note", root).textContent = complete ? "" : "The first 1,000 connections only.";
  });
  $("#consumers-only", root).addEventListener("change", () => load());
  load();
  return { update: load, loadJobs: load };
}
