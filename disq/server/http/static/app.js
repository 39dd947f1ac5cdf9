// The disq dashboard: plain JavaScript on the node's HTTP API (/api/v1, documented at
// /docs). Every POLL_MS it reads GET /api/v1/cluster/stats (every node's stats, which
// the node serving this page asks its peers for over the cluster bus) and keeps the
// rates of the last HISTORY_MS in memory for the charts. Pages, by the URL's hash:
//   #/               the cluster: every node, its state and figures
//   #/queues         every queue, cluster-wide: length, rates, pause, dead letters
//   #/queue/<name>   one queue: its nodes, its next jobs (QPEEK), the jobs held (JSCAN)
//   #/job/<id>       one job (SHOW), its progress, errors and end, and what can be
//                    done with it (jobpage.js)
//   #/finished       the results the node keeps, the last first (ends.js)
//   #/batches        the batches the node knows, their progress and callbacks (batches.js)
//   #/topics         the topics, their subscribed queues, subscribe and publish (topics.js)
//   #/cron           the recurring jobs: next and last tick, define, delete (cron.js)
//   #/workers        the connections: consumers, what they wait on and hold (workers.js)
//   #/search/<q>     the jobs this node holds whose attributes or body match (search.js)
// With requirepass (or users: ACL), a 401 brings the login form; the user and password
// stay in sessionStorage and go as basic auth (`Authorization: Bearer <password>` for
// the default user).

import { sparkline, timeChart } from "./chart.js";
import {
  $, bodyPreview, bytes, count, dlqBadge, duration, enc, esc, jobs, millis, num, pauseBadge, perSecond, rate, shortId,
  stateBadge, when,
} from "./format.js";
import { batchesPage } from "./batches.js";
import { topicsPage } from "./topics.js";
import { cronPage } from "./cron.js";
import { workersPage } from "./workers.js";
import { JOB_ID, searchPage } from "./search.js";
import { failureHtml, finishedPage } from "./ends.js";
import { jobPage } from "./jobpage.js";

const POLL_MS = 1500;
const HIDDEN_POLL_MS = 10000; // a tab in the background polls this slowly
const HISTORY_MS = 10 * 60 * 1000;
const PAGE_SIZE = 20;
const MAX_ROWS = 300; // queues shown at once in the list (the filter finds the others)
const MAX_PEEK = 10000;
const PASSWORD_KEY = "disq.password";
const USER_KEY = "disq.user";

// -- the API ------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, detail, code) {
    super(detail);
    this.status = status;
    this.code = code;
  }
}

let password = sessionStorage.getItem(PASSWORD_KEY) || "";
let user = sessionStorage.getItem(USER_KEY) || "default";

function authorization() {
  if (user === "default" || !user) return `Bearer ${password}`;
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}

async function api(method, path, body) {
  const headers = {};
  if (password) headers.Authorization = authorization();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "the node does not answer", "NETWORK");
  }
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (response.status === 401) {
    showLogin(password ? "Wrong password." : "");
    throw new ApiError(401, "authentication required", "NOAUTH");
  }
  if (!response.ok) throw new ApiError(response.status, data?.detail || response.statusText, data?.code);
  return data;
}

// -- live data: stats and their rates ------------------------------------------------------
const live = {
  stats: null, // the last GET /cluster/stats
  updated: null, // Date of it
  samples: new Map(), // node id -> {time, queues: Map name -> [jobs_in, jobs_out]}
  nodeRates: new Map(), // node id -> Map queue -> [in/s, out/s] over its last two samples
  history: [], // [{t, in, out, queues: Map name -> [in/s, out/s]}], cluster-wide
};

// Rates per node, from two samples of the node's cumulative counters over the time
// between them by the node's clock; the cluster's are their sums (a node whose sample
// did not change since keeps its last rates).
function ingest(stats) {
  const seen = new Set();
  for (const node of stats.nodes) {
    const st = node.stats;
    if (!st) continue;
    seen.add(node.id);
    const sample = { time: st.time_ms, queues: new Map((st.queues || []).map((q) => [q.name, [q.jobs_in, q.jobs_out]])) };
    const previous = live.samples.get(node.id);
    if (previous && sample.time === previous.time) continue; // the node's cached sample
    live.samples.set(node.id, sample);
    if (!previous || sample.time < previous.time) { live.nodeRates.delete(node.id); continue; }
    const seconds = (sample.time - previous.time) / 1000;
    const rates = new Map();
    for (const [name, [jobsIn, jobsOut]] of sample.queues) {
      const before = previous.queues.get(name) || [0, 0];
      const dIn = jobsIn >= before[0] ? jobsIn - before[0] : jobsIn; // (a queue made again)
      const dOut = jobsOut >= before[1] ? jobsOut - before[1] : jobsOut;
      rates.set(name, [dIn / seconds, dOut / seconds]);
    }
    live.nodeRates.set(node.id, rates);
  }
  for (const id of [...live.samples.keys()]) {
    if (!seen.has(id)) { live.samples.delete(id); live.nodeRates.delete(id); }
  }
  if (!live.nodeRates.size) return;
  const queues = new Map();
  let totalIn = 0, totalOut = 0;
  for (const rates of live.nodeRates.values()) {
    for (const [name, [rIn, rOut]] of rates) {
      const sum = queues.get(name) || [0, 0];
      sum[0] += rIn; sum[1] += rOut;
      queues.set(name, sum);
      totalIn += rIn; totalOut += rOut;
    }
  }
  const now = Date.now();
  live.history.push({ t: now, in: totalIn, out: totalOut, queues });
  while (live.history.length && live.history[0].t < now - HISTORY_MS) live.history.shift();
}

