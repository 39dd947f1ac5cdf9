// Search, as the dashboard does it: the jobs this node holds (JSCAN over GET
// /api/v1/jobs) whose attributes match conditions (GETJOB's WHERE: `key = value`,
// `!=`, `prefix`, `<`, `>`, `exists`; several joined by "and") and whose body contains
// a text, in a queue or any, a page at a time. A job ID typed in the top bar's search
// goes straight to the job's page (app.js). Values from the server go into markup
// through esc() only, into links through enc().

import { $, bodyPreview, enc, esc } from "./format.js";
import { reloader } from "./ends.js";

const PAGE = 50;
export const JOB_ID = /^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$/;
const CONDITION = /^\S+\s+(=|==|!=|<|>|prefix)\s+\S+$|^\S+\s+exists$/i;

// What the top bar's search box holds, as the search page's fields: conditions when
// every part reads as one, else text of the body.
export function searchFields(query) {
  const parts = query.split(/\s+and\s+/i).map((p) => p.trim()).filter(Boolean);
  return parts.length && parts.every((p) => CONDITION.test(p))
    ? { where: parts.join(" and "), text: "" } : { where: "", text: query };
}

function attrsText(job) {
  const attrs = job.attrs ?? {};
  return Object.entries(attrs).map(([k, v]) => `<code>${esc(k)}</code>=<code>${esc(v)}</code>`).join(" ");
}

export function searchPage(root, query, { api, toast }) {
  const initial = searchFields(query);
  root.innerHTML = `
    <div class="page-head"><h1>Search</h1></div>
    <section class="panel">
      <form id="search-form" class="inline-form">
        <label>Attributes <input name="where" autocomplete="off" placeholder="region = eu and amount > 10"
          title="key = value, key != value, key prefix p, key &lt; n, key &gt; n, key exists; joined by and"></label>
        <label>Body contains <input name="text" autocomplete="off"></label>
        <label>Queue <input name="queue" autocomplete="off" placeholder="any"></label>
        <button type="submit" class="small">Search</button>
      </form>
      <p class="muted" id="search-note">The jobs this node holds a copy of (queued or not), ${PAGE} a page.</p>
      <table class="grid" id="found"><thead><tr><th>Job</th><th>Queue</th><th>State</th><th>Body</th><th>Attributes</th></tr></thead>
        <tbody></tbody></table>
      <div class="pager"><button type="button" class="small ghost" id="found-more" hidden>More</button></div>
    </section>`;
  const form = $("#search-form", root);
  form.where.value = initial.where;
  form.text.value = initial.text;
  let cursor = 0;
  let rows = "";

  function url() {
    const params = new URLSearchParams({ count: String(PAGE), cursor: String(cursor) });
    for (const part of form.where.value.split(/\s+and\s+/i).map((p) => p.trim()).filter(Boolean)) params.append("where", part);
    if (form.text.value) params.set("text", form.text.value);
    if (form.queue.value.trim()) params.set("queue", form.queue.value.trim());
    return `/api/v1/jobs?${params}`;
  }

  const load = reloader(toast, "search", async () => {
    const data = await api("GET", url());
    rows += data.jobs.map((job) => `<tr data-job="${esc(job.id)}">
      <td><a href="#/job/${enc(job.id)}"><code>${esc(job.id)}</code></a></td>
      <td><a href="#/queue/${enc(job.queue)}"><code>${esc(job.queue)}</code></a></td>
      <td>${esc(job.state)}</td><td class="body">${bodyPreview(job)}</td><td>${attrsText(job)}</td></tr>`).join("");
    $("#found tbody", root).innerHTML = rows || '<tr><td colspan="5" class="muted empty">No job found here.</td></tr>';
    cursor = data.cursor;
    $("#found-more", root).hidden = cursor === 0;
  }, () => { $("#found tbody", root).innerHTML = ""; });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    cursor = 0;
    rows = "";
    load();
  });
  $("#found-more", root).addEventListener("click", () => load());
  if (query) load();
  return {};
}