function queueRates(name) {
  const last = live.history[live.history.length - 1];
  return last ? last.queues.get(name) || [0, 0] : [null, null];
}

// The time axis grows with the samples, from MIN_SPAN_MS to HISTORY_MS.
const MIN_SPAN_MS = 2 * 60 * 1000;

function chartOf(element, points, label) {
  const width = Math.max(element.clientWidth, 300);
  const now = Date.now();
  const oldest = live.history.length ? live.history[0].t : now;
  const spanMs = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, Math.ceil((now - oldest) / 60000) * 60000));
  element.innerHTML = timeChart({
    series: [
      { name: "jobs in / s", cls: "in", area: true, points: points.map((p) => [p.t, p.in]) },
      { name: "jobs out / s", cls: "out", points: points.map((p) => [p.t, p.out]) },
    ],
    now, spanMs, width, label,
  });
}

function legend(rIn, rOut) {
  return `<span class="key in"></span>in <b>${rate(rIn)}</b>/s <span class="key out"></span>out <b>${rate(rOut)}</b>/s`;
}

// -- polling --------------------------------------------------------------------------------
let pollTimer = null;
let polling = false;

async function poll() {
  clearTimeout(pollTimer);
  if (polling) return;
  polling = true;
  try {
    const stats = await api("GET", "/api/v1/cluster/stats");
    live.stats = stats;
    live.updated = new Date();
    ingest(stats);
    setBanner("");
    renderStatus();
    await page.update?.();
  } catch (err) {
    if (err.status !== 401) {
      setBanner(`Cannot read the cluster's stats: ${err.message}. Retrying…`);
      renderStatus(true);
    }
  } finally {
    polling = false;
    if ($("#login").hidden) pollTimer = setTimeout(poll, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
  }
}

document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });

function renderStatus(failing = false) {
  const stats = live.stats;
  const myself = stats?.nodes.find((n) => n.id === stats.myself);
  $("#live").className = failing ? "live down" : "live";
  $("#status-text").innerHTML = stats
    ? `via node <b title="${esc(stats.myself)}">${esc(shortId(stats.myself))}</b> ${esc(myself?.address || "")} · updated ${live.updated.toLocaleTimeString()}`
    : "connecting…";
  $("#sign-out").hidden = !password;
}

function setBanner(text) {
  const banner = $("#banner");
  banner.textContent = text;
  banner.hidden = !text;
}

function toast(text, kind = "ok") {
  const item = document.createElement("div");
  item.className = `toast ${kind}`;
  item.textContent = text;
  $("#toasts").append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

// -- login ------------------------------------------------------------------------------------
function showLogin(error = "") {
  clearTimeout(pollTimer);
  $("#login").hidden = false;
  $("#login-error").textContent = error;
  $("#login-error").hidden = !error;
  $("#login-password").focus();
}

$("#login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  password = $("#login-password").value;
  user = $("#login-user").value.trim() || "default";
  sessionStorage.setItem(PASSWORD_KEY, password);
  sessionStorage.setItem(USER_KEY, user);
  $("#login").hidden = true;
  $("#login-password").value = "";
  route();
});

// -- pages ------------------------------------------------------------------------------------
let page = {};

function clusterPage(root) {
  root.innerHTML = `
    <h1>Cluster</h1>
    <section class="cards" id="cards"></section>
    <section class="panel">
      <div class="panel-head"><h2>Jobs in and out, every queue</h2><div class="legend" id="legend"></div></div>
      <div class="chart" id="chart"></div>
    </section>
    <section class="panel">
      <div class="panel-head"><h2>Nodes</h2><span class="muted">as this node sees them (CLUSTER NODES); figures asked over the bus</span></div>
      <table class="grid" id="nodes">
        <thead><tr><th>State</th><th>Node</th><th>Address</th><th class="num">Memory used</th><th class="num">RSS</th>
        <th class="num">Jobs</th><th class="num">Queues</th><th class="num">Clients</th><th class="num">Blocked</th>
        <th class="num">Ops/s</th><th class="num">Uptime</th></tr></thead>
        <tbody></tbody>
      </table>
    </section>`;
  return {
    update() {
      const stats = live.stats;
      if (!stats) return;
      const nodes = stats.nodes;
      const up = nodes.filter((n) => n.stats);
      const sum = (key) => up.reduce((total, n) => total + n.stats[key], 0);
      const states = nodes.map((n) => n.state);
      const ok = states.filter((s) => s === "ok").length;
      const queued = stats.queues.reduce((total, q) => total + q.len, 0);
      const last = live.history[live.history.length - 1];
      $("#cards", root).innerHTML = [
        ["Nodes", `${ok} / ${nodes.length} ok`, states.some((s) => s !== "ok") ? "warn" : ""],
        ["Jobs queued", jobs(queued), ""],
        ["Job copies held", jobs(sum("registered_jobs")), ""],
        ["Queues", count(stats.queues.length, "queue"), ""],
        ["Ops/s", perSecond(sum("instantaneous_ops_per_sec")), ""],
        ["Clients", count(sum("connected_clients"), "client"), ""],
        ["Memory used", bytes(sum("used_memory")), ""],
      ].map(([label, value, cls]) => `<div class="card-stat ${cls}"><div class="label">${label}</div><div class="value">${value}</div></div>`).join("");
      $("#legend", root).innerHTML = legend(last?.in, last?.out);
      chartOf($("#chart", root), live.history, "jobs in and out per second, every queue");
      $("#nodes tbody", root).innerHTML = nodes.map((n) => {
        const st = n.stats;
        const me = n.id === stats.myself ? ' <span class="badge me">this node</span>' : "";
        const leaving = n.flags.includes("leaving") ? ' <span class="badge paused">leaving</span>' : "";
        const cells = st
          ? [bytes(st.used_memory), bytes(st.used_memory_rss), jobs(st.registered_jobs), count(st.registered_queues, "queue"),
            count(st.connected_clients, "client"), count(st.blocked_clients, "client"),
            perSecond(st.instantaneous_ops_per_sec), duration(st.uptime_in_seconds)]
          : Array(8).fill('<span class="muted">—</span>');
        return `<tr data-node="${esc(n.id)}" class="${st ? "" : "unreachable"}">
          <td class="state">${stateBadge(n.state)}</td>
          <td><code title="${esc(n.id)}">${esc(shortId(n.id))}</code>${me}${leaving}</td>
          <td>${esc(n.address)}${st ? "" : ' <span class="muted">(no answer)</span>'}</td>
          ${cells.map((c) => `<td class="num">${c}</td>`).join("")}</tr>`;
      }).join("");
    },
  };
}

function queuesPage(root) {
  root.innerHTML = `
    <div class="page-head"><h1>Queues</h1>
      <div class="tools"><input id="filter" type="search" placeholder="Filter queues" aria-label="Filter queues"></div></div>
    <section class="panel">
      <div class="panel-head"><h2>Jobs in and out, every queue</h2><div class="legend" id="legend"></div></div>
      <div class="chart" id="chart"></div>
    </section>
    <section class="panel">
      <table class="grid" id="queues">
        <thead><tr><th>Queue</th><th class="num">Length</th><th class="num">In/s</th><th class="num">Out/s</th>
        <th>Last minutes</th><th class="num">Consumers</th><th>Status</th><th class="actions">Actions</th></tr></thead>
        <tbody></tbody>
      </table>
      <p class="muted" id="queues-note"></p>
    </section>`;
  $("#filter", root).addEventListener("input", () => page.update());
  return {
    update() {
      const stats = live.stats;
      if (!stats) return;
      const last = live.history[live.history.length - 1];
      $("#legend", root).innerHTML = legend(last?.in, last?.out);
      chartOf($("#chart", root), live.history, "jobs in and out per second, every queue");
      const filter = $("#filter", root).value.trim().toLowerCase();
      const matching = stats.queues.filter((q) => !filter || q.name.toLowerCase().includes(filter));
      const shown = matching.slice(0, MAX_ROWS);
      const recent = live.history.slice(-80);
      $("#queues tbody", root).innerHTML = shown.map((q) => {
        const [rIn, rOut] = queueRates(q.name);
        const trend = sparkline(recent.map((h) => (h.queues.get(q.name) || [0, 0])[0]), { cls: "in" })
          + sparkline(recent.map((h) => (h.queues.get(q.name) || [0, 0])[1]), { cls: "out" });
        const paused = q.pause !== "none";
        return `<tr data-queue="${esc(q.name)}">
          <td><a href="#/queue/${enc(q.name)}">${esc(q.name)}</a></td>
          <td class="num length">${jobs(q.len)}</td><td class="num">${perSecond(rIn)}</td><td class="num">${perSecond(rOut)}</td>
          <td class="trend">${trend}</td><td class="num">${count(q.blocked, "consumer")}</td>
          <td class="status">${pauseBadge(q.pause)} ${dlqBadge(q.dead_letter_queue)}</td>
          <td class="actions">
            <button type="button" class="small ghost" data-action="pause" data-queue="${esc(q.name)}" data-pause="${paused ? "none" : "all"}">${paused ? "Resume" : "Pause"}</button>
            ${q.dead_letter_queue ? `<button type="button" class="small ghost" data-action="requeue-dead" data-queue="${esc(q.name)}">Requeue dead letters</button>` : ""}
          </td></tr>`;
      }).join("") || `<tr><td colspan="8" class="muted empty">${stats.queues.length ? "No queue matches." : "No queues yet: add a job."}</td></tr>`;
      const truncated = stats.nodes.some((n) => n.stats && n.stats.queues && n.stats.registered_queues > n.stats.queues.length);
      const notes = [];
      if (matching.length > shown.length) notes.push(`The ${num(shown.length)} biggest of ${num(matching.length)} queues are shown: filter to find the others.`);
      if (truncated) notes.push("Some nodes have more queues than they list (their 2,000 biggest).");
      $("#queues-note", root).textContent = notes.join(" ");
    },
  };
}

function queuePage(root, name) {
  const path = `/api/v1/queues/${enc(name)}`;
  const view = { tab: "peek", peekPage: 0, cursors: [0], nextCursor: 0, state: "", jobs: [], total: null,
    selected: new Set() }; // the jobs picked for a bulk action (kept across redraws)
  root.innerHTML = `
    <div class="page-head">
      <h1><a href="#/queues" class="up">Queues</a> / <span id="qname"></span> <span id="qbadges"></span></h1>
      <div class="tools">
        <label class="inline">Pause <select id="pause-select" data-action="pause-select">
          <option value="none">none</option><option value="in">in</option><option value="out">out</option><option value="all">all</option>
        </select></label>
        <button type="button" id="requeue-dead" data-action="requeue-dead" data-queue="${esc(name)}" hidden>Requeue dead letters</button>
        <button type="button" data-action="add-job" data-queue="${esc(name)}">Add job</button>
        <button type="button" class="ghost danger" data-action="purge-queue" data-queue="${esc(name)}">Purge</button>
        <button type="button" class="ghost danger" data-action="delete-queue" data-queue="${esc(name)}">Delete queue</button>
      </div>
    </div>
    <section class="cards" id="cards"></section>
    <section class="cards" id="retention" hidden></section>
    <div class="columns">
      <section class="panel">
        <div class="panel-head"><h2>Jobs in and out</h2><div class="legend" id="legend"></div></div>
        <div class="chart" id="chart"></div>
      </section>
      <section class="panel">
        <div class="panel-head"><h2>On each node</h2></div>
        <table class="grid" id="per-node"><thead><tr><th>Node</th><th class="num">Length</th><th class="num">In, total</th>
          <th class="num">Out, total</th><th class="num">Consumers</th><th>Pause</th></tr></thead><tbody></tbody></table>
      </section>
    </div>
    <section class="panel">
      <div class="panel-head">
        <div class="tabs" role="tablist">
          <button type="button" role="tab" data-action="tab" data-tab="peek">Next to deliver <span class="muted">(QPEEK)</span></button>
          <button type="button" role="tab" data-action="tab" data-tab="scan">Jobs held <span class="muted">(JSCAN)</span></button>
        </div>
        <div class="tools">
          <select id="state-filter" aria-label="Job state" hidden>
            <option value="">any state</option><option value="queued">queued</option><option value="active">active</option><option value="wait-repl">wait-repl</option>
          </select>
          <button type="button" class="small ghost" data-action="refresh-jobs">Refresh</button>
        </div>
      </div>
      <p class="muted" id="jobs-note"></p>
      <div class="bulk" id="bulk" hidden><span id="bulk-count"></span>
        <button type="button" class="small" data-action="requeue-selected">Requeue the dead letters</button>
        <button type="button" class="small ghost danger" data-action="delete-selected">Delete</button>
        <button type="button" class="small ghost" data-action="clear-selection">Clear</button></div>
      <table class="grid" id="jobs"><thead><tr>
        <th><input type="checkbox" data-action="pick-all" aria-label="Select the jobs of this page"></th>
        <th>Job</th><th>State</th><th>Body</th><th class="num">Nacks</th>
        <th class="num">Extra deliveries</th><th>Failure <span class="muted">(newest error first)</span></th>
        <th class="actions">Actions</th></tr></thead><tbody></tbody></table>
      <div class="pager"><button type="button" class="small ghost" data-action="page" data-step="-1">← Previous</button>
        <span id="page-label" class="muted"></span>
        <button type="button" class="small ghost" data-action="page" data-step="1">Next →</button></div>
    </section>`;
  $("#qname", root).textContent = name;
  $("#state-filter", root).addEventListener("change", (event) => {
    view.state = event.target.value;
    view.cursors = [0];
    loadJobs();
  });

  async function loadJobs() {
    try {
      if (view.tab === "peek") {
        const want = Math.min((view.peekPage + 1) * PAGE_SIZE + 1, MAX_PEEK);
        const data = await api("GET", `${path}/peek?count=${want}`);
        view.jobs = data.jobs.slice(view.peekPage * PAGE_SIZE, (view.peekPage + 1) * PAGE_SIZE);
        view.more = data.jobs.length > (view.peekPage + 1) * PAGE_SIZE;
      } else {
        const cursor = view.cursors[view.cursors.length - 1];
        const state = view.state ? `&state=${enc(view.state)}` : "";
        const data = await api("GET", `/api/v1/jobs?queue=${enc(name)}&count=${PAGE_SIZE}&cursor=${cursor}${state}`);
        view.jobs = data.jobs;
        view.nextCursor = data.cursor;
        view.more = data.cursor !== 0;
      }
      renderJobs();
    } catch (err) {
      if (err.status !== 401) toast(`Could not list the jobs: ${err.message}`, "error");
    }
  }

  function showSelection() {
    const n = view.selected.size;
    $("#bulk", root).hidden = n === 0;
    $("#bulk-count", root).textContent = `${num(n)} job${n === 1 ? "" : "s"} selected`;
  }

  function renderJobs() {
    for (const tab of root.querySelectorAll("[data-tab]")) tab.classList.toggle("active", tab.dataset.tab === view.tab);
    $("#state-filter", root).hidden = view.tab !== "scan";
    const here = live.stats?.nodes.find((n) => n.id === live.stats.myself)?.stats?.queues?.find((q) => q.name === name);
    const node = live.stats ? shortId(live.stats.myself) : "";
    $("#jobs-note", root).textContent = view.tab === "peek"
      ? `The jobs queued on this node (${node}), in the order GETJOB delivers them: ${num(here?.len ?? 0)} jobs in all.`
      : `Every job of the queue this node (${node}) holds a copy of, queued or not, a page at a time.`;
    const first = view.tab === "peek" ? view.peekPage * PAGE_SIZE : null;
    $("#page-label", root).textContent = view.tab === "peek"
      ? (view.jobs.length ? `${first + 1}–${first + view.jobs.length}` : "")
      : `page ${view.cursors.length}`;
    root.querySelector('[data-step="-1"]').disabled = view.tab === "peek" ? view.peekPage === 0 : view.cursors.length === 1;
    root.querySelector('[data-step="1"]').disabled = !view.more;
    $("#jobs tbody", root).innerHTML = view.jobs.map((job) => `<tr data-job="${esc(job.id)}">
        <td><input type="checkbox" data-action="pick" data-job="${esc(job.id)}" ${view.selected.has(job.id) ? "checked" : ""}
          aria-label="Select ${esc(job.id)}"></td>
        <td><a href="#/job/${enc(job.id)}"><code>${esc(job.id)}</code></a></td>
        <td>${esc(job.state || "queued")}</td><td class="body">${bodyPreview(job)}</td>
        <td class="num">${count(job.nacks, "nack")}</td><td class="num">${count(job.additional_deliveries, "delivery", "deliveries")}</td>
        <td class="failure">${failureHtml(job)}</td>
        <td class="actions">
          ${job.dead_from != null
            ? `<button type="button" class="small ghost" data-action="requeue-dead-job" data-job="${esc(job.id)}"
                title="back to ${esc(job.dead_from)}, its counters reset">Requeue to ${esc(job.dead_from)}</button>`
            : `<button type="button" class="small ghost" data-action="enqueue" data-job="${esc(job.id)}">Requeue</button>`}
          <button type="button" class="small ghost danger" data-action="delete-job" data-job="${esc(job.id)}">Delete</button>
        </td></tr>`).join("")
      || `<tr><td colspan="8" class="muted empty">${view.tab === "peek" ? "No job queued here." : "No job on this page."}</td></tr>`;
  }

  // QPOLICY ... RETAIN: what this node keeps of the queue's acked jobs (REPLAY's)
  async function showRetention() {
    let info;
    try { info = await api("GET", path); } catch { return; }
    const box = $("#retention", root);
    const retain = info.policy?.retain_ms;
    box.hidden = !retain;
    if (!retain) return;
    const kept = info.retention || { jobs: 0, bytes: 0, oldest_ms: 0 };
    const cap = info.policy.retain_bytes;
    box.innerHTML = [
      ["Acked jobs retained for", millis(retain)],
      ["Retained here", jobs(kept.jobs)],
      ["Retained bytes here", bytes(kept.bytes) + (cap ? ` of ${bytes(cap)}` : "")],
      ["Oldest retained", kept.oldest_ms ? when(kept.oldest_ms) : "none"],
    ].map(([label, value]) => `<div class="card-stat"><div class="label">${label}</div><div class="value">${value}</div></div>`).join("");
  }

  loadJobs();
  return {
    async update() {
      const stats = live.stats;
      const merged = stats.queues.find((q) => q.name === name);
      const [rIn, rOut] = queueRates(name);
      $("#qbadges", root).innerHTML = `${pauseBadge(merged?.pause)} ${dlqBadge(merged?.dead_letter_queue)}`;
      $("#requeue-dead", root).hidden = !merged?.dead_letter_queue;
      const select = $("#pause-select", root);
      if (document.activeElement !== select) select.value = merged && merged.pause !== "mixed" ? merged.pause : "none";
      $("#cards", root).innerHTML = [
        ["Length, cluster-wide", jobs(merged?.len ?? 0)], ["In/s", perSecond(rIn)], ["Out/s", perSecond(rOut)],
        ["Consumers waiting", count(merged?.blocked ?? 0, "consumer")], ["Nodes with it", count(merged?.nodes ?? 0, "node")],
      ].map(([label, value]) => `<div class="card-stat"><div class="label">${label}</div><div class="value">${value}</div></div>`).join("");
      $("#legend", root).innerHTML = legend(rIn, rOut);
      const points = live.history.map((h) => { const r = h.queues.get(name) || [0, 0]; return { t: h.t, in: r[0], out: r[1] }; });
      chartOf($("#chart", root), points, `jobs in and out per second, ${name}`);
      $("#per-node tbody", root).innerHTML = stats.nodes.map((n) => {
        const q = n.stats?.queues?.find((item) => item.name === name);
        const cells = !n.stats ? ['<span class="muted">no answer</span>', "", "", "", ""]
          : q ? [jobs(q.len), jobs(q.jobs_in), jobs(q.jobs_out), count(q.blocked, "consumer"), esc(q.pause)]
            : [jobs(0), "", "", "", ""];
        return `<tr><td>${stateBadge(n.state)} <code title="${esc(n.id)}">${esc(shortId(n.id))}</code></td>
          ${cells.map((c, i) => `<td class="${i < 4 ? "num" : ""}">${c}</td>`).join("")}</tr>`;
      }).join("");
      await showRetention();
      if (view.tab === "peek") await loadJobs(); // the next jobs change as they go
    },
    loadJobs,
    selection() { return [...view.selected]; },
    pick(id, on) { if (on) view.selected.add(id); else view.selected.delete(id); showSelection(); },
    pickPage(on) { for (const job of view.jobs) this.pick(job.id, on); renderJobs(); },
    clearSelection() { view.selected.clear(); showSelection(); renderJobs(); },
    setTab(tab) { view.tab = tab; view.peekPage = 0; view.cursors = [0]; loadJobs(); },
    step(delta) {
      if (view.tab === "peek") view.peekPage = Math.max(0, view.peekPage + delta);
      else if (delta > 0) view.cursors.push(view.nextCursor);
      else if (view.cursors.length > 1) view.cursors.pop();
      loadJobs();
    },
  };
}

// -- routing -------------------------------------------------------------------------------
function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [, first = "", ...rest] = hash.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  const root = $("#page");
  const section = first === "queue" || first === "job" ? "queues" : first || "cluster";
  for (const link of document.querySelectorAll("[data-nav]")) link.classList.toggle("active", link.dataset.nav === section);
  if (first === "queues") page = queuesPage(root);
  else if (first === "queue" && arg) page = queuePage(root, arg);
  else if (first === "job" && arg) page = jobPage(root, arg, { api, toast });
  else if (first === "finished") page = finishedPage(root, { api, toast });
  else if (first === "batches") page = batchesPage(root, { api, toast });
  else if (first === "topics") page = topicsPage(root, { api, toast });
  else if (first === "cron") page = cronPage(root, { api, toast });
  else if (first === "workers") page = workersPage(root, { api, toast });
  else if (first === "search") page = searchPage(root, arg, { api, toast });
  else page = clusterPage(root);
  document.title = `disq · ${first === "queue" || first === "job" ? arg : section}`;
  if (live.stats) page.update?.();
  poll();
}

window.addEventListener("hashchange", route);
window.addEventListener("resize", () => { if (live.stats) page.update?.(); });

// -- actions --------------------------------------------------------------------------------
function ask(text, yes = "OK") {
  const dialog = $("#confirm-dialog");
  $("#confirm-text").textContent = text;
  $("#confirm-yes").textContent = yes;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true }));
}

async function act(work, done) {
  try {
    const message = await work();
    if (message) toast(message);
    await done?.();
  } catch (err) {
    if (err.status !== 401) toast(err.message, "error");
  }
  poll();
}

const actions = {
  async pause(el) {
    const pause = el.dataset.pause;
    await act(async () => {
      await api("PUT", `/api/v1/queues/${enc(el.dataset.queue)}`, { pause });
      return pause === "none" ? `Queue ${el.dataset.queue} resumed` : `Queue ${el.dataset.queue} paused (${pause})`;
    });
  },
  async "requeue-dead"(el) {
    const queue = el.dataset.queue;
    if (!(await ask(`Put the dead letters of ${queue} back in the queues they came from, on every node?`, "Requeue"))) return;
    await act(async () => {
      const { requeued } = await api("POST", `/api/v1/queues/${enc(queue)}/requeue-dead`, {});
      return `${num(requeued)} dead letter${requeued === 1 ? "" : "s"} requeued`;
    }, () => page.loadJobs?.());
  },
  async "purge-queue"(el) {
    const queue = el.dataset.queue;
    if (!(await ask(`Delete every job of ${queue} on every node (QPURGE)? The queue keeps its policy. This cannot be undone.`, "Purge"))) return;
    await act(async () => {
      const { deleted } = await api("POST", `/api/v1/queues/${enc(queue)}/purge`);
      return `Queue ${queue} purged: ${num(deleted)} job${deleted === 1 ? "" : "s"} deleted on this node`;
    }, () => page.loadJobs?.());
  },
  async "delete-queue"(el) {
    const queue = el.dataset.queue;
    if (!(await ask(`Delete queue ${queue} on every node (QDEL): every job of it, its policy, its topics' subscriptions? This cannot be undone.`, "Delete"))) return;
    await act(async () => {
      const { deleted } = await api("DELETE", `/api/v1/queues/${enc(queue)}`);
      location.hash = "#/queues";
      return `Queue ${queue} deleted: ${num(deleted)} job${deleted === 1 ? "" : "s"} on this node`;
    });
  },
  async "requeue-dead-job"(el) {
    await act(async () => {
      const { requeued } = await api("POST", "/api/v1/dead-letters/requeue", { ids: [el.dataset.job] });
      return requeued ? "Dead letter requeued to the queue it came from" : "Not a dead letter held by this node";
    }, () => page.loadJobs?.());
  },
  async "requeue-selected"() {
    const ids = page.selection?.() ?? [];
    if (!(await ask(`Put the dead letters among the ${num(ids.length)} selected jobs back in the queues they came from?`, "Requeue"))) return;
    await act(async () => {
      const { requeued } = await api("POST", "/api/v1/dead-letters/requeue", { ids });
      page.clearSelection();
      return `${num(requeued)} dead letter${requeued === 1 ? "" : "s"} requeued`;
    }, () => page.loadJobs?.());
  },
  async "delete-selected"() {
    const ids = page.selection?.() ?? [];
    if (!(await ask(`Delete the ${num(ids.length)} selected jobs on every node that holds them (FASTACK)?`, "Delete"))) return;
    await act(async () => {
      for (const id of ids) await api("POST", `/api/v1/jobs/${enc(id)}/fastack`, {});
      page.clearSelection();
      return `${num(ids.length)} job${ids.length === 1 ? "" : "s"} deleted`;
    }, () => page.loadJobs?.());
  },
  "clear-selection"() { page.clearSelection?.(); },
  async enqueue(el) {
    await act(async () => {
      const { queued } = await api("POST", `/api/v1/jobs/${enc(el.dataset.job)}/enqueue`, {});
      return queued ? "Job queued again" : "The job was queued already";
    }, () => page.loadJobs?.());
  },
  async "delete-job"(el) {
    const id = el.dataset.job;
    if (!(await ask(`Delete job ${id} on every node that holds it (FASTACK)?`, "Delete"))) return;
    await act(async () => {
      await api("POST", `/api/v1/jobs/${enc(id)}/fastack`, {});
      return "Job deleted";
    }, () => page.loadJobs?.());
  },
  async "delete-cron"(el) {
    const { name } = el.dataset;
    if (!(await ask(`Delete the schedule ${name} on every node? Its ticks stop; the jobs it added stay.`, "Delete"))) return;
    await act(async () => {
      await api("DELETE", `/api/v1/cron/${enc(name)}`);
      return `Schedule ${name} deleted`;
    }, () => page.loadJobs?.());
  },
  async unsubscribe(el) {
    const { topic, queue } = el.dataset;
    if (!(await ask(`Unsubscribe ${queue} from ${topic}? It gets no job of the next publishes.`, "Unsubscribe"))) return;
    await act(async () => {
      await api("DELETE", `/api/v1/topics/${enc(topic)}/subscriptions/${enc(queue)}`);
      return `${queue} unsubscribed from ${topic}`;
    }, () => page.loadJobs?.());
  },
  async "close-batch"(el) {
    const id = el.dataset.batch;
    if (!(await ask(`Close batch ${id}? No job can be added to it any more; its callbacks come once its members ended.`, "Close"))) return;
    await act(async () => {
      const { members } = await api("POST", `/api/v1/batches/${enc(id)}/close`, {});
      return `Batch ${id} closed: ${num(members)} member job${members === 1 ? "" : "s"}`;
    }, () => page.loadJobs?.());
  },
  async "delete-here"(el) {
    const id = el.dataset.job;
    if (!(await ask(`Delete this node's copy of job ${id} (DELJOB)? Other nodes keep theirs.`, "Delete"))) return;
    await act(async () => {
      await api("DELETE", `/api/v1/jobs/${enc(id)}`);
      return "This node's copy deleted";
    }, () => page.loadJobs?.());
  },
  "add-job"(el) {
    const form = $("#add-form");
    form.reset();
    form.elements.queue.value = el.dataset.queue || "";
    $("#add-error").hidden = true;
    $("#add-dialog").showModal();
    (el.dataset.queue ? form.elements.body : form.elements.queue).focus();
  },
  "close-dialog"(el) { el.closest("dialog").close(); },
  tab(el) { page.setTab?.(el.dataset.tab); },
  page(el) { page.step?.(Number(el.dataset.step)); },
  "refresh-jobs"() { page.loadJobs?.(); },
  "sign-out"() {
    password = "";
    user = "default";
    sessionStorage.removeItem(PASSWORD_KEY);
    sessionStorage.removeItem(USER_KEY);
    showLogin();
  },
};

document.addEventListener("click", (event) => {
  const el = event.target.closest("button[data-action]");
  if (el && actions[el.dataset.action]) {
    event.preventDefault();
    actions[el.dataset.action](el);
  }
});

document.addEventListener("change", (event) => {
  const el = event.target;
  if (el.dataset?.action === "pick") page.pick?.(el.dataset.job, el.checked);
  else if (el.dataset?.action === "pick-all") page.pickPage?.(el.checked);
  else if (el.dataset?.action === "pause-select") {
    const name = $("#qname")?.textContent;
    actions.pause({ dataset: { queue: name, pause: el.value } });
  }
});

$("#search-box").addEventListener("submit", (event) => {
  event.preventDefault();
  const query = event.target.elements.q.value.trim();
  if (!query) return;
  location.hash = JOB_ID.test(query) ? `#/job/${enc(query)}` : `#/search/${enc(query)}`;
});

$("#add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target.elements;
  const queue = form.queue.value.trim();
  const job = { body: form.body.value };
  for (const key of ["replicate", "priority", "max_deliveries"]) {
    if (form[key].value !== "") job[key] = Number(form[key].value);
  }
  // typed in seconds, sent as the API takes every duration: ms
  for (const key of ["retry", "ttl", "delay"]) {
    if (form[key].value !== "") job[`${key}_ms`] = Math.round(Number(form[key].value) * 1000);
  }
  if (form.group.value) job.group = form.group.value;
  if (form.async.checked) job.async = true;
  try {
    const { id } = await api("POST", `/api/v1/queues/${enc(queue)}/jobs`, job);
    $("#add-dialog").close();
    toast(`Job ${id} added to ${queue}`);
    page.loadJobs?.();
    poll();
  } catch (err) {
    if (err.status === 401) { $("#add-dialog").close(); return; }
    $("#add-error").textContent = err.message;
    $("#add-error").hidden = false;
  }
});

route();
